-- spec/lua/egress_spec.lua -- tool.network: a program reaches named hosts
-- through its run's egress proxy, and nothing else. Every upstream is a local
-- server of this spec (python3, on 127.0.0.1), which the policies name by
-- address, since loopback is refused unless named. Each hostile case is a
-- real attempt with a control that succeeds.
local H = require "helper"
local airlock = require "airlock"
local policy = require "airlock.policy"
local json = require "dkjson"

local SERVER = [[
import http.server, socketserver, sys, time, json
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == "/headers":
            body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        elif self.path == "/stream":
            # endless: only the proxy closing this connection ends it, which /stream-ended then says
            self.send_response(200); self.end_headers()
            try:
                while True:
                    self.wfile.write(b"x" * 65536); self.wfile.flush(); time.sleep(0.005)
            except Exception:
                self.server.stream_ended = True
            return
        elif self.path == "/stream-ended":
            body = b"yes" if getattr(self.server, "stream_ended", False) else b"no"
        elif self.path.startswith("/pypi/"):
            # a package index of the spec's own (PEP 503 simple pages and files), from argv[2]
            import os
            rel = os.path.normpath(self.path[len("/pypi/"):]).lstrip("/")
            full = os.path.join(sys.argv[2], rel)
            if os.path.isdir(full): full = os.path.join(full, "index.html")
            if ".." in rel or not os.path.isfile(full):
                self.send_response(404); self.end_headers(); return
            body = open(full, "rb").read()
            self.send_response(200)
            self.send_header("Content-Type", "text/html" if full.endswith(".html") else "application/octet-stream")
            self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body); return
        elif self.path == "/redirect":
            self.send_response(302); self.send_header("Location", "http://denied.example.net/next")
            self.send_header("Content-Length", "0"); self.end_headers(); return
        elif self.path == "/missing":
            self.send_response(404); self.end_headers(); self.wfile.write(b"no such thing\n"); return
        else:
            body = b"hello from upstream\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256
s = S(("127.0.0.1", 0), H)
import os
open(sys.argv[1] + ".tmp", "w").write(str(s.server_address[1]))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])   # whole, or not there at all
s.serve_forever()
]]

local function exec(argv, pol, extra)
  -- The timeout is a guard against a hang, never what a case measures.
  local opts = { argv = argv, workspace = H.ws, timeout = H.GUARD_S .. "s", policy = pol }
  for k, v in pairs(extra or {}) do opts[k] = v end
  local res, err, code = airlock.exec(opts)
  assert(res, "exec refused: " .. tostring(err) .. " (" .. tostring(code) .. ")")
  return res
end

local function py(code, pol, extra) return exec({ "python3", "-c", code }, pol, extra) end

