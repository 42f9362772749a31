-- airlock.nest -- nested runs: a handler starts a run of its own from inside
-- an effect (ctx:nest{...}), on the parent's broker, and the parent's call
-- waits for it without holding the broker up.
--
-- How it waits: every handler runs in a coroutine of its own (runner). A
-- handler that calls ctx:nest starts the nested run and yields; the runner
-- then answers the broker with airlock.defer(), so b:step goes on serving
-- every other run. When the nested run ends, b:step resumes the handler with
-- its result (finished); whatever the handler then returns or raises is the
-- parent call's answer, as if it had answered at once.
--
-- What bounds it: the parent's policy's limits.nest.depth (how deep: a run at
-- that depth cannot nest) and limits.nest.runs (how many nested runs one
-- top-level run's tree may start in all); a nested run's deadline is at most
-- what is left of its parent's; its records count against its parent's
-- limits.ledger; its policy may only tighten its parent's (compose.tighter).
--
-- Recording: a recorded parent records its nested runs in the same session: a
-- `nest` record (the nested run's init, naming the parent run and the call it
-- runs under) and then the nested run's own call, reply and done records.
-- Replaying the parent replays each nested run from those records
-- (replay_child), with no handler run at all.
--
-- Where it sits: below the launch package's pool and start function, which
-- use its runner and state; it finds a run's record in the launch registry,
-- and starts a nested run through the function that started the parent
-- (record.start, the one start function), so it requires nothing above it.
local core = require "airlock.core"
local policy = require "airlock.policy"
local compose = require "airlock.policy.compose"
local session = require "airlock.session"
local registry = require "airlock.launch.registry"
local spec = require "airlock.launch.spec"

local M = {}

M.DEPTH_DEFAULT = policy.default("limits.nest.depth")
M.RUNS_DEFAULT = policy.default("limits.nest.runs")

local DEFER = core.defer()
local WAIT = setmetatable({}, { __name = "airlock.nest.wait" })   -- what a waiting handler yields

-- The coroutine of each call being handled, to its ctx (weak keys): ctx:nest
-- must be called from the handler itself, not from a coroutine of its own.
local calls = setmetatable({}, { __mode = "k" })

-- ------------------------------------------------------------ the runner

-- The first line of an error, as the C dispatcher gives a guest (at most 600 bytes).
local function first_line(e)
  local s = tostring(e)
  s = s:match("^[^\n]*")
  return #s > 560 and s:sub(1, 560) .. "..." or s
end

-- A handler's coroutine is kept for the next call once its handler has
-- answered: creating one per call was a large part of an effect's cost in
-- the host. Each runs `body`: the handler in a pcall, so that its error
-- ends the call, not the coroutine; then it yields DONE with the outcome
-- and waits for the next handler. What the last call left (handler, args,
-- ctx) is dropped before it waits, so an idle coroutine keeps no run alive.
local DONE = setmetatable({}, { __name = "airlock.nest.done" })   -- what a finished call yields
local SUSPEND = setmetatable({}, { __name = "airlock.nest.suspend" })   -- what suspend yields
local suspended = setmetatable({}, { __mode = "k" })   -- record -> cancel: the I/O its call waits on
local IDLE_MAX = 32
local idle, nidle = {}, 0

local function body(h, args, ctx)
  while true do
    local ok, v = pcall(h, args, ctx)
    h, args, ctx = nil, nil, nil
    h, args, ctx = coroutine.yield(DONE, ok, v)
  end
end

local function retire(co)
  calls[co] = nil
  if nidle < IDLE_MAX then nidle = nidle + 1; idle[nidle] = co else coroutine.close(co) end
end

-- Where a handler's coroutine is after a resume: finished (its answer goes
-- to the call now, or is returned to the dispatcher on the first resume) or
-- waiting on a nested run (registered on the run's record).
local function settle(co, ctx, effect, first, resumed, a, ok, v)
  if resumed and a == DONE then
    retire(co)
    if first then
      if not ok then error(v, 0) end
      return v
    end
    local run = ctx.handle
    if not run:live() then return end
    if ok then
      run:reply(ctx.seq, v)
    else
      local why = core.denial(v)   -- a refusal (core.deny) is read by its type
      if why then run:fail(ctx.seq, "denied: " .. first_line(why), "denied")
      else run:fail(ctx.seq, string.format("handler for '%s' failed: %s", effect, first_line(v))) end
    end
    return
  end
  if resumed and a == SUSPEND then
    -- A handler waiting on the host's own I/O (suspend): ok is its register
    -- function, given the resume function that answers the call later.
    local st = registry.record_of(ctx.handle)
    if st and v then suspended[st] = v end
    ok(function(...)
      if st then suspended[st] = nil end
      if not ctx.handle:live() then coroutine.close(co) calls[co] = nil return end
      settle(co, ctx, effect, false, coroutine.resume(co, ...))
    end)
    if first then return DEFER end
    return
  end
  if not resumed or a ~= WAIT then
    -- A bare coroutine.yield from a handler: not something a call can wait on.
    coroutine.close(co)
    calls[co] = nil
    local msg = resumed and "nest: a handler yielded outside ctx:nest; only ctx:nest may suspend a call"
      or ("nest: " .. first_line(a))
    if first then error(msg, 0) end
    if ctx.handle:live() then ctx.handle:fail(ctx.seq, string.format("handler for '%s' failed: %s", effect, msg)) end
    return
  end
  local child = registry.record_of(ok)
  child.nest.waiter = { co = co, ctx = ctx, effect = effect }
  if first then return DEFER end
end

--- runner(handler, effect) -> the handler, run in a coroutine (a kept one,
--- or a new one) per call, so that ctx:nest can suspend it (see above). A
--- handler that does not nest answers as before: the same value, the same
--- error.
function M.runner(h, effect)
  return function(args, ctx)
    if ctx.note then return h(args, ctx) end   -- a note has no answer to wait for
    local co
    if nidle > 0 then co = idle[nidle]; idle[nidle] = nil; nidle = nidle - 1 else co = coroutine.create(body) end
    calls[co] = ctx
    return settle(co, ctx, effect, true, coroutine.resume(co, h, args, ctx))
  end
end

--- suspendable() -> true inside a call's handler (its coroutine), where
--- suspend may wait.
function M.suspendable()
  local co, main = coroutine.running()
  return not main and calls[co] ~= nil
end

--- suspend(register, cancel) -> what the call's handler is resumed with. For
--- a handler that waits on the host's own I/O without holding the broker up
--- (handlers.http): register(resume) is called once, at once, and keeps
--- resume; calling resume(...) later goes on with the handler, whose answer
--- is then the call's. If the run ends first, cancel() is called (the I/O is
--- dropped), and a resume that still comes does nothing.
function M.suspend(register, cancel)
  if not M.suspendable() then error("nest.suspend: not inside a call's handler", 2) end
  return coroutine.yield(SUSPEND, register, cancel)
