-- airlock.launch.broker -- the broker's entries: b:start (a run spec from its
-- options, then the one start function), b:reload (the policy snapshot runs
-- without their own take), and airlock.run (one run on a broker of its own).
local core = require "airlock.core"
local policy = require "airlock.policy"
local secrets = require "airlock.secrets"
local registry = require "airlock.launch.registry"
local spec = require "airlock.launch.spec"
local resolve = require "airlock.launch.resolve"
local launch = require "airlock.launch.start"

local M = {}

local broker_methods = core.broker_methods

--- b:start{guest = source_or_path, policy = table|name, input = any, name = str,
--- seed = int, on_log = function(text), ledger = dir|ledger, durability = str} -> run, or nil,
--- message, errno when the run cannot be started (errno is the word "confinement" when a
--- required layer cannot be applied here).
function broker_methods:start(opts)
  local run, err, code = launch.start(self, spec.of_start(opts))   -- not a tail call: resolve.CALLER counts this frame
  return run, err, code
end

--- b:reload(policy) -> digest, or nil, message: runs started afterwards without
--- a policy of their own use this snapshot (a table, stock name or file path,
--- as b:start takes); runs already started keep theirs. A policy that fails
--- validation (or whose secrets cannot be resolved, or that AIRLOCK_REQUIRE_CONFINEMENT
--- refuses) leaves the current one in place.
function broker_methods:reload(p)
  if p == nil then error("reload: expects a policy (a table, a stock name or a file path)", 2) end
  local ok, pol, err = pcall(resolve.policy_of, p)
  if not ok then return nil, tostring(pol) end
  if not pol then return nil, err end
  if not policy.always_admitted(pol, "untrusted") and policy.confinement_required() then
    return nil, string.format("confinement: policy '%s' runs guests without confinement, " ..
      "and AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it", policy.label(pol))
  end
  local values, serr = secrets.resolve(pol.secrets)
  if not values then return nil, serr end
  registry.state(self).snapshot = { policy = pol, ref = type(p) == "string" and p or nil }
  return policy.digest(pol)
end

--- airlock.run{guest = ..., policy = ..., input = ...} -> result table, or nil,
--- message, errno when the run could not be started.
function M.run(opts)
  local b <close> = core.broker()
  local run, err, code = b:start(opts)
  if code == "confinement" then
    -- Refused before anything was spawned: a result like any other run's.
    local pol = resolve.policy_of(opts.policy)
    return { ok = false, cause = "confinement", message = err, log = "", usage = {},
             policy = pol and pol.name, policy_base = pol and policy.base_of(pol),
             digest = pol and policy.digest(pol) }
  end
  if not run then return nil, err, code end
  return run:wait(b)
end

return M
