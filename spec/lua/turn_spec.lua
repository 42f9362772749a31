-- turn_spec.lua -- limits.turn_instructions: a per-turn instruction budget for a
-- long-lived guest. A turn ends when the guest gets the answer to a call the
-- host deferred (run:reply, run:fail); the budget then starts afresh. A guest
-- that hogs one turn is stopped from within (past any pcall) with cause
-- instructions; one that does many turns, each under the budget, completes
-- however much it does in all. Recorded and replayed with the same turns.
local airlock = require "airlock"
local H = require "helper"

local policy = airlock.policy

local TURN = 50000   -- instructions a turn may use

-- The host's side: tick is deferred (the guest's turn ends when it is
-- answered), mark and ping answer at once. pending collects deferred ticks.
local function pol_with(state, limits)
  state.marks, state.pending = state.marks or {}, state.pending or {}
  return policy.extend("untrusted", {
    limits = limits or { turn_instructions = TURN, instructions = 0 },
    effects = {
      tick = function(_, ctx)
        state.pending[#state.pending + 1] = { run = ctx.handle, seq = ctx.seq }
        return airlock.defer()
      end,
      mark = function(v, ctx) state.marks[#state.marks + 1] = { run = ctx.run, v = v } return true end,
      ping = function() return true end,
    },
  })
end

-- Steps b, answering every waiting tick with that run's tick number (a few
-- with a deferred failure, which ends a turn too) until no run is live.
local function play(b, state, runs, fail_every)
  local ticks = {}
  local deadline = os.time() + H.GUARD_S   -- a hang guard
  while true do
    local live = false
    for _, r in ipairs(runs) do live = live or r:live() end
    if not live then break end
    assert(os.time() < deadline, "the runs did not end")
    b:step(5)
    local pending = state.pending
    state.pending = {}
    for _, p in ipairs(pending) do
      local tick = (ticks[p.run] or 0) + 1
      ticks[p.run] = tick
      if p.run:live() then
        if fail_every and tick % fail_every == 0 then assert(p.run:fail(p.seq, "late"))
        else assert(p.run:reply(p.seq, tick)) end
      end
    end
  end
  local out = {}
  for i, r in ipairs(runs) do out[i] = r:result() end
  return out
end

-- Work of about 12,000 instructions: a quarter of a turn's budget.
local WORK = "local function work() local x = 0 for i = 1, 4000 do x = x + i % 7 end return x end\n"

local WELL_BEHAVED = WORK .. [[
  local n, failed = 0, 0
  for _ = 1, 80 do
    work()
    local ok = pcall(host.tick)
    if not ok then failed = failed + 1 end
    n = n + 1
  end
  return { turns = n, failed = failed } ]]

-- Three good turns, a mark each; then a turn that never ends.
local HOG = WORK .. [[
  for t = 1, 3 do work() host.mark(t) host.tick() end
  host.mark("hogging")
  while true do end ]]

local function start(b, state, guest, extra)
  local opts = { guest = guest, policy = pol_with(state, extra and extra.limits) }
  for k, v in pairs(extra or {}) do if k ~= "limits" then opts[k] = v end end
  return assert(b:start(opts))
end

describe("limits.turn_instructions", function()
  it("lets a well-behaved guest do many turns whose total is many times the budget (control)", function()
    local b <close> = airlock.broker()
    local state = {}
    local res = play(b, state, { start(b, state, WELL_BEHAVED) }, 10)[1]
    assert.equal("ok", res.cause, res.message)
    assert.same({ turns = 80, failed = 8 }, res.value)
    -- 80 turns of ~12,000 instructions: ~19 times one turn's budget in all
    assert.is_true(80 * 12000 > 15 * TURN)
  end)

  it("is also the whole run's budget when the host never defers: the same work in one turn is stopped", function()
    local b <close> = airlock.broker()
    local state = {}
    -- the same guest, but tick answered at once: no turn ever ends
    local pol = policy.extend(pol_with(state), { effects = { tick = function() return 0 end } })
    local run = assert(b:start { guest = WELL_BEHAVED, policy = pol })
    local res = run:wait(b)
    assert.equal("instructions", res.cause)
    assert.matches("turn instruction budget of 50000 exhausted %(limits.turn_instructions", res.message)
  end)

  it("stops a guest that hogs one turn, with the cause; its earlier turns' effects are done", function()
    local b <close> = airlock.broker()
    local state = {}
    local res = play(b, state, { start(b, state, HOG) })[1]
    assert.equal("instructions", res.cause)
    assert.equal("turn instruction budget of 50000 exhausted (limits.turn_instructions: a turn " ..
      "ends when the host answers a deferred call)", res.message)
    local seen = {}
    for _, m in ipairs(state.marks) do seen[#seen + 1] = m.v end
    assert.same({ 1, 2, 3, "hogging" }, seen)
  end)

  it("is not reset by effects answered at once: a hog that pings in its loop is stopped too", function()
    local b <close> = airlock.broker()
    local state = {}
    local res = play(b, state, { start(b, state, [[
      host.tick()
      local n = 0
      while true do n = n + 1 if n % 100 == 0 then host.ping() host.mark(n) end end ]]) })[1]
    assert.equal("instructions", res.cause)
    assert.matches("^turn instruction budget of 50000 exhausted", res.message)
    assert.is_true(#state.marks > 5, "the pings were answered")
  end)

  it("cannot be caught: a pcall around the hog does not save it", function()
    local b <close> = airlock.broker()
    local state = {}
    local res = play(b, state, { start(b, state, WORK .. [[
      host.tick()
      local ok, err = pcall(function() while true do end end)
      host.mark("caught: " .. tostring(err))
      for _ = 1, 10 do host.tick() end
      return "survived" ]]) })[1]
    assert.equal("instructions", res.cause)
    assert.matches("^turn instruction budget", res.message)
    assert.same({}, state.marks, "nothing ran after the pcall")
  end)

  it("leaves the whole-run limits.instructions in force", function()
    local b <close> = airlock.broker()
    local state = {}
    local run = start(b, state, WELL_BEHAVED,
      { limits = { turn_instructions = TURN, instructions = 200000 } })
    local res = play(b, state, { run })[1]
    assert.equal("instructions", res.cause)
    assert.equal("instruction budget of 200000 exhausted (limits.instructions)", res.message)
  end)

  it("is a limit a layered policy may tighten but not loosen", function()
    local base = policy.new { name = "base", locked = { "limits.turn_instructions" },
                              limits = { turn_instructions = 1000 } }
    assert.has_error(function() policy.extend(base, { limits = { turn_instructions = 2000 } }) end)
    assert.has_error(function() policy.extend(base, { limits = { turn_instructions = 0 } }) end)
    assert.equal(500, policy.extend(base, { limits = { turn_instructions = 500 } }).limits.turn_instructions)
    local ok, err = pcall(policy.new, { name = "bad", limits = { turn_instructions = -1 } })
    assert.is_false(ok)
    assert.matches("limits.turn_instructions", tostring(err))
  end)

  it("is recorded and replayed with the same turns and zero live effects", function()
    local dir = H.tmpdir()
    local ledger = require "airlock.ledger"
    for i, guest in ipairs { WELL_BEHAVED, HOG } do
      local b <close> = airlock.broker()
      local state = {}
      local pol = pol_with(state)
      local run = assert(b:start { guest = guest, policy = pol, ledger = dir .. "/s" .. i })
      local rec = play(b, state, { run }, 10)[1]
      local deferred = 0
      for r in ledger.records(dir .. "/s" .. i) do
        if r.kind == "reply" and r.deferred == true then deferred = deferred + 1 end
      end
      assert.is_true(deferred >= 3, "the journal marks the deferred answers")
      local marks = #state.marks
      local rep = assert(airlock.replay(dir .. "/s" .. i, { policy = pol }))
      assert.is_true(rep.identical, rep.result.message)
      assert.equal(0, rep.live_effects)
      assert.equal(rec.cause, rep.result.cause)
      assert.equal(rec.message, rep.result.message)
      assert.same(rec.value, rep.result.value)
      assert.equal(marks, #state.marks, "the replay performed nothing")
    end
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("stops one mod that hogs a tick while another on the same broker plays on (plugin host)", function()
    local b <close> = airlock.broker()
    local state = {}
    local good = start(b, state, WORK .. [[
      local t = host.tick()
      while t and t < 40 do work() host.mark("good") t = host.tick() end
      return t ]])
    local hog = start(b, state, HOG)
    local res = play(b, state, { good, hog })
    assert.equal("ok", res[1].cause, res[1].message)
    assert.equal(40, res[1].value)
    assert.equal("instructions", res[2].cause)
    assert.matches("^turn instruction budget of 50000 exhausted", res[2].message)
    -- the good mod played every tick: 39 marks, ten times what the hog lived
    local good_marks, hog_marks = 0, 0
    for _, m in ipairs(state.marks) do
      if m.run == good:id() then good_marks = good_marks + 1 else hog_marks = hog_marks + 1 end
    end
    assert.equal(39, good_marks)
    assert.equal(4, hog_marks)
  end)
end)
