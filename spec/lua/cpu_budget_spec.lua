-- cpu_budget_spec.lua -- limits.cpu and limits.turn_cpu: budgets of the
-- worker's own CPU time (user + system), for the run and for one turn. The
-- worker reads its CPU clock at a timer's tick (once per ms of CPU) from a
-- hook on the running coroutine, so a budget stops a runaway guest past any
-- pcall, in any coroutine, in a __close, with or without an instruction
-- budget beside it; between ticks the interpreter runs without a hook. Every
-- bound below is in CPU time, which a loaded or slow machine does not change
-- (it only takes longer to spend): nothing here races a clock.
local airlock = require "airlock"
local H = require "helper"

local policy = airlock.policy

-- The wall-clock deadline is the guard, never the bound under test: on a
-- loaded machine a budget of CPU time takes longer than its own length to spend.
local function run(guest, limits, extra)
  local l = { deadline_ms = H.GUARD_S * 1000 }
  for k, v in pairs(limits or {}) do l[k] = v end
  limits = l
  local opts = { guest = guest, policy = policy.extend("untrusted", { limits = limits }) }
  for k, v in pairs(extra or {}) do opts[k] = v end
  local res, err = airlock.run(opts)
  assert(res, err)
  return res
end

local function cpu_ms(res)
  return res.usage.user_ms + res.usage.sys_ms
end

-- The budgets alone, without the instruction count (whose hook would catch
-- the same guests): 0 turns it off.
local BUDGET = { cpu = 150, instructions = 0, deadline_ms = H.GUARD_S * 1000 }
local RUN_MSG = "CPU budget of 150 ms used up (limits.cpu)"

describe("limits.cpu", function()
  it("lets a guest that stays under it run to its end (the control)", function()
    local res = run("local s = 0 for i = 1, 1e5 do s = s + i end return s", BUDGET)
    assert.equal("ok", res.cause, res.message)
    assert.equal(5000050000, res.value)
  end)

  for _, case in ipairs {
    { "a plain loop", "while true do end" },
    { "a loop inside pcall, retried", "while true do pcall(function() while true do end end) end" },
    { "a loop that catches its own errors with xpcall",
      "while true do xpcall(function() local t = {} while true do t[1] = 1 end end, function() end) end" },
    { "a coroutine.wrap'd loop", "coroutine.wrap(function() while true do end end)()" },
    { "a coroutine.resume'd loop",
      "local co = coroutine.create(function() while true do end end) return coroutine.resume(co)" },
    { "a coroutine in a coroutine",
      "coroutine.wrap(function() coroutine.wrap(function() while true do end end)() end)()" },
    { "a __close run by coroutine.close",
      "local co = coroutine.create(function() local x <close> = setmetatable({}, { __close = " ..
      "function() while true do end end }) coroutine.yield() end) coroutine.resume(co) coroutine.close(co)" },
    { "a metamethod", "local t = setmetatable({}, { __index = function() while true do end end }) return t.x" },
    { "string.gsub's callback", "return (('x'):rep(10):gsub('x', function() while true do end end))" },
    -- every tick's hook marks each frame of the stack: 10^5 of them must not
    -- leave the worker doing nothing but ticks
    { "a loop at the bottom of 10^5 calls",
      "local function deep(n) if n == 0 then while true do end end return 1 + deep(n - 1) end return deep(1e5)" },
    { "a loop in a coroutine at the bottom of 10^5 calls", "return coroutine.wrap(function() " ..
      "local function deep(n) if n == 0 then while true do end end return 1 + deep(n - 1) end return deep(1e5) end)()" },
  } do
    it("stops " .. case[1] .. " with cause cpu, naming the field", function()
      local res = run(case[2], BUDGET)
      assert.equal("cpu", res.cause, res.message)
      assert.equal(RUN_MSG, res.message)
      -- the guest had its budget, and the budget struck soon after: within
      -- 50 ms of CPU (the tick is 1 ms; the kernel's timer granularity and
      -- the worker's start-up before the guest's first instruction add to it)
      assert.is_true(cpu_ms(res) >= 150, "stopped early: " .. cpu_ms(res) .. " ms")
      assert.is_true(cpu_ms(res) < 200, "stopped late: " .. cpu_ms(res) .. " ms")
    end)
  end

  it("is checked beside an instruction budget too", function()
    local res = run("while true do end", { cpu = 150, instructions = 1e12 })
    assert.equal("cpu", res.cause, res.message)
    assert.equal(RUN_MSG, res.message)
    res = run("while true do end", { cpu = 60000, instructions = 1e6 })
    assert.equal("instructions", res.cause, res.message)
  end)

  it("holds on a prepared (pooled) worker", function()
    local pol = policy.extend("untrusted", { limits = BUDGET })
    local b <close> = airlock.broker()
    assert(b:warm(1, pol))
    local r = assert(b:start { guest = "while true do end", policy = pol })
    local res = r:wait(b)
    assert.is_true(res.pooled, "the run did not take the prepared worker")
    assert.equal("cpu", res.cause, res.message)
    assert.equal(RUN_MSG, res.message)
  end)

  it("holds in a nested run, under the nested run's own policy", function()
    local inner = policy.extend("untrusted", { limits = BUDGET })
    local res = run("return host.sub()", { cpu = 0, instructions = 0 }, {
      policy = policy.extend("untrusted", {
        limits = { instructions = 0, deadline_ms = H.GUARD_S * 1000 },
        effects = { sub = function(_, ctx)
          -- ctx:nest raises when the nested run ends otherwise than ok
          local ok, err = pcall(ctx.nest, ctx, { guest = "while true do end", policy = inner })
          return { ok = ok, err = tostring(err) }
        end },
      }),
    })
    assert.equal("ok", res.cause, res.message)
    assert.is_false(res.value.ok)
    assert.matches("^nested: cpu: the nested run %d+ %(depth 1%) ended: " .. RUN_MSG:gsub("%p", "%%%0") .. "$",
      res.value.err)
  end)

  it("is refused when it is not a duration", function()
    assert.has_error(function() policy.extend("untrusted", { limits = { cpu = "lots" } }) end)
  end)
end)

