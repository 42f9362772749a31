-- host.lua -- the simulation of plugin-host: a grid world, its effects, the
-- bots' turns, and the rendering. main.c loads this file with `sys` (the
-- command line and a few C helpers) and drives it:
--
--   start()              every bot in bots/*.lua (or sys.bots generated ones) started
--                        in its own worker
--   pump()               one broker:step(0); called every millisecond or so
--   frame(tick, ms)      ends the previous tick, renders, starts this one
--   finish(tick, ms)     ends the last tick; waiting bots hear the game is over
--   close(stats)         stops stragglers, prints the summary
--   replay(bot)          replays one bot's ledger; 0 when it matches
--
-- Why one long-lived guest per bot, rather than one guest run per bot per tick:
-- a bot keeps its state in its own variables across ticks, its whole game is
-- one session in one ledger (so it replays as one run), and the host pays one
-- spawn per bot instead of one per bot per tick. The host loop still never
-- waits for a bot: a bot's turn ends when it calls world.tick, which the host
-- answers only at the next tick (airlock.defer, then run:reply), and the broker
-- is only ever polled (step(0)). A bot that has not ended its turn when the
-- tick ends simply skips that tick.
--
-- A bot's effects:
--   world.tick()               end this turn; answered at the next tick with
--                              {tick, x, y, gems, bumped}, or false once the game is over
--   world.look{radius = 1..5}  {tick, x, y, free = {n, e, s, w = bool},
--                               gems = {{dx, dy}, ...} nearest first, bots = {{name, dx, dy}, ...}}
--   world.move{dir = "n"|"e"|"s"|"w"}   one step, applied when the tick ends
--   world.say{text = "..."}    a line in the tick log
local airlock = require "airlock"
local sys = ...

local H = {}

local FLOOD = 12          -- effects a bot may ask for within one tick
local SAY_MAX = 60        -- characters of a say or print shown in the log
local LOOK_MAX = 5        -- largest radius of world.look
local GEMS = 6            -- gems on the map at any time
local STALL = math.max(10, sys.fps)   -- ticks in a row without a turn: the host stops the bot
local JOIN_MS, GRACE_MS = 5000, 2000  -- as in main.c
local LOG_LINES = 12      -- tick-log lines shown under the grid on a terminal

local MAP = sys.bots > 0 and {} or {
  "################################",
  "#..............#...............#",
  "#..............#...............#",
  "#....####..........#####.......#",
  "#..............................#",
  "#.......#..............#.......#",
  "#.......#......#####...#.......#",
  "#..............................#",
  "#..............#...............#",
  "################################",
}
-- --bots N: an open field with room for four times as many bots.
if sys.bots > 0 then
  local w = 64
  local h = math.max(10, math.ceil(sys.bots * 4 / (w - 2)) + 2)
  for y = 1, h do MAP[y] = (y == 1 or y == h) and ("#"):rep(w) or "#" .. ("."):rep(w - 2) .. "#" end
end
local W, HEIGHT = #MAP[1], #MAP
local STARTS = { { 3, 2 }, { 29, 8 }, { 3, 8 }, { 29, 2 }, { 12, 5 }, { 20, 4 }, { 17, 8 }, { 12, 2 }, { 21, 2 } }
local DIRS = { n = { 0, -1 }, e = { 1, 0 }, s = { 0, 1 }, w = { -1, 0 } }
local DIR_ORDER = { "n", "e", "s", "w" }

-- ------------------------------------------------------------ the world

local bots, by_run = {}, {}          -- in name order; run id -> bot
local gems = {}                      -- y * 1024 + x -> true
local occ = {}                       -- y * 1024 + x -> the bot there (alive or not)
local T = { tick = 0, over = false, events = {}, log = {} }
local B                              -- the broker

-- A small deterministic generator for the world (gems), apart from math.random.
local rng_state = 20240607
local function rng(n)
  rng_state = (rng_state * 1103515245 + 12345) % 2147483648
  return rng_state % n + 1
end

-- The map's walls by cell (y * 1024 + x), made once: a look asks for many cells.
local WALL = {}
for y = 1, HEIGHT do
  for x = 1, W do WALL[y * 1024 + x] = MAP[y]:sub(x, x) == "#" end
end

local function wall(x, y)
  return y < 1 or y > HEIGHT or x < 1 or x > W or WALL[y * 1024 + x]
end

local function bot_at(x, y)
  local b = occ[y * 1024 + x]
  if b and b.alive then return b end
end

local function place(bot, x, y)
  if bot.x and occ[bot.y * 1024 + bot.x] == bot then occ[bot.y * 1024 + bot.x] = nil end
  bot.x, bot.y = x, y
  occ[y * 1024 + x] = bot
end

local function free(x, y) return not wall(x, y) and not bot_at(x, y) end

local function spawn_gem()
  for _ = 1, 1000 do
    local x, y = rng(W), rng(HEIGHT)
    if free(x, y) and not gems[y * 1024 + x] then gems[y * 1024 + x] = true return end
  end
end

local function event(text)
  T.events[#T.events + 1] = text
end

local function first_line(s) return (tostring(s or ""):gsub("\n.*", "")) end

local function short(s)
  s = first_line(s)
  return #s > SAY_MAX and s:sub(1, SAY_MAX - 3) .. "..." or s
end

-- Every effect goes through here: the bot it comes from, and the flood check.
local function count(ctx)
  local bot = by_run[ctx.run]
  bot.effects = bot.effects + 1
  if bot.effects > FLOOD then
    local msg = string.format("flood: %d effects in tick %d (the limit is %d a tick)", bot.effects, T.tick, FLOOD)
    ctx.handle:abort("cancelled", msg)
    error(msg, 0)
  end
  return bot
end

-- The effect handlers; mods.lua (the policy) passes each call to one of these.
local world = {}

function world.tick(_, ctx)
  local bot = count(ctx)
  if T.over then return false end
  bot.joined = true
  bot.pending = ctx.seq
  return airlock.defer()   -- answered by the next frame()
end

function world.look(args, ctx)
  local bot = count(ctx)
  local r = 3
  if type(args) == "table" and args.radius ~= nil then r = args.radius end
  if math.type(r) ~= "integer" or r < 1 or r > LOOK_MAX then
    error("world.look: radius must be a whole number from 1 to " .. LOOK_MAX, 0)
  end
  local view = { tick = T.tick, x = bot.x, y = bot.y, free = {}, gems = {}, bots = {} }
  for _, d in ipairs(DIR_ORDER) do view.free[d] = free(bot.x + DIRS[d][1], bot.y + DIRS[d][2]) end
  for dy = -r, r do
    for dx = -r, r do
      local x, y = bot.x + dx, bot.y + dy
      if gems[y * 1024 + x] then view.gems[#view.gems + 1] = { dx = dx, dy = dy } end
      local other = (dx ~= 0 or dy ~= 0) and bot_at(x, y)
      if other then view.bots[#view.bots + 1] = { name = other.name, dx = dx, dy = dy } end
    end
  end
  table.sort(view.gems, function(a, b)
    local da, db = math.abs(a.dx) + math.abs(a.dy), math.abs(b.dx) + math.abs(b.dy)
    if da ~= db then return da < db end
    if a.dy ~= b.dy then return a.dy < b.dy end
    return a.dx < b.dx
  end)
  return view
end

function world.move(args, ctx)
  local bot = count(ctx)
  local d = type(args) == "table" and args.dir
  if not DIRS[d] then error("world.move: dir must be one of n, e, s, w", 0) end
  bot.move = d
  return true
end

local function said(bot, verb, args, effect)
  local text = type(args) == "table" and args.text
  if type(text) ~= "string" then error(effect .. ": text must be a string", 0) end
  if bot.said then bot.said.more = bot.said.more + 1   -- one line a tick: the first, and a count
  else bot.said = { verb = verb, text = short(text), more = 0 } end
  return true
end

function world.say(args, ctx) return said(count(ctx), "says", args, "world.say") end
function world.print(args, ctx) return said(count(ctx), "prints", args, "print") end

function world.clock(_, ctx)
  count(ctx)
  return { time = os.time(), clock = os.clock() }
end

-- mods.lua's handlers find the world here.
package.loaded["plugin-host.world"] = world

-- The policy for a game of `game.ticks` at `game.fps`: mods.lua, with the
-- deadline raised to the game's length (a bot lives as long as the game) and
-- the CPU budget to 5 ms a tick (a simple bot's turn takes a few hundredths).
-- replay() builds it again from the recorded input, so the digests agree.
-- A --fast game has no clock: no deadline either (the game's end ends every
-- bot), only the CPU budgets.
local function policy_for(game)
  local mods = assert(airlock.policy.load(sys.dir .. "/mods.lua"))
  local ms = game.fast and 0 or math.ceil(game.ticks * 1000 / game.fps) + JOIN_MS + GRACE_MS + 1000
  return airlock.policy.extend(mods, { limits = { deadline_ms = ms, cpu = math.max(1000, game.ticks * 5) } })
end

-- ------------------------------------------------------------ rendering

local function cell(x, y)
  local b = bot_at(x, y)
  if b then return b.letter end
  if gems[y * 1024 + x] then return "*" end
  return wall(x, y) and "#" or "."
end

local function legend(b)
  local state
  if b.alive then state = b.joined and "playing" or "starting"
  else state = "stopped: " .. b.result.cause end
  return string.format("   %s %-7s gems %-2d turns %-4d skipped %-3d %s", b.letter, b.name, b.gems, b.turns, b.skips, state)
end

local function grid()
  local lines = {}
  for y = 1, HEIGHT do
    local row = {}
    for x = 1, W do row[x] = cell(x, y) end
    lines[y] = table.concat(row) .. (bots[y] and legend(bots[y]) or "")
  end
  return table.concat(lines, "\n")
end

local function header()
  if sys.bots > 0 then return "tick  played  skipped  stopped  effects  host ms" end
  local h = { "tick  " }
  for _, b in ipairs(bots) do h[#h + 1] = string.format("%-7s", b.name) end
  h[#h + 1] = "host ms"
  return table.concat(h)
end

local function title()
  return string.format("plugin-host: %d bots%s, %d ticks at %d fps (a turn's budget: %.0f ms), policy mods, ledgers in %s",
    #bots, sys.bots > 0 and " (generated)" or "", sys.ticks, sys.fps, 1000 / sys.fps,
    sys.ledgers or "none (--no-ledgers)")
end

local function out(line)
  T.log[#T.log + 1] = line
  -- only the lines redraw() shows are kept: a long game must not keep them all
  if #T.log > LOG_LINES then table.remove(T.log, 1) end
  if sys.plain then io.write(line, "\n") io.stdout:flush() end
end

local function redraw()
  if sys.plain then return end
  -- Home, each line over the old one (erasing its rest), then erase below: no flicker.
  local lines = { title(), "", grid(), "", header() }
  for i = math.max(1, #T.log - LOG_LINES + 1), #T.log do lines[#lines + 1] = T.log[i] end
  io.write(T.drawn and "" or "\27[2J", "\27[H", table.concat(lines, "\27[K\n"), "\27[K\n\27[J")
  io.stdout:flush()
  T.drawn = true
end

local function flush_events()
  for _, e in ipairs(T.events) do out("      " .. e) end
  T.events = {}
end

-- ------------------------------------------------------------ the game

-- A generated bot (--bots N): six effects a tick, two calls (world.tick,
-- world.look) and four notifications (a move, two says, a print), which the
-- policy declares in notify: the guest sends them without waiting.
-- With --work MS each turn also does input.work steps of arithmetic, about
-- MS ms of CPU (steps_per_ms below); with --hog T the last bot never ends its
-- turn at tick T, however it is interrupted.
local GENERATED = [[
local input = ...
local steps, hog = input.work or 0, input.hog
local function work()
  local x = 0
  for i = 1, steps do x = x + i % 7 end
  return x
end
local me = host.world.tick()
while me do
  if me.tick == hog then
    while true do pcall(function() while true do end end) end
  end
  work()
  local view = host.world.look { radius = 1 }
  local open = {}
  for _, d in ipairs { "n", "e", "s", "w" } do
    if view.free[d] then open[#open + 1] = d end
  end
  host.world.move { dir = #open > 0 and open[math.random(#open)] or "n" }
  host.world.say { text = "at " .. me.x .. "," .. me.y }
  host.world.say { text = "gems " .. me.gems }
  print("tick", me.tick)
  me = host.world.tick()
end
return "bye"
]]

-- How many steps of the generated bots' work take a millisecond of CPU here,
-- measured over 50 ms of this host's own interpreter (the same loop).
local function steps_per_ms()
  local function work(n) local x = 0 for i = 1, n do x = x + i % 7 end return x end
  local n, t0 = 0, os.clock()
  repeat work(10000) n = n + 10000 until os.clock() - t0 >= 0.05
  return n / ((os.clock() - t0) * 1000)
end

--- start(): one run per bot, recorded in its own ledger (none with --no-ledgers).
function H.start()
  local files = {}
  if sys.bots > 0 then
    for i = 1, sys.bots do files[i] = string.format("g%03d.lua", i) end
  else
    files = assert(sys.listdir(sys.dir .. "/bots"))
  end
  local used = {}
  local game = { ticks = sys.ticks, fps = sys.fps, fast = sys.fast or nil }
  local work_steps = sys.bots > 0 and sys.work > 0 and math.floor(sys.work * steps_per_ms()) or nil
  local pol = policy_for(game)
  B = airlock.broker()
  for _, f in ipairs(files) do
    local name = f:match("^([%w_%-]+)%.lua$")
    if name then
      local letter
      if sys.bots > 0 then letter = "o" end
      for c in name:upper():gmatch("%a") do if not used[c] and not letter then letter = c break end end
      letter = letter or "?"
      used[letter] = true
      local bot = { name = name, letter = letter, gems = 0, turns = 0, skips = 0, stall = 0,
                    effects = 0, replies = 0, alive = true }
      bots[#bots + 1] = bot
    end
  end
  for i, bot in ipairs(bots) do   -- bots placed so far are the only ones with a position
    local x, y = table.unpack(STARTS[i] or { 1, 1 })
    while wall(x, y) or bot_at(x, y) do x, y = rng(W), rng(HEIGHT) end
    place(bot, x, y)
  end
  for _ = 1, GEMS do spawn_gem() end
  for _, bot in ipairs(bots) do
    local dir = sys.ledgers and sys.ledgers .. "/" .. bot.name
    local f = dir and io.open(dir .. "/journal", "rb")
    if f then
      f:close()
      error(string.format("%s already holds a recorded game; give a new --ledgers DIR", dir), 0)
    end
    local seed = 7
    for c in bot.name:gmatch(".") do seed = (seed * 31 + c:byte()) % 2147483647 end
    local run, err, code = B:start {
      guest = sys.bots > 0 and GENERATED or sys.dir .. "/bots/" .. bot.name .. ".lua", name = bot.name,
      policy = pol, seed = seed,
      input = { name = bot.name, ticks = game.ticks, fps = game.fps, fast = game.fast,
                width = W, height = HEIGHT, work = work_steps,
                hog = sys.bots > 0 and sys.hog > 0 and bot == bots[#bots] and sys.hog or nil },
      -- durability "none": the kernel writes the records out; a game loop must
      -- not wait for fdatasync (a crash can lose the last records, never corrupt them).
      ledger = dir, durability = dir and "none" or nil,
    }
    if run then
      bot.run = run
      by_run[run:id()] = bot
    else
      bot.alive = false
      bot.result = { cause = code or "error", message = err, usage = {} }
      event(string.format("%s could not start: %s", bot.name, first_line(err)))
    end
  end
end

--- pump([timeout_ms]) -> all_joined, all_done, all_waiting: one step of the
--- broker; the game loop only ever polls (timeout 0, the default), but for
--- --fast, where a tick waits for every live bot to end its turn (all_waiting).
function H.pump(timeout)
  local done, err = B:step(timeout or 0)
  if not done then error("broker: " .. tostring(err), 0) end
  for _, res in ipairs(done) do
    local bot = by_run[res.run]
    bot.alive, bot.result, bot.stopped_in = false, res, T.tick
    bot.pending = nil
    if not (T.over and res.ok) then
      event(string.format("%s stopped: %s -- %s", bot.name, res.cause, short(res.message)))
    end
  end
  local joined, all_done, waiting = true, true, true
  for _, b in ipairs(bots) do
    if b.alive then
      all_done = false
      if not b.joined then joined = false end
      if not b.pending then waiting = false end
    end
  end
  return joined, all_done, waiting
end

-- The bot's queued move, applied: "e" moved, "e*" moved onto a gem, "e!"
-- bumped into a wall or a bot, "." ended its turn without moving.
local function apply(bot)
  local d = bot.move
  bot.move, bot.bumped = nil, nil
  if not d then return "." end
  local nx, ny = bot.x + DIRS[d][1], bot.y + DIRS[d][2]
  if not free(nx, ny) then bot.bumped = true return d .. "!" end
  place(bot, nx, ny)
  local key = ny * 1024 + nx
  if gems[key] then
    gems[key] = nil
    bot.gems = bot.gems + 1
    spawn_gem()
    return d .. "*"
  end
  return d
end

-- Ends the current tick: moves of the bots that ended their turn, skips for
-- the others, the tick's row and events in the log.
local function end_tick(work_ms)
  local row = { string.format("%4d  ", T.tick) }
  local played, skipped, stopped, effects = 0, 0, 0, 0
  for _, bot in ipairs(bots) do
    local action
    if not bot.alive then
      action = bot.stopped_in == T.tick and "stop" or "x"
    elseif not bot.joined then
      action = "-"
    elseif bot.pending then
      action = bot.replies == 0 and "join" or apply(bot)
      if bot.replies > 0 then bot.turns = bot.turns + 1 end
      bot.stall = 0
    else
      action = "skip"
      bot.skips, bot.stall = bot.skips + 1, bot.stall + 1
      if bot.stall == STALL then
        bot.run:abort("deadline", string.format("stalled: no turn ended in %d ticks", STALL))
      end
    end
    effects = effects + bot.effects
    if action == "skip" then skipped = skipped + 1
    elseif action == "stop" or action == "x" then stopped = stopped + 1
    elseif action ~= "-" then played = played + 1 end
    row[#row + 1] = string.format("%-7s", action)
  end
  if sys.bots > 0 then   -- generated bots: one count per column, not one column per bot
    out(string.format("%4d  %6d  %7d  %7d  %7d  %7.2f", T.tick, played, skipped, stopped, effects, work_ms))
    for _, bot in ipairs(bots) do bot.said = nil end
    flush_events()
    return
  end
  row[#row + 1] = string.format("%6.2f", work_ms)
  out(table.concat(row))
  for _, bot in ipairs(bots) do   -- what the bots said, then what the tick saw happen
    local s = bot.said
    if s then
      out(string.format('      %s %s "%s"%s', bot.name, s.verb, s.text,
        s.more > 0 and string.format(" (and %d more)", s.more) or ""))
      bot.said = nil
    end
  end
  flush_events()
end

--- frame(tick, prev_work_ms): ends tick-1, starts tick, renders.
-- The host's resident memory (VmRSS), in KiB.
local function rss_kb()
  local f = io.open("/proc/self/status")
  local s = f and f:read("a") or ""
  if f then f:close() end
  return tonumber(s:match("VmRSS:%s*(%d+)")) or 0
end

-- When the host's memory is first read: every bot long past its start.
local RSS_AT = math.min(1000, math.max(1, sys.ticks // 10))

function H.frame(tick, work_ms)
  if tick == RSS_AT then T.rss_first = rss_kb() end
  if tick == 1 then
    if sys.plain then out(title()) out("") out(grid()) out("") out(header()) end
    flush_events()
  else
    end_tick(work_ms)
  end
  T.tick = tick
  for _, bot in ipairs(bots) do
    bot.effects = 0
    if bot.alive and bot.pending then
      local seq = bot.pending
      bot.pending = nil
      bot.replies = bot.replies + 1
      bot.run:reply(seq, { tick = tick, x = bot.x, y = bot.y, gems = bot.gems, bumped = bot.bumped or false })
    end
  end
  redraw()
end

--- finish(tick, work_ms): ends the last tick; bots waiting in world.tick get false.
function H.finish(tick, work_ms)
  if tick >= 1 then end_tick(work_ms) end
  T.over = true
  for _, bot in ipairs(bots) do
    bot.effects = 0
    if bot.alive and bot.pending then
      local seq = bot.pending
      bot.pending = nil
      bot.run:reply(seq, false)
    end
  end
  if sys.plain then out("") out(grid()) else redraw() end
end

--- close(stats) -> exit status: bots that did not return are cancelled; the summary.
function H.close(stats)
  for _, bot in ipairs(bots) do
    if bot.alive then bot.run:cancel() end
  end
  for _ = 1, 100 do   -- a cancelled run ends at once; this waits for its result
    local _, all_done = H.pump(20)
    if all_done then break end
  end
  flush_events()
  B:close()
  print("")
  if sys.bots > 0 then   -- generated bots: one line per way they ended
    local by, order = {}, {}
    for _, b in ipairs(bots) do
      local r = b.result or { cause = "?", usage = {} }
      local c = by[r.cause]
      if not c then
        c = { bots = 0, turns = 0, skips = 0, effects = 0, cpu_ms = 0 }
        by[r.cause] = c
        order[#order + 1] = r.cause
      end
      c.bots, c.turns, c.skips = c.bots + 1, c.turns + b.turns, c.skips + b.skips
      c.effects = c.effects + (r.usage and r.usage.effects or 0)   -- notes included
      c.cpu_ms = c.cpu_ms + (r.usage and (r.usage.user_ms or 0) + (r.usage.sys_ms or 0) or 0)
      if not r.ok and not c.message then c.message = short(r.message) end
    end
    table.sort(order)
    print(string.format("%-13s %5s %7s %7s %8s %9s  %s", "cause", "bots", "turns", "skipped", "effects",
      "cpu/turn", "message"))
    for _, cause in ipairs(order) do
      local c = by[cause]
      print((string.format("%-13s %5d %7d %7d %8d %6.2f ms  %s", cause, c.bots, c.turns, c.skips, c.effects,
        c.turns > 0 and c.cpu_ms / c.turns or 0, c.message or ""):gsub("%s+$", "")))
    end
  else
    print(string.format("%-7s %-13s %5s %7s %5s %7s  %s", "bot", "cause", "turns", "skipped", "gems", "effects", "message"))
    for _, b in ipairs(bots) do
      local r = b.result or { cause = "?", message = "", usage = {} }
      print((string.format("%-7s %-13s %5d %7d %5d %7d  %s", b.name, r.cause, b.turns, b.skips, b.gems,
        r.usage and r.usage.effects or 0, r.ok and "" or short(r.message)):gsub("%s+$", "")))
    end
  end
  print("")
  local secs = stats.elapsed_ms / 1000
  print(string.format("%d ticks in %.2f s: %.1f fps (target %d)%s; host work per tick: avg %.2f ms, max %.2f ms; late frames: %d",
    stats.ticks, secs, secs > 0 and stats.ticks / secs or 0, sys.fps,
    stats.interrupted and " (interrupted)" or "", stats.work_avg_ms, stats.work_max_ms, stats.late))
  print(string.format("host ms per tick: median %.2f, p99 %.2f, max %.2f (target <= %.2f: a tick is %.2f ms)",
    stats.work_med_ms, stats.work_p99_ms, stats.work_max_ms, 8.0, 1000 / sys.fps))
  if T.rss_first then
    local last = rss_kb()
    print(string.format("host RSS: %d KiB at tick %d, %d KiB at the end (%+d KiB)", T.rss_first, RSS_AT, last,
      last - T.rss_first))
  end
  if sys.ledgers then
    print(string.format("ledgers: %s (one per bot; replay one: %s --replay %s --ledgers %s)",
      sys.ledgers, sys.program, bots[1] and bots[1].name or "BOT", sys.ledgers))
  end
  return 0
end

-- ------------------------------------------------------------ replay

local function show(v)
  if type(v) ~= "table" then return tostring(v) end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = tostring(k) .. "=" .. show(v[k]) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

--- replay(bot) -> 0 when the bot's recorded session replays identically, 1 when not, 2 on error.
function H.replay(name)
  local dir = sys.ledgers .. "/" .. name
  local init
  local ok, err = pcall(function()
    for rec in airlock.ledger.records(dir) do
      if rec.kind == "init" then init = rec break end
    end
  end)
  if not ok or not init or type(init.input) ~= "table" then
    io.stderr:write(string.format("plugin-host: %s: %s\n", dir, ok and "no recorded game here" or first_line(err)))
    return 2
  end
  local rep, rerr = airlock.replay(dir, { policy = policy_for(init.input) })
  if not rep then
    io.stderr:write("plugin-host: replay: ", tostring(rerr), "\n")
    return 2
  end
  local rec, res = rep.recorded or {}, rep.result
  local function ending(cause, value, message)
    if cause == nil then return "no end recorded" end
    if cause == "ok" then return "ok, returned " .. show(value) end
    return cause .. " -- " .. short(message)
  end
  print(string.format("replay of %s (%s)", name, dir))
  print(string.format("  recorded: %s after %d calls", ending(rec.cause, rec.value, rec.message), rep.calls))
  print(string.format("  replayed: %s; %d calls answered from the journal, %d performed live",
    ending(res.cause, res.value, res.message), rep.served, rep.live_effects))
  if rep.note then print("  note: " .. rep.note) end
  if rep.identical then
    print("  matches: the same calls with the same arguments, and the same end")
    return 0
  end
  if rec.cause == "cancelled" or rec.cause == "deadline" then
    print("  does not match: the host stopped this bot (" .. rec.cause .. "); a replay re-runs only the guest")
  else
    print("  does not match")
  end
  return 1
end

return H
