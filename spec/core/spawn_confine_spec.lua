-- spawn_confine_spec.lua -- airlock.spawn of real programs under a tool-like
-- confinement (Landlock paths, seccomp promises, namespaces), and
-- airlock.confine applied by a Lua process to itself. Every claim is checked by
-- what the program could or could not do.
local airlock = require "airlock"
local H = require "helper"

local NS = { "user", "net", "pid", "ipc", "uts", "mount" }
local CWD = H.readlink("/proc/self/cwd")

local ws   -- a fresh workspace per test

-- Read + exec on the system, write (and read) on the workspace, and the
-- promises of a tool that reads, writes and runs programs but has no network.
local function tool_spec(seccomp)
  return {
    landlock = { read = { "/usr", "/lib", "/lib64", "/bin", "/etc", ws },
                 exec = { "/usr", "/lib", "/lib64", "/bin" }, write = { ws }, scope = true },
    seccomp = seccomp or { promises = "stdio rpath wpath cpath proc exec" },
    no_new_privs = true,
  }
end

local function run(argv, opts)
  opts = opts or {}
  opts.argv = argv
  if opts.confine == nil then opts.confine = tool_spec() end
  if opts.namespaces == nil then opts.namespaces = NS end
  if opts.workspace == nil and opts.workdir == nil then opts.workspace = ws end
  if opts.deadline_ms == nil then opts.deadline_ms = H.GUARD_S * 1000 end   -- a hang guard
  local p = assert(airlock.spawn(opts))
  return p:wait()
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

local have_python = exists("/usr/bin/python3")

