-- reload_spec.lua -- broker:reload(policy): runs started afterwards (without a
-- policy of their own) use the new snapshot; runs already started keep theirs;
-- a policy that fails validation keeps the old one.
local airlock = require "airlock"
local policy = airlock.policy
local H = require "helper"

-- Waits at host.wait() (answered by the spec), then spins: an instruction
-- budget of 2e6 cannot finish it, one of 1e9 can.
local GUEST = [[
  host.wait()
  local x = 0
  for i = 1, 3000000 do x = x + i end
  return x
]]

local function pol(name, instructions, pending)
  return {
    name = name,
    limits = { instructions = instructions, deadline_ms = H.GUARD_S * 1000 },   -- a hang guard
    effects = { wait = function(_, ctx) pending[#pending + 1] = ctx return airlock.defer() end },
  }
end

-- Steps b until cond(results) holds; past H.GUARD_S of wall time it is a
-- hang (b:step may return early without a result, so steps are not counted).
local function step_until(b, cond, results)
  results = results or {}
  local t0 = os.time()
  while os.time() - t0 < H.GUARD_S do
    if cond(results) then return results end
    for _, r in ipairs(assert(b:step(50))) do results[r.run] = r end
  end
  local ended = {}
  for id, r in pairs(results) do ended[#ended + 1] = string.format("run %d: %s %s", id, r.cause, r.message) end
  error("timed out; ended: " .. table.concat(ended, "; "), 2)
end

describe("broker:reload", function()
  it("returns the new snapshot's digest; later runs use it, running ones keep theirs", function()
    local pending = {}
    local b <close> = airlock.broker()
    local strict = policy.layer("untrusted", pol("strict", 2e6, pending))
    local d1 = assert(b:reload(strict))
    assert.equal(policy.digest(strict), d1)
    assert.matches("^%x+$", d1)

    local ended = {}   -- results as they come, whichever wait they come in
    local before = assert(b:start { guest = GUEST })
    step_until(b, function() return #pending == 1 end, ended)

    local loose = pol("loose", 1e9, pending)
    local d2 = assert(b:reload(loose))
    assert.are_not.equal(d1, d2)
    assert.equal(policy.digest(policy.layer("untrusted", loose)), d2)
    local after = assert(b:start { guest = GUEST })
    step_until(b, function() return #pending == 2 end, ended)

    -- both are waiting now; answer them and let them spin
    before:reply(pending[1].seq, true)
    after:reply(pending[2].seq, true)
    local res = step_until(b, function(r) return r[before:id()] and r[after:id()] end, ended)
    local r1, r2 = res[before:id()], res[after:id()]
    assert.equal("instructions", r1.cause, r1.message)
    assert.equal("strict", r1.policy)
    assert.equal(d1, r1.digest)
    assert.equal("ok", r2.cause, r2.message)
    assert.equal(4500001500000, r2.value)
    assert.equal("loose", r2.policy)
    assert.equal(d2, r2.digest)
    -- ctx.policy says which snapshot a handler served
    assert.equal("strict", pending[1].policy)
    assert.equal("loose", pending[2].policy)
  end)

  it("a policy that fails validation keeps the old one, and says why", function()
    local b <close> = airlock.broker()
    local d = assert(b:reload { name = "good", limits = { memory = "16M" } })
    local ok, err = b:reload { name = "bad", limits = { memroy = "1G" } }
    assert.is_nil(ok)
    assert.equal("policy: unknown key 'limits.memroy' (did you mean 'memory'?)", err)
    ok, err = b:reload("nonesuch")
    assert.is_nil(ok)
    assert.matches("no stock policy or file named 'nonesuch'", err)
    ok, err = b:reload { secrets = { T = { env = "AIRLOCK_SPEC_NO_SUCH_VARIABLE" } } }
    assert.is_nil(ok)
    assert.matches("secrets: T: the environment variable AIRLOCK_SPEC_NO_SUCH_VARIABLE is not set", err)
    ok, err = b:reload(42)
    assert.is_nil(ok)
    assert.matches("'policy' must be", err)
    assert.has_error(function() b:reload() end, "reload: expects a policy (a table, a stock name or a file path)")
    -- still the good one
    local run = assert(b:start { guest = "return 1" })
    local res = run:wait(b)
    assert.equal("ok", res.cause)
    assert.equal("good", res.policy)
    assert.equal(d, res.digest)
  end)

  it("takes stock names and files; a run's own policy still wins", function()
    local b <close> = airlock.broker()
    assert.equal(policy.digest(policy.load("tool")), b:reload("tool"))
    local res = assert(b:start { guest = "return 1" }):wait(b)
    assert.equal("tool", res.policy)
    res = assert(b:start { guest = "return 2", policy = "untrusted" }):wait(b)
    assert.equal("untrusted", res.policy)
    assert.equal(policy.digest(policy.load("untrusted")), res.digest)
    local path = os.tmpname() .. ".lua"
    local f = io.open(path, "w")
    f:write("return require('airlock.policy').extend('untrusted', { name = 'from-file' })")
    f:close()
    assert.is_string(b:reload(path))
    res = assert(b:start { guest = "return 3" }):wait(b)
    assert.equal("from-file", res.policy)
    os.remove(path)
    -- another broker is not affected
    local other <close> = airlock.broker()
    res = assert(other:start { guest = "return 4" }):wait(other)
    assert.equal("untrusted", res.policy)
  end)

  it("records the reloaded policy's name and digest in the ledger", function()
    local dir = os.tmpname()
    os.remove(dir)
    local b <close> = airlock.broker()
    local d = b:reload("tool")
    assert(b:start { guest = "return 1", ledger = dir }):wait(b)
    local init
    for rec in airlock.ledger.records(dir) do if rec.kind == "init" then init = rec end end
    assert.same({ name = "tool", base = "untrusted", ref = "tool", digest = d }, init.policy)
    -- and a replay reloads it by that name, without a note
    local rep = assert(airlock.replay(dir))
    assert.is_true(rep.identical)
    assert.is_nil(rep.note)
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)
