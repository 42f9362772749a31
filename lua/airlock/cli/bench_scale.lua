-- airlock.cli.bench_scale -- `airlock bench scale`: a plugin host's frame loop.
-- N long-lived guests (confined by the stock untrusted policy) each wait for a
-- deferred `tick`, then make K effects, then wait for the next tick; one
-- broker serves them all. A frame is: answer every tick, then step until
-- every guest waits again. Reported per N: the host's time per frame (median
-- and p99), effects per second, the frames per second that leaves, and the
-- same loop in raw C (airlock-baseline frames: N children, one epoll loop,
-- frames of the same sizes, nothing decoded), measured in the same run, as
-- the floor the ratio is taken against. Two kinds of effects are timed:
--   calls   K effects the guest waits for (host.act): a round trip each
--   notes   K notifications (host.move, declared in the policy's notify: no
--           answer; they go out in one batch with the guest's next call)
local airlock = require "airlock"
local core = require "airlock.core"
local json = require "airlock.json"
local bench = require "airlock.cli.bench"

local M = {}

local percentile = bench.percentile

local GUEST = {
  calls = [[
local k = ...
while true do
  host.tick()
  for i = 1, k do host.act(i) end
end]],
  notes = [[
local k = ...
while true do
  host.tick()
  for i = 1, k do host.move(i) end
end]],
}

-- One scenario: n guests, k effects a frame, f frames. -> row, or nil, why.
local function scenario(kind, n, k, f)
  local b <close> = airlock.broker()
  local pending, effects = {}, 0
  local pol = airlock.policy.extend("untrusted", {
    name = "bench-scale",
    limits = { instructions = 0, deadline_ms = 0, memory = "8M" },
    effects = {
      tick = function(_, ctx)
        pending[#pending + 1] = { ctx.handle, ctx.seq }
        return airlock.defer()
      end,
      act = function(i) effects = effects + 1 return i end,
      move = function() effects = effects + 1 end,
    },
    notify = kind == "notes" and { "move" } or nil,
  })
  local runs = {}
  for i = 1, n do
    local run, err = b:start { guest = GUEST[kind], input = k, policy = pol }
    if not run then return nil, "cannot start guest " .. i .. ": " .. tostring(err) end
    runs[i] = run
  end
  local function settle()
    while #pending < n do
      local done, err = b:step(1000)
      if not done then return nil, err end
      if #done > 0 then
        return nil, "a guest ended: " .. tostring(done[1].cause) .. ": " .. tostring(done[1].message)
      end
    end
    return true
  end
  local ok, err = settle()
  if not ok then return nil, err end
  local times, warm = {}, math.max(3, f // 10)
  local t_start, e_start, c_start
  for frame = 1, f + warm do
    if frame == warm + 1 then t_start, e_start, c_start = core.now_ms(), effects, os.clock() end
    local t0 = core.now_ms()
    local ticks = pending
    pending = {}
    for _, t in ipairs(ticks) do t[1]:reply(t[2], frame) end
    ok, err = settle()
    if not ok then return nil, err end
    if frame > warm then times[#times + 1] = (core.now_ms() - t0) * 1000 end
  end
  local span_s = (core.now_ms() - t_start) / 1000
  -- the host's CPU time (user + system) per effect: the serial part of a frame
  local cpu_host_us = (os.clock() - c_start) * 1e6 / (effects - e_start)
  for _, r in ipairs(runs) do r:cancel() end
  while b:live() > 0 do b:step(100) end
  local med = percentile(times, 0.5)
  return { median_us = med, p99_us = percentile(times, 0.99), n = #times,
           effects_per_sec = (effects - e_start) / span_s, fps = 1e6 / med, cpu_host_us = cpu_host_us }
end

local function raw(n, k, f)
  return bench.baseline_row("frames " .. n .. " " .. k .. " " .. f)
end

function M.main(args)
  local as_json, quick = false, false
  local guests, k = nil, 5
  local i = 1
  while i <= #(args or {}) do
    local a = args[i]
    if a == "--json" then as_json = true
    elseif a == "--quick" then quick = true
    elseif a == "--guests" or a == "--effects" then
      local v = math.tointeger(tonumber(args[i + 1] or ""))
      if not v or v < 1 or v > 2000 then
        io.stderr:write("airlock bench scale: ", a, " takes a whole number from 1 to 2000\n")
        return 2
      end
      if a == "--guests" then guests = { v } else k = v end
      i = i + 1
    else
      io.stderr:write("airlock bench scale: unknown option ", a, "\n")
      return 2
    end
    i = i + 1
  end
  guests = guests or (quick and { 10, 200 } or { 10, 50, 200 })
  local rows = {}
  for _, n in ipairs(guests) do
    local f = quick and math.max(20, 2000 // n) or math.max(60, 12000 // n)
    local floor, ferr = raw(n, k, f)
    for _, kind in ipairs { "calls", "notes" } do
      local m, err = scenario(kind, n, k, f)
      local r = { bench = "scale-" .. kind, guests = n, effects = k, frames = f }
      if not m then r.skipped = err
      elseif not floor then r.skipped = "no baseline: " .. tostring(ferr)
      else
        r.median_us, r.p99_us, r.effects_per_sec, r.fps = m.median_us, m.p99_us, m.effects_per_sec, m.fps
        r.baseline = "raw C epoll loop, same frames"
        r.baseline_median_us, r.baseline_p99_us = floor.median_us, floor.p99_us
        r.baseline_effects_per_sec = floor.effects_per_sec
        r.ratio = m.effects_per_sec / floor.effects_per_sec   -- of the floor's throughput: higher is better
        r.cpu_host_us, r.baseline_cpu_parent_us = m.cpu_host_us, floor.cpu_parent_us
        r.p99_ratio = m.p99_us / floor.p99_us
      end
      rows[#rows + 1] = r
    end
  end
  if as_json then
    for _, r in ipairs(rows) do print(json.encode(r)) end
    return 0
  end
  print(string.format("%-13s %6s %4s %11s %11s %10s %7s %12s %8s %13s", "bench", "guests", "k", "median ms",
    "p99 ms", "effects/s", "fps", "raw effects/s", "x floor", "host/raw cpu"))
  for _, r in ipairs(rows) do
    if r.skipped then
      print(string.format("%-13s %6d %4d  skipped: %s", r.bench, r.guests, r.effects, r.skipped))
    else
      print(string.format("%-13s %6d %4d %11.2f %11.2f %10.0f %7.0f %12.0f %7.2fx %6.1f/%-6.1f", r.bench, r.guests,
        r.effects, r.median_us / 1000, r.p99_us / 1000, r.effects_per_sec, r.fps, r.baseline_effects_per_sec, r.ratio,
        r.cpu_host_us, r.baseline_cpu_parent_us or 0))
    end
  end
  print("x floor: effects/s over the raw C loop's in the same frames (1.0 = the floor; notes can pass it:")
  print("         the floor makes every effect a round trip)")
  print("host/raw cpu: us of CPU time per effect, the host's against the raw loop's parent (the serial part:")
  print("         a frame takes at least effects x this)")
  return 0
end

return M