describe("airlock.spawn under a tool-like confinement", function()
  before_each(function()
    local p = io.popen("mktemp -d /tmp/airlock-ws-XXXXXX")
    ws = p:read("l")
    p:close()
  end)
  after_each(function()
    os.execute("rm -rf '" .. ws .. "'")
  end)

  it("runs cat on a readable file: cause ok, stdout is the file", function()
    local res = run { "/bin/cat", "/etc/hostname" }
    assert.equal("ok", res.cause, res.message)
    assert.is_true(res.ok)
    assert.equal(0, res.exit_code)
    assert.equal(H.slurp("/etc/hostname"), res.stdout)
    assert.is_number(res.usage.wall_ms)
  end)

  it("finds a program in PATH", function()
    local res = run { "cat", "/etc/hostname" }
    assert.equal("ok", res.cause, res.message)
    assert.equal(H.slurp("/etc/hostname"), res.stdout)
  end)

  it("cannot write outside the workspace (Landlock), even as a uid that owns /etc outside", function()
    local target = "/etc/airlock-spec-" .. H.pid()
    -- With a workdir, not a workspace: no read-only mount, so this is Landlock alone.
    local res = run({ "/bin/sh", "-c", "echo x > " .. target }, { workdir = "/tmp" })
    assert.equal("exit", res.cause)
    assert.is_false(res.ok)
    assert.not_equal(0, res.exit_code)
    assert.matches("Permission denied", res.stderr)
    assert.matches("exited with status %d+", res.message)
    assert.is_false(exists(target))
  end)

  it("writes, renames and reads back inside the workspace", function()
    local res = run { "/bin/sh", "-c",
      "cd " .. ws .. " && echo hi > a && mv a b && mkdir d && cat b && ls" }
    assert.equal("ok", res.cause, res.message .. " " .. res.stderr)
    assert.equal("hi\nb\nd\n", res.stdout)
    assert.equal("hi\n", H.slurp(ws .. "/b"))
  end)

  it("cannot read files that no rule lists", function()
    local res = run({ "/bin/cat", "/etc/hostname" }, { confine = {
      landlock = { exec = { "/usr", "/lib", "/lib64" } },
      seccomp = { promises = "stdio rpath exec" } } })
    assert.equal("exit", res.cause)
    assert.matches("/etc/hostname: Permission denied", res.stderr)
  end)

  it("kills python3 at socket() with cause seccomp, the call named", function()
    if not have_python then pending("no /usr/bin/python3") return end
    local res = run { "/usr/bin/python3", "-c", "import socket; print('before', flush=True); socket.socket(); print('after')" }
    assert.equal("seccomp", res.cause, res.message)
    assert.matches("system call socket %(number %d+%)", res.message)
    assert.equal("before\n", res.stdout)
  end)

  it("makes socket() fail with EPERM instead when refuse = 'EPERM'", function()
    if not have_python then pending("no /usr/bin/python3") return end
    local res = run({ "/usr/bin/python3", "-c", "import socket; socket.socket()" }, { confine = tool_spec {
      promises = "stdio rpath wpath cpath proc exec", refuse = "EPERM" } })
    assert.equal("exit", res.cause, res.message)
    assert.equal(1, res.exit_code)
    assert.matches("PermissionError", res.stderr)
  end)

  it("stops unshare -U (no new namespaces from inside)", function()
    local res = run { "/usr/bin/unshare", "-U", "true" }
    assert.is_false(res.ok)
    assert.equal("seccomp", res.cause, res.message)
    assert.matches("system call unshare", res.message)
  end)

  it("in denylist mode runs ordinary programs and kills the dangerous set, named", function()
    local deny = tool_spec { mode = "deny" }
    local res = run({ "/bin/cat", "/etc/hostname" }, { confine = deny })
    assert.equal("ok", res.cause, res.message)
    res = run({ "/usr/bin/unshare", "-U", "true" }, { confine = deny })
    assert.equal("seccomp", res.cause, res.message)
    assert.matches("system call unshare", res.message)
  end)

  it("names the call a grandchild makes, and kills the whole run", function()
    local res = run { "/bin/sh", "-c", "/usr/bin/unshare -U true; echo survived" }
    assert.equal("seccomp", res.cause, res.message)
    assert.matches("unshare", res.message)
    assert.not_matches("survived", res.stdout)
  end)

  it("ends sleep 100 at the deadline", function()
    local res = run({ "/bin/sleep", "100" }, { deadline_ms = 300 })
    assert.equal("deadline", res.cause, res.message)   -- sleep 100 itself would end ok
    assert.is_true(res.usage.wall_ms >= 300, res.usage.wall_ms)
  end)

  it("kill() ends a process (cause cancelled) and pid() answers while it lives", function()
    local p = assert(airlock.spawn { argv = { "/bin/sleep", "100" }, confine = tool_spec(), namespaces = NS })
    assert.is_number(p:pid())
    assert.is_true(p:kill())
    local res = p:wait()
    assert.equal("cancelled", res.cause)
    assert.is_nil(p:pid())
  end)

  it("leaves a program no capabilities, with or without a user namespace", function()
    for _, ns in ipairs { NS, {} } do
      local p = assert(airlock.spawn { argv = { "/bin/sh", "-c", "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status" },
        namespaces = ns })
      local res = p:wait()
      assert.equal("ok", res.cause, res.message)
      for line in res.stdout:gmatch("[^\n]+") do
        assert.matches("^Cap%a+:%s+0+$", line)
      end
    end
  end)

  it("applies rlimits in policy units, env and workdir", function()
    local res = run({ "/bin/sh", "-c", "ulimit -n; echo $GREETING; pwd" },
      { rlimits = { nofile = 16, as = "256M" }, env = { GREETING = "hello", PATH = "/usr/bin:/bin" }, workspace = ws })
    assert.equal("ok", res.cause, res.message .. " " .. res.stderr)
    assert.equal("16\nhello\n" .. ws .. "\n", res.stdout)
  end)

  it("refuses what cannot work, before anything starts", function()
    local p, err = airlock.spawn { argv = { "/bin/true" }, confine = { seccomp = { promises = "stdio rpath" } } }
    assert.is_nil(p)
    assert.matches("does not allow execve.*promise 'exec'", err)
    p, err = airlock.spawn { argv = { "/bin/true" }, confine = { landlock = { read = { "/nonexistent/airlock" } } } }
    assert.is_nil(p)
    assert.equal("confinement: landlock: /nonexistent/airlock: No such file or directory (ENOENT)", err)
    p, err = airlock.spawn { argv = { "no-such-program-airlock" } }
    assert.is_nil(p)
    assert.matches("not found in PATH", err)
    assert.has_error(function() airlock.spawn { argv = { "/bin/true" }, confinee = {} } end,
      "spawn: unknown option 'confinee'")
    assert.has_error(function()
      airlock.spawn { argv = { "/bin/true" }, confine = { landlock = { raed = { "/usr" } } } }
    end, "confine: unknown key 'landlock.raed' (valid: read, write, exec, bind, connect, scope)")
    p, err = airlock.spawn { argv = { "/bin/true" }, confine = { seccomp = { promises = "stdio rpth exec" } } }
    assert.is_nil(p)
    assert.matches("unknown promise 'rpth' %(valid: stdio rpath", err)
  end)
end)

