-- sanitized_spec.lua -- the worker of the build under test (the ASan+UBSan one
-- in the sanitizer pass of spec/run) runs real guests. Every other spec uses
-- the release worker for confined runs: ASan's runtime needs system calls that
-- the worker's seccomp allowlist refuses, so this one turns seccomp off and
-- keeps every other layer, and shows that asking for seccomp is refused.
local airlock = require "airlock"
local H = require "helper"

local WORKER = H.bin .. "/airlock-worker"

local function policy(seccomp)
  return airlock.policy {
    name = "sanitized-worker",
    unconfined = true,   -- seccomp and the address-space limit off: the ASan worker cannot run under either
    worker = WORKER,
    -- No RLIMIT_AS (as = 0, not even the one limits.memory derives): ASan
    -- reserves terabytes of shadow address space.
    -- (the deadline: a guard against a hang, never a measure)
    limits = { deadline_ms = H.GUARD_S * 1000, memory = "64M", instructions = 1e9, output = "64K" },
    effects = { ["echo.back"] = function(args) return args end },
    confine = {
      namespaces = "all", capabilities = "drop", no_new_privs = true, landlock = true,
      seccomp = seccomp, rlimits = { nofile = 16, core = 0, as = 0, cpu = "10s", stack = "8M" },
      require = { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock",
                  seccomp and "seccomp" or nil },
    },
  }
end

describe("the worker of this build (" .. WORKER .. ")", function()
  it("runs a guest that uses effects, errors, coroutines and the memory cap", function()
    local res = assert(airlock.run { policy = policy(false), guest = [[
      local r = host.call("echo.back", { n = 41 })
      local ok = pcall(host.call, "no.such.effect", {})
      local t = {}
      for i = 1, 1000 do t[i] = tostring(i) end
      local co = coroutine.wrap(function() coroutine.yield(1) end)
      return { n = r.n + 1, refused = not ok, last = t[1000], co = co() }]] })
    assert.equal("ok", res.cause, res.message .. res.stderr)
    assert.same({ n = 42, refused = true, last = "1000", co = 1 }, res.value)
    assert.matches("^applied", res.confinement.landlock)
    assert.matches("^skipped: the policy does not ask", res.confinement.seccomp)
    res = assert(airlock.run { policy = policy(false),
      guest = [[local t = {} for i = 1, 1e9 do t[i] = string.rep("z", 4096) end]] })
    assert.equal("memory", res.cause, res.message)
  end)

  it("runs finalizers that print while replies are converted, and at the end", function()
    local res = assert(airlock.run { policy = policy(false), guest = [[
      local big = {}
      for i = 1, 200 do big[i] = ("x"):rep(100) .. i end
      warn("@on")
      for round = 1, 300 do
        setmetatable({}, { __gc = function() print("gc") end })
        setmetatable({}, { __gc = function() error("gc error") end })
        assert(host.call("echo.back", big)[200] == big[200])
      end
      local live = setmetatable({}, { __gc = function() print("at close") end })
      return 1]] })
    assert.equal("ok", res.cause, res.message .. res.stderr)
    assert.equal(300, select(2, res.log:gsub("gc\n", "")))
    assert.equal(300, select(2, res.log:gsub("Lua warning: error in __gc", "")))
    assert.matches("at close\n", res.log)
  end)

  it("takes the calendar's and load's extremes without undefined behaviour, as lua5.4 does", function()
    local src = [[
      local n = 0
      local function try(f, ...) if pcall(f, ...) then n = n + 1 end end
      local I = 2 ^ 31
      for _, y in ipairs { I + 1899, I + 1900, -I + 1900, -I + 1899 } do
        for _, m in ipairs { -I + 1, 1, 12, I } do
          try(os.time, { year = y, month = m, day = I - 1, hour = -I, min = I - 1, sec = -I, isdst = true })
        end
      end
      for _, t in ipairs { math.mininteger, math.maxinteger, -1, 0, 67767976233532799, -67768040609740800 } do
        try(os.date, "!*t", t) try(os.date, "!%c%Y%j\0%G", t) try(os.difftime, t, -t)
      end
      try(load, "return " .. ("("):rep(300) .. "1" .. (")"):rep(300))
      try(load, function() error({}) end)
      print(n)]]
    local dir = H.tmpdir()
    H.write(dir .. "/x.lua", src)
    local want = H.sh("TZ=UTC lua5.4 " .. dir .. "/x.lua")
    os.execute("rm -rf " .. dir)
    local res = assert(airlock.run { policy = policy(false), guest = src })
    assert.equal("ok", res.cause, res.message .. res.stderr)
    assert.not_matches("runtime error", res.stderr)
    assert.equal(want, res.log)
  end)

  if H.sanitized then
    it("refuses a policy that requires seccomp: the sanitizer worker cannot apply it", function()
      local res = assert(airlock.run { policy = policy(true), guest = "return 1" })
      assert.equal("confinement", res.cause)
      assert.matches("seccomp is required but skipped: this worker is a sanitizer build", res.message)
    end)
  else
    it("applies seccomp when required (release worker)", function()
      local res = assert(airlock.run { policy = policy(true), guest = "return 1" })
      assert.equal("ok", res.cause, res.message .. res.stderr)
      assert.matches("^applied: allowlist", res.confinement.seccomp)
    end)
  end
end)
