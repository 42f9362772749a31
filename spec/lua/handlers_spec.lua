-- handlers_spec.lua -- airlock.handlers other than the workspace (see
-- workspace_spec.lua): kv, clock, random, log, modules, http, deny, merge;
-- each against hostile arguments, and from real guest runs.
local airlock = require "airlock"
local H = require "helper"
local handlers = require "airlock.handlers"

local function sh(cmd)
  assert(os.execute(cmd), "command failed: " .. cmd)
end

local slurp = H.slurp

local function spit(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

local tempdir = H.tmpdir

local function run(guest, effects, extra)
  local opts = { guest = guest, policy = { effects = effects } }
  for k, v in pairs(extra or {}) do opts[k] = v end
  local res, err = airlock.run(opts)
  assert(res, err)
  return res
end

-- Calls h(args) and returns the error message it raises.
-- A failed call's error as the guest's message reads it (a refusal is a
-- denial value, airlock.core.deny, whose text is "denied: why").
local function refusal(h, args)
  local ok, err = pcall(h, args)
  assert.is_false(ok, "the call was allowed")
  return tostring(err)
end

describe("handlers.kv", function()
  it("gets, puts, deletes and lists in memory, from a guest", function()
    local store = {}
    local res = run([[
      host.kv.put { key = "a", value = 1 }
      host.kv.put { key = "b", value = { x = 1.5, list = { 1, 2, "three" }, ok = true } }
      host.kv.put { key = "c", value = "s" }
      host.kv.delete { key = "c" }
      host.kv.delete { key = "never" }
      return { a = host.kv.get { key = "a" }, b = host.kv.get { key = "b" },
               c = host.kv.get { key = "c" }, keys = host.kv.list {} }
    ]], handlers.kv(store))
    assert.equal("ok", res.cause, res.message)
    assert.same({ a = 1, b = { x = 1.5, list = { 1, 2, "three" }, ok = true }, keys = { "a", "b" } }, res.value)
    assert.same({ a = 1, b = { x = 1.5, list = { 1, 2, "three" }, ok = true } }, store)   -- the host sees it
    assert.equal("integer", math.type(store.a))
    assert.equal("float", math.type(store.b.x))
  end)

  it("lists by prefix", function()
    local kv = handlers.kv()
    for _, k in ipairs { "user:2", "user:1", "item:1" } do kv["kv.put"] { key = k, value = true } end
    assert.same({ "user:1", "user:2" }, kv["kv.list"] { prefix = "user:" })
    assert.same({ "item:1", "user:1", "user:2" }, kv["kv.list"]())
  end)

  it("keeps a private copy of what it stores", function()
    local kv = handlers.kv()
    local v = { n = 1 }
    kv["kv.put"] { key = "k", value = v }
    v.n = 2
    assert.equal(1, kv["kv.get"] { key = "k" }.n)
  end)

  it("refuses hostile keys and values", function()
    local kv = handlers.kv { store = {}, max_value = 1000, max_keys = 3, max_bytes = 2500 }
    local put = kv["kv.put"]
    assert.matches("expects a table", refusal(put, "k"))
    assert.matches("args.key must be a string", refusal(put, { key = 1, value = 1 }))
    assert.matches("1 to 256 bytes", refusal(put, { key = "", value = 1 }))
    assert.matches("1 to 256 bytes", refusal(put, { key = ("k"):rep(257), value = 1 }))
    assert.matches("args.value is missing", refusal(put, { key = "k" }))
    assert.matches("larger than the store's max_value", refusal(put, { key = "k", value = ("v"):rep(1001) }))
    local deep = {}
    local t = deep
    for _ = 1, 40 do t.next = {}; t = t.next end
    assert.matches("nested deeper than 32", refusal(put, { key = "k", value = deep }))
    assert.matches("must be strings, numbers, booleans", refusal(put, { key = "k", value = print }))
    assert.matches("keys must be strings or integers", refusal(put, { key = "k", value = { [1.5] = 1 } }))
    assert.is_true(put { key = "a", value = ("v"):rep(900) })
    assert.is_true(put { key = "b", value = ("v"):rep(900) })
    assert.matches("the store is full %(max_bytes 2500%)", refusal(put, { key = "c", value = ("v"):rep(900) }))
    assert.is_true(put { key = "c", value = 1 })
    assert.matches("the store is full %(max_keys 3%)", refusal(put, { key = "d", value = 1 }))
    assert.is_true(put { key = "a", value = 2 })   -- replacing is not adding
    assert.equal(3, #kv["kv.list"]())
  end)

  it("persists in a directory, atomically, and reads it back", function()
    local dir = tempdir()
    finally(function() sh("rm -rf " .. dir) end)
    local kv = handlers.kv { dir = dir }
    assert.is_true(kv["kv.put"] { key = "score", value = 42 })
    assert.is_true(kv["kv.put"] { key = "name", value = { first = "Ada", tags = { "x" } } })
    local res = run("host.kv.put { key = 'from_guest', value = 'yes' } return host.kv.get { key = 'score' }", kv)
    assert.equal(42, res.value)
    local again = handlers.kv { dir = dir }
    assert.equal(42, again["kv.get"] { key = "score" })
    assert.same({ first = "Ada", tags = { "x" } }, again["kv.get"] { key = "name" })
    assert.equal("yes", again["kv.get"] { key = "from_guest" })
    assert.same({ "kv.bin" }, (function()   -- no temporary files left
      local p = io.popen("ls -A " .. dir); local out = {}
      for l in p:lines() do out[#out + 1] = l end
      p:close(); return out
    end)())
    again["kv.delete"] { key = "score" }
    assert.is_nil(handlers.kv { dir = dir }["kv.get"] { key = "score" })
    -- A corrupt or foreign file is an error at load, not a silent empty store.
    spit(dir .. "/kv.bin", "AIRLOCK-KV1\nt\255\255\255\127")
    assert.has_error(function() handlers.kv { dir = dir } end)
    spit(dir .. "/kv.bin", "hello")
    assert.has_error(function() handlers.kv { dir = dir } end)
  end)

  it("a read-only store refuses changes", function()
    local kv = handlers.kv { store = { a = 1 }, write = false }
    assert.equal(1, kv["kv.get"] { key = "a" })
    assert.equal("denied: read-only store", refusal(kv["kv.put"], { key = "a", value = 2 }))
    assert.equal("denied: read-only store", refusal(kv["kv.delete"], { key = "a" }))
  end)

  it("checks its own options", function()
    assert.has_error(function() handlers.kv { dir = "/nonexistent/dir" } end)
    assert.has_error(function() handlers.kv { dir = "/tmp", flie = "x" } end, "kv: unknown option 'flie'")
    assert.has_error(function() handlers.kv { dir = "/tmp", file = "../x" } end)
    assert.has_error(function() handlers.kv(42) end)
  end)
end)

describe("handlers.clock", function()
  it("a virtual clock is deterministic per run and advances by step per call", function()
    -- (os.clock is the worker's CPU time, clock.cpu; the answer's clock field is read here.)
    local guest = "return { os.time(), os.time(), os.time(), host.call('clock.now').clock, os.date('%Y-%m-%d %H:%M:%S') }"
    local eff = { ["clock.now"] = handlers.clock { mode = "virtual", start = 1700000000, step = 2 } }
    local a = run(guest, eff)
    local b = run(guest, eff)
    assert.equal("ok", a.cause, a.message)
    assert.same({ 1700000000, 1700000002, 1700000004, 6, "2023-11-14 22:13:28" }, a.value)
    assert.same(a.value, b.value)   -- each run starts at start
  end)

  it("a real clock answers the host's time", function()
    -- between the host's time before the run and after it, however long it took
    local before = os.time()
    local res = run("return os.time()", { ["clock.now"] = handlers.clock() })
    local after = os.time()
    assert.is_true(res.value >= before and res.value <= after, res.value .. " not in " .. before .. ".." .. after)
  end)

  it("checks its options", function()
    assert.has_error(function() handlers.clock { mode = "fast" } end)
    assert.has_error(function() handlers.clock { mode = "virtual", step = -1 } end)
    assert.has_error(function() handlers.clock { step = 1 } end)
    assert.has_error(function() handlers.clock { mdoe = "virtual" } end, "clock: unknown option 'mdoe'")
  end)
end)

describe("handlers.random", function()
  it("answers bytes and integers from the parent's CSPRNG", function()
    local res = run([[
      local b = host.random.bytes { n = 32 }
      local ints, lo, hi = {}, math.huge, -math.huge
      for i = 1, 2000 do
        local v = host.random.int { min = -3, max = 3 }
        ints[v] = (ints[v] or 0) + 1
        lo, hi = math.min(lo, v), math.max(hi, v)
      end
      local big = host.random.int { min = math.mininteger, max = math.maxinteger }
      return { len = #b, distinct = #b > 0 and b ~= string.rep(b:sub(1, 1), #b), lo = lo, hi = hi,
               seven = (ints[-3] and ints[3] and ints[0]) and true, one = host.random.int { min = 5, max = 5 },
               big = math.type(big), zero = host.random.bytes { n = 0 } }
    ]], handlers.random())
    assert.equal("ok", res.cause, res.message)
    assert.same({ len = 32, distinct = true, lo = -3, hi = 3, seven = true, one = 5, big = "integer", zero = "" },
                res.value)
  end)

  it("refuses hostile arguments", function()
    local r = handlers.random { max_bytes = 64 }
    assert.matches("from 0 to 64", refusal(r["random.bytes"], { n = 65 }))
    assert.matches("from 0 to 64", refusal(r["random.bytes"], { n = -1 }))
    assert.matches("from 0 to 64", refusal(r["random.bytes"], { n = 1.5 }))
    assert.matches("from 0 to 64", refusal(r["random.bytes"], { n = "8" }))
    assert.matches("must be integers", refusal(r["random.int"], { min = 1, max = 2.5 }))
    assert.matches("must be integers", refusal(r["random.int"], { min = 1 }))
    assert.matches("not be greater", refusal(r["random.int"], { min = 3, max = 2 }))
    assert.matches("expects a table", refusal(r["random.int"], 7))
  end)
end)

describe("handlers.log", function()
  it("sends the guest's print to the sink, bounded per run and escaped", function()
    local got = {}
    local h = handlers.log { max_bytes = 20, sink = function(text, ctx) got[#got + 1] = text end }
    local res = run([[
      print("hello\27[2J")
      print(string.rep("x", 50))
      print("after the cut")
      return true
    ]], { log = h })
    assert.equal("ok", res.cause, res.message)
    assert.same({ "hello\\x1b[2J\n", "xxxxxxx", "[log truncated]\n" }, got)
    got = {}
    run("print('again')", { log = h })   -- a new run has its own budget
    assert.same({ "again\n" }, got)
  end)

  it("refuses a log call without text", function()
    local h = handlers.log { sink = function() end }
    assert.matches("args.text must be a string", refusal(h, { text = 1 }))
    assert.matches("args.text must be a string", refusal(h, nil))
  end)
end)

describe("handlers.modules", function()
  local dir, outside

  setup(function()
    local tmp = tempdir()
    dir, outside = tmp .. "/mods", tmp .. "/outside"
    sh("mkdir -p " .. dir .. "/game/util " .. dir .. "/pkg " .. outside)
    spit(dir .. "/greet.lua", "local name = ... return { hi = function(w) return 'hi ' .. w .. ' from ' .. name end }")
    spit(dir .. "/game/util/math.lua", "return { double = function(x) return 2 * x end }")
    spit(dir .. "/pkg/init.lua", "return 'package init'")
    spit(dir .. "/binary.lua", "\27Lua\84\0garbage")
    spit(dir .. "/big.lua", "return '" .. ("x"):rep(300 * 1024) .. "'")
    spit(outside .. "/evil.lua", "return 'OUTSIDE'")
    sh("ln -s ../outside/evil.lua " .. dir .. "/evil.lua")
    sh("ln -s ../outside " .. dir .. "/out")
  end)

  teardown(function() sh("rm -rf " .. dir:match("^(.*)/mods$")) end)

  it("answers require from the module path, text only", function()
    local res = run([[
      local g = require "greet"
      local m = require "game.util.math"
      return { g.hi("world"), m.double(21), require "pkg", require("greet") == g }
    ]], { ["module.load"] = handlers.modules(dir) })
    assert.equal("ok", res.cause, res.message)
    assert.same({ "hi world from greet", 42, "package init", true }, res.value)
  end)

  it("refuses bad names, binary chunks, big files and paths out", function()
    local res = run([[
      local out = {}
      for _, n in ipairs { "../outside/evil", "/etc/passwd", "a..b", ".greet", "greet.", "a/b", "x\0y",
                           "binary", "big", "evil", "out.evil", "missing", string.rep("m", 300) } do
        local ok, err = pcall(require, n)
        out[#out + 1] = { n = n, ok = ok, err = tostring(err) }
      end
      return out
    ]], { ["module.load"] = handlers.modules(dir) })
    assert.equal("ok", res.cause, res.message)
    local why = {}
    for _, r in ipairs(res.value) do
      assert.is_false(r.ok, r.n)
      assert.is_nil(r.err:find("OUTSIDE", 1, true))
      why[r.n] = r.err
    end
    for _, n in ipairs { "../outside/evil", "/etc/passwd", "a..b", ".greet", "greet.", "a/b", "x\0y" } do
      assert.matches("denied: module name .* is not %[%%w_%]%+ parts joined by dots", why[n])
    end
    assert.matches("denied: module 'binary' is a binary chunk", why.binary)
    assert.matches("larger than 262144 bytes", why.big)
    assert.matches("denied: path 'evil.lua' leads outside", why.evil)
    assert.matches("denied: path 'out/evil.lua' leads outside", why["out.evil"])
    assert.matches("module 'missing' not found", why.missing)
    assert.matches("denied: module name must be 1 to 200 bytes", why[string.rep("m", 300)])
  end)
end)

describe("handlers.deny and handlers.merge", function()
  it("deny refuses with its reason and is marked as a deny decision", function()
    local h = handlers.deny("not in this game")
    assert.equal("denied: not in this game", refusal(h, {}))
    local _, err = pcall(h, {})
    assert.equal("not in this game", require("airlock.core").denial(err))   -- a value, not text
    assert.is_nil(require("airlock.core").denial("denied: not in this game"))
    assert.same({ "deny", "not in this game" }, { handlers.decision(h) })
    assert.is_nil(handlers.decision(print))
    local res = run("local ok, e = pcall(host.world.nuke, {}) return e", { ["world.nuke"] = h })
    assert.equal("denied: not in this game", res.value)
  end)

  it("merge joins handler tables and refuses an effect given twice", function()
    local m = handlers.merge(handlers.random(), { a = print }, nil, { b = false })
    assert.is_function(m["random.bytes"])
    assert.equal(print, m.a)
    assert.is_false(m.b)
    assert.has_error(function() handlers.merge({ a = print }, { a = print }) end, "merge: effect 'a' is given twice")
    assert.has_error(function() handlers.merge(42) end)
  end)

  it("a policy's digest covers the handlers' configuration, not their state", function()
    local digest = airlock.policy.digest
    local kv, log = handlers.kv(), handlers.log { sink = function() end }
    local clock = handlers.clock { mode = "virtual" }
    local p = { effects = handlers.merge(kv, { log = log, ["clock.now"] = clock }) }
    local before = digest(p)
    kv["kv.put"] { key = "a", value = 1 }
    log { text = "x" }
    clock()
    assert.equal(before, digest(p))
    assert.equal(digest { effects = handlers.workspace("/tmp") }, digest { effects = handlers.workspace("/tmp/") })
    assert.not_equal(digest { effects = handlers.workspace("/tmp") }, digest { effects = handlers.workspace("/usr") })
    assert.not_equal(digest { effects = handlers.workspace("/tmp") },
                     digest { effects = handlers.workspace("/tmp", { write = true }) })
    assert.not_equal(digest { effects = { h = handlers.http { allow = { "a" } } } },
                     digest { effects = { h = handlers.http { allow = { "b" } } } })
  end)

  it("a recorded run using the handlers replays exactly from the journal", function()
    local tmp = tempdir()
    finally(function() sh("rm -rf " .. tmp) end)
    sh("mkdir " .. tmp .. "/ws")
    spit(tmp .. "/ws/f.txt", "file")
    local pol = { effects = handlers.merge(handlers.workspace(tmp .. "/ws"), handlers.random(), handlers.kv(),
                                           { ["clock.now"] = handlers.clock() }) }
    local guest = [[
      host.kv.put { key = "r", value = host.random.int { min = 1, max = 1e9 } }
      return { host.random.bytes { n = 16 }, host.kv.get { key = "r" }, host.fs.read { path = "f.txt" }, os.time() }
    ]]
    local res = assert(airlock.run { guest = guest, policy = pol, ledger = tmp .. "/ledger" })
    assert.equal("ok", res.cause, res.message)
    local rep = assert(airlock.replay(tmp .. "/ledger", { policy = pol }))
    assert.is_true(rep.identical)
    assert.equal(0, rep.live_effects)
    assert.same(res.value, rep.result.value)
  end)

  it("a merged policy works from a loaded policy file", function()
    local tmp = tempdir()
    finally(function() sh("rm -rf " .. tmp) end)
    sh("mkdir " .. tmp .. "/ws")
    spit(tmp .. "/ws/f.txt", "from the workspace")
    spit(tmp .. "/policy.lua", string.format([[
      local handlers = require "airlock.handlers"
      return {
        name = "handlers-test",
        limits = { deadline_ms = "5s", memory = "32M", instructions = 1e8 },
        effects = handlers.merge(handlers.workspace(%q), {
          ["clock.now"] = handlers.clock { mode = "virtual", start = 0, step = 60 },
          ["world.nuke"] = handlers.deny("no"),
        }),
      }
    ]], tmp .. "/ws"))
    local pol = assert(airlock.policy.resolve(tmp .. "/policy.lua", "untrusted"))
    local res = assert(airlock.run { guest = "os.time() return { host.fs.read { path = 'f.txt' }, os.time() }",
                                     policy = pol })
    assert.equal("ok", res.cause, res.message)
    assert.same({ "from the workspace", 60 }, res.value)
  end)
end)

-- A tiny HTTP server for the http handler: the allowed one, and a second one on
-- another port that must never be reached. Both log every request they get.
local SERVER = [[
import http.server, json, os, sys, threading, time

root = sys.argv[1]

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def any(self):
        with open(self.server.log, "a") as f:
            f.write("%s %s\n" % (self.command, self.path))
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        p = self.path
        if p == "/hello":
            self.reply(200, b"hello", [("X-Test", "yes"), ("X-Multi", "a"), ("X-Multi", "b")])
        elif p == "/echo":
            self.reply(200, json.dumps({"method": self.command, "body": body.decode("latin-1"),
                                        "headers": {k.lower(): v for k, v in self.headers.items()}}).encode())
        elif p == "/redirect-ok":
            self.reply(302, b"", [("Location", "/hello")])
        elif p == "/redirect-echo":
            self.reply(307, b"", [("Location", "/echo")])
        elif p == "/redirect-303":
            self.reply(303, b"", [("Location", "/echo")])
        elif p == "/redirect-out":
            self.reply(302, b"", [("Location", self.server.other + "/stolen")])
        elif p == "/redirect-file":
            self.reply(302, b"", [("Location", "file:///etc/passwd")])
        elif p == "/redirect-loop":
            self.reply(302, b"", [("Location", "/redirect-loop")])
        elif p == "/big":
            self.reply(200, b"x" * (2 << 20))
        elif p == "/stream":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"y" * 65536)
            except Exception:
                pass
            self.close_connection = True
        elif p == "/slow":
            # never answers in any time a handler's timeout would wait (the server is killed at teardown)
            threading.Event().wait(600)
            self.reply(200, b"late")
        elif p == "/hold":
            # answers only once /release was asked (or after 600 s, a guard)
            released = self.server.released.wait(600)
            self.reply(200, b"held" if released else b"never released")
        elif p == "/release":
            self.server.released.set()
            self.reply(200, b"released")
        elif p == "/hold2":
            released = self.server.released2.wait(600)
            self.reply(200, b"held" if released else b"never released")
        elif p == "/release2":
            self.server.released2.set()
            self.reply(200, b"released")
        else:
            self.reply(404, b"no")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = any

# Many requests at once: a listen backlog of 5 (the default) would drop SYNs.
http.server.ThreadingHTTPServer.request_queue_size = 64

def serve(name):
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    s.daemon_threads = True
    s.log = os.path.join(root, name + ".log")
    open(s.log, "w").close()
    return s

main, other = serve("main"), serve("other")
main.released = threading.Event()
main.released2 = threading.Event()
main.other = other.other = "http://127.0.0.1:%d" % other.server_address[1]
threading.Thread(target=other.serve_forever, daemon=True).start()
threading.Thread(target=main.serve_forever, daemon=True).start()
with open(os.path.join(root, "ports.tmp"), "w") as f:
    f.write("%d %d" % (main.server_address[1], other.server_address[1]))
os.rename(os.path.join(root, "ports.tmp"), os.path.join(root, "ports"))
while True:
    time.sleep(60)
]]

describe("handlers.http", function()
  local tmp, pid, port, other, base, http

  setup(function()
    tmp = tempdir()
    spit(tmp .. "/server.py", SERVER)
    local p = io.popen(string.format("python3 %s/server.py %s >/dev/null 2>&1 & echo $!", tmp, tmp))
    pid = tonumber(p:read("l"))
    p:close()
    -- the server writes its ports (bound to port 0) once it listens
    port, other = H.wait_until("the spec's HTTP servers to listen", function() return slurp(tmp .. "/ports") end)
      :match("(%d+) (%d+)")
    base = "http://127.0.0.1:" .. port
    -- The timeout is a guard here; the case that tests it has its own handler.
    http = handlers.http { allow = { "127.0.0.1:" .. port }, methods = { "GET", "POST", "HEAD" },
                           max_bytes = "1M", timeout = H.GUARD_S .. "s" }
  end)

  teardown(function()
    if pid then os.execute("kill " .. pid) end
    sh("rm -rf " .. tmp)
  end)

  local function other_log() return slurp(tmp .. "/other.log") end

  it("performs allowed requests for a guest", function()
    local res = run(string.format([[
      local r = host.http.request { url = %q }
      local e = host.http.request { url = %q, method = "POST", body = "payload",
                                    headers = { ["Content-Type"] = "text/plain", ["X-Mine"] = "1" } }
      local h = host.http.request { url = %q, method = "HEAD" }
      return { r.status, r.body, r.headers["x-test"], r.headers["x-multi"], e.body, h.status, h.body }
    ]], base .. "/hello", base .. "/echo", base .. "/hello"), { ["http.request"] = http })
    assert.equal("ok", res.cause, res.message)
    local v = res.value
    assert.same({ 200, "hello", "yes", "a, b" }, { v[1], v[2], v[3], v[4] })
    local echo = require("dkjson").decode(v[5])
    assert.equal("POST", echo.method)
    assert.equal("payload", echo.body)
    assert.equal("text/plain", echo.headers["content-type"])
    assert.equal("1", echo.headers["x-mine"])
    assert.is_nil(echo.headers.expect)
    assert.same({ 200, "" }, { v[6], v[7] })
  end)

  it("does not hold the broker up: other runs go on while a request waits (control: the held answer arrives)", function()
    local b <close> = airlock.broker()
    local pol = { limits = { deadline_ms = 2 * H.GUARD_S * 1000 }, effects = {
      ["http.request"] = handlers.http { allow = { "127.0.0.1:" .. port }, timeout = H.GUARD_S .. "s" },
      ping = function(n) return n end } }
    local slow = assert(b:start { policy = pol, guest = string.format(
      "local r = host.http.request { url = %q } return r.status .. ' ' .. r.body", base .. "/hold") })
    local fast = assert(b:start { policy = pol, guest = "local s = 0 for i = 1, 200 do s = s + host.ping(i) end return s" })
    local results = {}
    local function until_done(run)
      while not results[run:id()] do
        for _, res in ipairs(assert(b:step(-1))) do results[res.run] = res end
      end
      return results[run:id()]
    end
    -- the other run makes 200 round trips while the request is held
    local fres = until_done(fast)
    assert.equal("ok", fres.cause, fres.message)
    assert.equal(20100, fres.value)
    assert.is_nil(results[slow:id()])
    assert.is_true(slow:live())
    -- released (a request of the host's own, performed now), the held one is answered
    assert.equal("released", handlers.http { allow = { "127.0.0.1:" .. port } } { url = base .. "/release" }.body)
    local sres = until_done(slow)
    assert.equal("ok", sres.cause, sres.message)
    assert.equal("200 held", sres.value)
  end)

  it("drops the request of a run that was cancelled, and the broker's next request is answered", function()
    local b <close> = airlock.broker()
    local pol = { limits = { deadline_ms = 2 * H.GUARD_S * 1000 }, effects = {
      ["http.request"] = handlers.http { allow = { "127.0.0.1:" .. port }, timeout = H.GUARD_S .. "s" } } }
    -- the held endpoint answers at once once released: hold a fresh server event
    local waiting = assert(b:start { policy = pol, guest = string.format(
      "return host.http.request { url = %q }.body", base .. "/hold2") })
    local results = {}
    local function step_until(pred)
      while not pred() do
        for _, res in ipairs(assert(b:step(200))) do results[res.run] = res end
      end
    end
    -- wait until the request is really in flight (the server logged it), then cancel
    step_until(function() return (slurp(tmp .. "/main.log") or ""):find("GET /hold2", 1, true) ~= nil end)
    assert.equal(1, handlers._http_in_flight(b))
    waiting:cancel()
    step_until(function() return results[waiting:id()] ~= nil end)
    assert.equal("cancelled", results[waiting:id()].cause)
    assert.equal(0, handlers._http_in_flight(b))   -- its transfer went with it
    assert.equal("released", handlers.http { allow = { "127.0.0.1:" .. port } } { url = base .. "/release2" }.body)
    local after = assert(b:start { policy = pol, guest = string.format(
      "return host.http.request { url = %q }.body", base .. "/hello") })
    step_until(function() return results[after:id()] ~= nil end)
    assert.equal("ok", results[after:id()].cause, results[after:id()].message)
    assert.equal("hello", results[after:id()].value)
  end)

  it("gives many requests at once their own answers, and refuses a bad one without disturbing them", function()
    local b <close> = airlock.broker()
    local pol = { limits = { deadline_ms = 2 * H.GUARD_S * 1000 }, effects = { ["http.request"] = http } }
    local runs = {}
    for i = 1, 12 do
      local url = i % 4 == 0 and ("http://127.0.0.1:" .. other .. "/x") or (base .. "/echo")
      runs[i] = assert(b:start { policy = pol, guest = string.format([[
        local ok, r = pcall(host.http.request, { url = %q, method = "POST", body = "run %d" })
        if not ok then return "refused: " .. tostring(r) end
        return r.body ]], url, i) })
    end
    local results = require("helper").step_all(b, 12)
    for i, run in ipairs(runs) do
      local res = results[run:id()]
      assert.equal("ok", res.cause, res.message)
      if i % 4 == 0 then
        assert.matches("refused: .*not in the allowlist", res.value)
      else
        local echo = require("dkjson").decode(res.value)
        assert.is_table(echo, tostring(res.value))
        assert.equal("run " .. i, echo.body)
      end
    end
    assert.equal("", other_log())
  end)

  it("follows redirects inside the allowlist, re-checking each", function()
    local r = http { url = base .. "/redirect-ok" }
    assert.equal(200, r.status)
    assert.equal("hello", r.body)
    assert.equal(base .. "/hello", r.url)
    -- 303 turns a POST into a GET without its body; credentials are dropped.
    local e = require("dkjson").decode(http { url = base .. "/redirect-303", method = "POST", body = "b",
                                              headers = { Authorization = "Bearer x" } }.body)
    assert.same({ "GET", "" }, { e.method, e.body })
    assert.is_nil(e.headers.authorization)
    -- 307 keeps the method and body.
    e = require("dkjson").decode(http { url = base .. "/redirect-echo", method = "POST", body = "kept" }.body)
    assert.same({ "POST", "kept" }, { e.method, e.body })
    assert.matches("too many redirects %(max 5%)", refusal(http, { url = base .. "/redirect-loop" }))
  end)

  it("refuses a redirect to a host that is not allowed, without contacting it", function()
    local res = run(string.format("return host.http.request { url = %q }", base .. "/redirect-out"),
                    { ["http.request"] = http })
    assert.is_false(res.ok)
    assert.matches("denied: redirect to 'http://127.0.0.1:" .. other ..
                   "/stolen': host '127.0.0.1:" .. other .. "' is not in the allowlist", res.message, 1, true)
    assert.matches("denied: only http and https", refusal(http, { url = base .. "/redirect-file" }))
    assert.equal("", other_log())
  end)

  it("refuses hosts, ports and schemes outside the allowlist, compared after URL parsing", function()
    local urls = {
      "http://127.0.0.1:" .. other .. "/x",
      "http://localhost:" .. port .. "/hello",          -- a name, not the allowed address
      "http://127.0.0.1:" .. port .. "@127.0.0.1:" .. other .. "/x",
      "http://2130706433:" .. other .. "/x",            -- 127.0.0.1 in decimal, other port
      "http://127.0.0.1/x", "https://127.0.0.1:" .. other .. "/",
      "ftp://127.0.0.1:" .. port .. "/", "file:///etc/passwd", "gopher://127.0.0.1:" .. port .. "/",
      "dict://127.0.0.1:" .. port .. "/", "not a url", "",
    }
    for _, u in ipairs(urls) do
      local err = refusal(http, { url = u })
      local want = (u == "not a url" or u == "") and ": bad URL: " or "denied: "
      assert.matches(want, err, 1, true)
    end
    -- The same decimal spelling of an allowed address and port is that address.
    assert.equal("hello", http { url = "http://2130706433:" .. port .. "/hello" }.body)
    assert.equal("hello", http { url = "HTTP://127.0.0.1:" .. port .. "/hello#frag" }.body)
    assert.equal("", other_log())
  end)

  it("bounds the response and enforces the timeout", function()
    assert.matches("response body larger than 1048576 bytes", refusal(http, { url = base .. "/big" }))
    assert.matches("response body larger than 1048576 bytes", refusal(http, { url = base .. "/stream" }))
    -- /slow never answers: only the timeout can end the request
    local quick = handlers.http { allow = { "127.0.0.1:" .. port }, timeout = "1s" }
    local err = refusal(quick, { url = base .. "/slow" })
    assert.matches("timed out after 1000 ms", err)
  end)

  it("refuses hostile arguments", function()
    local cases = {
      { 42, "expects a table" }, { {}, "args.url must be a string" },
      { { url = ("x"):rep(9000) }, "longer than 8192" },
      { { url = base, method = "DELETE" }, "denied: method 'DELETE' is not allowed" },
      { { url = base, method = 1 }, "args.method must be a string" },
      { { url = base, body = {} }, "args.body must be a string" },
      { { url = base, method = "POST", body = ("b"):rep((1 << 20) + 1) }, "larger than max_bytes" },
      { { url = base, headers = "x" }, "args.headers must be a table" },
      { { url = base, headers = { ["X-A"] = "v\r\nHost: evil" } }, "denied: bad value for header" },
      { { url = base, headers = { ["X A"] = "v" } }, "denied: bad header name" },
      { { url = base, headers = { "X-A: v" } }, "denied: bad header name" },
      { { url = base, headers = { Host = "evil" } }, "denied: header 'Host' cannot be set" },
      { { url = base, headers = { ["Transfer-Encoding"] = "chunked" } }, "cannot be set" },
      { { url = base, headers = { ["X-A"] = 1 } }, "denied: bad value for header" },
      { { url = base .. "/\0" }, "NUL" },
    }
    for _, c in ipairs(cases) do
      assert.matches(c[2], refusal(http, c[1]), 1, true)
    end
    local many = {}
    for i = 1, 65 do many["X-" .. i] = "v" end
    assert.matches("more than 64 headers", refusal(http, { url = base, headers = many }))
  end)

  it("checks its own options", function()
    assert.has_error(function() handlers.http {} end)
    assert.has_error(function() handlers.http { allow = { "a b" } } end)
    assert.has_error(function() handlers.http { allow = { "x" }, timeout = "soon" } end)
    assert.has_error(function() handlers.http { allow = { "x" }, alow = 1 } end, "http: unknown option 'alow'")
  end)
end)
