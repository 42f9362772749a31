-- run_spec.lua -- airlock.run end to end with the real worker: values, causes,
-- effects, handler errors, deferred answers.
local airlock = require "airlock"

local function run(guest, pol, input)
  local res, err = airlock.run { guest = guest, policy = pol, input = input }
  assert(res, err)
  return res
end

describe("airlock.run", function()
  it("returns the guest's value", function()
    local res = run("return 6 * 7")
    assert.is_true(res.ok)
    assert.equal("ok", res.cause)
    assert.equal(42, res.value)
    assert.equal("", res.message)
  end)

  it("passes input in and structured values out", function()
    local res = run("local t = ... return { sum = t.a + t.b, list = { t.a, t.b }, s = 'x\\0y' }",
                    nil, { a = 2, b = 3 })
    assert.is_true(res.ok)
    assert.same({ sum = 5, list = { 2, 3 }, s = "x\0y" }, res.value)
  end)

  it("keeps the message and traceback of a guest error", function()
    local res = run("local function f() error('boom') end\nf()")
    assert.is_false(res.ok)
    assert.equal("error", res.cause)
    assert.matches("boom", res.message)
    assert.matches("traceback", res.error.traceback)
    assert.matches("in local 'f'", res.error.traceback)
  end)

  it("reports a syntax error as cause error", function()
    local res = run("return (")
    assert.equal("error", res.cause)
    assert.matches("expected", res.message)
  end)

  it("stops an endless loop with cause instructions", function()
    local res = run("while true do end", { limits = { instructions = 1e6 } })
    assert.equal("instructions", res.cause)
    assert.matches("1000000", res.message)
  end)

  it("an instruction budget cannot be caught by pcall", function()
    local res = run("for i = 1, 1e9 do pcall(function() while true do end end) end return 'escaped'",
                    { limits = { instructions = 1e6 } })
    assert.equal("instructions", res.cause)
  end)

  it("stops a table-growing guest with cause memory", function()
    local res = run("local t = {} while true do t[#t + 1] = ('x'):rep(4096) .. #t end",
                    { limits = { memory = "16M", instructions = 0 } })
    assert.equal("memory", res.cause)
  end)

  it("says which limit a guest's memory ran into, and the field that sets it", function()
    -- blocks of 4 MiB and a few bytes (one allocation each); CPU and wall
    -- clock raised: faulting in 128 MiB on a busy machine is not what is
    -- measured here
    local fill = "local n = ... local t = {} for i = 1, n do t[i] = ('x'):rep((4 << 20) + i) end return #t"
    -- control: what fits under the cap runs to its end
    local res = run(fill, { limits = { memory = "16M", cpu = "30s", deadline_ms = "60s" } }, 2)
    assert.is_true(res.ok, res.message)
    assert.equal(2, res.value)
    -- the heap cap
    res = run(fill, { limits = { memory = "16M", cpu = "30s", deadline_ms = "60s" } }, 1e6)
    assert.equal("memory", res.cause)
    assert.equal("not enough memory: the guest's Lua heap reached its limit of 16M (limits.memory)",
      res.message)
    -- a heap cap above an address space limit the policy sets lower: the
    -- address space is what stops it (without one, it follows the heap cap)
    res = run(fill, { limits = { memory = "1G", cpu = "30s", deadline_ms = "60s" },
                      confine = { rlimits = { as = "128M" } } }, 1e6)
    assert.equal("memory", res.cause)
    assert.matches("^not enough memory: the worker's address space reached its limit of 128M " ..
      "%(confine%.rlimits%.as%) before the heap reached 1G %(limits%.memory%)$", res.message)
  end)

  it("ends a guest past its deadline with cause deadline", function()
    local res = run("while true do end", { limits = { deadline_ms = 300, instructions = 0 } })
    assert.equal("deadline", res.cause)   -- the loop ends no other way
    assert.matches("300 ms", res.message)
  end)

  it("performs an effect through a Lua handler", function()
    local seen
    local res = run("return host.call('add', { a = 1, b = 2 }) + host.add({ a = 10, b = 20 })", {
      effects = { add = function(args, ctx) seen = ctx return args.a + args.b end },
    })
    assert.is_true(res.ok, res.message)
    assert.equal(33, res.value)
    assert.equal("add", seen.effect)
    assert.equal(2, seen.seq)
    assert.is_number(seen.run)
    assert.equal(2, res.usage.effects)
  end)

  it("gives the guest a catchable error for an effect the policy lacks", function()
    local res = run("local ok, err = pcall(host.call, 'net.get', {}) return { ok = ok, err = err }")
    assert.is_true(res.ok)
    assert.is_false(res.value.ok)
    assert.matches("not granted", res.value.err)
  end)

  it("ends with cause denied when the guest does not catch a refusal", function()
    local res = run("return host.call('fs.read', { path = '/etc/passwd' })")
    assert.equal("denied", res.cause)
    assert.matches("fs.read", res.message)
  end)

  it("refuses an effect the policy sets to false", function()
    local res = run("return os.time()", { effects = { ["clock.now"] = false } })
    assert.equal("denied", res.cause)
  end)

  it("turns a handler error into an err reply, not a host crash", function()
    local res = run("local ok, err = pcall(host.call, 'bad', {}) return err", {
      effects = { bad = function() error("handler exploded") end },
    })
    assert.is_true(res.ok)
    assert.matches("handler for 'bad' failed: .*handler exploded", res.value)
  end)

  it("reports a handler's unsendable return value to the guest", function()
    local res = run("local ok, err = pcall(host.call, 'fn', {}) return err", {
      effects = { fn = function() return { f = print } end },
    })
    assert.matches("result.f: cannot send a function", res.value)
  end)

  it("a handler that never answers ends with cause deadline", function()
    local res = run("return host.call('never', {})", {
      limits = { deadline_ms = 300 },
      effects = { never = function() return airlock.defer() end },
    })
    assert.equal("deadline", res.cause)
  end)

  it("collects print output as the log", function()
    local res = run("print('a', 1, true) print('b') return 0")
    assert.equal("a\t1\ttrue\nb\n", res.log)
  end)

  it("reports usage", function()
    local res = run("return 1")
    for _, k in ipairs { "wall_ms", "user_ms", "sys_ms", "max_rss_kb", "effects", "bytes_in", "bytes_out" } do
      assert.is_number(res.usage[k], k)
    end
    assert.is_true(res.usage.bytes_out > 0 and res.usage.bytes_in > 0)
  end)

  it("refuses input that cannot be sent, naming the path", function()
    assert.has_error(function() airlock.run { guest = "return 1", input = { items = { 1, 2, print } } } end,
      "start: init.input.items[3]: cannot send a function")
  end)

  it("returns nil and a message when the worker cannot be started", function()
    local res, err = airlock.run { guest = "return 1", policy = { worker = "/nonexistent/worker" } }
    assert.is_nil(res)
    assert.matches("exec /nonexistent/worker: No such file", err)
  end)
end)