end

--- finished(record, result): the nested run of record has ended with
--- result: its parent's handler goes on from ctx:nest (b:step calls this
--- once per ended nested run, after the step's other results).
function M.finished(st, res)
  local w = st.nest and st.nest.waiter
  if not w then return end
  st.nest.waiter = nil
  local parent = st.nest.parent
  if parent.nest.children then parent.nest.children[st.nest.handle] = nil end
  if parent.recorder and st.recorder then
    parent.recorder.bytes = parent.recorder.bytes + st.recorder.bytes   -- limits.ledger is the tree's
  end
  if not w.ctx.handle:live() then coroutine.close(w.co) return end
  settle(w.co, w.ctx, w.effect, false, coroutine.resume(w.co, res))
end

--- ended(record, cause): a run has ended; the nested runs it still waits on
--- (and theirs) are cancelled: they were started for it, and nobody else can
--- take their answer. Their end is recorded now, before the parent's (whose
--- end may close the ledger they share); their own end, later, is not.
function M.ended(st, cause)
  local cancel = suspended[st]
  if cancel then suspended[st] = nil pcall(cancel) end
  local kids = st.nest and st.nest.children
  if not kids then return end
  st.nest.children = nil
  for run in pairs(kids) do
    local child = registry.record_of(run)
    if run:live() and child then
      M.ended(child, "cancelled")
      if child.recorder and not child.nest.recorded_end then
        child.recorder:append("done", { cause = "cancelled", ok = false,
          message = string.format("cancelled: its parent run ended first (cause %s)", tostring(cause)) })
        child.nest.recorded_end = true
      end
      run:cancel()
    end
  end
