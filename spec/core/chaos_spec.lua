-- chaos_spec.lua -- faults injected at every stage of a run: each must end with
-- a precise cause and no collateral damage (no orphan, no fd, no growth).
local airlock = require "airlock"
local H = require "helper"

local function kill(pid, sig) os.execute(string.format("kill -%s %d 2>/dev/null", sig, pid)) end

local function alive(pid)
  local st = H.slurp("/proc/" .. pid .. "/stat")
  return st ~= nil and not st:match("^%d+ %b() [ZX]")
end

local function gone_within(pid, seconds)
  local t0 = os.time()
  while alive(pid) and os.time() - t0 <= seconds do end
  return not alive(pid)
end

-- Starts a run whose handler for "hold" is given; returns broker, run.
local function start(guest, handlers, limits)
  local b = airlock.broker()
  local run = assert(b:start { guest = guest, policy = { effects = handlers or {}, limits = limits } })
  return b, run
end

local function finish(b, run, keep)
  while run:live() do assert(b:step(100)) end
  local res = run:result()
  if not keep then b:close() end
  return res
end

describe("a worker killed", function()
  it("before it is ready ends as a crash by SIGKILL", function()
    -- A stand-in that never says ready, so the kill surely comes first.
    local b = airlock.broker()
    local run = assert(b:start { guest = "return 1", policy = airlock.policy {
      name = "stand-in", worker = { H.hostile, "silent" }, limits = { deadline_ms = "5s" } } })
    kill(run:pid(), "KILL")
    local res = finish(b, run)
    assert.equal("crash", res.cause)
    assert.matches("SIGKILL", res.message)
  end)

  it("during an effect ends as a crash, and the handler's answer is dropped", function()
    local b, run
    b, run = start([[return host.call("hold", {})]], {
      hold = function(_, ctx) kill(ctx.handle:pid(), "KILL") return "late" end })
    local res = finish(b, run)
    assert.equal("crash", res.cause)
    assert.is_nil(res.value)
  end)

  it("during a deferred effect ends as a crash; answering later says the run has ended", function()
    local seq
    local b, run = start([[return host.call("hold", {})]], {
      hold = function(_, ctx) seq = ctx.seq return airlock.defer() end })
    while not seq do assert(b:step(50)) end
    kill(run:pid(), "KILL")
    local res = finish(b, run, true)
    assert.equal("crash", res.cause)
    local ok, err = run:reply(seq, 1)
    b:close()
    assert.is_nil(ok)
    assert.matches("the run has ended", err)
  end)

  it("after done changes nothing", function()
    local b, run = start("return 7")
    local res = finish(b, run, true)
    local pid = run:pid()
    if pid then kill(pid, "KILL") end
    b:close()
    assert.equal("ok", res.cause)
    assert.equal(7, res.value)
  end)

  it("stopped with SIGSTOP still ends at its deadline", function()
    local b, run = start([[local x = 0 while true do x = x + 1 end]], nil, { deadline_ms = 300, instructions = 0 })
    kill(run:pid(), "STOP")
    local t0 = require("airlock.core").now_ms()
    local res = finish(b, run)
    assert.equal("deadline", res.cause)
    assert.is_true(require("airlock.core").now_ms() - t0 < 3000)
  end)
end)

describe("a host process killed with SIGKILL", function()
  it("takes every worker with it: no orphan survives", function()
    local script = os.tmpname() .. ".lua"
    local f = assert(io.open(script, "w"))
    f:write(string.format([=[
      package.cpath = %q .. "/lib/?.so;" .. package.cpath
      local airlock = require "airlock"
      local b = airlock.broker()
      local runs, parked = {}, 0
      for i = 1, 3 do
        runs[i] = assert(b:start { guest = [[return host.call("park", {})]],
          policy = { effects = { park = function() parked = parked + 1 return airlock.defer() end } } })
      end
      while parked < 3 do b:step(50) end
      for i = 1, 3 do io.write(runs[i]:pid(), "\n") end
      io.write("ready\n") io.flush()
      while true do b:step(1000) end
    ]=], H.build))
    f:close()
    local p = io.popen("lua5.4 " .. script .. " & echo host $!")
    local host = tonumber(p:read("l"):match("host (%d+)"))
    local pids = {}
    for line in p:lines() do
      if line == "ready" then break end
      pids[#pids + 1] = tonumber(line)
    end
    assert.equal(3, #pids)
    for _, pid in ipairs(pids) do assert.is_true(alive(pid)) end
    kill(host, "KILL")
    p:close()
    os.remove(script)
    for _, pid in ipairs(pids) do
      assert.is_true(gone_within(pid, 2), "worker " .. pid .. " outlived its host")
    end
  end)
end)

describe("a handler that blocks longer than the deadline", function()
  it("holds the broker (handlers run in the host's thread); the deadline ends the run when it returns", function()
    local res = airlock.run { guest = [[host.call("slow", {}) while true do end]],
      policy = { limits = { deadline_ms = 100, instructions = 0 }, effects = {
        slow = function()
          local t0 = os.clock()
          while os.clock() - t0 < 0.3 do end
          return true
        end } } }
    assert.equal("deadline", res.cause)
    assert.is_true(res.usage.wall_ms >= 300)
  end)
end)

describe("5,000 runs through one broker", function()
  it("leave fds, children and threads as they were, and RSS within 2 MB", function()
    local b <close> = airlock.broker()
    local function batch(n)
      for _ = 1, n do
        local run = assert(b:start { guest = [[return host.call("echo", { x = 1 }).x]],
          policy = { effects = { echo = function(a) return a end } } })
        local res = run:wait(b)
        assert(res.ok, res.message)
      end
    end
    batch(200)   -- warm up: allocator pools, the shared net namespace, the compiled filter
    collectgarbage() collectgarbage()
    local fds, rss = H.fd_count(), H.rss_kb()
    local threads = H.slurp("/proc/self/status"):match("Threads:%s*(%d+)")
    batch(H.sanitized and 1000 or 5000)
    collectgarbage() collectgarbage()
    assert.equal(fds, H.fd_count())
    assert.equal(0, #H.children())
    assert.equal(threads, H.slurp("/proc/self/status"):match("Threads:%s*(%d+)"))
    if H.sanitized then
      print("  (sanitizer build: 1,000 runs, RSS not compared: ASan's quarantine holds freed memory)")
    else
      assert.is_true(H.rss_kb() - rss < 2048, "RSS grew by " .. (H.rss_kb() - rss) .. " KiB")
    end
  end)
end)