describe("tool.network: the egress proxy", function()
  local port, url, pol
  setup(function()
    H.root = H.tmpdir()
    H.ws = H.root .. "/ws"
    assert(os.execute("mkdir -p " .. H.ws))
    H.write(H.root .. "/server.py", SERVER)
    -- A package index: one wheel, made here by hand, and its PEP 503 pages.
    local idx = H.root .. "/index"
    assert(os.execute("mkdir -p " .. idx .. "/simple/hello-airlock " .. idx .. "/files"))
    H.write(H.root .. "/mkwheel.py", table.concat({
      "import zipfile, hashlib, base64, sys",
      "files = {'hello_airlock/__init__.py': b'def hi():\\n    return 1\\n',",
      " 'hello_airlock-1.0.dist-info/METADATA': b'Metadata-Version: 2.1\\nName: hello-airlock\\nVersion: 1.0\\n',",
      " 'hello_airlock-1.0.dist-info/WHEEL': b'Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'}",
      "rec = [n + ',sha256=' + base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode() + ',' + str(len(d)) for n, d in files.items()]",
      "files['hello_airlock-1.0.dist-info/RECORD'] = ('\\n'.join(rec + ['hello_airlock-1.0.dist-info/RECORD,,']) + '\\n').encode()",
      "z = zipfile.ZipFile(sys.argv[1] + '/files/hello_airlock-1.0-py3-none-any.whl', 'w')",
      "[z.writestr(n, d) for n, d in files.items()]",
      "z.close()" }, "\n"))
    assert(os.execute("python3 " .. H.root .. "/mkwheel.py " .. idx))
    H.write(idx .. "/simple/hello-airlock/index.html",
      '<html><body><a href="../../files/hello_airlock-1.0-py3-none-any.whl">hello_airlock-1.0-py3-none-any.whl</a></body></html>\n')
    os.execute("python3 " .. H.root .. "/server.py " .. H.root .. "/port " .. idx .. " >/dev/null 2>&1 & echo $! > " ..
      H.root .. "/server.pid")
    -- the server writes its port (bound to port 0) once it listens
    port = H.wait_until("the spec's upstream server to listen",
      function() return tonumber(H.slurp(H.root .. "/port") or "") end)
    url = "http://127.0.0.1:" .. port
    pol = { tool = { network = { allow = { "127.0.0.1:" .. port } } } }
  end)
  teardown(function()
    os.execute("kill $(cat " .. H.root .. "/server.pid) 2>/dev/null")
    os.execute("rm -rf " .. H.root)
  end)

  it("lets curl reach an allowed host, as curl does directly: same body, same status", function()
    local direct = H.sh("env -u LD_PRELOAD curl -sS " .. url .. "/ ; echo rc=$?")
    local res = exec({ "curl", "-sS", url .. "/" }, pol)
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.are.equal(direct, res.stdout .. "rc=0\n")
    assert.are.equal("hello from upstream\n", res.stdout)
    -- the same failure too: a 404 under -f is curl's 22 both ways
    local d404 = H.sh("env -u LD_PRELOAD curl -sSf " .. url .. "/missing >/dev/null 2>&1; echo $?")
    local r404 = exec({ "curl", "-sSf", url .. "/missing" }, pol)
    assert.are.equal(tonumber(d404), r404.exit_code)
    -- and through a CONNECT tunnel (curl -p), as https would go
    res = exec({ "curl", "-sS", "-p", url .. "/" }, pol)
    assert.are.equal("hello from upstream\n", res.stdout, res.stderr)
    local c = res.network[1]
    assert.are.equal("connect", c.kind)
    assert.are.equal("allow", c.decision)
    assert.are.equal("127.0.0.1", c.address)
    assert.is_true(c.bytes_down > #"hello from upstream\n" and c.bytes_up > 0)
    assert.is_number(c.ms)
    assert.are.equal('tool.network.allow[1] ("127.0.0.1:' .. port .. '")', c.rule)
    assert.is_nil(res.sandbox)
    assert.matches("^applied: through the run's egress proxy", res.confinement.network)
  end)

  it("speaks SOCKS5 on the same port: CONNECT to an allowed host tunnels, another is refused by the ruleset", function()
    local proxy = "127.0.0.1:" .. require("airlock.egress").PORT
    local res = exec({ "curl", "-sS", "--socks5-hostname", proxy, url .. "/" }, pol)
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.are.equal("hello from upstream\n", res.stdout)
    assert.are.equal("connect", res.network[1].kind)
    assert.are.equal("allow", res.network[1].decision)
    -- by address (ATYP 1) as well as by name (ATYP 3)
    res = exec({ "curl", "-sS", "--socks5", proxy, url .. "/" }, pol)
    assert.are.equal("hello from upstream\n", res.stdout, res.stderr)
    -- a host the policy does not name: SOCKS5 reply 2, which curl reports (97), and a violation
    res = exec({ "curl", "-sS", "--socks5-hostname", proxy, "http://other.example.net/" }, pol)
    assert.are.equal(97, res.exit_code, res.stderr)
    assert.matches("SOCKS5 connection to other.example.net%. %(2%)", res.stderr)   -- 2: not allowed by ruleset
    assert.are.equal("tool.network.allow", res.violations[1].rule)
    assert.are.equal("CONNECT other.example.net:80", res.violations[1].what)
  end)

  it("re-decides a redirect: the next hop to a host the policy does not name is refused", function()
    -- control: the allowed host's own answer, followed by curl -L, ends at the redirect's target
    local res = exec({ "curl", "-sS", "-f", "-L", url .. "/redirect" }, pol)
    assert.are.equal(22, res.exit_code, res.stderr)   -- curl: the second hop was answered 403
    assert.are.equal(2, #res.network)
    assert.are.equal("allow", res.network[1].decision)
    assert.are.equal("denied.example.net", res.network[2].host)
    assert.are.equal("deny", res.network[2].decision)
    assert.are.equal("GET http://denied.example.net:80/", res.violations[1].what)   -- the host and port decided
    -- without -L the redirect itself is the answer: no second connection
    res = exec({ "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", url .. "/redirect" }, pol)
    assert.are.equal("302", res.stdout)
    assert.are.equal(1, #res.network)
  end)

  it("lets pip download from an allowed index, and fails fast against an index the policy does not name", function()
    local pip = "python3 -m pip download --no-cache-dir --disable-pip-version-check --no-deps --retries 0 " ..
      "--timeout 60 -d out --index-url "
    local res = exec({ "sh", "-c", pip .. url .. "/pypi/simple hello-airlock" }, pol)
    assert.are.equal("ok", res.cause, res.message .. res.stdout .. res.stderr)
    assert.truthy(H.slurp(H.ws .. "/out/hello_airlock-1.0-py3-none-any.whl"), "the wheel is in the workspace")
    for _, c in ipairs(res.network) do assert.are.equal("allow", c.decision) end
    assert.is_true(#res.network >= 2)   -- the index page, then the wheel
    os.execute("rm -rf " .. H.ws .. "/out")
    res = exec({ "sh", "-c", pip .. "http://pypi.example.net/simple --trusted-host pypi.example.net hello-airlock" }, pol)
    assert.are.equal(1, res.exit_code, res.stderr)
    -- refused by the proxy's answer, not given up on after pip's own timeout
    assert.is_nil(res.stderr:lower():find("timed out", 1, true), res.stderr)
    assert.are.equal("deny", res.network[1].decision)
    assert.are.equal("tool.network.allow", res.violations[1].rule)
    assert.is_nil(H.slurp(H.ws .. "/out/hello_airlock-1.0-py3-none-any.whl"))
  end)

  it("gives the program the proxy in every spelling, and no network without tool.network", function()
    local res = exec({ "env" }, pol)
    for _, k in ipairs { "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy" } do
      assert.matches("\n" .. k .. "=http://127.0.0.1:3128\n", "\n" .. res.stdout)
    end
    res = exec({ "curl", "-sS", url .. "/" })
    assert.are_not.equal(0, res.exit_code)
    assert.matches("^skipped: none", res.confinement.network)
  end)

  it("makes a program that ignores the proxy variables fail at once, never hang", function()
    -- At once: an errno that refuses, never a connect timeout (ETIMEDOUT) or the run's guard.
    local res = py([[
import socket, errno
for addr in [("127.0.0.1", ]] .. port .. [[), ("203.0.113.7", 80), ("8.8.8.8", 53)]:
    s = socket.socket()
    try:
        s.connect(addr); print("connected", addr)
    except OSError as e:
        print(addr[0], errno.errorcode[e.errno])
]], pol)
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.is_nil(res.stdout:find("connected", 1, true))
    -- its own loopback holds the proxy alone, beyond it there is no route, and
    -- where Landlock has TCP rules a connect to any port but the proxy's is EACCES
    for _, a in ipairs { "127.0.0.1", "203.0.113.7", "8.8.8.8" } do
      local e = res.stdout:match(a:gsub("%.", "%%.") .. " (%u+)")
      assert.truthy(e == "EACCES" or e == "ENETUNREACH" or e == "ECONNREFUSED", res.stdout)
    end
    -- curl told not to use the proxy fails the same way, with its own words
    res = exec({ "curl", "-sS", "--noproxy", "*", url .. "/" }, pol)
    assert.are.equal(7, res.exit_code)
  end)

  it("refuses a host no pattern names, and a denied one even when allowed: 403 with the field to change", function()
    local p = { tool = { network = { allow = { "*.example.org", "127.0.0.1:" .. port }, deny = { "bad.example.org" } } } }
    local res = exec({ "curl", "-sS", "-p", "https://bad.example.org/" }, p)
    assert.are.equal(56, res.exit_code, res.stderr)   -- curl: the CONNECT was answered 403
    local v = res.violations[1]
    assert.are.equal("network", v.kind)
    assert.are.equal("CONNECT bad.example.org:443", v.what)
    assert.are.equal("tool.network.deny", v.rule)
    assert.matches('deny%[1%] %("bad.example.org"%)', v.reason)
    assert.is_number(v.at)
    assert.are.equal("refused", res.sandbox)
    res = exec({ "curl", "-sS", "-f", "http://other.example.net/" }, p)
    assert.are.equal(22, res.exit_code)
    assert.are.equal("tool.network.allow", res.violations[1].rule)
    assert.matches('add "other.example.net:80" to tool.network.allow', res.violations[1].reason)
    -- a port the pattern does not name is another host, for the policy
    res = exec({ "curl", "-sS", "-f", "http://127.0.0.1:" .. (port == 1 and 2 or port - 1) .. "/" }, p)
    assert.are.equal(22, res.exit_code)
    -- an address literal needs a pattern naming it: a wildcard never matches one
    res = exec({ "curl", "-sS", "-f", "http://10.1.2.3/" }, p)
    assert.matches("an address is allowed only when a pattern names it", res.violations[1].reason)
  end)

  it("denies a host named without a port on every port, where an allow pattern names the port", function()
    -- the control: allowed by address and port, the request arrives
    local res = exec({ "curl", "-sS", "-f", url .. "/" }, pol)
    assert.are.equal("hello from upstream\n", res.stdout, res.stderr)
    -- the same address denied without a port: refused on the allowed port too
    local p = { tool = { network = { allow = { "127.0.0.1:" .. port }, deny = { "127.0.0.1" } } } }
    res = exec({ "curl", "-sS", "-f", url .. "/" }, p)
    assert.are.equal(22, res.exit_code, res.stdout)
    assert.are.equal("", res.stdout)
    assert.are.equal("tool.network.deny", res.violations[1].rule)
    assert.matches('deny%[1%] %("127.0.0.1"%) refuses 127.0.0.1:' .. port, res.violations[1].reason)
  end)

  it("takes localhost and its loopback address as one host, whichever the pattern names", function()
    for _, c in ipairs { { "localhost:" .. port, "http://127.0.0.1:" .. port },
                         { "127.0.0.1:" .. port, "http://localhost:" .. port },
                         { "localhost:" .. port, "http://localhost:" .. port } } do
      local res = exec({ "curl", "-sS", "-f", c[2] .. "/" }, { tool = { network = { allow = { c[1] } } } })
      assert.are.equal("hello from upstream\n", res.stdout, c[1] .. " for " .. c[2] .. ": " .. res.stderr)
    end
    -- the control: the same pattern on another port refuses it
    local res = exec({ "curl", "-sS", "-f", "http://localhost:" .. port .. "/" },
      { tool = { network = { allow = { "localhost:" .. (port + 1) } } } })
    assert.are.equal(22, res.exit_code)
    assert.are.equal("", res.stdout)
  end)

  it("refuses another name that resolves to loopback unless the address is named", function()
    -- a name of /etc/hosts for a loopback address other than localhost (Debian's 127.0.1.1 hostname, ip6-*)
    local name
    for line in io.lines("/etc/hosts") do
      local addr, names = line:match("^%s*(127%.[%d.]+)%s+([^#]+)")
      for n in (names or ""):gmatch("%S+") do
        if not name and n ~= "localhost" and n:match("^[%w.-]+$") and addr == "127.0.0.1" then name = n end
      end
    end
    if not name then
      pending("skipped: /etc/hosts names 127.0.0.1 only as localhost here, so no other name resolves to it")
      return
    end
    local p = { tool = { network = { allow = { name .. ":" .. port } } } }
    local res = exec({ "curl", "-sS", "-f", "http://" .. name .. ":" .. port .. "/" }, p)
    assert.are.equal(22, res.exit_code)
    local v = res.violations[1]
    assert.matches(name:gsub("%p", "%%%0") .. " resolves to .* %(loopback%)", v.reason)
    assert.matches('add "127.0.0.1:' .. port .. '"', v.reason)
    -- the control: with the address named as well, the same name works
    p.tool.network.allow[2] = "127.0.0.1:" .. port
    res = exec({ "curl", "-sS", "-f", "http://" .. name .. ":" .. port .. "/" }, p)
    assert.are.equal("hello from upstream\n", res.stdout, res.stderr)
  end)

  it("stays up under a flood of connections: each is served or refused at once", function()
    -- 150 connections open at once, each with its request sent, then read
    local res = py([[
import socket
ok = refused = other = 0
socks = []
for i in range(150):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
    s.sendall(b"GET ]] .. url .. [[/ HTTP/1.1\r\nHost: x\r\n\r\n")
    socks.append(s)
for s in socks:
    data = b""
    while True:
        d = s.recv(65536)
        if not d: break
        data += d
    if b"hello from upstream" in data: ok += 1
    elif b" 503 " in data: refused += 1
    else: other += 1
print(ok, refused, other)
]], pol)
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    local ok, refused, other = res.stdout:match("(%d+) (%d+) (%d+)")
    assert.are.equal(150, tonumber(ok) + tonumber(refused), res.stdout)
    assert.are.equal("0", other)
    assert.is_true(tonumber(ok) >= 64, res.stdout)
    assert.is_true(res.network_total >= tonumber(ok))
    assert.is_true(#res.network <= 256)
  end)

  it("bounds a request head before storing it, and goes on serving", function()
    local res = py([[
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
try:
    s.sendall(b"GET ]] .. url .. [[/ HTTP/1.1\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
except OSError as e:
    pass
print(s.recv(200).split(b"\r\n")[0].decode())
s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
s.sendall(b"GET ]] .. url .. [[/ HTTP/1.1\r\nHost: x\r\n\r\n")
print(b"hello from upstream" in s.recv(65536) + s.recv(65536))
]], pol)
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.are.equal("HTTP/1.1 431 Request Header Fields Too Large\nTrue\n", res.stdout)
    assert.are.equal("network", res.violations[1].kind)
    assert.matches("^the egress proxy's bounds", res.violations[1].rule)
    assert.matches("request head over 16384 bytes", res.violations[1].reason)
  end)

  it("survives a client that disconnects mid-stream", function()
    -- After leaving, the program asks the upstream (through the proxy) until
    -- it says the stream's connection was closed on it: the proxy closes that
    -- only after the broker answered its egress.close, so the first
    -- connection's byte counts are in the result before the program ends.
    local res = py([[
import socket, time
def get(path):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
    s.sendall(b"GET ]] .. url .. [[" + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while True:
        d = s.recv(65536)
        if not d: break
        data += d
    return data
s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
s.sendall(b"GET ]] .. url .. [[/stream HTTP/1.1\r\nHost: x\r\n\r\n")
got = 0
while got < 300000:
    got += len(s.recv(65536))
s.close()
for _ in range(6000):
    if get(b"/stream-ended").endswith(b"yes"): break
    time.sleep(0.02)
else:
    print("the upstream never saw the stream's end")
s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
s.sendall(b"GET ]] .. url .. [[/ HTTP/1.1\r\nHost: x\r\n\r\n")
data = b""
while True:
    d = s.recv(65536)
    if not d: break
    data += d
print(b"hello from upstream" in data)
]], pol)
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.are.equal("True\n", res.stdout)
    local first = res.network[1]
    assert.are.equal("allow", first.decision)
    assert.is_true(first.bytes_down >= 300000, tostring(first.bytes_down))
    assert.is_nil(res.egress)   -- the proxy itself ended only when the run did
  end)

  it("adds a credential at the proxy to plain-HTTP requests; the program never holds it", function()
    local token = "s3cret-" .. H.pid()
    H.write(H.root .. "/token", token)
    local dir = H.root .. "/ledger-inject"
    local p = policy.extend("tool", {
      secrets = { api = { file = H.root .. "/token" } },
      tool = { network = { allow = { "127.0.0.1:" .. port },
                           inject = { ["127.0.0.1:" .. port] = { header = "Authorization", secret = "api",
                                                                prefix = "Bearer " } } } },
    })
    local res = exec({ "sh", "-c", "curl -sS -H 'Authorization: forged' " .. url .. "/headers; echo; env; " ..
                                   "cat /proc/self/environ | tr '\\0' '\\n'" }, p, { ledger = dir })
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    -- the upstream saw it (the program's own header was dropped), redacted on the way back
    local seen = json.decode(res.stdout:match("^(.-)\n"))
    assert.are.equal("Bearer [redacted:api]", seen.authorization)
    assert.is_nil(res.stdout:find(token, 1, true))
    assert.are.same({ "Authorization" }, res.network[1].injected)
    -- the ledger holds the connection, never the secret
    local all = H.sh("cat " .. dir .. "/* 2>/dev/null")
    assert.is_nil(all:find(token, 1, true))
    local kinds = {}
    for rec in require("airlock.ledger").records(dir) do kinds[rec.kind] = (kinds[rec.kind] or 0) + 1 end
    assert.are.equal(1, kinds.net)
    assert.are.equal(1, kinds["net.end"])
    -- https to that host would carry requests without it: the tunnel is refused
    res = exec({ "curl", "-sS", "-p", url .. "/" }, p)
    assert.are.equal(56, res.exit_code)
    assert.are.equal("tool.network.inject", res.violations[1].rule)
  end)

  it("records every attempt in the ledger: allowed ones and refusals", function()
    local dir = H.root .. "/ledger-net"
    local res = exec({ "sh", "-c", "curl -sS " .. url .. "/ >/dev/null; curl -sS -f http://nope.example.com/" },
      pol, { ledger = dir })
    assert.are.equal(22, res.exit_code)
    local net, viol = {}, {}
    for rec in require("airlock.ledger").records(dir) do
      if rec.kind == "net" then net[#net + 1] = rec end
      if rec.kind == "violation" then viol[#viol + 1] = rec end
    end
    assert.are.equal(1, #net)
    assert.are.equal("127.0.0.1", net[1].address)
    assert.are.equal(port, net[1].port)
    assert.are.equal(1, #viol)
    assert.are.equal("nope.example.com", viol[1].host)
    assert.are.equal("tool.network.allow", viol[1].rule)
    assert.truthy(H.sh(H.bin .. "/airlock ledger verify " .. dir .. " 2>&1; echo rc=$?"):match("rc=0"))
  end)

  it("says on the command's stderr which field would allow a refused connection", function()
    local pf = H.root .. "/pol.lua"
    H.write(pf, "return { tool = { network = { allow = { '127.0.0.1:" .. port .. "' } } } }")
    local out = H.sh(H.bin .. "/airlock exec --policy " .. pf .. " --workspace " .. H.ws ..
      " -- curl -sS -p https://pypi.org/ 2>&1; echo rc=$?")
    assert.matches("airlock exec: refused CONNECT pypi.org:443: no pattern of tool.network.allow names " ..
      "pypi.org:443; add \"pypi.org:443\" to tool.network.allow", out)
    assert.matches("rc=56", out)
  end)

  it("works for a caller who is not root, in a net namespace of the run's own", function()
    local nobody = H.NOBODY
    local cmd = require("airlock.core").fs_realpath(H.bin .. "/airlock")
    local probe = H.sh(nobody .. cmd .. " version 2>&1; echo rc=$?")
    if not probe:match("rc=0") then
      pending("skipped: uid 65534 cannot run " .. cmd .. " here: " .. probe)
      return
    end
    local ws = H.tmpdir()
    assert(os.execute("chmod 777 " .. ws))
    local pf = ws .. "/../egress-pol-" .. H.pid() .. ".lua"
    H.write(pf, "return { tool = { limits = { pids = 0, memory = 0, cpu = 0 }, " ..
      "network = { allow = { '127.0.0.1:" .. port .. "' } } } }")
    -- (--ceiling memory=0: tool.limits.memory = 0 is past the default memory ceiling)
    local out = H.sh("cd " .. ws .. " && " .. nobody .. cmd .. " exec --json --timeout " .. H.GUARD_S ..
      "s --ceiling memory=0 --policy " .. pf ..
      " --workspace " .. ws .. " -- curl -sS " .. url .. "/")
    os.execute("rm -rf " .. ws .. " " .. pf)
    local res = assert(json.decode(out), out)
    assert.are.equal("ok", res.cause, res.message)
    assert.are.equal("hello from upstream\n", res.stdout)
    assert.are.equal("allow", res.network[1].decision)
  end)

  it("validates patterns: no bare TLD wildcards, ports in range; allowing more loosens", function()
    for _, bad in ipairs { "*.com", "*", "a.*.org", "host:0", "host:70000", "::1", "exa mple.org" } do
      local ok, err = pcall(policy.extend, "tool", { tool = { network = { allow = { bad } } } })
      assert.is_false(ok, bad)
      assert.matches("tool.network.allow", err)
    end
    -- a URL or a path is not a pattern: the message names the pattern to write
    for bad, want in pairs { ["https://pypi.org/simple"] = "pypi.org", ["http://127.0.0.1:8080/"] = "127.0.0.1:8080",
                             ["pypi.org/simple"] = "pypi.org" } do
      local ok, err = pcall(policy.extend, "tool", { tool = { network = { allow = { bad } } } })
      assert.is_false(ok, bad)
      assert.matches('write "' .. want:gsub("%p", "%%%0") .. '"', err)
      assert.not_matches("IPv6", err)
    end
    local base = policy.extend("tool", { locked = policy.append { "tool.network" },
                                         tool = { network = { allow = { "pypi.org" } } } })
    local ok, err = pcall(policy.extend, base, { tool = { network = { allow = { "pypi.org", "evil.example" } } } })
    assert.is_false(ok)
    assert.matches("tool.network.allow", err)
    assert.is_true((pcall(policy.extend, base, { tool = { network = { allow = {}, deny = { "x.org" } } } })))
  end)

  it("asks tool.network.connect about what no pattern names", function()
    local asked = {}
    local p = policy.extend("tool", { tool = { network = {
      allow = { "127.0.0.1:" .. port },
      connect = function(args) asked[#asked + 1] = args.host .. ":" .. args.port; return false, "not today" end,
    } } })
    local res = exec({ "curl", "-sS", "-f", "http://mirror.example.com:8080/" }, p)
    assert.are.equal(22, res.exit_code)
    assert.are.same({ "mirror.example.com:8080" }, asked)
    assert.are.equal("tool.network.connect", res.violations[1].rule)
    assert.matches("not today", res.violations[1].reason)
  end)
end)