end

-- ------------------------------------------------------------ bounds

local function limit(pol, key, default)
  local n = pol.limits and pol.limits.nest
  local v = n and n[key]
  if v == nil then return default end
  return v
end

-- A failure of ctx:nest before the nested run starts: "nested: WORD: why".
local function refuse(word, fmt, ...)
  error(string.format("nested: %s: " .. fmt, word, ...), 0)
end

-- The checks every nested run passes, live or replayed: depth, the tree's
-- count, the parent's time left. -> the nested run's deadline in ms (0: none).
local function bounds(st, own_deadline)
  local pol, n = st.pol, st.nest
  local depth_max = limit(pol, "depth", M.DEPTH_DEFAULT)
  if n.depth >= depth_max then
    refuse("depth", "run %d is at depth %d and its policy's limits.nest.depth is %d, so it cannot start " ..
      "another nested run (a guest recursing through nested runs stops here; raise limits.nest.depth in the " ..
      "top-level policy if the nesting is meant)", st.ledger_run or st.serial or 0, n.depth, depth_max)
  end
  local runs_max = limit(pol, "runs", M.RUNS_DEFAULT)
  if n.tree.count >= runs_max then
    refuse("runs", "this run's tree has started %d nested runs, its policy's limits.nest.runs (%d); " ..
      "no more are started", n.tree.count, runs_max)
  end
  local deadline = own_deadline or 0
  if n.deadline_at then
    local left = math.floor(n.deadline_at - core.now_ms())
    if left < 1 then
      refuse("deadline", "the parent run has no time left for a nested run (its deadline is %d ms)", n.deadline_ms)
    end
    if deadline == 0 or deadline > left then deadline = left end
  end
  return deadline
end

-- The nested run's policy: the parent's (nil), a policy taken as given (a
-- frozen policy, a stock name, a file), or a bare table laid over the
-- parent's. It may not loosen any field of the parent's.
local function child_policy(parent, p)
  local child
  if p == nil then
    child = parent
  elseif type(p) == "table" and not policy.is_policy(p) then
    local ok, r = pcall(policy.layer, parent, p)
    if not ok then refuse("policy", "%s", tostring(r)) end
    child = r
  elseif type(p) == "table" or type(p) == "string" then
    local r, err = policy.resolve(p, "untrusted")
    if not r then refuse("policy", "%s", tostring(err)) end
    child = r
  else
    error("nest: 'policy' must be a policy, a stock name, a file path or a table of overrides", 3)
  end
  local why = compose.tighter(parent, child)
  if why then
    refuse("policy", "the nested run's policy would loosen its parent's at %s; a nested run may only " ..
      "tighten what its parent has (give a table of overrides that narrow it, or no policy at all)", why)
  end
  return child
end

local NEST_KEYS = { guest = true, name = true, policy = true, input = true, seed = true, on_log = true,
                    result = true }

