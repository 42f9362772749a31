-- nested_spec.lua -- nested runs (ctx:nest, lua/airlock/nest.lua): a handler
-- starts a run of its own inside an effect; its value is the call's answer,
-- its failure the call's error; it is bounded (depth, count, time, ledger,
-- policy), runs without holding the broker up, is recorded in the parent's
-- session under the call, and replays from the journal with nothing live.
-- Every hostile case has a control that succeeds, so each test can fail.
local H = require "helper"
local airlock = require "airlock"
local ledger = airlock.ledger
local core = require "airlock.core"

-- A guest's source that recurses through the agent effect: each level nests one more.
local RECURSE = "local d = ... return host.agent(d + 1)"

-- The policy of most tests: agent nests the guest it is given (or RECURSE
-- with a number), double is a plain effect; counts says how often each
-- handler really ran (a replay must leave it alone).
local function agent_policy(over)
  local counts = { agent = 0, double = 0 }
  local p = { limits = { deadline_ms = "10s" }, effects = {
    agent = function(args, ctx)
      counts.agent = counts.agent + 1
      if type(args) == "number" then return ctx:nest { guest = RECURSE, input = args } end
      return ctx:nest { guest = args.guest, input = args.input, policy = args.policy }
    end,
    double = function(n) counts.double = counts.double + 1 return n * 2 end,
  } }
  for k, v in pairs(over or {}) do p[k] = v end
  return p, counts
end

