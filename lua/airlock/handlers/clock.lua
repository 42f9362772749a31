-- airlock.handlers.clock -- clock.now, from the host's clock or a virtual one.
local common = require "airlock.handlers.common"

local options, per_run = common.options, common.per_run

local M = {}

local CLOCK_OPTS = { mode = true, start = true, step = true }

--- clock{mode = "real" | "virtual", start = 0, step = 1} -> a handler for clock.now,
--- answering {time = seconds since the epoch, clock = seconds}. virtual: each run
--- starts at start and every call advances the clock by step seconds.
function M.clock(opts)
  opts = options(opts, CLOCK_OPTS, "clock")
  local mode = opts.mode or "real"
  if mode == "real" then
    if opts.start ~= nil or opts.step ~= nil then error("clock: 'start' and 'step' are for mode 'virtual'", 2) end
    return function() return { time = os.time(), clock = os.clock() } end
  end
  if mode ~= "virtual" then error("clock: mode must be 'real' or 'virtual'", 2) end
  local start, step = opts.start or 0, opts.step or 1
  if type(start) ~= "number" or start ~= start or math.abs(start) > 2 ^ 53 then error("clock: 'start' must be a number", 2) end
  if type(step) ~= "number" or step < 0 or step > 2 ^ 32 then error("clock: 'step' must be a number >= 0", 2) end
  local state = per_run(function() return { n = 0 } end)
  return function(_, ctx)
    local s = state(ctx)
    local elapsed = s.n * step
    s.n = s.n + 1
    return { time = start + elapsed, clock = elapsed }
  end
end

return M
