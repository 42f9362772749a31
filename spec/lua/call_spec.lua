-- call_spec.lua -- the program side of fd 3: `airlock call` and the Python client
-- (examples/tool-effects/airlock_effects.py) against a fake parent, a small
-- /usr/bin/python3 script (Debian's python3-msgpack) that makes the socketpair,
-- starts the client with its end as fd 3, records every frame it receives and
-- answers each one as its mode says: well, with an error, or in breach of the
-- protocol. No broker is involved.
local H = require "helper"
local dk = require "dkjson"

local PY = "/usr/bin/python3"
local AIRLOCK = H.bin .. "/airlock"
local CLIENT = "examples/tool-effects/airlock_effects.py"

-- fake.py [--nonblock] MODE SEEN -- CMD...: exits with CMD's status (128+N
-- when killed by signal N); SEEN gets a JSON list of what CMD sent, one entry
-- per frame: {len, keys, frame} or {error}.
local FAKE = [=[
import json, os, socket, struct, sys, time
import msgpack

argv = sys.argv[1:]
nonblock = argv[0] == "--nonblock"
if nonblock:
    argv = argv[1:]
mode, seen_path, sep, cmd = argv[0], argv[1], argv[2], argv[3:]
assert sep == "--", "usage: fake.py [--nonblock] MODE SEEN -- CMD..."

parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
if nonblock:
    child.setblocking(False)
pid = os.fork()
if pid == 0:
    if child.fileno() != 3:
        os.dup2(child.fileno(), 3)
    os.set_inheritable(3, True)
    os.execvp(cmd[0], cmd)
child.close()

def recv_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = parent.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf

def frame(msg):
    body = msgpack.packb(msg, use_bin_type=True)
    return struct.pack(">I", len(body)) + body

seen = []
while True:
    hdr = recv_exact(4)
    if hdr is None:
        break
    (n,) = struct.unpack(">I", hdr)
    if n == 0 or n > (16 << 20):
        seen.append({"error": "bad length %d" % n})
        break
    body = recv_exact(n)
    if body is None:
        seen.append({"error": "truncated frame"})
        break
    try:
        msg = msgpack.unpackb(body, raw=False)
    except Exception as e:
        seen.append({"error": "undecodable: %s" % e})
        break
    seen.append({"len": n, "keys": sorted(msg), "frame": msg})
    cid = msg.get("id")
    if mode == "echo":
        parent.sendall(frame({"t": "reply", "id": cid, "ok": msg.get("args")}))
    elif mode.startswith("ok:"):
        parent.sendall(frame({"t": "reply", "id": cid, "ok": json.loads(mode[3:])}))
    elif mode == "nil":
        parent.sendall(frame({"t": "reply", "id": cid, "ok": None}))
    elif mode == "err":
        parent.sendall(frame({"t": "reply", "id": cid, "err": "no such file: notes.txt"}))
    elif mode == "denied":
        parent.sendall(frame({"t": "reply", "id": cid, "code": "denied",
                              "err": "denied: effect 'fs.read' is not granted by the policy"}))
    elif mode == "wrongid":
        parent.sendall(frame({"t": "reply", "id": cid + 1, "ok": 1}))
    elif mode == "huge":
        parent.sendall(b"\xff\xff\xff\xff")
    elif mode == "empty":
        parent.sendall(b"\x00\x00\x00\x00")
    elif mode == "garbage":
        parent.sendall(b"\x00\x00\x00\x03\xc1\xc1\xc1")
    elif mode == "notreply":
        parent.sendall(frame({"t": "call", "id": cid, "effect": "x", "args": None}))
    elif mode == "both":
        parent.sendall(frame({"t": "reply", "id": cid, "ok": 1, "err": "x"}))
    elif mode == "truncated":
        parent.sendall(struct.pack(">I", 100) + b"\x85" * 10)
        parent.shutdown(socket.SHUT_WR)
    elif mode == "hangup":
        parent.shutdown(socket.SHUT_WR)
    elif mode == "dribble":
        # a reply of a few hundred bytes, one byte at a time
        for b in frame({"t": "reply", "id": cid, "ok": {"args": msg.get("args"), "pad": "p" * 300}}):
            parent.sendall(bytes([b]))
            time.sleep(0.001)
    elif mode == "big":
        parent.sendall(frame({"t": "reply", "id": cid, "ok": "x" * (3 << 20)}))
    elif mode == "demo":
        # what examples/tool-effects/demo.sh asks for
        eff = msg.get("effect")
        if eff == "clock.now":
            parent.sendall(frame({"t": "reply", "id": cid, "ok": {"time": 1700000000, "clock": 0.25}}))
        elif eff == "random.int":
            parent.sendall(frame({"t": "reply", "id": cid, "ok": 4}))
        elif eff == "fs.read":
            parent.sendall(frame({"t": "reply", "id": cid, "err": "no such file: notes.txt"}))
        else:
            parent.sendall(frame({"t": "reply", "id": cid, "code": "denied",
                                  "err": "denied: effect '%s' is not granted by the policy" % eff}))
    else:
        sys.exit("fake.py: unknown mode " + mode)
parent.close()
_, status = os.waitpid(pid, 0)
with open(seen_path, "w") as f:
    json.dump(seen, f)
sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
]=]

