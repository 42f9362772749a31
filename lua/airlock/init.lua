-- airlock -- the public Lua module: runs and brokers on top of airlock.core.
-- The C core spawns, relays frames and dispatches calls; this file turns a
-- policy and a guest into what the core needs, and results into tables.
local core = require "airlock.core"
local policy = require "airlock.policy"
local confine = require "airlock.confine"
local session = require "airlock.session"
local secrets = require "airlock.secrets"
local program = require "airlock.program"
local nest = require "airlock.nest"

local M = {
  policy = policy,
  causes = core.causes,
  defer = core.defer,
  protocol_version = core.protocol_version,
  _VERSION = "airlock 0.1",
}

local broker_methods, run_methods = core.broker_methods, core.run_methods

-- Per-run state: one record per run, weak keys, so a record goes with its run:
--   { policy = name, digest, plan (confine.plan's), log = {pieces}, log_bytes, log_max,
--     on_log, redact (its secrets' redactor, or nil), recorder, ledger, owned
--     (closed when the run ends), server (when served from a journal) }
local runs = setmetatable({}, { __mode = "k" })
-- Per broker, weak keys: { snapshot = {policy, ref}
-- (b:reload's), live = { [run id] = the record of a run b:step has not seen end },
-- ledgered = the same for the live runs that have a ledger, pool = { [key] = a
-- pool of prepared workers (b:warm) }, pool_by = { [policy or "stock:name"] =
-- the same pools, found without resolving }, parked = { [run id] = the pool of
-- a parked run } }.
local brokers = setmetatable({}, { __mode = "k" })

local function broker_state(b)
  local bs = brokers[b]
  if not bs then
    bs = { live = {}, ledgered = {}, parked = {} }
    brokers[b] = bs
  end
  return bs
end

-- b:start's options (docs/API.md, airlock.run); any other is an error.
local START_KEYS = { guest = true, name = true, policy = true, input = true, seed = true, on_log = true,
                     ledger = true, durability = true }

-- opts.ledger: an open ledger (airlock.ledger.open), or a directory to create
-- a session in (closed when the run ends), bounded by max_bytes (the policy's
-- ledger.max_bytes; an open ledger keeps the bound it was opened with). A
-- directory that holds a session already is refused, as the commands refuse
-- it, unless the run resumes that session (resuming).
-- Returns ledger, owned, or nil, nil, message.
local function open_ledger(l, durability, max_bytes, resuming)
  if l == nil then return nil end
  if type(l) == "string" then
    local lmod = require "airlock.ledger"
    if not resuming then
      local fresh, taken = lmod.fresh(l, true)
      if not fresh then return nil, nil, taken end
    end
    local ledger, err = lmod.open(l, { create = true, durability = durability or "batch",
                                       max_bytes = max_bytes })
    if not ledger then return nil, nil, err end
    return ledger, true
  end
  return l, false
end

-- A guest is Lua source, or the path of a .lua file. level: where a wrong type
-- is reported (as error's; default 3, the caller of its caller).
local function load_guest(guest, name, level)
  if type(guest) ~= "string" then
    error("airlock: 'guest' must be Lua source or the path of a .lua file", level or 3)
  end
  if guest:sub(-4) == ".lua" and not guest:find("\n", 1, true) then
    local src, err = require("airlock.util").read_file(guest)
    if not src then return nil, "guest: cannot read " .. err end
    return src, name or guest:match("([^/]+)$")
  end
  return guest, name or "guest"
end

-- The run's policy (policy.resolve): a bare table is layered over untrusted;
-- none at all is AIRLOCK_POLICY, else untrusted. level: where a wrong type is
-- reported (as error's; default 3, the caller of its caller).
local function resolve_policy(p, level)
  if p ~= nil and type(p) ~= "string" and type(p) ~= "table" then
    error("airlock: 'policy' must be a policy table, a stock policy name or a file path", level or 3)
  end
  return policy.resolve(p == nil and (os.getenv("AIRLOCK_POLICY") or "untrusted") or p, "untrusted")
end

local OUTPUT_DEFAULT = policy.default("limits.output")

-- Built-in effects every run has unless its policy refuses them with false.
local function builtin_handlers(st, limits)
  local max = limits.output or OUTPUT_DEFAULT
  return {
    log = function(args)
      local text = type(args) == "table" and args.text
      if type(text) ~= "string" then error("log: args.text must be a string", 0) end
      if st.on_log then st.on_log(text) end
      if st.log_bytes < max then
        text = text:sub(1, max - st.log_bytes)
        st.log_bytes = st.log_bytes + #text
        st.log[#st.log + 1] = text
      end
      return true
    end,
    ["clock.now"] = function()
      return { time = os.time(), clock = os.clock() }
    end,
    -- os.clock: the worker's own CPU time, which the kernel counts and the
    -- parent reads from outside (never a number the child reports). Recorded
    -- like every answer, so a replay sees the same clock.
    ["clock.cpu"] = function(_, ctx)
      local s, err = ctx.handle:cpu_time()
      if not s then error(err, 0) end
      return s
    end,
  }
end

local function effect_list(handlers)
  local names = {}
  for name in pairs(handlers) do names[#names + 1] = name end
  table.sort(names)
  return names
end

-- ------------------------------------------------------------ starting a run
-- The stages of start_run, in its order. A mistake in what b:start's caller
-- gave is raised at that caller: 1 load_guest or resolve_policy, 2 a stage,
-- 3 start_run, 4 b:start, 5 its caller.
local CALLER = 5

-- opts, internal -> the run's policy: { policy, ref (the name it was given
-- by), limits, secrets (values, for handlers only), redact }, or nil, message, code.
local function run_policy(b, opts, internal)
  -- Without a policy of its own, a run takes the broker's snapshot (b:reload).
  local snapshot = opts.policy == nil and brokers[b] and brokers[b].snapshot or nil
  local pol, perr
  if snapshot then pol = snapshot.policy else pol, perr = resolve_policy(opts.policy, CALLER) end
  if not pol then return nil, perr end
  -- Less confinement than untrusted warns, or is refused (policy.admit);
  -- a program's run was admitted by airlock.exec against the stock tool.
  if not internal.program then
    local admitted, aerr = policy.admit(pol, "untrusted", "guests", b)
    if not admitted then return nil, aerr, "confinement" end
  end
  -- Secrets: resolved here, in the parent, for handlers only (ctx.secrets).
  local values, serr = secrets.resolve(pol.secrets)
  if not values then return nil, serr end
  return { policy = pol, limits = pol.limits or {}, secrets = values, redact = secrets.redactor(values),
           ref = type(opts.policy) == "string" and opts.policy or (snapshot and snapshot.ref) or nil }
end

-- opts, policy, internal -> what runs and its confinement plan: { name,
-- source (a guest's), argv, plan, program (airlock.exec's, or nil) }, or nil, message, code.
local function run_what(opts, pol, internal)
  -- A program (airlock.exec) instead of a guest: its argv, spawn options and
  -- confinement plan come made from the policy's tool authority.
  local prog = internal.program
  if prog then return { name = prog.name, argv = prog.argv, plan = prog.plan, program = prog } end
  local source, name = load_guest(opts.guest, opts.name, CALLER)
  if not source then return nil, name end
  local argv = pol.worker and { table.unpack(pol.worker) }
  if not argv and os.getenv("AIRLOCK_WORKER") then argv = { os.getenv("AIRLOCK_WORKER") } end
  if not argv then
    local w, err, code = core.worker_path()
    if not w then return nil, err, code end
    argv = { w }
  end
  local plan, cerr = confine.plan(pol.confine, "guest", { limits = pol.limits })
  if not plan then return nil, cerr, "confinement" end
  return { name = name, source = source, argv = argv, plan = plan }
end

-- opts, the run's policy, what runs -> the run's record (runs[run], above).
local function new_record(opts, rp, what)
  local st = { log = {}, log_bytes = 0, log_max = rp.limits.output or OUTPUT_DEFAULT, policy = rp.policy.name,
               policy_base = policy.base_of(rp.policy), on_log = opts.on_log, plan = what.plan, digest = policy.digest(rp.policy), redact = rp.redact }
  if rp.redact and opts.on_log then
    local on_log, redact = opts.on_log, rp.redact
    st.on_log = function(text) return on_log(redact(text)) end
  end
  return st
end

-- record, the run's policy -> handlers (the built-ins, then the policy's
-- effects; answers redacted), and the built-in log handler.
local function run_handlers(st, rp)
  local handlers = builtin_handlers(st, rp.limits)
  local collect_log = handlers.log
  for k, v in pairs(rp.policy.effects or {}) do handlers[k] = v or nil end
  -- Notifications: each must be an effect the run has.
  for _, name in ipairs(rp.policy.notify or {}) do
    if not handlers[name] then
      return nil, string.format("policy: notify names '%s', which the policy does not grant " ..
        "(effects[\"%s\"])", name, name)
    end
  end
  -- What a handler answers reaches the guest with every secret redacted.
  if rp.redact then
    for k, h in pairs(handlers) do handlers[k] = secrets.guard(h, rp.redact) end
  end
  return handlers, collect_log
end

-- The ledger, when opts names one: the init record (or, resuming, the resume
-- record) goes in before anything is spawned; every call is recorded before
-- its handler runs, every answer after. record, handlers, ... -> true (the
-- record has its recorder, ledger, owned; handlers are wrapped), or nil, message, "ledger".
local function record_run(st, handlers, opts, internal, rp, what, serial, seed)
  local lmod = require "airlock.ledger"
  local bound = lmod.session_max(rp.policy)
  local ledger, owned, lerr = open_ledger(opts.ledger, opts.durability, bound, internal.resume_of ~= nil)
  if lerr then return nil, lerr, "ledger" end
  if not ledger then return true end
  local resume_of, nested = internal.resume_of, internal.nested
  -- The session's bound: the policy's, when this run opened the session; a
  -- nested run's is its parent's; airlock.exec's, when it opened it.
  st.ledger_bound = owned and bound or nested and nested.parent.ledger_bound or internal.ledger_bound
  local rec = session.recorder(st.ledger_bound and lmod.naming_bound(ledger, st.ledger_bound) or ledger,
    nested and nested.ledger_run or resume_of and resume_of.run or serial,
    rp.redact, nested and nested.max_bytes or rp.limits.ledger)
  st.recorder, st.ledger, st.owned = rec, ledger, owned
  if nested then
    -- A nested run (ctx:nest): its init is a nest record, under its parent's call.
    local pctx, limits = nested.ctx, rp.limits
    local fields = {
      parent = { run = nested.parent.recorder.run, id = pctx.seq, seq = pctx.ledger_seq },
      depth = nested.parent.nest.depth + 1,
      guest = { name = what.name, source = what.source },
      input = opts.input, seed = seed,
      effects = effect_list(handlers),
      policy = { name = rp.policy.name, base = st.policy_base, digest = st.digest },
      limits = { instructions = limits.instructions or 0, memory = limits.memory or 0,
                 output = limits.output or 65536, deadline_ms = nested.deadline_ms or 0,
                 turn_instructions = limits.turn_instructions or 0,
                 cpu = limits.cpu or 0, turn_cpu = limits.turn_cpu or 0 },
    }
    if not rec:append("nest", fields) then
      return nil, "ledger: cannot record the nested run's start: " .. rec.failed, "ledger"
    end
  elseif resume_of then
    -- Resuming: the init is already in the journal; this records the answer.
    if not rec:append("resume", { input = resume_of.input }) then
      if owned then ledger:close() end
      return nil, "ledger: cannot record the resume: " .. rec.failed, "ledger"
    end
  else
    local fields = {
      guest = what.program and { name = what.name, argv = what.argv } or { name = what.name, source = what.source },
      input = opts.input, seed = seed,
      effects = effect_list(handlers),
      policy = { name = rp.policy.name, base = st.policy_base, digest = st.digest, ref = rp.ref },
    }
    if not rec:append("init", fields) then
      if owned then ledger:close() end
      return nil, "ledger: cannot record the run's init: " .. rec.failed, "ledger"
    end
  end
  for k, h in pairs(handlers) do handlers[k] = rec:wrap(k, h) end
  return true
end

-- Served from a journal (replay, resume): recorded answers first, in order;
-- past them the live (and recorded) handlers, or divergence. record, handlers,
-- the built-in log handler, the server (or nil) -> the handlers the run gets.
local function served_handlers(st, handlers, collect_log, srv)
  if not srv then return handlers end
  local live = handlers
  st.server = srv
  handlers = {}
  for k in pairs(live) do handlers[k] = srv:handler(k) end
  if collect_log and handlers.log then
    -- What the guest prints is answered from the journal like any call, and
    -- still collected into result.log, so a replayed result compares whole.
    local served = handlers.log
    handlers.log = function(args, ctx)
      local before = srv.served
      local v = served(args, ctx)
      if srv.served > before then pcall(collect_log, args, ctx) end   -- live ones collect themselves
      return v
    end
  end
  if srv.live then srv.live = function(effect) return live[effect] end end
  return handlers
end

-- What b:_start takes: a worker's, with its init frame, or a program's.
-- record, handlers, ... -> b:_start's options.
-- ctx.on_note_error for run record st: a handler that failed on a note is
-- told in the result (note_errors, the first 16, a line each).
local function note_error_sink(st)
  return function(effect, msg)
    st.note_errors = st.note_errors or {}
    if #st.note_errors < 16 then
      st.note_errors[#st.note_errors + 1] = string.format("%s: %s", effect, tostring(msg):match("^[^\n]*"))
    end
  end
end

local function spawn_options(st, handlers, opts, internal, rp, what, serial, seed)
  local limits = rp.limits
  local ctx = { policy = rp.policy.name, secrets = secrets.readonly(rp.secrets), nest = nest.method,
                on_denied = st.recorder and not internal.serve and function(effect, id) st.recorder:denied(id, effect) end
                  or nil }
  -- A recorded run's calls are recorded with the step's others, before any
  -- is handled (b:step: ctx.admit for each, then ctx.admit_flush once).
  if st.recorder and not internal.serve then
    ctx.admit = function(effect, args, id) st.recorder:admit(effect, args, id) end
    ctx.admit_flush = session.admit_flush
  end
  -- Notifications: the binding takes a note only for these, and tells of a
  -- handler that failed on one (no answer goes back to say so).
  local notify
  for _, name in ipairs(rp.policy.notify or {}) do notify = notify or {}; notify[#notify + 1] = name end
  if notify then
    ctx.notify = {}
    for _, name in ipairs(notify) do ctx.notify[name] = true end
    ctx.on_note_error = note_error_sink(st)
  end
  -- A replay answered only from its journal does not let the CPU budgets
  -- strike: the CPU a guest gets is the machine's, not the guest's, so a
  -- budget could strike at another point than it did. They still tick as
  -- recorded (cpu_enforced = false: a boolean either way, so the init frame,
  -- and what the worker allocates, are the recording's). The journal's end
  -- stands in for them (session.lua, server:exhausted): a run a budget ended
  -- is ended with its recorded cause once every recorded effect is served.
  local replaying = internal.serve ~= nil and not internal.serve.live
  local start
  if what.program then
    -- No init, no ready: the program gets fd 3 for calls, and nothing else of a worker's.
    start = { argv = what.argv, program = true, channel = true, handlers = handlers, ctx = ctx,
              deadline_ms = what.program.deadline_ms, capture_max = what.program.capture }
  else
    start = {
      argv = what.argv,
      init = {
        t = "init", v = core.protocol_version, run = serial,
        guest = { name = what.name, source = what.source },
        input = opts.input,
        seed = seed,
        resume = internal.resume_inputs and { inputs = internal.resume_inputs } or nil,
        limits = {
          instructions = limits.instructions or 0,
          turn_instructions = limits.turn_instructions or 0,
          cpu = limits.cpu or 0,
          turn_cpu = limits.turn_cpu or 0,
          cpu_enforced = not replaying,
          memory = limits.memory or 0,
          output = limits.output or OUTPUT_DEFAULT,
        },
        effects = effect_list(handlers),
        notify = notify,
        confine = what.plan.init,
      },
      deadline_ms = internal.nested and internal.nested.deadline_ms or limits.deadline_ms,
      max_frame = limits.max_frame,
      capture_max = limits.capture,
      handlers = handlers,
      ctx = ctx,
      -- A run that is recorded, or replayed from its record, gets fixed
      -- addresses: what Lua hashes (pairs order) and prints (tostring of a
      -- table) is then the same in the replay.
      -- (AIRLOCK_TEST_ASLR=1 keeps randomisation, for the specs' control runs.)
      no_aslr = (st.recorder ~= nil or internal.serve ~= nil) and os.getenv("AIRLOCK_TEST_ASLR") ~= "1" or nil,
    }
  end
  for k, v in pairs(what.plan.start) do start[k] = v end
  return start
end

-- ------------------------------------------------------------------ the warm pool
-- b:warm(n, policy) keeps n prepared workers ahead of their runs. Each is
-- spawned (namespaces, rlimits, capabilities, cgroup by the spawner) with an
-- init that brings all but the run (prepare = true): the worker builds its
-- Lua state with the guest's world open, applies Landlock and seccomp, says
-- ready, and the broker checks it from outside (namespaces, Seccomp: 2,
-- NoNewPrivs, no capability left). Only then has it joined its pool; it
-- waits, blocked on its channel, and may send nothing more (the broker ends
-- one that does). b:start takes a joined worker and sends it one start frame
-- (run id, guest, input): the run costs only the guest's own work. A worker
-- serves one run and is never reused.
--
-- A pool is made for one policy. Its seed is fixed per worker when it is
-- spawned (the string-hash seed is made with the state), and its run takes
-- that seed; a run that asks for its own seed, or that is recorded or
-- replayed (whose worker gets fixed addresses, see no_aslr), spawns its own.
-- A run finds its pool at once when it names the pool's policy the same way
-- (the same frozen policy, the same stock name, or nothing); otherwise by
-- what the spawner and init would give its worker, which costs a policy
-- resolution. A spawn costs milliseconds of the host's own time, so a pool
-- refills only when asked: b:warm again, or {refill = true}, where b:step
-- spawns one worker in a step that had nothing to deliver; it joins when its
-- ready has been checked, in a later step.

-- The internal options of a run started by a host (none), shared and read-only.
local NO_INTERNAL = setmetatable({}, { __newindex = function() error("airlock: NO_INTERNAL is read-only", 2) end })
local POOL_READY_MS = 10000   -- how long b:warm waits for a worker's ready
local pool_host_side          -- (below) the host's side of a worker's run, made ahead

-- What a pool is found by without resolving anything: a frozen policy or a
-- stock name (which always resolve alike), or nil for a bare table.
local function pool_ref(b, pol)
  if pol == nil then
    local snap = brokers[b] and brokers[b].snapshot
    if snap then return snap.policy end
    pol = os.getenv("AIRLOCK_POLICY") or "untrusted"
  end
  if policy.is_policy(pol) then return pol end
  if type(pol) == "string" and policy.is_stock(pol) then return "stock:" .. pol end
  return nil
end

-- The run's policy, what runs -> the init a prepared worker gets (no seed:
-- each worker gets its own), the same for every run under that policy.
local function prepared_init(rp, what)
  local limits = rp.limits
  local handlers = run_handlers({ log = {}, log_bytes = 0 }, rp)
  local notify
  for _, name in ipairs(rp.policy.notify or {}) do notify = notify or {}; notify[#notify + 1] = name end
  return {
    t = "init", v = core.protocol_version, prepare = true,
    limits = {
      instructions = limits.instructions or 0,
      turn_instructions = limits.turn_instructions or 0,
      cpu = limits.cpu or 0,
      turn_cpu = limits.turn_cpu or 0,
      memory = limits.memory or 0,
      output = limits.output or OUTPUT_DEFAULT,
    },
    effects = handlers and effect_list(handlers) or {},
    notify = notify,
    confine = what.plan.init,
  }
end

-- The pool key: what the spawner and init give its workers.
local function pool_key(argv, plan_start, init)
  return require("airlock.util").key_of { argv, plan_start, init }
end

-- Spawns one prepared worker into pool p, with a seed of its own.
local function pool_spawn(b, p)
  local init = {}
  for k, v in pairs(p.init) do init[k] = v end
  init.seed = math.random(0, 2 ^ 31)
  p.start.init = init
  local run, err, code = b:_start(p.start)
  if not run then return nil, err, code end
  p.parked[#p.parked + 1] = run
  p.seed[run:id()] = init.seed
  p.host[run:id()] = pool_host_side(b, p, run:id())
  broker_state(b).parked[run:id()] = p
  return run
end

-- Refuses pool p for why: its parked workers are cancelled, it is never
-- refilled, and b:warm says why. -> nil, message, "confinement".
local function pool_refuse(p, why)
  p.failed = p.failed or tostring(why):gsub("^confinement: ", "")
  for _, r in ipairs(p.parked) do r:cancel() end
  return nil, "confinement: the pool's worker failed its checks from outside, so the pool is refused: " ..
    p.failed, "confinement"
end

-- The pool a run would take its worker from, or nil: found by its policy's
-- name or object (no resolution), else by key once the run's policy and
-- plan are known (what, rp).
local function pool_for(b, opts, what, rp)
  local bs = brokers[b]
  if not (bs and bs.pool) then return nil end
  if not what then
    local ref = pool_ref(b, opts.policy)
    return ref ~= nil and bs.pool_by[ref] or nil
  end
  return bs.pool[pool_key(what.argv, what.plan.start, prepared_init(rp, what))]
end

-- A joined worker of pool p, taken out of it, its seed and the host's side
-- made for its run (pool_host_side); or nil.
local function pool_take(b, p)
  if not p or p.failed then return nil end
  local parked = p.parked
  for i = 1, #parked do
    local run = parked[i]
    if run:_joined() then
      table.remove(parked, i)
      local id = run:id()
      brokers[b].parked[id] = nil
      local seed, host = p.seed[id], p.host[id]
      p.seed[id], p.host[id] = nil, nil
      return run, seed, host
    end
  end
  return nil
end

-- Gives a taken worker its run: the start frame, its deadline and frame
-- limits (limits: {deadline_ms, max_frame, capture_max}), and what its calls
-- need (handlers, ctx). -> true; nil, message, "input" when the input cannot
-- be sent (the worker is still parked); or nil, message, code.
local function pool_send(run, name, source, input, limits, handlers, ctx)
  return run:_unpark(name, source, input, handlers, ctx, limits.deadline_ms, limits.max_frame, limits.capture_max)
end

-- What every run under pool p shares, made once: its policy resolved and
-- digested, its handlers wrapped, its ctx. false for a policy with secrets
-- (resolved per run, as they may change) or whose notify is wrong: those
-- runs take the general path.
local function pool_fast(p)
  if p.fast ~= nil then return p.fast end
  local pol = p.policy
  p.fast = false
  if pol.secrets and next(pol.secrets) ~= nil then return false end
  local rp = { policy = pol, limits = pol.limits or {}, secrets = {} }
  if not run_handlers({ log = {}, log_bytes = 0 }, rp) then return false end
  local handlers, builtin = {}, {}
  for k in pairs(builtin_handlers({}, rp.limits)) do
    if not (pol.effects and pol.effects[k] ~= nil) then builtin[k] = true end
  end
  for k, h in pairs(pol.effects or {}) do
    if h then handlers[k] = nest.runner(h, k) end
  end
  local notify
  for _, name in ipairs(pol.notify or {}) do notify = notify or {}; notify[name] = true end
  local limits = rp.limits
  p.fast = { admitted = policy.always_admitted(pol, "untrusted"), limits = limits,
             log_max = limits.output or OUTPUT_DEFAULT, digest = policy.digest(pol),
             unpark = { deadline_ms = limits.deadline_ms, max_frame = limits.max_frame, capture_max = limits.capture },
             handlers = handlers, builtin = builtin, notify = notify, secrets = secrets.readonly({}) }
  return p.fast
end

-- The host's side of the run a worker of pool p will serve, made when the
-- worker is spawned (the host's idle time): its record, handlers and ctx.
function pool_host_side(b, p, id)
  local f = pool_fast(p)
  if not f then return nil end
  local st = { log = {}, log_bytes = 0, log_max = f.log_max, policy = p.policy.name,
               policy_base = policy.base_of(p.policy), plan = p.plan,
               digest = f.digest, pooled = true, pol = p.policy, broker = b, serial = id,
               nest = nest.state(NO_INTERNAL, f.limits, id + 1) }   -- its deadline is set at the start
  local handlers = {}
  for k, h in pairs(f.handlers) do handlers[k] = h end
  for k, h in pairs(builtin_handlers(st, f.limits)) do
    if f.builtin[k] then handlers[k] = nest.runner(h, k) end
  end
  local ctx = { policy = st.policy, secrets = f.secrets, nest = nest.method, notify = f.notify }
  if f.notify then
    ctx.on_note_error = note_error_sink(st)
  end
  return { st = st, handlers = handlers, ctx = ctx }
end

-- A run under pool p's policy, on one of its joined workers, with nothing
-- resolved or built that the pool holds already. -> the run; nil when the
-- pool has no joined worker (spawn one); or nil, message, code.
-- Only the checks come before the start frame: the rest of the host's side
-- is done while the worker wakes (its calls are read in b:step, later).
local function pooled_start(b, p, opts)
  local f = pool_fast(p)
  if not f then return nil end
  local source, name = load_guest(opts.guest, opts.name, CALLER)
  if not source then return nil, name end
  if not f.admitted then   -- a policy with less confinement: its warning, or its refusal
    local admitted, aerr = policy.admit(p.policy, "untrusted", "guests", b)
    if not admitted then return nil, aerr, "confinement" end
  end
  local run, _, h = pool_take(b, p)
  if not run then return nil end
  local id = run:id()
  h = h or pool_host_side(b, p, id)
  local sent, err, code = pool_send(run, name, source, opts.input, f.unpark, h.handlers, h.ctx)
  if not sent then
    -- An input that cannot be sent is the caller's error, as on a fresh
    -- worker; the worker never had a run, and is cancelled (its end is the
    -- pool's). One that died since it joined: its end is the pool's too, and
    -- the run goes the general way (another worker, or a spawn).
    brokers[b].parked[id] = p
    if code == "input" then run:cancel() error(err, 0) end
    return nil
  end
  local st = h.st
  st.on_log = opts.on_log
  -- The nested runs' deadline is the run's own, counted from its start.
  if st.nest.deadline_at then st.nest.deadline_at = run:_t_start() + st.nest.deadline_ms end
  brokers[b].live[id] = st
  runs[run] = st
  return run
end

--- b:warm(n, policy, {refill = bool}) -> true, or nil, message, code: tops the
--- pool of prepared workers for runs under policy (a policy, a table, a name;
--- nil: the broker's or untrusted) up to n, spawned, confined and checked from
--- outside before this returns; fewer than n are cancelled, n = 0 empties it.
--- n is bounded by the policy's limits.pool. With refill, b:step tops it up
--- again, one worker in a step that had nothing to deliver. A pool one of
--- whose workers failed its checks (or did not say ready) is refused: nil,
--- "confinement: ...", and stays refused.
function broker_methods:warm(n, pol, opts)
  if math.type(n) ~= "integer" or n < 0 or n > 256 then error("warm: n must be a whole number from 0 to 256", 2) end
  if opts ~= nil then
    if type(opts) ~= "table" then error("warm: options must be a table { refill = true | false }", 2) end
    for k in pairs(opts) do
      if k ~= "refill" then error(string.format("warm: unknown option '%s' (refill)", tostring(k)), 2) end
    end
  end
  local rp, err, code = run_policy(self, { policy = pol }, {})
  if not rp then return nil, err, code end
  local most = rp.limits.pool or policy.default("limits.pool")
  if n > most then
    return nil, string.format("warm: %d workers is over the policy's limits.pool (%d)", n, most), "policy"
  end
  local what
  what, err, code = run_what({ guest = "" }, rp.policy, {})
  if not what then return nil, err, code end
  local bs = broker_state(self)
  bs.pool, bs.pool_by = bs.pool or {}, bs.pool_by or {}
  local init = prepared_init(rp, what)
  local key = pool_key(what.argv, what.plan.start, init)
  local p = bs.pool[key]
  if not p then
    local start = { argv = what.argv, park = true, handlers = {} }
    for k, v in pairs(what.plan.start) do start[k] = v end
    p = { parked = {}, seed = {}, host = {}, start = start, init = init, policy = rp.policy, argv = what.argv,
          plan = what.plan }
    bs.pool[key] = p
  end
  local ref = pool_ref(self, pol)
  if ref ~= nil then bs.pool_by[ref] = p end
  if p.failed then return pool_refuse(p, p.failed) end
  p.want = n
  p.refill = opts ~= nil and opts.refill == true
  -- Those parked already: one that ended (its end not yet seen by b:step) is
  -- forgotten, and refuses the pool if it failed its checks or acted on its own.
  for i = #p.parked, 1, -1 do
    local r = p.parked[i]
    if not r:_joined() then
      local ok, why, how = r:_await_ready(0)
      if not ok and how == "ended" then
        table.remove(p.parked, i)
        if why:match("^protocol: ") or why:match("^confinement: ") then return pool_refuse(p, why) end
      end
    end
  end
  while #p.parked > n do
    table.remove(p.parked):cancel()   -- its end, in a later b:step, is the pool's (bs.parked)
  end
  -- Spawned, then each one checked: a pool joins only workers seen ready.
  local fresh = {}
  while #p.parked < p.want do
    local run
    run, err, code = pool_spawn(self, p)
    if not run then return nil, err, code end
    fresh[#fresh + 1] = run
  end
  for _, run in ipairs(fresh) do
    local ok, why, how = run:_await_ready(POOL_READY_MS)
    if not ok then
      if how == "timeout" then run:cancel() end
      return pool_refuse(p, why)
    end
  end
  return true
end

--- b:pooled(policy) -> how many workers have joined the pool for runs under
--- policy (spawned, checked, waiting for a run).
function broker_methods:pooled(pol)
  local p = pool_for(self, { policy = pol })
  if not p then
    local rp, err, code = run_policy(self, { policy = pol }, {})
    if not rp then return nil, err, code end
    local what = run_what({ guest = "" }, rp.policy, {})
    p = what and pool_for(self, {}, what, rp)
  end
  local n = 0
  for _, r in ipairs(p and p.parked or {}) do if r:_joined() then n = n + 1 end end
  return n
end

-- broker, b:_start's options, what runs, a parked worker or nil -> the run,
-- or nil, message, code and (a spawn that failed) b:_start's step word.
local function spawn(b, start, what, parked)
  if parked then   -- a pool's worker: its run is all it needs (it has init)
    local g = start.init.guest
    local ok, err, code = pool_send(parked, g.name, g.source, start.init.input,
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

-- Starts a run. opts: b:start's (START_KEYS); internal: what only this
-- package's own callers give: { program = airlock.exec's program (its name,
-- argv, plan, deadline_ms, capture), serve = a journal's server (replay,
-- resume), resume_inputs = the inputs the journal's resumes gave, resume_of =
-- {input, run}: the resume to record, ledger_bound = the session bound an
-- open opts.ledger was opened with (airlock.exec's), for the refusal's
-- message }. -> run, or nil, message, code.
local function start_run(b, opts, internal)
  -- A pooled worker serves an unrecorded run with no seed of its own (see the pool).
  local poolable = not opts.ledger and opts.seed == nil and
    (internal == nil or not (internal.serve or internal.program or internal.nested))
  internal = internal or NO_INTERNAL
  -- A pool is found first by the policy object itself (a frozen policy's own pool).
  local bs = poolable and brokers[b]
  local pool = bs and bs.pool_by and bs.pool_by[opts.policy] or poolable and pool_for(b, opts) or nil
  if pool then
    local run, err, code = pooled_start(b, pool, opts)
    if run or err then return run, err, code end
  end
  local rp, err, code = run_policy(b, opts, internal)
  if not rp then return nil, err, code end
  local what
  what, err, code = run_what(opts, rp.policy, internal)
  if not what then return nil, err, code end
  local st = new_record(opts, rp, what)
  local handlers, collect_log = run_handlers(st, rp)
  if not handlers then return nil, collect_log, "policy" end
  local grant = internal.nested and internal.nested.grant
  if grant then   -- a replayed nested run has the effects it was recorded with, at most
    for k in pairs(handlers) do if not grant[k] then handlers[k] = nil end end
  end
  -- A warm worker (b:warm) has its id and its seed already; a new one gets
  -- the next id and a seed of its own. A pool found by key (a bare table
  -- policy, or one with secrets) is taken here.
  if poolable then pool = pool or pool_for(b, opts, what, rp) end
  local parked, pooled_seed = pool_take(b, pool)
  st.pooled = parked ~= nil or nil
  local serial = parked and parked:id() or b:_next_serial()
  local seed = pooled_seed or opts.seed or math.random(0, 2 ^ 31)
  local ok
  ok, err, code = record_run(st, handlers, opts, internal, rp, what, serial, seed)
  if not ok then
    if parked then parked:cancel() brokers[b].parked[parked:id()] = pool end   -- its end is the pool's
    return nil, err, code
  end
  handlers = served_handlers(st, handlers, collect_log, internal.serve)
  -- Outermost: each call's handler in a coroutine of its own, so ctx:nest can wait.
  for k, h in pairs(handlers) do handlers[k] = nest.runner(h, k) end
  st.pol, st.broker, st.serial, st.ledger_run = rp.policy, b, serial, st.recorder and st.recorder.run or nil
  st.nest = nest.state(internal, rp.limits, internal.next_run or (st.ledger_run or serial) + 1)
  local run, step
  run, err, code, step = spawn(b, spawn_options(st, handlers, opts, internal, rp, what, serial, seed), what, parked)
  if code == "input" and parked then   -- the caller's error, as on a fresh worker (see pooled_start)
    parked:cancel() brokers[b].parked[parked:id()] = pool
    error(err, 0)
  end
  if not run then
    if st.recorder and internal.nested then
      -- The nest record is in; its end says the run never started (replay skips it).
      st.recorder:append("done", { cause = code == "confinement" and code or "exit", ok = false,
                                   message = tostring(err), started = false })
    end
    if st.owned then st.ledger:close() end
    return nil, err, code, step
  end
  -- Registered: b:step finds the record by the run's id, reply and fail by the run.
  local bs = broker_state(b)
  bs.live[run:id()] = st
  if st.ledger then bs.ledgered[run:id()] = st end
  runs[run] = st
  if internal.serve then internal.serve:started(run) end
  return run
end

--- b:start{guest = source_or_path, policy = table|name, input = any, name = str,
--- seed = int, on_log = function(text), ledger = dir|ledger, durability = str} -> run, or nil,
--- message, errno when the run cannot be started (errno is the word "confinement" when a
--- required layer cannot be applied here).
function broker_methods:start(opts)
  if type(opts) ~= "table" then error("start: expects a table {guest = ..., policy = ...}", 2) end
  for k in pairs(opts) do
    if not START_KEYS[k] then error(string.format("start: unknown option '%s'", tostring(k)), 2) end
  end
  local run, err, code = start_run(self, opts)   -- not a tail call: CALLER counts this frame
  return run, err, code
end

-- Not API: for this package's own modules (airlock.exec starts its programs
-- with start_run and internal.program). Nothing outside lua/airlock uses it.
M._internal = { start_run = start_run, record_of = function(run) return runs[run] end }
nest.bind { record_of = function(run) return runs[run] end, start_run = start_run }

--- b:step(timeout_ms) -> list of results of the runs that finished; handlers
--- for calls that arrived are run inside. timeout -1 waits, 0 polls.
function broker_methods:step(timeout)
  -- Group commit: the wait never outlasts a batch ledger's sync window, and
  -- every step gives due ledgers their fdatasync.
  -- Only the live runs that have a ledger are visited (bs.ledgered), so a
  -- step costs no more for many unrecorded runs than for one.
  local bs = brokers[self]
  local per = bs and bs.live   -- run id -> record
  local ledgered = bs and next(bs.ledgered) and bs.ledgered
  if ledgered then
    for _, st in pairs(ledgered) do
      local due = st.ledger:sync_due_ms()
      if due >= 0 and (timeout == nil or timeout < 0 or due < timeout) then timeout = due end
    end
  end
  if session.settling() then
    error("step: called from inside a handler (the broker is not re-entrant)", 2)
  end
  local done, err, code = self:_step(timeout)
  session.settle()   -- the notes that arrived: recorded, then handled, before anything ends
  if not done then return nil, err, code end
  if ledgered then
    for _, st in pairs(ledgered) do
      local ok, terr = st.ledger:tick()
      if not ok and st.recorder then st.recorder.failed = st.recorder.failed or terr end
    end
  end
  -- A parked worker that died (or that b:warm cancelled) is its pool's loss,
  -- not a run's end: the pool forgets it.
  if bs and next(bs.parked) then
    local kept = {}
    for _, res in ipairs(done) do
      local p = bs.parked[res.run]
      if p then
        bs.parked[res.run] = nil
        for i, r in ipairs(p.parked) do if r:id() == res.run then table.remove(p.parked, i) break end end
        p.seed[res.run], p.host[res.run] = nil, nil
        -- One that failed its checks from outside, or acted before it had a
        -- run: the pool is refused (b:warm says why) and never refilled; runs
        -- spawn their own, checked as ever.
        if res.cause == "confinement" or res.cause == "protocol" then pool_refuse(p, res.message) end
      else
        kept[#kept + 1] = res
      end
    end
    done = kept
  end
  -- Refilling pools (b:warm(n, policy, {refill = true})): one worker a step,
  -- and only in a step that had nothing to deliver, so the host's loop is
  -- never held for more than one spawn when it has work.
  if bs and bs.pool and #done == 0 then
    for _, p in pairs(bs.pool) do
      if p.refill and not p.failed and #p.parked < p.want then
        -- It joins when its ready is read and checked, in a later step.
        if not pool_spawn(self, p) then p.refill = false end   -- cannot spawn now: b:warm again says why
        break
      end
    end
  end
  if #done == 0 then return done end
  local nested_done = {}   -- result -> record, for the nested runs among them
  -- Nested runs first, deepest first: a run's end is recorded before its
  -- parent's, which may close the ledger they share (nest.ended).
  local order = {}
  for i, res in ipairs(done) do
    local st = per and per[res.run]
    order[i] = { res = res, depth = st and st.nest and st.nest.depth or 0, i = i }
  end
  table.sort(order, function(x, y) if x.depth ~= y.depth then return x.depth > y.depth end return x.i < y.i end)
  for _, o in ipairs(order) do
    local res = o.res
    local st = per and per[res.run]
    if st then
      res.log = table.concat(st.log)
      res.pooled = st.pooled
      res.policy = st.policy
      res.policy_base = st.policy_base
      res.digest = st.digest
      res.confinement = confine.report(st.plan, res.confinement)
      res.note_errors = st.note_errors
      if st.server then
        res.served = st.server.served
        res.live_effects = st.server.live_calls
      end
      if st.redact then secrets.redact_result(res, st.redact, st.log_bytes >= st.log_max) end
      nest.ended(st, res.cause)
      if st.nest and st.nest.parent then nested_done[res] = st end
      if st.nest and st.nest.tree.count > 0 and st.nest.depth == 0 then res.nested = st.nest.tree.count end
      if st.recorder and not st.nest.recorded_end then
        local rec = st.recorder
        if res.cause == "paused" and not st.nest.parent then
          rec:append("pause", { prompt = res.value })
        else
          rec:append("done", { cause = res.cause, ok = res.ok, value = res.value, message = res.message })
        end
        -- The end of the run is made durable now, unless the ledger promised none.
        local fok, ferr = true, nil
        if st.ledger:durability() ~= "none" then fok, ferr = st.ledger:flush() end
        if not fok then rec.failed = rec.failed or ferr end
        res.ledger = { dir = st.ledger:dir(), head = st.ledger:checkpoint(), error = rec.failed }
        if st.owned then st.ledger:close() end
      end
      per[res.run] = nil
      bs.ledgered[res.run] = nil
    end
  end
  -- A nested run's end is its parent's call's answer, not a result of the
  -- broker's: its handler goes on (nest.finished), and the host never sees it.
  local kept, resumed = {}, nil
  for _, res in ipairs(done) do
    local st = nested_done[res]
    if st then
      resumed = resumed or {}
      resumed[#resumed + 1] = { st, res }
    else
      kept[#kept + 1] = res
    end
  end
  for _, r in ipairs(resumed or {}) do nest.finished(r[1], r[2]) end
  return kept
end

-- Deferred answers of a recorded run are recorded as they are given.
local function recorder_of(run)
  local rec = runs[run] and runs[run].recorder
  return rec and rec.deferred and rec
end

local c_reply, c_fail = run_methods.reply, run_methods.fail
function run_methods:reply(seq, value)
  local redact = runs[self] and runs[self].redact
  if redact then value = redact(value) end
  local rec = recorder_of(self)
  local effect = rec and rec.deferred[seq]
  if effect then
    rec.deferred[seq] = nil
    -- An answer too large to send fails the call (c_reply says so): it is
    -- recorded as that failure.
    local fits, why = self:_answer_fits(value)
    if not rec:reply(seq, effect, fits == true, fits and value or why, true) then
      self:abort("ledger", "ledger: the answer could not be recorded: " .. rec.failed:gsub("^ledger: ", ""))
      return nil, rec.failed
    end
  end
  return c_reply(self, seq, value)
end
function run_methods:fail(seq, message, code)
  local redact = runs[self] and runs[self].redact
  if redact then message = redact(message) end
  local rec = recorder_of(self)
  local effect = rec and rec.deferred[seq]
  if effect then
    rec.deferred[seq] = nil
    if not rec:reply(seq, effect, false, message, true, code) then
      self:abort("ledger", "ledger: the answer could not be recorded: " .. rec.failed:gsub("^ledger: ", ""))
      return nil, rec.failed
    end
  end
  return c_fail(self, seq, message, code)
end

--- b:reload(policy) -> digest, or nil, message: runs started afterwards without
--- a policy of their own use this snapshot (a table, stock name or file path,
--- as b:start takes); runs already started keep theirs. A policy that fails
--- validation (or whose secrets cannot be resolved, or that AIRLOCK_REQUIRE_CONFINEMENT
--- refuses) leaves the current one in place.
function broker_methods:reload(p)
  if p == nil then error("reload: expects a policy (a table, a stock name or a file path)", 2) end
  local ok, pol, err = pcall(resolve_policy, p)
  if not ok then return nil, tostring(pol) end
  if not pol then return nil, err end
  if not policy.always_admitted(pol, "untrusted") and policy.confinement_required() then
    return nil, string.format("confinement: policy '%s' runs guests without confinement, " ..
      "and AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it", policy.label(pol))
  end
  local values, serr = secrets.resolve(pol.secrets)
  if not values then return nil, serr end
  broker_state(self).snapshot = { policy = pol, ref = type(p) == "string" and p or nil }
  return policy.digest(pol)
end

--- run:wait() -> result: steps the run's broker until this run has finished.
function run_methods:wait(b)
  while self:live() do
    local _, err = b:step(-1)
    if err then return nil, err end
  end
  return self:result()
end

M.broker = core.broker

--- airlock.probe() -> what this kernel and privilege level can enforce (see
--- airlock.probe for the fields); `airlock probe` prints it.
function M.probe() return require("airlock.probe").report() end

--- airlock.run{guest = ..., policy = ..., input = ...} -> result table, or nil,
--- message, errno when the run could not be started.
function M.run(opts)
  local b <close> = core.broker()
  local run, err, code = b:start(opts)
  if code == "confinement" then
    -- Refused before anything was spawned: a result like any other run's.
    local pol = resolve_policy(opts.policy)
    return { ok = false, cause = "confinement", message = err, log = "", usage = {},
             policy = pol and pol.name, policy_base = pol and policy.base_of(pol),
             digest = pol and policy.digest(pol) }
  end
  if not run then return nil, err, code end
  return run:wait(b)
end

-- The policy a recorded run is run again under: want (the user's), else the
-- stock policy the journal names; never a file a journal names, since whoever
-- can write a journal can re-chain it (the chain is unkeyed). A digest that
-- differs from the recorded one refuses the run unless changed_ok, and is
-- then a note.
local function recorded_policy(s, want, changed_ok)
  local rp = s.init.policy or {}
  local named = want
  if named == nil then
    named = rp.ref or rp.name
    if named == nil then
      return nil, "policy: the journal names no policy" ..
        (type(rp.base) == "string" and " of its own (the run's was derived from '" .. rp.base .. "')" or "") ..
        "; give the one the run was recorded under (--policy)"
    end
    if not policy.is_stock(named) then
      return nil, string.format("policy: the journal names the policy '%s', which is not a stock policy; " ..
        "a journal never chooses code to run, so give it yourself (--policy FILE) once you trust it",
        tostring(named))
    end
  end
  local pol, err = resolve_policy(named)
  if not pol then return nil, err end
  local note
  if rp.digest and policy.digest(pol) ~= rp.digest then
    note = string.format("the policy '%s' is not the one the run was recorded under (digest %s..., now %s...)",
      type(named) == "string" and named or tostring(pol.name), tostring(rp.digest):sub(1, 12),
      policy.digest(pol):sub(1, 12))
    if not changed_ok then
      return nil, "policy: " .. note .. "; to run it anyway, say so (--policy-changed, or policy_changed = true)"
    end
  end
  return pol, nil, note
end

-- A served call with nested runs under it replays each of them from the
-- journal first (airlock.nest.replay_child), their own nested runs likewise.
local function replay_nested(ctx, child)
  return nest.replay_child(ctx, child, function(c) return session.server(c, nil, replay_nested) end)
end

-- Runs a recorded session again in a fresh worker, served by srv. extra: b:start
-- options over the recorded ones; resume_of: the resume to record (start_run's).
local function rerun(s, pol, srv, extra, resume_of)
  if s.init.guest and s.init.guest.argv then
    return nil, string.format("the session recorded a program (airlock exec %s), not a guest: only guest " ..
      "runs can be replayed or resumed; `airlock ledger verify` and `ledger show` audit it",
      table.concat(s.init.guest.argv, " "):sub(1, 200))
  end
  local b <close> = core.broker()
  local opts = {
    guest = s.init.guest.source, name = s.init.guest.name, policy = pol,
    input = s.init.input, seed = s.init.seed,
  }
  for k, v in pairs(extra or {}) do opts[k] = v end
  local run, err, code = start_run(b, opts, {
    serve = srv, resume_inputs = #s.inputs > 0 and s.inputs or nil, resume_of = resume_of,
    next_run = s.max_run + 1 })
  if not run then return nil, err, code end
  return run:wait(b)
end

--- airlock.replay(dir, {policy = ..., policy_changed = bool, guest = source}) -> report, or nil,
--- message. The policy: opts.policy, else the stock policy the journal names
--- (a journal never names a file to run); one whose digest differs from the
--- recorded one needs policy_changed = true. Re-runs the
--- session's run in a fresh worker answered only from the journal: report =
--- { identical = bool, result = the new result, recorded = the recorded end
--- (done or pause record), served = calls answered from the journal,
--- live_effects = 0 (nothing may be performed for real), note = policy change }.
--- guest replaces the recorded source, to check that changed code still asks
--- for the same effects (cause diverged, naming the seq, when it does not).
function M.replay(dir, opts)
  opts = opts or {}
  local s, err = session.load(dir)
  if not s then return nil, err end
  local pol, perr, note = recorded_policy(s, opts.policy, opts.policy_changed)
  if not pol then return nil, perr, "policy" end
  local srv = session.server(s, nil, replay_nested)
  local res, rerr = rerun(s, pol, srv, { guest = opts.guest })
  if not res then return nil, rerr end
  local rec = s.final
  local identical = rec ~= nil and res.cause == (rec.kind == "pause" and "paused" or rec.cause)
  if identical then
    local want = rec.kind == "pause" and rec.prompt or rec.value
    identical = session.same(res.value, want) and srv.next == #s.calls + 1
  end
  return { identical = identical, result = res, recorded = rec, served = srv.served,
           live_effects = srv.live_calls, calls = #s.calls, note = note, nested = res.nested or 0 }
end

--- airlock.resume(dir, input, {policy = ..., policy_changed = bool, durability = ...}) -> result, or nil,
--- message, code. Continues a paused session: a fresh worker replays the
--- journal up to the pause, host.input returns input there, and from then on
--- the run is live and recorded in the same journal.
function M.resume(dir, input, opts)
  opts = opts or {}
  local s, err = session.load(dir)
  if not s then return nil, err end
  if not s.final or s.final.kind ~= "pause" then
    return nil, string.format("ledger %s: the run is not paused (it ended with %s)", dir,
      s.final and ("cause " .. tostring(s.final.cause)) or "no end recorded")
  end
  local pol, perr, note = recorded_policy(s, opts.policy, opts.policy_changed)
  if not pol then return nil, perr, "policy" end
  s.inputs[#s.inputs + 1] = input
  local srv = session.server(s, true, replay_nested)
  local res, rerr, code = rerun(s, pol, srv, { ledger = dir, durability = opts.durability },
    { input = input, run = s.run })
  if not res then return nil, rerr, code end
  res.note = note
  return res
end

--- airlock.branch(dir, at_seq, newdir) -> true, or nil, message: a new session
--- holding the journal's records up to at_seq, which must be a pause of the
--- run, so the branch can be resumed (and replays up to there alone).
--- (airlock.ledger.branch copies any prefix, for the journal alone.)
function M.branch(dir, at, newdir)
  local ledger = require "airlock.ledger"
  -- A branch is to be resumed: it ends at a pause of the run, or it would be
  -- a session nothing can continue (and whose replay can only diverge).
  if math.type(at) == "integer" then
    local kind, pauses = nil, {}
    pcall(function()   -- a journal that cannot be read is ledger.branch's to report
      for rec in ledger.records(dir) do
        if rec.seq == at then kind = rec.kind end
        if rec.kind == "pause" then pauses[#pauses + 1] = tostring(rec.seq) end
      end
    end)
    if kind and kind ~= "pause" then
      return nil, string.format("record %d is a '%s', not a pause: a branch must end where the run paused, " ..
        "so it can be resumed (%s)", at, kind, #pauses > 0 and "this session paused at seq " ..
        table.concat(pauses, ", ") or "this session never paused"), "branch"
    end
  end
  return ledger.branch(dir, at, newdir)
end

--- airlock.handlers: ready-made effect handlers (workspace, kv, clock, random,
--- log, modules, http, deny); see lua/airlock/handlers.lua.
M.handlers = setmetatable({}, { __index = function(t, k)
  local mod = require "airlock.handlers"
  setmetatable(t, { __index = mod })
  return mod[k]
end })

M.ledger = setmetatable({}, { __index = function(t, k)
  local mod = require "airlock.ledger"
  setmetatable(t, { __index = mod })
  return mod[k]
end })

--- airlock.confine(spec) -> { landlock = "applied: ...", seccomp = "applied: ..." }, or
--- nil, message, errno: confines the calling process for good (it and its future
--- children). spec = { landlock = { read = {paths}, write = {paths}, exec = {paths},
--- bind = {ports}, connect = {ports}, scope = true }, seccomp = { promises = "stdio rpath",
--- syscalls = {names}, mode = "allow" | "deny", refuse = "kill" | "EPERM" | ... },
--- no_new_privs = true }. Call it while single-threaded.
M.confine = core.confine

local SPAWN_KEYS = { argv = true, confine = true, namespaces = true, rlimits = true, env = true,
                     workdir = true, workspace = true, deadline_ms = true, capture = true }

local function spawn_env(env)
  if env == nil then return nil end
  if type(env) ~= "table" then error("spawn: 'env' must be a list of \"K=V\" or a map", 3) end
  local out, path = {}, nil
  for i, v in ipairs(env) do
    if type(v) ~= "string" or not v:find("=", 1, true) then
      error(string.format("spawn: env[%d] must be a \"K=V\" string", i), 3)
    end
    out[#out + 1] = v
  end
  for k, v in pairs(env) do
    if math.type(k) ~= "integer" then
      if type(k) ~= "string" or type(v) ~= "string" then error("spawn: env must map names to strings", 3) end
      out[#out + 1] = k .. "=" .. v
    end
  end
  table.sort(out)
  for _, kv in ipairs(out) do path = path or kv:match("^PATH=(.*)") end
  return out, path
end

local process_methods = {}
local process_mt = { __index = process_methods }

--- p:wait() -> result {ok, cause, exit_code, signal, stdout, stderr, usage, message}.
function process_methods:wait()
  while self._run:live() do
    local _, err = self._broker:_step(-1)
    if err then return nil, err end
  end
  return self._run:result()
end

--- p:kill(): ends the process (and everything it started); wait() then says cancelled.
function process_methods:kill()
  if self._run:live() then self._run:cancel() end
  return true
end

--- p:pid() -> the pid, or nil once it has ended.
function process_methods:pid() return self._run:pid() end

function process_mt.__close(p) p._broker:close() end
process_mt.__gc = process_mt.__close

--- airlock.spawn{argv = {...}, confine = spec, namespaces = {...} | "all", rlimits = {...},
--- env = {"K=V"} | {K = "V"}, workdir = path, deadline_ms = ms | "2s", capture = bytes | "64K"}
--- -> process, or nil, message, errno. A plain program, started confined: namespaces,
--- rlimits (policy units), a capability drop (with a user namespace, or as root), then the confinement
--- spec (airlock.confine's form; its seccomp filter must allow execve: promise 'exec').
--- In kill mode a refused call ends the run with cause seccomp, the call named.
function M.spawn(opts)
  if type(opts) ~= "table" then error("spawn: expects a table {argv = {...}, ...}", 2) end
  for k in pairs(opts) do
    if not SPAWN_KEYS[k] then error(string.format("spawn: unknown option '%s'", tostring(k)), 2) end
  end
  local argv = opts.argv
  if type(argv) ~= "table" or type(argv[1]) ~= "string" then
    error("spawn: 'argv' must be a list {program, args...} of strings", 2)
  end
  local env, path = spawn_env(opts.env)
  argv = { table.unpack(argv) }
  argv[1] = program.find(argv[1], path)   -- in the child's PATH, else the usual one
  if not argv[1] then return nil, "spawn: '" .. opts.argv[1] .. "' not found in PATH", 2 end
  local schema = policy.SCHEMA.confine
  local namespaces, rlimits
  if opts.namespaces ~= nil then
    local why
    namespaces, why = schema.namespaces(opts.namespaces)
    if not namespaces then error("spawn: 'namespaces' must be " .. why, 2) end
  end
  if opts.rlimits ~= nil then
    if type(opts.rlimits) ~= "table" then error("spawn: 'rlimits' must be a table", 2) end
    rlimits = {}
    for k, v in pairs(opts.rlimits) do
      local check = schema.rlimits[k]
      if not check then error(string.format("spawn: unknown rlimit '%s'", tostring(k)), 2) end
      local val, why = check(v)
      if not val then error(string.format("spawn: rlimits.%s must be %s", k, why), 2) end
      rlimits[k] = val
    end
  end
  local function unit(name, parse)
    if opts[name] == nil then return nil end
    local v, why = parse(opts[name])
    if not v then error(string.format("spawn: '%s' must be %s", name, why), 3) end
    return v
  end
  -- The workspace: the working directory (unless workdir says otherwise),
  -- bound nosuid in the program's mount namespace and, when root, idmapped.
  local workspace = opts.workspace
  if workspace ~= nil then
    if type(workspace) ~= "string" or workspace:sub(1, 1) ~= "/" then
      error("spawn: 'workspace' must be an absolute directory path", 2)
    end
    local mount = false
    for _, ns in ipairs(namespaces or {}) do mount = mount or ns == "mount" end
    if not mount then
      error("spawn: 'workspace' needs the mount namespace (it is bound nosuid there, and idmapped when root)", 2)
    end
    local real = core.fs_realpath(workspace)
    local wok, werr = program.check_workspace(real or workspace,
      type(opts.confine) == "table" and type(opts.confine.landlock) == "table" and opts.confine.landlock or nil)
    if not wok then return nil, werr, "workspace" end
    if opts.workdir ~= nil and opts.workdir ~= workspace then
      error("spawn: 'workdir' and 'workspace' differ; a workspace is the working directory", 2)
    end
  end
  -- Capabilities are dropped wherever that is possible.
  local drop = program.can_drop_caps(namespaces)
  local b = core.broker()
  local run, err, code = b:_start {
    argv = argv, env = env, workdir = opts.workdir or workspace, workspace = workspace ~= nil or nil,
    program = true, handlers = {},
    deadline_ms = unit("deadline_ms", policy.parse_duration),
    capture_max = unit("capture", policy.parse_size),
    namespaces = namespaces, rlimits = rlimits, confine = opts.confine,
    drop_caps = drop or nil,
  }
  if not run then b:close(); return nil, err, code end
  return setmetatable({ _broker = b, _run = run }, process_mt)
end

--- airlock.exec{argv = {...}, policy = "tool", workspace = dir, ...} -> result:
--- a program run confined by the policy's tool authority (airlock.exec).
function M.exec(opts) return require("airlock.exec").exec(opts) end

return M
