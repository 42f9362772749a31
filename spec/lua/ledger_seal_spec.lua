-- ledger_seal_spec.lua -- sealed segments through the ledger process: a run
-- recorded with a small seal_bytes lands in zstd segments that verify, stream
-- and replay exactly, without the host ever holding a segment; damage in a
-- segment (a flipped byte, an unknown codec, a forged length) is named with the
-- segment, each beside a control copy that verifies.
local H = require "helper"
local airlock = require "airlock"
local ledger = require "airlock.ledger"
local core = require "airlock.core"

local dirs = {}
local function tmpdir()
  local d = H.tmpdir() .. "/s"
  dirs[#dirs + 1] = d:match("^(.*)/s$")
  return d
end

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() end
  return f ~= nil
end

local function poke(path, offset, bytes)
  local f = assert(io.open(path, "r+b"))
  f:seek("set", offset)
  f:write(bytes)
  f:close()
end

local function copy(src)
  local d = tmpdir()
  os.execute("mkdir -p '" .. d .. "' && cp '" .. src .. "'/journal '" .. src .. "'/segment.* '" .. d .. "'/")
  return d
end

local GUEST = [[
  local total = 0
  for i = 1, 400 do total = total + host.call("echo", { i = i, text = ("line %d of a build log\n"):format(i):rep(8) }).i end
  return total
]]
local POLICY = { effects = { echo = function(args) return args end } }

describe("sealed segments", function()
  after_each(function()
    for _, d in ipairs(dirs) do os.execute("rm -rf '" .. d .. "'") end
    dirs = {}
  end)

  local function recorded()
    local d = tmpdir()
    local L = assert(ledger.open(d, { create = true, seal_bytes = 16384 }))
    local res = assert(airlock.run { guest = GUEST, policy = POLICY, ledger = L })
    L:close()
    assert.equal("ok", res.cause, res.message)
    return d, res
  end

  it("hold a recorded run: it verifies, streams and replays exactly", function()
    local d, res = recorded()
    assert.is_true(exists(d .. "/segment.000001"))
    assert.is_true(exists(d .. "/segment.000004"))
    local f = assert(io.open(d .. "/segment.000001", "rb"))
    local head = f:read(17)
    f:close()
    assert.equal("airlseg1", head:sub(1, 8))
    assert.equal(1, head:byte(17))                -- codec 1: zstd
    local rep = ledger.verify(d)
    assert.is_true(rep.ok, rep.reason)
    local n, last = 0, 0
    for rec in ledger.records(d) do
      n = n + 1
      assert.equal(last + 1, rec.seq)
      last = rec.seq
    end
    assert.equal(rep.records, n)
    assert.equal(rep.head, ledger.head(d))
    local rp = assert(airlock.replay(d, { policy = POLICY, policy_changed = true }))
    assert.is_true(rp.identical, rp.result.message)
    assert.equal(0, rp.live_effects)
    assert.equal(res.value, rp.result.value)
  end)

  it("are never opened by the host: readers stream them in the ledger process", function()
    local d = recorded()
    local it, reader = ledger.records(d)
    assert.equal(1, it(reader).seq)
    local p = io.popen("ls -l /proc/" .. H.pid() .. "/fd 2>/dev/null")
    local fds = p:read("a")
    p:close()
    assert.is_nil(fds:find(d, 1, true))
    reader:close()
  end)

  it("name the damage and the segment: flipped byte, unknown codec, forged length", function()
    local d = recorded()
    local seg = "/segment.000002"
    local control = copy(d)
    assert.is_true(ledger.verify(control).ok)    -- the control copy
    local flipped = copy(d)
    local f = assert(io.open(flipped .. seg, "rb"))
    local bytes = f:read("a")
    f:close()
    local at = #bytes // 2
    poke(flipped .. seg, at, string.char(bytes:byte(at + 1) ~ 0x40))
    local rep = ledger.verify(flipped)
    assert.is_false(rep.ok)
    assert.equal("altered", rep.damage)
    assert.matches("segment.000002", rep.reason, 1, true)

    local codec = copy(d)
    poke(codec .. seg, 16, string.char(9))
    rep = ledger.verify(codec)
    assert.equal("codec", rep.damage)
    assert.matches("names codec 9", rep.reason, 1, true)

    local forged = copy(d)
    poke(forged .. seg, 24, "\255\255\255\255")   -- 4 GiB of stored bytes
    rep = ledger.verify(forged)
    assert.equal("altered", rep.damage)
    assert.matches("4294967295 stored bytes", rep.reason, 1, true)
    -- a writer refuses all three
    for _, bad in ipairs { flipped, codec, forged } do
      assert.is_nil((ledger.open(bad)))
    end
    assert.is_true(ledger.verify(control).ok)
  end)
end)

-- A seal runs in steps, in the ledger process's idle time, while appends go
-- on. Killing the process (-9, the real one) in each of its phases must leave
-- a session that reads and verifies as it stands, reopens, and holds every
-- acknowledged record. The phases are crash points (ledger/journal_int.h) of a
-- test build of the process, airlock-ledgerd-crashpoints, which stops itself
-- (SIGSTOP) where a seal reaches the one it was given: the spec waits for
-- that stop, sees the phase's files on disk, and kills it -9 there. Nothing
-- looks for a passing file or counts on a time window, so a slow disk, a
-- fast one and a loaded machine stop it in the same state.
describe("a ledger process killed -9 in the middle of a seal", function()
  local stopping = {}   -- pids of test-build processes not yet killed and reaped
  after_each(function()
    -- a case that failed before its kill leaves no stopped process behind
    for pid in pairs(stopping) do H.kill_dead(pid) end
    stopping = {}
    for _, d in ipairs(dirs) do os.execute("rm -rf '" .. d .. "'") end
    dirs = {}
  end)

  local SEAL = 1 << 20
  local PAD = ("record of a run, "):rep(20)
  local cwd = io.popen("pwd")
  local ROOT = cwd:read("l")
  cwd:close()
  local CRASHPOINTS = ROOT .. "/" .. H.bin .. "/airlock-ledgerd-crashpoints"

  -- Whether a file whose name matches pattern is in directory d.
  local function present(d, pattern)
    for _, name in ipairs(core.fs_list(d, ".", 1000) or {}) do
      if name:match(pattern) then return true end
    end
    return false
  end

  local size = H.file_size

  -- A ledger program for core.ledger_proc_open: program with
  -- AIRLOCK_LEDGER_CRASH_AT=phase. The spawner gives the process an empty
  -- environment, so a script sets it and runs the program. Only these cases
  -- open through it; every reader and reopen here runs the production
  -- airlock-ledgerd (ledger.program()).
  local function armed(program, phase)
    local path = tmpdir():match("^(.*)/s$") .. "/ledgerd-" .. phase
    H.write(path, "#!/bin/sh\nexport AIRLOCK_LEDGER_CRASH_AT=" .. phase ..
      " ASAN_OPTIONS=detect_leaks=0\nexec '" .. program .. "' \"$@\"\n")
    os.execute("chmod 755 '" .. path .. "'")
    return path
  end

  -- The state letter of pid (R, S, D, T, Z ...), nil once it is gone.
  local function state(pid)
    local s = H.slurp("/proc/" .. pid .. "/stat")
    return s and s:match("^%d+ %b() (%a)")
  end

  -- Waits until pid has stopped itself (state T). Once nothing more is sent
  -- the process runs the seal in its idle time, step after step, so the stop
  -- is certain; the bound only turns a process that never gets there into a
  -- failure, it is no window the phase has to fall in.
  local function wait_stopped(pid, phase)
    local t0 = os.time()
    while true do
      local st = state(pid)
      if st == "T" then return end
      assert(st ~= nil and st ~= "Z", "the ledger process ended before it stopped at " .. phase)
      assert(os.time() - t0 < 300, "the ledger process did not stop at " .. phase .. " within 300 s")
      os.execute("env -u LD_PRELOAD sleep 0.01")
    end
  end

  -- Records appended to a session opened through the test build armed for
  -- case.phase, until the seal stops it there; case.at_stop(d, journal size)
  -- checks the disk is in that phase; then kill -9. -> the session, the last
  -- acknowledged seq, the last seq sent.
  local function kill_in(case)
    local d = tmpdir()
    local L = assert(core.ledger_proc_open(armed(CRASHPOINTS, case.phase), d,
                                           { create = true, seal_bytes = SEAL }))
    local pid = L:pid()
    stopping[pid] = true
    local journal = L:report().bytes   -- the session record's
    local i = 0
    local function queue()
      i = i + 1
      assert(L:append("call", 1, { i = i, pad = PAD }, false))
    end
    -- Below seal_bytes no seal starts: bursts of queued appends, each then
    -- acknowledged whole (sync), while the journal stays short of it by more
    -- than a burst (a record grows by a few bytes at most as i grows).
    queue()
    local _, first = assert(L:sync())
    journal = journal + first
    local acked = (L:head())
    local burst = 64
    while journal + burst * (first + 16) < SEAL do
      for _ = 1, burst do queue() end
      local _, bytes = assert(L:sync())
      journal, acked = journal + bytes, (L:head())
      assert.equal(i + 1, acked)
    end
    -- Across it: queued appends, sent and not waited for. From the record
    -- that crosses seal_bytes on, the process may stop at any moment, and a
    -- waiting call would wait on a stopped process; the records after that
    -- one go into the journal while the seal runs. Then nothing more is sent.
    local sent = 0
    repeat
      queue()
      sent = sent + first   -- no record is smaller than the first
    until journal + sent >= SEAL + (32 << 10)
    assert(L:send())
    wait_stopped(pid, case.phase)
    local stopped_size = size(d .. "/journal")
    case.at_stop(d, stopped_size)   -- the control: the state is the phase's
    H.kill_dead(pid)
    L:close()   -- the process is gone: this reaps it
    stopping[pid] = nil
    return d, acked, i + 1, stopped_size
  end

  local CASES = {
    { phase = "segment", what = "while the segment is written",
      at_stop = function(d, journal)
        assert.is_true(exists(d .. "/segment.000001.tmp"))
        assert.is_true(size(d .. "/segment.000001.tmp") > 16 + 12)   -- its header and a block
        assert.is_false(exists(d .. "/segment.000001"))
        assert.is_false(exists(d .. "/journal.tmp"))
        assert.is_true(journal >= SEAL)
      end },
    { phase = "placed", what = "once the segment is renamed into place, before the directory is synced",
      at_stop = function(d, journal)
        assert.is_true(exists(d .. "/segment.000001"))
        assert.is_false(exists(d .. "/segment.000001.tmp"))
        assert.is_false(exists(d .. "/journal.tmp"))
        assert.is_true(journal >= SEAL)   -- it repeats the segment
      end },
    { phase = "journal", what = "after the segment is in place, before the journal is replaced",
      at_stop = function(d, journal)
        assert.is_true(exists(d .. "/segment.000001"))
        assert.is_true(exists(d .. "/journal.tmp"))
        assert.is_false(exists(d .. "/segment.000001.tmp"))
        assert.is_true(journal >= SEAL)
      end },
    { phase = "swapped", what = "once the journal is replaced, before the directory is synced",
      at_stop = function(d, journal)
        assert.is_true(exists(d .. "/segment.000001"))
        assert.is_false(present(d, "%.tmp$"))
        assert.is_true(journal < SEAL)
      end },
  }

  for _, case in ipairs(CASES) do
    it(case.what .. " (" .. case.phase .. "): it verifies as it stands, reopens, and holds every " ..
       "acknowledged record", function()
      local d, acked, sent, stopped_size = kill_in(case)
      -- as the crash left it: readers see every acknowledged record, once, in order
      local v = ledger.verify(d)
      assert.is_true(v.ok, v.reason)
      assert.is_true(v.last_seq >= acked, v.last_seq .. " < " .. acked)
      assert.is_true(v.last_seq <= sent, v.last_seq .. " > " .. sent)
      local n = 0
      for rec in ledger.records(d) do
        n = n + 1
        assert.equal(n, rec.seq)
        if rec.seq > 1 then assert.equal(rec.seq - 1, rec.i) end
      end
      assert.equal(v.records, n)
      -- a new ledger process (the production one) reopens it and goes on; the .tmp files are gone
      local L2 = assert(ledger.open(d, { seal_bytes = SEAL }))
      assert.equal(v.last_seq, L2:report().last_seq)
      assert.is_false(present(d, "^segment%.%d+%.tmp$"))
      assert.is_false(present(d, "^journal%.tmp$"))
      if case.phase == "segment" then
        -- the journal as it was, the seal to be done again
        assert.is_false(exists(d .. "/segment.000001"))
        assert.equal(stopped_size, size(d .. "/journal"))
      else
        -- the segment stays; the journal starts after it (a repeat was dropped)
        assert.is_true(exists(d .. "/segment.000001"))
        assert.is_true(size(d .. "/journal") < SEAL)
      end
      local next = v.last_seq + 1
      assert.equal(next, (L2:append("resume", 1, { input = "after" })))
      L2:close()
      local v2 = ledger.verify(d)
      assert.is_true(v2.ok, v2.reason)
      assert.equal(next, v2.last_seq)
    end)
  end

  it("stop only the test build: the production airlock-ledgerd ignores AIRLOCK_LEDGER_CRASH_AT", function()
    local d = tmpdir()
    local L = assert(core.ledger_proc_open(armed(ledger.program(), "segment"), d,
                                           { create = true, seal_bytes = 64 << 10 }))
    for i = 1, 400 do assert(L:append("call", 1, { i = i, pad = PAD }, false)) end
    assert(L:sync())
    assert(L:close())   -- closing finishes the seal in progress
    assert.is_true(exists(d .. "/segment.000001"))
    assert.is_false(present(d, "%.tmp$"))
    assert.is_true(ledger.verify(d).ok)
    -- the name of the variable is in no production binary or library; the control: the test build's
    assert.is_truthy(H.read(CRASHPOINTS):find("AIRLOCK_LEDGER_CRASH_AT", 1, true))
    for _, f in ipairs { ledger.program(), H.build .. "/lib/libairlock-core.a", H.build .. "/lib/airlock.so" } do
      assert.is_nil(H.read(f):find("AIRLOCK_LEDGER_CRASH_AT", 1, true), f)
    end
  end)
end)
