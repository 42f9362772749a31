-- airlock.bench -- `airlock bench`: measures airlock against baselines taken in
-- the same run (plain fork+exec, raw socketpair ping-pong, bubblewrap when
-- installed) and prints ratios. A measurement, never a pass/fail test.
local airlock = require "airlock"
local core = require "airlock.core"
local json = require "airlock.json"

local M = {}

local function percentile(xs, p)
  table.sort(xs)
  local i = math.max(1, math.min(#xs, math.ceil(#xs * p)))
  return xs[i]
end

local function bindir()
  local w = assert(core.worker_path())
  return w:match("^(.*)/[^/]+$")
end

-- Runs airlock-baseline and returns its JSON line as a table.
local function baseline(args)
  local cmd = bindir() .. "/airlock-baseline " .. args
  local p = io.popen(cmd .. " 2>/dev/null")
  local out = p:read("a")
  p:close()
  local t = json.decode(out)
  if type(t) ~= "table" or not t.median_us then error("bench: baseline failed: " .. cmd, 0) end
  return t
end

-- spawn -> ready -> trivial guest -> done, through one broker.
local function bench_spawn(n, pol)
  local b <close> = airlock.broker()
  local times = {}
  for i = 1, n + 10 do
    local t0 = core.now_ms()
    local run = assert(b:start { guest = "return 1", policy = pol })
    local res = run:wait(b)
    if not res.ok then error("bench: trivial guest failed: " .. res.cause .. ": " .. res.message, 0) end
    if i > 10 then times[#times + 1] = (core.now_ms() - t0) * 1000 end
  end
  return { median_us = percentile(times, 0.5), p99_us = percentile(times, 0.99) }
end

-- A program spawned through the broker's own machinery (no protocol).
local function bench_program(n, argv)
  local b <close> = airlock.broker()
  local times = {}
  for i = 1, n + 3 do
    local t0 = core.now_ms()
    local run = assert(b:_start { argv = argv, handlers = {}, expect_ready = false, deadline_ms = 10000 })
    local res = run:wait(b)
    if res.exit_code ~= 0 then return nil, (res.stderr ~= "" and res.stderr or res.message) end
    if i > 3 then times[#times + 1] = (core.now_ms() - t0) * 1000 end
  end
  return { median_us = percentile(times, 0.5), p99_us = percentile(times, 0.99) }
end

-- One effect round trip: guest -> Lua handler -> guest, timed between handler calls.
local function bench_roundtrip(n)
  local stamps = {}
  local pol = { limits = { instructions = 0, deadline_ms = 60000 }, effects = {
    ping = function(args) stamps[#stamps + 1] = core.now_ms() return args end } }
  local res = assert(airlock.run { guest = "local n = ... for i = 1, n do host.ping({ i = i }) end return n",
    input = n + 100, policy = pol })
  assert(res.ok, res.message)
  local d = {}
  for i = 102, #stamps do d[#d + 1] = (stamps[i] - stamps[i - 1]) * 1000 end
  local total = 0
  for _, x in ipairs(d) do total = total + x end
  return { median_us = percentile(d, 0.5), p99_us = percentile(d, 0.99), per_sec = #d / (total / 1e6) }
end

-- Parent RSS per live run, with many runs parked on an unanswered effect.
local function bench_rss(n)
  local b <close> = airlock.broker()
  local parked = 0
  local pol = { limits = { deadline_ms = 60000 }, effects = {
    park = function() parked = parked + 1 return airlock.defer() end } }
  collectgarbage()
  local function rss() return tonumber(io.open("/proc/self/status"):read("a"):match("VmRSS:%s*(%d+)")) end
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

local function row(rows, name, m, base_name, base)
  rows[#rows + 1] = { bench = name, median_us = m.median_us, p99_us = m.p99_us, per_sec = m.per_sec,
    baseline = base_name, baseline_median_us = base and base.median_us,
    ratio = base and m.median_us / base.median_us }
end

function M.main(args)
  local as_json, quick = false, false
  for _, a in ipairs(args or {}) do
    if a == "--json" then as_json = true
    elseif a == "--quick" then quick = true
    else io.stderr:write("airlock bench: unknown option ", a, "\n") return 2 end
  end
  local n = quick and 100 or 1000
  local rows = {}
  local fe = baseline("forkexec " .. n .. " /bin/true")
  row(rows, "spawn-done", bench_spawn(n), "fork-exec /bin/true", fe)
  local bw = io.open("/usr/bin/bwrap")
  if bw then
    bw:close()
    local m, err = bench_program(quick and 20 or 200, { "/usr/bin/bwrap", "--unshare-all", "--ro-bind", "/", "/", "/bin/true" })
    if m then row(rows, "bwrap-true", m, "fork-exec /bin/true", fe)
    else io.stderr:write("bench: bubblewrap could not run here: ", err, "\n") end
  end
  local rt = bench_roundtrip(quick and 2000 or 20000)
  -- the raw baseline carries frames of the same size as a ping call (~40 bytes)
  local pp = baseline("pingpong " .. (quick and 2000 or 20000) .. " 48")
  row(rows, "effect-roundtrip", rt, "raw socketpair ping-pong", pp)
  local r = bench_rss(quick and 50 or 200)
  rows[#rows + 1] = { bench = "parent-rss-per-run", kb = r.per_run_kb, runs = r.runs }

  if as_json then
    for _, x in ipairs(rows) do io.stdout:write(json.encode(x), "\n") end
    return 0
  end
  print(string.format("%-20s %11s %11s %11s  %-26s %11s %7s", "bench", "median_us", "p99_us", "per_sec",
    "baseline", "base_med_us", "ratio"))
  for _, x in ipairs(rows) do
    if x.kb then
      print(string.format("%-20s %.0f KiB of parent RSS per live run (%d runs parked on an effect)", x.bench, x.kb, x.runs))
    else
      print(string.format("%-20s %11.1f %11.1f %11s  %-26s %11.1f %7.2f", x.bench, x.median_us, x.p99_us,
        x.per_sec and string.format("%.0f", x.per_sec) or "-", x.baseline or "-", x.baseline_median_us or 0, x.ratio or 0))
    end
  end
  return 0
end

return M
