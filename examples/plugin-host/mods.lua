-- mods.lua -- the policy every bot (mod) of plugin-host runs under: the stock
-- `untrusted` policy (every confinement layer required) with tighter limits
-- and the world's effects. The handlers below only pass each call on to the
-- world, which host.lua registers as the module "plugin-host.world" (looked up
-- at call time, so the policy holds no game state: its digest, recorded in
-- each bot's ledger, is the same when the game is replayed).
--
-- A bot is one guest that lives for the whole game, so most limits are for
-- its whole session; turn_cpu is for one tick: a turn ends when the host
-- answers world.tick (a deferred call), and a bot that computes past it
-- within one turn is stopped. Both CPU budgets are the worker's own CPU time,
-- checked without an instruction hook, so a bot's code runs at the
-- interpreter's full speed. The wall-clock budget of a tick is the host's: a
-- bot that has not ended its turn within a tick skips it (host.lua). Moves,
-- says and prints need no answer: they are notifications (notify), sent by the
-- guest without waiting.
local airlock = require "airlock"

-- Each handler finds host.lua's world once, at its first call (the policy
-- is loaded before the world exists).
local function to(name)
  local f
  return function(args, ctx)
    f = f or require("plugin-host.world")[name]
    return f(args, ctx)
  end
end

return airlock.policy.extend(airlock.policy.load("untrusted"), {
  name = "mods",
  description = "plugin-host bots: untrusted, smaller limits, the world effects",
  limits = {
    -- deadline_ms: untrusted's 5 s; the host raises it to the game's length,
    -- and cpu to 5 ms a tick of it (host.lua, policy_for).
    memory = "8M",           -- a bot's Lua heap
    instructions = 0,        -- no instruction count: the CPU budgets bound a bot
    turn_cpu = "100ms",      -- for one tick: ~1,000 times a simple bot's turn
    output = "4K",
    max_frame = "64K",       -- no effect call or answer is larger
    capture = "4K",
  },
  notify = { "world.move", "world.say", "log" },
  effects = {
    ["world.tick"] = to("tick"),   -- ends the turn; answered (deferred) at the next tick
    ["world.look"] = to("look"),   -- what is around: gems, bots, free directions
    ["world.move"] = to("move"),   -- one step n/e/s/w, applied when the tick ends
    ["world.say"] = to("say"),     -- a line in the tick log
    log = to("print"),             -- print: also in the tick log, and counted
    ["clock.now"] = to("clock"),   -- os.time/os.clock: counted like any effect
  },
})
