-- flood (hostile): plays four turns, then shouts as fast as the host answers.
local me = host.world.tick()
for _ = 1, 4 do
  host.world.move { dir = "n" }
  me = host.world.tick()
end
local n = 0
while true do
  n = n + 1
  host.world.say { text = "spam " .. n }
end
