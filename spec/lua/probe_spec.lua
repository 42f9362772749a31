-- probe_spec.lua -- airlock.core.probe(), airlock.probe and `airlock probe` on
-- this machine. What the probe finds is compared with a control of the
-- spec's own (the kernel's files, or the kernel asked directly); where the
-- machine lacks a layer, the case checks the probe says so and is pending.
local H = require "helper"
local dk = require "dkjson"
require "airlock"
local core = require "airlock.core"
local probe = require "airlock.probe"

local AIRLOCK = H.bin .. "/airlock"

local sh = H.sh

local LAYERS = { "landlock", "seccomp", "seccomp_kill_process", "user_ns", "net_ns", "pid_ns",
                 "mount_ns", "ipc_ns", "uts_ns", "cgroup_ns", "pidfd", "cgroup2_delegated", "pids_cgroup" }

describe("airlock.core.probe", function()
  local r = core.probe()

  it("has one {ok, detail} entry per layer and the plain fields", function()
    for _, name in ipairs(LAYERS) do
      assert.is_table(r[name], name)
      assert.is_boolean(r[name].ok, name)
      assert.is_string(r[name].detail, name)
      assert.is_true(#r[name].detail > 0, name)
    end
    assert.is_boolean(r.is_root)
    assert.is_true(math.type(r.landlock_abi) == "integer")
    assert.is_true(math.type(r.unprivileged_userns_clone) == "integer")
    assert.is_true(math.type(r.apparmor_restrict_userns) == "integer")
    assert.is_true(r.unprivileged_userns_clone >= -1)
    assert.is_true(r.apparmor_restrict_userns >= -1)
    local uname = io.popen("uname -r")
    assert.equal(uname:read("l"), r.kernel)
    uname:close()
  end)

  it("finds the pids cgroup airlock exec uses (root, cgroup v1 pids or delegated v2 here)", function()
    local why = H.cgroup_absent("pids")
    assert.equal(why == nil, r.pids_cgroup.ok, r.pids_cgroup.detail .. "; " .. tostring(why))
    if why then pending(why) end
    assert.matches("^/sys/fs/cgroup/.*airlock %(cgroup v[12]%)$", r.pids_cgroup.detail)
  end)

  it("finds Landlock at the ABI the kernel answers, as the active LSM list implies when it is readable", function()
    assert.equal(H.landlock_abi(), r.landlock_abi)
    assert.equal(H.landlock_abi() >= 1, r.landlock.ok)
    if H.landlock_abi() < 1 then pending("this kernel has no Landlock (landlock_create_ruleset answers no ABI)") end
    assert.equal("ABI " .. r.landlock_abi, r.landlock.detail)
    local lsm = H.slurp("/sys/kernel/security/lsm")
    if lsm then
      local listed = (("," .. lsm:gsub("%s", "") .. ","):find(",landlock,", 1, true)) ~= nil
      assert.equal(listed, r.landlock.ok)
    end
  end)

  it("finds seccomp, user namespaces and pidfd", function()
    assert.is_true(r.seccomp.ok, r.seccomp.detail)
    assert.is_true(r.pidfd.ok, r.pidfd.detail)
    assert.equal(H.slurp("/proc/self/status"):match("Uid:%s*%d+%s+(%d+)") == "0", r.is_root)
    -- the control: unshare -U, as this process
    local userns = H.userns_works()
    assert.equal(userns, r.user_ns.ok, r.user_ns.detail)
    if not userns then pending("this kernel (or its AppArmor) refuses user namespaces here: " .. r.user_ns.detail) end
  end)

  it("leaves the caller in its own namespaces", function()
    local function ns()
      local t = {}
      for _, n in ipairs { "user", "pid", "net", "ipc", "uts", "mnt", "cgroup" } do
        local p = io.popen("readlink /proc/" .. H.pid() .. "/ns/" .. n)
        t[n] = p:read("l")
        p:close()
      end
      return t
    end
    local before = ns()
    core.probe()
    assert.same(before, ns())
    assert.same({}, H.children())
  end)
end)

describe("airlock.probe", function()
  local r = probe.report()

  it("gives every layer a consequence and a verdict for the untrusted policy", function()
    for _, name in ipairs(LAYERS) do assert.is_string(r[name].consequence, name) end
    assert.equal("untrusted", r.verdict.policy)
    assert.is_true(r.verdict.ok, r.verdict.detail)
    assert.is_nil(r.verdict.missing)
  end)

  it("formats one aligned line per layer with a yes/no mark and the detail", function()
    local text = probe.format(r)
    local col
    for _, name in ipairs(LAYERS) do
      local line = text:match("\n(" .. name .. " +[yesno]+ +[^\n]*)")
      assert.is_string(line, name)
      assert.truthy(line:find(r[name].detail, 1, true), name)
      local at = line:find(r[name].detail, 1, true)
      col = col or at
      assert.equal(col, at, "detail column of " .. name)
    end
    assert.matches("\nverdict: yes", text)
  end)
end)

describe("airlock probe", function()
  -- Where a layer the untrusted policy requires is absent (by the controls),
  -- the verdict is no, and these cases are pending.
  local function required_absent()
    if H.landlock_abi() < 1 then return "no Landlock here" end
    if not H.userns_works() then return "no user namespaces here" end
  end

  it("prints the layers and exits 0 here", function()
    local absent = required_absent()
    if absent then pending(absent .. ": the verdict is no") end
    local out, rc = sh(AIRLOCK .. " probe")
    assert.equal(0, rc, out)
    assert.matches("landlock +yes +ABI " .. core.probe().landlock_abi, out)
    assert.matches("verdict: yes", out)
  end)

  it("prints JSON with --json", function()
    local absent = required_absent()
    if absent then pending(absent .. ": the verdict is no") end
    local out, rc = sh(AIRLOCK .. " probe --json")
    assert.equal(0, rc, out)
    local obj = dk.decode(out)
    assert.is_table(obj)
    assert.equal(core.probe().landlock_abi, obj.landlock_abi)
    assert.is_true(obj.landlock.ok)
    assert.is_true(obj.user_ns.ok)
    assert.is_true(obj.verdict.ok)
  end)

  it("refuses an unknown option or argument with a usage error", function()
    local out, rc = sh(AIRLOCK .. " probe --bogus")
    assert.is_true(rc ~= 0)
    assert.equal(2, rc)
    assert.matches("unknown option %-%-bogus", out)
    out, rc = sh(AIRLOCK .. " probe extra")
    assert.equal(2, rc)
    assert.matches("unexpected argument 'extra'", out)
  end)

  it("is listed in the help", function()
    local out = sh(AIRLOCK .. " help")
    assert.matches("\n  probe %[%-%-json%]", out)
  end)
end)
