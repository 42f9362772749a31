-- attack_spec.lua -- real escape attempts against the guest-tier confinement
-- (spec/fixtures/attack.c). Each attack runs three ways:
--   guest     rlimits + Landlock deny-all + the worker's seccomp allowlist: it must
--             die by SIGSYS or be refused (DENIED), never succeed;
--   none      the control: the same attack unconfined must succeed here (root,
--             x86_64), so a confinement that did nothing would fail the test;
--             where it cannot succeed even unconfined, for a reason the spec
--             names, the case is skipped with that reason (after checking the
--             guest run did not succeed either);
--   landlock  Landlock alone, for the attacks it covers: the second layer must
--             hold without seccomp.
local airlock = require "airlock"
local H = require "helper"

-- Always the release build, like H.hostile: the fixture is not what is under test.
local ATTACK = "build/bin/attack"
local SIGSYS_STATUS = 128 + 31   -- the shell's status for death by SIGSYS
local SIGXFSZ_STATUS = 128 + 25

local function shell(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return out
end

local ARCH = shell("uname -m"):match("%S+")

-- Runs `attack PROFILE NAME [FD]` and parses the output contract. The shell's
-- own stderr goes into the pipe too ("exec 2>&1"), so its "Bad system call"
-- notice does not litter the test output.
local function attack(profile, name, fd)
  local out = shell(string.format("exec 2>&1; %s %s %s%s; echo status $?", ATTACK, profile, name,
    fd and (" " .. fd) or ""))
  local q = name:gsub("%-", "%%-")
  local r = { out = out, profile = profile, name = name }
  r.status = tonumber(out:match("status (%d+)\n$"))
  r.attempted = out:match("ATTEMPT " .. q .. "\n") ~= nil
  local errno, ename = out:match("DENIED " .. q .. " errno=(%d+) (%S+)")
  r.errno, r.ename = tonumber(errno), ename
  r.succeeded = out:match("SUCCEEDED " .. q .. " ([^\n]*)")
  r.blocked_nr = tonumber(out:match("airlock: seccomp: blocked system call (%d+)"))
  r.confine_failed = out:match("CONFINE%-FAILED ([^\n]*)")
  return r
end

local function describe_run(r)
  return string.format("attack %s %s:\n%s", r.profile, r.name, r.out)
end

-- The run got as far as the attempt: every layer of the profile was applied.
local function assert_attempted(r)
  assert.is_nil(r.confine_failed, describe_run(r))
  assert.is_true(r.attempted, describe_run(r))
end

-- The attacks, the system call seccomp must catch first (x86_64 numbers, checked
-- only when the SIGSYS report line is there), and, where the unconfined control
-- may legitimately fail on some machine, why.
local ATTACKS = {
  { "socket-inet", nr = { 41 } },                       -- socket
  { "abstract-connect", nr = { 41 } },                  -- socket, before connect
  { "connect-localhost", nr = { 41 } },
  { "open-passwd", nr = { 257 } },                      -- openat
  { "creat-tmp", nr = { 257 } },
  { "inherited-fd-write" },                             -- its own test below
  { "fork", nr = { 56 } },                              -- glibc fork() is clone
  { "clone", nr = { 56 } },
  { "execve-sh", nr = { 59 } },
  { "ptrace-parent", nr = { 101 },
    may_fail = "ptrace of the parent needs CAP_SYS_PTRACE or a permissive Yama ptrace_scope" },
  { "kill-parent", nr = { 62 } },
  { "process-vm-readv-parent", nr = { 310 },
    may_fail = "reading the parent's memory needs ptrace access (CAP_SYS_PTRACE or Yama)" },
  { "unshare-user", nr = { 272 },
    may_fail = "user namespaces may be disabled (sysctls, AppArmor, max_user_namespaces)" },
  { "mount", nr = { 165 }, may_fail = "mounting needs CAP_SYS_ADMIN in the mount namespace's owner" },
  { "keyctl", nr = { 250 }, may_fail = "a kernel without CONFIG_KEYS answers ENOSYS" },
  { "bpf", nr = { 321 },
    may_fail = "BPF_PROG_LOAD needs CAP_BPF or kernel.unprivileged_bpf_disabled=0" },
  { "perf-event-open", nr = { 298 }, may_fail = "kernel.perf_event_paranoid may forbid it" },
  { "io-uring-setup", nr = { 425 }, may_fail = "kernel.io_uring_disabled may forbid it" },
  { "personality", nr = { 135 } },
  -- x32 and int $0x80 are foreign to the native filter: kill-process at once,
  -- no report line; if one appears anyway, it must name the attempted call.
  { "x32-syscall", nr = { 0x40000000 | 39 }, foreign_abi = true,
    may_fail = "a kernel without CONFIG_X86_X32_ABI answers ENOSYS to x32 numbers" },
  { "int80", nr = { 20 }, foreign_abi = true,
    may_fail = "a kernel without IA32 emulation (or ia32_emulation=0) faults on int $0x80" },
  { "proc-environ", nr = { 257 },
    may_fail = "reading another process's environ needs ptrace read access" },
  { "fork-bomb", nr = { 56 },
    may_fail = "without root, RLIMIT_NPROC may stop the unconfined bomb first" },
}

-- What the guest tier must do to an attack: SIGSYS, or an error; never success.
local function assert_guest_stops(spec, r)
  assert_attempted(r)
  assert.is_nil(r.succeeded, "the attack SUCCEEDED under the guest profile: " .. describe_run(r))
  if r.status == SIGSYS_STATUS then
    if r.blocked_nr and spec.nr and ARCH == "x86_64" then
      local expected = false
      for _, nr in ipairs(spec.nr) do expected = expected or nr == r.blocked_nr end
      assert.is_true(expected, string.format("seccomp reported call %d, expected %s: %s",
        r.blocked_nr, table.concat(spec.nr, " or "), describe_run(r)))
    end
  else
    assert.equal(0, r.status, describe_run(r))
    assert.is_not_nil(r.errno, "neither SIGSYS nor DENIED: " .. describe_run(r))
  end
end

-- The control: unconfined, the attack must work, or fail only for its stated
-- reason. Returns the run, and when the control failed, the skip's reason.
local function check_control(spec)
  local r = attack("none", spec[1])
  assert_attempted(r)
  if r.succeeded then
    assert.equal(0, r.status, describe_run(r))
    return r
  end
  assert.is_not_nil(spec.may_fail, "the unconfined control did not succeed, so the guest "
    .. "result proves nothing: " .. describe_run(r))
  return r, string.format("the unconfined control fails on this machine (%s): %s",
    r.ename and ("errno=" .. r.errno .. " " .. r.ename) or ("status " .. tostring(r.status)),
    spec.may_fail)
end

-- The worker's compiled filter, as BPF instructions { code, jt, jf, k }.
local function worker_filter()
  local prog = assert(require("airlock.core").seccomp_worker_program(1))
  local insns = {}
  for at = 1, #prog, 8 do
    local code, jt, jf, k = string.unpack("<I2I1I1I4", prog, at)
    insns[#insns + 1] = { code = code, jt = jt, jf = jf, k = k }
  end
  return insns
end

-- What airlock controls of a foreign-ABI attack, checked in the program: it
-- first loads seccomp_data.arch (offset 4) and sends every architecture but
-- x86_64 (AUDIT_ARCH_X86_64) to a kill, before any rule is looked at.
local function assert_arch_guard()
  local f = worker_filter()
  assert.is_true(#f > 3)
  assert.same({ 0x20, 4 }, { f[1].code, f[1].k }, "the filter does not start by loading the arch")
  assert.same({ 0x15, 0xc000003e, 0 }, { f[2].code, f[2].k, f[2].jt },
    "the filter's second instruction is not a jump on x86_64")
  local miss = f[3 + f[2].jf]
  assert.equal(0x06, miss.code & 0x07, "a foreign architecture does not go to a return")
  local action = miss.k & 0xffff0000
  assert.is_true(action == 0x80000000 or action == 0, string.format(
    "a foreign architecture is not killed (action 0x%08x)", action))
end

describe("the guest-tier confinement", function()
  it("has a spec for every attack the fixture knows", function()
    local known = {}
    for _, spec in ipairs(ATTACKS) do known[spec[1]] = true end
    local listed = 0
    for name in shell(ATTACK .. " list"):gmatch("[^\n]+") do
      assert.is_true(known[name], "attack '" .. name .. "' has no spec")
      listed = listed + 1
    end
    assert.equal(#ATTACKS, listed)
  end)

  if ARCH == "x86_64" then
    it("kills every call of a foreign architecture (the filter's guard)", assert_arch_guard)
  end

  for _, spec in ipairs(ATTACKS) do
    local name = spec[1]
    if name ~= "inherited-fd-write" then
      it("stops " .. name .. " (and it works unconfined)", function()
        local _, skip = check_control(spec)
        local r = attack("guest", name)
        if not skip then
          assert_guest_stops(spec, r)
          return
        end
        -- The attack cannot be tried here; the guest must still not succeed,
        -- and what airlock controls is checked where it can be.
        assert.is_nil(r.succeeded, "the attack SUCCEEDED under the guest profile: " .. describe_run(r))
        if spec.foreign_abi and ARCH == "x86_64" then assert_arch_guard() end
        pending(skip)
      end)
    end
  end
end)

describe("Landlock on its own", function()
  -- The kernel's Landlock ABI, from the probe (airlock.core.probe).
  local abi = require("airlock.core").probe().landlock_abi

  -- attack, errno Landlock answers with, the ABI that introduced the restriction
  for _, case in ipairs {
    { "open-passwd", "EACCES", 1 },
    { "creat-tmp", "EACCES", 1 },
    { "proc-environ", "EACCES", 1 },
    { "execve-sh", "EACCES", 1 },          -- LANDLOCK_ACCESS_FS_EXECUTE
    { "mount", "EPERM", 1 },               -- a domain may not change the mount topology
    { "ptrace-parent", "EPERM", 1 },       -- no ptrace of a process outside the domain
    { "process-vm-readv-parent", "EPERM", 1 },
    { "connect-localhost", "EACCES", 4 },  -- LANDLOCK_ACCESS_NET_CONNECT_TCP
    { "abstract-connect", "EPERM", 6 },    -- LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
    { "kill-parent", "EPERM", 6 },         -- LANDLOCK_SCOPE_SIGNAL
  } do
    local name, ename, need = case[1], case[2], case[3]
    it("denies " .. name .. " with " .. ename, function()
      local r = attack("landlock", name)
      assert_attempted(r)
      assert.equal(0, r.status, describe_run(r))
      if abi < need then
        -- Not covered by this kernel's Landlock: show it really is not, and say so.
        assert.is_not_nil(r.succeeded, describe_run(r))
        pending(string.format("Landlock ABI %d < %d on this kernel, so Landlock alone cannot deny %s",
          abi, need, name))
        return
      end
      assert.is_nil(r.succeeded, "Landlock alone let it through: " .. describe_run(r))
      assert.equal(ename, r.ename, describe_run(r))
    end)
  end
end)

describe("an fd opened before confinement", function()
  local spec = { "inherited-fd-write" }

  it("is not writable under the guest profile when it is a file (RLIMIT_FSIZE 0)", function()
    -- write(2) is on the allowlist and Landlock checks rights at open time only,
    -- so neither layer stops a write through an fd that is already open; for a
    -- regular file, RLIMIT_FSIZE 0 does (SIGXFSZ, or EFBIG where it is ignored).
    local r = attack("guest", "inherited-fd-write")
    assert_attempted(r)
    assert.is_nil(r.succeeded, describe_run(r))
    assert.is_true(r.status == SIGXFSZ_STATUS or r.ename == "EFBIG", describe_run(r))
    print(string.format("\n  guest inherited-fd-write: %s", r.status == SIGXFSZ_STATUS
      and "killed by SIGXFSZ (RLIMIT_FSIZE 0)" or ("DENIED " .. tostring(r.ename))))

    r = check_control(spec)
    assert.is_not_nil(r.succeeded)
    r = attack("landlock", "inherited-fd-write")
    assert_attempted(r)
    assert.is_not_nil(r.succeeded, "Landlock was expected NOT to revoke an open fd: " .. describe_run(r))
  end)

  it("does not survive the real spawner, which closes every fd above 3", function()
    -- An fd above 3 in this process, not close-on-exec (io.open never sets it),
    -- so every child inherits it. Lower free numbers are filled with pads first.
    local function fd_of(path)
      local out = shell("for f in /proc/" .. H.pid() .. "/fd/*; do echo \"${f##*/} $(readlink \"$f\")\"; done")
      for line in out:gmatch("[^\n]+") do
        local n, target = line:match("^(%d+) (.*)$")
        if target == path then return tonumber(n) end
      end
    end
    local pads, path, f, fd = {}, nil, nil, nil
    finally(function()
      for _, h in ipairs(pads) do h:close() end
      if f then f:close() end
      if path then os.remove(path) end
    end)
    repeat
      if f then pads[#pads + 1] = f end
      path = os.tmpname()
      f = assert(io.open(path, "w"))
      fd = fd_of(path)
      assert.is_not_nil(fd, "the file's fd was not found in /proc")
      if fd <= 3 then os.remove(path) end
    until fd > 3
    f:setvbuf("no")

    -- Control: a plain child (through the shell) inherits it and writes through it.
    local r = attack("none", "inherited-fd-write", fd)
    assert.is_not_nil(r.succeeded, "the control could not write through the inherited fd: "
      .. describe_run(r))
    local size = #H.slurp(path)
    assert.is_true(size > 0)

    -- Through the spawner, even with no confinement at all, the fd is gone.
    local b <close> = airlock.broker()
    local run = assert(b:_start { argv = { ATTACK, "none", "inherited-fd-write", tostring(fd) },
      expect_ready = false, handlers = {}, deadline_ms = 3000 })
    local res = run:wait(b)
    assert.matches("ATTEMPT inherited%-fd%-write\n", res.stdout)
    assert.matches("DENIED inherited%-fd%-write errno=9 EBADF\n", res.stdout)
    assert.equal(size, #H.slurp(path), "the spawned child wrote into the parent's file")
  end)
end)
