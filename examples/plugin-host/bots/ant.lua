-- bots/ant.lua: wanders at random and never walks into a wall.
local me = host.world.tick()                 -- wait for tick 1
while me do                                  -- false once the game is over
  local view = host.world.look { radius = 1 } -- {free = {n, e, s, w}, gems = {{dx, dy}...}, bots = ...}
  local open = {}
  for _, d in ipairs { "n", "e", "s", "w" } do
    if view.free[d] then open[#open + 1] = d end
  end
  if #open > 0 then host.world.move { dir = open[math.random(#open)] } end
  me = host.world.tick()                     -- end this turn
end
return "bye"
