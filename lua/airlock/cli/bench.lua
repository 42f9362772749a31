-- airlock.cli.bench -- `airlock bench`: measures airlock against baselines taken in
-- the same run (plain fork+exec, raw socketpair ping-pong, bubblewrap when
-- installed) and prints ratios. A measurement, never a pass/fail test: targets
-- are reported as met or missed, never asserted.
--
-- Spawn->done of a trivial guest is measured for several confinement variants
-- through one broker, interleaved round by round, so every ratio compares
-- figures taken under the same machine load:
--   confined       the stock untrusted policy: every layer on (the spawn-done row)
--   unconfined     the same policy with every layer off (no namespaces, no rlimits,
--                  capabilities kept, no no_new_privs, Landlock or seccomp)
--   bwrap          bwrap --unshare-all --ro-bind / / /bin/true, when installed
--   layer-*        one layer group on at a time, against unconfined
-- Each variant's first run is checked: its confinement report must show exactly
-- the layers the variant asks for, or its rows say why it was not timed rather
-- than mislabel it (without root, some layers cannot be had alone).
--
-- The network namespace question. A fresh net namespace per run costs a few
-- hundred microseconds (the netns-* rows time clone with and without
-- CLONE_NEWNET, and setns into one pre-made namespace held open by fd; the
-- layer-ns-net and confined-ownnet rows are the same cost inside airlock), and
-- the kernel frees each one later in a work queue, which these rows do not
-- even count. As root, the untrusted policy already makes every run join one
-- pre-made, empty namespace (shared_net). Is that as safe as one per run?
--   * Towards the outside, yes: both hold only a loopback device that is down,
--     so neither has a route anywhere.
--   * Between runs: what a net namespace scopes is shared, namely the loopback
--     device, the port space and the abstract unix socket names. Runs could
--     meet there only through a socket of their own, and socket() and
--     socketpair() are not on the worker's seccomp allowlist; neither are
--     bind, connect or sendto (sendmsg is, but the worker's only sockets are
--     connected stream sockets, which refuse a destination address). Behind
--     seccomp, Landlock ABI >= 6 scopes abstract unix sockets to the worker's
--     own domain, and each run has its own, so even a socket could not reach
--     another run's abstract name; ABI >= 4 refuses TCP bind and connect. IP
--     between runs would also need the loopback device up, which takes
--     CAP_NET_ADMIN over the namespace's owner (the initial user namespace);
--     the worker has no capability there, nor any after exec.
--     So a channel between two runs needs seccomp and Landlock to fail
--     together. On a kernel before Landlock ABI 6 (Linux 6.12) seccomp alone
--     keeps runs apart in a shared namespace, where one per run would still
--     separate their abstract names.
--   * Nothing persists from run to run: everything that would outlive a
--     process in the namespace (addresses, routes, net.* sysctls, nftables)
--     needs CAP_NET_ADMIN over it, and sockets die with their process.
--   * What it leaks: the per-namespace views /proc/net/* (unix, netlink,
--     sockstat counters...), /sys/class/net and /proc/sys/net would show the
--     other runs' traces, if a run could read them. A worker cannot: Landlock
--     grants it no filesystem right, its mount namespace is its own, and
--     netlink (rtnetlink, sock_diag) needs socket(). The interface list is one
--     loopback device, the same for everyone.
--   * Joining needs CAP_SYS_ADMIN over the initial user namespace (root);
--     other hosts, and policies with shared_net = false, get one per run.
-- Conclusion: joining one pre-made empty namespace is as safe as one per run,
-- except as defence in depth for the case where seccomp fails and Landlock
-- cannot scope abstract sockets (ABI < 6) or fails too; and setns costs about
-- what a plain clone does, so the namespace becomes free.
local airlock = require "airlock"
local core = require "airlock.core"
local json = require "airlock.json"
local policy = require "airlock.policy"
local util = require "airlock.util"

local exists, copy, set_of, read_file = util.exists, util.copy, util.set_of, util.read_file

local M = {}

local function percentile(xs, p)
  table.sort(xs)
  local i = math.max(1, math.min(#xs, math.ceil(#xs * p)))
  return xs[i]
end

local function summary(times)
  local total = 0
  for _, x in ipairs(times) do total = total + x end
  return { median_us = percentile(times, 0.5), p99_us = percentile(times, 0.99), n = #times,
           per_sec = total > 0 and #times / (total / 1e6) or nil }
end

local function bindir()
  local w = assert(core.worker_path())
  return w:match("^(.*)/[^/]+$")
end

-- Runs a program in bin/ and returns its JSON lines as tables, or nil, why.
local function json_lines(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  p:close()
  local rows = {}
  for line in out:gmatch("[^\n]+") do
    local ok, t = pcall(json.decode, line)
    if not ok or type(t) ~= "table" then return nil, cmd .. ": " .. line end
    rows[#rows + 1] = t
  end
  if #rows == 0 then return nil, cmd .. ": no output" end
  return rows
end

-- Runs airlock-baseline and returns its JSON line as a table.
-- baseline_row(args) -> the first JSON row of `airlock-baseline ARGS` (it has
-- median_us), or nil, why. Every bench's baselines are taken through it.
local function baseline_row(args)
  local cmd = bindir() .. "/airlock-baseline " .. args
  local rows, err = json_lines(cmd)
  local t = rows and rows[1]
  if type(t) ~= "table" or not t.median_us then
    return nil, err or ("airlock-baseline gave no median (" .. cmd .. ")")
  end
  return t
end

local function baseline(args)
  local t, why = baseline_row(args)
  if not t then error("bench: baseline failed: " .. why, 0) end
  return t
end

local function which(name)
  for dir in ((os.getenv("PATH") or "") .. ":/usr/bin:/bin"):gmatch("[^:]+") do
    if exists(dir .. "/" .. name) then return dir .. "/" .. name end
  end
end

-- A sub-bench's options (`airlock bench WHAT [--json] [--quick]`) ->
-- as_json, quick; or nil after saying which option is unknown.
local function options(args, what)
  local as_json, quick = false, false
  for _, a in ipairs(args or {}) do
    if a == "--json" then as_json = true
    elseif a == "--quick" then quick = true
    else io.stderr:write("airlock bench ", what, ": unknown option ", a, "\n") return nil end
  end
  return as_json, quick
end

-- For airlock.bench_exec and the other sub-benches, which measure the same way.
M.percentile, M.bindir, M.json_lines, M.which, M.baseline_row = percentile, bindir, json_lines, which, baseline_row
M.options = options

-- ------------------------------------------------------------------ confinement variants

-- Every layer off. Not expressed as policy.extend(untrusted, {confine = {rlimits =
-- {}}}): an empty table merges as an empty map, so untrusted's rlimits would stay.
local OFF = { namespaces = {}, shared_net = false, rlimits = nil, capabilities = "keep",
              no_new_privs = false, landlock = false, seccomp = false, mdwe = false, require = {} }

-- untrusted with its confine section replaced by OFF plus `on`.
local function variant_policy(name, on)
  local p = copy(policy.load("untrusted"))
  p.name = "bench-" .. name
  p.confine = copy(OFF)
  for k, v in pairs(on or {}) do p.confine[k] = copy(v) end
  -- A variant that turns layers off says so (policy.resolve): one warning each.
  if not policy.resolve(policy.new(p), "untrusted") then p.unconfined = true end
  return policy.new(p)
end

local function nonempty(t)
  for _ in pairs(t or {}) do return true end
  return false
end

local function set_of_words(list)
  return set_of(list == "all" and policy.NAMESPACES or list)
end

-- What a variant's first run must report: layer -> true (applied) / false
-- (skipped), and for the net namespace "shared" / "own" / nil.
local function expectation(c)
  local ns = set_of_words(c.namespaces)
  return {
    namespaces = next(ns) ~= nil,
    rlimits = nonempty(c.rlimits),
    capabilities = c.capabilities == "drop",
    no_new_privs = c.no_new_privs == true,
    landlock = c.landlock == true,
    seccomp = c.seccomp == true,
    net = ns.net and (c.shared_net and "shared" or "own") or nil,
  }
end

-- true when the report matches; nil, what differs when it does not. A shared
-- net namespace this host cannot join (no root) is not a mismatch: the string
-- returned instead goes into the row's note.
local function check_report(exp, conf)
  local bad = {}
  for _, layer in ipairs { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp" } do
    local line = conf and conf[layer] or "(no report)"
    if (line:match("^applied") ~= nil) ~= exp[layer] then
      bad[#bad + 1] = string.format("%s %s (%s)", layer, exp[layer] and "wanted" or "not wanted", line)
    end
  end
  if #bad > 0 then return nil, table.concat(bad, "; ") end
  local ns = conf.namespaces or ""
  if exp.net == "shared" and not ns:match("all runs share") then
    return "net: own namespace per run (" .. (ns:match("net is the run's own %((.-)%)") or "shared one unavailable") .. ")"
  end
  return true
end

-- The variants, interleaved. count: "main" runs n times, "layer" m times.
local function variants(bwrap)
  local U = policy.load("untrusted").confine
  local all = copy(U.namespaces)
  local v = {
    { name = "confined", count = "main", on = copy(U) },
    { name = "unconfined", count = "main", on = {} },
    { name = "confined-ownnet", count = "layer", on = (function() local c = copy(U); c.shared_net = false; return c end)() },
    { name = "layer-namespaces", count = "layer", on = { namespaces = all, shared_net = true } },
    { name = "layer-namespaces-ownnet", count = "layer", on = { namespaces = all, shared_net = false } },
  }
  -- Without root, a namespace other than user can only be made together with
  -- a user namespace: those rows then time the pair (said in their note).
  local root = assert(read_file("/proc/self/status")):match("\nUid:%s*(%d+)") == "0"
  for _, ns in ipairs(policy.NAMESPACES) do
    local list = (root or ns == "user") and { ns } or { "user", ns }
    local note = #list > 1 and "with a user namespace (not root: no other way)" or nil
    v[#v + 1] = { name = "layer-ns-" .. ns, count = "layer", on = { namespaces = list, shared_net = false }, note = note }
    if ns == "net" then
      v[#v + 1] = { name = "layer-ns-net-shared", count = "layer", on = { namespaces = list, shared_net = true }, note = note }
    end
  end
  v[#v + 1] = { name = "layer-rlimits", count = "layer", on = { rlimits = copy(U.rlimits) } }
  v[#v + 1] = { name = "layer-capabilities", count = "layer", on = { capabilities = "drop" } }
  v[#v + 1] = { name = "layer-no_new_privs", count = "layer", on = { no_new_privs = true } }
  v[#v + 1] = { name = "layer-landlock", count = "layer", on = { landlock = true } }
  v[#v + 1] = { name = "layer-seccomp", count = "layer", on = { seccomp = true } }
  v[#v + 1] = { name = "layer-mdwe", count = "layer", on = { mdwe = true } }
  -- In a pid namespace the worker is pid 1 and loads a filter the parent
  -- compiled once, as confined runs do; alone, it compiles its own every run.
  v[#v + 1] = { name = "layer-seccomp+pidns", count = "layer",
                on = { seccomp = true, namespaces = root and { "pid" } or { "user", "pid" } } }
  for _, x in ipairs(v) do
    x.policy = variant_policy(x.name, x.on)
    x.expect = expectation(x.policy.confine)
  end
  if bwrap then
    v[#v + 1] = { name = "bwrap", count = "bwrap",
                  argv = { bwrap, "--unshare-all", "--ro-bind", "/", "/", "/bin/true" } }
  end
  return v
end

-- One run of a variant: microseconds from start to result, and the result;
-- or nil, why.
local function once(b, x)
  local t0 = core.now_ms()
  local run, err
  if x.argv then
    run, err = b:_start { argv = x.argv, handlers = {}, expect_ready = false, deadline_ms = 10000 }
  else
    run, err = b:start { guest = "return 1", policy = x.policy }
  end
  if not run then return nil, "cannot start: " .. tostring(err) end
  local res = run:wait(b)
  local us = (core.now_ms() - t0) * 1000
  if x.argv then
    if res.exit_code ~= 0 then
      return nil, (res.stderr and res.stderr ~= "" and res.stderr or res.message or res.cause)
    end
  elseif not res.ok then
    return nil, "trivial guest failed: " .. res.cause .. ": " .. tostring(res.message)
  end
  return us, res
end

-- Runs every variant counts[x.count] times, spread evenly over the rounds so
-- that each variant sees the same stretch of machine time. Returns name -> summary.
local function bench_variants(vs, counts)
  local b <close> = airlock.broker()
  local live = {}
  for _, x in ipairs(vs) do
    x.n = counts[x.count]
    x.times = {}
    for i = 1, 3 do   -- untimed: caches, the shared net namespace, the seccomp program
      local us, res = once(b, x)
      if not us then
        x.skipped = "could not run here: " .. (tostring(res):gsub("%s+$", ""))
        break
      end
      if i == 1 and x.expect then
        local ok, why = check_report(x.expect, res.confinement)
        if not ok then
          -- Timing it would mislabel it: the row says why instead.
          x.skipped = "not applicable here: " .. why
          break
        end
        if ok ~= true then x.note = x.note and x.note .. "; " .. ok or ok end
      end
    end
    if not x.skipped then live[#live + 1] = x end
  end
  local rounds = 0
  for _, x in ipairs(live) do rounds = math.max(rounds, x.n) end
  for r = 1, rounds do
    for _, x in ipairs(live) do
      if (r * x.n) // rounds > ((r - 1) * x.n) // rounds then
        local us, err = once(b, x)
        if not us then error("bench: " .. x.name .. " failed after a good warm-up: " .. tostring(err), 0) end
        x.times[#x.times + 1] = us
      end
    end
  end
  local out = {}
  for _, x in ipairs(vs) do
    if x.skipped then out[x.name] = { skipped = x.skipped }
    else
      out[x.name] = summary(x.times)
      out[x.name].note = x.note
    end
  end
  return out
end

-- ------------------------------------------------------------------ other measurements

-- One effect round trip: guest -> Lua handler -> guest, timed between handler calls.
local function bench_roundtrip(n)
  local stamps = {}
  local pol = { limits = { instructions = 0, deadline_ms = 60000 }, effects = {
    ping = function(args) stamps[#stamps + 1] = core.now_ms() return args end } }
  local cpu0 = os.clock()
  local res = assert(airlock.run { guest = "local n = ... for i = 1, n do host.ping({ i = i }) end return n",
    input = n + 100, policy = pol })
  local cpu_host = (os.clock() - cpu0) * 1e6 / (n + 100)
  assert(res.ok, res.message)
  local d = {}
  for i = 102, #stamps do d[#d + 1] = (stamps[i] - stamps[i - 1]) * 1000 end
  local total = 0
  for _, x in ipairs(d) do total = total + x end
  -- CPU time (user + system) per call on each side, the spawn included
  -- (a few ms over the whole loop): where a round trip's time goes
  return { median_us = percentile(d, 0.5), p99_us = percentile(d, 0.99), per_sec = #d / (total / 1e6),
           cpu_host_us = cpu_host,
           cpu_worker_us = ((res.usage.user_ms or 0) + (res.usage.sys_ms or 0)) * 1000 / (n + 100) }
end

-- A pooled start, as a host makes it: a worker b:warm prepared beforehand
-- (the top-up is not timed: a host does it when idle), then the host idles
-- for IDLE_MS, as the raw baseline's parked child does, and b:start gives
-- the worker a guest whose first statement is an effect. Timed from before
-- b:start to: the guest's first instruction (the worker's clock in its done
-- frame, usage.first_instruction_ms), the handler of its first effect, the
-- done frame's arrival, and the result (after the child's exit is reaped).
local WARM_IDLE_MS = 2
local function bench_warm(n)
  local b <close> = airlock.broker()
  local t_effect
  local pol = policy.extend("untrusted", { name = "bench-warm", effects = {
    first = function() t_effect = core.now_ms() return true end } })
  local first, effect, done, result = {}, {}, {}, {}
  for i = 1, n + 3 do
    assert(b:warm(1, pol))
    b:step(WARM_IDLE_MS)   -- nothing happens: the host idles, the worker waits
    local t0 = core.now_ms()
    local run = assert(b:start { guest = "host.first() return 1", policy = pol })
    local res = run:wait(b)
    local t1 = core.now_ms()
    if not (res.ok and res.pooled and res.usage.first_instruction_ms) then
      error("bench: pooled run failed: " .. tostring(res.cause) .. ": " .. tostring(res.message), 0)
    end
    if i > 3 then
      local ts = run:_t_start()
      first[#first + 1] = (ts + res.usage.first_instruction_ms - t0) * 1000
      effect[#effect + 1] = (t_effect - t0) * 1000
      done[#done + 1] = (ts + res.usage.done_frame_ms - t0) * 1000
      result[#result + 1] = (t1 - t0) * 1000
    end
  end
  return { first = summary(first), effect = summary(effect), done = summary(done), result = summary(result) }
end

-- The same start in bursts: a pool of `burst` prepared at once, then that
-- many b:start back to back (a host starting a batch), so no spawn or child
-- teardown comes between two starts. -> summary of b:start to the first
-- instruction.
local function bench_warm_burst(n, burst)
  local b <close> = airlock.broker()
  local pol = policy.extend("untrusted", { name = "bench-warm-burst" })
  local first = {}
  for round = 1, n // burst + 1 do
    assert(b:warm(burst, pol))
    local runs, t0s = {}, {}
    for i = 1, burst do
      t0s[i] = core.now_ms()
      runs[i] = assert(b:start { guest = "return 1", policy = pol })
    end
    for i, run in ipairs(runs) do
      local res = run:wait(b)
      if not (res.ok and res.pooled and res.usage.first_instruction_ms) then
        error("bench: pooled run failed: " .. tostring(res.cause) .. ": " .. tostring(res.message), 0)
      end
      if round > 1 then first[#first + 1] = (run:_t_start() + res.usage.first_instruction_ms - t0s[i]) * 1000 end
    end
  end
  return summary(first)
end

-- airlock-baseline prefork: a child forked beforehand, parked in read, woken
-- by one frame the size of a start frame. -> { wake = row, round = row }.
local function bench_prefork(n)
  local rows, err = json_lines(bindir() .. "/airlock-baseline prefork " .. n .. " 120 " .. WARM_IDLE_MS * 1000)
  if not rows then error("bench: baseline failed: " .. err, 0) end
  local out = {}
  for _, r in ipairs(rows) do out[r.bench:match("^prefork%-(.*)$") or r.bench] = r end
  if not (out.wake and out.round) then error("bench: baseline prefork gave no wake and round rows", 0) end
  return out
end

-- Parent RSS per live run, with many runs parked on an unanswered effect.
local function bench_rss(n)
  local b <close> = airlock.broker()
  local parked = 0
  local pol = { limits = { deadline_ms = 60000 }, effects = {
    park = function() parked = parked + 1 return airlock.defer() end } }
  collectgarbage()
  local function rss() return tonumber(read_file("/proc/self/status"):match("VmRSS:%s*(%d+)")) end
  local before = rss()
  local runs = {}
  for i = 1, n do runs[i] = assert(b:start { guest = "return host.park()", policy = pol }) end
  while parked < n do assert(b:step(100)) end
  local after = rss()
  for _, r in ipairs(runs) do r:cancel() end
  while b:live() > 0 do b:step(100) end
  local worker_rss = 0
  return { per_run_kb = (after - before) / n, runs = n, worker_rss_kb = worker_rss }
end

-- airlock-netns: clone+exit+wait with and without a new net namespace, and
-- setns into a pre-made one. Returns mode -> row, or nil, why.
local function bench_netns(n)
  local path = bindir() .. "/airlock-netns"
  if not exists(path) then return nil, "airlock-netns is not built" end
  local rows, err = json_lines(path .. " " .. n)
  if not rows then return nil, err end
  local out = {}
  for _, r in ipairs(rows) do out[r.bench] = r end
  return out
end

-- ------------------------------------------------------------------ rows

local function row(rows, name, m, base_name, base, extra)
  local r
  if not m or m.skipped then
    r = { bench = name, baseline = base_name, skipped = m and m.skipped or "not measured" }
  elseif base and base.skipped then
    r = { bench = name, median_us = m.median_us, p99_us = m.p99_us, n = m.n, baseline = base_name,
          skipped = base.skipped }
  else
    r = { bench = name, median_us = m.median_us, p99_us = m.p99_us, per_sec = m.per_sec, n = m.n,
      baseline = base_name, baseline_median_us = base and base.median_us,
      baseline_p99_us = base and base.p99_us,
      ratio = base and m.median_us / base.median_us,
      p99_ratio = base and base.p99_us and m.p99_us / base.p99_us,
      delta_us = base and m.median_us - base.median_us, note = m.note }
  end
  for k, v in pairs(extra or {}) do r[k] = v end
  if r.ratio and r.target then
    local op, limit = r.target:match("^([<=]+)%s*([%d.]+)$")
    limit = tonumber(limit)
    r.met = (op == "<=" and r.ratio <= limit) or (op == "<" and r.ratio < limit)
  end
  if r.median_us and r.target_us then r.met = r.median_us <= r.target_us end   -- an absolute target
  rows[#rows + 1] = r
  return r
end

local LAYER_ROWS = {
  { "layer-namespaces", "all 7 namespaces, net shared (as untrusted)" },
  { "layer-namespaces-ownnet", "all 7 namespaces, net per run" },
  { "layer-ns-user" }, { "layer-ns-pid" }, { "layer-ns-net", "net alone, per run" },
  { "layer-ns-net-shared", "net alone, the shared one" }, { "layer-ns-ipc" }, { "layer-ns-uts" },
  { "layer-ns-mount" }, { "layer-ns-cgroup" },
  { "layer-rlimits", "as untrusted sets them" },
  { "layer-capabilities", "drop, checked from outside on ready" }, { "layer-no_new_privs" },
  { "layer-landlock" }, { "layer-seccomp", "filter built by the worker each run" },
}

local NETNS_ROWS = {
  { "netns-clone-newnet", "clone-newnet", "clone", "clone(CLONE_NEWNET)" },
  { "netns-unshare-newnet", "unshare-newnet", "clone", "unshare(CLONE_NEWNET) after clone" },
  { "netns-setns-shared", "setns-shared", "clone", "setns into one pre-made namespace" },
  { "netns-newuser-newnet", "clone-newuser-newnet", "clone-newuser", "the unprivileged way" },
}

-- The pooled-start rows against the raw prefork child and fork+exec (fe),
-- from the same run; with the whole bench's spawn-done figure, that row too.
local function warm_rows(rows, quick, fe, spawn_done)
  local w = bench_warm(quick and 50 or 300)
  local pf = bench_prefork(quick and 50 or 300)
  if spawn_done then
    row(rows, "spawn-done-warm", w.result, "spawn-done", spawn_done,
      { what = "b:start to the result, on a worker b:warm prepared beforehand" })
  end
  row(rows, "warm-first-instruction", w.first, "raw prefork wake", pf.wake,
    { target_us = 100, what = "b:start to the guest's first instruction" })
  row(rows, "warm-first/fork-exec", w.first, "fork-exec /bin/true", fe)
  row(rows, "warm-first-burst", bench_warm_burst(quick and 40 or 200, 20), "raw prefork wake", pf.wake,
    { target_us = 100, what = "the same, 20 starts back to back from a pool of 20" })
  row(rows, "warm-first-effect", w.effect, "raw prefork round", pf.round,
    { what = "b:start to the handler of the guest's first effect" })
  row(rows, "warm-done", w.done, "fork-exec /bin/true", fe,
    { what = "b:start to the done frame (before the exit is reaped)" })
end

local function output(rows, as_json)
  if as_json then
    for _, x in ipairs(rows) do io.stdout:write(json.encode(x), "\n") end
    return 0
  end
  M.print_table(rows)
  return 0
end

function M.main(args)
  local as_json, quick, only_warm = false, false, false
  for i, a in ipairs(args or {}) do
    if a == "--json" then as_json = true
    elseif a == "--quick" then quick = true
    elseif a == "warm" and i == 1 then only_warm = true
    else io.stderr:write("airlock bench: unknown option ", a, "\n") return 2 end
  end
  if only_warm then   -- `airlock bench warm`: the pooled-start rows alone
    local rows = {}
    warm_rows(rows, quick, baseline("forkexec " .. (quick and 100 or 300) .. " /bin/true"))
    return output(rows, as_json)
  end
  local n = quick and 100 or 1000
  local rows = {}
  local fe = baseline("forkexec " .. n .. " /bin/true")

  local bwrap = which("bwrap")
  local vs = variants(bwrap)
  local s = bench_variants(vs, { main = n, layer = quick and 60 or 300, bwrap = quick and 20 or 200 })
  local bw = bwrap and s.bwrap or { skipped = "bwrap not installed" }
  if bw.skipped and bwrap then bw.skipped = "bwrap " .. bw.skipped end

  row(rows, "spawn-done", s.confined, "fork-exec /bin/true", fe)
  row(rows, "spawn-unconfined", s.unconfined, "fork-exec /bin/true", fe)
  row(rows, "bwrap-true", bw, "fork-exec /bin/true", fe)
  row(rows, "confined/unconfined", s.confined, "spawn-unconfined", s.unconfined, { target = "<= 1.5" })
  row(rows, "confined/bwrap", s.confined, "bwrap-true", bw, { target = "< 1" })
  warm_rows(rows, quick, fe, s.confined)

  local rt = bench_roundtrip(quick and 2000 or 20000)
  -- the raw baseline carries frames of the same size as a ping call (~40 bytes)
  local pp = baseline("pingpong " .. (quick and 2000 or 20000) .. " 48")
  row(rows, "effect-roundtrip", rt, "raw socketpair ping-pong", pp)
  if not pp.skipped and pp.cpu_parent_us then
    rows[#rows + 1] = { bench = "roundtrip-cpu", cpu_host_us = rt.cpu_host_us, cpu_worker_us = rt.cpu_worker_us,
                        raw_parent_us = pp.cpu_parent_us, raw_child_us = pp.cpu_child_us }
  end
  local r = bench_rss(quick and 50 or 200)
  rows[#rows + 1] = { bench = "parent-rss-per-run", kb = r.per_run_kb, runs = r.runs }
  -- CPU-bound guest code against lua5.4 on the same programs (airlock bench guest)
  for _, g in ipairs(require("airlock.cli.bench_guest").rows(quick and 1 or 3)) do rows[#rows + 1] = g end

  -- Per layer: one group on at a time, against unconfined from the same rounds.
  row(rows, "confined-ownnet", s["confined-ownnet"], "spawn-done", s.confined,
      { what = "untrusted with shared_net = false" })
  for _, l in ipairs(LAYER_ROWS) do
    row(rows, l[1], s[l[1]], "spawn-unconfined", s.unconfined, { what = l[2] })
  end
  row(rows, "layer-seccomp+pidns", s["layer-seccomp+pidns"], "layer-ns-pid", s["layer-ns-pid"],
      { what = "filter compiled once by the parent, as confined runs load it" })

  -- The net namespace alone, outside airlock (last: dead namespaces are freed
  -- later by the kernel, which would load whatever ran next).
  local nn, nerr = bench_netns(n)
  for _, l in ipairs(NETNS_ROWS) do
    local m = nn and nn[l[2]] or { skipped = nerr }
    local base = nn and nn[l[3]] or { skipped = nerr }
    if m.error then m = { skipped = m.error } end
    if base.error then base = { skipped = base.error } end
    row(rows, l[1], m, l[3], base, { what = l[4] })
  end

  return output(rows, as_json)
end

local function fmt(v, f) return v and string.format(f, v) or "-" end

function M.print_table(rows)
  print(string.format("%-24s %10s %10s %8s  %-22s %11s %7s %9s", "bench", "median_us", "p99_us", "per_sec",
    "baseline", "base_med_us", "ratio", "+us"))
  local by = {}
  for _, x in ipairs(rows) do
    by[x.bench] = x
    if x.bench == "confined-ownnet" then print("-- one confinement layer group at a time (same rounds as above)")
    elseif x.bench == "netns-clone-newnet" then print("-- net namespace alone: clone + _exit + wait (airlock-netns)") end
    if x.speed or (x.policy and x.skipped) then
      if x.skipped then
        print(string.format("%-24s skipped: %s", x.bench, x.skipped))
      else
        print(string.format("%-24s guest %.4f s, lua5.4 %.4f s of CPU: speed %.2f of lua5.4's", x.bench,
          x.guest_s, x.lua_s, x.speed))
      end
    elseif x.kb then
      print(string.format("%-24s %.0f KiB of parent RSS per live run (%d runs parked on an effect)", x.bench, x.kb, x.runs))
    elseif x.cpu_host_us then
      print(string.format("%-24s CPU us per call: host %.1f + worker %.1f = %.1f; raw ping-pong: parent %.1f + child %.1f = %.1f",
        x.bench, x.cpu_host_us, x.cpu_worker_us, x.cpu_host_us + x.cpu_worker_us, x.raw_parent_us, x.raw_child_us,
        x.raw_parent_us + x.raw_child_us))
    elseif x.skipped and not x.median_us then
      print(string.format("%-24s skipped: %s", x.bench, x.skipped))
    elseif x.skipped then
      print(string.format("%-24s %10.1f %10.1f %8s  %-22s skipped: %s", x.bench, x.median_us, x.p99_us, "-",
        x.baseline or "-", x.skipped))
    else
      local tail = {}
      if x.target then
        tail[#tail + 1] = string.format("target %s: %s (p99 ratio %.2f)", x.target, x.met and "met" or "MISSED",
          x.p99_ratio or 0)
      end
      if x.target_us then
        tail[#tail + 1] = string.format("target median <= %d us: %s", x.target_us, x.met and "met" or "MISSED")
      end
      if x.what then tail[#tail + 1] = x.what end
      if x.note then tail[#tail + 1] = x.note end
      print(string.format("%-24s %10.1f %10.1f %8s  %-22s %11s %7s %9s  %s", x.bench, x.median_us, x.p99_us,
        fmt(x.per_sec, "%.0f"), x.baseline or "-", fmt(x.baseline_median_us, "%.1f"), fmt(x.ratio, "%.2f"),
        fmt(x.delta_us, "%+.0f"), table.concat(tail, "; ")))
    end
  end
  -- Closing note: what each layer adds to an unconfined spawn, largest first.
  local costs = {}
  for _, l in ipairs(LAYER_ROWS) do
    local x = by[l[1]]
    if x and x.delta_us and not l[1]:match("^layer%-ns%-") then costs[#costs + 1] = x end
  end
  table.sort(costs, function(a, b) return a.delta_us > b.delta_us end)
  local parts = {}
  for _, x in ipairs(costs) do parts[#parts + 1] = string.format("%s %+.0f us", x.bench:gsub("^layer%-", ""), x.delta_us) end
  if #parts > 0 then print("layer costs over unconfined (medians): " .. table.concat(parts, ", ")) end
  local nets, netn, setn = by["layer-ns-net"], by["netns-clone-newnet"], by["netns-setns-shared"]
  if nets and nets.delta_us and netn and netn.delta_us and setn and setn.delta_us then
    print(string.format("net namespace: fresh %+.0f us per run in airlock, %+.0f us bare; joining the shared one %+.0f us bare",
      nets.delta_us, netn.delta_us, setn.delta_us))
  end
end

return M