-- Confines itself the way the tool policy confines a program (Landlock: the
-- system and the build read-only; seccomp: promises stdio rpath wpath cpath
-- fattr proc exec), then runs the command line arg[2] through /bin/sh.
local CONFINED = [=[
package.cpath = "build/lib/?.so;" .. package.cpath
local airlock = require "airlock"
local bin = arg[1]
local SYSTEM = { "/usr", "/lib", "/lib64", "/bin", "/etc" }
local read = { bin, "/dev/null" }
for _, p in ipairs(SYSTEM) do read[#read + 1] = p end
local exec = { bin }
for _, p in ipairs(SYSTEM) do exec[#exec + 1] = p end
local rep, err = airlock.confine {
  no_new_privs = true,
  landlock = { read = read, write = { "/dev/null" }, exec = exec, scope = true },
  seccomp = { promises = "stdio rpath wpath cpath fattr proc exec" },
}
if not rep then io.stderr:write("confine: ", err, "\n") os.exit(90) end
if not (rep.landlock:match("^applied") and rep.seccomp:match("^applied")) then
  io.stderr:write("confine: not applied: ", rep.landlock, "; ", rep.seccomp, "\n")
  os.exit(91)
end
-- Landlock holds: the working directory (the project) is out of reach now.
if io.open("README.md", "rb") then io.stderr:write("confine: README.md is readable\n") os.exit(92) end
local ok, how, code = os.execute(arg[2])
if how == "signal" then os.exit(128 + code) end
os.exit(code)
]=]

local dir, fake, confined

local function q(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local slurp = H.read

local write = H.write

-- Runs the shell command line cmd with output to files: stdout, stderr, status.
-- LD_PRELOAD (the sanitizer run's libasan, for lua5.4) is not passed on: the
-- sanitizer build of airlock links its runtime itself. Python leaves no
-- __pycache__ in examples/.
local function run(cmd, stdin)
  local out, err = dir .. "/out", dir .. "/err"
  local p = io.popen(string.format("env -u LD_PRELOAD PYTHONDONTWRITEBYTECODE=1 %s >%s 2>%s%s; echo $?", cmd, out, err,
                                   stdin and (" <" .. q(stdin)) or " </dev/null"))
  local rc = tonumber(p:read("a"):match("(%d+)%s*$"))
  p:close()
  return slurp(out), slurp(err), rc
end

-- Runs argv (a list, quoted here) under the fake parent in the given mode.
-- Returns stdout, stderr, status and the frames the parent received.
local function with_parent(mode, argv, flags)
  local words = {}
  for i, a in ipairs(argv) do words[i] = q(a) end
  local seen = dir .. "/seen.json"
  os.remove(seen)
  local out, err, rc = run(string.format("%s %s %s %s %s -- %s", PY, q(fake), flags or "",
                                         q(mode), q(seen), table.concat(words, " ")))
  local f = io.open(seen, "rb")
  local frames = f and dk.decode(f:read("a")) or nil
  if f then f:close() end
  return out, err, rc, frames
end

local function call(mode, effect, json, flags)
  return with_parent(mode, { AIRLOCK, "call", effect, json }, flags)
end

local function pycall(mode, effect, json)
  return with_parent(mode, { PY, CLIENT, effect, json })
end

setup(function()
  dir = H.tmpdir()
  fake = dir .. "/fake.py"
  confined = dir .. "/confined.lua"
  write(fake, FAKE)
  write(confined, CONFINED)
  -- Without these the specs below cannot say anything: fail, loudly.
  local _, err, rc = run(PY .. " -c 'import msgpack'")
  assert(rc == 0, "/usr/bin/python3 needs Debian's python3-msgpack (apt-get install python3-msgpack): " .. err)
end)

teardown(function()
  if dir then os.execute("rm -rf " .. q(dir)) end
end)

describe("airlock call", function()
  it("sends one call frame and prints the ok value as one line of JSON", function()
    local out, err, rc, frames = call("echo", "fs.read", '{"path": "notes.txt", "n": [1, 2.5, true, "x"]}')
    assert.equal("", err)
    assert.equal(0, rc)
    assert.same({ n = { 1, 2.5, true, "x" }, path = "notes.txt" }, dk.decode(out))
    assert.equal(1, select(2, out:gsub("\n", "")))
    assert.equal(1, #frames)
    assert.same({ "args", "effect", "id", "t" }, frames[1].keys)
    assert.equal("call", frames[1].frame.t)
    assert.equal(1, frames[1].frame.id)
    assert.equal("fs.read", frames[1].frame.effect)
    assert.same({ path = "notes.txt", n = { 1, 2.5, true, "x" } }, frames[1].frame.args)
  end)

  it("sends args = nil when JSON-ARGS is left out, or is null", function()
    for _, json in ipairs { false, "null" } do
      local out, err, rc, frames = call("echo", "clock.now", json or nil)
      assert.equal("", err)
      assert.equal(0, rc)
      assert.equal("null\n", out)
      assert.same({ "args", "effect", "id", "t" }, frames[1].keys)
      assert.is_nil(frames[1].frame.args)
    end
  end)

  it("reads JSON-ARGS from stdin when it is -", function()
    local input = dir .. "/args.json"
    write(input, '{"text": "from stdin"}\n')
    local seen = dir .. "/seen.json"
    local out, err, rc = run(string.format("%s %s echo %s -- %s call log -", PY, q(fake), q(seen), AIRLOCK), input)
    assert.equal("", err)
    assert.equal(0, rc)
    assert.equal('{"text":"from stdin"}\n', out)
  end)

  it("prints strings, numbers and nil answers as JSON", function()
    local out, _, rc = call('ok:"line one\\nsays \\"hi\\""', "x")
    assert.equal(0, rc)
    assert.equal('"line one\\nsays \\"hi\\""\n', out)
    out, _, rc = call("ok:42", "x")
    assert.equal(0, rc)
    assert.equal("42\n", out)
    out, _, rc = call("nil", "x")
    assert.equal(0, rc)
    assert.equal("null\n", out)
    out, _, rc = call('ok:{"a": {"b": [1, 2]}}', "x")
    assert.equal(0, rc)
    assert.equal('{"a":{"b":[1,2]}}\n', out)
  end)

  it("reads a large reply (3 MiB) and one that arrives a byte at a time", function()
    local out, err, rc = call("big", "x")
    assert.equal("", err)
    assert.equal(0, rc)
    assert.equal('"' .. ("x"):rep(3 << 20) .. '"\n', out)
    out, err, rc = call("dribble", "x", '{"k": 1}')
    assert.equal("", err)
    assert.equal(0, rc)
    assert.same({ args = { k = 1 }, pad = ("p"):rep(300) }, dk.decode(out))
  end)

  it("waits on a non-blocking fd 3 instead of failing with EAGAIN", function()
    local out, err, rc = call("dribble", "x", '{"k": 2}', "--nonblock")
    assert.equal("", err)
    assert.equal(0, rc)
    assert.same({ k = 2 }, dk.decode(out).args)
  end)

  it("exits 1 with the parent's error, 3 when it was denied", function()
    local out, err, rc = call("err", "fs.read", '{"path": "notes.txt"}')
    assert.equal(1, rc)
    assert.equal("", out)
    assert.equal("airlock call: fs.read: no such file: notes.txt\n", err)
    out, err, rc = call("denied", "fs.read", '{"path": "/etc/shadow"}')
    assert.equal(3, rc)
    assert.equal("", out)
    assert.equal("airlock call: fs.read: denied: effect 'fs.read' is not granted by the policy\n", err)
  end)

  it("exits 2 on a reply that breaks the protocol", function()
    local cases = {
      { "wrongid", "protocol: the reply is for call 2, not for this call %(1%)" },
      { "huge", "protocol: the reply is 4294967295 bytes, over the limit of 16777216 bytes" },
      { "empty", "protocol: the parent sent an empty frame" },
      { "garbage", "protocol: the parent's reply is malformed" },
      { "notreply", "protocol: expected a 'reply' frame from the parent, got 'call'" },
      { "both", "protocol: the parent's reply is malformed: reply: fields 'ok' and 'err' cannot both be present" },
      { "truncated", "protocol: the parent closed fd 3 in the middle of the reply %(14 of 104 bytes%)" },
      { "hangup", "channel: the parent closed fd 3 without replying" },
    }
    for _, c in ipairs(cases) do
      local out, err, rc, frames = call(c[1], "x", "{}")
      assert.equal(2, rc, c[1] .. ": " .. err)
      assert.equal("", out, c[1])
      assert.matches("^airlock call: x: " .. c[2], err, nil, c[1])
      assert.equal(1, #frames, c[1])
    end
  end)

  it("exits 2 with a clear message when fd 3 is not an airlock channel", function()
    local out, err, rc = run(AIRLOCK .. " call clock.now 3<&-")
    assert.equal(2, rc)
    assert.equal("", out)
    assert.matches("^airlock call: clock.now: channel: fd 3 is not open: .*`airlock exec`", err)
    out, err, rc = run(AIRLOCK .. " call clock.now 3</dev/null")
    assert.equal(2, rc)
    assert.matches("^airlock call: clock.now: channel: fd 3 is a character device, not the airlock channel %(a socket%)", err)
    out, err, rc = run(AIRLOCK .. " call clock.now 3<" .. q(fake))
    assert.equal(2, rc)
    assert.matches("fd 3 is a regular file, not the airlock channel", err)
    out, err, rc = run("true | " .. AIRLOCK .. " call clock.now 3<&0")
    assert.equal(2, rc)
    assert.matches("fd 3 is a pipe, not the airlock channel", err)
  end)

  it("exits 2 on bad usage or bad JSON-ARGS, before sending anything", function()
    local cases = {
      { { "call" }, "airlock: call: expected EFFECT %[JSON%-ARGS%]" },
      { { "call", "x", "{}", "extra" }, "airlock: call: expected EFFECT %[JSON%-ARGS%]" },
      { { "call", "x", "--frob" }, "airlock: call: unknown option %-%-frob" },
      { { "call", "x", "{bad" }, "airlock call: x: JSON%-ARGS is not valid JSON: " },
      { { "call", "x", '{"a": 1} junk' }, "airlock call: x: JSON%-ARGS is not valid JSON: text after the value at byte 10" },
      { { "call", "", "{}" }, "airlock call: : usage: the effect name is empty" },
      { { "call", ("e"):rep(257) }, "usage: the effect name is 257 bytes, over the limit of 256" },
    }
    for _, c in ipairs(cases) do
      local argv = { AIRLOCK }
      for _, a in ipairs(c[1]) do argv[#argv + 1] = a end
      local out, err, rc, frames = with_parent("echo", argv)
      assert.equal(2, rc, table.concat(c[1], " "))
      assert.equal("", out)
      assert.matches(c[2], err)
      assert.same({}, frames)
    end
  end)

  it("works confined the way airlock exec confines a program", function()
    -- The release build: a process under seccomp cannot run ASan's runtime.
    local pwd = io.popen("pwd")
    local bin = pwd:read("l") .. "/build/bin"
    pwd:close()
    local out, err, rc, frames = with_parent("echo", { "lua5.4", confined, bin,
      bin .. "/airlock call fs.read '{\"path\": \"a\"}' && " .. bin .. "/airlock call clock.now" })
    assert.equal("", err)
    assert.equal(0, rc)
    assert.equal('{"path":"a"}\nnull\n', out)
    assert.equal(2, #frames)
    assert.equal("clock.now", frames[2].frame.effect)
    assert.equal(1, frames[2].frame.id)   -- each client process numbers its own calls
  end)
end)

describe("examples/tool-effects/demo.sh", function()
  it("asks four effects and says how each went", function()
    local out, err, rc, frames = with_parent("demo", { "env", "AIRLOCK=" .. AIRLOCK, "sh",
                                                       "examples/tool-effects/demo.sh" })
    assert.equal("", err)
    assert.equal(0, rc)
    assert.equal([[
clock.now   ok      {"clock":0.25,"time":1700000000}
random.int  ok      4
fs.read     failed  no such file: notes.txt
net.fetch   denied  denied: effect 'net.fetch' is not granted by the policy
]], out)
    assert.equal(4, #frames)
    assert.same({ path = "notes.txt" }, frames[3].frame.args)
    assert.same({ min = 1, max = 6 }, frames[2].frame.args)
  end)

  it("exits 2 with the client's message when there is no parent", function()
    local out, err, rc = run("env AIRLOCK=" .. AIRLOCK .. " sh examples/tool-effects/demo.sh 3<&-")
    assert.equal(2, rc)
    assert.equal("", out)
    assert.matches("^airlock call: clock.now: channel: fd 3 is not open", err)
  end)
end)

describe("examples/tool-effects/airlock_effects.py", function()
  it("makes the same call and prints the same JSON as airlock call", function()
    local out, err, rc, frames = pycall("echo", "fs.read", '{"path": "notes.txt", "n": [1, 2.5, true, "x"]}')
    assert.equal("", err)
    assert.equal(0, rc)
    assert.same({ n = { 1, 2.5, true, "x" }, path = "notes.txt" }, dk.decode(out))
    assert.same({ "args", "effect", "id", "t" }, frames[1].keys)
    assert.same({ t = "call", id = 1, effect = "fs.read", args = { path = "notes.txt", n = { 1, 2.5, true, "x" } } },
                frames[1].frame)
    out, _, rc, frames = pycall("echo", "clock.now")
    assert.equal(0, rc)
    assert.equal("null\n", out)
    assert.same({ "args", "effect", "id", "t" }, frames[1].keys)
  end)

  it("numbers its calls 1, 2, 3 within a process and reads large and dribbled replies", function()
    local prog = dir .. "/three.py"
    write(prog, [[
import sys
sys.path.insert(0, "examples/tool-effects")
from airlock_effects import call
print(call("a", 1), call("b", [1, 2]), call("c", {"k": "v"}))
]])
    local out, err, rc, frames = with_parent("echo", { PY, prog })
    assert.equal("", err)
    assert.equal(0, rc)
    assert.equal("1 [1, 2] {'k': 'v'}\n", out)
    assert.equal(3, #frames)
    for i, name in ipairs { "a", "b", "c" } do
      assert.equal(i, frames[i].frame.id)
      assert.equal(name, frames[i].frame.effect)
    end
    out, err, rc = pycall("big", "x")
    assert.equal(0, rc, err)
    assert.equal(3 * 2 ^ 20 + 3, #out)
    out, err, rc = pycall("dribble", "x", "7")
    assert.equal(0, rc, err)
    assert.equal(7, dk.decode(out).args)
  end)

  it("exits 1 on an error, 3 when denied, and raises Denied / EffectError", function()
    local out, err, rc = pycall("err", "fs.read", "{}")
    assert.equal(1, rc)
    assert.equal("", out)
    assert.equal("airlock_effects: fs.read: no such file: notes.txt\n", err)
    out, err, rc = pycall("denied", "fs.read", "{}")
    assert.equal(3, rc)
    assert.equal("airlock_effects: fs.read: denied: effect 'fs.read' is not granted by the policy\n", err)
    local prog = dir .. "/denied.py"
    write(prog, [[
import sys
sys.path.insert(0, "examples/tool-effects")
from airlock_effects import call, Denied, EffectError
try:
    call("fs.read", {"path": "/etc/shadow"})
except Denied as e:
    print("denied", e.effect, e.code, isinstance(e, EffectError))
]])
    out, err, rc = with_parent("denied", { PY, prog })
    assert.equal("", err)
    assert.equal(0, rc)
    assert.equal("denied fs.read denied True\n", out)
  end)

  it("exits 2 on a reply that breaks the protocol, or without a channel", function()
    local cases = {
      { "wrongid", "protocol: the reply is for call 2, not for this call %(1%)" },
      { "huge", "protocol: the reply is 4294967295 bytes, over the limit of 16777216 bytes" },
      { "empty", "protocol: the parent sent an empty frame" },
      { "garbage", "protocol: the parent's reply is malformed" },
      { "notreply", "protocol: expected a 'reply' frame from the parent, got 'call'" },
      { "both", "protocol: the reply must carry exactly one of 'ok' and 'err'" },
      { "truncated", "protocol: the parent closed fd 3 in the middle of the reply's body" },
      { "hangup", "channel: the parent closed fd 3 without replying" },
    }
    for _, c in ipairs(cases) do
      local out, err, rc = pycall(c[1], "x", "{}")
      assert.equal(2, rc, c[1] .. ": " .. err)
      assert.equal("", out, c[1])
      assert.matches("^airlock_effects: x: " .. c[2], err, nil, c[1])
    end
    local out, err, rc = run(PY .. " " .. CLIENT .. " x 3<&-")
    assert.equal(2, rc)
    assert.equal("", out)
    assert.matches("^airlock_effects: x: channel: fd 3 is not open", err)
    _, err, rc = run(PY .. " " .. CLIENT .. " x 3</dev/null")
    assert.equal(2, rc)
    assert.matches("fd 3 is not the airlock channel %(a socket%)", err)
  end)
end)