local function records(dir)
  local out = {}
  for rec in ledger.records(dir) do out[#out + 1] = rec end
  return out
end

local function kinds_of(dir, run)
  local out = {}
  for _, rec in ipairs(records(dir)) do
    if run == nil or rec.run == run then out[#out + 1] = rec.kind end
  end
  return table.concat(out, " ")
end

describe("ctx:nest", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("answers the call with the nested run's value, under the parent's policy by default", function()
    local pol, counts = agent_policy()
    local res = airlock.run { policy = pol,
      guest = "return host.agent { guest = 'return host.double(...) + 1', input = 20 } + 100" }
    assert.is_true(res.ok, res.message)
    assert.are.equal(141, res.value)
    assert.are.equal(1, res.nested)
    assert.are.same({ agent = 1, double = 1 }, counts)
  end)

  it("makes a nested run's failure the call's error, with its cause; the guest may catch it", function()
    local pol = agent_policy()
    local res = airlock.run { policy = pol, guest = [[
      local ok, err = pcall(host.agent, { guest = "error('boom')" })
      local ok2, err2 = pcall(host.agent, { guest = "local t = {} while true do t[#t + 1] = ('x'):rep(4096) end" })
      return { ok, err, ok2, err2, host.agent { guest = "return 'fine'" } }
    ]] }
    assert.is_true(res.ok, res.message)
    local v = res.value
    assert.is_false(v[1])
    assert.matches("^handler for 'agent' failed: nested: error: the nested run %d+ %(depth 1%) ended: .*boom", v[2])
    assert.is_false(v[3])
    assert.matches("nested: memory: ", v[4])
    assert.are.equal("fine", v[5])   -- the control, in the same run
    -- Uncaught, it ends the parent with cause error and the nested cause in the message.
    local bad = airlock.run { policy = pol, guest = "return host.agent { guest = 'error(\"deep\")' }" }
    assert.are.equal("error", bad.cause)
    assert.matches("nested: error: .*deep", bad.message)
  end)

  it("stops a nested run that spins at its (tighter) deadline or instruction budget", function()
    -- (instructions = 0 is no budget at all: only a parent without one may give that)
    local pol = agent_policy { limits = { deadline_ms = "10s", instructions = 0 } }
    -- (the control's own deadline is the parent's: a start under load must fit in it)
    local res = airlock.run { policy = pol, guest = [[
      local spin = "while true do end"
      local a = select(2, pcall(host.agent, { guest = spin, policy = { limits = { deadline_ms = 300 } } }))
      local b = select(2, pcall(host.agent, { guest = spin, policy = { limits = { instructions = 100000 } } }))
      return { a, b, host.agent { guest = "return 1" } }
    ]] }
    assert.is_true(res.ok, res.message)
    assert.matches("nested: deadline: ", res.value[1])   -- a spin ends no other way
    assert.matches("nested: instructions: ", res.value[2])
    assert.are.equal(1, res.value[3])
  end)

  it("bounds recursion by limits.nest.depth, and a nested policy cannot raise it", function()
    local pol = agent_policy()
    local res = airlock.run { policy = pol, guest = "return host.agent(1)" }
    assert.are.equal("error", res.cause)
    assert.matches("nested: depth: run %d+ is at depth 4 and its policy's limits.nest.depth is 4", res.message)
    assert.are.equal(4, res.nested)
    -- Control: a tighter bound stops sooner; 0 turns nesting off.
    local two = airlock.run { policy = agent_policy { limits = { deadline_ms = "10s", nest = { depth = 2 } } },
      guest = "return host.agent(1)" }
    assert.are.equal(2, two.nested)
    assert.matches("limits.nest.depth is 2", two.message)
    local off = airlock.run { policy = agent_policy { limits = { nest = { depth = 0 } } },
      guest = "return host.agent { guest = 'return 1' }" }
    assert.matches("nested: depth: run %d+ is at depth 0", off.message)
    local raise = airlock.run { policy = agent_policy { limits = { nest = { depth = 1 } } },
      guest = "return host.agent { guest = 'return 1', policy = { limits = { nest = { depth = 9 } } } }" }
    assert.matches("nested: policy: .*limits.nest.depth: 1 %-> 9", raise.message)
  end)

  it("bounds how many nested runs one run's tree starts (limits.nest.runs)", function()
    local guest = [[
      local n = 0
      for i = 1, 50 do
        local ok, err = pcall(host.agent, { guest = "return 1" })
        if not ok then return { n, err } end
        n = n + 1
      end
      return { n }
    ]]
    local res = airlock.run { policy = agent_policy { limits = { nest = { runs = 5 } } }, guest = guest }
    assert.is_true(res.ok, res.message)
    assert.are.equal(5, res.value[1])
    assert.matches("nested: runs: this run's tree has started 5 nested runs, its policy's limits.nest.runs %(5%)",
      res.value[2])
    -- Control: within the bound every one runs (50 spawns in a row: a deadline
    -- that a loaded machine under the sanitizer does not reach).
    local fine = airlock.run { policy = agent_policy { limits = { nest = { runs = 50 }, deadline_ms = "120s" } },
                               guest = guest }
    assert.is_true(fine.ok, fine.message)
    assert.are.same({ 50 }, fine.value)
  end)

  it("lets a nested policy tighten its parent's, never loosen it", function()
    local pol = agent_policy()
    local res = airlock.run { policy = pol, guest = [[
      local function try(p, src) return select(2, pcall(host.agent, { guest = src or "return 1", policy = p })) end
      return {
        try { limits = { cpu = "20s" } },
        try { effects = { extra = function() end } },
        try { confine = { seccomp = false } },
        try "dev",
        try({ effects = { double = false } }, "return select(2, pcall(host.double, 4))"),
        try({ limits = { memory = "16M" } }, "return host.double(4)"),
      }
    ]] }
    -- (the guest cannot pass a function through an effect: the second is refused by the codec)
    local v = res.value
    assert.is_true(res.ok, res.message)
    assert.matches("nested: policy: the nested run's policy would loosen its parent's at limits.cpu", v[1])
    assert.matches("cannot send a function", v[2])
    assert.matches("nested: policy: .*confine.seccomp: true %-> false", v[3])
    assert.matches("nested: policy: ", v[4])
    assert.are.equal("denied: effect 'double' is not granted by the policy", v[5])   -- the nested run has no such effect
    assert.are.equal(8, v[6])   -- the control: a tighter policy runs
    -- A handler can pass a policy that grants more: refused the same way.
    local grant = airlock.run { policy = { effects = {
      agent = function(_, ctx)
        return ctx:nest { guest = "return 1", policy = { effects = { more = function() return 1 end } } }
      end } }, guest = "return host.agent()" }
    assert.matches("nested: policy: .*effects.more", grant.message)
  end)

  it("bounds a nested run's deadline by what is left of its parent's", function()
    -- The parent's time goes by in the handler: all but about 1 s of its 4 s,
    -- counted from just before its start (its own start, even a slow one, is
    -- in it), so the nested run gets about 1 s, not the policy's 4 s.
    local system = require "system"
    local t0
    -- The CPU budget (10 s) is well past the deadline under test, so the
    -- nested run's loop ends by its deadline, never in a race with its CPU.
    local pol = agent_policy { limits = { deadline_ms = 4000, instructions = 0, cpu = "10s" }, effects = {
      agent = function(_, ctx)
        while core.now_ms() - t0 < 3000 do system.sleep(0.01) end
        return ctx:nest { guest = "while true do end" }
      end } }
    t0 = core.now_ms()
    local res = airlock.run { policy = pol, ledger = dir .. "/s",
      guest = "local ok, e = pcall(host.agent) return e" }
    local nest_rec, nested_done
    for _, rec in ipairs(records(dir .. "/s")) do
      if rec.kind == "nest" then nest_rec = rec end
      if rec.kind == "done" and nest_rec and rec.run == nest_rec.run then nested_done = rec end
    end
    assert.is_table(nest_rec, "no nest record: the parent's start took its whole 3 s")
    -- (what is left: 1 s and the moment between t0 and the parent's start)
    assert.is_true(nest_rec.limits.deadline_ms < 2000, tostring(nest_rec.limits.deadline_ms))
    assert.is_true(nested_done.cause == "deadline" or nested_done.cause == "cancelled", nested_done.cause)
    assert.is_true(res.cause == "deadline" or res.value:match("nested: deadline"), res.message)
    -- Control: a parent with time left gives its nested run the policy's whole deadline.
    local fine = airlock.run { policy = agent_policy(), ledger = dir .. "/t",
      guest = "return host.agent { guest = 'return 2' }" }
    assert.are.equal(2, fine.value)
    for _, rec in ipairs(records(dir .. "/t")) do
      if rec.kind == "nest" then assert.is_true(rec.limits.deadline_ms > 9000) end
    end
  end)

  it("refuses a nested pause with a clear error; the nested run's end is a done record", function()
    local pol = agent_policy()
    local res = airlock.run { policy = pol, ledger = dir .. "/s", guest = [[
      local ok, e = pcall(host.agent, { guest = "return host.input('name?')" })
      return e
    ]] }
    assert.is_true(res.ok, res.message)
    assert.matches("nested: paused: the nested run 2 called host.input, and a nested run cannot pause", res.value)
    assert.are.equal("nest done", kinds_of(dir .. "/s", 2))
    local again, err = airlock.resume(dir .. "/s", "x", { policy = pol, policy_changed = true })
    assert.is_nil(again)
    assert.matches("not paused", err)
  end)

  it("is refused outside the handler's own call", function()
    local kept
    local res = airlock.run { policy = { effects = {
      keep = function(_, ctx) kept = ctx return true end,
      bad = function(_, ctx) return ctx:nest { guest = "return 1", bogus = 1 } end,
      co = function(_, ctx) return coroutine.wrap(function() return ctx:nest { guest = "return 1" } end)() end,
    } }, guest = "host.keep() return { select(2, pcall(host.bad)), select(2, pcall(host.co)) }" }
    assert.is_true(res.ok, res.message)
    assert.matches("nest: unknown option 'bogus'", res.value[1])
    assert.matches("ctx:nest must be called from the effect's handler itself", res.value[2])
    assert.has_error(function() kept:nest { guest = "return 1" } end)
  end)
end)

describe("nested runs and the broker", function()
  it("wait without holding the broker: two parents nest at once and meet in their nested runs", function()
    -- Each nested run calls meet and is answered only once both have called
    -- it: a nested step loop that blocked the broker would never get there.
    local waiting = {}
    local pol = agent_policy { effects = {
      agent = function(args, ctx) return ctx:nest { guest = "return host.meet(...)", input = args } end,
      meet = function(who, ctx)
        waiting[#waiting + 1] = { run = ctx.handle, seq = ctx.seq, who = who }
        return airlock.defer()
      end,
    } }
    local b <close> = airlock.broker()
    local a = assert(b:start { policy = pol, guest = "return 'a:' .. host.agent('a')" })
    local c = assert(b:start { policy = pol, guest = "return 'c:' .. host.agent('c')" })
    local plain = assert(b:start { guest = "return 'plain'" })
    local results, t0 = {}, core.now_ms()
    while (a:live() or c:live() or plain:live()) and core.now_ms() - t0 < H.GUARD_S * 1000 do
      for _, res in ipairs(assert(b:step(50))) do results[#results + 1] = res end
      if #waiting == 2 then
        for _, w in ipairs(waiting) do assert(w.run:reply(w.seq, w.who .. "+met")) end
        waiting = {}
      end
    end
    assert.are.equal("a:a+met", a:result().value)
    assert.are.equal("c:c+met", c:result().value)
    assert.are.equal("plain", plain:result().value)
    -- The broker's results are the host's three runs; the nested ones are their calls' answers.
    assert.are.equal(3, #results)
  end)

  it("cancels a nested run when its parent ends first", function()
    local pol = agent_policy { limits = { deadline_ms = 400, instructions = 0 } }
    local res = airlock.run { policy = pol, guest = "return host.agent { guest = 'while true do end' }" }
    assert.are.equal("deadline", res.cause)
    -- Control: nothing is left behind.
    assert.are.same({}, H.children())
  end)
end)

describe("nested runs in the ledger", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  -- A recorded parent with three nested runs, one of them two deep.
  local GUEST = [[
    local a = host.agent { guest = "return host.double(...)", input = 5 }
    local b = host.agent { guest = "return host.agent { guest = 'return host.double(...) + 1', input = ... }",
                           input = a }
    print("got", a, b)
    return a + b
  ]]

  local function record(pol)
    local res = airlock.run { policy = pol, guest = GUEST, ledger = dir .. "/s" }
    assert.is_true(res.ok, res.message)
    assert.are.equal(31, res.value)
    return res
  end

  it("records them in the same session under the parent's call, chain intact", function()
    local pol = agent_policy()
    local res = record(pol)
    assert.are.equal(3, res.nested)
    local rep = assert(ledger.verify(dir .. "/s", res.ledger.head))
    assert.is_true(rep.ok, rep.reason)
    local recs, calls = records(dir .. "/s"), {}
    local nests = {}
    for _, rec in ipairs(recs) do
      if rec.kind == "call" then calls[rec.seq] = rec end
      if rec.kind == "nest" then nests[#nests + 1] = rec end
    end
    assert.are.equal(3, #nests)
    for _, n in ipairs(nests) do
      local call = calls[n.parent.seq]
      assert.are.equal("agent", call.effect)
      assert.are.equal(n.parent.run, call.run)
      assert.are.equal(n.parent.id, call.id)
    end
    assert.are.same({ 1, 1, 2 }, { nests[1].depth, nests[2].depth, nests[3].depth })
    assert.are.equal(nests[2].run, nests[3].parent.run)
    -- ledger show indents each nested run by its depth and says where it runs.
    local lines = {}
    for line in ledger.show(dir .. "/s") do lines[#lines + 1] = line end
    local text = table.concat(lines, "\n")
    assert.matches("Z    nest     run %d+ +under run 1 call 1 %(#%d+%)", text)
    assert.matches("Z      nest     run %d+ +under run %d+ call 1 %(#%d+%)", text)
    assert.matches("Z      done     run", text)
    assert.matches("Z  done     run 1 ", text)
  end)

  it("replays the parent and its nested runs from the journal, with nothing live", function()
    local pol, counts = agent_policy()
    record(pol)
    local before = { agent = counts.agent, double = counts.double }
    -- (the handlers close over counts, so the digest moved: say so)
    local rep = assert(airlock.replay(dir .. "/s", { policy = pol, policy_changed = true }))
    assert.is_true(rep.identical, rep.result.message)
    assert.are.equal(0, rep.live_effects)
    assert.are.equal(3, rep.nested)
    assert.are.same(before, counts)   -- no handler ran
    assert.are.equal("got\t10\t21\n", rep.result.log)
    -- The command says so too, under the same policy from a file.
    local polfile = dir .. "/agent.lua"
    H.write(polfile, [[
      local RECURSE = "local d = ... return host.agent(d + 1)"
      return { limits = { deadline_ms = "10s" }, effects = {
        agent = function(args, ctx) return ctx:nest { guest = args.guest, input = args.input } end,
        double = function(n) return n * 2 end } }
    ]])
    local gfile = dir .. "/g.lua"
    H.write(gfile, GUEST)
    local out, rc = H.sh(H.bin .. "/airlock run " .. gfile .. " --policy " .. polfile .. " --ledger " .. dir .. "/c")
    assert.are.equal(0, rc, out)
    out, rc = H.sh(H.bin .. "/airlock ledger verify " .. dir .. "/c")
    assert.are.equal(0, rc, out)
    out, rc = H.sh(H.bin .. "/airlock replay " .. dir .. "/c --policy " .. polfile)
    assert.are.equal(0, rc, out)
    assert.matches("identical %(%d+ calls answered from the journal, 3 nested runs replayed, 0 live effects%)", out)
  end)

  -- A copy of the session with every record after the session record
  -- appended again (a re-chained journal), edit(rec) changing any.
  local function rewrite(src, dst, edit)
    local L = assert(ledger.open(dst, { create = true }))
    for rec in ledger.records(src) do
      if rec.kind ~= "session" then
        local fields = {}
        for k, v in pairs(rec) do
          if k ~= "seq" and k ~= "kind" and k ~= "run" and k ~= "t" and k ~= "hash" and k ~= "offset" then
            fields[k] = v
          end
        end
        edit(rec, fields)
        assert(L:append(rec.kind, rec.run, fields))
      end
    end
    L:close()
  end

  it("detects a tampered nested record: altered bytes fail verify, a re-chained lie diverges", function()
    local pol = agent_policy()
    record(pol)
    -- Control: a faithful copy replays identically.
    rewrite(dir .. "/s", dir .. "/copy", function() end)
    local rep = assert(airlock.replay(dir .. "/copy", { policy = pol, policy_changed = true }))
    assert.is_true(rep.identical, rep.result.message)
    -- A nested run's recorded answer changed (and the chain rebuilt): the nested guest returns
    -- another value than its done record says, so its replay, and the parent's, diverge.
    local nested_run
    rewrite(dir .. "/s", dir .. "/lie", function(rec, f)
      if rec.kind == "nest" and not nested_run then nested_run = rec.run end
      if rec.kind == "reply" and rec.run == nested_run and f.effect == "double" then f.value = 11 end
    end)
    assert.is_true(ledger.verify(dir .. "/lie").ok)
    rep = assert(airlock.replay(dir .. "/lie", { policy = pol, policy_changed = true }))
    assert.is_false(rep.identical)
    assert.are.equal("diverged", rep.result.cause)
    assert.matches("diverged at seq %d+: the nested run " .. nested_run .. " ended with cause ok 11; " ..
      "the journal has cause ok 10", rep.result.message)
    assert.are.equal(0, rep.live_effects)
    -- A nest record that names a call its parent never made is malformed.
    rewrite(dir .. "/s", dir .. "/orphan", function(rec, f)
      if rec.kind == "nest" then f.parent = { run = 1, id = 99, seq = 3 } end
    end)
    local none, err = airlock.replay(dir .. "/orphan", { policy = pol, policy_changed = true })
    assert.is_nil(none)
    assert.matches("malformed: the nest record at seq %d+ names a call its parent run has not made", err)
    -- A journal nesting deeper than the replaying policy allows is not replayed past its bound.
    local shallow = agent_policy { limits = { deadline_ms = "10s", nest = { depth = 1 } } }
    rep = assert(airlock.replay(dir .. "/s", { policy = shallow, policy_changed = true }))
    assert.is_false(rep.identical)
    assert.matches("cannot be replayed: nested: depth", rep.result.message)
    -- A byte flipped inside a nested record's body: the chain catches it.
    local path = dir .. "/s/journal"
    local data = H.read(path)
    local at = data:find("return host.double(...)", 1, true)
    H.write(path, data:sub(1, at - 1) .. "R" .. data:sub(at + 1))
    local v = assert(ledger.verify(dir .. "/s"))
    assert.is_false(v.ok)
    assert.are.equal("altered", v.damage)
    local refused, why = airlock.replay(dir .. "/s", { policy = pol, policy_changed = true })
    assert.is_nil(refused)
    assert.matches("altered", why)
  end)

  it("ends a nested run that floods the journal at the parent's limits.ledger", function()
    local pol = agent_policy { limits = { deadline_ms = "10s", instructions = 0, ledger = "64K" } }
    local res = airlock.run { policy = pol, ledger = dir .. "/s", guest = [[
      local ok, e = pcall(host.agent, { guest = "for i = 1, 1e6 do host.double(i) end" })
      return e
    ]] }
    -- The tree shares one budget: the nested run ends with cause ledger, and its
    -- parent, whose answer could then not be recorded either, ends so too.
    assert.are.equal("ledger", res.cause)
    assert.matches("limits.ledger %(65536%)", res.message)
    local nested_end
    for _, rec in ipairs(records(dir .. "/s")) do
      if rec.kind == "done" and rec.run == 2 then nested_end = rec end
    end
    assert.are.equal("ledger", nested_end.cause)
    assert.is_true(ledger.verify(dir .. "/s").ok)
    -- Control: a nested run within the budget records whole.
    local fine = airlock.run { policy = pol, ledger = dir .. "/t",
      guest = "return host.agent { guest = 'for i = 1, 10 do host.double(i) end return 1' }" }
    assert.are.equal(1, fine.value)
  end)

  it("resumes a parent that paused after nesting; the whole session replays identically", function()
    local pol, counts = agent_policy()
    local guest = [[
      local a = host.agent { guest = "return host.double(3)" }
      local name = host.input("name?")
      return name .. (a + host.agent { guest = "return host.double(4)" })
    ]]
    local res = airlock.run { policy = pol, guest = guest, ledger = dir .. "/s" }
    assert.are.equal("paused", res.cause)
    local doubles = counts.double
    res = assert(airlock.resume(dir .. "/s", "n=", { policy = pol, policy_changed = true }))
    assert.is_true(res.ok, res.message)
    assert.are.equal("n=14", res.value)
    assert.are.equal(doubles + 1, counts.double)   -- the first nested run was replayed, the second live
    local runs = {}
    for _, rec in ipairs(records(dir .. "/s")) do if rec.kind == "nest" then runs[#runs + 1] = rec.run end end
    assert.are.equal(2, #runs)
    assert.are_not.equal(runs[1], runs[2])
    local rep = assert(airlock.replay(dir .. "/s", { policy = pol, policy_changed = true }))
    assert.is_true(rep.identical, rep.result.message)
    assert.are.equal(2, rep.nested)
    assert.is_true(ledger.verify(dir .. "/s").ok)
  end)
end)

-- Every call's handler runs in a coroutine, and a coroutine is kept for the
-- next call once its handler has answered (nest.runner). What one call leaves
-- must not reach the next: its error, its yield, the fields it set on ctx.
describe("a handler's coroutine and ctx, call after call", function()
  it("a call whose handler fails leaves the next call's answer alone", function()
    local pol = { effects = { maybe = function(n)
      if n % 3 == 0 then error("no multiples of three", 0) end
      return n * 10
    end } }
    local res = airlock.run { policy = pol, guest = [[
      local out = {}
      for i = 1, 12 do
        local ok, v = pcall(host.maybe, i)
        out[#out + 1] = ok and tostring(v) or ("E:" .. tostring(v):match("no multiples of three") )
      end
      return table.concat(out, " ")
    ]] }
    assert.is_true(res.ok, res.message)
    assert.are.equal("10 20 E:no multiples of three 40 50 E:no multiples of three 70 80 "
      .. "E:no multiples of three 100 110 E:no multiples of three", res.value)
  end)

  it("a handler that yields outside ctx:nest fails its call; the next call is answered (control: no yield)", function()
    local pol = { effects = {
      sly = function(n) if n == 1 then coroutine.yield("let me out") end return n end,
      plain = function(n) return n + 1 end,
    } }
    local res = airlock.run { policy = pol, guest = [[
      local ok, err = pcall(host.sly, 1)
      return { ok = ok, err = err, after = host.plain(1), control = host.sly(2) }
    ]] }
    assert.is_true(res.ok, res.message)
    assert.is_false(res.value.ok)
    assert.matches("only ctx:nest may suspend a call", res.value.err)
    assert.are.equal(2, res.value.after)
    assert.are.equal(2, res.value.control)
  end)

  it("gives each call a ctx of its own that reads the run's grant; what a handler sets stays in its call", function()
    local seen = {}
    local pol = { name = "ctx-grant", effects = { look = function(_, ctx)
      seen[#seen + 1] = { policy = ctx.policy, mine = ctx.mine, seq = ctx.seq, effect = ctx.effect,
                          run = ctx.run, mt = getmetatable(ctx), nest = type(ctx.nest) }
      ctx.mine = "set by call " .. ctx.seq
      ctx.policy = "overwritten"
      return true
    end } }
    local res = airlock.run { policy = pol, guest = "host.look() host.look() return host.look()" }
    assert.is_true(res.ok, res.message)
    assert.are.equal(3, #seen)
    for i, s in ipairs(seen) do
      assert.are.equal("ctx-grant", s.policy)
      assert.is_nil(s.mine)
      assert.are.equal("look", s.effect)
      assert.are.equal("function", s.nest)
      assert.is_false(s.mt)   -- the grant cannot be swapped from a handler
      if i > 1 then assert.is_true(s.seq > seen[i - 1].seq) end
    end
  end)
end)
