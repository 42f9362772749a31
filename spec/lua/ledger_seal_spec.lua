-- ledger_seal_spec.lua -- sealed segments through the ledger process: a run
-- recorded with a small seal_bytes lands in zstd segments that verify, stream
-- and replay exactly, without the host ever holding a segment; damage in a
-- segment (a flipped byte, an unknown codec, a forged length) is named with the
-- segment, each beside a control copy that verifies.
local H = require "helper"
local airlock = require "airlock"
local ledger = require "airlock.ledger"

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