describe("airlock.confine", function()
  -- Lua cannot fork: a lua5.4 process loads the module (release build) and
  -- confines itself, then reports what it could still do.
  local function lua_script(body)
    local script = 'package.cpath = "' .. CWD .. '/build/lib/?.so;" .. package.cpath\n' ..
      'local airlock = require "airlock"\n' .. body
    local p = assert(airlock.spawn { argv = { "lua5.4", "-e", script }, deadline_ms = H.GUARD_S * 1000 })
    return p:wait()
  end

  it("confines the calling process with Landlock: /etc/passwd is then unreadable", function()
    local res = lua_script [[
      local r, err = airlock.confine { landlock = { read = { "/usr", "/etc/hostname" } }, no_new_privs = true }
      print(r.landlock) print(r.seccomp) print(r.no_new_privs)
      print(io.open("/etc/passwd"))
      local f = io.open("/etc/hostname") print(f and "hostname readable")
    ]]
    assert.equal("ok", res.cause, res.message .. " " .. res.stderr)
    local lines = {}
    for l in res.stdout:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.matches("^applied: ABI %d+: fs rights 0x%x+ handled; paths: 2 read", lines[1])
    assert.equal("skipped: the spec does not ask for it", lines[2])
    assert.equal("applied: set", lines[3])
    assert.equal("nil\t/etc/passwd: Permission denied\t13", lines[4])
    assert.equal("hostname readable", lines[5])
  end)

  it("confines the calling process with seccomp: a call outside the promises kills it", function()
    local res = lua_script [[
      local r = assert(airlock.confine { seccomp = { promises = "stdio" } })
      print(r.seccomp) io.stdout:flush()
      io.open("/etc/hostname")
      print("still alive")
    ]]
    assert.equal("seccomp", res.cause, res.message)
    assert.equal("SIGSYS", res.signal)
    assert.matches("^applied: allowlist: promises 'stdio'", res.stdout)
    assert.not_matches("still alive", res.stdout)
  end)

  it("answers nil and a message when the spec cannot be applied, and applies nothing", function()
    local res = lua_script [[
      print(airlock.confine { landlock = { read = { "/nonexistent/airlock" } }, seccomp = { promises = "stdio" } })
      print(io.open("/etc/passwd") ~= nil)
    ]]
    assert.equal("ok", res.cause, res.message .. " " .. res.stderr)
    assert.equal("nil\tconfine: landlock: /nonexistent/airlock: No such file or directory (ENOENT)\t2\ntrue\n", res.stdout)
  end)

  it("rejects an unknown key by name", function()
    assert.has_error(function() airlock.confine { seccomp = { promises = "stdio", mdoe = "deny" } } end,
      "confine: unknown key 'seccomp.mdoe' (valid: promises, syscalls, mode, refuse)")
    assert.has_error(function() airlock.confine { landlok = true } end,
      "confine: unknown key 'landlok' (valid: landlock, seccomp, no_new_privs, observe, observe_connect)")
    -- observing is a spawned run's (its broker listens): this process has no listener
    assert.has_error(function() airlock.confine { observe = true } end,
      "confine: observe needs the listener of a spawned run (airlock.exec); this process has none")
    assert.has_error(function() airlock.confine { observe_connect = 3128 } end,
      "confine: observe_connect needs the listener of a spawned run (airlock.exec); this process has none")
    assert.has_error(function() airlock.confine { seccomp = { refuse = "EWHAT" } } end)
  end)
end)