-- Starts the nested run (a run spec, airlock.launch.spec.nested) through
-- the function that started its parent, waits for it (yields), and gives
-- back its result.
local function start_and_wait(ctx, st, run_spec)
  local run, err, code = st.start(st.broker, run_spec)
  if not run then refuse(code or "start", "the nested run could not be started: %s", tostring(err)) end
  st.nest.tree.count = st.nest.tree.count + 1
  st.nest.children = st.nest.children or {}
  st.nest.children[run] = true
  registry.record_of(run).nest.handle = run
  return coroutine.yield(WAIT, run)
end

--- nest(ctx, opts) -> the nested run's value (ctx:nest{guest = ..., policy
--- = ..., input = ..., name = ..., seed = ..., on_log = ..., result = bool}).
--- Raises "nested: CAUSE: message" when it fails: a bound (depth, runs,
--- deadline, policy, ledger) before it starts, else the cause it ended with.
--- result = true gives the whole result table instead, failed or not.
function M.nest(ctx, opts)
  if type(ctx) ~= "table" or ctx.handle == nil then error("nest: call it as ctx:nest{...}", 2) end
  if type(opts) ~= "table" then error("nest: expects a table {guest = ..., policy = ..., input = ...}", 2) end
  for k in pairs(opts) do
    if not NEST_KEYS[k] then error(string.format("nest: unknown option '%s'", tostring(k)), 2) end
  end
  if type(opts.guest) ~= "string" then error("nest: 'guest' must be Lua source or the path of a .lua file", 2) end
  local co = coroutine.running()
  if calls[co] ~= ctx then
    error("nest: ctx:nest must be called from the effect's handler itself (not after it returned, " ..
      "nor from a coroutine of its own)", 2)
  end
  local st = registry.record_of(ctx.handle)
  if not st or not st.nest then error("nest: this call's run is unknown to airlock", 2) end
  if st.server and not st.server.live then
    refuse("diverged", "a replayed run cannot start nested runs live")
  end
  local pol = child_policy(st.pol, opts.policy)
  local own = pol.limits and pol.limits.deadline_ms or 0
  local deadline = bounds(st, own)
  local ledger_run, max_bytes
  if st.recorder then
    local rec = st.recorder
    if rec.max_bytes > 0 then
      max_bytes = rec.max_bytes - rec.bytes
      if max_bytes < 1 then
        refuse("ledger", "this run's records have reached its policy's limits.ledger (%d bytes); a nested run " ..
          "could record nothing", rec.max_bytes)
      end
    end
    ledger_run = st.nest.tree.next_run
    st.nest.tree.next_run = ledger_run + 1
  end
  local res = start_and_wait(ctx, st, spec.nested({
    guest = opts.guest, name = opts.name, policy = pol, input = opts.input, seed = opts.seed,
    on_log = opts.on_log, ledger = st.recorder and st.ledger or nil,
  }, { parent = st, ctx = ctx, deadline_ms = deadline, ledger_run = ledger_run, max_bytes = max_bytes }))
  if opts.result then return res end
  if res.ok then return res.value end
  if res.cause == "paused" then
    refuse("paused", "the nested run %d called host.input, and a nested run cannot pause (its parent's call " ..
      "waits for it); give it what it needs as its input", ledger_run or res.run)
  end
  refuse(res.cause, "the nested run %d (depth %d) ended: %s", ledger_run or res.run, st.nest.depth + 1,
    tostring(res.message))
end

--- method(ctx, opts): ctx.nest, the same as M.nest. It closes over this
--- module alone, so a policy digest taken over something that holds a ctx
--- (a handler keeping its ctx for a deferred answer) does not walk into
--- the broker's live state (policy.digest skips module tables).
function M.method(ctx, opts) return M.nest(ctx, opts) end

-- ------------------------------------------------------------ per-run state

