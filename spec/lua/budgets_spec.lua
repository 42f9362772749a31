-- budgets_spec.lua -- budgets are not confinement. How much a guest or a
-- program may use (CPU, memory, stack, instructions, deadline, output) is
-- sized by a derived policy up to the host's ceilings, with every layer on
-- and no opt-out; what it can reach (namespaces, Landlock, seccomp, ...) stays
-- locked. Each case has a control that fails: the stock budget stops the same
-- guest, the same raise past the ceiling is refused, a layer really turned
-- off still warns.
local H = require "helper"
local airlock = require "airlock"
local core = require "airlock.core"
local confine = require "airlock.confine"
local policy = airlock.policy

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")
local dir = H.tmpdir()
local GUEST = dir .. "/guest.lua"
H.write(GUEST, "return 42\n")

local function file(name, text)
  local path = dir .. "/" .. name .. ".lua"
  H.write(path, text)
  return path
end

-- `airlock ARGS` with stdout and stderr apart: out, err, exit status.
local function cli(args, env)
  local errf = os.tmpname()
  local p = io.popen((env or "") .. " " .. AIRLOCK .. " " .. args .. " 2>" .. errf .. "; echo \"rc=$?\"")
  local out = p:read("a")
  p:close()
  local err = H.read(errf)
  os.remove(errf)
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  return (out:gsub("rc=%d+\n$", "")), err, rc
end

-- The ceilings as the process had them, put back after each case.
local saved
before_each(function() saved = policy.ceilings() end)
after_each(function() policy.ceilings(saved) end)

