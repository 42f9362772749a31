-- airlock.confine -- turns a policy's `confine` section into what the spawner,
-- the broker and the worker each apply, and reports every layer's outcome.
--
-- Layers and who applies them:
--   namespaces, rlimits, capabilities, no_new_privs   the spawner, before exec
--   landlock, seccomp                                 the worker, before the guest
--   cgroup                                            nobody yet: always skipped
-- The parent verifies from outside: namespaces right after spawn
-- (/proc/PID/ns), and on ready the Cap* lines, NoNewPrivs and Seccomp of
-- /proc/PID/status. A layer listed in `require` that is not applied ends the
-- run with cause "confinement" before any guest code runs.
local policy = require "airlock.policy"
local core = require "airlock.core"
local set_of = require("airlock.util").set_of

local M = {}

M.LAYERS = policy.LAYERS

-- For tests only: AIRLOCK_TEST_PRETEND_ABSENT="landlock,namespaces" makes those
-- layers behave as if this kernel lacked them, to prove `require` fails closed.
local function pretended()
  local set = {}
  for w in (os.getenv("AIRLOCK_TEST_PRETEND_ABSENT") or ""):gmatch("[%w_]+") do set[w] = true end
  return set
end
local PRETEND = "pretending this kernel lacks it (AIRLOCK_TEST_PRETEND_ABSENT, for tests)"

-- A plain copy of a list from a frozen policy (its proxy packs as empty).
local function list_copy(list)
  local out = {}
  for i, v in ipairs(list or {}) do out[i] = v end
  return out
end

local function describe_rlimits(rl)
  local parts = {}
  for _, k in ipairs(core.rlimits) do
    if rl[k] then parts[#parts + 1] = string.format("%s=%d%s", k, rl[k], k == "cpu" and "s" or "") end
  end
  return table.concat(parts, " ")
end

--- plan(confine) -> plan, or nil, message when a required layer cannot
--- be applied. plan = { start = {options for broker:_start}, init = {init.confine},
--- layers = {name = "applied: ..." | "skipped: ..."}, required = {name = true} }.
function M.plan(c)
  c = c or {}
  local pretend = pretended()
  local required = set_of(c.require)
  local plan = { start = {}, init = { require = list_copy(c.require) }, layers = {}, required = required }
  local first_missing

  local function skip(name, why)
    plan.layers[name] = "skipped: " .. why
    if required[name] and not first_missing then
      first_missing = string.format("confinement: %s is required but skipped: %s", name, why)
    end
  end

  -- Spawner layers.
  if not c.namespaces or #c.namespaces == 0 then
    skip("namespaces", "the policy asks for none")
  elseif pretend.namespaces then
    skip("namespaces", PRETEND)
  else
    plan.start.namespaces = list_copy(c.namespaces)
    local net = ""
    if c.shared_net and set_of(plan.start.namespaces).net then
      local ok, why = M.shared_netns()
      if ok then
        plan.start.shared_net = true
        net = "; net is the one empty namespace all runs share"
      else
        net = "; net is the run's own (" .. why .. ")"
      end
    end
    plan.layers.namespaces = "applied: " .. table.concat(c.namespaces, " ") .. net ..
      " (checked in /proc/PID/ns after spawn)"
  end

  -- A plain copy (the policy is a frozen proxy, which next() cannot walk).
  local rl
  for k, v in pairs(c.rlimits or {}) do rl = rl or {}; rl[k] = v end
  if not rl then
    skip("rlimits", "the policy sets none")
  elseif pretend.rlimits then
    skip("rlimits", PRETEND)
  else
    plan.start.rlimits = rl
    plan.layers.rlimits = "applied: " .. describe_rlimits(rl)
  end

  if c.capabilities ~= "drop" then
    skip("capabilities", "the policy keeps them")
  elseif pretend.capabilities then
    skip("capabilities", PRETEND)
  else
    plan.start.drop_caps = true
    plan.layers.capabilities = "applied: bounding, ambient and inheritable sets emptied" ..
      (plan.start.namespaces and " and uid 65534 in the user namespace" or "") ..
      " (Cap* in /proc/PID/status checked zero on ready)"
  end

  if not c.no_new_privs then
    skip("no_new_privs", "the policy does not ask for it")
  elseif pretend.no_new_privs then
    skip("no_new_privs", PRETEND)
  else
    plan.start.no_new_privs = true
    plan.layers.no_new_privs = "applied (set before exec)"
  end

  -- Worker layers: reported by the worker in its ready frame.
  plan.init.landlock = c.landlock == true
  plan.init.seccomp = c.seccomp == true
  local absent = {}
  for _, name in ipairs { "landlock", "seccomp" } do
    if pretend[name] then absent[#absent + 1] = name end
  end
  plan.init.pretend_absent = absent
  -- The parent checks the filter itself rather than trusting the report.
  plan.start.verify_seccomp = c.seccomp == true and not pretend.seccomp
  -- A worker born in a new pid namespace is pid 1, so its filter (which names
  -- its own pid) is the same every run: compiled once here, loaded there.
  if plan.init.seccomp and not pretend.seccomp and set_of(plan.start.namespaces).pid then
    plan.init.seccomp_program = M.worker_program()
  end

  skip("cgroup", "no delegated cgroup is configured (memory, CPU and pids are bounded by rlimits and the worker's own caps)")

  if first_missing then return nil, first_missing, plan end
  return plan
end

local netns_ok, netns_why
--- Whether the shared empty net namespace can be used here (root only): true,
--- or false and why. Asked once per process.
function M.shared_netns()
  if netns_ok == nil then
    local ok, err = core.shared_netns()
    netns_ok, netns_why = ok == true, err
  end
  return netns_ok, netns_why
end

local program_cache
--- The worker's seccomp filter for pid 1, as BPF bytes (built on first use),
--- or nil when it cannot be built here (the worker then builds its own).
function M.worker_program()
  if program_cache == nil then program_cache = core.seccomp_worker_program(1) or false end
  return program_cache or nil
end

--- The message for a spawn that failed creating namespaces, or nil if the
--- failure was something else.
function M.namespace_failure(message)
  if not message:match("clone") then return nil end
  return "cannot create namespaces here (" .. message .. "). Unprivileged user namespaces are " ..
    "probably disabled: on Debian, sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 23.10 " ..
    "and later, sysctl kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile " ..
    "allowing 'userns' for airlock; in a container, allow clone/unshare in its seccomp profile. " ..
    "Runs continue without namespaces unless the policy requires them; `airlock probe` tells more"
end

--- Merges the worker's report (ready frame) into the plan's layers, in order.
function M.report(plan, confined)
  local out = {}
  for k, v in pairs(plan.layers) do out[k] = v end
  if type(confined) == "table" then
    for k, v in pairs(confined) do out[k] = v end
  end
  return out
end

return M
