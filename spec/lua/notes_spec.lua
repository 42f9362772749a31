-- notes_spec.lua -- notifications: effects a policy declares in `notify` are
-- sent by the guest without waiting (host.NAME returns nothing), batched,
-- handled in order among the calls, recorded and replayed with zero live
-- effects; a worker that lies with them, floods them or dies mid-batch costs
-- the host a precise cause and nothing else.
local airlock = require "airlock"
local H = require "helper"

local policy = airlock.policy

local function pol_with(moves, extra)
  local p = { notify = { "move" }, effects = {
    move = function(a, ctx) moves[#moves + 1] = a; moves.note = ctx.note end,
    ask = function() return #moves end,
  } }
  for k, v in pairs(extra or {}) do p[k] = v end
  return policy.extend("untrusted", p)
end

local STANDIN_CONFINE = { landlock = false, seccomp = false,
  require = { "namespaces", "rlimits", "capabilities", "no_new_privs" } }

local function hostile(mode, effects, notify, b)
  local p = { unconfined = true, worker = { H.hostile, mode }, limits = { deadline_ms = H.GUARD_S * 1000 },   -- a guard
              effects = effects or {}, notify = notify, confine = STANDIN_CONFINE }
  if b then return assert(b:start { guest = "return 1", policy = p }) end
  local res, err = airlock.run { guest = "return 1", policy = p }
  assert(res, err)
  return res
end

describe("notifications", function()
  it("are handled in order among the calls: every note before a call is in before it answers", function()
    local moves = {}
    local res = airlock.run { policy = pol_with(moves), guest = [[
      local r = host.move(1)
      for i = 2, 10 do host.move(i) end
      local seen = host.ask()
      for i = 11, 500 do host.move(i) end
      return { seen = seen, r = r == nil } ]] }
    assert.equal("ok", res.cause, res.message)
    assert.same({ seen = 10, r = true }, res.value)
    assert.equal(500, #moves)
    for i = 1, 500 do assert.equal(i, moves[i]) end
    assert.equal(501, res.usage.effects)
    assert.equal(500, res.usage.notes)
    assert.is_true(moves.note, "a note's handler is told so (ctx.note)")
    -- control: without notify the same effect is a call, one round trip each
    local calls = {}
    local c = airlock.run { policy = pol_with(calls, { notify = policy.remove }),
      guest = "local r = host.move(1) return r == nil" }
    assert.equal("ok", c.cause, c.message)
    assert.equal(0, c.usage.notes)
    assert.equal(1, #calls)
    assert.is_nil(calls.note)
  end)

  it("recorded, are each in the journal before they are handled, in order, before the run's next call", function()
    local dir = H.tmpdir()
    local moves = {}
    local res = airlock.run { policy = pol_with(moves), ledger = dir .. "/s", guest = [[
      for i = 1, 10 do host.move(i) end
      local seen = host.ask()
      for i = 11, 300 do host.move(i) end
      return seen ]] }
    assert.equal("ok", res.cause, res.message)
    assert.equal(10, res.value)
    assert.equal(300, #moves)
    for i = 1, 300 do assert.equal(i, moves[i]) end
    local kinds = {}
    for rec in airlock.ledger.records(dir .. "/s") do
      if rec.kind == "note" or rec.kind == "call" then kinds[#kinds + 1] = rec.kind .. ":" .. tostring(rec.args) end
    end
    assert.equal(301, #kinds)
    assert.equal("call:nil", kinds[11])   -- ask, after the ten notes, as the guest sent them
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("recorded, are not handled when the ledger process is gone: the run ends with cause ledger", function()
    local dir = H.tmpdir()
    local L = assert(airlock.ledger.open(dir .. "/s", { create = true }))
    local moves = {}
    local pol = policy.extend("untrusted", { notify = { "move" }, effects = {
      move = function(a) moves[#moves + 1] = a end,
      ask = function()
        H.kill_dead(L:pid())
        return #moves
      end }, limits = { deadline_ms = 30000 } })
    local res = airlock.run { policy = pol, ledger = L, guest = [[
      for i = 1, 5 do host.move(i) end
      local n = host.ask()
      for i = 6, 10 do host.move(i) end
      host.ask()
      return n ]] }
    assert.equal("ledger", res.cause, res.message)
    assert.matches("could not be recorded, so it was not performed", res.message)
    assert.same({ 1, 2, 3, 4, 5 }, moves)   -- the control: recorded ones were handled
    L:close()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("make print a note when the policy declares log one, and the log is the same", function()
    local guest = 'for i = 1, 50 do print("line", i) end return 1'
    local as_note = airlock.run { guest = guest, policy = policy.extend("untrusted", { notify = { "log" } }) }
    local as_call = airlock.run { guest = guest }
    assert.equal("ok", as_note.cause, as_note.message)
    assert.equal(as_call.log, as_note.log)
    assert.equal(50, as_note.usage.notes)
    assert.equal(0, as_call.usage.notes)
  end)

  it("tell the host of a handler that failed on one, and the run goes on", function()
    local res = airlock.run { guest = "host.bad(1) host.bad(2) return 3", policy = policy.extend("untrusted", {
      notify = { "bad" }, effects = { bad = function(a) error("no move " .. a) end } }) }
    assert.equal("ok", res.cause, res.message)
    assert.equal(3, res.value)
    assert.equal(2, #res.note_errors)
    assert.matches("^bad: .*no move 1", res.note_errors[1])
  end)

  it("must name granted effects, and adding one loosens a locked policy", function()
    local ok, err = airlock.run { guest = "return 1", policy = policy.extend("untrusted", { notify = { "nope" } }) }
    assert.is_nil(ok)
    assert.equal([[policy: notify names 'nope', which the policy does not grant (effects["nope"])]], err)
    local base = policy.new { name = "base", notify = { "a" }, locked = { "notify" }, effects = { a = false } }
    assert.has_error(function() policy.extend(base, { notify = { "a", "b" } }) end)
    policy.extend(base, { notify = {} })   -- fewer notes: tighter
  end)

  it("are recorded in order and replayed with zero live effects; a changed note diverges", function()
    local dir = H.tmpdir()
    local moves = {}
    local pol = pol_with(moves)
    local guest = "for i = 1, 20 do host.move(i) end local n = host.ask() host.move(99) return n"
    local rec = airlock.run { guest = guest, policy = pol, ledger = dir .. "/s" }
    assert.equal("ok", rec.cause, rec.message)
    local before = #moves
    local rep = assert(airlock.replay(dir .. "/s", { policy = pol }))
    assert.is_true(rep.identical, rep.message)
    assert.equal(0, rep.live_effects)
    assert.equal(before, #moves, "replay ran no live handler")
    local show = H.sh(H.bin .. "/airlock ledger show " .. dir .. "/s")
    assert.equal(21, select(2, show:gsub("note%s+run 1%s+move", "")))
    -- the guest sends another note than the journal has: diverged, named
    local other = assert(airlock.replay(dir .. "/s", { policy = pol,
      guest = "for i = 1, 20 do host.move(i) end local n = host.ask() host.move(7) return n" }))
    assert.is_false(other.identical)
    assert.equal("diverged", other.result.cause)
    assert.matches("the journal has 'move' 99, the guest asked for 'move' 7", other.result.message)
    -- a call where the journal has a note: diverged too
    local kind = assert(airlock.replay(dir .. "/s", { policy = pol_with({}, { notify = policy.remove }) ,
      policy_changed = true }))
    assert.equal("diverged", kind.result.cause)
    assert.matches("the journal has a note of 'move', the guest sent a call of 'move'", kind.result.message)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("of a flooding guest do not starve another guest on the same broker", function()
    local b <close> = airlock.broker()
    local moves = {}
    -- Not starved: the calm guest's calls are answered while the flood still
    -- floods (only its 1 s CPU limit or the guard ends it), counted by the
    -- handler itself; the calm guest's deadline is only a guard.
    local flood
    flood = assert(b:start { guest = "while true do host.move(1) end", policy = pol_with(moves,
      { limits = { instructions = 0, deadline_ms = 2 * H.GUARD_S * 1000 } }) })
    local asks, during = 0, 0
    local calm = assert(b:start { guest = "for i = 1, 200 do host.ask() end return 'calm'",
      policy = policy.extend("untrusted", { limits = { deadline_ms = H.GUARD_S * 1000 },
        effects = { ask = function()
          asks = asks + 1
          if flood:live() then during = during + 1 end
          return asks
        end } }) })
    local res = calm:wait(b)
    assert.equal("ok", res.cause, res.message)
    assert.equal("calm", res.value)
    assert.is_true(during > 0, "no call of the calm guest was answered while the flood ran")
    assert.is_true(#moves > 0)
    flood:cancel()
    local fres = flood:wait(b)
    assert.is_true(fres.usage.notes > 0, "the flood sent notes")
    assert.equal(fres.usage.notes, #moves)
  end)

  it("refuse a worker's note for an effect the policy does not declare (control: declared, handled)", function()
    local pinged = 0
    local res = hostile("note-undeclared", { ping = function() pinged = pinged + 1 end })
    assert.equal("protocol", res.cause)
    assert.matches("note 1 for 'ping', which the policy does not declare a notification", res.message)
    assert.equal(0, pinged)
    local moved = {}
    local ok = hostile("note-then-die", { move = function(a) moved[#moved + 1] = a end, ping = function() end },
      { "move" })
    assert.equal(10, #moved, "every note sent before the crash is handled")
    for i = 1, 10 do assert.equal(i, moved[i]) end
    assert.equal("crash", ok.cause, ok.message)
  end)

  it("refuse notes whose ids do not increase, as calls", function()
    local res = hostile("note-stale-id", { move = function() end }, { "move" })
    assert.equal("protocol", res.cause)
    assert.matches("id 5 does not increase", res.message)
  end)

  it("of a hostile flood are read one at a time while other runs go on, and cancel stops it", function()
    local b <close> = airlock.broker()
    local n = 0
    local flood = hostile("note-flood", { move = function() n = n + 1 end }, { "move" }, b)
    local asks = 0
    local calm = assert(b:start { guest = "for i = 1, 100 do host.ask() end return 1",
      policy = policy.extend("untrusted", { effects = { ask = function() asks = asks + 1 return asks end } }) })
    local res = calm:wait(b)
    assert.equal("ok", res.cause, res.message)
    assert.equal(100, asks)
    flood:cancel()
    local fres = flood:wait(b)
    assert.equal("cancelled", fres.cause)
    assert.is_true(n > 0)
  end)
end)
