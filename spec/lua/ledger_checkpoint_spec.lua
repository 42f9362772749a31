-- ledger_checkpoint_spec.lua -- checkpoints kept outside the ledger's
-- authority (`airlock ledger checkpoint`, `verify --checkpoint FILE [--key]`)
-- and the per-session bound (the policy's ledger.max_bytes). Every attack is
-- a real one on a real session's files, with a control that passes, so each
-- test can fail. The CLI runs as root and as uid 65534 (the session, the
-- checkpoint file and the key are then that user's); the tampering is done
-- by the spec itself, as whoever holds the journal would.
local H = require "helper"
require "airlock"
local core = require "airlock.core"

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")
local NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups "

local WHO = { "root", "nobody" }

-- Why the uid 65534 half cannot run here, or nil. The sanitizer's preloaded
-- runtime is root's and cannot be loaded by another user, so that half runs
-- in the release build alone; and a checkout uid 65534 cannot enter (a
-- private /tmp/... directory, say) keeps it from the command.
local function nobody_skip()
  if H.sanitized then return "uid 65534 runs are release-build only: the sanitizer's preloaded runtime is root's" end
  local probe, rc = H.sh("cd / && " .. NOBODY .. AIRLOCK .. " version")
  if rc ~= 0 then return "uid 65534 cannot run " .. AIRLOCK .. " here: " .. (probe:match("[^\n]*") or "") end
end

-- airlock ARGS as who; stdout and stderr, and the exit status.
local function cli(who, args)
  return H.sh("cd / && " .. (who == "nobody" and NOBODY or "") .. AIRLOCK .. " " .. args)
end

local function owned(who, path)
  if who == "nobody" then os.execute("chown -R 65534:65534 " .. path) end
end

local function unhex(h) return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end)) end
local function sha(s) return unhex(core.sha256(s)) end

