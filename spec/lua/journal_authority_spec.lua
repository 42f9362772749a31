-- journal_authority_spec.lua -- what a journal or a ledger path may make the
-- parent do: replay, resume and branch never run a policy file a journal
-- names, and a ledger is never written through a link a program planted, into
-- a directory someone else controls, or inside the run's own workspace.
-- Every refusal has a control that succeeds, so the test can fail.
local H = require "helper"
require "airlock"
local core = require "airlock.core"

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")

describe("a journal", function()
  local dir, marker, polfile, guest
  before_each(function()
    dir = H.tmpdir()
    marker = dir .. "/policy-file-ran"
    -- A policy file that leaves a mark when it is run: the parent runs it
    -- only when a user names it.
    polfile = dir .. "/mine.lua"
    H.write(polfile, string.format('local f = io.open(%q, "a"); f:write("ran\\n"); f:close()\n' ..
      'return { name = "mine", limits = { deadline_ms = "2s" } }', marker))
    guest = dir .. "/g.lua"
    H.write(guest, 'print("hi") return 7')
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("that names a policy file is never run under it unless the user names it", function()
    local out, rc = H.sh(AIRLOCK .. " run " .. guest .. " --policy " .. polfile .. " --ledger " .. dir .. "/s")
    assert.are.equal(0, rc, out)
    os.remove(marker)
    for _, cmd in ipairs { "replay " .. dir .. "/s", "resume " .. dir .. "/s --input 1" } do
      out, rc = H.sh(AIRLOCK .. " " .. cmd)
      assert.are.equal(2, rc, out)
      if cmd:match("^replay") then
        assert.matches("names the policy '" .. polfile:gsub("%p", "%%%0") .. "', which is not a stock policy", out)
      end
    end
    assert.is_nil(H.slurp(marker))
    -- The control: named by the user, the same file runs, and replay is identical.
    out, rc = H.sh(AIRLOCK .. " replay " .. dir .. "/s --policy " .. polfile)
    assert.are.equal(0, rc, out)
    assert.matches("identical", out)
    assert.are.equal("ran\n", H.slurp(marker))
  end)

  it("recorded under a stock policy replays under it; a different digest needs --policy-changed", function()
    local out, rc = H.sh(AIRLOCK .. " run " .. guest .. " --ledger " .. dir .. "/s")
    assert.are.equal(0, rc, out)
    out, rc = H.sh(AIRLOCK .. " replay " .. dir .. "/s")
    assert.are.equal(0, rc, out)
    assert.matches("identical", out)
    out, rc = H.sh(AIRLOCK .. " replay " .. dir .. "/s --policy " .. polfile)
    assert.are.equal(2, rc, out)
    assert.matches("is not the one the run was recorded under %(digest", out)
    assert.matches("%-%-policy%-changed", out)
    out, rc = H.sh(AIRLOCK .. " replay " .. dir .. "/s --policy " .. polfile .. " --policy-changed")
    assert.are.equal(0, rc, out)
    assert.matches("note: the policy", out)
  end)
end)

describe("a denied call", function()
  it("leaves a record (decision deny), without its args, and replay still matches", function()
    local dir = H.tmpdir()
    local g = dir .. "/g.lua"
    H.write(g, 'local ok = pcall(host.call, "fs.delete", { path = "/etc" }) return ok')
    local out, rc = H.sh(AIRLOCK .. " run " .. g .. " --ledger " .. dir .. "/s")
    assert.are.equal(0, rc, out)
    assert.matches("false", out)
    local shown = H.sh(AIRLOCK .. " ledger show " .. dir .. "/s --json")
    local found
    for line in shown:gmatch("[^\n]+") do
      local rec = require("dkjson").decode(line)
      if type(rec) == "table" and rec.kind == "call" and rec.effect == "fs.delete" then found = rec end
    end
    assert.is_table(found, shown)
    assert.are.equal("deny", found.decision)
    assert.are.equal(false, found.granted)
    assert.is_nil(found.args)
    out, rc = H.sh(AIRLOCK .. " replay " .. dir .. "/s")
    assert.are.equal(0, rc, out)
    assert.matches("identical", out)
    -- The control: without a ledger nothing is recorded anywhere, and the
    -- guest sees the same refusal.
    out = H.sh(AIRLOCK .. " run " .. g)
    assert.matches("false", out)
    os.execute("rm -rf " .. dir)
  end)
end)

describe("what one run may make the host write", function()
  local airlock = require "airlock"
  local handlers = airlock.handlers
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  local FLOOD = [[
    local n = 0
    for i = 1, 5000 do
      local ok = pcall(host.call, "note", { text = string.rep("x", 200) })
      if not ok then break end
      n = i
    end
    return n]]

  it("a call flood into the ledger ends with cause ledger at limits.ledger", function()
    local effects = { note = function() return true end }
    -- The control: unbounded, all 5,000 calls are recorded.
    local res = assert(airlock.run { guest = FLOOD, ledger = dir .. "/a",
      policy = { effects = effects, limits = { ledger = 0, deadline_ms = "30s" } } })
    assert.are.equal("ok", res.cause, res.message)
    assert.are.equal(5000, res.value)
    res = assert(airlock.run { guest = FLOOD, ledger = dir .. "/b",
      policy = { effects = effects, limits = { ledger = "64K", deadline_ms = "30s" } } })
    assert.are.equal("ledger", res.cause, res.message)
    assert.matches("limits.ledger %(65536%)", res.message)
    local journal = H.read(dir .. "/b/journal")
    assert.is_true(#journal < 64 * 1024 + 8192, #journal .. " bytes")
    assert.is_true(require("airlock.ledger").verify(dir .. "/b").ok)
  end)

  it("a put loop into a kv store stops at max_written", function()
    local guest = [[
      local n = 0
      for i = 1, 400 do
        local ok = pcall(host.call, "kv.put", { key = "k" .. i, value = string.rep("v", 512) })
        if not ok then break end
        n = i
      end
      return n]]
    local function run(max)
      local kvdir = dir .. "/kv-" .. tostring(max)
      os.execute("mkdir -p " .. kvdir)
      return assert(airlock.run { guest = guest, policy = {
        effects = handlers.kv { dir = kvdir, max_written = max }, limits = { deadline_ms = "30s" } } })
    end
    local control = run(0)
    assert.are.equal(400, control.value, control.message)
    local res = run("1M")
    assert.are.equal("ok", res.cause, res.message)
    assert.is_true(res.value > 10 and res.value < 400, tostring(res.value))
  end)
end)

describe("a ledger directory", function()
  local root, ws, target
  before_each(function()
    root = H.tmpdir()
    assert(os.execute("chmod 755 " .. root))
    ws = root .. "/ws"
    target = root .. "/target"
    assert(os.execute("mkdir -m 700 " .. ws .. " " .. target))
  end)
  after_each(function() os.execute("rm -rf " .. root) end)

  local function exec_with_ledger(ledger)
    return H.sh("cd " .. ws .. " && " .. AIRLOCK .. " exec --workspace " .. ws .. " --ledger " .. ledger ..
      " -- true")
  end

  it("is not followed through a link a program planted", function()
    -- The program plants the link, for real, from inside its own run.
    local out, rc = H.sh("cd " .. ws .. " && " .. AIRLOCK .. " exec --workspace " .. ws ..
      " -- ln -s " .. target .. " planted")
    assert.are.equal(0, rc, out)
    assert.are.equal(target, H.readlink(ws .. "/planted"))
    assert(os.execute("mv " .. ws .. "/planted " .. root .. "/planted"))
    out, rc = exec_with_ledger(root .. "/planted")
    assert.are_not.equal(0, rc, out)
    assert.matches("is a symbolic link", out)
    assert.is_nil(H.slurp(target .. "/journal"))
    -- The control: the real directory takes the ledger.
    out, rc = exec_with_ledger(target)
    assert.are.equal(0, rc, out)
    assert.is_not_nil(H.slurp(target .. "/journal"))
  end)

  it("is refused inside the run's own workspace", function()
    local out, rc = exec_with_ledger(ws .. "/ledger")
    assert.are_not.equal(0, rc, out)
    assert.matches("is inside the workspace", out)
    assert.is_nil(H.slurp(ws .. "/ledger/journal"))
  end)

  it("is refused when others may write it, or someone else owns it", function()
    assert(os.execute("chmod 777 " .. target))
    local out, rc = exec_with_ledger(target)
    assert.are_not.equal(0, rc, out)
    assert.matches("writable by others", out)
    assert(os.execute("chmod 700 " .. target))
    assert(os.execute("chown 65534 " .. target))   -- the suite runs as root
    out, rc = exec_with_ledger(target)
    assert.are_not.equal(0, rc, out)
    assert.matches("owned by uid 65534", out)
    assert.is_nil(H.slurp(target .. "/journal"))
  end)
end)
