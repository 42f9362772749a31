-- spawn_spec.lua -- the spawner's namespaces and the parent's outside checks
-- of what a child claims in ready (core level, through broker:_start).
local airlock = require "airlock"
local H = require "helper"

local function start(b, opts)
  opts.handlers = opts.handlers or {}
  opts.deadline_ms = opts.deadline_ms or H.GUARD_S * 1000   -- a hang guard
  if opts.argv[1] == H.hostile then opts.init = { t = "init", v = 1 } end
  local run = assert(b:_start(opts))
  return run:wait(b)
end

describe("the spawner", function()
  it("starts a child in its own user, pid, net, ipc, uts, mount and cgroup namespaces", function()
    local b <close> = airlock.broker()
    local res = start(b, { argv = { H.hostile, "ready-done" },
      namespaces = { "user", "pid", "net", "ipc", "uts", "mount", "cgroup" }, no_new_privs = true })
    assert.equal("ok", res.cause, res.message)
    assert.equal("fine", res.value)
  end)

  it("gives a program in a new user namespace no capabilities and no new privileges", function()
    local b <close> = airlock.broker()
    local res = start(b, { argv = { "/bin/sh", "-c", "grep -E '^(CapEff|NoNewPrivs|Uid)' /proc/self/status; echo pid $$" },
      expect_ready = false, namespaces = { "user", "pid" }, no_new_privs = true })
    assert.equal(0, res.exit_code)
    assert.matches("CapEff:%s+0000000000000000", res.stdout)
    assert.matches("NoNewPrivs:%s+1", res.stdout)
    assert.matches("Uid:%s+65534", res.stdout)
    assert.matches("pid 1\n", res.stdout)
  end)

  it("ends with cause confinement when ready arrives without the seccomp filter it must have", function()
    local b <close> = airlock.broker()
    local res = start(b, { argv = { H.hostile, "ready-done" }, verify_seccomp = true })
    assert.equal("confinement", res.cause)
    assert.matches("does not show a seccomp filter", res.message)
  end)

  it("refuses an unknown namespace name", function()
    local b <close> = airlock.broker()
    assert.has_error(function() b:_start { argv = { "/bin/true" }, handlers = {}, namespaces = { "time" } } end,
      "start: unknown namespace 'time' (user, pid, net, ipc, uts, mount, cgroup)")
  end)

  it("refuses a view that names no path, which would leave the whole file system visible", function()
    local b <close> = airlock.broker()
    for _, opts in ipairs { { view_ro = {} }, { view_rw = {} }, { view_ro = {}, view_rw = {} } } do
      opts.argv, opts.handlers, opts.namespaces = { "/bin/true" }, {}, { "user", "mount" }
      assert.has_error(function() b:_start(opts) end,
        "start: fields 'view_ro' and 'view_rw' name no path: a view of nothing is refused (it would leave " ..
        "the whole file system visible); give at least one path, or neither field")
    end
    -- Control: a view of the program's own directories starts it.
    local res = start(b, { argv = { "/bin/true" }, namespaces = { "user", "mount" },
                           view_ro = { "/usr", "/bin", "/lib", "/lib64" } })
    assert.equal(0, res.exit_code, res.message)
  end)

  it("refuses a misspelt option by name, so no layer is silently left out", function()
    local b <close> = airlock.broker()
    assert.has_error(function() b:_start { argv = { "/bin/true" }, handlers = {}, drop_cap = true } end,
      "start: unknown option 'drop_cap'")
    assert.has_error(function() b:_start { argv = { "/bin/true" }, handlers = {}, rlimits = { nofiles = 1 } } end,
      "start: unknown rlimit 'nofiles' (as, cpu, nofile, nproc, fsize, core, stack)")
    assert.has_error(function() b:_start { argv = { "/bin/true" }, handlers = {}, workdir = 1 } end,
      "start: field 'workdir' must be a directory")
    -- Control: the same options spelt right start a run.
    local res = start(b, { argv = { "/bin/true" }, drop_caps = true, namespaces = { "user" },
                           rlimits = { nofile = 64 }, expect_ready = false, program = true, workdir = "/" })
    assert.are.equal("ok", res.cause, res.message)
  end)

  it("says which step a failed spawn failed in, as a word after nil, message, errno", function()
    local b <close> = airlock.broker()
    local run, err, errno, step = b:_start { argv = { "/nonexistent/airlock-program" }, handlers = {},
                                             program = true, expect_ready = false }
    assert.is_nil(run)
    assert.matches("^spawn: exec /nonexistent/airlock%-program: No such file", err)
    assert.equal(2, errno)
    assert.equal("exec", step)
    -- A mount the options cannot have: a private tmpfs without a mount namespace.
    run, err, errno, step = b:_start { argv = { "/bin/true" }, handlers = {}, program = true, tmpfs = { "/tmp" } }
    assert.is_nil(run)
    assert.equal("spawn: a private tmpfs (/tmp) needs the mount namespace (EINVAL)", err)
    assert.equal("mount", step)
    -- A protected path outside the workspace is tool.protect's failure.
    run, err, errno, step = b:_start { argv = { "/bin/true" }, handlers = {}, program = true, workdir = "/tmp",
                                       workspace = true, namespaces = { "mount" }, protect = { "/var/x" } }
    assert.is_nil(run)
    assert.matches("tool.protect: protected paths must be at most 128 absolute paths beneath the workspace", err)
    assert.equal("protect", step)
    -- Control: a spawn that starts gives a run, and no step.
    local res = start(b, { argv = { "/bin/true" }, expect_ready = false, program = true })
    assert.equal("ok", res.cause, res.message)
  end)
end)
