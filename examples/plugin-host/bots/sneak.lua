-- sneak (hostile): plays a turn, then looks for a way out of its worker, one
-- try a tick: the io library, a module, then an effect the policy never granted.
local function why(err) return (tostring(err):gsub("^[^:]*:%d+: ", "")) end
local me = host.world.tick()
host.world.move { dir = "s" }
me = host.world.tick()
local _, err = pcall(function() return io.open("/etc/passwd") end)
host.world.say { text = "io.open: " .. why(err) }
me = host.world.tick()
_, err = pcall(require, "socket")
host.world.say { text = "require: " .. why(err) }
me = host.world.tick()
return host.call("fs.read", { path = "/etc/passwd" })   -- not granted: stopped, cause denied