-- The journal's records: { body, hash } each (a session without sealed segments).
local function records(path)
  local data = H.read(path)
  local out, at = {}, 1
  while at <= #data do
    local n = string.unpack(">I4", data, at)
    out[#out + 1] = { body = data:sub(at + 4, at + 3 + n), hash = data:sub(at + 4 + n, at + 35 + n) }
    at = at + 36 + n
  end
  return out
end

-- Writes bodies as a journal with a correct chain from the session id: what
-- whoever holds the journal can always do. The chain then verifies alone.
local function rechain(path, id_hex, bodies)
  local h = sha("airlock-ledger-v1\0" .. unhex(id_hex))
  local parts = {}
  for i, b in ipairs(bodies) do
    h = sha(h .. b)
    parts[i] = string.pack(">I4", #b) .. b .. h
  end
  H.write(path, table.concat(parts))
end

local function raw(path, recs)
  local parts = {}
  for i, r in ipairs(recs) do parts[i] = string.pack(">I4", #r.body) .. r.body .. r.hash end
  H.write(path, table.concat(parts))
end

local function bodies_of(recs)
  local b = {}
  for i, r in ipairs(recs) do b[i] = r.body end
  return b
end

-- The seq field of a body (msgpack: the fixstr "seq", then a positive fixint).
local function renumber(body, from, to)
  local s, n = body:gsub("\xa3seq" .. string.char(from), "\xa3seq" .. string.char(to), 1)
  assert(n == 1, "seq field not found")
  return s
end

local GUEST = 'print("one") print("two") return 42'

describe("core.hmac_sha256", function()
  it("is HMAC-SHA256 (RFC 4231, test cases 1 and 2)", function()
    assert.are.equal("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
      core.hmac_sha256(string.rep("\x0b", 20), "Hi There"))
    assert.are.equal("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
      core.hmac_sha256("Jefe", "what do ya want for nothing?"))
  end)
end)

for _, who in ipairs(WHO) do
  describe("ledger checkpoints (as " .. who .. ")", function()
    -- Where the uid 65534 half cannot run, each of its cases is there, pending.
    local why = who == "nobody" and nobody_skip()
    local it, before_each, after_each = it, before_each, after_each
    if why then
      local real_it = it
      it = function(name) real_it(name, function() pending(why) end) end
      before_each, after_each = function() end, function() end
    end
    local root, dir, cp, id
    before_each(function()
      root = H.tmpdir()
      owned(who, root)
      dir, cp = root .. "/s", root .. "/anchor/cp"
      local out, rc = cli(who, "run -e '" .. GUEST .. "' --ledger " .. dir)
      assert.are.equal(0, rc, out)
      assert(os.execute("mkdir " .. root .. "/anchor"))
      owned(who, root .. "/anchor")
      out, rc = cli(who, "ledger checkpoint " .. dir .. " --to " .. cp)
      assert.are.equal(0, rc, out)
      id = H.read(cp):match("session=(%x+)")
      -- The control of every test below: the untouched session verifies
      -- against its checkpoint file.
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(0, rc, out)
      assert.matches("intact, 7 records, head 7:%x+, 1 checkpoint matches", out)
    end)
    after_each(function() os.execute("rm -rf " .. root) end)

    it("writes one versioned line naming the session, seq, hash and time, to a new file of mode 0600", function()
      local text = H.read(cp)
      assert.matches("^airlock%-checkpoint%-v1 session=%x+ seq=7 hash=%x+ time=%d+%-%d+%-%d+T[%d:]+Z\n$", text)
      assert.are.equal(32, #id)
      assert.are.equal("600\n", (H.sh("stat -c %a " .. cp)))
      local head = cli(who, "ledger head " .. dir)
      assert.are.equal(head:gsub("\n$", ""), "7:" .. text:match("hash=(%x+)"))
      -- Without --to the line is printed; --json says what it holds.
      local out, rc = cli(who, "ledger checkpoint " .. dir)
      assert.are.equal(0, rc)
      assert.matches("^airlock%-checkpoint%-v1 session=" .. id .. " seq=7 ", out)
      local j = require("dkjson").decode((cli(who, "ledger checkpoint " .. dir .. " --json")))
      assert.are.same({ true, id, 7, false }, { j.ok, j.session, j.seq, j.keyed })
    end)

    it("catches one byte altered in a body and the chain re-made (the chain alone cannot)", function()
      local recs = records(dir .. "/journal")
      local b = bodies_of(recs)
      local n
      b[3], n = b[3]:gsub("one\n", "onE\n")
      assert.are.equal(1, n)
      rechain(dir .. "/journal", id, b)
      local out, rc = cli(who, "ledger verify " .. dir)   -- the chain verifies: re-made
      assert.are.equal(0, rc, out)
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(1, rc, out)
      assert.matches("damaged at seq 7: altered: seq 7 has chain hash %x+, checkpoint line 1 says", out)
    end)

    it("catches another whole valid session in its place", function()
      local other = root .. "/other"
      local out, rc = cli(who, "run -e '" .. GUEST .. "' --ledger " .. other)
      assert.are.equal(0, rc, out)
      os.execute("cp " .. other .. "/journal " .. dir .. "/journal")
      out, rc = cli(who, "ledger verify " .. dir)
      assert.are.equal(0, rc, out)   -- a valid session, on its own
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(1, rc, out)
      assert.matches("substituted: the journal is session %x+, checkpoint line 1 names session " .. id, out)
    end)

    it("catches two records reordered, renumbered and re-chained", function()
      local b = bodies_of(records(dir .. "/journal"))
      -- calls and replies 3,4 and 5,6 change places, their seqs made to follow
      b[3], b[4], b[5], b[6] = renumber(b[5], 5, 3), renumber(b[6], 6, 4), renumber(b[3], 3, 5),
                               renumber(b[4], 4, 6)
      rechain(dir .. "/journal", id, b)
      local out, rc = cli(who, "ledger verify " .. dir)
      assert.are.equal(0, rc, out)
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(1, rc, out)
      assert.matches("altered: seq 7 has chain hash", out)
      -- reordered as they are, without renumbering: the chain itself sees it
      local recs = records(dir .. "/journal")
      recs[3], recs[5] = recs[5], recs[3]
      raw(dir .. "/journal", recs)
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(1, rc, out)
      assert.matches("damaged at seq 3", out)
    end)

    it("catches a journal cut before the checkpoint, and lets one cut after the last checkpoint pass", function()
      -- more records after the checkpoint, as a resumed session would add
      local script = root .. "/more.lua"
      H.write(script, string.format([[
        package.cpath = %q .. "/lib/?.so;" .. package.cpath
        require "airlock"
        local L = assert(require("airlock.ledger").open(%q))
        for i = 1, 3 do assert(L:append("note", 1, { i = i })) end
        L:close()
      ]], core.fs_realpath(H.build), dir))
      owned(who, script)
      local out, rc = H.sh("cd / && " .. (who == "nobody" and NOBODY or "") .. "lua5.4 " .. script)
      assert.are.equal(0, rc, out)
      local recs = records(dir .. "/journal")
      assert.are.equal(10, #recs)
      -- the unanchored tail (8..10) cut off: nothing can tell (the documented limit)
      raw(dir .. "/journal", { table.unpack(recs, 1, 7) })
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(0, rc, out)
      -- cut before the checkpoint: truncated
      raw(dir .. "/journal", { table.unpack(recs, 1, 5) })
      out, rc = cli(who, "ledger verify " .. dir)
      assert.are.equal(0, rc, out)   -- a shorter chain is still a chain
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(1, rc, out)
      assert.matches("truncated: the journal ends at seq 5, before checkpoint seq 7 %(line 1%)", out)
    end)

    it("checks every line of a file in one walk, and names the one that fails", function()
      -- a second checkpoint line after more records; then the first is changed
      local text = H.read(cp)
      local b = bodies_of(records(dir .. "/journal"))
      local lines = { text:gsub("seq=7 hash=%x+", "seq=3 hash=" .. string.rep("0", 64)), text }
      H.write(cp, lines[1] .. lines[2])
      local out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp .. " --json")
      assert.are.equal(1, rc, out)
      local j = require("dkjson").decode(out)
      assert.are.same({ false, true }, { j.checkpoints[1].ok, j.checkpoints[2].ok })
      assert.are.same({ 3, "altered" }, { j.checkpoints[1].seq, j.checkpoints[1].damage })
      assert.are.equal(7, #b)
      -- the control: the real hash at seq 3, from the records
      local shown = cli(who, "ledger show " .. dir .. " --json")
      local rec3 = require("dkjson").decode(shown:match("^[^\n]*\n[^\n]*\n([^\n]*)"))
      assert.are.equal(3, rec3.seq)
      H.write(cp, text:gsub("seq=7 hash=%x+", "seq=3 hash=" .. rec3.hash) .. text)
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(0, rc, out)
      assert.matches("2 checkpoints match", out)
    end)

    it("checks a line for every record in one walk, and refuses a file of more lines than one walk asks for", function()
      local lines = {}
      for line in cli(who, "ledger show " .. dir .. " --json"):gmatch("[^\n]+") do
        local rec = require("dkjson").decode(line)
        lines[#lines + 1] = string.format("airlock-checkpoint-v1 session=%s seq=%d hash=%s time=2026-01-01T00:00:00Z",
          id, rec.seq, rec.hash)
      end
      assert.are.equal(7, #lines)
      H.write(cp, table.concat(lines, "\n") .. "\n")
      local out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(0, rc, out)
      assert.matches("7 checkpoints match", out)
      local many = {}
      for i = 1, 4097 do many[i] = lines[1]:gsub("seq=1 ", "seq=" .. i .. " ") end
      H.write(cp, table.concat(many, "\n") .. "\n")
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(2, rc, out)
      assert.matches("holds more than 4096 checkpoints", out)
      -- 4096 of them is one walk: the first matches, the rest are past the journal's end
      H.write(cp, table.concat(many, "\n", 1, 4096) .. "\n")
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp .. " --json")
      assert.are.equal(1, rc, out)
      local j = require("dkjson").decode(out)
      assert.are.same({ 4096, true, "altered", "truncated" },
        { #j.checkpoints, j.checkpoints[1].ok, j.checkpoints[2].damage, j.checkpoints[4096].damage })
    end)

    it("refuses a checkpoint file inside the session, or reached through it", function()
      local out, rc = cli(who, "ledger checkpoint " .. dir .. " --to " .. dir .. "/cp")
      assert.are.equal(2, rc, out)
      assert.matches("is inside the session directory .* an anchor must be outside the ledger's authority", out)
      assert.is_nil(H.slurp(dir .. "/cp"))
      os.execute("ln -s " .. dir .. " " .. root .. "/via")
      out, rc = cli(who, "ledger checkpoint " .. dir .. " --to " .. root .. "/via/cp")
      assert.are.equal(2, rc, out)
      assert.matches("inside the session directory", out)
      out, rc = cli(who, "ledger checkpoint " .. dir .. " --to " .. root .. "/anchor/../s/cp")
      assert.are.equal(2, rc, out)
      os.execute("ln -s " .. dir .. "/journal " .. root .. "/anchor/link")
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. root .. "/anchor/link")
      assert.are.equal(2, rc, out)
      assert.matches("inside the session directory", out)
      -- a link as the file itself is not followed
      os.execute("ln -s " .. root .. "/anchor/elsewhere " .. root .. "/anchor/cplink")
      out, rc = cli(who, "ledger checkpoint " .. dir .. " --to " .. root .. "/anchor/cplink")
      assert.are.equal(2, rc, out)
      assert.matches("symbolic link", out)
      -- the control: beside it, outside, it is written
      out, rc = cli(who, "ledger checkpoint " .. dir .. " --to " .. root .. "/anchor/cp2")
      assert.are.equal(0, rc, out)
    end)

    it("refuses malformed checkpoint files, naming the line", function()
      local good = H.read(cp)
      local cases = {
        { good .. "garbage\n", "line 2: malformed: not a checkpoint line" },
        { good:gsub("v1", "v9"), "line 1: malformed: format airlock%-checkpoint%-v9 is not one this airlock reads" },
        { good .. good, "line 2: seq 7 is not above line 1's seq 7" },
        { good:gsub("hash=%x+", "hash=abc"), "line 1: malformed: a session id is 32 hex digits" },
        { "", "holds no checkpoint" },
        { string.rep("x", 5000) .. "\n", "line 1: over 4096 bytes" },
        { good .. "\n", "line 2: malformed" },
      }
      for _, c in ipairs(cases) do
        H.write(cp, c[1])
        local out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
        assert.are.equal(2, rc, out)
        assert.matches("checkpoint: " .. cp:gsub("%p", "%%%0") .. ".*" .. c[2], out)
      end
      local f = assert(io.open(cp, "wb"))
      f:write(string.rep(good, math.ceil(4 * 1024 * 1024 / #good) + 1))
      f:close()
      local out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(2, rc, out)
      assert.matches("over the 4194304 a checkpoint file may hold", out)
      H.write(cp, good)
      out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. cp)
      assert.are.equal(0, rc, out)
    end)

    describe("keyed", function()
      local key, kcp
      before_each(function()
        key, kcp = root .. "/anchor/key", root .. "/anchor/kcp"
        os.execute("head -c 32 /dev/urandom > " .. key .. " && chmod 600 " .. key)
        owned(who, key)
        local out, rc = cli(who, "ledger checkpoint " .. dir .. " --key " .. key .. " --to " .. kcp)
        assert.are.equal(0, rc, out)
        out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. kcp .. " --key " .. key)
        assert.are.equal(0, rc, out)
        assert.matches("1 checkpoint matches %(keyed%)", out)
      end)

      it("carries an HMAC-SHA256 over the rest of the line", function()
        local line = H.read(kcp):gsub("\n$", "")
        local signed, mac = line:match("^(.*) hmac%-sha256=(%x+)$")
        assert.are.equal(core.hmac_sha256(H.read(key), signed), mac)
      end)

      it("fails a rewritten, re-chained journal whose checkpoint line was forged without the key", function()
        local b = bodies_of(records(dir .. "/journal"))
        b[3] = b[3]:gsub("one\n", "onE\n")
        rechain(dir .. "/journal", id, b)
        -- the forger writes the line for the new head: unkeyed, and with the old MAC kept
        local line = assert(cli(who, "ledger checkpoint " .. dir)):gsub("\n$", "")
        H.write(kcp, line .. "\n")
        local out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. kcp)
        assert.are.equal(0, rc, out)   -- without a key, a forger who writes both wins (documented)
        out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. kcp .. " --key " .. key)
        assert.are.equal(1, rc, out)
        assert.matches("forged: checkpoint line 1 carries no MAC", out)
        local old_mac = string.rep("ab", 32)
        H.write(kcp, line .. " hmac-sha256=" .. old_mac .. "\n")
        out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. kcp .. " --key " .. key)
        assert.are.equal(1, rc, out)
        assert.matches("forged: checkpoint line 1's MAC does not verify under this key", out)
      end)

      it("fails under a wrong key", function()
        local other = root .. "/anchor/other"
        os.execute("head -c 32 /dev/urandom > " .. other .. " && chmod 600 " .. other)
        owned(who, other)
        local out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. kcp .. " --key " .. other)
        assert.are.equal(1, rc, out)
        assert.matches("forged: checkpoint line 1's MAC does not verify", out)
      end)

      it("refuses a key file that is open to others, a link, too short, someone else's or inside the session", function()
        local function refused(k, what)
          local out, rc = cli(who, "ledger checkpoint " .. dir .. " --key " .. k)
          assert.are.equal(2, rc, out)
          assert.matches("airlock: ledger checkpoint: key: .*" .. what, out)
          out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. kcp .. " --key " .. k)
          assert.are.equal(2, rc, out)
        end
        os.execute("chmod 640 " .. key)
        refused(key, "open to its group or others %(mode 0640%): chmod 600 it")
        os.execute("chmod 600 " .. key)
        os.execute("ln -s " .. key .. " " .. root .. "/anchor/keylink")
        refused(root .. "/anchor/keylink", "is a symbolic link")
        os.execute("head -c 16 /dev/urandom > " .. root .. "/anchor/short && chmod 600 " .. root .. "/anchor/short")
        owned(who, root .. "/anchor/short")
        refused(root .. "/anchor/short", "holds 16 bytes, and a key is 32 to 4096 bytes")
        os.execute("cp " .. key .. " " .. root .. "/anchor/theirs && chmod 600 " .. root .. "/anchor/theirs")
        os.execute("chown " .. (who == "nobody" and "0:0 " or "65534:65534 ") .. root .. "/anchor/theirs")
        if who == "nobody" then
          refused(root .. "/anchor/theirs", "cannot open")   -- root's 0600 file: not even readable
        else
          refused(root .. "/anchor/theirs", "is owned by uid 65534, not by this user %(uid 0%)")
        end
        os.execute("cp -p " .. key .. " " .. dir .. "/key")
        local out, rc = cli(who, "ledger checkpoint " .. dir .. " --key " .. dir .. "/key")
        assert.are.equal(2, rc, out)
        assert.matches("the key file .* is inside the session directory", out)
        -- the control: the key itself still works
        out, rc = cli(who, "ledger checkpoint " .. dir .. " --key " .. key)
        assert.are.equal(0, rc, out)
        assert.matches("hmac%-sha256=%x+", out)
      end)

      it("refuses --key with a bare SEQ:HASH, which carries no MAC", function()
        local head = cli(who, "ledger head " .. dir):gsub("\n$", "")
        local out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. head .. " --key " .. key)
        assert.are.equal(2, rc, out)
        assert.matches("a bare SEQ:HASH carries no MAC", out)
        out, rc = cli(who, "ledger verify " .. dir .. " --checkpoint " .. head)
        assert.are.equal(0, rc, out)
      end)
    end)
  end)

  describe("the per-session bound, ledger.max_bytes (as " .. who .. ")", function()
    local root
    before_each(function()
      root = H.tmpdir()
      H.write(root .. "/small.lua", 'return require("airlock.policy").extend("untrusted", ' ..
        '{ name = "small", ledger = { max_bytes = "8K" } })')
      owned(who, root)
    end)
    after_each(function() os.execute("rm -rf " .. root) end)

    local FLOOD = "for i = 1, 400 do print(string.rep([[x]], 100)) end return 1"

    it("ends a guest that records past it with cause ledger, naming the field", function()
      local out, rc = cli(who, "run -e '" .. FLOOD .. "' --policy " .. root .. "/small.lua --json --ledger " ..
        root .. "/s")
      assert.are.equal(1, rc, out)
      local j = require("dkjson").decode(out)
      assert.are.equal("ledger", j.cause)
      assert.matches("the session's journal has reached its bound of 8192 bytes, the policy's ledger.max_bytes",
        j.message)
      out, rc = cli(who, "ledger verify " .. root .. "/s")   -- what was recorded is whole
      assert.are.equal(0, rc, out)
      -- the control: the same guest under the default bound (1 GiB) records it all
      out, rc = cli(who, "run -e '" .. FLOOD .. "' --json --ledger " .. root .. "/s2")
      assert.are.equal(0, rc, out)
    end)

    it("bounds airlock exec's session too, and its ledger error names the field", function()
      H.write(root .. "/tiny.lua", 'return require("airlock.policy").extend("tool", ' ..
        '{ name = "tiny", ledger = { max_bytes = 300 } })')
      os.execute("mkdir " .. root .. "/ws")
      owned(who, root)
      local out, rc = cli(who, "exec --policy " .. root .. "/tiny.lua --workspace " .. root .. "/ws --ledger " ..
        root .. "/s --json -- true")
      assert.are.equal(0, rc, out)   -- the program ran; its end could not be recorded
      local j = require("dkjson").decode(out)
      assert.matches("its bound of 300 bytes, the policy's ledger.max_bytes", j.ledger.error)
      out, rc = cli(who, "exec --workspace " .. root .. "/ws --ledger " .. root .. "/s2 --json -- true")
      assert.are.equal(0, rc, out)
      assert.is_nil(require("dkjson").decode(out).ledger.error)
    end)
  end)
end