-- ------------------------------------------------------------------ turns

local TURN_MSG = "turn CPU budget of 40 ms used up (limits.turn_cpu: a turn ends when the host " ..
  "answers a deferred call)"

-- tick is deferred: the guest's turn ends when the host answers it.
local function turn_policy(state)
  state.pending = state.pending or {}
  return policy.extend("untrusted", {
    limits = { turn_cpu = 40, instructions = 0, deadline_ms = H.GUARD_S * 1000 },
    effects = {
      tick = function(_, ctx)
        state.pending[#state.pending + 1] = { run = ctx.handle, seq = ctx.seq }
        return airlock.defer()
      end,
      mark = function() return true end,
    },
  })
end

-- Steps until r ends, answering each deferred tick.
local function play(b, state, r)
  local guard = os.time() + 120   -- a hang guard, not a measure
  while r:live() do
    assert(os.time() < guard, "the run did not end")
    b:step(5)
    local pending = state.pending
    state.pending = {}
    for _, p in ipairs(pending) do
      if p.run:live() then assert(p.run:reply(p.seq, true)) end
    end
  end
  return r:result()
end

-- About a millisecond of CPU: a fortieth of a turn's budget.
local WORK = "local function work() local x = 0 for i = 1, 1e5 do x = x + i % 7 end return x end\n"

describe("limits.turn_cpu", function()
  it("lets turns under the budget add up to far more than it (the control)", function()
    local state = {}
    local b <close> = airlock.broker()
    local r = assert(b:start { guest = WORK .. [[
      local t0 = os.clock()
      local n = 0
      while os.clock() - t0 < 0.2 do work() host.tick() n = n + 1 end
      return n ]], policy = turn_policy(state) })
    local res = play(b, state, r)
    assert.equal("ok", res.cause, res.message)
    assert.is_true(cpu_ms(res) >= 200, "the turns used " .. cpu_ms(res) .. " ms in all")
  end)

  it("stops a guest that hogs one turn, past pcall, with the per-turn cause", function()
    local state = {}
    local b <close> = airlock.broker()
    local r = assert(b:start { guest = WORK .. [[
      for t = 1, 20 do work() host.tick() end
      host.mark("hogging")
      while true do pcall(function() while true do end end) end ]], policy = turn_policy(state) })
    local res = play(b, state, r)
    assert.equal("cpu", res.cause, res.message)
    assert.equal(TURN_MSG, res.message)
    assert.equal(21, res.usage.effects)   -- its 20 turns, and the mark
  end)
end)

-- ------------------------------------------------------------------ replay

describe("a run a CPU budget ended", function()
  local dirs = {}
  after_each(function()
    for _, d in ipairs(dirs) do os.execute("rm -rf " .. d) end
    dirs = {}
  end)

  local pol = policy.extend("untrusted", {
    limits = BUDGET,
    effects = { double = function(args) return args.n * 2 end, mark = function() end },
    notify = { "mark" },
  })

  for _, case in ipairs {
    { "after effects", "local s = 0 for i = 1, 3 do s = s + host.double{ n = i } end print('sum', s) " ..
      "while true do end", 4 },
    -- a note waits in the worker for its batch; a tick sends it, in the
    -- replay too, which has no budget to tick for
    { "after a note", "host.double{ n = 1 } host.mark{ at = 'loop' } while true do end", 2 },
    { "before any effect", "while true do end", 0 },
  } do
    it("replays exactly, " .. case[1] .. ": the same effects, values and cause", function()
      local dir = H.tmpdir() .. "/session"
      dirs[#dirs + 1] = dir:match("^(.*)/session$")
      local res = assert(airlock.run { guest = case[2], policy = pol, ledger = dir })
      assert.equal("cpu", res.cause, res.message)
      local rep = assert(airlock.replay(dir, { policy = pol }))
      assert.is_true(rep.identical, rep.result.message)
      assert.equal("cpu", rep.result.cause)
      assert.equal(RUN_MSG, rep.result.message)
      assert.equal(case[3], rep.served)
      assert.equal(0, rep.live_effects)
    end)
  end

  it("that ended otherwise is not ended by the replay (the control)", function()
    local dir = H.tmpdir() .. "/session"
    dirs[#dirs + 1] = dir:match("^(.*)/session$")
    local res = assert(airlock.run { guest = "return host.double{ n = 21 }", policy = pol, ledger = dir })
    assert.equal("ok", res.cause, res.message)
    local rep = assert(airlock.replay(dir, { policy = pol }))
    assert.is_true(rep.identical)
    assert.equal(42, rep.result.value)
  end)
end)
