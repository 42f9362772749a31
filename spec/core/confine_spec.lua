-- confine_spec.lua -- the confinement layers of a run: each reported, verified
-- from outside, and fail-closed when the policy requires it.
local airlock = require "airlock"
local H = require "helper"

local LAYERS = { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp" }

-- Runs fn as if AIRLOCK_TEST_PRETEND_ABSENT=layers were set. Lua cannot set
-- an environment variable, and the parent reads the switch through os.getenv
-- as each run is planned, so os.getenv answers for it meanwhile.
local function with_absent(layers, fn)
  local real = os.getenv
  os.getenv = function(k)
    if k == "AIRLOCK_TEST_PRETEND_ABSENT" then return layers end
    return real(k)
  end
  local ok, err = pcall(fn)
  os.getenv = real
  if not ok then error(err, 0) end
end

describe("confinement of a run", function()
  for _, layer in ipairs(LAYERS) do
    it("fails closed with cause confinement when required " .. layer .. " is unavailable", function()
      with_absent(layer, function()
        local res = assert(airlock.run { guest = [[print("guest code ran") return 1]] })
        assert.equal("confinement", res.cause)
        assert.matches(layer .. " is required but skipped: pretending this kernel lacks it", res.message)
        assert.equal("", res.log, "no guest code may run")
        assert.is_nil(res.value)
      end)
    end)

    it("runs on, and says " .. layer .. " was skipped, when the policy does not require it", function()
      with_absent(layer, function()
        local res = assert(airlock.run { guest = "return 7", policy = { unconfined = true, confine = { require = {} } } })
        assert.equal("ok", res.cause, res.message)
        assert.equal(7, res.value)
        assert.matches("^skipped: pretending", res.confinement[layer])
      end)
    end)
  end

  it("fails closed when a cgroup is required: none can be configured yet, and it says so", function()
    local res = assert(airlock.run { guest = "return 1",
      policy = { unconfined = true, confine = { require = { "cgroup" } } } })
    assert.equal("confinement", res.cause)
    assert.matches("cgroup is required but skipped: no delegated cgroup", res.message)
  end)

  it("names the system call when a compromised worker is killed by seccomp", function()
    local res = assert(airlock.run { guest = "return 1", policy = {
      worker = { H.hostile, "escape-socket" }, effects = { ping = function() return 1 end } } })
    assert.equal("seccomp", res.cause)
    assert.matches("system call socket %(number 41%)", res.message)
    assert.not_matches("ESCAPED", res.stderr)
    -- The stand-in reports no layers; the parent's own check of Seccomp: 2 on
    -- ready let it on (without a filter the cause would be confinement), and
    -- its one call was answered.
    assert.equal(1, res.usage.effects)
  end)

  it("checks the worker's namespaces from outside: they differ from the parent's", function()
    -- A guest cannot see its pid, so look at a parked run from here.
    local b <close> = airlock.broker()
    local parked
    local run = assert(b:start { guest = [[return host.call("wait.here", {})]], policy = {
      effects = { ["wait.here"] = function() parked = true return airlock.defer() end } } })
    while not parked do assert(b:step(50)) end
    local pid = run:pid()
    for _, ns in ipairs { "user", "pid", "net", "ipc", "uts", "mnt", "cgroup" } do
      local mine = H.readlink("/proc/self/ns/" .. ns)
      local theirs = H.readlink("/proc/" .. pid .. "/ns/" .. ns)
      assert.is_string(theirs, ns)
      assert.are_not.equal(mine, theirs, ns .. " namespace is shared with the parent")
    end
    local status = H.slurp("/proc/" .. pid .. "/status")
    assert.matches("\nSeccomp:%s+2\n", status)
    assert.matches("\nNoNewPrivs:%s+1\n", status)
    for _, cap in ipairs { "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb" } do
      assert.matches("\n" .. cap .. ":%s+0000000000000000\n", status, cap)
    end
    local limits = H.slurp("/proc/" .. pid .. "/limits")
    assert.matches("Max open files%s+8%s+8", limits)
    assert.matches("Max cpu time%s+2%s+3", limits)   -- limits.cpu (1 s) and 1 s, the backstop
    assert.matches("Max core file size%s+0%s+0", limits)
    run:cancel()
    while run:live() do b:step(50) end
  end)

  -- Parks n runs of pol on a deferred effect; returns the broker, the runs' pids and a release function.
  local function parked(n, pol)
    local b = airlock.broker()
    local waiting, runs, pids = 0, {}, {}
    pol = pol or {}
    pol.effects = { ["wait.here"] = function() waiting = waiting + 1 return airlock.defer() end }
    for i = 1, n do
      runs[i] = assert(b:start { guest = [[return host.call("wait.here", {})]], policy = pol })
    end
    while waiting < n do assert(b:step(50)) end
    for i = 1, n do pids[i] = runs[i]:pid() end
    return pids, function()
      for _, r in ipairs(runs) do r:cancel() end
      while b:live() > 0 do b:step(50) end
      b:close()
    end
  end

  it("puts every run in one shared, empty net namespace (untrusted's shared_net)", function()
    local pids, release = parked(3)
    local nets = {}
    for i, pid in ipairs(pids) do nets[i] = H.readlink("/proc/" .. pid .. "/ns/net") end
    release()
    assert.equal(nets[1], nets[2])
    assert.equal(nets[1], nets[3])
    assert.are_not.equal(H.readlink("/proc/self/ns/net"), nets[1])
  end)

  it("gives each run its own net namespace when shared_net is off", function()
    local pids, release = parked(2, { confine = { shared_net = false } })
    local a, b = H.readlink("/proc/" .. pids[1] .. "/ns/net"), H.readlink("/proc/" .. pids[2] .. "/ns/net")
    local dev = H.slurp("/proc/" .. pids[1] .. "/net/dev")
    release()
    assert.is_string(a)
    assert.are_not.equal(a, b)
    -- A fresh namespace: nothing but its loopback device.
    local devices = {}
    for name in dev:gmatch("\n%s*([%w_.-]+):") do devices[#devices + 1] = name end
    assert.same({ "lo" }, devices)
  end)

  it("refuses a misspelt confine key or layer name when the policy is loaded", function()
    local ok, err = pcall(airlock.policy, { confine = { seccom = true } })
    assert.is_false(ok)
    assert.matches("unknown key 'confine.seccom' %(did you mean 'seccomp'%?%)", err)
    ok, err = pcall(airlock.policy, { confine = { require = { "landlok" } } })
    assert.is_false(ok)
    assert.matches("confine.require must be a list of layers", err)
    assert.matches("'landlok' is not one", err)
    ok, err = pcall(airlock.policy, { confine = { namespaces = { "network" } } })
    assert.is_false(ok)
    assert.matches("'network' is not one", err)
  end)
end)
