-- secrets_spec.lua -- a policy's secrets: resolved in the parent when a run
-- starts, given to handlers as ctx.secrets, never to the guest, and redacted
-- from every output of a run and from its ledger records.
local airlock = require "airlock"
local secrets = require "airlock.secrets"
local H = require "helper"

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  return d
end

local write = H.write

-- A secret nobody could guess, in a file only this spec knows.
local function new_secret()
  local t = {}
  for i = 1, 24 do t[i] = string.char(math.random(97, 122)) end
  local value = "tok-" .. table.concat(t)
  local path = os.tmpname()
  write(path, value .. "\n")   -- the trailing newline is not part of it
  return value, path
end

-- Every string in v (keys and values, nested), concatenated.
local function strings(v, out, seen)
  out, seen = out or {}, seen or {}
  if type(v) == "string" then out[#out + 1] = v
  elseif type(v) == "table" and not seen[v] then
    seen[v] = true
    for k, x in pairs(v) do strings(k, out, seen); strings(x, out, seen) end
  end
  return out
end

local function contains(v, needle)
  for _, s in ipairs(strings(v)) do
    if s:find(needle, 1, true) then return true end
  end
  return false
end

-- The secret's first 12 bytes: a part of it must not survive either.
local function leaks(v, secret)
  return contains(v, secret) or contains(v, secret:sub(1, 12))
end

describe("secrets", function()
  local secret, file
  before_each(function() secret, file = new_secret() end)
  after_each(function() os.remove(file) end)

  it("resolve from the environment and from files, in the parent", function()
    local home = assert(os.getenv("HOME"))
    local v = assert(secrets.resolve { A = { env = "HOME" }, B = { file = file } })
    assert.equal(home, v.A)
    assert.equal(secret, v.B)
    assert.same({}, secrets.resolve(nil))
  end)

  it("a missing variable, an unreadable file or an empty value is an error naming the secret", function()
    local _, err = secrets.resolve { API_TOKEN = { env = "AIRLOCK_SPEC_NO_SUCH_VARIABLE" } }
    assert.equal("secrets: API_TOKEN: the environment variable AIRLOCK_SPEC_NO_SUCH_VARIABLE is not set", err)
    _, err = secrets.resolve { DB = { file = "/nonexistent/airlock/secret" } }
    assert.matches("^secrets: DB: cannot read /nonexistent/airlock/secret", err)
    local empty = os.tmpname()
    _, err = secrets.resolve { E = { file = empty } }
    os.remove(empty)
    assert.matches("^secrets: E: the value is empty", err)
    -- a run that cannot resolve its secrets does not start
    local res, rerr = airlock.run { guest = "return 1",
      policy = { secrets = { API_TOKEN = { env = "AIRLOCK_SPEC_NO_SUCH_VARIABLE" } } } }
    assert.is_nil(res)
    assert.matches("API_TOKEN", rerr)
  end)

  it("redacts strings, nested tables (keys too) and a cut-off tail", function()
    local redact = secrets.redactor { T = "s3cr3t-value", U = "s3cr3t" }
    assert.equal("a [redacted:T] b [redacted:U] [redacted:T]", redact("a s3cr3t-value b s3cr3t s3cr3t-value"))
    assert.same({ x = { "[redacted:U]" }, ["[redacted:T]"] = 1 }, redact { x = { "s3cr3t" }, ["s3cr3t-value"] = 1 })
    assert.equal("out: [redacted:T]", redact("out: s3cr3t-va", true))
    assert.equal("out: s3c", redact("out: s3c", true))      -- too short to tell
    assert.equal(42, redact(42))
    assert.is_nil(secrets.redactor {})
  end)

  it("reach handlers as ctx.secrets (read-only), and never the guest", function()
    local seen
    local res = assert(airlock.run {
      guest = [[
        local leaked = host.leak()
        local ok, err = pcall(host.fail)
        return { leaked = leaked, err = err, env = host.env() }
      ]],
      policy = { secrets = { API_TOKEN = { file = file }, HOME_DIR = { env = "HOME" } }, effects = {
        leak = function(_, ctx) return { token = ctx.secrets.API_TOKEN, again = "x" .. ctx.secrets.API_TOKEN } end,
        fail = function(_, ctx) error("the server refused token " .. ctx.secrets.API_TOKEN, 0) end,
        env = function(_, ctx)
          seen = ctx.secrets.API_TOKEN
          local ok = pcall(function() ctx.secrets.API_TOKEN = "x" end)
          local n = 0
          for _ in pairs(ctx.secrets) do n = n + 1 end
          return { writable = ok, count = n }
        end,
      } },
    })
    assert.equal("ok", res.cause, res.message)
    assert.equal(secret, seen)
    assert.same({ token = "[redacted:API_TOKEN]", again = "x[redacted:API_TOKEN]" }, res.value.leaked)
    assert.equal("handler for 'fail' failed: the server refused token [redacted:API_TOKEN]", res.value.err)
    assert.same({ writable = false, count = 2 }, res.value.env)
    assert.is_false(leaks(res, secret))
  end)

  it("deferred answers reach the guest redacted too", function()
    local b <close> = airlock.broker()
    local pending = {}
    local run = assert(b:start { guest = "local a = host.later() local ok, e = pcall(host.later) return { a, e }",
      policy = { secrets = { T = { file = file } }, effects = {
        later = function(_, ctx) pending[#pending + 1] = ctx return airlock.defer() end } } })
    while #pending < 1 do b:step(100) end
    run:reply(pending[1].seq, "value " .. secret)
    while #pending < 2 do b:step(100) end
    run:fail(pending[2].seq, "error " .. secret)
    local res = run:wait(b)
    assert.equal("ok", res.cause, res.message)
    assert.same({ "value [redacted:T]", "error [redacted:T]" }, res.value)
  end)

  -- The guest holds the secret (the host handed it over by mistake, as input)
  -- and does everything it can with it.
  local GUEST = [[
    local s = ...
    print("the token is " .. s)
    host.echo({ token = s, [s] = true })
    local back = host.echo({ s })
    if MODE == "error" then error("failing with " .. s) end
    return { s, nested = { deep = "x" .. s .. "y" }, [s] = 1, back = back }
  ]]

  for _, mode in ipairs { "return", "error" } do
    it("a run that prints, sends, returns (" .. mode .. ") it: not in any output or ledger record", function()
      local dir = tmpdir()
      local logged = {}
      local b <close> = airlock.broker()
      local run = assert(b:start {
        guest = "local MODE = '" .. mode .. "'\n" .. GUEST, input = secret, ledger = dir,
        on_log = function(text) logged[#logged + 1] = text end,
        policy = { secrets = { API_TOKEN = { file = file } }, effects = { echo = function(args) return args end } } })
      local res = run:wait(b)
      if mode == "error" then
        assert.equal("error", res.cause)
        assert.matches("failing with [redacted:API_TOKEN]", res.message, 1, true)
        assert.matches("failing with [redacted:API_TOKEN]", res.error.message, 1, true)
        assert.is_string(res.error.traceback)
      else
        assert.equal("ok", res.cause, res.message)
        assert.equal("[redacted:API_TOKEN]", res.value[1])
        assert.equal("x[redacted:API_TOKEN]y", res.value.nested.deep)
        assert.equal(1, res.value["[redacted:API_TOKEN]"])
        assert.same({ "[redacted:API_TOKEN]" }, res.value.back)
      end
      assert.matches("the token is [redacted:API_TOKEN]\n", res.log, 1, true)
      -- the whole result: value, message, error, log, stdout, stderr, traceback
      assert.is_false(contains(res, secret), "the secret is in the result")
      assert.is_false(contains(logged, secret), "the secret reached on_log")
      -- every ledger record: init (input, source), calls, replies, done
      local recs, kinds = {}, {}
      for rec in airlock.ledger.records(dir) do recs[#recs + 1] = rec; kinds[rec.kind] = true end
      assert.is_true(kinds.init and kinds.call and kinds.reply and kinds.done)
      assert.is_false(contains(recs, secret), "the secret is in the ledger")
      assert.is_true(contains(recs, "[redacted:API_TOKEN]"))
      for _, rec in ipairs(recs) do
        if rec.kind == "init" then assert.equal("[redacted:API_TOKEN]", rec.input) end
        if rec.kind == "call" and rec.effect == "echo" and rec.args.token then
          assert.equal("[redacted:API_TOKEN]", rec.args.token)
          assert.is_true(rec.args["[redacted:API_TOKEN]"])
        end
      end
      -- the raw journal bytes too
      assert.is_nil(H.slurp(dir .. "/journal"):find(secret, 1, true))
      os.execute("rm -rf '" .. dir .. "'")
    end)
  end

  it("the worker's own stdout and stderr are redacted", function()
    local res = assert(airlock.run { guest = "return 1", policy = {
      unconfined = true,   -- the "worker" is a shell: no layers of its own
      secrets = { T = { file = file } },
      worker = { "/bin/sh", "-c", "echo out " .. secret .. "; echo err " .. secret .. " >&2; exit 3" },
      -- (no rlimits: with nofile 8, the shell cannot save a descriptor for >&2)
      confine = { landlock = false, seccomp = false, require = {}, rlimits = airlock.policy.remove } } })
    assert.equal("exit", res.cause)
    assert.equal("out [redacted:T]\n", res.stdout)
    assert.equal("err [redacted:T]\n", res.stderr)
    assert.matches("[redacted:T]", res.message, 1, true)
    assert.is_false(leaks(res, secret))
  end)

  it("from the environment, through the airlock command: not in its output", function()
    local g = os.tmpname() .. ".lua"
    write(g, "print('echo: ' .. (...).t) return { t = (...).t }")
    local pol = os.tmpname() .. ".lua"
    write(pol, "return { name = 'with-secret', secrets = { API_TOKEN = { env = 'HOST_TOKEN' } } }")
    local cmd = string.format("HOST_TOKEN=%s %s/airlock run %s --policy %s --input '{\"t\":\"%s\"}' --json 2>&1",
      secret, H.bin, g, pol, secret)
    local p = io.popen(cmd)
    local out = p:read("a")
    p:close()
    assert.matches('"cause":"ok"', out, 1, true)
    assert.matches("[redacted:API_TOKEN]", out, 1, true)
    assert.is_nil(out:find(secret, 1, true))
    -- without the variable: refused, naming the secret
    p = io.popen(string.format("env -u HOST_TOKEN %s/airlock run %s --policy %s 2>&1; echo rc=$?", H.bin, g, pol))
    out = p:read("a")
    p:close()
    assert.matches("secrets: API_TOKEN: the environment variable HOST_TOKEN is not set", out, 1, true)
    assert.matches("rc=2", out, 1, true)
    os.remove(g)
    os.remove(pol)
  end)

  it("the digest covers where secrets come from, never their values", function()
    local p = airlock.policy { secrets = { T = { file = file } } }
    assert.is_nil(airlock.policy.canonical(p):find(secret, 1, true))
    assert.are_not.equal(airlock.policy.digest(p), airlock.policy.digest(airlock.policy { secrets = { T = { env = "HOME" } } }))
  end)
end)