describe("a broker", function()
  it("answers deferred calls later with run:reply and run:fail", function()
    local b <close> = airlock.broker()
    local pending = {}
    local pol = { effects = { later = function(args, ctx) pending[#pending + 1] = { ctx.handle, ctx.seq, args } return airlock.defer() end } }
    local run = assert(b:start { guest = "local a = host.later(1) local ok, e = pcall(host.later, 2) return { a, e }", policy = pol })
    local results = {}
    while run:live() do
      for _, r in ipairs(assert(b:step(10))) do results[#results + 1] = r end
      local p = table.remove(pending, 1)
      if p then
        if p[3] == 1 then assert.is_true(p[1]:reply(p[2], "first")) else assert.is_true(p[1]:fail(p[2], "no second")) end
      end
    end
    local res = run:result()
    assert.is_true(res.ok, res.message)
    assert.same({ "first", "no second" }, res.value)
  end)

  it("refuses an unknown option by name, the package's internal ones too, at the caller's line", function()
    local b <close> = airlock.broker()
    for _, k in ipairs { "gust", "_serve", "_resume_inputs", "_resume_of", "_program" } do
      local ok, err = pcall(function() local r = b:start { guest = "return 1", [k] = {} } return r end)
      assert.is_false(ok)
      assert.matches("^spec/lua/run_spec%.lua:%d+: start: unknown option '" .. k .. "'$", err)
    end
    -- A guest or policy of the wrong type is the caller's mistake too.
    local ok, err = pcall(function() local r = b:start { guest = 42 } return r end)
    assert.is_false(ok)
    assert.matches("^spec/lua/run_spec%.lua:%d+: airlock: 'guest' must be Lua source", err)
    ok, err = pcall(function() local r = b:start { guest = "return 1", policy = 42 } return r end)
    assert.is_false(ok)
    assert.matches("^spec/lua/run_spec%.lua:%d+: airlock: 'policy' must be a policy table", err)
    assert.equal(0, b:live())
  end)

  it("cancels a run", function()
    local b <close> = airlock.broker()
    local run = assert(b:start { guest = "while true do end", policy = { limits = { instructions = 0 } } })
    b:step(0)
    run:cancel()
    local res = run:wait(b)
    assert.equal("cancelled", res.cause)
  end)

  it("runs 50 guests concurrently and all finish correctly", function()
    local b <close> = airlock.broker()
    local want = {}
    -- Each run's wall clock starts at its start, and starting the other 49
    -- workers counts against it: on a loaded 2-CPU machine under the sanitizer
    -- that passed the default 5 s. This test is about concurrency, not time.
    local policy = { limits = { deadline_ms = 60000 }, effects = { double = function(n) return n * 2 end } }
    for i = 1, 50 do
      local run = assert(b:start { guest = "local n = ... return host.double(n)", input = i, policy = policy })
      want[run:id()] = i * 2
    end
    local got = 0
    while got < 50 do
      for _, res in ipairs(assert(b:step(-1))) do
        assert.is_true(res.ok, res.message)
        assert.equal(want[res.run], res.value)
        got = got + 1
      end
    end
    assert.equal(0, b:live())
  end)

  it("refuses to be stepped from inside a handler", function()
    local b <close> = airlock.broker()
    local caught
    local run = assert(b:start { guest = "return host.reenter()", policy = { effects = {
      reenter = function() local ok, e = pcall(b.step, b, 0) caught = e return ok end } } })
    local res = run:wait(b)
    assert.is_true(res.ok)
    assert.is_false(res.value)
    assert.matches("not re%-entrant", caught)
  end)
end)
