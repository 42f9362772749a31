-- pool_spec.lua -- b:warm: prepared workers, spawned, confined (by the
-- spawner, then Landlock and seccomp by themselves) and checked from outside
-- ahead of their runs, parked until b:start gives them a guest. A pooled run
-- must be the run a fresh worker would have given: same result, same
-- confinement, same ids in the ledger; a parked worker is nobody's run, and
-- one that lies about its confinement or acts before it has a run is refused
-- with its pool. Checked as root and as uid 65534.
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

  it("gives the guest a worker that is confined and checked before the run exists", function()
    local b <close> = airlock.broker()
    assert(b:warm(1))
    local pid = H.children()[#H.children()]
    -- Before any run: the worker is already under its seccomp filter and
    -- no_new_privs, as /proc shows from outside.
    local status = H.read("/proc/" .. pid .. "/status")
    assert.equal("2", status:match("\nSeccomp:%s*(%d)"))
    assert.equal("1", status:match("\nNoNewPrivs:%s*(%d)"))
    assert.equal(1, b:pooled())
    local res = finish(b, assert(b:start { guest = "return math.type(math.random(1, 6))" }))
    assert.is_true(res.pooled)
    assert.equal("integer", res.value)
    assert.is_number(res.usage.first_instruction_ms)
    assert.is_true(res.usage.first_instruction_ms <= res.usage.done_frame_ms)
    -- A run that asks for its own seed gets a worker made with it (a fresh one):
    -- the pool's was fixed when its state was made.
    assert(b:warm(1))
    local seeded = finish(b, assert(b:start { guest = "return math.random(1, 1000000)", seed = 7 }))
    local again = finish(b, assert(b:start { guest = "return math.random(1, 1000000)", seed = 7 }))
    assert.is_nil(seeded.pooled)
    assert.equal(seeded.value, again.value)
    assert.equal(1, b:pooled())   -- still there for the next run without a seed
  end)

  it("refuses a pool whose worker lies about its confinement (control: the real worker joins)", function()
    local b <close> = airlock.broker()
    -- The stand-in says ready without applying any layer of its own.
    local liar = airlock.policy.extend("untrusted", { name = "liar", worker = { H.hostile, "ready-done" } })
    local none, err, code = b:warm(1, liar)
    assert.is_nil(none)
    assert.equal("confinement", code)
    assert.matches("^confinement: the pool's worker failed its checks from outside, so the pool is refused: ", err)
    assert.matches("Seccomp", err)
    assert.equal(0, b:pooled(liar))
    -- Refused for good: asking again says so without spawning.
    local before = kids()
    assert.is_nil((b:warm(1, liar)))
    assert.equal(before, kids())
    -- Control: the same policy with the real worker joins.
    local honest = airlock.policy.extend("untrusted", { name = "honest" })
    assert(b:warm(1, honest))
    assert.equal(1, b:pooled(honest))
  end)

  it("ends a parked worker that acts before it has a run, and refuses its pool (control: the real one waits)", function()
    local b <close> = airlock.broker()
    -- A stand-in confined exactly as the real worker (so it passes the checks
    -- on ready), which then makes a call instead of waiting for its run: a
    -- worker taken over before use.
    local rogue = airlock.policy.extend("untrusted", { name = "rogue", worker = { H.hostile, "escape-socket" },
      effects = { n = function() return 1 end } })
    local honest = airlock.policy.extend("untrusted", { name = "honest", effects = { n = function() return 1 end } })
    -- Its ready is true, so it joins; unless its call came in the same read
    -- as its ready, when b:warm refuses at once.
    local first, ferr = b:warm(1, rogue)
    if not first then assert.matches("a parked worker sent 'call' before it was given a run", ferr) end
    assert(b:warm(1, honest))
    local seen = {}
    for _ = 1, 20 do
      for _, res in ipairs(assert(b:step(20))) do seen[#seen + 1] = res end
      if b:pooled(rogue) == 0 then break end
    end
    assert.are.same({}, seen)   -- its end is no run's result
    assert.equal(0, b:pooled(rogue))
    local none, err = b:warm(1, rogue)
    assert.is_nil(none)
    assert.matches("a parked worker sent 'call' before it was given a run", err)
    -- Control: the real worker, through the same steps, is still waiting.
    assert.equal(1, b:pooled(honest))
    local res = finish(b, assert(b:start { guest = "return host.n()", policy = honest }))
    assert.is_true(res.pooled)
    assert.equal(1, res.value)
  end)

  it("refills without waiting for the new worker: it joins in a later step", function()
    local b <close> = airlock.broker()
    local pol = airlock.policy.extend("untrusted", { name = "waits", effects = { wait = function() return airlock.defer() end } })
    assert(b:warm(1, pol, { refill = true }))
    local run = assert(b:start { guest = "return host.wait()", policy = pol })   -- stays live, deferred
    -- A step that had nothing to deliver spawns one, and returns without
    -- reading its ready: it has not joined yet.
    local spawned
    for _ = 1, 10 do
      local before = kids()
      assert.are.same({}, assert(b:step(0)))
      if kids() > before then spawned = true break end
    end
    assert.is_true(spawned)
    assert.equal(0, b:pooled(pol))
    for _ = 1, 50 do
      assert(b:step(20))
      if b:pooled(pol) == 1 then break end
    end
    assert.equal(1, b:pooled(pol))
    run:cancel()
    finish(b, run)
  end)

  it("refuses an input that cannot be sent as a fresh worker does, and loses no worker to it", function()
    local bad = { items = { 1, 2, print } }
    local want = "start: init.input.items[3]: cannot send a function"
    -- Control: the same error from a fresh worker.
    assert.has_error(function() airlock.run { guest = "return 1", input = bad } end, want)
    for _, pol in ipairs { "untrusted", { limits = { instructions = 1e6 } } } do   -- found by name, by key
      local b <close> = airlock.broker()
      local before = kids()
      assert(b:warm(1, pol))
      assert.has_error(function() b:start { guest = "return 1", input = bad, policy = pol } end, want)
      -- The worker never had a run: cancelled, and its end is nobody's result.
      assert.equal(0, b:pooled(pol))
      for _ = 1, 50 do
        local done = assert(b:step(20))
        assert.equal(0, #done)
        if kids() == before then break end
      end
      assert.equal(before, kids())
      -- The pool serves the next run as ever.
      assert(b:warm(1, pol))
      local res = finish(b, assert(b:start { guest = "return select('#', ...), ...", input = { 7 }, policy = pol }))
      assert.equal("ok", res.cause, res.message)
      assert.is_true(res.pooled)
      assert.equal(1, res.value)
    end
  end)

  it("stops a guest at the same instruction as a fresh worker (the hook is set before it parks)", function()
    -- Each step prints its count: the last line says where the budget stopped
    -- it. A budget under the hook's step of 1000 is counted to the instruction.
    local guest = "local i = 0 while true do i = i + 1 print(i) end"
    local function last(budget, pooled)
      local pol = airlock.policy.extend("untrusted", { name = "budget-" .. budget,
        limits = { instructions = budget } })
      local b <close> = airlock.broker()
      if pooled then assert(b:warm(1, pol)) end
      local res = finish(b, assert(b:start { guest = guest, policy = pol }))
      assert.equal("instructions", res.cause, res.message)
      assert.equal(pooled or nil, res.pooled)
      return tonumber(res.log:match("(%d+)\n$"))
    end
    local fresh = last(900, false)
    assert.is_number(fresh)
    assert.equal(fresh, last(900, true))
    -- Control: 40 instructions fewer stop it elsewhere, so the count can differ.
    assert.are_not.equal(fresh, last(860, true))
  end)

  it("counts a pooled run's time for its nested runs from its start, not from the worker's spawn", function()
    -- The deadline (3 s) is what a nested start needs on a loaded machine;
    -- the worker is parked for longer than it, so counted from the spawn
    -- nothing would be left.
    local core, system = require "airlock.core", require "system"
    local spin_ms = 0
    local pol = airlock.policy.extend("untrusted", { name = "nest-deadline", limits = { deadline_ms = 3000 },
      effects = { agent = function(_, ctx)
        local t = core.now_ms()
        while core.now_ms() - t < spin_ms do system.sleep(0.01) end   -- the run's own time goes by
        return ctx:nest { guest = "return 2" }
      end } })
    local b <close> = airlock.broker()
    assert(b:warm(1, pol))
    local t = core.now_ms()
    while core.now_ms() - t < 3500 do assert(b:step(50)) end   -- parked for longer than the deadline
    local res = finish(b, assert(b:start { guest = "return host.agent()", policy = pol }))
    assert.is_true(res.pooled)
    assert.equal("ok", res.cause, res.message)
    assert.equal(2, res.value)
    -- Control: a run whose own time is gone gives its nested run none.
    spin_ms = 3100
    assert(b:warm(1, pol))
    local late = finish(b, assert(b:start { guest = "local ok, e = pcall(host.agent) return e", policy = pol }))
    assert.is_true(late.pooled)
    assert.truthy(late.cause == "deadline" or tostring(late.value):match("no time left"), late.message)
  end)

  it("works the same for an unprivileged host: prepared, checked, and a liar refused", function()
    local script = os.tmpname()
    local build = H.build:match("^/") and H.build or (os.getenv("PWD") .. "/" .. H.build)
    local hostile = os.getenv("PWD") .. "/" .. H.hostile
    -- The control: uid 65534 can load this build at all (a checkout it
    -- cannot enter, a private /tmp/... directory say, keeps it out).
    local probe, prc = H.sh("cd / && " .. H.NOBODY .. "lua5.4 -e " ..
      string.format("%q", string.format("package.cpath = %q .. '/lib/?.so;' .. package.cpath require 'airlock'", build)))
    if prc ~= 0 then pending("uid 65534 cannot load " .. build .. " here: " .. (probe:match("[^\n]*") or "")) end
    H.write(script, string.format([[
      package.cpath = %q .. "/lib/?.so;" .. package.cpath
      local airlock = require "airlock"
      local b <close> = airlock.broker()
      assert(b:warm(1))
      local res = b:start { guest = "return 6 * 7" }:wait(b)
      print("pooled", res.pooled, res.value, res.confinement.seccomp:match("^applied") ~= nil)
      local liar = airlock.policy.extend("untrusted", { name = "liar", worker = { %q, "ready-done" } })
      local ok, err, code = b:warm(1, liar)
      print("liar", ok, code, err:match("refused") ~= nil)
    ]], build, hostile))
    os.execute("chmod 644 " .. script)
    local out, rc = H.sh("cd / && setpriv --reuid=65534 --regid=65534 --clear-groups lua5.4 " .. script)
    os.remove(script)
    assert.equal(0, rc, out)
    assert.matches("pooled\ttrue\t42\ttrue", out)
    assert.matches("liar\tnil\tconfinement\ttrue", out)
  end)
end)
