-- spec/lua/user_fixes_spec.lua -- five defects users found (issue 29, item 6),
-- each held at its mechanism, each with a control that succeeds:
--   1. host.X.y for an effect the policy does not grant is refused exactly as
--      host.call("X.y") is (cause denied, a deny record), and the guest's
--      world says nothing about which effects are granted;
--   2. an answer too large to send fails that call at once, naming the limit
--      (recorded as such, replayed alike), where it used to hang the run;
--   3. airlock.run{ledger = DIR} refuses a directory that holds a session, as
--      `airlock run --ledger DIR` does;
--   4. a policy file that returns nothing is named as such;
--   5. a derived policy keeps a name of its own (its file's, or its name
--      field), and says what it derives from.
local H = require "helper"
local airlock = require "airlock"
local policy = require "airlock.policy"
local core = require "airlock.core"

local AIRLOCK = H.bin .. "/airlock"

local function rm(d) os.execute("rm -rf '" .. d .. "'") end

local function newdir()
  local d = H.tmpdir()
  rm(d)   -- a path for a new session, not created
  return d
end

local function records(dir)
  local out = {}
  for rec in airlock.ledger.records(dir) do out[#out + 1] = rec end
  return out
end

local function of_kind(dir, kind)
  local out = {}
  for _, rec in ipairs(records(dir)) do if rec.kind == kind then out[#out + 1] = rec end end
  return out
end

-- Steps b until run has ended, failing (not hanging) when it has not within
-- a generous bound; a run left live is cancelled so the spec can go on.
local function finish(b, run, what)
  local t0 = core.now_ms()
  while run:live() and core.now_ms() - t0 < 120000 do b:step(100) end
  local hung = run:live()
  if hung then run:cancel() run:wait(b) end
  assert.is_false(hung, what .. ": still running after 120 s")
  return run:result()
end

describe("host.X.y sugar", function()
  local FS = { effects = { ["fs.read"] = function(args) return "read " .. args.path end } }

  it("calls a granted effect (control) and refuses an ungranted one as host.call does", function()
    local ok = airlock.run { policy = FS, guest = 'return host.fs.read { path = "a.txt" }' }
    assert.are.equal("ok", ok.cause, ok.message)
    assert.are.equal("read a.txt", ok.value)

    local d1, d2 = newdir(), newdir()
    local sugar = airlock.run { ledger = d1, guest = 'return host.fs.read { path = "/etc/passwd" }' }
    local call = airlock.run { ledger = d2, guest = 'return host.call("fs.read", { path = "/etc/passwd" })' }
    assert.are.equal("denied", call.cause)
    assert.are.equal("denied", sugar.cause, sugar.message)
    assert.are.equal(call.message, sugar.message)
    assert.are.equal("denied: effect 'fs.read' is not granted by the policy", sugar.message)
    -- The same deny record in the ledger, for either way of asking.
    local function deny(dir)
      local calls = of_kind(dir, "call")
      assert.are.equal(1, #calls)
      local c = calls[1]
      return { effect = c.effect, decision = c.decision, granted = c.granted, reason = c.reason, id = c.id }
    end
    assert.are.same({ effect = "fs.read", decision = "deny", granted = false,
                      reason = "not granted by the policy", id = 1 }, deny(d1))
    assert.are.same(deny(d2), deny(d1))
    rm(d1) rm(d2)
  end)

  it("lets the guest catch the refusal, as for host.call", function()
    local res = airlock.run { guest = [[
      local ok1, e1 = pcall(host.fs.read, { path = "x" })
      local ok2, e2 = pcall(host.call, "fs.read", { path = "x" })
      return { ok1, e1, ok2, e2 } ]] }
    assert.are.equal("ok", res.cause, res.message)
    assert.are.same({ false, "denied: effect 'fs.read' is not granted by the policy",
                      false, "denied: effect 'fs.read' is not granted by the policy" }, res.value)
  end)

  it("shows the guest the same world whether an effect is granted or not", function()
    -- What a guest can look at without calling anything: no difference
    -- between a policy that grants fs.read and one that does not.
    local probe = [[
      local keys = {}
      for k in pairs(host) do keys[#keys + 1] = tostring(k) end
      table.sort(keys)
      local before = rawget(host, "fs")
      local fs = host.fs
      return { keys = table.concat(keys, " "), before = tostring(before), fs = type(fs),
               read = type(fs.read), same = host.fs == fs and fs.read == host.fs.read,
               mt = type(getmetatable(fs)) } ]]
    local granted = airlock.run { policy = FS, guest = probe }
    local not_granted = airlock.run { guest = probe }
    assert.are.equal("ok", granted.cause, granted.message)
    assert.are.equal("ok", not_granted.cause, not_granted.message)
    assert.are.same(granted.value, not_granted.value)
    assert.are.same({ keys = "call input", before = "nil", fs = "table", read = "table", same = true,
                      mt = "table" }, granted.value)
  end)

  it("reads nil for keys that are not strings, and checks names as host.call does", function()
    local res = airlock.run { guest = [[
      local out = {}
      out[1] = host[1] == nil and host[true] == nil and host.fs[2.5] == nil
      local ok, e = pcall(function() return host[""]() end)
      out[2] = not ok and e
      ok, e = pcall(function() return host[string.rep("a", 300)]() end)
      out[3] = not ok and e
      ok, e = pcall(host.call, "")
      out[4] = not ok and e
      -- the __index a guest can reach, called by hand on something that is not a table
      ok, e = pcall(getmetatable(host).__index, 5, "x")
      out[5] = not ok and e
      ok, e = pcall(host.fs["..odd"], {})   -- any string is a name; the parent decides
      out[6] = not ok and e
      return out ]] }
    assert.are.equal("ok", res.cause, res.message)
    local v = res.value
    assert.is_true(v[1])
    assert.matches("effect names are 1 to 256 bytes", v[2])
    assert.matches("effect names are 1 to 256 bytes", v[3])
    assert.matches("effect names are 1 to 256 bytes", v[4])
    assert.matches("table expected, got number", v[5])
    assert.are.equal("denied: effect 'fs...odd' is not granted by the policy", v[6])
  end)

  it("reaches an effect and the effects under its name alike (fs and fs.read)", function()
    local res = airlock.run { guest = "return { host.fs(1), host.fs.read(2) }", policy = { effects = {
      fs = function(n) return "fs " .. n end, ["fs.read"] = function(n) return "read " .. n end } } }
    assert.are.equal("ok", res.cause, res.message)
    assert.are.same({ "fs 1", "read 2" }, res.value)
  end)

  it("still sends a notification through the sugar without waiting", function()
    local moves = {}
    local res = airlock.run { guest = "local r = host.world.move(7) return r == nil", policy = {
      notify = { "world.move" }, effects = { ["world.move"] = function(n) moves[#moves + 1] = n end } } }
    assert.are.equal("ok", res.cause, res.message)
    assert.is_true(res.value)
    assert.are.same({ 7 }, moves)
    assert.are.equal(1, res.usage.notes)
  end)

  it("replays a run that used the sugar, a refused call included, identically", function()
    local dir = newdir()
    local pol = policy.extend("untrusted", FS)
    local guest = [[
      local a = host.fs.read { path = "a" }
      local ok, e = pcall(host.net.open, {})
      local keys = {}
      for k in pairs(host) do keys[#keys + 1] = k end
      table.sort(keys)
      return { a, e, table.concat(keys, " "), tostring(host.fs) == tostring(host.fs) } ]]
    local res = airlock.run { guest = guest, policy = pol, ledger = dir }
    assert.are.equal("ok", res.cause, res.message)
    assert.are.same({ "read a", "denied: effect 'net.open' is not granted by the policy", "call fs input net",
                      true }, res.value)
    local rep = assert(airlock.replay(dir, { policy = pol }))
    assert.is_true(rep.identical, rep.result.message)
    assert.are.equal(0, rep.live_effects)
    rm(dir)
  end)
end)

describe("an answer too large to send", function()
  local BIG = 17 * 1024 * 1024   -- over the 16 MiB frame limit
  local TOO_LARGE = "answer too large to send %((%d+) bytes; frames are limited to 16 MiB%)"

  local function big_policy(size)
    return policy.extend("untrusted", { limits = { deadline_ms = 0 },
      effects = { big = function() return string.rep("x", size) end } })
  end

  it("fails that call at once with the limit named, even without a deadline", function()
    -- Control: an answer well under the limit arrives.
    local b <close> = airlock.broker()
    local small = finish(b, assert(b:start { policy = big_policy(1024 * 1024), guest = "return #host.big()" }),
      "a 1 MiB answer")
    assert.are.equal("ok", small.cause, small.message)
    assert.are.equal(1024 * 1024, small.value)

    local caught = finish(b, assert(b:start { policy = big_policy(BIG),
      guest = "local ok, e = pcall(host.big) return { ok, e, 'went on' }" }), "a 17 MiB answer, caught")
    assert.are.equal("ok", caught.cause, caught.message)
    assert.is_false(caught.value[1])
    assert.matches("^handler for 'big' failed: " .. TOO_LARGE .. "$", caught.value[2])
    assert.is_true(tonumber(caught.value[2]:match(TOO_LARGE)) > BIG)
    assert.are.equal("went on", caught.value[3])

    local uncaught = finish(b, assert(b:start { policy = big_policy(BIG), guest = "return host.big()" }),
      "a 17 MiB answer, not caught")
    assert.are.equal("error", uncaught.cause)
    assert.matches("handler for 'big' failed: " .. TOO_LARGE, uncaught.message)
  end)

  it("records the failure the guest got, and a replay gives it again", function()
    local dir = newdir()
    local pol = big_policy(BIG)
    local b <close> = airlock.broker()
    local res = finish(b, assert(b:start { policy = pol, ledger = dir,
      guest = "local ok, e = pcall(host.big) return e" }), "a recorded 17 MiB answer")
    assert.are.equal("ok", res.cause, res.message)
    assert.matches("^handler for 'big' failed: " .. TOO_LARGE, res.value)
    local replies = of_kind(dir, "reply")
    assert.are.equal(1, #replies)
    assert.are.equal("err", replies[1].status)
    assert.matches("^" .. TOO_LARGE .. "$", replies[1].error)
    assert.is_nil(replies[1].value)
    local rep = assert(airlock.replay(dir, { policy = pol }))
    assert.is_true(rep.identical, rep.result.message)
    assert.are.equal(res.value, rep.result.value)
    rm(dir)
  end)

  it("fails a deferred call the host answers too large, and run:reply says so", function()
    for _, recorded in ipairs { false, true } do
      local dir = recorded and newdir() or nil
      local pending
      local pol = policy.extend("untrusted", { limits = { deadline_ms = 0 }, effects = {
        ask = function(_, ctx) pending = ctx return airlock.defer() end } })
      local b <close> = airlock.broker()
      local run = assert(b:start { policy = pol, ledger = dir, guest = [[
        local a = host.ask()
        local ok, e = pcall(host.ask)
        return { a, ok, e } ]] })
      local t0 = core.now_ms()
      local answers = { "small", string.rep("y", BIG) }
      local said = {}
      while run:live() and core.now_ms() - t0 < 120000 do
        b:step(100)
        if pending then
          local p = pending
          pending = nil
          said[#said + 1] = { p.handle:reply(p.seq, table.remove(answers, 1)) }
        end
      end
      local hung = run:live()
      if hung then run:cancel() run:wait(b) end
      assert.is_false(hung, "still running after 120 s")
      assert.are.same({ true }, said[1])   -- control: the small answer went
      assert.is_nil(said[2][1])
      assert.matches("^reply: " .. TOO_LARGE .. "$", said[2][2])
      local res = run:result()
      assert.are.equal("ok", res.cause, res.message)
      assert.are.equal("small", res.value[1])
      assert.is_false(res.value[2])
      assert.matches("^" .. TOO_LARGE .. "$", res.value[3])
      if recorded then
        local replies = of_kind(dir, "reply")
        assert.are.equal(2, #replies)
        assert.are.equal("ok", replies[1].status)
        assert.are.equal("err", replies[2].status)
        assert.is_true(replies[2].deferred)
        assert.are.equal(res.value[3], replies[2].error)
        local rep = assert(airlock.replay(dir, { policy = pol, policy_changed = true }))
        assert.is_true(rep.identical, rep.result.message)
        rm(dir)
      end
    end
  end)

  it("bounds answers by the run's max_frame too, as it bounds calls", function()
    local function run(size)
      return airlock.run { guest = "return #host.big()", policy = { limits = { max_frame = "64K" },
        effects = { big = function() return string.rep("x", size) end } } }
    end
    local fits = run(60000)
    assert.are.equal("ok", fits.cause, fits.message)   -- control
    assert.are.equal(60000, fits.value)
    local res = run(70000)
    assert.are.equal("error", res.cause)
    assert.matches("handler for 'big' failed: answer too large to send %(70005 bytes; this run's frames " ..
      "are limited to 64 KiB by its max_frame%)", res.message)
  end)
end)

describe("airlock.run{ledger = DIR}", function()
  it("refuses a directory that already holds a session, as the command does", function()
    local dir = newdir()
    local first = airlock.run { guest = "return 1", ledger = dir }
    assert.are.equal("ok", first.cause, first.message)   -- control: a new directory records
    local before = #records(dir)
    local quoted = dir:gsub("%p", "%%%0")

    local res, err, code = airlock.run { guest = "return 2", ledger = dir }
    assert.is_nil(res)
    assert.are.equal("ledger", code)
    assert.matches("^ledger: " .. quoted .. " already holds a session; the ledger option starts a new one: " ..
      "give a new directory %(airlock%.resume%(dir, input%) continues a paused run%)$", err)
    local b <close> = airlock.broker()
    local run, berr, bcode = b:start { guest = "return 3", ledger = dir }
    assert.is_nil(run)
    assert.are.equal("ledger", bcode)
    assert.are.equal(err, berr)
    local ws = H.tmpdir()
    local ex, eerr, ecode = airlock.exec { argv = { "true" }, workspace = ws, ledger = dir }
    assert.is_nil(ex)
    assert.are.equal("ledger", ecode)
    assert.are.equal(err, eerr)
    rm(ws)

    -- Nothing was added: the session still holds its one run, and replays as recorded.
    assert.are.equal(before, #records(dir))
    local rep = assert(airlock.replay(dir))
    assert.is_true(rep.identical)

    -- The command's refusal: the same cause word, the same message but for how it is asked.
    local out, st = H.sh(AIRLOCK .. " run -e 'return 4' --ledger " .. dir .. " --json")
    assert.are.equal(2, st, out)
    assert.matches('"cause":"ledger"', out)
    out = H.sh(AIRLOCK .. " run -e 'return 4' --ledger " .. dir)
    assert.matches("ledger: " .. quoted .. " already holds a session; %-%-ledger starts a new one: give a new " ..
      "directory %(airlock resume " .. quoted .. " continues a paused run%)", out)
    rm(dir)
  end)

  it("still lets airlock.resume continue the session it names", function()
    local dir = newdir()
    local res = airlock.run { guest = "return 'hi ' .. host.input('name?')", ledger = dir }
    assert.are.equal("paused", res.cause, res.message)
    local resumed = assert(airlock.resume(dir, "ada"))
    assert.are.equal("hi ada", resumed.value)
    rm(dir)
  end)
end)

describe("a policy file that returns nothing", function()
  local dir
  setup(function() dir = H.tmpdir() end)
  teardown(function() rm(dir) end)

  local BODY = 'local policy = require "airlock.policy"\n' ..
    'local p = policy.extend("untrusted", { limits = { instructions = 1e6 } })\n'

  it("is named as such by the command and by every way the Lua API loads a file", function()
    local good, bad, num = dir .. "/good.lua", dir .. "/forgot.lua", dir .. "/number.lua"
    H.write(good, BODY .. "return p\n")
    H.write(bad, BODY)
    H.write(num, "return 42\n")
    local want = "policy: " .. bad:gsub("%p", "%%%0") .. " returned nothing; a policy file ends with " ..
      '`return policy%.extend%("untrusted", {%.%.%.}%)`'

    -- Control: the same file with its return runs.
    local ok = airlock.run { guest = "return 1", policy = good }
    assert.are.equal("ok", ok.cause, ok.message)

    local res, err, code = airlock.run { guest = "return 1", policy = bad }
    assert.is_nil(res, code)
    assert.matches("^" .. want, err)
    local p, lerr = policy.load(bad)
    assert.is_nil(p)
    assert.matches("^" .. want, lerr)
    local b <close> = airlock.broker()
    local d, rerr = b:reload(bad)
    assert.is_nil(d)
    assert.matches("^" .. want, rerr)
    local r, perr = policy.resolve(bad, "untrusted")
    assert.is_nil(r)
    assert.matches("^" .. want, perr)
    -- A program's policy file is laid over tool: the message says so.
    local _, terr = policy.resolve(bad, "tool")
    assert.matches('`return policy%.extend%("tool", {%.%.%.}%)`', terr)
    -- Anything but a table is named too.
    local _, nerr = policy.resolve(num, "untrusted")
    assert.matches("returned a number, not a policy table", nerr)

    local out, st = H.sh(AIRLOCK .. " run -e 'return 1' --policy " .. bad)
    assert.are.equal(2, st, out)
    assert.matches("airlock: run: " .. want, out)
    assert.is_nil(out:find("run: nil", 1, true))
    out, st = H.sh(AIRLOCK .. " run -e 'return 1' --policy " .. bad .. " --json")
    assert.are.equal(2, st, out)
    assert.matches('"cause":"policy"', out)
    assert.matches("returned nothing", out)
    out, st = H.sh(AIRLOCK .. " run -e 'return 1' --policy " .. good)
    assert.are.equal(0, st, out)   -- control
  end)
end)

describe("a derived policy's name", function()
  local dir
  setup(function() dir = H.tmpdir() end)
  teardown(function() rm(dir) end)

  it("is its file's name, or the name it gives, in results and ledger records", function()
    local mods, bare, named = dir .. "/mods.lua", dir .. "/bare.lua", dir .. "/named.lua"
    H.write(mods, 'return require("airlock.policy").extend("untrusted", { limits = { instructions = 1e6 } })\n')
    H.write(bare, "return { limits = { instructions = 1e6 } }\n")
    H.write(named, 'return { name = "mod-sandbox", limits = { instructions = 1e6 } }\n')
    local function run_under(p)
      local d = newdir()
      local res = airlock.run { guest = "return 1", policy = p, ledger = d }
      assert.are.equal("ok", res.cause, res.message)
      local init = of_kind(d, "init")[1]
      rm(d)
      return res, init.policy
    end
    -- Control: a stock policy is itself, derived from nothing.
    local res, rec = run_under("untrusted")
    assert.are.equal("untrusted", res.policy)
    assert.is_nil(res.policy_base)
    assert.are.equal("untrusted", rec.name)
    assert.is_nil(rec.base)

    for path, name in pairs { [mods] = "mods", [bare] = "bare", [named] = "mod-sandbox" } do
      res, rec = run_under(path)
      assert.are.equal(name, res.policy)
      assert.are.equal("untrusted", res.policy_base)
      assert.are.equal(name, rec.name)
      assert.are.equal("untrusted", rec.base)
      assert.are.equal(res.digest, rec.digest)
      assert.are.equal(name, assert(policy.load(path)).name)
    end

    -- Made in the host's code: the name it gives, else none, never its base's.
    res, rec = run_under(policy.extend("untrusted", { name = "adder" }))
    assert.are.equal("adder", res.policy)
    assert.are.equal("untrusted", res.policy_base)
    res, rec = run_under { limits = { instructions = 1e6 } }
    assert.is_nil(res.policy)
    assert.are.equal("untrusted", res.policy_base)
    assert.is_nil(rec.name)
    assert.are.equal("untrusted", rec.base)
    local p = policy.extend("untrusted", {})
    assert.is_nil(p.name)
    assert.are.equal("untrusted", policy.base_of(p))
    assert.are.equal("(unnamed, from 'untrusted')", policy.label(p))
    -- Derived again: from the nearest policy with a name.
    local q = policy.extend(policy.extend("untrusted", { name = "mods" }), { limits = { memory = "8M" } })
    assert.are.equal("mods", policy.base_of(q))
    assert.are.equal("mods", policy.base_of(policy.extend(q, {})))

    local out, st = H.sh(AIRLOCK .. " run -e 'return 1' --policy " .. mods .. " --json")
    assert.are.equal(0, st, out)
    assert.matches('"policy":"mods"', out)
    assert.matches('"policy_base":"untrusted"', out)
  end)

  it("tells a replay what the run's policy derived from when it has no name", function()
    local d = newdir()
    airlock.run { guest = "return 1", policy = { limits = { instructions = 1e6 } }, ledger = d }
    local rep, err = airlock.replay(d)
    assert.is_nil(rep)
    assert.matches("the journal names no policy of its own %(the run's was derived from 'untrusted'%)", err)
    -- Control: given the policy, it replays.
    rep = assert(airlock.replay(d, { policy = { limits = { instructions = 1e6 } } }))
    assert.is_true(rep.identical)
    rm(d)
  end)
end)