-- Every isolation layer of untrusted applied, from a result's report.
local function fully_confined(res)
  for _, layer in ipairs { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp" } do
    assert.matches("^applied", tostring(res.confinement[layer]), layer)
  end
end

describe("a budget raised by a derived policy", function()
  it("memory: limits.memory = 1G lets a guest hold 512 MiB of heap; stock untrusted stops it", function()
    local fill = "local mb = ('x'):rep(1 << 20) local t = {} for i = 1, 512 do t[i] = mb .. i end return #t"
    -- CPU and wall clock raised too: faulting in 512 MiB takes a second of
    -- system time on a busy machine, past untrusted's 1 s.
    local more = { deadline_ms = "60s", cpu = "30s" }
    local big = policy.extend("untrusted", { limits = { memory = "1G", deadline_ms = "60s", cpu = "30s" } })
    local res = assert(airlock.run { guest = fill, policy = big })
    assert.equal("ok", res.cause, res.message)
    assert.equal(512, res.value)
    fully_confined(res)
    -- the address space followed the heap: 1G, half again, 64M
    local as = (1 << 30) + (1 << 29) + (64 << 20)
    assert.matches("as=" .. as .. " %(from limits.memory", res.confinement.rlimits)
    -- control: the same guest under untrusted's 64M heap
    local ctl = assert(airlock.run { guest = fill, policy = policy.extend("untrusted", { limits = more }) })
    assert.equal("memory", ctl.cause, ctl.message)
    assert.equal("not enough memory: the guest's Lua heap reached its limit of 64M (limits.memory)", ctl.message)
    ctl = assert(airlock.run { guest = fill })   -- stock untrusted as it is
    assert.equal("memory", ctl.cause, ctl.message)
  end)

  it("memory: a heap of small tables fills its raised cap before the derived address space stops it", function()
    local fill = "local t = {} local i = 0 while true do i = i + 1 t[i] = { i, i } end"
    local res = assert(airlock.run { guest = fill, policy = policy.extend("untrusted", {
      limits = { memory = "128M", deadline_ms = "60s", cpu = "30s" } }) })
    assert.equal("memory", res.cause)
    assert.equal("not enough memory: the guest's Lua heap reached its limit of 128M (limits.memory)", res.message)
    -- control: an address space the policy sets lower is what stops it then
    res = assert(airlock.run { guest = fill, policy = policy.extend("untrusted", {
      limits = { memory = "128M", deadline_ms = "60s", cpu = "30s" },
      confine = { rlimits = { as = "96M" } } }) })
    assert.equal("memory", res.cause)
    assert.matches("address space reached its limit of 96M %(confine.rlimits.as%)", res.message)
  end)

  it("CPU: limits.cpu raised past untrusted's 1 s needs no opt-out; the stock 1 s stops the guest", function()
    -- Burns until the worker's own CPU clock (os.clock) reads 3 s: past
    -- untrusted's CPU budget (limits.cpu, 1 s).
    local burn = "while os.clock() < 3 do for _ = 1, 1e5 do end end return 1"
    local p = policy.extend("untrusted", { limits = { deadline_ms = H.GUARD_S .. "s", cpu = "35s" } })
    assert.is_not_true(p.unconfined)
    local res = assert(airlock.run { guest = burn, policy = p })
    assert.equal("ok", res.cause, res.message)
    fully_confined(res)
    assert.matches("cpu=36s %(from limits.cpu and 1 s%)", res.confinement.rlimits)   -- the backstop
    -- control
    res = assert(airlock.run { guest = burn,
      policy = policy.extend("untrusted", { limits = { deadline_ms = H.GUARD_S .. "s" } }) })
    assert.equal("cpu", res.cause, res.message)
    assert.equal("CPU budget of 1000 ms used up (limits.cpu)", res.message)
    -- rlimits.cpu, the backstop a policy without limits.cpu keeps, is a budget too
    assert.equal(35, policy.extend("untrusted", { confine = { rlimits = { cpu = "35s" } } }).confine.rlimits.cpu)
    -- stack, a budget too
    assert.equal(16 << 20, policy.extend("untrusted", { confine = { rlimits = { stack = "16M" } } }).confine.rlimits.stack)
  end)

  it("prints no WITHOUT-confinement warning, and runs under AIRLOCK_REQUIRE_CONFINEMENT=1", function()
    local raise = file("raise", 'return { limits = { memory = "256M", deadline_ms = "20s", cpu = "35s" }, ' ..
      'confine = { rlimits = { stack = "16M" } } }')
    -- the opt-out alone, every layer kept: not less confinement either
    local flagged = file("flagged", 'return { unconfined = true, confine = { rlimits = { cpu = "35s" } } }')
    for _, path in ipairs { raise, flagged } do
      local out, err, rc = cli("run " .. GUEST .. " --policy " .. path .. " --json")
      assert.equal(0, rc, err)
      assert.not_matches("WITHOUT", err)
      assert.equal("", err)
      local res = require("dkjson").decode(out)
      assert.equal(42, res.value)
      fully_confined(res)
      out, err, rc = cli("run " .. GUEST .. " --policy " .. path, "AIRLOCK_REQUIRE_CONFINEMENT=1")
      assert.equal(0, rc, err)
      assert.equal("42\n", out)
      assert.equal("", err)
    end
    -- The Lua API alike: admitted without a word.
    local p = assert(policy.resolve(raise, "untrusted"))
    assert.is_true(policy.always_admitted(p, "untrusted"))
    -- control: a layer really off, with the opt-out, warns and is refused under the variable
    local off = file("off", 'return { unconfined = true, confine = { landlock = false, require = {} } }')
    local out, err, rc = cli("run " .. GUEST .. " --policy " .. off)
    assert.equal(0, rc, err)
    assert.equal("42\n", out)
    assert.matches("airlock: WARNING: policy '[^']+' runs guests WITHOUT confinement %(less than the stock " ..
      "'untrusted': confine.landlock%)", err)
    out, err, rc = cli("run " .. GUEST .. " --policy " .. off, "AIRLOCK_REQUIRE_CONFINEMENT=1")
    assert.equal(2, rc)
    assert.equal("", out)
    assert.matches("AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it", err)
  end)

  it("tools: tool.confine.rlimits.cpu is a budget; each process's address space follows tool.limits.memory", function()
    local p = policy.extend("tool", { tool = { confine = { rlimits = { cpu = "60s" } } } })
    assert.equal(60, p.tool.confine.rlimits.cpu)
    local ws = H.tmpdir()
    finally(function() os.execute("rm -rf '" .. ws .. "'") end)
    local res = assert(airlock.exec { argv = { "true" }, workspace = ws, policy = p })
    assert.equal("ok", res.cause, res.message)
    assert.matches("as=" .. (4 << 30) .. " %(from tool.limits.memory%)", res.confinement.rlimits)
    assert.matches("cpu=60s", res.confinement.rlimits)
    -- raised with the ceiling: the address space follows
    policy.ceilings { memory = "6G" }
    res = assert(airlock.exec { argv = { "true" }, workspace = ws,
      policy = policy.extend("tool", { tool = { limits = { memory = "6G" } } }) })
    assert.equal("ok", res.cause, res.message)
    assert.matches("as=" .. (6 << 30) .. " ", res.confinement.rlimits)
  end)
end)

describe("isolation", function()
  it("stays locked: turning a layer off is refused as before", function()
    for _, c in ipairs {
      { { confine = { landlock = false } }, "confine.landlock" },
      { { confine = { seccomp = false } }, "confine.seccomp" },
      { { confine = { namespaces = { "user" } } }, "confine.namespaces" },
      { { confine = { rlimits = { nofile = 64 } } }, "confine.rlimits.nofile" },
      { { confine = { rlimits = { as = 0 } } }, "confine.rlimits.as" },
      { { confine = { mdwe = false } }, "confine.mdwe" },
    } do
      local ok, err = pcall(policy.extend, "untrusted", c[1])
      assert.is_false(ok)
      assert.matches("^policy: " .. c[2]:gsub("%.", "%%.") .. " is locked by the base policy 'untrusted'", err)
      -- a bare table: refused, naming the opt-out
      local res, rerr = airlock.run { guest = "return 1", policy = c[1] }
      assert.is_nil(res)
      assert.matches("less confinement than the stock 'untrusted' %(" .. c[2]:gsub("%.", "%%."), rerr)
      assert.matches("unconfined = true", rerr)
    end
    local ok, err = pcall(policy.extend, "tool", { tool = { confine = { seccomp = false } } })
    assert.is_false(ok)
    assert.matches("tool.confine.seccomp is locked", err)
    -- control: the same policies tighten freely
    assert.equal(4, policy.extend("untrusted", { confine = { rlimits = { nofile = 4 } } }).confine.rlimits.nofile)
  end)

  it("a lock that names a budget, or its section, holds it", function()
    local base = policy { name = "held", locked = { "confine.rlimits.cpu", "limits" },
      limits = { memory = "32M" }, confine = { rlimits = { cpu = 1 } } }
    assert.matches("confine.rlimits.cpu is locked", select(2, pcall(policy.extend, base,
      { confine = { rlimits = { cpu = 2 } } })))
    assert.matches("limits.memory is locked", select(2, pcall(policy.extend, base, { limits = { memory = "64M" } })))
    -- control: a lock on confine alone does not
    local free = policy { name = "free", locked = { "confine" }, confine = { rlimits = { cpu = 1 } } }
    assert.equal(2, policy.extend(free, { confine = { rlimits = { cpu = 2 } } }).confine.rlimits.cpu)
  end)
end)

describe("the host's ceilings", function()
  it("refuse a budget above them, naming the field, the value and the ceiling", function()
    local res, err = airlock.run { guest = "return 1", policy = { limits = { memory = "8G" } } }
    assert.is_nil(res)
    assert.matches("^policy: '[^']+' raises limits.memory to 8G %(the stock 'untrusted' has 64M%), above the " ..
      "host's memory ceiling of 4G%. To allow it, raise the ceiling: airlock%.policy%.ceilings{ memory = \"8G\" } " ..
      "in the host program, or %-%-ceiling memory=8G", err)
    res, err = airlock.run { guest = "return 1",
      policy = policy.extend("untrusted", { limits = { cpu = "20m" } }) }
    assert.is_nil(res)
    assert.matches("raises limits.cpu to 20m %(the stock 'untrusted' has 1s%), above the host's cpu " ..
      "ceiling of 10m", err)
    -- 0 (no limit) is above any ceiling but none
    res, err = airlock.run { guest = "return 1", policy = { limits = { memory = 0 } } }
    assert.is_nil(res)
    assert.matches("raises limits.memory to unlimited", err)
    assert.matches("ceilings{ memory = 0 }", err, 1, true)
    -- programs alike
    res, err = airlock.exec { argv = { "true" }, policy = { tool = { limits = { memory = "8G" } } } }
    assert.is_nil(res)
    assert.matches("raises tool.limits.memory to 8G %(the stock 'tool' has 4G%)", err)
    -- control: up to the ceiling is fine
    res = assert(airlock.run { guest = "return 1", policy = { limits = { memory = "4G" } } })
    assert.equal("ok", res.cause, res.message)
  end)

  it("raised through the Lua API let it through", function()
    assert.is_nil(airlock.run { guest = "return 1", policy = { limits = { memory = "8G" } } })
    local now = policy.ceilings { memory = "8G", cpu = "30m" }
    assert.equal(8 << 30, now.memory)
    assert.equal(30 * 60000, now.cpu)
    assert.equal(saved.stack, now.stack)   -- the others stay
    local res = assert(airlock.run { guest = "return 1", policy = { limits = { memory = "8G", cpu = "20m" } } })
    assert.equal("ok", res.cause, res.message)
    fully_confined(res)
    -- 0: none
    policy.ceilings { memory = 0 }
    res = assert(airlock.run { guest = "return 1", policy = { limits = { memory = 0 } } })
    assert.equal("ok", res.cause, res.message)
    -- wrong names and values are errors, and set nothing
    assert.has_error(function() policy.ceilings { memroy = "1G" } end,
      "ceilings: unknown ceiling 'memroy' (did you mean 'memory'?); the ceilings are cpu, memory, stack, " ..
      "instructions, deadline, output")
    assert.has_error(function() policy.ceilings { cpu = "lots", memory = "1G" } end)
    assert.equal(0, policy.ceilings().memory)
  end)

  it("raised on the command line let it through (--ceiling, AIRLOCK_CEILING)", function()
    local big = file("big", 'return { limits = { memory = "6G", cpu = "20m" } }')
    local out, err, rc = cli("run " .. GUEST .. " --policy " .. big)
    assert.equal(2, rc)
    assert.equal("", out)
    assert.matches("raises limits.cpu to 20m", err)
    assert.matches("%-%-ceiling cpu=20m", err)
    -- one raised is not enough: the next field is named
    out, err, rc = cli("run " .. GUEST .. " --policy " .. big .. " --ceiling cpu=20m")
    assert.equal(2, rc)
    assert.matches("raises limits.memory to 6G", err)
    out, err, rc = cli("run " .. GUEST .. " --policy " .. big .. " --ceiling cpu=20m,memory=6G")
    assert.equal(0, rc, err)
    assert.equal("42\n", out)
    assert.equal("", err)
    out, err, rc = cli("run " .. GUEST .. " --policy " .. big .. " --ceiling cpu=20m --ceiling memory=8G")
    assert.equal(0, rc, err)
    out, err, rc = cli("run " .. GUEST .. " --policy " .. big, "AIRLOCK_CEILING=cpu=20m,memory=6G")
    assert.equal(0, rc, err)
    assert.equal("42\n", out)
    -- exec takes it too
    out, err, rc = cli("exec --workspace " .. dir .. " --ceiling memory=6G --policy " ..
      file("tbig", 'return { tool = { limits = { memory = "6G" } } }') .. " -- true")
    assert.equal(0, rc, err)
    -- a wrong one is a usage error
    out, err, rc = cli("run " .. GUEST .. " --ceiling cpu=60")
    assert.equal(2, rc)
    assert.matches("needs a unit", err)
    out, err, rc = cli("run " .. GUEST, "AIRLOCK_CEILING=lots")
    assert.equal(2, rc)
    assert.matches("AIRLOCK_CEILING: 'lots' is not NAME=VALUE", err)
    -- the options are in --help
    out = cli("run --help")
    assert.matches("%-%-ceiling NAME=VALUE", out)
  end)

  it("cannot be raised by a policy file", function()
    local sneaky = file("sneaky", 'require("airlock").policy.ceilings { memory = 0 }\n' ..
      'return { limits = { memory = 0 } }')
    local pol, err = policy.resolve(sneaky, "untrusted")
    assert.is_nil(pol)
    assert.matches("a policy file cannot change the host's ceilings", err)
    assert.equal(saved.memory, policy.ceilings().memory)
  end)
end)

describe("the rlimits a guest's budgets derive", function()
  -- The planner alone: limits.cpu is the worker's session CPU budget (ms);
  -- RLIMIT_CPU is its backstop a second above, in whole seconds.
  local function rlimits_for(limits, rl)
    local plan = assert(confine.plan { role = "guest", confine = { rlimits = rl or { cpu = 1, nofile = 8 } }, limits = limits })
    return plan.start.rlimits, plan.layers.rlimits
  end

  it("RLIMIT_CPU: limits.cpu and 1 s, rounded up, when it is set; rlimits.cpu otherwise", function()
    local rl, line = rlimits_for { cpu = 30000 }
    assert.equal(31, rl.cpu)
    assert.matches("cpu=31s %(from limits.cpu and 1 s%)", line)
    assert.equal(3, (rlimits_for { cpu = 1500 }).cpu)
    assert.equal(2, (rlimits_for { cpu = 1000 }).cpu)
    -- control: unset (absent or 0), the policy's own
    assert.equal(1, (rlimits_for {}).cpu)
    assert.equal(1, (rlimits_for { cpu = 0 }).cpu)
  end)

  it("RLIMIT_AS: limits.memory, half again and 64M; a lower rlimits.as wins; 0 is none", function()
    local m = 64 << 20
    assert.equal(m + m // 2 + (64 << 20), (rlimits_for { memory = m }).as)
    assert.equal(100 << 20, (rlimits_for({ memory = m }, { as = 100 << 20 })).as)
    assert.equal(confine.address_space(m), (rlimits_for({ memory = m }, { as = 1 << 30 })).as)
    assert.is_nil((rlimits_for({ memory = m }, { as = 0, nofile = 8 })).as)
    assert.is_nil((rlimits_for({ memory = 0 }, { nofile = 8 })).as)
  end)
end)
