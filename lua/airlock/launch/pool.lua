-- airlock.launch.pool -- the warm pool: prepared workers kept ahead of their
-- runs (b:warm, b:pooled), taken by the start function for the runs they fit.
--
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
local core = require "airlock.core"
local policy = require "airlock.policy"
local secrets = require "airlock.secrets"
local util = require "airlock.util"
local nest = require "airlock.nest"
local registry = require "airlock.launch.registry"
local init_map = require "airlock.launch.init_map"
local run_handlers = require "airlock.launch.run_handlers"
local resolve = require "airlock.launch.resolve"

local M = {}

local broker_methods = core.broker_methods
local brokers = registry.brokers
local POOL_READY_MS = 10000   -- how long b:warm waits for a worker's ready
local host_side               -- (below) the host's side of a worker's run, made ahead

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
  local handlers = run_handlers.of({ log = {}, log_bytes = 0 }, rp)
  return init_map.build { prepare = true, limits = rp.limits,
                          effects = handlers and run_handlers.names(handlers) or {},
                          notify = init_map.notify(rp.policy), confine = what.plan.init }
end

-- The pool key: what the spawner and init give its workers.
local function pool_key(argv, plan_start, init)
  return util.key_of { argv, plan_start, init }
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
  p.host[run:id()] = host_side(b, p, run:id())
  registry.state(b).parked[run:id()] = p
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

--- find(b, spec, what, rp) -> the pool a run would take its worker from, or
--- nil: found by its policy's name or object (no resolution), else by key
--- once the run's policy and plan are known (what, rp).
function M.find(b, spec, what, rp)
  local bs = brokers[b]
  if not (bs and bs.pool) then return nil end
  if not what then
    local ref = pool_ref(b, spec.policy)
    return ref ~= nil and bs.pool_by[ref] or nil
  end
  return bs.pool[pool_key(what.argv, what.plan.start, prepared_init(rp, what))]
end

--- take(b, p) -> a joined worker of pool p, taken out of it, its seed and
--- the host's side made for its run (host_side); or nil.
function M.take(b, p)
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

--- give_back(b, run, p): a taken worker whose run did not start is
--- cancelled; its end is the pool's.
function M.give_back(b, run, p)
  run:cancel()
  brokers[b].parked[run:id()] = p
end

--- send(run, name, source, input, limits, handlers, ctx) -> true: gives a
--- taken worker its run: the start frame, its deadline and frame limits
--- (limits: {deadline_ms, max_frame, capture_max}), and what its calls need
--- (handlers, ctx); nil, message, "input" when the input cannot be sent
--- (the worker is still parked); or nil, message, code.
function M.send(run, name, source, input, limits, handlers, ctx)
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
  if not run_handlers.of({ log = {}, log_bytes = 0 }, rp) then return false end
  local handlers, builtin = {}, {}
  for k in pairs(run_handlers.builtin({}, rp.limits)) do
    if not (pol.effects and pol.effects[k] ~= nil) then builtin[k] = true end
  end
  for k, h in pairs(pol.effects or {}) do
    if h then handlers[k] = nest.runner(h, k) end
  end
  local notify
  for _, name in ipairs(pol.notify or {}) do notify = notify or {}; notify[name] = true end
  local limits = rp.limits
  p.fast = { admitted = policy.always_admitted(pol, "untrusted"), limits = limits,
             log_max = limits.output or init_map.OUTPUT_DEFAULT, digest = policy.digest(pol),
             unpark = { deadline_ms = limits.deadline_ms, max_frame = limits.max_frame, capture_max = limits.capture },
             handlers = handlers, builtin = builtin, notify = notify, secrets = secrets.readonly({}) }
  return p.fast
end

