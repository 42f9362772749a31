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

local cgroup_absent = H.cgroup_absent

local function exec(argv, limits, extra)
  -- (the timeout: a guard against a hang, never a measure)
  local opts = { argv = argv, workspace = ws, timeout = H.GUARD_S .. "s",
                 policy = { tool = { limits = limits or {} } } }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return assert(airlock.exec(opts))
end

describe("airlock exec bounds the whole run", function()
  before_each(function() ws = H.tmpdir() end)
  after_each(function() os.execute("rm -rf " .. ws) end)

  it("memory: two processes of 200 MiB each under a 256 MiB limit end with cause memory", function()
    local why = cgroup_absent("memory")
    if why then pending(why) end
    -- Both halves hold their 200 MiB at once, by handshake (pipes), not by
    -- a sleep that hopes they overlap.
    local prog = { "/usr/bin/python3", "-c", [[
import os
r1, w1 = os.pipe(); r2, w2 = os.pipe()
pid = os.fork()
b = b"x" * (200 << 20)   # written, so counted
if not pid:
    os.close(r1); os.close(w2)
    os.write(w1, b"1")   # the child holds its half
    os.read(r2, 1)       # until the parent holds its own
    os._exit(0)
os.close(w1); os.close(r2)
if os.read(r1, 1) != b"1": raise SystemExit("the other half died")
os.write(w2, b"1")
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

  it("CPU: two busy processes for a second use at most a quarter of a core under cpu = 0.25", function()
    local why = cgroup_absent("cpu")
    if why then pending(why) end
    local prog = { "/usr/bin/python3", "-c", [[
import os, time
pid = os.fork()
end = time.monotonic() + 1.0
while time.monotonic() < end: pass
if pid: os.waitpid(pid, 0)]] }
    -- The bound is a rate: CPU time at most a quarter of the run's own wall time,
    -- plus one period (100 ms) the kernel may grant at once; however loaded
    -- the machine is, the bounded run cannot exceed it.
    local res = exec(prog, { cpu = 0.25 })
    assert.are.equal("ok", res.cause, res.message)
    assert.matches("cpu 0.25 cores", res.confinement.cgroup)
    assert.is_true(res.usage.cpu_ms <= 0.25 * res.usage.wall_ms + 100,
      string.format("bounded run used %s ms of CPU in %s ms", tostring(res.usage.cpu_ms), tostring(res.usage.wall_ms)))
    -- The control, unbounded, shows the program would use more than that:
    -- only where this machine gives it more (CPUs free, not pinned to one
    -- busy CPU) can it; where it cannot, the case says so.
    local control = exec(prog, { cpu = 2 })
    assert.are.equal("ok", control.cause, control.message)
    if control.usage.cpu_ms <= 0.25 * control.usage.wall_ms + 100 then
      pending(string.format("this machine gave the unbounded control only %s ms of CPU in %s ms: " ..
        "nothing to tell the bound from", control.usage.cpu_ms, control.usage.wall_ms))
    end
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
    -- Every airlock on the machine sweeps what dead parents left in the
    -- shared base, so another checkout's run could remove the stale cgroup
    -- before this case looks. Its runs go in a pids cgroup of its own (v1),
    -- whose base only they sweep; on cgroup v2 the base is the caller's own
    -- cgroup, which cannot be made private to a run here.
    local v1 = "/sys/fs/cgroup/pids"
    if not H.slurp(v1 .. "/cgroup.procs") then
      pending("no cgroup v1 pids hierarchy: the stale-cgroup base is shared with every airlock on the machine")
    end
    local own = (H.slurp("/proc/self/cgroup") or ""):match("%d+:[^:\n]*pids[^:\n]*:([^\n]*)") or "/"
    local cg = v1 .. (own == "/" and "" or own) .. "/airlock-spec-" .. H.pid() .. "-" .. math.random(1, 1 << 30)
    assert(os.execute("mkdir " .. cg))
    local base = cg .. "/airlock"
    local script = ws .. ".run.sh"   -- beside the workspace, not in it
    H.write(script, "echo $$ > " .. cg .. "/cgroup.procs || exit 99\nexec " .. AIRLOCK .. " exec --workspace " ..
      ws .. " -- \"$@\"\n")
    finally(function()
      os.execute("rmdir " .. base .. "/* " .. base .. " " .. cg .. " 2>/dev/null; rm -f " .. script)
    end)
    -- The program's start is what the host waits for (the cgroup is made
    -- before it): it makes "started" in the workspace.
    local out = H.sh("cd " .. ws .. " && (sh " .. script .. " sh -c ': > started; exec sleep " .. H.GUARD_S ..
      "' >/dev/null 2>&1 & echo $!)")
    local pid = assert(tonumber(out:match("(%d+)")), out)
    H.wait_until("the program to start", function() return H.slurp(ws .. "/started") end)
    local mine = H.sh("ls " .. base .. " | grep '^" .. pid .. "-' || true")
    assert.is_truthy(mine:match("^" .. pid .. "%-"), "no cgroup of pid " .. pid .. " in " .. base .. ": " .. mine)
    assert(os.execute("kill -9 " .. pid))
    H.wait_until("the killed parent to be dead", function() return H.dead(pid) end)
    -- Still there: nobody cleaned up after the killed parent.
    assert.is_truthy(H.sh("ls " .. base):find(pid .. "-", 1, true))
    local next_out, rc = H.sh("cd " .. ws .. " && sh " .. script .. " true")
    assert.are.equal(0, rc, next_out)
    assert.is_nil(H.sh("ls " .. base):find(pid .. "-", 1, true))
  end)

  it("says in airlock probe which of these bounds this host enforces", function()
    local out = H.sh(AIRLOCK .. " probe --json")
    local p = assert(require("dkjson").decode(out), out)
    local absent = {}
    for _, k in ipairs { "pids", "memory", "cpu" } do
      local row = p[k .. "_cgroup"]
      assert.is_table(row, k .. "_cgroup missing from probe: " .. out)
      local why = cgroup_absent(k)
      -- what the probe says agrees with the kernel's own list
      assert.are.equal(why == nil, row.ok, k .. ": " .. tostring(row.detail or row.consequence) .. "; " .. tostring(why))
      if why then absent[#absent + 1] = k end
    end
    if #absent > 0 then pending("no " .. table.concat(absent, ", ") .. " cgroup controller here: the probe said so") end
  end)
end)
