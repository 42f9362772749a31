-- session_spec.lua -- runs recorded in a ledger; replay from the journal alone;
-- divergence; pause and resume; a ledger that cannot record stops the run.
local airlock = require "airlock"
local ledger = require "airlock.ledger"

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  return d
end

local function rm(d) os.execute("rm -rf '" .. d .. "'") end

local function kinds(dir)
  local out = {}
  for rec in ledger.records(dir) do out[#out + 1] = rec.kind end
  return table.concat(out, " ")
end

-- A policy whose handlers count how often they really run.
local function counting()
  local n = { look = 0, move = 0 }
  return n, {
    effects = {
      ["world.look"] = function(args) n.look = n.look + 1 return { trees = args.radius * 3 } end,
      ["world.move"] = function(args)
        n.move = n.move + 1
        if args.dx > 5 then error("too far", 0) end
        return { x = args.dx }
      end,
    },
  }
end

local GUEST = [[
  local seen = host.world.look({ radius = 2 })
  local ok, err = pcall(host.world.move, { dx = 9 })
  local pos = host.world.move({ dx = 1 })
  print("trees", seen.trees)
  return { trees = seen.trees, refused = err, x = pos.x, t = os.time() > 0, r = math.random(1, 1000) }
]]

describe("a run recorded in a ledger", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() rm(dir) end)

  it("records init, every call before its handler, every answer, and the end", function()
    local _, pol = counting()
    local res = assert(airlock.run { guest = GUEST, policy = pol, ledger = dir })
    assert.equal("ok", res.cause, res.message)
    assert.equal(6, res.value.trees)
    assert.matches("too far", res.value.refused)
    -- world.look, world.move (refused), world.move, log (print), clock.now (os.time)
    assert.equal("session init call reply call reply call reply call reply call reply done", kinds(dir))
    local calls = {}
    for rec in ledger.records(dir) do
      if rec.kind == "call" then calls[#calls + 1] = rec end
      if rec.kind == "reply" and rec.effect == "world.move" and rec.status == "err" then
        assert.matches("too far", rec.error)
      end
    end
    assert.equal("world.look", calls[1].effect)
    assert.same({ radius = 2 }, calls[1].args)
    assert.equal("allow", calls[1].decision)
    assert.is_true(ledger.verify(dir).ok)
    assert.matches("^%d+:%x+$", res.ledger.head)
  end)

  it("replays from the journal alone: identical, and no handler runs", function()
    local n, pol = counting()
    local res = assert(airlock.run { guest = GUEST, policy = pol, ledger = dir })
    local before = { look = n.look, move = n.move }
    -- policy_changed: the counting handlers close over n, so the digest moves with it
    local rep = assert(airlock.replay(dir, { policy = pol, policy_changed = true }))
    assert.is_true(rep.identical, rep.result.message)
    assert.equal(0, rep.live_effects)
    assert.equal(rep.calls, rep.served)
    assert.same(before, n)                      -- the real handlers were never called
    assert.same(res.value, rep.result.value)    -- time and random numbers included
    assert.equal(res.log, rep.result.log)
  end)

  it("names the seq, the recorded and the asked-for effect when a changed guest diverges", function()
    local _, pol = counting()
    assert(airlock.run { guest = GUEST, policy = pol, ledger = dir })
    local changed = GUEST:gsub("radius = 2", "radius = 3")
    local rep = assert(airlock.replay(dir, { policy = pol, guest = changed, policy_changed = true }))
    assert.is_false(rep.identical)
    assert.equal("diverged", rep.result.cause)
    assert.matches("diverged at seq %d+: the journal has 'world.look' {radius=2}, " ..
                   "the guest asked for 'world.look' {radius=3}", rep.result.message)
    assert.equal(0, rep.live_effects)
  end)

  it("pauses on host.input and resumes three times, then replays whole", function()
    local n, pol = counting()
    local guest = [[
      local a = host.input("first?")
      local seen = host.world.look({ radius = #a })
      local b = host.input("second?")
      local c = host.input("third?")
      return a .. b .. c .. seen.trees
    ]]
    local res = assert(airlock.run { guest = guest, policy = pol, ledger = dir })
    assert.equal("paused", res.cause)
    assert.equal("first?", res.value)
    res = assert(airlock.resume(dir, "xy", { policy = pol, policy_changed = true }))
    assert.equal("paused", res.cause)
    assert.equal("second?", res.value)
    res = assert(airlock.resume(dir, "b", { policy = pol, policy_changed = true }))
    assert.equal("third?", res.value)
    res = assert(airlock.resume(dir, "c", { policy = pol, policy_changed = true }))
    assert.equal("ok", res.cause, res.message)
    assert.equal("xybc6", res.value)
    assert.equal(1, n.look)                     -- performed once, replayed after
    assert.equal("session init pause resume call reply pause resume pause resume done", kinds(dir))
    local rep = assert(airlock.replay(dir, { policy = pol, policy_changed = true }))
    assert.is_true(rep.identical, rep.result.message)
    assert.equal(0, rep.live_effects)
    local again, err = airlock.resume(dir, "more", { policy = pol, policy_changed = true })
    assert.is_nil(again)
    assert.matches("not paused", err)
  end)

  it("records deferred answers when the host gives them", function()
    local b <close> = airlock.broker()
    local waiting
    local run = assert(b:start { guest = [[return host.call("later", { n = 1 }) + 1]], ledger = dir,
      policy = { effects = { later = function(_, ctx) waiting = ctx.seq return airlock.defer() end } } })
    while not waiting do assert(b:step(50)) end
    run:reply(waiting, 41)
    local res = run:wait(b)
    assert.equal(42, res.value)
    local replies = {}
    for rec in ledger.records(dir) do
      if rec.kind == "reply" then replies[#replies + 1] = rec end
    end
    assert.equal(1, #replies)
    assert.equal(41, replies[1].value)
  end)

  it("branches a paused session into a new one that resumes on its own", function()
    local _, pol = counting()
    local guest = [[local a = host.input("name?") return "hello " .. a]]
    assert(airlock.run { guest = guest, policy = pol, ledger = dir })
    local head = ledger.head(dir)
    local other = tmpdir()
    assert(airlock.branch(dir, tonumber(head:match("^(%d+)")), other))
    local res = assert(airlock.resume(other, "branch", { policy = pol, policy_changed = true }))
    assert.equal("hello branch", res.value)
    assert.equal(head, ledger.head(dir))        -- the original is untouched
    res = assert(airlock.resume(dir, "main", { policy = pol, policy_changed = true }))
    assert.equal("hello main", res.value)
    rm(other)
  end)
end)

-- n recorded runs of guest under pol on broker b, each in a session of its
-- own (dirs[i], runs[i]); the third's ledger is opened here, so a spec can
-- kill its process: -> that ledger.
local function start_recorded(b, n, pol, guest, dirs, runs)
  local victim
  for i = 1, n do
    dirs[i] = tmpdir()
    local l = i == 3 and assert(ledger.open(dirs[i], { create = true })) or dirs[i]
    if i == 3 then victim = l end
    runs[i] = assert(b:start { guest = guest, policy = pol, ledger = l })
  end
  return victim
end

describe("many recorded runs on one broker", function()
  -- b:step records the calls waiting in all of them first (each ledger
  -- process gets its records, then each is waited for), then handles them.
  it("record every call before its handler runs; a ledger process that dies ends its run alone", function()
    local b <close> = airlock.broker()
    local dirs, runs, performed, victim = {}, {}, {}, nil
    local pol = { limits = { deadline_ms = 60000 }, effects = {
      double = function(n, ctx)
        performed[ctx.run] = (performed[ctx.run] or 0) + 1
        if n == 30 and victim and ctx.run == runs[1]:id() then
          -- the first run's 30th call: kill the third run's ledger process, and wait until it is dead
          require("helper").kill_dead(victim:pid())
        end
        return n * 2
      end } }
    victim = start_recorded(b, 8, pol, "local s = 0 for i = 1, 60 do s = s + host.double(i) end return s",
                            dirs, runs)
    local results = require("helper").step_all(b, 8)
    for i, run in ipairs(runs) do
      local res = results[run:id()]
      local calls = 0
      for rec in ledger.records(dirs[i]) do if rec.kind == "call" then calls = calls + 1 end end
      assert.equal(calls, performed[run:id()] or 0, "run " .. i .. ": every performed call was recorded first")
      if i == 3 then
        assert.equal("ledger", res.cause, res.message)
        assert.is_true(calls < 60)
      else
        assert.equal("ok", res.cause, res.message)   -- the control: the others carry on
        assert.equal(3660, res.value)
        assert.equal(60, calls)
      end
    end
    victim:close()
    for _, d in ipairs(dirs) do rm(d) end
  end)
end)

describe("many recorded runs sending notes, then a call", function()
  -- The call a run sends after its notes is admitted in the same step as the
  -- other runs' (b:step admits again at the first call that was not waiting
  -- when the step began); its run's notes are handled before it, in order.
  it("handle each run's notes before its call, record all first; a ledger process that dies ends its run alone", function()
    local b <close> = airlock.broker()
    local dirs, runs, seen, victim = {}, {}, {}, nil
    local pol = { notify = { "move" }, limits = { deadline_ms = 60000 }, effects = {
      move = function(n, ctx) local t = seen[ctx.run] or {}; seen[ctx.run] = t; t[#t + 1] = "m" .. n end,
      ask = function(n, ctx)
        local t = seen[ctx.run] or {}; seen[ctx.run] = t; t[#t + 1] = "a" .. n
        if n == 20 and victim and ctx.run == runs[1]:id() then require("helper").kill_dead(victim:pid()) end
        return n
      end } }
    victim = start_recorded(b, 6, pol, [[
      local s = 0
      for i = 1, 40 do host.move(i) host.move(-i) s = s + host.ask(i) end
      return s ]], dirs, runs)
    local results = require("helper").step_all(b, 6)
    for i, run in ipairs(runs) do
      local res, got = results[run:id()], seen[run:id()] or {}
      local recorded = {}
      for rec in ledger.records(dirs[i]) do
        if rec.kind == "note" then recorded[#recorded + 1] = "m" .. rec.args
        elseif rec.kind == "call" then recorded[#recorded + 1] = "a" .. rec.args end
      end
      -- what was handled is what was recorded, in the guest's order (a prefix of it when refused)
      for k, v in ipairs(got) do assert.equal(recorded[k], v, "run " .. i .. ", effect " .. k) end
      if i == 3 then
        assert.equal("ledger", res.cause, res.message)
        assert.is_true(#got < 120)
      else
        assert.equal("ok", res.cause, res.message)   -- the control: the others carry on
        assert.equal(820, res.value)
        assert.equal(120, #got)
        assert.equal(120, #recorded)
        for k = 1, 40 do
          assert.same({ "m" .. k, "m" .. -k, "a" .. k }, { got[3 * k - 2], got[3 * k - 1], got[3 * k] })
        end
      end
    end
    victim:close()
    for _, d in ipairs(dirs) do rm(d) end
  end)
end)

describe("a ledger that cannot record", function()
  -- In always each record is written and synced alone; in batch and none the
  -- ledger process writes a batch of records at once, and a failed write
  -- takes back every record of it.
  for _, durability in ipairs { "always", "batch", "none" } do
  it("refuses the effect and ends the run with cause ledger (a full disk, durability " .. durability .. ")", function()
    local mnt = tmpdir()
    assert(os.execute("mkdir -p '" .. mnt .. "' && mount -t tmpfs -o size=64k airlock-full '" .. mnt .. "'"))
    local performed = 0
    local res = airlock.run { ledger = mnt .. "/s", durability = durability, policy = {
      effects = { store = function() performed = performed + 1 return true end } },
      guest = [[for i = 1, 1000 do host.call("store", { blob = string.rep("x", 1000) .. i }) end]] }
    local ok = ledger.verify(mnt .. "/s").ok
    local recorded = 0
    for rec in ledger.records(mnt .. "/s") do
      if rec.kind == "call" then recorded = recorded + 1 end
    end
    os.execute("umount '" .. mnt .. "'; rmdir '" .. mnt .. "'")
    assert.equal("ledger", res.cause, res.message)
    assert.matches("could not be recorded, so it was not performed", res.message)
    assert.is_true(performed < 1000)
    assert.equal(recorded, performed)   -- every performed call was recorded first
    assert.is_true(ok, "the journal must still verify")
  end)
  end
end)

describe("the session commands", function()
  local H = require "helper"
  local AIRLOCK = H.bin .. "/airlock"
  local function sh(cmd)
    local p = io.popen(cmd .. " 2>&1; echo \"status $?\"")
    local out = p:read("a")
    p:close()
    return out, tonumber(out:match("status (%d+)%s*$"))
  end

  it("run --ledger pauses (exit 3), resume finishes (0), replay is identical (0), a changed guest diverges (1)", function()
    local dir, guest, changed = tmpdir(), os.tmpname() .. ".lua", os.tmpname() .. ".lua"
    local f = assert(io.open(guest, "w"))
    f:write([[local n = host.input("n?") local t = os.time() return n * 2 + (t > 0 and 0 or 1)]])
    f:close()
    f = assert(io.open(changed, "w"))
    f:write([[local n = host.input("n?") print("extra") return n * 2]])
    f:close()
    local out, st = sh(AIRLOCK .. " run " .. guest .. " --ledger " .. dir)
    assert.equal(3, st, out)
    assert.matches("paused: n%?", out)
    assert.matches("airlock resume " .. dir:gsub("%p", "%%%0") .. " %-%-input JSON", out)
    out, st = sh(AIRLOCK .. " resume " .. dir .. " --input 21")
    assert.equal(0, st, out)
    assert.matches("^42\n", out)
    out, st = sh(AIRLOCK .. " replay " .. dir)
    assert.equal(0, st, out)
    assert.matches("identical %(1 calls answered from the journal, 0 live effects%)", out)
    out, st = sh(AIRLOCK .. " replay " .. dir .. " --guest " .. changed)
    assert.equal(1, st, out)
    assert.matches("differs: diverged at seq %d+: the journal has 'clock.now'", out)
    out, st = sh(AIRLOCK .. " resume " .. dir .. " --input 1")
    assert.equal(2, st, out)
    assert.matches("not paused", out)
    out, st = sh(AIRLOCK .. " branch " .. dir .. " --at 3 " .. dir .. "-b")
    assert.equal(0, st, out)
    out, st = sh(AIRLOCK .. " resume " .. dir .. "-b --input 5")
    assert.equal(0, st, out)
    assert.matches("^10\n", out)
    rm(dir) rm(dir .. "-b") os.remove(guest) os.remove(changed)
  end)

  it("--ledger starts a new session: an old one is refused and replays as before", function()
    local dir, guest = tmpdir(), os.tmpname() .. ".lua"
    local f = assert(io.open(guest, "w"))
    f:write([[return os.time() > 0]])
    f:close()
    local out, st = sh(AIRLOCK .. " run " .. guest .. " --ledger " .. dir)
    assert.equal(0, st, out)   -- control: a new directory records
    out, st = sh(AIRLOCK .. " run " .. guest .. " --ledger " .. dir)
    assert.equal(2, st, out)
    assert.matches("ledger: " .. dir:gsub("%p", "%%%0") .. " already holds a session; %-%-ledger starts a new one", out)
    out, st = sh(AIRLOCK .. " run " .. guest .. " --ledger " .. dir .. " --json")
    assert.equal(2, st, out)
    assert.matches('"cause":"ledger"', out)
    local ws = H.tmpdir()
    out, st = sh("cd " .. ws .. " && " .. require("airlock.core").fs_realpath(AIRLOCK) .. " exec --workspace " ..
      ws .. " --ledger " .. dir .. " -- true")
    assert.equal(125, st, out)
    assert.matches("already holds a session", out)
    out, st = sh(AIRLOCK .. " replay " .. dir)   -- still the one run it recorded
    assert.equal(0, st, out)
    assert.matches("identical", out)
    rm(dir) rm(ws) os.remove(guest)
  end)

  it("--ledger makes the missing parents of a new session, as mkdir -p does", function()
    local base, guest = H.tmpdir(), os.tmpname() .. ".lua"
    local f = assert(io.open(guest, "w"))
    f:write([[return 7]])
    f:close()
    local out, st = sh(AIRLOCK .. " run " .. guest .. " --ledger " .. base .. "/saves/slot1/s1")
    assert.equal(0, st, out)
    out, st = sh(AIRLOCK .. " replay " .. base .. "/saves/slot1/s1")
    assert.equal(0, st, out)
    assert.matches("identical", out)
    -- Control: a parent that is a file is not a directory to make.
    H.write(base .. "/file", "x")
    out, st = sh(AIRLOCK .. " run " .. guest .. " --ledger " .. base .. "/file/s1")
    assert.equal(2, st, out)
    assert.matches("ENOTDIR", out)
    rm(base) os.remove(guest)
  end)

  it("branches only at a pause, where the branch can be resumed", function()
    local dir, guest = tmpdir(), os.tmpname() .. ".lua"
    local f = assert(io.open(guest, "w"))
    f:write([[local n = host.input("n?") local t = os.time() return n * 2 + (t > 0 and 0 or 1)]])
    f:close()
    sh(AIRLOCK .. " run " .. guest .. " --ledger " .. dir)
    sh(AIRLOCK .. " resume " .. dir .. " --input 21")   -- records: 3 pause, 4 resume, 5 call, 6 reply, 7 done
    local out, st = sh(AIRLOCK .. " branch " .. dir .. " --at 5 " .. dir .. "-b")
    assert.equal(1, st, out)
    assert.matches("record 5 is a 'call', not a pause: a branch must end where the run paused", out)
    assert.matches("this session paused at seq 3", out)
    -- Control: at the pause it is made, and resumes.
    out, st = sh(AIRLOCK .. " branch " .. dir .. " --at 3 " .. dir .. "-b")
    assert.equal(0, st, out)
    out, st = sh(AIRLOCK .. " resume " .. dir .. "-b --input 4")
    assert.equal(0, st, out)
    assert.matches("^8\n", out)
    rm(dir) rm(dir .. "-b") os.remove(guest)
  end)

  it("says when a paused run has no ledger that could resume it", function()
    local guest = os.tmpname() .. ".lua"
    local f = assert(io.open(guest, "w"))
    f:write([[return host.input("n?")]])
    f:close()
    local out, st = sh(AIRLOCK .. " run " .. guest)
    assert.equal(3, st, out)
    assert.matches("nothing can resume this run: it has no ledger %(run it with %-%-ledger DIR", out)
    os.remove(guest)
  end)
end)

describe("a policy's explicit refusal", function()
  it("is recorded as decision deny, with its reason, and the run ends as cause denied", function()
    local handlers = require "airlock.handlers"
    local dir = tmpdir()
    local res = assert(airlock.run { guest = [[return host.call("world.nuke", { all = true })]], ledger = dir,
      policy = { effects = { ["world.nuke"] = handlers.deny("not in this game") } } })
    assert.equal("denied", res.cause)
    local call
    for rec in ledger.records(dir) do if rec.kind == "call" then call = rec end end
    assert.equal("deny", call.decision)
    assert.equal("not in this game", call.reason)
    rm(dir)
  end)
end)

describe("a deferred failure", function()
  it("replays as the guest saw it: the host's message and code, not a handler's error", function()
    local dir = tmpdir()
    local pending = {}
    local pol = airlock.policy.extend("untrusted", { effects = {
      ask = function(_, ctx) pending[#pending + 1] = { ctx.handle, ctx.seq } return airlock.defer() end } })
    local guest = [[
      local ok, e = pcall(host.ask, 1)
      local ok2, e2 = pcall(host.ask, 2)
      return { e, e2 } ]]
    local b <close> = airlock.broker()
    local run = assert(b:start { guest = guest, policy = pol, ledger = dir })
    local n = 0
    while run:live() do
      b:step(20)
      local p = table.remove(pending, 1)
      if p then
        n = n + 1
        if n == 1 then assert(p[1]:fail(p[2], "no, not now")) else assert(p[1]:fail(p[2], "denied: nope", "denied")) end
      end
    end
    local res = run:result()
    assert.equal("ok", res.cause, res.message)
    assert.same({ "no, not now", "denied: nope" }, res.value)
    local rep = assert(airlock.replay(dir, { policy = pol }))
    assert.is_true(rep.identical, rep.message)
    assert.same(res.value, rep.result.value)
    assert.equal(0, rep.live_effects)
    rm(dir)
  end)
end)
