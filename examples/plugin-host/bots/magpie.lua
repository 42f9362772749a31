-- magpie: heads for the nearest gem it can see and says so when it gets one;
-- with no gem in sight it walks straight on and turns right at obstacles.
local right = { n = "e", e = "s", s = "w", w = "n" }
local heading, got = "e", 0
local me = host.world.tick()
while me do
  if me.gems > got then
    got = me.gems
    host.world.say { text = "mine! (" .. got .. ")" }
  end
  local view = host.world.look { radius = 5 }
  local dir, g = nil, view.gems[1]
  if g then
    local h = g.dx > 0 and "e" or g.dx < 0 and "w" or nil
    local v = g.dy > 0 and "s" or g.dy < 0 and "n" or nil
    if math.abs(g.dy) > math.abs(g.dx) then h, v = v, h end
    if h and view.free[h] then dir = h elseif v and view.free[v] then dir = v end
  end
  for _ = 1, 4 do
    if dir then break end
    if view.free[heading] then dir = heading else heading = right[heading] end
  end
  if dir then host.world.move { dir = dir } end
  me = host.world.tick()
end
return { gems = got }
