-- rook: patrols the room: straight on, turning right at walls and bots;
-- reports every ten ticks.
local right = { n = "e", e = "s", s = "w", w = "n" }
local heading = "n"
local me = host.world.tick()
while me do
  if me.tick % 10 == 0 then
    host.world.say { text = string.format("tick %d, at %d,%d, all quiet", me.tick, me.x, me.y) }
  end
  local free = host.world.look { radius = 1 }.free
  for _ = 1, 4 do
    if free[heading] then break end
    heading = right[heading]
  end
  if free[heading] then host.world.move { dir = heading } end
  me = host.world.tick()
end
return "patrol over"
