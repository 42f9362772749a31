-- chaos.lua -- kill a worker in the middle of an effect: the run must end with
-- cause crash, the handler's late answer must be dropped, and the host must be
-- left as it was: no file descriptor and no child process more than before.
--   lua5.4 examples/scenarios/chaos.lua        (AIRLOCK_BUILD=build/san for another build)
local build = os.getenv("AIRLOCK_BUILD") or "build"
package.cpath = build .. "/lib/?.so;" .. package.cpath
local airlock = require "airlock"

local function fail(msg) io.stderr:write("chaos: FAIL: ", msg, "\n") os.exit(1) end
local function check(cond, msg) if not cond then fail(msg) end end

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
local pid = tonumber(slurp("/proc/self/stat"):match("^(%d+)"))

local function fds()                  -- this process's open descriptors
  local p = io.popen("ls /proc/" .. pid .. "/fd")
  local n = 0
  for _ in p:lines() do n = n + 1 end
  p:close()
  return n - 1                         -- the pipe popen itself opened
end

local function children()              -- from /proc, not through a shell (itself a child)
  local s = slurp("/proc/" .. pid .. "/task/" .. pid .. "/children") or ""
  local n = 0
  for _ in s:gmatch("%d+") do n = n + 1 end
  return n
end

local function alive(p)
  local st = slurp("/proc/" .. p .. "/stat")
  return st ~= nil and not st:match("^%d+ %b() [ZX]")
end

-- One run first, so that what a first run sets up for good (the shared net
-- namespace, cached policies) is not counted as a leak.
assert(airlock.run { guest = "return 1" })
local fds0, kids0 = fds(), children()

local ROUNDS = 20
local worker_pids = {}
for round = 1, ROUNDS do
  local handled = false
  local b <close> = airlock.broker()
  local run = assert(b:start {
    guest = [[
      local got = host.call("slow.read", { n = 1 })
      return "should never get here: " .. tostring(got)
    ]],
    policy = { effects = {
      ["slow.read"] = function(_, ctx)
        handled = true
        worker_pids[#worker_pids + 1] = ctx.handle:pid()
        os.execute("kill -KILL " .. ctx.handle:pid())   -- the chaos: the worker dies mid-effect
        return "a late answer"
      end,
    } },
  })
  local res = run:wait(b)
  check(handled, "round " .. round .. ": the effect handler never ran")
  check(res.cause == "crash", string.format("round %d: cause %s (%s), expected crash", round,
    tostring(res.cause), tostring(res.message)))
  check(res.value == nil, "round " .. round .. ": the late answer leaked into the result")
  check(tostring(res.message):match("SIGKILL"), "round " .. round .. ": message does not name SIGKILL: "
    .. tostring(res.message))
end
collectgarbage()

check(fds() == fds0, string.format("file descriptors leaked: %d before, %d after %d crashes", fds0, fds(), ROUNDS))
check(children() == kids0, string.format("child processes left: %d before, %d after", kids0, children()))
for _, p in ipairs(worker_pids) do check(not alive(p), "worker " .. p .. " is still alive") end

-- The broker is still good for work after all that.
local res = airlock.run { guest = "return 6 * 7" }
check(res and res.cause == "ok" and res.value == 42, "a run after the chaos did not end ok with 42")

print(string.format("chaos: ok: %d workers killed mid-effect, each cause crash (SIGKILL); %d fds and %d children, as before",
  ROUNDS, fds0, kids0))
