-- hog (hostile): plays two turns, then tries to hold the whole world in memory.
local me = host.world.tick()
for _ = 1, 2 do
  host.world.move { dir = "w" }
  me = host.world.tick()
end
host.world.say { text = "mine, all of it" }
local hoard = {}
while true do hoard[#hoard + 1] = string.rep("gem", 1000) .. #hoard end
