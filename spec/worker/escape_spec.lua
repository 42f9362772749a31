-- escape_spec.lua -- a guest that goes looking for a way out of the Lua
-- sandbox finds nothing usable, under the default (fully confined) policy.
-- The layers below the interpreter are proved by spec/core/attack_spec.lua.
local airlock = require "airlock"

local function run(src)
  local res = assert(airlock.run { guest = src })
  return res
end

-- Each probe returns a description of what it found, or nil when it found nothing.
local PROBES = {
  io = [[return io and "io library present"]],
  os_execute = [[return os and os.execute and "os.execute present"]],
  os_exit = [[return os and os.exit and "os.exit present"]],
  package = [[return package and (package.loadlib or package.cpath) and "package present"]],
  require_ffi = [[local ok, m = pcall(require, "ffi") return ok and m and "ffi loaded"]],
  require_io = [[local ok, m = pcall(require, "io") return ok and m and "io loaded through require"]],
  debug = [[return debug and "debug library present"]],
  dofile = [[return (dofile or loadfile) and "dofile/loadfile present"]],
  string_dump = [[return (string.dump or ("").dump) and "string.dump present"]],
  binary_chunk = [[
    -- A Lua 5.4 binary chunk header: load must refuse it in text-only mode.
    local f, err = load("\27Lua\84\0\25\147\13\10\26\10\4\8\8\120\86\0\0\0\0\0\0\0\0\0\0\0\40\119\64\1")
    return f and "binary chunk loaded" or (not tostring(err):match("binary") and ("odd error: " .. tostring(err)))]],
  binary_through_reader = [[
    local parts = { "\27Lua", "\84\0" }
    local i = 0
    local f = load(function() i = i + 1 return parts[i] end, "x", "b")
    return f and "binary chunk loaded through a reader with mode b"]],
  getregistry = [[return debug and debug.getregistry and "debug.getregistry present"]],
  string_metatable_escape = [[
    -- The string metatable's __index is the (reduced) string table: nothing new in it.
    local idx = getmetatable("").__index
    for _, k in ipairs { "dump", "execute", "loadlib", "open" } do
      if idx[k] then return "string metatable offers " .. k end
    end]],
  env_walk = [[
    -- Everything reachable from _G: no function that is not in the allowed set.
    local allowed = { _G = true, host = true, string = true, table = true, math = true, utf8 = true,
      coroutine = true, os = true, require = true }
    local seen, found = {}, nil
    local function walk(t, path, depth)
      if seen[t] or depth > 3 then return end
      seen[t] = true
      for k, v in pairs(t) do
        local name = path .. "." .. tostring(k)
        if type(k) == "string" and (k == "loadlib" or k == "execute" or k == "popen" or k == "open"
            or k == "getregistry" or k == "setmetatable_raw" or k == "dump") then
          found = name
        end
        if type(v) == "table" then walk(v, name, depth + 1) end
      end
    end
    walk(_G, "_G", 0)
    return found and ("found " .. found)]],
}

describe("a guest looking for a way out", function()
  for name, src in pairs(PROBES) do
    it("finds nothing: " .. name, function()
      local res = run(src)
      assert.equal("ok", res.cause, res.message)
      assert.is_falsy(res.value, tostring(res.value))
    end)
  end

  it("keeps the os shim harmless: only clock, time, date, difftime", function()
    local res = run [[local names = {} for k in pairs(os or {}) do names[#names + 1] = k end
      table.sort(names) return table.concat(names, ",")]]
    assert.equal("ok", res.cause, res.message)
    for word in res.value:gmatch("[^,]+") do
      assert.truthy(({ clock = true, time = true, date = true, difftime = true })[word], "os." .. word)
    end
  end)

  it("runs fully confined: every layer of the default policy applied", function()
    local res = run [[return 1]]
    assert.equal("ok", res.cause, res.message)
    for _, layer in ipairs { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp" } do
      assert.matches("^applied", res.confinement[layer], layer .. ": " .. tostring(res.confinement[layer]))
    end
    assert.matches("^skipped: no delegated cgroup", res.confinement.cgroup)
  end)

  it("does ordinary work under every layer without a false kill", function()
    local res = run [[
      local t = {}
      for i = 1, 20000 do t[i] = string.format("%05d", i) end
      table.sort(t, function(a, b) return a > b end)
      local s = table.concat(t, ",", 1, 100)
      local big = string.rep("x", 4 * 1024 * 1024)          -- a few MB through realloc/mmap
      local co = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i) end end)
      local ok, err = pcall(error, { code = 7 })
      print("hello from the guest")
      return { n = #t, first = t[1], len = #big, co = co() + co() + co(), err = err.code,
               now = os.time() > 0, clock = os.clock() >= 0, date = os.date("!%Y", 0),
               utf = utf8.len("héllo"), s = #s, rnd = math.random(1, 6) >= 1 }]]
    assert.equal("ok", res.cause, res.message)
    local v = res.value
    assert.same({ n = 20000, first = "20000", len = 4194304, co = 6, err = 7, now = true, clock = true,
                  date = "1970", utf = 5, s = 599, rnd = true }, v)
    assert.equal("hello from the guest\n", res.log)
  end)

  it("hits the memory cap as cause memory, not as a seccomp or rlimit kill", function()
    local res = run [[local t = {} for i = 1, 1e9 do t[i] = string.rep("y", 1024) .. i end]]
    assert.equal("memory", res.cause, res.message)
  end)

  -- collectgarbage is Lua's own, every option included: the cap is the
  -- allocator's, and Lua collects in an emergency before a memory error even
  -- with the collector stopped. So however the guest tunes the collector,
  -- garbage many times the cap is freed and live data past it is refused.
  for name, tune in pairs {
    stop = [[collectgarbage("stop")]],
    pause = [[collectgarbage("setpause", 100000) collectgarbage("setstepmul", 0)]],
    incremental = [[collectgarbage("incremental", 100000, 1, 60)]],
    generational = [[collectgarbage("generational", 100000, 100000) collectgarbage("stop")]],
  } do
    it("keeps a guest that retunes the collector (" .. name .. ") under the memory cap", function()
      local policy = { limits = { memory = "8M" } }
      local res = assert(airlock.run { policy = policy, guest = tune .. [[
        local peak = 0
        for i = 1, 40000 do   -- 40 MB of garbage, five times the cap
          local _ = string.rep("g", 1000) .. i
          if i % 100 == 0 then peak = math.max(peak, collectgarbage("count")) end
        end
        return peak]] })
      assert.equal("ok", res.cause, res.message)
      assert.is_true(res.value <= 8 * 1024, tostring(res.value))
      res = assert(airlock.run { policy = policy, guest = tune .. [[
        local keep = {} for i = 1, 40000 do keep[i] = string.rep("k", 1000) .. i end]] })
      assert.equal("memory", res.cause, res.message)
    end)
  end

  it("spinning forever ends as cause cpu (RLIMIT_CPU) or instructions, never as a crash", function()
    local res = run [[while true do end]]
    assert.truthy(res.cause == "cpu" or res.cause == "instructions", res.cause .. ": " .. res.message)
  end)
end)