-- The host's side of the run a worker of pool p will serve, made when the
-- worker is spawned (the host's idle time): its record, handlers and ctx.
function host_side(b, p, id)
  local f = pool_fast(p)
  if not f then return nil end
  local st = { log = {}, log_bytes = 0, log_max = f.log_max, policy = p.policy.name,
               policy_base = policy.base_of(p.policy), plan = p.plan,
               digest = f.digest, pooled = true, pol = p.policy, broker = b, serial = id,
               nest = nest.state({}, f.limits, id + 1) }   -- its deadline is set at the start
  local handlers = {}
  for k, h in pairs(f.handlers) do handlers[k] = h end
  for k, h in pairs(run_handlers.builtin(st, f.limits)) do
    if f.builtin[k] then handlers[k] = nest.runner(h, k) end
  end
  local ctx = { policy = st.policy, secrets = f.secrets, nest = nest.method, notify = f.notify }
  if f.notify then
    ctx.on_note_error = run_handlers.note_error_sink(st)
  end
  return { st = st, handlers = handlers, ctx = ctx }
end

--- start(b, p, spec) -> a run under pool p's policy, on one of its joined
--- workers, with nothing resolved or built that the pool holds already; nil
--- when the pool has no joined worker (spawn one); or nil, message, code.
--- Only the checks come before the start frame: the rest of the host's side
--- is done while the worker wakes (its calls are read in b:step, later).
--- The record is returned second, for the start function to finish.
function M.start(b, p, spec)
  local f = pool_fast(p)
  if not f then return nil end
  local source, name = resolve.guest(spec.guest, spec.name, resolve.CALLER)
  if not source then return nil, name end
  if not f.admitted then   -- a policy with less confinement: its warning, or its refusal
    local admitted, aerr = policy.admit(p.policy, "untrusted", "guests", b)
    if not admitted then return nil, aerr, "confinement" end
  end
  local run, _, h = M.take(b, p)
  if not run then return nil end
  local id = run:id()
  h = h or host_side(b, p, id)
  local sent, err, code = M.send(run, name, source, spec.input, f.unpark, h.handlers, h.ctx)
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
  st.on_log = spec.on_log
  -- The nested runs' deadline is the run's own, counted from its start.
  if st.nest.deadline_at then st.nest.deadline_at = run:_t_start() + st.nest.deadline_ms end
  registry.register(b, run, st)
  return run, st
end

--- forget_ended(bs, done) -> done without the parked workers among them: a
--- parked worker that died (or that b:warm cancelled) is its pool's loss,
--- not a run's end (b:step).
function M.forget_ended(bs, done)
  if not (bs and next(bs.parked)) then return done end
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
  return kept
end

--- refill(b, bs, done): refilling pools (b:warm(n, policy, {refill =
--- true})): one worker a step, and only in a step that had nothing to
--- deliver, so the host's loop is never held for more than one spawn when it
--- has work.
function M.refill(b, bs, done)
  if not (bs and bs.pool and #done == 0) then return end
  for _, p in pairs(bs.pool) do
    if p.refill and not p.failed and #p.parked < p.want then
      -- It joins when its ready is read and checked, in a later step.
      if not pool_spawn(b, p) then p.refill = false end   -- cannot spawn now: b:warm again says why
      break
    end
  end
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
  local rp, err, code = resolve.policy(self, { policy = pol })
  if not rp then return nil, err, code end
  local most = rp.limits.pool or policy.default("limits.pool")
  if n > most then
    return nil, string.format("warm: %d workers is over the policy's limits.pool (%d)", n, most), "policy"
  end
  local what
  what, err, code = resolve.what({ guest = "" }, rp.policy)
  if not what then return nil, err, code end
  local bs = registry.state(self)
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
  local p = M.find(self, { policy = pol })
  if not p then
    local rp, err, code = resolve.policy(self, { policy = pol })
    if not rp then return nil, err, code end
    local what = resolve.what({ guest = "" }, rp.policy)
    p = what and M.find(self, {}, what, rp)
  end
  local n = 0
  for _, r in ipairs(p and p.parked or {}) do if r:_joined() then n = n + 1 end end
  return n
end

return M
