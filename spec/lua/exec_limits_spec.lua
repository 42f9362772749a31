-- exec_limits_spec.lua -- what one `airlock exec` run may consume as a whole,
-- bounded by the kernel: memory and CPU for all its processes together (a
-- cgroup each), files in its private /tmp (the tmpfs's inodes), and what a
-- parent killed mid-run leaves behind (removed by the next run). Each bound
-- has a control: the same program with the bound lifted does more.
local H = require "helper"
local airlock = require "airlock"
local core = require "airlock.core"

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")
local ws

local function exec(argv, limits, extra)
  local opts = { argv = argv, workspace = ws, timeout = "20s",
                 policy = { tool = { limits = limits or {} } } }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return assert(airlock.exec(opts))
end

describe("airlock exec bounds the whole run", function()
  before_each(function() ws = H.tmpdir() end)
  after_each(function() os.execute("rm -rf " .. ws) end)

  it("memory: two processes of 200 MiB each under a 256 MiB limit end with cause memory", function()
    local prog = { "/usr/bin/python3", "-c", [[
import os, time
pid = os.fork()
b = b"x" * (200 << 20)   # written, so counted
time.sleep(0.5)
if not pid: os._exit(0)
_, status = os.waitpid(pid, 0)
if status != 0: raise SystemExit("the other half died: %d" % status)
print("done", flush=True)]] }
    local control = exec(prog, { memory = "1G" })
    assert.are.equal("ok", control.cause, control.message .. control.stderr)
    assert.are.equal("done\n", control.stdout)
    assert.is_true(control.usage.memory_peak > 300 * 2 ^ 20, tostring(control.usage.memory_peak))
    local res = exec(prog, { memory = "256M" })
    assert.are.equal("memory", res.cause, res.message .. res.stderr)
    assert.matches("memory limit of 268435456 bytes was reached", res.message)
    assert.is_true(res.usage.oom_kills >= 1)
    assert.is_true(res.usage.memory_peak <= 256 * 2 ^ 20 + 2 ^ 20, tostring(res.usage.memory_peak))
    assert.matches("memory 268435456 bytes", res.confinement.cgroup)
  end)

  it("CPU: two busy processes for a second use half a core under cpu = 0.5", function()
    local prog = { "/usr/bin/python3", "-c", [[
import os, time
pid = os.fork()
end = time.monotonic() + 1.0
while time.monotonic() < end: pass
if pid: os.waitpid(pid, 0)]] }
    local control = exec(prog, { cpu = 2 })
    assert.are.equal("ok", control.cause, control.message)
    local res = exec(prog, { cpu = 0.5 })
    assert.are.equal("ok", res.cause, res.message)
    -- Half a core over about a second of wall time; the control, unbounded
    -- but for the machine's own load, gets well past it.
    assert.is_true(res.usage.cpu_ms < 700, "bounded run used " .. tostring(res.usage.cpu_ms) .. " ms")
    assert.is_true(control.usage.cpu_ms > 1.4 * res.usage.cpu_ms,
      "control used " .. tostring(control.usage.cpu_ms) .. " ms, bounded " .. tostring(res.usage.cpu_ms))
    assert.matches("cpu 0.5 cores", res.confinement.cgroup)
  end)

  it("files: the private /tmp holds one inode per 4 KiB of its size", function()
    local prog = { "/usr/bin/python3", "-c", [[
import os, sys
d = sys.argv[1]
n = 0
try:
    for n in range(20000):
        open(os.path.join(d, str(n)), "w").close()
    print("made all", flush=True)
except OSError as e:
    print("stopped at", n, e.errno, flush=True)]] }
    local control = exec({ prog[1], prog[2], prog[3], ws })   -- the workspace is the disk's
    assert.are.equal("made all\n", control.stdout, control.stderr)
    local res = exec({ prog[1], prog[2], prog[3], "/tmp" }, { tmp_size = "16M" })
    local at, errno = res.stdout:match("^stopped at (%d+) (%d+)")
    assert.is_not_nil(at, res.stdout .. res.stderr)
    assert.are.equal("28", errno)   -- ENOSPC
    assert.is_true(tonumber(at) <= 4096, at)
    assert.matches("4096 files at most", res.confinement.tmp)
  end)

  it("leaves no cgroup behind when its parent is killed, once the next run starts", function()
    local base = core.pids_cgroup()
    local out = H.sh("cd " .. ws .. " && (" .. AIRLOCK .. " exec --workspace " .. ws ..
      " -- sleep 30 >/dev/null 2>&1 & echo $!; sleep 1)")
    local pid = assert(tonumber(out:match("(%d+)")), out)
    local mine = H.sh("ls " .. base .. " | grep '^" .. pid .. "-' || true")
    assert.is_truthy(mine:match("^" .. pid .. "%-"), "no cgroup of pid " .. pid .. " in " .. base .. ": " .. mine)
    assert(os.execute("kill -9 " .. pid))
    os.execute("sleep 0.3")
    -- Still there: nobody cleaned up after the killed parent.
    assert.is_truthy(H.sh("ls " .. base):find(pid .. "-", 1, true))
    local res = exec { "true" }
    assert.are.equal("ok", res.cause, res.message)
    assert.is_nil(H.sh("ls " .. base):find(pid .. "-", 1, true))
  end)

  it("says in airlock probe which of these bounds this host enforces", function()
    local out = H.sh(AIRLOCK .. " probe --json")
    local p = assert(require("dkjson").decode(out), out)
    for _, k in ipairs { "pids_cgroup", "memory_cgroup", "cpu_cgroup" } do
      assert.is_table(p[k], k .. " missing from probe: " .. out)
      assert.is_true(p[k].ok, k .. ": " .. tostring(p[k].detail or p[k].consequence))
    end
  end)
end)