--- state(spec, limits, next_run) -> the record's nest field: { depth, tree
--- = {count, next_run}, parent, deadline_at, deadline_ms }; spec: the run's
--- (airlock.launch.spec; its nested field, for a nested run).
--- A top-level run starts a tree; a nested one joins its parent's.
function M.state(run_spec, limits, next_run)
  local n = run_spec.nested
  local dl = n and n.deadline_ms or limits.deadline_ms
  local s = { depth = 0, deadline_ms = dl }
  if dl and dl > 0 then s.deadline_at = core.now_ms() + dl end
  if n then
    s.depth = n.parent.nest.depth + 1
    s.tree = n.parent.nest.tree
    s.parent = n.parent
  else
    s.tree = { count = 0, next_run = next_run }
  end
  return s
end

-- ------------------------------------------------------------ replay

-- The recorded limits of a nested run, never looser than the replaying
-- parent's: a journal may narrow a replay (which then differs), never widen it.
local LIMIT_KEYS = { "instructions", "memory", "output", "deadline_ms", "turn_instructions", "cpu", "turn_cpu" }
local function clamp_limits(recorded, parent)
  local out = {}
  for _, k in ipairs(LIMIT_KEYS) do
    local r = type(recorded) == "table" and math.tointeger(recorded[k]) or nil
    local p = parent.limits and parent.limits[k] or 0
    if r == nil or r < 0 then r = p end
    if p ~= 0 and (r == 0 or r > p) then r = p end
    out[k] = r
  end
  return out
end

--- replay_child(ctx, child, server_of) -> true: replays one nested run
--- recorded under the call being served (child: session.load's run table),
--- in a fresh worker answered only from its records, under the parent's
--- bounds. Raises (after aborting the parent with cause diverged) when it
--- ends otherwise than recorded.
function M.replay_child(ctx, child, server_of)
  local st = registry.record_of(ctx.handle)
  local function diverged(msg)
    ctx.handle:abort("diverged", msg)
    error(msg, 0)
  end
  local init = child.init
  if child.final and child.final.started == false then return true end   -- it never ran: nothing to replay
  local ok, deadline = pcall(bounds, st, nil)
  if not ok then diverged(string.format("diverged at seq %d: the journal's nested run %s cannot be replayed: %s",
    init.seq, tostring(init.run), tostring(deadline))) end
  if type(init.guest) ~= "table" or type(init.guest.source) ~= "string" then
    diverged(string.format("diverged at seq %d: the nest record holds no guest source", init.seq))
  end
  local limits = clamp_limits(init.limits, st.pol)
  if deadline > 0 and (limits.deadline_ms == 0 or limits.deadline_ms > deadline) then limits.deadline_ms = deadline end
  local pol = policy.layer(st.pol, { name = st.pol.name, limits = limits })   -- still the parent's
  local grant = {}
  for _, name in ipairs(type(init.effects) == "table" and init.effects or {}) do
    if type(name) == "string" then grant[name] = true end
  end
  local srv = server_of(child)
  local res = start_and_wait(ctx, st, spec.nested({
    guest = init.guest.source, name = type(init.guest.name) == "string" and init.guest.name or nil,
    policy = pol, input = init.input, seed = math.tointeger(init.seed),
  }, { parent = st, ctx = ctx, deadline_ms = limits.deadline_ms, grant = grant }, srv))
  st.nest.tree.replayed = (st.nest.tree.replayed or 0) + 1
  local fin = child.final
  local want_cause = fin and fin.cause
  if res.cause == "diverged" and want_cause ~= "diverged" then
    diverged(string.format("diverged at seq %d: in the nested run %s: %s", init.seq, tostring(init.run),
      tostring(res.message)))
  end
  if not fin or res.cause ~= want_cause or not session.same(res.value, fin.value)
     or srv.next ~= #child.calls + 1 then
    diverged(string.format("diverged at seq %d: the nested run %s ended with cause %s %s; the journal has %s",
      init.seq, tostring(init.run), tostring(res.cause), session.show(res.value),
      fin and string.format("cause %s %s (seq %d)", tostring(fin.cause), session.show(fin.value), fin.seq)
        or "no end for it"))
  end
  return true
end

return M
