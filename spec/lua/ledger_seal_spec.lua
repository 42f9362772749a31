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
-- acknowledged record: while the segment is written (segment.000001.tmp), and
-- after it is in place while the journal is being replaced (journal.tmp; the
-- journal then repeats the segment, which readers skip and the next open
-- drops). The process is stopped (SIGSTOP) once the phase is seen, so the
-- kill lands in it, not after it.
describe("a ledger process killed -9 in the middle of a seal", function()
  after_each(function()
    for _, d in ipairs(dirs) do os.execute("rm -rf '" .. d .. "'") end
    dirs = {}
  end)

  local function signal(sig, pid)
    os.execute("env -u LD_PRELOAD kill -" .. sig .. " " .. pid)
  end

  -- Whether a file whose name matches pattern is in directory d.
  local function present(d, pattern)
    for _, name in ipairs(core.fs_list(d, ".", 1000) or {}) do
      if name:match(pattern) then return true end
    end
    return false
  end

  local function kill_in(phase, seal_bytes)
    local d = tmpdir()
    local L = assert(ledger.open(d, { create = true, seal_bytes = seal_bytes }))
    local pid = L:pid()
    local acked, caught = 0, false
    local pad = ("record of a run, "):rep(20)
    -- bursts of queued appends, each then acknowledged whole (sync): the
    -- journal grows while the seal runs, so its tail takes steps of its own
    local i = 0
    -- The process seals while its socket is empty, so with a slow client
    -- (under ASan) whole phases run between two appends: the phase is looked
    -- for every few appends, and after each burst for a few ms.
    local function catch()
      if not present(d, phase) then return false end
      signal("STOP", pid)
      if present(d, phase) then return true end
      signal("CONT", pid)
      return false
    end
    for _ = 1, 2000 do
      for k = 1, 500 do
        i = i + 1
        assert(L:append("call", 1, { i = i, pad = pad }, false))
        if k % 10 == 0 and catch() then caught = true break end
      end
      if caught then break end   -- acked stays the last burst's: this one was not waited for
      assert(L:sync())
      acked = L:head()
      assert.equal(i + 1, acked)
      local until_ms = core.now_ms() + 5
      repeat caught = catch() until caught or core.now_ms() > until_ms
      if caught then break end
    end
    assert.is_true(caught, "no seal showed " .. phase .. " between appends")
    H.kill_dead(pid)
    L:close()
    return d, acked
  end

  for _, case in ipairs {
    -- a large segment takes many steps (128 KiB each) to write; a small one
    -- is written in one idle spell, and its journal's tail then takes steps.
    -- Any seal's phase will do: a loaded machine can let one seal's phase
    -- pass between two looks, and the next seal gives another chance.
    { phase = "^segment%.%d+%.tmp$", seal_bytes = 8 << 20, what = "while the segment is written" },
    { phase = "^journal%.tmp$", seal_bytes = 1 << 20,
      what = "after the segment is in place, before the journal is replaced" },
  } do
    it(case.what .. ": it verifies as it stands, reopens, and holds every acknowledged record", function()
      if case.phase == "^journal%.tmp$" and H.sanitized then
        -- The tail phase lasts more than one step only when the journal grew
        -- by over 256 KiB during the seal; a client under the sanitizer is
        -- too slow for that, so the phase is over within one step and cannot
        -- be caught between steps. The release run of this spec covers it.
        pending("skipped under the sanitizer: the journal's tail is copied in a single step there")
        return
      end
      local d, acked = kill_in(case.phase, case.seal_bytes)
      -- as the crash left it: readers see every acknowledged record, once, in order
      local v = ledger.verify(d)
      assert.is_true(v.ok, v.reason)
      assert.is_true(v.last_seq >= acked, v.last_seq .. " < " .. acked)
      local n = 0
      for rec in ledger.records(d) do
        n = n + 1
        assert.equal(n, rec.seq)
        if rec.seq > 1 then assert.equal(rec.seq - 1, rec.i) end
      end
      assert.equal(v.records, n)
      -- a new ledger process reopens it and goes on; the .tmp files are gone
      local L2 = assert(ledger.open(d, { seal_bytes = case.seal_bytes }))
      assert.is_true(L2:report().last_seq >= acked)
      assert.is_false(present(d, case.phase))
      local next = L2:report().last_seq + 1
      assert.equal(next, (L2:append("resume", 1, { input = "after" })))
      L2:close()
      local v2 = ledger.verify(d)
      assert.is_true(v2.ok, v2.reason)
      assert.equal(next, v2.last_seq)
      assert.equal(v.head:match("^%d+") + 0 + 1, next)
      if case.phase == "^journal%.tmp$" then
        -- the reopen dropped the repeat: the journal starts after the segment
        local f = assert(io.open(d .. "/journal", "rb"))
        local size = f:seek("end")
        f:close()
        assert.is_true(exists(d .. "/segment.000001"))
        assert.is_true(size < case.seal_bytes, tostring(size))
      end
    end)
  end
end)
