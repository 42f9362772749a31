-- airlock.cli.bench_exec -- `airlock bench exec`: the tool tier's start-up cost.
-- `airlock exec -- /bin/true` under the stock tool policy (every layer: seven
-- namespaces, a private /tmp, a pids cgroup, rlimits, the capability drop,
-- no_new_privs, Landlock and a seccomp filter), timed two ways:
--   exec-inproc    airlock.exec from Lua in this process (what a host embedding
--                  airlock pays per tool run)
--   exec-command   the whole `airlock exec --no-tty -- /bin/true` command, Lua
--                  start-up included (what a shell script pays; --no-tty so that
--                  a run from a terminal times what bwrap does, no relay)
--   *-nocg         the same under the tool policy with its three cgroups off
--                  (tool.limits pids, memory, cpu = 0): the rest is what moving
--                  a process into a cgroup costs the kernel (on cgroup v1, an
--                  RCU grace period when no move happened just before)
-- against baselines taken in the same run, in interleaved rounds so that every
-- ratio compares figures taken under the same load:
--   fork-exec      plain fork + execve + wait of /bin/true (airlock-baseline)
--   bwrap          bwrap --unshare-all --ro-bind / / /bin/true, when installed
--   firejail       firejail with the flags nearest the stock tool policy
--                  (FIREJAIL_FLAGS below), when installed and it runs here;
--                  a quarter as many runs: each takes a tenth of a second
-- Targets: exec-inproc under 3x fork-exec and at most half of bwrap; the
-- command at most 1.5x bwrap and under firejail. Then the overlay rows
-- (airlock.cli.bench_overlay): tool.overlay's make and git commit at most
-- 1.2x the bind mode's.
-- And what learn mode's observation (airlock exec --observe, --learn) costs
-- a program per file system call: airlock-baseline stat N, run confined,
-- timing its own N stat() calls:
--   stat-confined  under the tool policy (the bench's directory runnable)
--   stat-observed  the same with observe: each call a round trip to the
--                  broker's listener, which reads the path and looks it up
-- reported per call (median_us is microseconds per call), the ratio against
-- stat-confined. And what a run with tool.network pays per connect(2), each
-- shown to the listener (a direct connect is recorded): airlock-baseline
-- connect N 9, timing its own N connects to 127.0.0.1:9, each refused:
--   connect-confined  under the tool policy with the inet promise added and
--                     no tool.network: refused at once by Landlock, unobserved
--   connect-observed  under tool.network: each a round trip to the listener,
--                     which reads the address and records it, then the
--                     kernel refuses it as before
local airlock = require "airlock"
local core = require "airlock.core"
local json = require "airlock.json"
local policy = require "airlock.policy"
local bench = require "airlock.cli.bench"
local bench_overlay = require "airlock.cli.bench_overlay"
local shell_quote = require("airlock.util").shell_quote

local M = {}

local percentile, bindir, which = bench.percentile, bench.bindir, bench.which

-- airlock-baseline forkexec N argv...: one JSON line with the median and p99.
local function forkexec(n, argv)
  local q = {}
  for i, a in ipairs(argv) do q[i] = shell_quote(a) end
  return bench.baseline_row("forkexec " .. n .. " " .. table.concat(q, " "))
end

-- firejail's flags nearest what the stock tool policy gives /bin/true: no
-- network, its own IPC namespace, a private /tmp, every capability dropped,
-- no_new_privs, its default seccomp filter, and the whole file system
-- read-only (firejail always adds its mount and pid namespaces). What it
-- cannot say the same way: Landlock, rlimits and cgroups (airlock's), a
-- user namespace (firejail is setuid root instead). --noprofile: no profile
-- file read, the flags alone; --quiet: no banner.
local FIREJAIL_FLAGS = { "--quiet", "--noprofile", "--net=none", "--ipc-namespace", "--private-tmp",
                         "--caps.drop=all", "--nonewprivs", "--seccomp", "--read-only=/" }

-- A firejail that works here, or nil, why.
local function firejail_argv()
  local fj = which("firejail")
  if not fj then return nil, "firejail not installed" end
  local argv = { fj }
  for _, f in ipairs(FIREJAIL_FLAGS) do argv[#argv + 1] = f end
  argv[#argv + 1] = "/bin/true"
  if not forkexec(1, argv) then return nil, "firejail does not run here" end
  return argv
end

-- A bwrap that works here (it needs user namespaces or root), or nil, why.
local function bwrap_argv()
  local bw = which("bwrap")
  if not bw then return nil, "bwrap not installed" end
  local argv = { bw, "--unshare-all", "--ro-bind", "/", "/", "/bin/true" }
  local r = forkexec(1, argv)
  if not r then return nil, "bwrap does not run here" end
  return argv
end

function M.main(args)
  local as_json, quick = bench.options(args, "exec")
  if as_json == nil then return 2 end
  local rounds, per = quick and 2 or 5, quick and 20 or 60
  local ws = os.tmpname()
  os.remove(ws)
  assert(os.execute("mkdir -p " .. ws))
  local cmd = assert(core.fs_realpath(bindir() .. "/airlock"))
  -- The cgroups off: memory = 0 is past the default memory ceiling, which
  -- the bench (the host here) raises, in-process and for the command. Each
  -- process keeps the stock address space, so only the cgroups differ.
  local nocg_file = ws .. ".nocg.lua"
  local f = assert(io.open(nocg_file, "w"))
  f:write('return require("airlock.policy").extend("tool", { name = "tool-nocg", ',
          'tool = { limits = { pids = 0, memory = 0, cpu = 0 }, confine = { rlimits = { as = "4G" } } } })\n')
  f:close()
  airlock.policy.ceilings { memory = 0 }
  local nocg = policy.extend("tool", { name = "tool-nocg",
    tool = { limits = { pids = 0, memory = 0, cpu = 0 }, confine = { rlimits = { as = "4G" } } } })

  -- One untimed exec first: it must work and be confined, or nothing is timed.
  local first, err = airlock.exec { argv = { "/bin/true" }, workspace = ws }
  if not first or not first.ok then
    io.stderr:write("airlock bench exec: /bin/true does not run under the tool policy: ",
      tostring(first and first.message or err), "\n")
    os.execute("rm -rf " .. ws)
    return 1
  end
  local bw, bwhy = bwrap_argv()
  local fj, fjwhy = firejail_argv()

  local inproc, inproc_nocg, command, command_nocg, fe, bwm, fjm = {}, {}, {}, {}, {}, {}, {}
  for _ = 1, rounds do
    for _, v in ipairs { { inproc, nil }, { inproc_nocg, nocg } } do
      for _ = 1, per do
        local t0 = core.now_ms()
        local r = airlock.exec { argv = { "/bin/true" }, workspace = ws, policy = v[2] }
        v[1][#v[1] + 1] = (core.now_ms() - t0) * 1000
        assert(r and r.ok, r and r.message)
      end
    end
    command[#command + 1] = assert(forkexec(per, { cmd, "exec", "--no-tty", "--workspace", ws, "--", "/bin/true" }))
    command_nocg[#command_nocg + 1] = assert(forkexec(per, { cmd, "exec", "--no-tty", "--ceiling", "memory=0",
      "--policy", nocg_file, "--workspace", ws, "--", "/bin/true" }))
    fe[#fe + 1] = assert(forkexec(per, { "/bin/true" }))
    if bw then bwm[#bwm + 1] = assert(forkexec(per, bw)) end
    if fj then fjm[#fjm + 1] = assert(forkexec(math.max(5, per // 4), fj)) end
  end
  -- Per-call cost of observation: the program times its own calls.
  local stat_pol = policy.extend("tool", { name = "tool-bench-stat", tool = { grant = { exec = { bindir() } } } })
  local stat_n = quick and 2000 or 20000
  local stat_plain, stat_obs = {}, {}
  local base_prog = core.fs_realpath(bindir() .. "/airlock-baseline")
  for _ = 1, rounds do
    for _, v in ipairs { { stat_plain, false }, { stat_obs, true } } do
      local r = airlock.exec { argv = { base_prog, "stat", tostring(stat_n), "/etc/hostname" }, workspace = ws,
                               policy = stat_pol, observe = v[2] or nil }
      local per = r and r.ok and tonumber(r.stdout:match('"per_call_us":([%d.]+)'))
      if per then v[1][#v[1] + 1] = per end
    end
  end
  -- Per-connect cost of a run with a proxy (its direct connects observed).
  local promises = table.concat(policy.extend("tool", {}).tool.confine.seccomp.promises, " ")
  -- (a bare table laid over tool: the inet promise is more than the stock
  -- tool policy's, which unconfined = true says; the run is as confined as
  -- the tool policy otherwise)
  local conn_plain_pol = { name = "tool-bench-connect", unconfined = true,
    tool = { grant = { exec = { bindir() } }, confine = { seccomp = { promises = promises .. " inet" } } } }
  local conn_obs_pol = policy.extend("tool", { name = "tool-bench-connect-net",
    tool = { grant = { exec = { bindir() } }, network = { allow = { "127.0.0.1:9" } } } })
  local conn_plain, conn_obs = {}, {}
  for _ = 1, rounds do
    for _, v in ipairs { { conn_plain, conn_plain_pol }, { conn_obs, conn_obs_pol } } do
      local r = airlock.exec { argv = { base_prog, "connect", tostring(stat_n), "9" }, workspace = ws, policy = v[2] }
      local per = r and r.ok and tonumber(r.stdout:match('"per_call_us":([%d.]+)'))
      if per then v[1][#v[1] + 1] = per end
    end
  end
  os.execute("rm -rf " .. ws .. " " .. nocg_file)

  -- Batches report medians: the median of the batch medians stands for each.
  local function med(batches, key)
    local xs = {}
    for i, b in ipairs(batches) do xs[i] = b[key] end
    return percentile(xs, 0.5)
  end
  local m = {
    inproc = { median_us = percentile(inproc, 0.5), p99_us = percentile(inproc, 0.99), n = #inproc },
    inproc_nocg = { median_us = percentile(inproc_nocg, 0.5), p99_us = percentile(inproc_nocg, 0.99), n = #inproc_nocg },
    command = { median_us = med(command, "median_us"), p99_us = med(command, "p99_us"), n = rounds * per },
    command_nocg = { median_us = med(command_nocg, "median_us"), p99_us = med(command_nocg, "p99_us"), n = rounds * per },
    forkexec = { median_us = med(fe, "median_us"), p99_us = med(fe, "p99_us"), n = rounds * per },
    stat_plain = #stat_plain > 0 and { median_us = percentile(stat_plain, 0.5), p99_us = percentile(stat_plain, 0.99),
      n = #stat_plain * stat_n } or { skipped = "airlock-baseline stat did not run under the tool policy" },
    stat_obs = #stat_obs > 0 and { median_us = percentile(stat_obs, 0.5), p99_us = percentile(stat_obs, 0.99),
      n = #stat_obs * stat_n } or { skipped = "no seccomp listener here (observe needs one)" },
    conn_plain = #conn_plain > 0 and { median_us = percentile(conn_plain, 0.5), p99_us = percentile(conn_plain, 0.99),
      n = #conn_plain * stat_n } or { skipped = "airlock-baseline connect did not run under the tool policy with inet" },
    conn_obs = #conn_obs > 0 and { median_us = percentile(conn_obs, 0.5), p99_us = percentile(conn_obs, 0.99),
      n = #conn_obs * stat_n } or { skipped = "airlock-baseline connect did not run under tool.network" },
    bwrap = bw and { median_us = med(bwm, "median_us"), p99_us = med(bwm, "p99_us"), n = rounds * per }
      or { skipped = bwhy },
    firejail = fj and { median_us = med(fjm, "median_us"), p99_us = med(fjm, "p99_us"),
                        n = rounds * math.max(5, per // 4) } or { skipped = fjwhy },
  }
  local rows = {}
  local function row(name, x, base_name, base, target)
    local r = { bench = name, median_us = x.median_us, p99_us = x.p99_us, n = x.n, baseline = base_name,
                skipped = x.skipped or (base and base.skipped) }
    if base and not r.skipped then
      r.baseline_median_us = base.median_us
      r.ratio = x.median_us / base.median_us
      if target then
        r.target = target
        local op, limit = target:match("^([<=]+)%s*([%d.]+)$")
        limit = tonumber(limit)
        r.met = (op == "<=" and r.ratio <= limit) or (op == "<" and r.ratio < limit)
      end
    end
    rows[#rows + 1] = r
  end
  row("fork-exec", m.forkexec)
  row("bwrap-true", m.bwrap, "fork-exec", m.forkexec)
  row("firejail-true", m.firejail, "fork-exec", m.forkexec)
  row("exec-inproc", m.inproc, "fork-exec", m.forkexec, "< 3")
  row("exec-inproc/bwrap", m.inproc, "bwrap-true", m.bwrap, "<= 0.5")
  row("exec-command", m.command, "fork-exec", m.forkexec)
  row("exec-command/bwrap", m.command, "bwrap-true", m.bwrap, "<= 1.5")
  row("exec-command/firejail", m.command, "firejail-true", m.firejail, "< 1")
  row("exec-inproc-nocg", m.inproc_nocg, "bwrap-true", m.bwrap)
  row("exec-command-nocg", m.command_nocg, "bwrap-true", m.bwrap)
  row("stat-confined", m.stat_plain)
  row("stat-observed", m.stat_obs, "stat-confined", m.stat_plain)
  row("connect-confined", m.conn_plain)
  row("connect-observed", m.conn_obs, "connect-confined", m.conn_plain)
  -- tool.overlay against the bind mode (airlock.cli.bench_overlay).
  for _, r in ipairs(bench_overlay.rows(quick)) do rows[#rows + 1] = r end

  if as_json then
    for _, r in ipairs(rows) do io.stdout:write(json.encode(r), "\n") end
    return 0
  end
  print(string.format("%-22s %10s %10s  %-13s %8s  %s", "bench", "median_us", "p99_us", "baseline", "ratio", "target"))
  for _, r in ipairs(rows) do
    if r.skipped and not r.median_us then
      print(string.format("%-22s skipped: %s", r.bench, r.skipped))
    else
      print(string.format("%-22s %10.1f %10.1f  %-13s %8s  %s", r.bench, r.median_us, r.p99_us,
        r.baseline or "-", r.ratio and string.format("%.2f", r.ratio) or (r.skipped and "skipped" or "-"),
        r.target and string.format("%s: %s", r.target, r.met and "met" or "MISSED") or (r.skipped or "")))
    end
  end
  return 0
end

return M
