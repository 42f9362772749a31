-- pool_spec.lua -- b:warm: workers spawned, confined by the spawner and
-- checked ahead of their runs, parked until b:start gives them a guest. A
-- pooled run must be the run a fresh worker would have given: same result,
-- same confinement, same ids in the ledger; a parked worker is nobody's run.
local H = require "helper"
local airlock = require "airlock"

local function finish(b, run)
  while run:live() do assert(b:step(100)) end
  return run:result()
end

-- The broker's children that are still there.
local function kids() return #H.children() end

describe("b:warm", function()
  it("parks workers that b:start takes, with the result and confinement of a fresh worker", function()
    local b <close> = airlock.broker()
    local before = kids()
    assert(b:warm(2))
    assert.are.equal(before + 2, kids())   -- spawned now, before any run
    assert.are.equal(0, b:live())          -- and nobody's run: live counts runs
    local pooled = {}
    for i = 1, 2 do
      local res = finish(b, assert(b:start { guest = "return 6 * 7", policy = "untrusted" }))
      assert.are.equal("ok", res.cause, res.message)
      assert.are.equal(42, res.value)
      assert.is_true(res.pooled)
      pooled[i] = res
    end
    -- Control: the pool is empty now, so the next run spawns its own worker.
    local fresh = finish(b, assert(b:start { guest = "return 6 * 7", policy = "untrusted" }))
    assert.are.equal("ok", fresh.cause, fresh.message)
    assert.is_nil(fresh.pooled)
    assert.are.same(fresh.confinement, pooled[1].confinement)
    assert.matches("^applied", pooled[1].confinement.seccomp)
    assert.matches("^applied", pooled[1].confinement.namespaces)
    -- Ids follow the spawns: 1 and 2 were parked first, the fresh one is 3.
    assert.are.same({ 1, 2, 3 }, { pooled[1].run, pooled[2].run, fresh.run })
  end)

  it("serves only runs whose worker would be spawned alike", function()
    local b <close> = airlock.broker()
    assert(b:warm(1, "untrusted"))
    -- Other rlimits: another worker, so not from this pool.
    local other = finish(b, assert(b:start { guest = "return 1",
      policy = { confine = { rlimits = { nofile = 6 } } } }))   -- tighter than untrusted's 8
    assert.are.equal("ok", other.cause, other.message)
    assert.is_nil(other.pooled)
    assert.are.equal(2, other.run)
    local same = finish(b, assert(b:start { guest = "return 1" }))
    assert.is_true(same.pooled)
    assert.are.equal(1, same.run)
  end)

  it("forgets a parked worker that dies, and its end is no run's result", function()
    local b <close> = airlock.broker()
    local before = kids()
    assert(b:warm(1))
    local pid = H.children()[#H.children()]
    assert(os.execute("kill -9 " .. pid))
    local seen = {}
    for _ = 1, 20 do
      for _, res in ipairs(assert(b:step(50))) do seen[#seen + 1] = res end
      if kids() == before then break end
    end
    assert.are.same({}, seen)
    assert.are.equal(before, kids())
    local res = finish(b, assert(b:start { guest = "return 'fresh'" }))
    assert.are.equal("fresh", res.value)
    assert.is_nil(res.pooled)
  end)

  it("empties with warm(0), and a closed broker leaves no parked worker behind", function()
    local before = kids()
    local b = airlock.broker()
    assert(b:warm(3))
    assert.are.equal(before + 3, kids())
    assert(b:warm(1))
    for _ = 1, 20 do
      assert.are.same({}, assert(b:step(50)))   -- the cancelled ones end as nobody's run
      if kids() == before + 1 then break end
    end
    assert.are.equal(before + 1, kids())
    b:close()
    assert.are.equal(before, kids())
    assert.has_error(function() airlock.broker():warm(-1) end, "warm: n must be a whole number from 0 to 256")
  end)

  it("leaves a recorded run its own worker (fixed addresses, for replay), recorded under its id", function()
    local dir = H.tmpdir()
    local b <close> = airlock.broker()
    assert(b:warm(1))
    local pol = { effects = { twice = function(args) return args.n * 2 end } }
    local res = finish(b, assert(b:start { guest = "return host.twice({ n = 21 })", policy = pol,
                                           ledger = dir .. "/s" }))
    assert.are.equal(42, res.value)
    assert.is_nil(res.pooled)
    assert.are.equal(2, res.run)   -- 1 is the parked worker, still there for the next run
    local later = finish(b, assert(b:start { guest = "return 1" }))
    assert.is_true(later.pooled)
    assert.are.equal(1, later.run)
    local seen_run
    for rec in require("airlock.ledger").records(dir .. "/s") do
      if rec.kind == "init" then seen_run = rec.run end
    end
    assert.are.equal(res.run, seen_run)
    local rep = assert(airlock.replay(dir .. "/s", { policy = pol }))
    assert.is_true(rep.identical, rep.message)
    os.execute("rm -rf " .. dir)
  end)

  it("refills itself, one worker in an idle step, when asked; never without asking", function()
    local b <close> = airlock.broker()
    assert(b:warm(2, nil, { refill = true }))
    assert.equal(2, b:pooled())
    local r1, r2 = assert(b:start { guest = "return 1" }), assert(b:start { guest = "return 2" })
    assert.equal(0, b:pooled())
    assert.is_true(finish(b, r1).pooled)
    assert.is_true(finish(b, r2).pooled)
    for _ = 1, 4 do assert(b:step(10)) end
    assert.equal(2, b:pooled(), "topped up again by idle steps")
    assert.equal(2 + 0, kids() >= 2 and 2 or kids())
    -- control: the same without refill stays empty
    local c <close> = airlock.broker()
    assert(c:warm(1))
    local r = assert(c:start { guest = "return 3" })
    assert.is_true(finish(c, r).pooled)
    for _ = 1, 4 do assert(c:step(10)) end
    assert.equal(0, c:pooled())
    assert.has_error(function() c:warm(1, nil, { refil = true }) end, "warm: unknown option 'refil' (refill)")
  end)

  it("is bounded by the policy's limits.pool", function()
    local b <close> = airlock.broker()
    local none, err, code = b:warm(40)
    assert.is_nil(none)
    assert.equal("policy", code)
    assert.equal("warm: 40 workers is over the policy's limits.pool (32)", err)
    local small = airlock.policy.extend("untrusted", { limits = { pool = 1 } })
    assert.is_nil((b:warm(2, small)))
    assert(b:warm(1, small))   -- control: within the bound
    assert.equal(1, b:pooled(small))
  end)
end)
