-- airlock.launch.resolve -- the policy and plan steps of a start: the run's
-- policy (resolved, admitted, its secrets resolved) and what runs (a guest's
-- source and worker, or a program, with its confinement plan).
local core = require "airlock.core"
local policy = require "airlock.policy"
local confine = require "airlock.confine"
local secrets = require "airlock.secrets"
local util = require "airlock.util"
local registry = require "airlock.launch.registry"

local M = {}

-- A mistake in what b:start's caller gave is raised at that caller: 1
-- load_guest or policy_of, 2 a step, 3 the start function, 4 b:start, 5 its
-- caller.
M.CALLER = 5

--- guest(guest, name, level) -> source, name, or nil, message. A guest is Lua
--- source, or the path of a .lua file. level: where a wrong type is reported
--- (as error's; default 3, the caller of its caller).
function M.guest(guest, name, level)
  if type(guest) ~= "string" then
    error("airlock: 'guest' must be Lua source or the path of a .lua file", level or 3)
  end
  if guest:sub(-4) == ".lua" and not guest:find("\n", 1, true) then
    local src, err = util.read_file(guest)
    if not src then return nil, "guest: cannot read " .. err end
    return src, name or guest:match("([^/]+)$")
  end
  return guest, name or "guest"
end

--- policy_of(p, level) -> the run's policy (policy.resolve): a bare table is
--- layered over untrusted; none at all is AIRLOCK_POLICY, else untrusted.
--- level: where a wrong type is reported (as error's; default 3).
function M.policy_of(p, level)
  if p ~= nil and type(p) ~= "string" and type(p) ~= "table" then
    error("airlock: 'policy' must be a policy table, a stock policy name or a file path", level or 3)
  end
  return policy.resolve(p == nil and (os.getenv("AIRLOCK_POLICY") or "untrusted") or p, "untrusted")
end

-- A process's run (airlock.spawn) is under no policy: this stands in for one.
local NO_POLICY = { policy = { name = nil }, limits = {}, secrets = {}, none = true }

--- policy(b, spec) -> the policy step: { policy, ref (the name it was given
--- by), limits, secrets (values, for handlers only), redact }, or nil,
--- message, code.
function M.policy(b, spec)
  if spec.program and spec.program.policy == false then return NO_POLICY end
  -- Without a policy of its own, a run takes the broker's snapshot (b:reload).
  local snapshot = spec.policy == nil and registry.brokers[b] and registry.brokers[b].snapshot or nil
  local pol, perr
  if snapshot then pol = snapshot.policy else pol, perr = M.policy_of(spec.policy, M.CALLER) end
  if not pol then return nil, perr end
  -- Less confinement than untrusted warns, or is refused (policy.admit);
  -- a program's run was admitted by airlock.exec against the stock tool.
  if not spec.program then
    local admitted, aerr = policy.admit(pol, "untrusted", "guests", b)
    if not admitted then return nil, aerr, "confinement" end
  end
  -- Secrets: resolved here, in the parent, for handlers only (ctx.secrets).
  local values, serr = secrets.resolve(pol.secrets)
  if not values then return nil, serr end
  return { policy = pol, limits = pol.limits or {}, secrets = values, redact = secrets.redactor(values),
           ref = type(spec.policy) == "string" and spec.policy or (snapshot and snapshot.ref) or nil }
end

--- what(spec, policy) -> the plan step: what runs and its confinement plan:
--- { name, source (a guest's), argv, plan, program (the spec's, or nil) },
--- or nil, message, code.
function M.what(spec, pol)
  -- A program (airlock.exec, airlock.spawn) instead of a guest: its argv and
  -- confinement plan come made by its entry.
  local prog = spec.program
  if prog then return { name = prog.name, argv = prog.argv, plan = prog.plan, program = prog } end
  local source, name = M.guest(spec.guest, spec.name, M.CALLER)
  if not source then return nil, name end
  local argv = pol.worker and { table.unpack(pol.worker) }
  if not argv and os.getenv("AIRLOCK_WORKER") then argv = { os.getenv("AIRLOCK_WORKER") } end
  if not argv then
    local w, err, code = core.worker_path()
    if not w then return nil, err, code end
    argv = { w }
  end
  local plan, cerr = confine.plan { role = "guest", confine = pol.confine, limits = pol.limits }
  if not plan then return nil, cerr, "confinement" end
  return { name = name, source = source, argv = argv, plan = plan }
end

return M
