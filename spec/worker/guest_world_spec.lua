-- guest_world_spec.lua -- the guest's world is Lua 5.4's, minus what the policy
-- withholds: each case runs the same guest file under plain lua5.4 (the peer
-- users know) and under airlock.run, and compares what each printed. Where
-- airlock differs on purpose (no binary chunks, modules come from the host,
-- warnings go to the log), the spec says how and compares the rest. Every
-- case runs twice: on a fresh worker (airlock.run), and on a prepared one
-- (b:warm, then b:start), whose world must be the same.
local airlock = require "airlock"
local handlers = require "airlock.handlers"
local H = require "helper"

local dir
local mode   -- "fresh" or "pooled": how run starts its guest

-- airlock.run's result, on a fresh worker or on one the broker prepared
-- beforehand for the run's policy (the result must say it was pooled).
-- A plain table of overrides gets the guard as its wall-clock deadline unless
-- it names one: no case here measures the deadline's 5 s, and on a loaded
-- machine a busy loop of 0.3 s of CPU can take longer than that.
local function run(opts)
  local p = opts.policy
  if type(p) == "table" and getmetatable(p) == nil then
    p.limits = p.limits or {}
    if p.limits.deadline_ms == nil then p.limits.deadline_ms = H.GUARD_S * 1000 end
  end
  if mode == "fresh" then return airlock.run(opts) end
  local b <close> = airlock.broker()
  assert(b:warm(1, opts.policy))
  local r, err = b:start(opts)
  if not r then return nil, err end
  local res = r:wait(b)
  assert.is_true(res.pooled, "the run did not take the prepared worker")
  return res
end

-- Writes the guest as main.lua and each module as name.lua in a fresh directory.
local function files(src, mods)
  if dir then os.execute("rm -rf " .. dir) end
  dir = H.tmpdir()
  H.write(dir .. "/main.lua", src)
  for name, text in pairs(mods or {}) do H.write(dir .. "/" .. name .. ".lua", text) end
end

-- Addresses differ from run to run; the rest must not.
local function norm(s)
  return (s:gsub("0x%x+", "ADDR"))
end

-- Plain lua5.4 on main.lua, run in its directory: stdout, stderr, exit status.
local function lua54()
  local out, err = dir .. "/.out", dir .. "/.err"
  -- TZ=UTC: the guest's dates are UTC, so lua5.4's must be too to compare.
  local _, _, rc = os.execute("cd " .. dir .. " && TZ=UTC lua5.4 main.lua >.out 2>.err")
  return norm(H.read(out)), norm(H.read(err)), rc
end

-- The same file under airlock, modules answered from the same directory.
local function guest(pol)
  pol = pol or {}
  pol.effects = pol.effects or { ["module.load"] = handlers.modules(dir) }
  local res = assert(run { guest = H.read(dir .. "/main.lua"), name = "main.lua", policy = pol })
  res.log = norm(res.log)
  return res
end

-- Both runs of one guest: lua5.4's stdout and airlock's log must be equal.
local function same(src, mods)
  files(src, mods)
  local out, err = lua54()
  local res = guest()
  assert.equal("ok", res.cause, res.message)
  assert.equal("", err)
  assert.equal(out, res.log)
  return out, res
end

