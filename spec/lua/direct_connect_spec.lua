-- spec/lua/direct_connect_spec.lua -- a run with tool.network reaches the
-- network only through its proxy; a program that connects directly is refused
-- by the kernel as before (Landlock's TCP rule, the empty namespace), and now
-- airlock names the destination, the proxy and tool.network.allow, in the
-- result and on the command's stderr. The upstream is a local server of this
-- spec (python3 on 127.0.0.1), which the direct connect reaches unconfined.
local H = require "helper"
local airlock = require "airlock"
local core = require "airlock.core"
local json = require "dkjson"

local SERVER = [[
import http.server, socketserver, sys, os
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def log_message(self, *a): pass
    def do_GET(self):
        body = b"hello from upstream\n"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
s = S(("127.0.0.1", 0), H)
open(sys.argv[1] + ".tmp", "w").write(str(s.server_address[1]))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])   # whole, or not there at all
s.serve_forever()
]]

-- Connects straight to 127.0.0.1:PORT (no proxy), asks for / and prints the
-- answer's first line, or the errno the connect failed with.
local CLIENT = [[
import socket, sys
try:
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=100)
    c.sendall(b"GET / HTTP/1.0\r\n\r\n")
    print("answered", c.makefile("rb").readline().decode().strip())
except OSError as e:
    print("errno", e.errno)
]]

