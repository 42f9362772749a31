-- ledger_proc_spec.lua -- each session's ledger in a confined process of its
-- own (airlock-ledgerd, core/ledger_proc.h): confined before it reads a byte
-- (checked from outside, and by real attempts from inside), the host never
-- holding a journal descriptor, producers failing closed when their ledger
-- process is killed -9 or stalls, other sessions carrying on, a restart under
-- a new grant losing no acknowledged record; hostile producers (a lie about
-- the session, a 4 GiB frame header, a flood) each with a control that works.
local H = require "helper"
local airlock = require "airlock"
local ledger = require "airlock.ledger"

local EPIPE, EACCES, ETIMEDOUT, EDQUOT, EPERM = 32, 13, 110, 122, 1
local SIGSYS, SIGKILL = 31, 9

local dirs = {}
local function tmpdir()
  local d = H.tmpdir() .. "/s"
  dirs[#dirs + 1] = d:match("^(.*)/s$")
  return d
end
local function rmdirs()
  for _, d in ipairs(dirs) do os.execute("rm -rf '" .. d .. "'") end
  dirs = {}
end

local function status(pid) return H.slurp("/proc/" .. pid .. "/status") or "" end
local function alive(pid)
  local s = status(pid)
  return s ~= "" and not s:match("State:%s*Z")
end
local function count(dir)
  local n = 0
  for _ in ledger.records(dir) do n = n + 1 end
  return n
end

-- A minimal msgpack encoder for hostile frames: maps with string keys,
-- strings, non-negative integers.
local function mp(v)
  if type(v) == "string" then
    assert(#v < 256)
    return (#v < 32 and string.char(0xa0 + #v) or string.char(0xd9, #v)) .. v
  elseif math.type(v) == "integer" then
    assert(v >= 0 and v < 128)
    return string.char(v)
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = { string.char(0x80 + #keys) }
  for _, k in ipairs(keys) do out[#out + 1] = mp(k) .. mp(v[k]) end
  return table.concat(out)
end
local function frame(body) return string.pack(">I4", #body) .. body end

describe("the ledger process", function()
  after_each(rmdirs)

  it("is confined before it reads: seccomp, no_new_privs, no capability, own net, no env, fds 0-3", function()
    local d = tmpdir()
    local L = assert(ledger.open(d, { create = true }))
    local pid = L:pid()
    assert.are_not.equal(H.pid(), pid)
    local st = status(pid)
    assert.matches("Seccomp:%s*2", st)
    assert.matches("NoNewPrivs:%s*1", st)
    assert.matches("CapEff:%s*0000000000000000", st)
    assert.matches("CapBnd:%s*0000000000000000", st)
    assert.are_not.equal(H.readlink("/proc/self/ns/net"), H.readlink("/proc/" .. pid .. "/ns/net"))
    assert.equal("", H.slurp("/proc/" .. pid .. "/environ"))
    -- Its descriptors: stdio on /dev/null, the socket, and the session's own files.
    local p = io.popen("ls -l /proc/" .. pid .. "/fd 2>/dev/null")
    local fds = p:read("a")
    p:close()
    local n = 0
    for fd, target in fds:gmatch("(%d+) %-> ([^\n]+)") do
      n = n + 1
      fd = tonumber(fd)
      if fd <= 2 then assert.equal("/dev/null", target)
      elseif fd == 3 then assert.matches("^socket:", target)
      else assert.is_truthy(target == d .. "/journal" or target == d .. "/lock", target) end
    end
    assert.is_true(n >= 5 and n <= 6, fds)
    L:close()
  end)

  it("cannot leave its directory, nor exec: real attempts from inside, with a control", function()
    local d = tmpdir()
    os.execute("mkdir -p -m 700 '" .. d .. "'")
    local got, st = assert(require("airlock.core").ledger_proc_probe(ledger.program(), d))
    assert.equal(0, got["write inside"])                 -- the control
    assert.equal(-EACCES, got["read /etc/passwd"])
    assert.equal(-EACCES, got["write /tmp"])
    assert.equal(-EACCES, got["write beside the session"])
    assert.equal(0, got["environment"])
    assert.equal(1, got["execve"])                       -- it tried
    assert.is_nil(got["execve returned"])                -- and died there
    assert.equal(SIGSYS, st.signal)
    assert.is_nil(H.slurp(d .. "/../probe-outside"))
  end)

  it("is the module's only way to a journal: no in-process open, reader, verify or branch", function()
    local core = require "airlock.core"
    for _, name in ipairs { "ledger_open", "ledger_records", "ledger_verify", "ledger_branch" } do
      assert.is_nil(core[name], name)
    end
    -- the control: the ledger process's are there, and airlock.ledger uses them
    for _, name in ipairs { "ledger_proc_open", "ledger_proc_records", "ledger_proc_verify", "ledger_proc_branch" } do
      assert.is_function(core[name], name)
    end
  end)

  it("holds the journal alone: the host has no descriptor of it while a session is open", function()
    local d = tmpdir()
    local function host_fds_in(dir)
      local found = {}
      local p = io.popen("ls -l /proc/" .. H.pid() .. "/fd 2>/dev/null")
      for target in p:read("a"):gmatch("%-> ([^\n]+)") do
        if target:sub(1, #dir) == dir then found[#found + 1] = target end
      end
      p:close()
      return found
    end
    local L = assert(ledger.open(d, { create = true, durability = "batch" }))
    assert(L:append("call", 1, { effect = "x" }))
    assert.same({}, host_fds_in(d))
    -- the control: the ledger process does hold them
    local p = io.popen("ls -l /proc/" .. L:pid() .. "/fd")
    assert.matches(d:gsub("%p", "%%%0") .. "/journal", p:read("a"))
    p:close()
    -- reading through it, too, leaves the host without one
    local it, reader = ledger.records(d)
    assert.equal(1, it(reader).seq)
    assert.same({}, host_fds_in(d))
    reader:close()
    -- and a recorded run
    local res = assert(airlock.run { guest = 'print("hi") return host.call("probe.fds")', ledger = d .. "2",
      policy = { effects = { ["probe.fds"] = function() return #host_fds_in(d .. "2") end } } })
    assert.equal("ok", res.cause, res.message)
    assert.equal(0, res.value)
    L:close()
  end)
end)

describe("a producer of a ledger process that is killed -9", function()
  after_each(rmdirs)

  it("fails closed, sticky; other sessions carry on; a restart loses no acknowledged record", function()
    local a, b = tmpdir(), tmpdir()
    local A = assert(ledger.open(a, { create = true, durability = "always" }))
    local B = assert(ledger.open(b, { create = true, durability = "always" }))
    local pid, grant = A:pid(), A:grant()
    -- kill it while it is appending and syncing (durability always)
    os.execute(string.format("(sleep 0.05; kill -9 %d) &", pid))
    local acked, seq, err, errno = 1, nil, nil, nil
    for i = 1, 1e6 do
      seq, err, errno = A:append("call", 1, { effect = "fs.read", args = { i = i, pad = string.rep("x", 200) } })
      if not seq then break end
      acked = seq
    end
    assert.is_nil(seq)
    assert.equal(EPIPE, errno)
    assert.matches("ledger: the ledger process %(pid " .. pid .. "%) of .* is gone %(killed by signal 9", err)
    -- sticky: every later append fails the same way
    local s2, err2 = A:append("call", 1, { effect = "again" })
    assert.is_nil(s2)
    assert.equal(err, err2)
    assert.is_nil(A:flush())
    assert.is_falsy(alive(pid))
    -- another session carries on (the control)
    for i = 1, 20 do assert(B:append("call", 1, { i = i })) end
    assert.is_true(B:flush())
    A:close()
    -- restart: a new process, a new grant; every acknowledged record is there
    local A2 = assert(ledger.open(a, { durability = "always" }))
    assert.are_not.equal(pid, A2:pid())
    assert.are_not.equal(grant, A2:grant())
    local rep = A2:report()
    assert.is_true(rep.last_seq >= acked, rep.last_seq .. " < " .. acked)
    assert.equal(rep.last_seq + 1, (A2:append("resume", 1, { input = "after" })))
    A2:close()
    local v = ledger.verify(a)
    assert.is_true(v.ok, v.reason)
    assert.is_true(ledger.verify(b).ok)
    B:close()
  end)

  it("ends a recorded run with cause ledger: the next effect is not performed, the guest is told", function()
    local d, other = tmpdir(), tmpdir()
    local L = assert(ledger.open(d, { create = true }))
    local O = assert(ledger.open(other, { create = true }))
    local ran = { kill = 0, after = 0 }
    local pol = { effects = {
      ["ledger.kill"] = function()
        ran.kill = ran.kill + 1
        os.execute("kill -9 " .. L:pid())
        return true
      end,
      ["after"] = function() ran.after = ran.after + 1 return true end,
    } }
    local res = assert(airlock.run { guest = [[
      host.call("ledger.kill")
      return host.call("after")
    ]], policy = pol, ledger = L })
    assert.equal("ledger", res.cause)
    assert.matches("is gone", res.message)
    assert.equal(1, ran.kill)
    assert.equal(0, ran.after)
    -- the other session, and a new run in it, carry on
    local res2 = assert(airlock.run { guest = 'return host.call("after")', policy = pol, ledger = O })
    assert.equal("ok", res2.cause, res2.message)
    assert.equal(1, ran.after)
    L:close()
    O:close()
    assert.is_true(ledger.verify(d).ok)
  end)
end)

describe("a producer of a stalled ledger process", function()
  after_each(rmdirs)

  it("fails closed past the admission deadline; the process is killed; others carry on", function()
    local a, b = tmpdir(), tmpdir()
    local A = assert(ledger.open(a, { create = true, admit_ms = 300 }))
    local B = assert(ledger.open(b, { create = true, admit_ms = 300 }))
    assert(A:append("call", 1, { n = 1 }))   -- the control: it admits in time
    local pid = A:pid()
    os.execute("kill -STOP " .. pid)
    local t0 = require("airlock.core").now_ms()
    local seq, err, errno = A:append("call", 1, { n = 2 })
    local waited = require("airlock.core").now_ms() - t0
    assert.is_nil(seq)
    assert.equal(ETIMEDOUT, errno)
    assert.matches("did not answer within 300 ms, the admission deadline", err)
    assert.is_true(waited >= 290 and waited < 3000, tostring(waited))
    assert.is_falsy(alive(pid))
    assert(B:append("call", 1, { n = 1 }))
    A:close()
    B:close()
    assert.is_true(ledger.verify(a).ok)
  end)
end)

describe("a ledger process that lies in its acknowledgements", function()
  after_each(rmdirs)
  local core = require "airlock.core"
  local FAKE = io.popen("pwd"):read("l") .. "/spec/fixtures/lying_ledgerd.py"

  -- A ledger program that runs the fixture in one mode.
  local function program(mode)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write("#!/bin/sh\nexec /usr/bin/python3 ", FAKE, " ", mode, ' "$@"\n')
    f:close()
    os.execute("chmod 755 " .. path)
    return path
  end

  it("is believed only for the appends it was sent, in order: one more, a skipped seq, none", function()
    local honest = program("honest")
    local L = assert(core.ledger_proc_open(honest, tmpdir(), { create = true }))
    assert.equal(2, (L:append("call", 1, { n = 1 })))   -- the control: the fixture speaks the protocol
    assert.equal(3, (L:append("call", 1, { n = 2 })))
    L:close()
    os.remove(honest)
    for _, mode in ipairs { "over", "skip", "zero" } do
      local prog = program(mode)
      local l = assert(core.ledger_proc_open(prog, tmpdir(), { create = true }))
      local pid = l:pid()
      local seq, err = l:append("call", 1, { n = 1 })
      assert.is_nil(seq, mode)
      assert.matches("sent an acknowledgement that does not follow the last one; it was killed", err, 1, false)
      assert.is_nil(l:append("call", 1, { n = 2 }), mode)   -- sticky: nothing more is recorded
      assert.is_falsy(os.execute("kill -0 " .. pid .. " 2>/dev/null"), mode .. ": still alive")
      l:close()
      os.remove(prog)
    end
  end)
end)

describe("a hostile producer", function()
  after_each(rmdirs)

  it("that names another session is refused, the connection ended, no session changed", function()
    local a, b = tmpdir(), tmpdir()
    local A = assert(ledger.open(a, { create = true }))
    local B = assert(ledger.open(b, { create = true }))
    assert(A:append("call", 1, { n = 1 }))   -- the control
    assert(A:raw_send(frame(mp { t = "append", kind = "call", run = 1, session_id = B:session_id() })))
    local seq, err = A:append("call", 1, { n = 2 })
    assert.is_nil(seq)
    assert.matches("the producer named 'session_id' in its message; the session, its seqs and the grant " ..
                   "are the ledger process's own", err)
    for _, field in ipairs { "seq", "grant", "dir" } do
      local C = assert(ledger.open(a .. field, { create = true }))
      dirs[#dirs + 1] = a .. field
      assert(C:raw_send(frame(mp { t = "append", kind = "call", run = 1, [field] = "x" })))
      local s, e = C:append("call", 1)
      assert.is_nil(s)
      assert.matches("named '" .. field .. "'", e)
      C:close()
    end
    A:close()
    B:close()
    assert.equal(2, count(a))
    assert.equal(1, count(b))
  end)

  -- An append's fields are a producer's bytes, copied into the record as they
  -- came: each wrong shape is refused before anything is written, beside a
  -- control append that goes in.
  it("that sends fields that are not one map of its own keys is refused, nothing of it written", function()
    local function append_with(fields)
      return frame(string.char(0x84) .. mp("fields") .. string.char(0xc4, #fields) .. fields ..
                   mp("kind") .. mp("call") .. mp("run") .. mp(1) .. mp("t") .. mp("append"))
    end
    for _, case in ipairs {
      { fields = mp { seq = 7 }, says = "field 'seq' is the ledger's own and cannot be given" },
      { fields = mp { t = 1 }, says = "field 't' is the ledger's own" },
      { fields = string.char(0x81, 0x01, 0x01), says = "has a key that is not a string" },
      { fields = string.char(0x81, 0xa1) .. "n", says = "is not one packed map" },   -- no value
      { fields = string.char(0xdf, 0xff, 0xff, 0xff, 0xff), says = "is not one packed map" },
      { fields = mp { n = 1 } .. "x", says = "1 bytes follow the record fields' map" },
      { fields = mp("n"), says = "record fields must be a map" },
    } do
      local d = tmpdir()
      local L = assert(ledger.open(d, { create = true }))
      assert.equal(2, (L:append("call", 1, { n = 1 })))   -- the control
      assert(L:raw_send(append_with(case.fields)))
      local seq, err = L:append("call", 1, { n = 2 })
      assert.is_nil(seq, case.says)
      assert.matches(case.says, err, 1, true)
      L:close()
      local v = ledger.verify(d)
      assert.is_true(v.ok, v.reason)
      for rec in ledger.records(d) do
        assert.is_true(rec.seq == 1 or rec.n == 1 or rec.n == 2, case.says)
      end
    end
    -- the same frame with well-formed fields is written, its pairs as they came
    local d = tmpdir()
    local L = assert(ledger.open(d, { create = true }))
    assert(L:raw_send(append_with(mp { effect = "fs.read", n = 9 })))
    L:close()
    local got
    for rec in ledger.records(d) do got = rec end
    assert.equal(2, got.seq)
    assert.equal("call", got.kind)
    assert.equal(9, got.n)
    assert.equal("fs.read", got.effect)
  end)

  it("that sends a 4 GiB frame header is refused before any allocation", function()
    local d = tmpdir()
    local L = assert(ledger.open(d, { create = true }))
    -- the control: a 1 MiB record is accepted
    assert(L:append("reply", 1, { value = string.rep("v", 1 << 20) }))
    local pid = L:pid()
    local before = tonumber(status(pid):match("VmHWM:%s*(%d+)"))
    assert(L:raw_send("\255\255\255\255" .. string.rep("\0", 64)))
    local seq, err = L:append("call", 1)
    assert.is_nil(seq)
    assert.matches("a frame of 4294967295 bytes, over the limit", err)
    assert.is_true(before < 64 * 1024, tostring(before))
    L:close()
    assert.equal(2, count(d))   -- the session and the 1 MiB reply; nothing of the frame
  end)

  it("that floods is held to the session's bound, and its ledger process's memory stays bounded", function()
    local d = tmpdir()
    -- the admission deadline is the guard here (its own case is below): a
    -- sanitizer build on a loaded machine can take over 5 s to work off the flood
    local L = assert(ledger.open(d, { create = true, max_bytes = 4 << 20, admit_ms = H.GUARD_S * 1000 }))
    local pad = string.rep("f", 1000)
    local n, seq, err, errno = 0, nil, nil, nil
    for i = 1, 1e5 do
      seq, err, errno = L:append("call", 1, { i = i, pad = pad }, false)   -- queued, not waited for
      if not seq then break end
      n = i
    end
    if seq then seq, err, errno = L:sync() end
    assert.is_nil(seq)
    assert.equal(EDQUOT, errno)
    assert.matches("the session's journal has reached %d+ bytes, its bound of 4194304", err)
    assert.is_true(n > 3000, tostring(n))
    local hwm = tonumber(status(L:pid()):match("VmHWM:%s*(%d+)") or "0")
    assert.is_true(hwm < 32 * 1024, tostring(hwm))
    L:close()
    local v = ledger.verify(d)
    assert.is_true(v.ok)
    assert.is_true(v.bytes >= 4 << 20 and v.bytes < (4 << 20) + 4096, tostring(v.bytes))
    -- the control: without a bound the same flood is taken whole
    local d2 = tmpdir()
    local L2 = assert(ledger.open(d2, { create = true }))
    for i = 1, 5000 do assert(L2:append("call", 1, { i = i, pad = pad }, false)) end
    assert(L2:sync())
    assert.equal(5001, (L2:head()))
    L2:close()
  end)
end)

describe("the ledger process as an unprivileged user", function()
  it("is confined the same, and records", function()
    if H.sanitized then pending("release build only: the sanitizer's preloaded runtime is root's") end
    local p = io.popen("pwd")
    local build = H.build:sub(1, 1) == "/" and H.build or p:read("l") .. "/" .. H.build
    p:close()
    -- The control: uid 65534 can load this build at all (a checkout it cannot
    -- enter, a private /tmp/... directory say, keeps it out).
    local probe, prc = H.sh("cd / && " .. H.NOBODY .. "lua5.4 -e " ..
      string.format("%q", string.format("package.cpath = %q .. '/lib/?.so;' .. package.cpath require 'airlock'", build)))
    if prc ~= 0 then pending("uid 65534 cannot load " .. build .. " here: " .. (probe:match("[^\n]*") or "")) end
    local root = H.tmpdir()
    os.execute("chown 65534:65534 " .. root)
    local script = root .. "/t.lua"
    H.write(script, string.format([[
      package.cpath = %q .. "/lib/?.so;" .. package.cpath
      require "airlock"
      local ledger = require "airlock.ledger"
      local L = assert(ledger.open(%q, { create = true }))
      assert(L:append("call", 1, { n = 1 }))
      local st = io.open("/proc/" .. L:pid() .. "/status"):read("a")
      print("seccomp", st:match("Seccomp:%%s*(%%d)"), "nnp", st:match("NoNewPrivs:%%s*(%%d)"))
      local got = assert(require("airlock.core").ledger_proc_probe(ledger.program(), %q))
      print("inside", got["write inside"], "passwd", got["read /etc/passwd"], "tmp", got["write /tmp"])
      L:close()
      print("verify", ledger.verify(%q).ok, ledger.verify(%q).records)
    ]], build, root .. "/s", root .. "/s", root .. "/s", root .. "/s"))
    local out, rc = H.sh("cd / && setpriv --reuid=65534 --regid=65534 --clear-groups lua5.4 " .. script)
    os.execute("rm -rf " .. root)
    assert.equal(0, rc, out)
    assert.matches("seccomp\t2\tnnp\t1", out)
    assert.matches("inside\t0\tpasswd\t%-13\ttmp\t%-13", out)
    assert.matches("verify\ttrue\t2", out)
  end)
end)
