-- loop (hostile): plays three turns, then never ends its fourth: it skips
-- ticks until its instruction budget runs out and the worker stops it.
local me = host.world.tick()
for _ = 1, 3 do
  host.world.move { dir = "e" }
  me = host.world.tick()
end
host.world.say { text = "let me think about this..." }
-- Thinking costs time as well as instructions (each rep is a little C work),
-- so the budget of 2M instructions lasts a few hundred ms: longer than a
-- tick on any machine, and the skips show.
while true do local _ = ("x"):rep(10) end