describe("tool.network: a direct connect", function()
  local root, port, pol, client, want_errno
  setup(function()
    root = H.tmpdir()
    assert(os.execute("chmod 755 " .. root))
    H.write(root .. "/server.py", SERVER)
    client = root .. "/client.py"
    H.write(client, CLIENT)
    os.execute("python3 " .. root .. "/server.py " .. root .. "/port >/dev/null 2>&1 & echo $! > " .. root .. "/server.pid")
    port = H.wait_until("the spec's upstream server to listen",
      function() return tonumber(H.slurp(root .. "/port") or "") end)
    pol = { tool = { network = { allow = { "127.0.0.1:" .. port } } } }
    -- Landlock's TCP rules (ABI 4) refuse it with EACCES; without them the
    -- run's empty namespace does (nothing listens on its loopback).
    want_errno = H.landlock_abi() >= 4 and 13 or 111
  end)
  teardown(function()
    os.execute("kill $(cat " .. root .. "/server.pid) 2>/dev/null")
    os.execute("rm -rf " .. root)
  end)

  -- Runs argv in a workspace of its own, which holds the client (the run's
  -- /tmp is private: the workspace is where a program finds its files).
  local function exec(argv, p)
    -- The timeout is a guard against a hang, never what a case measures.
    local ws = H.tmpdir()
    H.write(ws .. "/client.py", CLIENT)
    local res, err, code = airlock.exec { argv = argv, workspace = ws, timeout = H.GUARD_S .. "s", policy = p }
    os.execute("rm -rf " .. ws)
    return assert(res, "exec refused: " .. tostring(err) .. " (" .. tostring(code) .. ")")
  end
  local function direct_violations(res)
    local out = {}
    for _, v in ipairs(res.violations or {}) do
      if v.kind == "network" and v.reason:match("^a direct connection") then out[#out + 1] = v end
    end
    return out
  end

  it("reaches the server unconfined (the control)", function()
    local out, rc = H.sh("env -u LD_PRELOAD /usr/bin/python3 " .. client .. " " .. port)
    assert.are.equal(0, rc, out)
    assert.are.equal("answered HTTP/1.0 200 OK\n", out)
  end)

  it("is refused as before, and named with the proxy and tool.network.allow", function()
    local res = exec({ "/usr/bin/python3", "client.py", tostring(port) }, pol)
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.are.equal("errno " .. want_errno .. "\n", res.stdout)
    local dest = "127.0.0.1:" .. port
    assert.are.same({ dest }, res.connects)
    assert.are.equal(1, res.connects_total)
    local v = direct_violations(res)
    assert.are.equal(1, #v)
    assert.are.equal(dest, v[1].what)
    assert.are.equal("tool.network.allow", v[1].rule)
    assert.matches("HTTP_PROXY=http://127.0.0.1:3128", v[1].reason, 1, true)
    -- the policy already lets the proxy reach it: the way is through the proxy
    assert.matches("tool.network.allow already lets reach it: connect through the proxy", v[1].reason, 1, true)
    -- one the policy does not name: the pattern to add, quoted
    local other = exec({ "/usr/bin/python3", "client.py", tostring(port) },
      { tool = { network = { allow = { "example.org" } } } })
    assert.are.equal("errno " .. want_errno .. "\n", other.stdout)
    assert.matches('add "' .. dest .. '" to tool.network.allow and connect through the proxy',
      direct_violations(other)[1].reason, 1, true)
  end)

  it("writes the refusal to the run's ledger, beside the proxy's decisions", function()
    local ws, dir = H.tmpdir(), H.tmpdir() .. "/l"
    H.write(ws .. "/client.py", CLIENT)
    local res = assert(airlock.exec { argv = { "/usr/bin/python3", "client.py", tostring(port) }, workspace = ws,
      timeout = H.GUARD_S .. "s", policy = pol, ledger = dir })
    os.execute("rm -rf " .. ws)
    assert.are.equal("errno " .. want_errno .. "\n", res.stdout)
    local found
    for rec in airlock.ledger.records(dir) do
      if rec.kind == "violation" and rec.violation == "network" and rec.what == "127.0.0.1:" .. port then found = rec end
    end
    assert.is_truthy(found, "no violation record of the direct connect")
    assert.are.equal("tool.network.allow", found.rule)
    assert.matches("^a direct connection", found.reason)
    assert.is_true(assert(airlock.ledger.verify(dir)).ok)
    os.execute("rm -rf " .. dir:match("^(.*)/l$"))
  end)

  it("records nothing in a run without tool.network", function()
    local res = exec({ "/usr/bin/python3", "client.py", tostring(port) }, {})
    assert.matches("^errno %d+\n$", res.stdout)   -- no network at all: refused, as always
    assert.is_nil(res.connects)
    assert.are.same({}, direct_violations(res))
  end)

  it("records nothing for a connect through the proxy", function()
    local res = exec({ "curl", "-sS", "http://127.0.0.1:" .. port .. "/" }, pol)
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.are.equal("hello from upstream\n", res.stdout)
    assert.is_nil(res.connects)
    assert.are.same({}, direct_violations(res))
  end)

  -- The command says it on stderr, for root and for a caller who is not.
  for _, who in ipairs { "root", "an unprivileged caller" } do
    it("is named on airlock exec's stderr, run by " .. who, function()
      local prefix = who == "root" and "" or H.NOBODY
      local cmd = core.fs_realpath(H.bin .. "/airlock")
      local probe = H.sh(prefix .. cmd .. " version 2>&1; echo rc=$?")
      if not probe:match("rc=0") then
        pending("skipped: " .. who .. " cannot run " .. cmd .. " here: " .. probe)
        return
      end
      local ws = H.tmpdir()
      H.write(ws .. "/client.py", CLIENT)
      assert(os.execute("chmod 777 " .. ws .. " && chmod 644 " .. ws .. "/client.py"))
      local pf = root .. "/pol-" .. (prefix == "" and "root" or "nobody") .. ".lua"
      H.write(pf, "return { tool = { limits = { pids = 0, memory = 0, cpu = 0 }, " ..
        "network = { allow = { '127.0.0.1:" .. port .. "' } } } }")
      assert(os.execute("chmod 644 " .. pf))
      local errf = ws .. "/../direct-err-" .. H.pid() .. "-" .. #prefix
      -- (--ceiling memory=0: tool.limits.memory = 0 is past the default memory ceiling)
      local out, rc = H.sh("(cd " .. ws .. " && " .. prefix .. cmd .. " exec --timeout " .. H.GUARD_S ..
        "s --ceiling memory=0 --policy " .. pf .. " --workspace " .. ws .. " -- /usr/bin/python3 client.py " ..
        port .. " 2>" .. errf .. ")")
      local err = H.slurp(errf) or ""
      -- and --json carries the record
      local jout = H.sh("cd " .. ws .. " && " .. prefix .. cmd .. " exec --json --timeout " .. H.GUARD_S ..
        "s --ceiling memory=0 --policy " .. pf .. " --workspace " .. ws .. " -- /usr/bin/python3 client.py " ..
        port)
      os.execute("rm -rf " .. ws .. " " .. errf)
      assert.are.equal(0, rc, out .. err)
      assert.are.equal("errno " .. want_errno .. "\n", out)
      assert.matches("airlock exec: refused 127.0.0.1:" .. port .. ": a direct connection: a program reaches " ..
        "the network only through the run's proxy (HTTP_PROXY=http://127.0.0.1:3128), which tool.network.allow",
        err, 1, true)
      local res = assert(json.decode(jout), jout)
      assert.are.same({ "127.0.0.1:" .. port }, res.connects)
    end)
  end
end)
