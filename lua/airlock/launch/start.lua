-- airlock.launch.start -- the one start function: every run (b:start,
-- airlock.exec, airlock.spawn, ctx:nest, replay, resume, the pool's) is a
-- run spec (airlock.launch.spec) taken through the same steps, in order:
--   policy    the run's policy, admitted, its secrets resolved (resolve.policy)
--   plan      what runs and its confinement plan (resolve.what)
--   handlers  the built-ins and the policy's effects (run_handlers.of)
--   record    its ledger's first record, its handlers recorded (recording.record)
--   spawn     a pool's worker given its run, or a worker or program spawned
-- and registered (airlock.launch.registry) for b:step and its end
-- (airlock.launch.ending).
--
-- The launch package's layers, lowest first. A module requires only modules
-- of a lower layer, at its top level (no require inside a function body but
-- a named optional one); spec/lua/module_graph_spec.lua checks it:
--   0 fields                           data: the worker's frame fields
--   1 registry, init_map, spec         data: records, the init map, run specs
--   2 run_handlers, resolve; airlock.nest (its runner and per-run state)
--   3 recording, pool                  the record step; prepared workers
--   4 start                            the one start function
--   5 ending, broker, journal, process; airlock.exec    entries and run ends
--   6 step                             b:step (the pool's refill, ending)
--   7 airlock (init.lua), which only exports
-- Below the package: policy, confine, session, ledger, secrets, program and
-- the rest, none of which requires into it. ctx:nest starts a nested run
-- through the function its parent's record names (record.start, set here),
-- so airlock.nest never requires this module.
local policy = require "airlock.policy"
local confine = require "airlock.confine"
local secrets = require "airlock.secrets"
local session = require "airlock.session"
local nest = require "airlock.nest"
local registry = require "airlock.launch.registry"
local init_map = require "airlock.launch.init_map"
local spec_mod = require "airlock.launch.spec"
local run_handlers = require "airlock.launch.run_handlers"
local resolve = require "airlock.launch.resolve"
local recording = require "airlock.launch.recording"
local pool = require "airlock.launch.pool"

local M = {}

-- spec, the run's policy, what runs -> the run's record (airlock.launch.registry).
-- Its policy digest is taken unless the spec says no one reads it (a
-- recorded run's ledger always does).
local function new_record(spec, rp, what)
  local pol = rp.policy
  local digest = not rp.none and (spec.digest ~= false or spec.ledger ~= nil or spec.nested ~= nil
                                  or spec.serve ~= nil)
  local st = { log = {}, log_bytes = 0, log_max = rp.limits.output or init_map.OUTPUT_DEFAULT, policy = pol.name,
               policy_base = not rp.none and policy.base_of(pol) or nil, on_log = spec.on_log, plan = what.plan,
               digest = digest and policy.digest(pol) or nil, redact = rp.redact }
  if rp.redact and spec.on_log then
    local on_log, redact = spec.on_log, rp.redact
    st.on_log = function(text) return on_log(redact(text)) end
  end
  return st
end

-- The ctx every call of the run gets (handlers see it).
local function call_ctx(st, spec, rp, notify)
  local ctx = { policy = rp.policy.name, secrets = secrets.readonly(rp.secrets), nest = nest.method,
                on_denied = st.recorder and not spec.serve and function(effect, id) st.recorder:denied(id, effect) end
                  or nil }
  -- A recorded run's calls are recorded with the step's others, before any
  -- is handled (b:step: ctx.admit for each, then ctx.admit_flush once).
  if st.recorder and not spec.serve then
    ctx.admit = function(effect, args, id) st.recorder:admit(effect, args, id) end
    ctx.admit_flush = session.admit_flush
  end
  -- Notifications: the binding takes a note only for these, and tells of a
  -- handler that failed on one (no answer goes back to say so).
  if notify then
    ctx.notify = {}
    for _, name in ipairs(notify) do ctx.notify[name] = true end
    ctx.on_note_error = run_handlers.note_error_sink(st)
  end
  return ctx
end

-- record, handlers, spec, ... -> b:_start's options: a worker's, with its
-- init map, or a program's.
local function spawn_options(st, handlers, spec, rp, what, serial, seed)
  local limits = rp.limits
  local notify = init_map.notify(rp.policy)
  local ctx = call_ctx(st, spec, rp, notify)
  -- A replay answered only from its journal does not let the CPU budgets
  -- strike: the CPU a guest gets is the machine's, not the guest's, so a
  -- budget could strike at another point than it did. They still tick as
  -- recorded (cpu_enforced = false: a boolean either way, so the init frame,
  -- and what the worker allocates, are the recording's). The journal's end
  -- stands in for them (session.lua, server:exhausted): a run a budget ended
  -- is ended with its recorded cause once every recorded effect is served.
  local replaying = spec.serve ~= nil and not spec.serve.live
  local start
  if what.program then
    -- No init, no ready: the program gets fd 3 for calls, and nothing else of a worker's.
    start = { argv = what.argv, program = true, channel = what.program.channel ~= false, handlers = handlers, ctx = ctx,
              deadline_ms = what.program.deadline_ms, capture_max = what.program.capture }
  else
    start = {
      argv = what.argv,
      init = init_map.build {
        run = serial, guest = { name = what.name, source = what.source }, input = spec.input, seed = seed,
        resume = spec.resume_inputs and { inputs = spec.resume_inputs } or nil,
        limits = limits, cpu_enforced = not replaying,
        effects = run_handlers.names(handlers), notify = notify, confine = what.plan.init,
      },
      deadline_ms = spec.nested and spec.nested.deadline_ms or limits.deadline_ms,
      max_frame = limits.max_frame,
      capture_max = limits.capture,
      handlers = handlers,
      ctx = ctx,
      -- A run that is recorded, or replayed from its record, gets fixed
      -- addresses: what Lua hashes (pairs order) and prints (tostring of a
      -- table) is then the same in the replay.
      -- (AIRLOCK_TEST_ASLR=1 keeps randomisation, for the specs' control runs.)
      no_aslr = (st.recorder ~= nil or spec.serve ~= nil) and os.getenv("AIRLOCK_TEST_ASLR") ~= "1" or nil,
    }
  end
  for k, v in pairs(what.plan.start) do start[k] = v end
  return start
end

-- The spawn step: broker, b:_start's options, what runs, a parked worker or
-- nil -> the run, or nil, message, code and (a spawn that failed) b:_start's
-- step word.
local function spawn(b, start, what, parked)
  if parked then   -- a pool's worker: its run is all it needs (it has init)
    local g = start.init.guest
    local ok, err, code = pool.send(parked, g.name, g.source, start.init.input,
      { deadline_ms = start.deadline_ms, max_frame = start.max_frame, capture_max = start.capture_max },
      start.handlers, start.ctx)
    if not ok then return nil, err, code end
    return parked
  end
  local run, err, code, step = b:_start(start)
  local why = not run and not what.program and start.namespaces and confine.namespace_failure(err, step)
  if why then
    -- No namespaces here: fall back unless the policy requires them.
    local plan = what.plan
    plan.layers.namespaces = "skipped: " .. why
    if plan.required.namespaces then
      return nil, "confinement: namespaces is required but skipped: " .. why, "confinement"
    end
    start.namespaces = nil
    start.init.confine.seccomp_program = nil   -- made for pid 1 of a pid namespace
    run, err, code, step = b:_start(start)
  end
  return run, err, code, step
end

--- start(b, spec) -> run, or nil, message, code[, step]: starts the run spec
--- describes (airlock.launch.spec) on broker b.
function M.start(b, spec)
  -- A pooled worker serves an unrecorded run with no seed of its own (see the pool).
  local poolable = spec_mod.poolable(spec)
  -- A pool is found first by the policy object itself (a frozen policy's own pool).
  local bs = poolable and registry.brokers[b]
  local found = bs and bs.pool_by and bs.pool_by[spec.policy] or poolable and pool.find(b, spec) or nil
  if found then
    local run, st, code = pool.start(b, found, spec)   -- st: the run's record, or the message
    if run then
      st.start = M.start
      return run
    end
    if st then return nil, st, code end
  end
  -- policy
  local rp, err, code = resolve.policy(b, spec)
  if not rp then return nil, err, code end
  -- plan
  local what
  what, err, code = resolve.what(spec, rp.policy)
  if not what then return nil, err, code end
  -- handlers
  local st = new_record(spec, rp, what)
  local handlers, collect_log = run_handlers.of(st, rp)
  if not handlers then return nil, collect_log, "policy" end
  local grant = spec.nested and spec.nested.grant
  if grant then   -- a replayed nested run has the effects it was recorded with, at most
    for k in pairs(handlers) do if not grant[k] then handlers[k] = nil end end
  end
  -- A warm worker (b:warm) has its id and its seed already; a new one gets
  -- the next id and a seed of its own. A pool found by key (a bare table
  -- policy, or one with secrets) is taken here.
  if poolable then found = found or pool.find(b, spec, what, rp) end
  local parked, pooled_seed = pool.take(b, found)
  st.pooled = parked ~= nil or nil
  local serial = parked and parked:id() or b:_next_serial()
  local seed = pooled_seed or spec.seed or math.random(0, 2 ^ 31)
  -- record
  local ok
  ok, err, code = recording.record(st, handlers, spec, rp, what, serial, seed)
  if not ok then
    if parked then pool.give_back(b, parked, found) end   -- its end is the pool's
    return nil, err, code
  end
  handlers = recording.served(st, handlers, collect_log, spec.serve)
  -- Outermost: each call's handler in a coroutine of its own, so ctx:nest can wait.
  for k, h in pairs(handlers) do handlers[k] = nest.runner(h, k) end
  st.pol, st.broker, st.serial, st.ledger_run = rp.policy, b, serial, st.recorder and st.recorder.run or nil
  st.nest = nest.state(spec, rp.limits, spec.next_run or (st.ledger_run or serial) + 1)
  st.start = M.start
  -- spawn
  local run, step
  run, err, code, step = spawn(b, spawn_options(st, handlers, spec, rp, what, serial, seed), what, parked)
  if code == "input" and parked then   -- the caller's error, as on a fresh worker (see pool.start)
    pool.give_back(b, parked, found)
    error(err, 0)
  end
  if not run then
    if st.recorder and spec.nested then
      -- The nest record is in; its end says the run never started (replay skips it).
      st.recorder:append("done", { cause = code == "confinement" and code or "exit", ok = false,
                                   message = tostring(err), started = false })
    end
    if st.owned then st.ledger:close() end
    return nil, err, code, step
  end
  registry.register(b, run, st)
  if spec.serve then spec.serve:started(run) end
  return run
end

return M
