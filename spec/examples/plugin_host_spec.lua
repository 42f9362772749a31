-- plugin_host_spec.lua -- examples/plugin-host as a person runs it: a short
-- game of seven bot mods (ant, magpie, rook play; flood, hog, loop, sneak
-- misbehave), the tick log, the summary, and a replay from a bot's ledger.
local H = require "helper"

local HOST = H.bin .. "/plugin-host"
local GOOD = { "ant", "magpie", "rook" }
-- (timeout: a guard against a hang, never a measure)
local GAME = "timeout " .. H.GUARD_S .. " " .. HOST .. " --ticks %d --fps %d --ledgers %s"

-- Runs a shell command; returns its output (stdout and stderr) and exit status.
local sh = H.sh

local tmpdir = H.tmpdir

-- The tick log: { names = {bot, ...}, rows = { {tick = n, [bot] = action}, ... } }
local function tick_log(out)
  local log = { rows = {} }
  for line in out:gmatch("[^\n]+") do
    if line:match("^tick  ") then
      log.names = {}
      for w in line:gmatch("%S+") do log.names[#log.names + 1] = w end
      table.remove(log.names, 1)                      -- "tick"
      table.remove(log.names) table.remove(log.names)  -- "host", "ms"
    elseif log.names and line:match("^%s*%d+  ") then
      local cells = {}
      for w in line:gmatch("%S+") do cells[#cells + 1] = w end
      if #cells == #log.names + 2 then
        local row = { tick = tonumber(cells[1]) }
        for i, name in ipairs(log.names) do row[name] = cells[i + 1] end
        log.rows[#log.rows + 1] = row
      end
    end
  end
  return log
end

describe("plugin-host", function()
  local dir, out, rc

  setup(function()
    dir = tmpdir()
    out, rc = sh(GAME:format(20, 50, dir))
  end)

  teardown(function()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("plays 20 ticks at 50 fps and ends 0", function()
    assert.equal(0, rc, out)
    assert.matches("20 ticks in [%d.]+ s", out)
  end)

  it("prints one row per tick with a column per bot", function()
    local log = tick_log(out)
    assert.same({ "ant", "flood", "hog", "loop", "magpie", "rook", "sneak" }, log.names)
    assert.equal(20, #log.rows)
    for i, row in ipairs(log.rows) do assert.equal(i, row.tick) end
  end)

  it("stops each hostile bot with its cause in the tick log", function()
    -- loop hogs one tick: stopped by the per-turn budget, long before the whole game's
    assert.matches("\n%s+loop stopped: cpu %-%- turn CPU budget of 100 ms used up %(limits%.turn_cpu", out)
    assert.matches("\n%s+hog stopped: memory %-%- not enough memory", out)
    assert.matches("\n%s+sneak stopped: denied %-%- denied: effect 'fs.read' is not granted", out)
    assert.matches("\n%s+flood stopped: cancelled %-%- flood: 13 effects in tick %d+", out)
    assert.matches('sneak says "io.open: attempt to index a nil value %(global \'io\'%)"', out)
    -- the summary agrees
    for bot, cause in pairs { loop = "cpu", hog = "memory", sneak = "denied", flood = "cancelled" } do
      assert.matches("\n" .. bot .. "%s+" .. cause .. "%s", out)
    end
  end)

  it("lets the bot that loops skip ticks before it is stopped", function()
    local skipped = false
    for _, row in ipairs(tick_log(out).rows) do skipped = skipped or row.loop == "skip" end
    assert.is_true(skipped, out)
  end)

  -- The first tick in which a good bot did not take a step (n/e/s/w), a step
  -- onto a gem (*) or into something (!), as a message; nil when there is none.
  local function idle_good_bot(game)
    for _, row in ipairs(tick_log(game).rows) do
      for _, bot in ipairs(GOOD) do
        if not (row[bot] or ""):match("^[nesw][!*]?$") then
          return string.format("%s in tick %d: %s", bot, row.tick, tostring(row[bot]))
        end
      end
    end
  end

  it("keeps the good bots moving every tick, and they end ok", function()
    -- Hostile bots in the same game never make a good bot skip. A skip is
    -- also the budget doing its job on a machine too busy for a turn within
    -- 1000/fps ms, which is not what is asked here: this game gives a turn
    -- 500 ms (2 fps), hundreds of times what a good bot's turn takes.
    local d = tmpdir()
    local game, grc = sh(GAME:format(6, 2, d))
    os.execute("rm -rf '" .. d .. "'")
    assert.equal(0, grc, game)
    local why = idle_good_bot(game)
    assert.is_nil(why, tostring(why) .. "\n" .. game)
    assert.equal(6, #tick_log(game).rows)
    for _, bot in ipairs(GOOD) do
      assert.matches("\n" .. bot .. "%s+ok%s+6%s+0%s", game)   -- 6 turns, none skipped
    end
  end)

  it("records one ledger per bot and replays a good bot's identically", function()
    for _, bot in ipairs { "ant", "flood", "hog", "loop", "magpie", "rook", "sneak" } do
      local f = io.open(dir .. "/" .. bot .. "/journal", "rb")
      assert.is_truthy(f, bot)
      f:close()
    end
    local rout, rrc = sh(HOST .. " --replay magpie --ledgers " .. dir)
    assert.equal(0, rrc, rout)
    assert.matches("recorded: ok, returned {gems=%d+} after %d+ calls", rout)
    assert.matches("%d+ calls answered from the journal, 0 performed live", rout)
    assert.matches("matches: the same calls", rout)
    assert.is_nil(rout:find("note:", 1, true), rout)   -- the same policy digest as recorded
    rout, rrc = sh(HOST .. " --replay loop --ledgers " .. dir)
    assert.equal(0, rrc, rout)
    assert.matches("replayed: cpu", rout)
  end)

  it("says a bot the host stopped does not replay the same, exit 1", function()
    local rout, rrc = sh(HOST .. " --replay flood --ledgers " .. dir)
    assert.equal(1, rrc, rout)
    assert.matches("does not match: the host stopped this bot %(cancelled%)", rout)
  end)

  it("refuses to record over a recorded game, and bad usage, exit 2", function()
    local again, arc = sh(HOST .. " --ticks 1 --ledgers " .. dir)
    assert.equal(2, arc, again)
    assert.matches("already holds a recorded game", again)
    local bad, brc = sh(HOST .. " --fps 0")
    assert.equal(2, brc)
    assert.matches("%-%-fps needs a whole number from 1 to 1000", bad)
    local none, nrc = sh(HOST .. " --replay nobody --ledgers " .. dir)
    assert.equal(2, nrc)
    assert.matches("nobody", none)
  end)
end)

describe("plugin-host --bots N", function()
  local dir, out, rc

  setup(function()
    dir = tmpdir()
    -- 2 fps: a tick of 500 ms holds every bot's six effects on a busy machine too
    out, rc = sh("timeout " .. H.GUARD_S .. " " .. HOST .. " --bots 20 --ticks 5 --fps 2 --ledgers " .. dir)
  end)

  teardown(function()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("plays N generated bots, one row of counts per tick (not one column per bot)", function()
    assert.equal(0, rc, out)
    assert.matches("plugin%-host: 20 bots %(generated%), 5 ticks at 2 fps", out)
    assert.matches("\ntick  played  skipped  stopped  effects  host ms\n", out)
    local rows = {}
    for t, played, skipped, stopped, effects, ms in
        out:gmatch("\n%s*(%d+)%s+(%d+)%s+(%d+)%s+(%d+)%s+(%d+)%s+([%d.]+)") do
      rows[#rows + 1] = { tick = tonumber(t), n = tonumber(played) + tonumber(skipped) + tonumber(stopped),
                          effects = tonumber(effects), ms = tonumber(ms) }
    end
    assert.equal(5, #rows, out)
    local full = false
    for i, row in ipairs(rows) do
      full = full or row.effects == 20 * 6
      assert.equal(i, row.tick)
      if i > 1 then assert.equal(20, row.n, out) end   -- every bot counted once a tick
      -- six effects a bot that played (tick, look; move, two says, a print as notes)
      assert.is_true(row.effects <= 20 * 6, out)
    end
    assert.is_true(full, "a tick in which every bot made its six effects\n" .. out)
  end)

  it("ends with a summary by cause and the host's ms per tick: median, p99, late frames", function()
    assert.matches("\ncause%s+bots%s+turns%s+skipped%s+effects%s+cpu/turn%s+message\n", out)
    assert.matches("\nok%s+20%s+%d+%s+%d+%s+%d+%s+[%d.]+ ms\n", out)
    assert.matches("5 ticks in [%d.]+ s: [%d.]+ fps %(target 2%); host work per tick: avg [%d.]+ ms, " ..
      "max [%d.]+ ms; late frames: %d+", out)
    assert.matches("host ms per tick: median [%d.]+, p99 [%d.]+, max [%d.]+", out)
    local f = io.open(dir .. "/g001/journal", "rb")
    assert.is_truthy(f, "one ledger per generated bot")
    f:close()
  end)

  it("refuses a bad count, exit 2", function()
    local bad, brc = sh(HOST .. " --bots 0")
    assert.equal(2, brc)
    assert.matches("%-%-bots needs a whole number from 1 to 1000", bad)
  end)
end)
