-- ledger_spec.lua -- the ledger from Lua (airlock.core.ledger_*, airlock.ledger)
-- and `airlock ledger`: chain continuity, the one-writer lock, damage named by
-- seq and word, torn tails, checkpoints, branches.
local H = require "helper"
local dk = require "dkjson"
require "airlock"
local core = require "airlock.core"
local ledger = require "airlock.ledger"

local AIRLOCK = H.bin .. "/airlock"
local EWOULDBLOCK, ENOENT, ERANGE, EEXIST = 11, 2, 34, 17

local dirs = {}

-- A fresh path for a session directory (not created: open with create makes it).
local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  dirs[#dirs + 1] = d
  return d
end

local function rmdirs()
  for _, d in ipairs(dirs) do os.execute("rm -rf '" .. d .. "'") end
  dirs = {}
end

local sh = H.sh

local read_file = H.read

local write_file = H.write

local file_size = H.file_size

local function collect(dir)
  local list = {}
  for rec in ledger.records(dir) do list[#list + 1] = rec end
  return list
end

-- A session of five records: session, init, call, reply, done.
local function make_session(dir, opts)
  local L = assert(ledger.open(dir, opts or { create = true, session = { policy = "p1" } }))
  assert.equal(2, L:append("init", 1, { guest = "return 1" }))
  assert.equal(3, L:append("call", 1, { effect = "fs.read", args = { path = "a.txt" }, decision = "allow" }))
  assert.equal(4, L:append("reply", 1, { value = { 1, 2, "three" } }))
  assert.equal(5, L:append("done", 1, { ok = true, cause = "ok" }))
  return L
end

describe("airlock.core.sha256", function()
  it("gives the known digest of 'abc' and of the empty string", function()
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", core.sha256("abc"))
    assert.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", ledger.sha256(""))
    assert.equal(64, #core.sha256(string.rep("\0", 100000)))
  end)
end)

describe("airlock.ledger writer", function()
  after_each(rmdirs)

  it("opens, appends, and continues the chain after a reopen", function()
    local d = tmpdir()
    local L = make_session(d)
    local id = L:session_id()
    assert.matches("^%x+$", id)
    assert.equal(32, #id)
    local seq, hex = L:head()
    assert.equal(5, seq)
    assert.equal(64, #hex)
    assert.equal("5:" .. hex, L:checkpoint())
    assert.equal(d, L:dir())
    assert.is_true(L:close())
    assert.is_true(L:close())   -- idempotent

    local L2 = assert(ledger.open(d))
    local rep = L2:report()
    assert.equal(5, rep.records)
    assert.equal(5, rep.last_seq)
    assert.equal(0, rep.torn_bytes)
    assert.equal("5:" .. hex, rep.head)
    assert.equal(id, L2:session_id())
    assert.equal(6, L2:append("pause", 2, { prompt = "?" }))
    assert.equal(6, (L2:head()))
    L2:close()
    local v = ledger.verify(d)
    assert.is_true(v.ok)
    assert.equal(6, v.records)
    assert.equal(id, v.session_id)
  end)

  it("refuses a second writer, naming the pid, until the first closes", function()
    local d = tmpdir()
    local L = assert(ledger.open(d, { create = true }))
    local l2, msg, errno = ledger.open(d)
    assert.is_nil(l2)
    -- The holder is the session's ledger process, never this (host) process.
    assert.equal("ledger: " .. d .. " is in use by pid " .. L:pid(), msg)
    assert.are_not.equal(H.pid(), L:pid())
    assert.equal(EWOULDBLOCK, errno)
    L:close()
    local L3 = assert(ledger.open(d))
    L3:close()
  end)

  it("refuses a missing journal without create, and bad options", function()
    local d = tmpdir()
    local L, msg, errno = ledger.open(d)
    assert.is_nil(L)
    assert.matches("does not exist", msg)
    assert.equal(ENOENT, errno)
    assert.has_error(function() ledger.open(d, { creat = true }) end)
    assert.has_error(function() ledger.open(d, { create = true, durability = "sometimes" }) end)
    L, msg = ledger.open(d, { create = true, session = { id = "x" } })
    assert.is_nil(L)
    assert.matches("'id' is the ledger's own", msg)
  end)

  it("returns nil and a message for a bad kind or fields, and stays usable", function()
    local d = tmpdir()
    local L = assert(ledger.open(d, { create = true }))
    local s, msg = L:append("session", 1)
    assert.is_nil(s)
    assert.matches("not a record kind", msg)
    -- The journal is generic: any short word is a kind; the session layer's
    -- six are its own business. A word it is not, is refused.
    assert.equal(2, (L:append("note.v2", 1, { text = "x" })))
    for _, bad in ipairs { "", "Note", "9lives", "has space", string.rep("k", 33) } do
      s, msg = L:append(bad, 1)
      assert.is_nil(s, bad)
      assert.matches("not a record kind", msg)
    end
    s, msg = L:append("call", 1, { seq = 9 })
    assert.is_nil(s)
    assert.matches("'seq' is the ledger's own", msg)
    s, msg = L:append("call", 1, { f = print })
    assert.is_nil(s)
    assert.matches("fields.f: cannot send a function", msg)
    assert.has_error(function() L:append("call", -1) end)
    assert.equal(3, L:append("call", 1))
    assert.equal(4, L:append("call", 1, {}))
    L:close()
    local ok, err = pcall(L.append, L, "call", 1)
    assert.is_false(ok)
    assert.matches("ledger is closed", err)
  end)

  it("honours durability: always syncs each append, batch on flush or tick", function()
    local d = tmpdir()
    local L = assert(ledger.open(d, { create = true, durability = "always" }))
    assert.equal(2, L:append("call", 1))
    assert.equal(2, L:durable_seq())
    assert.equal(-1, L:sync_due_ms())
    L:close()
    L = assert(ledger.open(d, { durability = "batch", batch_ms = 50 }))
    assert.equal(2, L:durable_seq())
    assert.equal(3, L:append("call", 1))
    assert.equal(2, L:durable_seq())
    local due = L:sync_due_ms()
    assert.is_true(due >= 0 and due <= 51)
    assert.is_true(L:tick())
    assert.is_true(L:flush())
    assert.equal(3, L:durable_seq())
    assert.equal(-1, L:sync_due_ms())
    L:close()
  end)

  it("closes with <close> and with the garbage collector", function()
    local d = tmpdir()
    do
      local L <close> = assert(ledger.open(d, { create = true }))
      L:append("call", 1)
    end
    local L = assert(ledger.open(d))   -- the lock was released
    L = nil   -- luacheck: ignore
    collectgarbage()
    collectgarbage()
    local L2 = assert(ledger.open(d))
    assert.equal(2, (L2:head()))
    L2:close()
  end)
end)

describe("airlock.ledger reading", function()
  after_each(rmdirs)

  it("iterates the records with their fields, hash and offset", function()
    local d = tmpdir()
    local L = make_session(d)
    local id = L:session_id()
    local _, hex = L:head()
    L:close()
    local recs = collect(d)
    assert.equal(5, #recs)
    for i, r in ipairs(recs) do
      assert.equal(i, r.seq)
      assert.matches("^" .. string.rep("%x", 64) .. "$", r.hash)
      assert.is_number(r.t)
      assert.equal("integer", math.type(r.offset))
    end
    assert.equal(0, recs[1].offset)
    assert.equal("session", recs[1].kind)
    assert.equal(id, recs[1].id)
    assert.equal("p1", recs[1].policy)
    assert.is_number(recs[1].created)
    assert.equal(0, recs[1].run)
    assert.same({ "session", "init", "call", "reply", "done" },
                { recs[1].kind, recs[2].kind, recs[3].kind, recs[4].kind, recs[5].kind })
    assert.equal(1, recs[3].run)
    assert.equal("fs.read", recs[3].effect)
    assert.same({ path = "a.txt" }, recs[3].args)
    assert.equal("allow", recs[3].decision)
    assert.same({ 1, 2, "three" }, recs[4].value)
    assert.is_true(recs[5].ok)
    assert.equal(hex, recs[5].hash)
    assert.is_true(recs[2].offset < recs[3].offset)
  end)

  it("verifies an intact journal", function()
    local d = tmpdir()
    make_session(d):close()
    local rep = ledger.verify(d)
    assert.is_true(rep.ok)
    assert.equal(5, rep.records)
    assert.equal(5, rep.last_seq)
    assert.equal(0, rep.torn_bytes)
    assert.is_nil(rep.first_bad_seq)
    assert.equal(file_size(d .. "/journal"), rep.bytes)
    assert.equal(ledger.head(d), rep.head)
  end)

  it("names the seq and 'altered' for one flipped byte", function()
    local d = tmpdir()
    make_session(d):close()
    local j = d .. "/journal"
    local at = read_file(j):find("a.txt", 1, true)
    assert.is_number(at)
    local f = assert(io.open(j, "r+b"))
    f:seek("set", at - 1)
    f:write("b")
    f:close()
    local rep = ledger.verify(d)
    assert.is_false(rep.ok)
    assert.equal(3, rep.first_bad_seq)
    assert.equal("altered", rep.damage)
    assert.matches("^altered: seq 3", rep.reason)
    assert.equal(2, rep.last_seq)
    -- the iterator raises, naming seq and word, after handing out the good records
    local seen = 0
    local ok, err = pcall(function() for _ in ledger.records(d) do seen = seen + 1 end end)
    assert.is_false(ok)
    assert.equal(2, seen)
    assert.matches("altered: seq 3", err)
    -- a writer refuses the damaged journal and leaves it as it is
    local size = file_size(j)
    local L, msg = ledger.open(d)
    assert.is_nil(L)
    assert.matches("altered: seq 3", msg)
    assert.equal(size, file_size(j))
    assert.is_nil(ledger.head(d))
  end)

  it("names the seq and 'deleted' for a removed record", function()
    local d = tmpdir()
    make_session(d):close()
    local recs = collect(d)
    local j = d .. "/journal"
    local s = read_file(j)
    write_file(j, s:sub(1, recs[3].offset) .. s:sub(recs[4].offset + 1))
    local rep = ledger.verify(d)
    assert.is_false(rep.ok)
    assert.equal(3, rep.first_bad_seq)
    assert.equal("deleted", rep.damage)
    assert.matches("^deleted: seq 3 is missing", rep.reason)
  end)

  it("truncates a torn tail on reopen and reports it", function()
    local d = tmpdir()
    make_session(d):close()
    local recs = collect(d)
    local j = d .. "/journal"
    local s = read_file(j)
    local good = #s
    -- the first 20 bytes of a record again: an interrupted write
    local f = assert(io.open(j, "ab"))
    f:write(s:sub(recs[4].offset + 1, recs[4].offset + 20))
    f:close()
    local rep = ledger.verify(d)
    assert.is_true(rep.ok)
    assert.equal(20, rep.torn_bytes)
    assert.matches("^torn: 20 bytes", rep.reason)
    assert.equal(5, rep.last_seq)
    local L = assert(ledger.open(d))
    local orep = L:report()
    assert.equal(20, orep.torn_bytes)
    assert.matches("^torn:", orep.reason)
    assert.equal(5, orep.last_seq)
    assert.equal(good, file_size(j))
    assert.equal(6, L:append("call", 1))
    L:close()
    rep = ledger.verify(d)
    assert.is_true(rep.ok)
    assert.equal(0, rep.torn_bytes)
    assert.equal(6, rep.records)
  end)

  it("keeps a checkpoint valid across appends and detects truncation before it", function()
    local d = tmpdir()
    local L = assert(ledger.open(d, { create = true }))
    L:append("init", 1)
    L:append("call", 1, { effect = "x" })
    local cp = L:checkpoint()
    assert.matches("^3:" .. string.rep("%x", 64) .. "$", cp)
    for i = 1, 3 do L:append("reply", 1, { i = i }) end
    L:close()
    local rep = ledger.verify(d, cp)
    assert.is_true(rep.ok)
    assert.equal(6, rep.records)
    -- cut the journal back to before seq 3: intact by itself, not against cp
    local recs = collect(d)
    local j = d .. "/journal"
    write_file(j, read_file(j):sub(1, recs[3].offset))
    assert.is_true(ledger.verify(d).ok)
    rep = ledger.verify(d, cp)
    assert.is_false(rep.ok)
    assert.equal("truncated", rep.damage)
    assert.equal(3, rep.first_bad_seq)
    -- a checkpoint whose hash differs
    rep = ledger.verify(d, "2:" .. string.rep("0", 64))
    assert.is_false(rep.ok)
    assert.equal("checkpoint", rep.damage)
    assert.equal(2, rep.first_bad_seq)
    -- a malformed checkpoint is an argument error
    assert.has_error(function() ledger.verify(d, "3:abc") end)
    assert.has_error(function() ledger.verify(d, "0:" .. string.rep("0", 64)) end)
    assert.is_nil(ledger.parse_checkpoint("x:y"))
    local seq, hex = ledger.parse_checkpoint(cp:upper())
    assert.equal(3, seq)
    assert.equal(cp:sub(3), hex)
  end)

  it("says why it cannot read a missing journal", function()
    local d = tmpdir()
    local rep, msg, errno = ledger.verify(d)
    assert.is_nil(rep)
    assert.matches("cannot open .*journal", msg)
    assert.equal(ENOENT, errno)
    assert.has_error(function() for _ in ledger.records(d) do end end)
  end)
end)

describe("airlock.ledger branch", function()
  after_each(rmdirs)

  it("copies the prefix into a new session that verifies", function()
    local src, dst = tmpdir(), tmpdir()
    local L = make_session(src)
    local src_id = L:session_id()
    L:close()
    local srecs = collect(src)
    assert.is_true(ledger.branch(src, 3, dst))
    local rep = ledger.verify(dst)
    assert.is_true(rep.ok)
    assert.equal(3, rep.records)
    assert.are_not.equal(src_id, rep.session_id)
    local drecs = collect(dst)
    assert.equal(3, #drecs)
    assert.equal("session", drecs[1].kind)
    assert.equal(rep.session_id, drecs[1].id)
    assert.equal("p1", drecs[1].policy)
    assert.same({ from = src_id, at = 3, head = "3:" .. srecs[3].hash }, drecs[1].branch)
    for i = 2, 3 do
      local a, b = srecs[i], drecs[i]
      assert.are_not.equal(a.hash, b.hash)   -- the chain is rebuilt for the new id
      a.hash, b.hash, a.offset, b.offset = nil, nil, nil, nil
      assert.same(a, b)                      -- bodies unchanged
    end
    -- the branch is a session of its own: it can be written on
    local B = assert(ledger.open(dst))
    assert.equal(4, B:append("call", 2))
    B:close()
    assert.is_true(ledger.verify(dst).ok)
  end)

  it("refuses a seq past the end and a directory with records", function()
    local src, dst = tmpdir(), tmpdir()
    make_session(src):close()
    local ok, msg, errno = ledger.branch(src, 99, dst)
    assert.is_nil(ok)
    assert.matches("before seq 99", msg)
    assert.equal(ERANGE, errno)
    ok, msg, errno = ledger.branch(src, 2, src)
    assert.is_nil(ok)
    assert.equal(EEXIST, errno)
    assert.has_error(function() ledger.branch(src, 0, dst) end)
  end)
end)

describe("airlock.ledger show", function()
  after_each(rmdirs)

  it("gives one aligned line per record, or one JSON object", function()
    local d = tmpdir()
    make_session(d):close()
    local lines = {}
    for line in ledger.show(d) do lines[#lines + 1] = line end
    assert.equal(5, #lines)
    assert.matches("^#1 +%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d%.%d%d%dZ  session  run 0 ", lines[1])
    assert.matches("^#3 .*  call     run 1 +fs%.read  {path=\"a%.txt\"}  decision=\"allow\"$", lines[3])
    assert.matches("value={1, 2, \"three\"}", lines[4])
    local kind_col = lines[1]:find("session", 1, true)
    for i = 2, 5 do assert.equal(kind_col, lines[i]:find("%a", kind_col)) end
    local n = 0
    for line in ledger.show(d, { json = true }) do
      n = n + 1
      local obj = dk.decode(line)
      assert.equal(n, obj.seq)
      assert.equal(64, #obj.hash)
    end
    assert.equal(5, n)
  end)
end)

describe("airlock ledger (command)", function()
  after_each(rmdirs)

  it("verify, show and head an intact session, exit 0", function()
    local d = tmpdir()
    local L = make_session(d)
    local cp = L:checkpoint()
    L:close()
    local out, rc = sh(AIRLOCK .. " ledger verify " .. d)
    assert.equal(0, rc)
    assert.equal("ledger " .. d .. ": intact, 5 records, head " .. cp .. "\n", out)
    out, rc = sh(AIRLOCK .. " ledger verify " .. d .. " --checkpoint " .. cp .. " --json")
    assert.equal(0, rc)
    local obj = dk.decode(out)
    assert.is_true(obj.ok)
    assert.equal(cp, obj.head)
    out, rc = sh(AIRLOCK .. " ledger head " .. d)
    assert.equal(0, rc)
    assert.equal(cp .. "\n", out)
    out, rc = sh(AIRLOCK .. " ledger show " .. d)
    assert.equal(0, rc)
    local n = select(2, out:gsub("\n", "\n"))
    assert.equal(5, n)
    assert.matches("fs%.read  {path=\"a%.txt\"}", out)
    out, rc = sh(AIRLOCK .. " ledger show " .. d .. " --json")
    assert.equal(0, rc)
    local first = dk.decode(out:match("^[^\n]+"))
    assert.equal("session", first.kind)
  end)

  it("reports damage with exit 1, a torn tail as a note", function()
    local d = tmpdir()
    local L = make_session(d)
    local cp = L:checkpoint()
    L:close()
    local j = d .. "/journal"
    local f = assert(io.open(j, "ab"))
    f:write("\0\0")
    f:close()
    local out, rc = sh(AIRLOCK .. " ledger verify " .. d)
    assert.equal(0, rc)
    assert.matches("intact, 5 records", out)
    assert.matches("note: torn: 2 bytes", out)
    local at = read_file(j):find("a.txt", 1, true)
    f = assert(io.open(j, "r+b"))
    f:seek("set", at - 1)
    f:write("b")
    f:close()
    out, rc = sh(AIRLOCK .. " ledger verify " .. d)
    assert.equal(1, rc)
    assert.matches("^ledger " .. d:gsub("%p", "%%%0") .. ": damaged at seq 3: altered: ", out)
    out, rc = sh(AIRLOCK .. " ledger verify " .. d .. " --checkpoint " .. cp)
    assert.equal(1, rc)
    assert.matches("damaged at seq 3: altered", out)
    out, rc = sh(AIRLOCK .. " ledger head " .. d)
    assert.equal(1, rc)
    assert.matches("damaged at seq 3", out)
    out, rc = sh(AIRLOCK .. " ledger show " .. d)
    assert.equal(1, rc)
    assert.matches("#2 ", out)
    assert.matches("damaged at seq 3: altered", out)
  end)

  it("exits 2 on bad usage or a missing journal", function()
    local d = tmpdir()
    local out, rc = sh(AIRLOCK .. " ledger")
    assert.equal(2, rc)
    assert.matches("expected verify, show, head, checkpoint, revert or reapply", out)
    out, rc = sh(AIRLOCK .. " ledger frob " .. d)
    assert.equal(2, rc)
    assert.matches("unknown subcommand 'frob'", out)
    out, rc = sh(AIRLOCK .. " ledger revert " .. d .. " --run x")
    assert.equal(2, rc)
    assert.matches("--run takes a run number", out, 1, true)
    out, rc = sh(AIRLOCK .. " ledger verify")
    assert.equal(2, rc)
    out, rc = sh(AIRLOCK .. " ledger verify " .. d .. " --checkpoint 3:abc")
    assert.equal(2, rc)
    assert.matches("%-%-checkpoint", out)
    out, rc = sh(AIRLOCK .. " ledger show " .. d .. " --bogus")
    assert.equal(2, rc)
    out, rc = sh(AIRLOCK .. " ledger verify " .. d)
    assert.equal(2, rc)
    assert.matches("cannot open", out)
    out, rc = sh(AIRLOCK .. " ledger head " .. d)
    assert.equal(2, rc)
  end)
end)