for _, how in ipairs { "fresh", "pooled" } do
  describe("the guest's world, next to lua5.4 (" .. how .. " worker)", function()
    before_each(function() mode = how end)
    after_each(function()
      if dir then os.execute("rm -rf " .. dir) end
      dir = nil
    end)

    describe("require", function()
      it("returns the standard libraries the guest has, without asking the host", function()
        local asked = 0
        files [[
          for _, n in ipairs { "string", "table", "math", "utf8", "coroutine", "os", "_G" } do
            local m = require(n)
            print(n, m == _G[n] or m == _G, select("#", require(n)))
          end
          print(require("utf8").char(72, 105))]]
        local out, err = lua54()
        assert.equal("", err)
        local res = guest { effects = { ["module.load"] = function() asked = asked + 1 error("asked") end } }
        assert.equal("ok", res.cause, res.message)
        assert.equal(out, res.log)
        assert.matches("utf8\ttrue\t1\n", res.log)
        assert.equal(0, asked)
        -- Under the default policy too (module.load not granted at all).
        local plain = assert(run { guest = [[return require("utf8").char(111, 107)]] })
        assert.equal("ok", plain.cause, plain.message)
        assert.equal("ok", plain.value)
      end)

      it("returns the module and its loader data, and passes both to the module", function()
        local out = same([[
          local m, data = require "mod"
          print(m.name, m.args, type(data), select("#", require "mod"))]],
          { mod = "local name, data = ... return { name = name, args = select('#', ...) }" })
        assert.equal("mod\t2\tstring\t1\n", out)
        -- The loader data: lua5.4 gives the file's path; the guest never sees
        -- the host's path, so airlock says where the module came from.
        files [[print(select(2, require "mod"))]]
        H.write(dir .. "/mod.lua", "return true")
        assert.equal(":module.load:\n", guest().log)
      end)

      it("tries a module that failed again, and names its chunk in errors", function()
        files([[
          local ok, err = pcall(require, "flaky")
          print(ok, err)
          local m = require "flaky"
          print(m.tries, require("flaky") == m)
          print(pcall(require, "broken"))]],
          { flaky = "tries = (tries or 0) + 1\nif tries == 1 then error('first try') end\nreturn { tries = tries }",
            broken = "local x = 1\n\nerror('line three')" })
        local out, err = lua54()
        assert.equal("", err)
        -- lua5.4 names the file it found (./flaky.lua), airlock the module (flaky).
        out = out:gsub("%./(%w+)%.lua:", "%1:")
        assert.equal("false\tflaky:2: first try\n2\ttrue\nfalse\tbroken:3: line three\n", out)
        assert.equal(out, guest().log)
      end)

      it("reports a syntax error in a module as Lua's searcher does", function()
        files([[print(pcall(require, "bad"))]], { bad = "return (" })
        local out = lua54()
        assert.matches("^false\terror loading module 'bad' from file '%./bad%.lua':\n", out)
        -- Without the file's path, in the message and in the chunk's name.
        out = out:gsub(" from file '[^']*'", ""):gsub("%./(%w+)%.lua:", "%1:")
        assert.equal("false\terror loading module 'bad':\n\tbad:1: unexpected symbol near <eof>\n", out)
        assert.equal(out, guest().log)
      end)
    end)

    describe("a guest file", function()
      it("may start with a #! line, which is skipped and still counted", function()
        files "#!/usr/bin/env lua5.4\nprint('hello')\nerror('on line three')\n"
        local out, err, rc = lua54()
        assert.equal(1, rc)
        assert.matches("^lua5.4: main.lua:3: on line three\n", err)
        local res = guest()
        assert.equal(out, res.log)
        assert.equal("main.lua:3: on line three", res.message)
      end)

      it("may start with a byte order mark, as lua.c reads files", function()
        assert.equal("bom\nmain.lua:2: here\n", same "\239\187\191print('bom')\nprint(select(2, pcall(function() error('here') end)))")
        assert.equal("main.lua:2: there\n", same "\239\187\191#!lua\nprint(select(2, pcall(function() error('there') end)))")
      end)

      it("has no arguments without an input, as a script run without any", function()
        assert.equal("0\n", same [[print(select("#", ...))]])
        files [[print(select("#", ...), (...).x)]]
        local res = assert(run { guest = H.read(dir .. "/main.lua"), input = { x = 7 } })
        assert.equal("1\t7\n", res.log)
      end)

      it("is called at lua.c's C-call depth: C stack overflow at the same nesting", function()
        same [[
          local n = 0
          local function f() n = n + 1 string.gsub("a", ".", f) end
          local ok, msg = pcall(f)
          print(ok, msg:match("stack overflow"), n)]]
      end)
    end)

    describe("warn", function()
      it("is off at first, and once on writes Lua's warning lines, to the run's log", function()
        files [[
          warn("not shown: warnings start off")
          warn("@on")
          warn("one ", "line ", "in pieces")
          warn("@unknown control: ignored")
          warn("@off")
          warn("not shown: off again")
          warn("@on")
          warn("last")]]
        local out, err = lua54()
        assert.equal("", out)
        assert.equal("Lua warning: one line in pieces\nLua warning: last\n", err)
        -- lua.c writes them to stderr; a guest's stderr is its log.
        local res = guest()
        assert.equal("ok", res.cause, res.message)
        assert.equal(err, res.log)
      end)

      it("checks its arguments as Lua's does", function()
        same [[print(pcall(warn)) print(pcall(warn, "a", {}))]]
      end)
    end)

    describe("load", function()
      it("honours the mode for text chunks, with Lua's messages", function()
        same [[
          for _, mode in ipairs { "t", "b", "bt", "q", "" } do print(mode, load("return 1", "=x", mode)) end
          print(load("return 1", "=x", nil))
          print(pcall(load, "return 1", "=x", {}))]]
      end)

      it("refuses every binary chunk with Lua's message for mode 't'", function()
        local bin = string.dump(function() return 1 end)
        files(string.format([[
          for _, mode in ipairs { "t", "b", "bt" } do print(mode, load(%q, "=x", mode)) end
          local i = 0
          print(load(function() i = i + 1 return (%q):sub(i * 2 - 1, i * 2) end, "=r", "b"))]], bin, bin))
        local out = lua54()
        local refusal = out:match("^t\tnil\t([^\n]+)\n")
        assert.equal("attempt to load a binary chunk (mode is 't')", refusal)
        assert.matches("\nb\tfunction: ADDR\n", out)   -- lua5.4 loads it
        assert.equal("t\tnil\t" .. refusal .. "\nb\tnil\t" .. refusal .. "\nbt\tnil\t" .. refusal ..
                     "\nnil\t" .. refusal .. "\n", guest().log)
      end)

      it("returns nil and the reader's error, at top level and under pcall", function()
        files [[
          print(load(function() error("reader failed") end))
          assert(pcall(function()   -- (lua5.4's handler is not in force under pcall)
            print(load(function() error("reader failed") end))
            print(load(function() return {} end))
            local parts, i = { "return ", "4", "2" }, 0
            print(load(function() i = i + 1 return parts[i] end)())
            print(load(function() return nil end))
            print(pcall(load, {}))
            print(load("syntax error here", "=s"))
            local env = { y = 5 }
            print(load("return y", "=e", "t", env)(), load("return y", "=e", "t", nil))
          end))]]
        local out, err = lua54()
        assert.equal("", err)
        local log = guest().log
        -- lua.c's own message handler (a traceback) leaks into lua5.4's first
        -- line: a load at top level inherits it. The guest's load has none.
        local first = out:match("^(nil\tmain.lua:1: reader failed)\nstack traceback:\n")
        assert.truthy(first, out)
        out = out:gsub("^.-\n(nil\tmain.lua:3:)", "%1")
        assert.equal(first .. "\n" .. out, log)
      end)
    end)

    describe("finalizers", function()
      it("run when the run ends, as at lua_close, with their output in the log", function()
        local out, res = same [[
          local kept = setmetatable({}, { __gc = function() print("a live object's __gc, at close") end })
          print("end of chunk")]]
        assert.equal("end of chunk\na live object's __gc, at close\n", out)
        assert.equal("ok", res.cause)
      end)

      it("after an error too, and an error in one is a warning", function()
        files [[
          warn("@on")
          setmetatable({}, { __gc = function() error("in gc") end })
          setmetatable({}, { __gc = function() print("still runs") end })
          error("guest failed")]]
        local out, err = lua54()
        assert.equal("still runs\n", out)
        assert.matches("^lua5.4: main.lua:4: guest failed\n", err)
        assert.matches("\nLua warning: error in __gc %(main.lua:2: in gc%)\n$", err)
        local res = guest()
        assert.equal("error", res.cause)
        assert.equal("main.lua:4: guest failed", res.message)
        -- Both lines, in the order the finalizers ran (lua5.4's go to two streams).
        assert.equal(2, select(2, res.log:gsub("\n", "")))
        assert.matches("^still runs\n", out)
        assert.truthy(res.log:find("Lua warning: error in __gc (main.lua:2: in gc)\n", 1, true), res.log)
        assert.truthy(res.log:find(out, 1, true), res.log)
      end)

      it("keep the value as the chunk returned it", function()
        local res = assert(run { guest = [[
          local t = { n = 1 }
          setmetatable({}, { __gc = function() t.n = 2 print("gc", t.n) end })
          return t]] })
        assert.equal("ok", res.cause, res.message)
        assert.same({ n = 1 }, res.value)
        assert.equal("gc\t2\n", res.log)
      end)

      it("cannot hang the run: one that loops is ended by the run's limits", function()
        local res = assert(run { policy = { limits = { instructions = 1e6, deadline_ms = 1000 } }, guest = [[
          setmetatable({}, { __gc = function() while true do end end })
          return 1]] })
        -- only the limits end a finalizer that never returns
        assert.truthy(res.cause == "deadline" or res.cause == "cpu", res.cause .. ": " .. res.message)
      end)

      it("may print while other effects are answered (a collection between call and reply)", function()
        local res = assert(run { policy = { effects = { ["echo.back"] = function(a) return a end } },
          guest = [[
          local n = 0
          local big = {}
          for i = 1, 200 do big[i] = ("x"):rep(100) .. i end
          for round = 1, 300 do
            setmetatable({}, { __gc = function() n = n + 1 print("gc") end })
            local r = host.call("echo.back", big)
            assert(r[200] == big[200])
          end
          collectgarbage()
          return n]] })
        assert.equal("ok", res.cause, res.message)
        assert.equal(300, res.value)
        assert.equal(("gc\n"):rep(300), res.log)
      end)
    end)

    describe("os.clock", function()
      it("is the guest's own CPU time: a busy loop of 0.3 s shows 0.3 s, as in lua5.4", function()
        local out = same [[
          local t0 = os.clock()
          while os.clock() - t0 < 0.3 do end
          local d = os.clock() - t0
          print(t0 >= 0, d >= 0.3, d < 0.6)]]
        assert.equal("true\ttrue\ttrue\n", out)
      end)

      it("does not count the host's time: a handler that spins 0.3 s adds nothing", function()
        local res = assert(run { policy = { effects = { spin = function()
            local t = os.clock() while os.clock() - t < 0.3 do end return true end } },
          guest = [[local t0 = os.clock() host.call("spin") return os.clock() - t0]] })
        assert.equal("ok", res.cause, res.message)
        assert.is_true(res.value >= 0 and res.value < 0.1, tostring(res.value))
      end)

      it("is the clock.cpu effect, which a policy may withhold (os.time still works)", function()
        local res = assert(run { policy = { effects = { ["clock.cpu"] = false } },
          guest = [[local ok, err = pcall(os.clock) return { ok = ok, err = err, time = os.time() > 0 }]] })
        assert.equal("ok", res.cause, res.message)
        assert.is_false(res.value.ok)
        assert.matches("effect 'clock.cpu' is not granted", res.value.err)
        assert.is_true(res.value.time)
      end)
    end)

    describe("argument errors", function()
      it("name the function and the guest's line, as lua5.4's do", function()
        local out = same [[
          local function try(f, ...) print(select(2, pcall(f, ...))) end
          try(function() os.date({}) end)
          try(function() local d = os.date d({}) end)
          try(function() os.time(1) end)
          try(function() os.difftime("x") end)
          try(function() os.difftime(5) end)
          try(function() os.date("%Y", "x") end)
          try(function() os.date("%Q") end)
          try(function() os.date("%") end)
          try(function() os.date("%E") end)
          try(function() math.randomseed({}) end)
          try(function() math.randomseed(1, "x") end)
          try(function() math.randomseed(1.5) end)
          try(function() collectgarbage("bogus") end)
          try(function() collectgarbage({}) end)
          try(function() collectgarbage("step", "x") end)
          try(function() load(1, {}) end)
          try(function() load() end)
          try(function() load(nil) end)
          try(function() load("x", "n", {}) end)
          try(math.randomseed, "x")
          try(collectgarbage, "bogus")
          try(os.date, {})
          try(load)
          print(select("#", math.randomseed(7)), math.randomseed(7))
          print(collectgarbage("step", 0) ~= nil, collectgarbage("isrunning"), type(collectgarbage("count")))]]
        assert.matches("^main.lua:2: bad argument #1 to 'date' %(string expected, got table%)\n", out)
        assert.matches("\nmain.lua:11: bad argument #1 to 'randomseed' %(number expected, got table%)\n", out)
        assert.matches("\nmain.lua:14: bad argument #1 to 'collectgarbage' %(invalid option 'bogus'%)\n", out)
        assert.matches("\nbad argument #1 to 'math.randomseed' %(number expected, got string%)\n", out)
      end)

      it("from collectgarbage are Lua's: no option is withheld", function()
        same [[
          for _, opt in ipairs { "stop", "restart", "setpause", "setstepmul", "generational", "incremental" } do
            print(opt, pcall(function() return collectgarbage(opt) end))
          end
          print(collectgarbage("stop"), collectgarbage("isrunning"), collectgarbage("restart"), collectgarbage("isrunning"))
          print(collectgarbage("incremental", 150, 300, 12), collectgarbage("setpause", 200), collectgarbage("setstepmul", 100))
          print(collectgarbage("generational", 30, 120), collectgarbage("incremental"))]]
      end)
    end)

    describe("os.date and os.time", function()
      it("take a \\0 in a format as a character, as lua5.4 does", function()
        assert.equal("a\0b1970\0\t7\n", same [[local s = os.date("!a\0b%Y\0", 0) print(s, #s - 1)]])
        same [[print(pcall(os.date, "!%Y\0%Q", 0)) print(os.date("!*t\0", 0) == nil)]]
      end)

      it("have lua5.4's bounds and messages at extreme years", function()
        same [[
          local function T(t)
            local ok, r = pcall(os.time, t)
            local s = {}
            if ok then
              for _, k in ipairs { "year", "month", "day", "hour", "min", "sec", "yday", "wday", "isdst" } do
                s[#s + 1] = tostring(t[k])
              end
            end
            print(ok, r, table.concat(s, " "))
          end
          local I = 2 ^ 31
          T { year = I, month = 1, day = 1 }
          T { year = I + 1899, month = 1, day = 1 }
          T { year = I + 1900, month = 1, day = 1 }
          T { year = -I + 1900, month = 1, day = 1 }
          T { year = -I + 1899, month = 1, day = 1 }
          T { year = I + 1899, month = 12, day = 31, hour = 23, min = 59, sec = 59 }
          T { year = I + 1899, month = 12, day = 32 }
          T { year = 2000, month = I, day = 1 }
          T { year = 2000, month = I - 1, day = 1 }
          T { year = 2000, month = -I, day = 1 }
          T { year = 2000, month = -I + 1, day = 1 }
          T { year = 2000, month = 1, day = 1, sec = I - 1 }
          T { year = 2000, month = 1, day = 1, sec = -I }
          T { year = 2000, month = 1, day = 1, sec = I }
          T { year = 2000, month = 1, day = 1, sec = 1.5 }
          T { year = 2000, month = 1, day = 1, sec = "10" }
          T { year = "2000", month = 1, day = 1 }
          T { year = 2000, day = 1 }
          for _, t in ipairs { 2 ^ 60, 67767976233532799, 67767976233532800, -67768040609740800,
                               -67768040609740801, math.mininteger, math.maxinteger, 2 ^ 63, 1.5 } do
            print(pcall(os.date, "!%Y", t))
          end
          print(pcall(os.date, "!*t", 67767976233316800))
          print(os.difftime(math.maxinteger, math.mininteger), os.difftime(5.0, 2))]]
      end)

      it("honour isdst as lua5.4 does in UTC: daylight time is read one hour ahead", function()
        local out = same [[
          for _, dst in ipairs { true, false, 1, "yes" } do
            local t = { year = 2000, month = 7, day = 1, hour = 0, isdst = dst }
            print(os.time(t), t.year, t.month, t.day, t.hour, t.isdst)
          end
          local t = { year = 2000, month = 1, day = 1 }
          print(os.time(t), t.isdst)]]
        assert.matches("^962406000\t2000\t6\t30\t23\tfalse\n", out)
      end)

      it("differ on purpose in one place: time -1 is a time, where lua5.4 takes mktime's -1 for failure", function()
        files [[print(pcall(os.time, { year = 1970, month = 1, day = 1, hour = 0, sec = -1 }))]]
        local out = lua54()
        assert.equal("false\ttime result cannot be represented in this installation\n", out)
        assert.equal("true\t-1\n", guest().log)
      end)
    end)

    describe("load at top level", function()
      it("returns a message, never the worker's error table, for a failing reader or deep nesting", function()
        files [[
          print(load("return " .. ("("):rep(300) .. "1" .. (")"):rep(300)))
          print(load(("a = {"):rep(250)))
          print(load(function() error("reader failed", 0) end))
          print(load(function() error(42) end))
          print(load(function() error() end))
          local n = 0
          print(load(function() n = n + 1 if n == 1 then return "return " end error("second", 0) end))
          print(load(function() return {} end))]]
        local out = lua54()
        -- lua.c's traceback handler leaks into lua5.4's messages at top level; without it:
        -- (its handler also names a nil error object, which load itself returns as nil).
        out = out:gsub("\nstack traceback:\n.-\n\t%[C%]: in %?", ""):gsub("%(error object is a nil value%)", "nil")
        local log = guest().log
        assert.equal(out, log)
        assert.matches("^nil\tC stack overflow\n", log)
        assert.not_matches("table:", log)
      end)
    end)
  end)
end
