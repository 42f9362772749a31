-- loop (hostile): plays three turns, then never ends its fourth: it skips
-- ticks until its turn's CPU budget (limits.turn_cpu) runs out and the worker
-- stops it.
local me = host.world.tick()
for _ = 1, 3 do
  host.world.move { dir = "e" }
  me = host.world.tick()
end
host.world.say { text = "let me think about this..." }
-- The turn's budget is 100 ms of CPU: longer than a tick (at most 50 ms of
-- wall clock at 20 fps), and CPU time never runs faster than the clock, so
-- the skips show.
while true do local _ = ("x"):rep(10) end
