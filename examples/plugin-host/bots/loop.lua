-- loop (hostile): plays three turns, then never ends its fourth: it skips
-- ticks until its instruction budget runs out and the worker stops it.
local me = host.world.tick()
for _ = 1, 3 do
  host.world.move { dir = "e" }
  me = host.world.tick()
end
host.world.say { text = "let me think about this..." }
while true do end
