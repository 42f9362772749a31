-- airlock.cli.demo -- a 30-second tour: one broker, several guests, each ending
-- with its own cause, under the default (untrusted) policy.
local airlock = require "airlock"

local M = {}

local GUESTS = {
  { "hello", [[print("hello from a guest") return 6 * 7]] },
  { "effect", [[return host.greet({ who = "world" })]] },
  { "error", [[local t = nil; return t.field]] },
  { "spin", [[while true do end]] },
  { "hog", [[local t = {} while true do t[#t + 1] = ("x"):rep(1024) end]] },
  { "denied", [[return host.call("fs.read", { path = "/etc/passwd" })]] },
}

function M.main()
  local pol = airlock.policy.extend(airlock.policy.load("untrusted"), {
    limits = { deadline_ms = "2s", memory = "16M", instructions = 5e7 },
    effects = { greet = function(args) return "hello, " .. tostring(args.who) end },
  })
  local b <close> = airlock.broker()
  local names = {}
  for _, g in ipairs(GUESTS) do
    local run, err = b:start { guest = g[2], name = g[1], policy = pol }
    if not run then io.stderr:write("demo: ", err, "\n") return 1 end
    names[run:id()] = g[1]
  end
  print(string.format("%-8s %-13s %8s  %s", "guest", "cause", "wall ms", "value or message"))
  local left = #GUESTS
  while left > 0 do
    local done = assert(b:step(-1))
    for _, res in ipairs(done) do
      left = left - 1
      local what = res.ok and tostring(res.value) or res.message:gsub("\n.*", "")
      print(string.format("%-8s %-13s %8.2f  %s", names[res.run], res.cause, res.usage.wall_ms, what))
    end
  end
  return 0
end

return M
