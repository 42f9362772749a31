-- replay.lua -- record a run in a ledger, replay it unchanged (identical, no
-- live effect), then mutate the guest's source and replay that: it must end
-- with cause diverged, naming the seq where the new code asked for something
-- the journal does not hold.
--   lua5.4 examples/scenarios/replay.lua        (AIRLOCK_BUILD=build/san for another build)
local build = os.getenv("AIRLOCK_BUILD") or "build"
package.cpath = build .. "/lib/?.so;" .. package.cpath
local airlock = require "airlock"

local dir = os.tmpname()
os.remove(dir)            -- the ledger makes the session directory itself
local function cleanup() os.execute("rm -rf '" .. dir .. "'") end

local function fail(msg) cleanup() io.stderr:write("replay: FAIL: ", msg, "\n") os.exit(1) end
local function check(cond, msg) if not cond then fail(msg) end end

-- A guest with a few effects: the built-in log (print) and a granted kv store.
local store = {}
local policy = airlock.policy.extend("untrusted", {
  name = "replay-scenario",
  effects = {
    ["kv.get"] = function(args) return store[args.key] end,
    ["kv.put"] = function(args) store[args.key] = args.value return true end,
  },
})

local original = [[
print("counting")
local n = host.call("kv.get", { key = "visits" }) or 0
host.call("kv.put", { key = "visits", value = n + 1 })
print("visit " .. (n + 1))
return { visits = n + 1 }
]]

-- The same guest with one argument changed: a bug a refactor might bring in.
local mutated = original:gsub('key = "visits", value = n %+ 1', 'key = "visits", value = n + 2')
check(mutated ~= original, "the mutation did not change the source")

-- 1. Record.
local res = airlock.run { guest = original, name = "counter.lua", policy = policy, ledger = dir }
check(res and res.cause == "ok", "the recorded run did not end ok: " .. tostring(res and res.message))
check(res.value.visits == 1, "the recorded run returned " .. tostring(res.value.visits))
local rep = airlock.ledger.verify(dir)
check(rep and rep.ok, "the ledger does not verify")

-- 2. Replay unchanged: identical, answered from the journal alone.
local same = assert(airlock.replay(dir, { policy = policy }))
check(same.identical, "the unchanged replay is not identical: " .. tostring(same.result.cause) .. " "
  .. tostring(same.result.message))
check(same.live_effects == 0, "the unchanged replay performed " .. same.live_effects .. " live effects")

-- 3. Replay the mutated guest: diverged, at the seq of the changed call.
local calls, put_seq = {}, nil
for rec in airlock.ledger.records(dir) do
  if rec.kind == "call" then
    calls[#calls + 1] = rec
    if rec.effect == "kv.put" then put_seq = put_seq or rec.seq end
  end
end
check(put_seq, "the journal holds no kv.put call")

local diff = assert(airlock.replay(dir, { policy = policy, guest = mutated }))
cleanup()
check(not diff.identical, "the mutated guest replayed as identical")
check(diff.result.cause == "diverged", "cause " .. tostring(diff.result.cause) .. ", expected diverged: "
  .. tostring(diff.result.message))
local msg = tostring(diff.result.message)
local seq = tonumber(msg:match("seq (%d+)"))
check(seq, "the divergence does not name a seq: " .. msg)
check(seq == put_seq, string.format("diverged at seq %d, but the changed call is seq %d: %s", seq, put_seq, msg))
check(msg:find("kv.put", 1, true), "the divergence does not name the effect: " .. msg)
check(diff.live_effects == 0, "the diverging replay performed live effects")

print("replay: ok: recorded " .. #calls .. " calls; unchanged replay identical; mutated guest: " .. msg)
