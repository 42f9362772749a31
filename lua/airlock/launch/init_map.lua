-- airlock.launch.init_map -- the one builder of the worker's init map (the
-- init frame a guest's worker is started with, docs/PROTOCOL.md), and of the
-- limits map it holds, which a nested run's `nest` record repeats.
local core = require "airlock.core"
local policy = require "airlock.policy"

local M = {}

M.OUTPUT_DEFAULT = policy.default("limits.output")

--- limits(limits, over) -> the init's limits: each budget of the policy's
--- limits, 0 where it sets none. over: { deadline_ms = n (the nest record's,
--- which also says deadline_ms), cpu_enforced = bool (the init's; absent in
--- a prepared worker's init and a nest record) }.
function M.limits(limits, over)
  over = over or {}
  return {
    instructions = limits.instructions or 0,
    turn_instructions = limits.turn_instructions or 0,
    cpu = limits.cpu or 0,
    turn_cpu = limits.turn_cpu or 0,
    cpu_enforced = over.cpu_enforced,
    memory = limits.memory or 0,
    output = limits.output or M.OUTPUT_DEFAULT,
    deadline_ms = over.deadline_ms,
  }
end

--- notify(pol) -> the list of the policy's notifications, or nil for none.
function M.notify(pol)
  local notify
  for _, name in ipairs(pol.notify or {}) do notify = notify or {}; notify[#notify + 1] = name end
  return notify
end

--- build(f) -> the init map. f: { limits = the policy's limits, effects =
--- sorted effect names, notify = list or nil, confine = plan.init, and for a
--- run: run (its id), guest = {name, source}, input, seed, resume = {inputs}
--- or nil, cpu_enforced = bool; or prepare = true for a pool's worker, which
--- gets everything but its run }.
function M.build(f)
  return {
    t = "init", v = core.protocol_version, prepare = f.prepare or nil, run = f.run,
    guest = f.guest, input = f.input, seed = f.seed, resume = f.resume,
    limits = M.limits(f.limits, { cpu_enforced = f.cpu_enforced }),
    effects = f.effects,
    notify = f.notify,
    confine = f.confine,
  }
end

return M
