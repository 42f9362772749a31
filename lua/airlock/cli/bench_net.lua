-- airlock.cli.bench_net -- `airlock bench net`: what a program's HTTP request
-- costs through its run's egress proxy (tool.network), against the same
-- request made directly, in the same run. The upstream is airlock-baseline
-- httpd on 127.0.0.1 (the policy names that address, as loopback must be).
-- Timed, in interleaved rounds of N requests each (curl, one process per
-- request, as a script makes them):
--   direct    sh -c 'for ...; do curl http://127.0.0.1:PORT/; done' on the host
--   proxied   the same loop under airlock exec with tool.network allowing it:
--             each request goes to the proxy, is decided by the policy (name,
--             then address), and is relayed; the exec's own start is counted too
--   sandboxed the same loop under airlock exec without network, curl's
--             connection refused at once (what the sandbox alone costs)
-- Target: proxied at most 1.3x direct, per request.
local airlock = require "airlock"
local core = require "airlock.core"
local json = require "airlock.json"
local bench = require "airlock.cli.bench"
local util = require "airlock.util"

local M = {}

local percentile, bindir, which = bench.percentile, bench.bindir, bench.which

local function loop(n, url)
  return string.format("i=0; while [ $i -lt %d ]; do curl -s --max-time 10 -o /dev/null %s || exit 9; " ..
    "i=$((i+1)); done", n, url)
end

-- The direct loop runs as a user's shell would: without a preload the host
-- process may carry (the sanitizer suite's; curl hangs under ASan's), and
-- every curl bounded (10 s, in every loop), so a wedged one cannot hold the bench.
local function direct_cmd(n, url)
  return "env -u LD_PRELOAD sh -c " .. util.shell_quote(loop(n, url))
end

local function loop_refused(n, url)
  return string.format("i=0; while [ $i -lt %d ]; do curl -s --max-time 10 -o /dev/null %s; i=$((i+1)); done; exit 0",
    n, url)
end

function M.main(args)
  local as_json, quick = bench.options(args, "net")
  if as_json == nil then return 2 end
  local row = { bench = "net-request", baseline = "the same curl request made directly" }
  local curl = which("curl")
  if not curl then
    row.skipped = "curl is not installed (apt-get install curl)"
  else
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. util.shell_quote(dir)))
    local portfile = dir .. "/port"
    os.execute("env -u LD_PRELOAD " .. util.shell_quote(bindir() .. "/airlock-baseline") .. " httpd " .. util.shell_quote(portfile) ..
      " >/dev/null 2>&1 & echo $! > " .. util.shell_quote(dir .. "/pid"))
    local port
    for _ = 1, 200 do
      port = tonumber(util.read_file(portfile) or "")
      if port then break end
      os.execute("sleep 0.01")
    end
    local ws = dir .. "/ws"
    assert(os.execute("mkdir -p " .. util.shell_quote(ws)))
    if not port then
      row.skipped = "airlock-baseline httpd did not start"
    else
      local url = "http://127.0.0.1:" .. port .. "/"
      local pol = airlock.policy.extend("tool", { tool = { network = { allow = { "127.0.0.1:" .. port } } } })
      local n, rounds = quick and 20 or 100, quick and 2 or 5
      local direct, proxied, sandboxed = {}, {}, {}
      local err
      for _ = 1, rounds do
        local t0 = core.now_ms()
        local ok = os.execute(direct_cmd(n, url))
        direct[#direct + 1] = (core.now_ms() - t0) * 1000 / n
        if not ok then err = "curl failed directly" break end
        t0 = core.now_ms()
        local res, eerr = airlock.exec { argv = { "sh", "-c", loop(n, url) }, workspace = ws, policy = pol,
                                         timeout = "120s" }
        proxied[#proxied + 1] = (core.now_ms() - t0) * 1000 / n
        if not res or not res.ok then
          err = "through the proxy: " .. tostring(res and (res.message .. " " .. res.stderr) or eerr)
          break
        end
        t0 = core.now_ms()
        res, eerr = airlock.exec { argv = { "sh", "-c", loop_refused(n, url) }, workspace = ws, timeout = "120s" }
        sandboxed[#sandboxed + 1] = (core.now_ms() - t0) * 1000 / n
        if not res or not res.ok then err = "sandboxed: " .. tostring(res and res.message or eerr) break end
      end
      if err then
        row.skipped = err
      else
        row.n, row.rounds = n, rounds
        row.median_us = percentile(proxied, 0.5)
        row.baseline_median_us = percentile(direct, 0.5)
        row.sandboxed_median_us = percentile(sandboxed, 0.5)
        row.ratio = row.median_us / row.baseline_median_us
        row.delta_us = row.median_us - row.baseline_median_us
        row.target = "<= 1.3"
        row.met = row.ratio <= 1.3
      end
    end
    os.execute("kill $(cat " .. util.shell_quote(dir .. "/pid") .. ") 2>/dev/null; rm -rf " .. util.shell_quote(dir))
  end
  if as_json then
    print(json.encode(row))
    return 0
  end
  if row.skipped then
    print("net-request  skipped: " .. row.skipped)
    return 0
  end
  print(string.format("%-14s %12s %12s %12s %8s  %s", "bench", "proxied us", "direct us", "no-net us", "ratio", "target"))
  print(string.format("%-14s %12.0f %12.0f %12.0f %7.2fx  %s: %s", row.bench, row.median_us, row.baseline_median_us,
    row.sandboxed_median_us, row.ratio, row.target, row.met and "met" or "not met"))
  print(string.format("per request (curl, one process each), median of %d rounds of %d; an exec's own start " ..
    "is counted in its round", row.rounds, row.n))
  return 0
end

return M
