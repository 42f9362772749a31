-- ledger_restore_spec.lua -- airlock ledger revert and reapply: an overlaid
-- run's committed change set (a file created, one modified, one deleted, a
-- link replaced, directories made) undone and done again from the session's
-- journal and the contents it kept, byte for byte; a directory made is removed
-- only when empty; refused, with nothing written, when a run deleted a
-- directory (its contents are not kept), when a path
-- changed since, a blob is missing or altered, or the journal was tampered
-- with. Each refusal has its control: the same session, untouched, is
-- restored. Run as root and as uid 65534 (setpriv); where this kernel cannot
-- mount an overlay in a user namespace the cases print "skipped: <reason>".
local H = require "helper"
require "airlock"
local core = require "airlock.core"
local dkjson = require "dkjson"

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")
local NOBODY = H.NOBODY

local function overlay_absent()
  local out, rc = H.sh(NOBODY .. "env -u LD_PRELOAD unshare -Urm sh -c 'd=$(mktemp -d) && " ..
    "mkdir $d/l $d/t $d/m && mount -t tmpfs -o size=1m tmpfs $d/t && mkdir $d/t/u $d/t/w && " ..
    "mount -t overlay -o userxattr,lowerdir=$d/l,upperdir=$d/t/u,workdir=$d/t/w overlay $d/m && " ..
    "echo x > $d/m/f && cat $d/m/f; umount $d/m $d/t; rm -rf $d'")
  if rc ~= 0 or out ~= "x\n" then
    return "an unprivileged user namespace cannot mount an overlay on a tmpfs here: " .. (out:match("[^\n]*") or "")
  end
end

local ABSENT = overlay_absent()

-- Every entry of a workspace: its type, mode, and content's hash or link's text.
local function snapshot(ws)
  return (H.sh("cd " .. ws .. " && find . -mindepth 1 | sort | while read f; do if [ -L \"$f\" ]; then " ..
    "echo \"L $f $(readlink \"$f\")\"; elif [ -f \"$f\" ]; then echo \"F $f $(stat -c %a \"$f\") " ..
    "$(sha256sum < \"$f\")\"; else echo \"D $f\"; fi; done"))
end

for _, caller in ipairs { { name = "root", prefix = "" }, { name = "uid 65534", prefix = NOBODY } } do
  describe("ledger revert and reapply run by " .. caller.name, function()
    local ws, pdir, ldir, session, original, committed
    before_each(function()
      if ABSENT then return end
      ws, pdir, ldir = H.tmpdir(), H.tmpdir(), H.tmpdir()
      H.write(ws .. "/kept.txt", "kept\n")
      H.write(ws .. "/mod.txt", "old\n")
      H.write(ws .. "/del.txt", "gone\n")
      assert(os.execute("mkdir " .. ws .. "/sub"))
      H.write(ws .. "/sub/f.txt", "sub old\n")
      assert(os.execute("chmod 777 " .. ws .. "/sub && chmod 640 " .. ws .. "/sub/f.txt"))
      assert(os.execute("ln -s kept.txt " .. ws .. "/link && chmod 777 " .. ws .. " && chmod 640 " .. ws ..
        "/*.txt && chmod 755 " .. pdir .. " && chmod 777 " .. ldir))
      if caller.prefix ~= "" then assert(os.execute("chown -h -R 65534:65534 " .. ws)) end
      local pol = pdir .. "/p.lua"
      H.write(pol, 'local policy = require "airlock.policy"\nreturn policy.extend("tool", { name = "restore-spec", ' ..
        'tool = { overlay = { max_bytes = "8M", max_files = 1000, commit = "always" } } })\n')
      os.execute("chmod 644 " .. pol)
      original = snapshot(ws)
      session = ldir .. "/s"
      local out = H.sh(caller.prefix .. AIRLOCK .. " exec --json --policy " .. pol .. " --workspace " .. ws ..
        " --ledger " .. session .. " -- sh -c 'printf new > new; printf changed > mod.txt; rm del.txt; " ..
        "ln -sfn elsewhere link; printf subnew > sub/f.txt; mkdir -p made/deep; printf in > made/deep/f' 2>/dev/null")
      local res = assert(dkjson.decode(out), out)
      assert.is_true(res.overlay.applied >= 8, out)
      committed = snapshot(ws)
      assert.are_not.equal(original, committed)
    end)
    after_each(function() if ws then os.execute("rm -rf " .. ws .. " " .. pdir .. " " .. ldir) end end)

    local function ledger(sub, extra)
      return H.sh(caller.prefix .. AIRLOCK .. " ledger " .. sub .. " " .. session .. (extra or "") .. " 2>&1")
    end

    it("reverts a committed set byte for byte, and reapplies it", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local out, rc = ledger("revert")
      assert.are.equal(0, rc, out)
      assert.are.equal(original, snapshot(ws))
      assert.are.equal("old\n", H.read(ws .. "/mod.txt"))
      assert.are.equal("kept.txt", H.readlink(ws .. "/link"))
      out, rc = ledger("reapply")
      assert.are.equal(0, rc, out)
      assert.are.equal(committed, snapshot(ws))
      -- Reverting again from the reapplied state, one run's changes by number.
      out, rc = ledger("revert", " --run 1")
      assert.are.equal(0, rc, out)
      assert.are.equal(original, snapshot(ws))
    end)

    it("undoes the steps it took when a later one fails (an immutable file), then succeeds without it", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      -- chattr +i makes renaming over mod.txt fail (EPERM) after the revert
      -- has put other files in place and moved others aside; those are
      -- undone. The control: the same revert once the flag is cleared.
      local _, crc = H.host("chattr +i " .. ws .. "/mod.txt 2>&1")
      if crc ~= 0 then pending("skipped: chattr +i does not work on " .. ws .. "'s file system") return end
      local out, rc = ledger("revert")
      H.host("chattr -i " .. ws .. "/mod.txt")
      assert.are.equal(1, rc, out)
      assert.matches("mod.txt: rename into place: Operation not permitted; the %d+ changes? before it undone; " ..
        "nothing in the workspace was changed", out)
      assert.falsy(out:match("the 0 changes before"), out)   -- the case is one with steps to undo
      assert.are.equal(committed, snapshot(ws))
      assert.are.equal("", (H.sh("find " .. ws .. " -name '.airlock*'")))   -- nothing left aside
      out, rc = ledger("revert")
      assert.are.equal(0, rc, out)
      assert.are.equal(original, snapshot(ws))
    end)

    it("removes the directories a run made, leaving one that holds a file made since, and says so", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      assert.are.equal("in", H.read(ws .. "/made/deep/f"))
      H.write(ws .. "/made/mine.txt", "the user's\n")   -- made after the run: no record names it
      local out, rc = ledger("revert")
      assert.are.equal(0, rc, out)
      assert.truthy(out:find("left the directory made: it holds what no record names", 1, true), out)
      assert.are.equal("the user's\n", H.read(ws .. "/made/mine.txt"))
      assert.is_nil(H.slurp(ws .. "/made/deep/f"))
      assert.are.equal("", H.sh("ls -A " .. ws .. "/made/deep 2>&1 | grep -v 'No such'"))   -- deep was empty: removed
      -- The control: with the user's file and the directory left gone, the
      -- workspace is as the run found it, and the set goes and comes back whole.
      assert(os.execute("rm " .. ws .. "/made/mine.txt && rmdir " .. ws .. "/made"))
      assert.are.equal(original, snapshot(ws))
      out, rc = ledger("reapply")
      assert.are.equal(0, rc, out)
      assert.are.equal(committed, snapshot(ws))
      out, rc = ledger("revert")
      assert.are.equal(0, rc, out)
      assert.is_nil(out:find("left the directory", 1, true), out)
      assert.are.equal(original, snapshot(ws))
    end)

    it("refuses to revert a run that deleted a directory, whose contents were not kept", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local function session_of(name, script)
        local dir = ldir .. "/" .. name
        local out = H.sh(caller.prefix .. AIRLOCK .. " exec --json --policy " .. pdir .. "/p.lua --workspace " ..
          ws .. " --ledger " .. dir .. " -- sh -c '" .. script .. "'")
        local res = assert(dkjson.decode(out), out)
        assert.is_truthy(res.overlay and res.overlay.applied >= 1, out)
        return dir
      end
      -- The control: a run that made a file is reverted.
      local made = session_of("s2", "printf more > more.txt")
      local out, rc = H.sh(caller.prefix .. AIRLOCK .. " ledger revert " .. made .. " 2>&1")
      assert.are.equal(0, rc, out)
      assert.is_nil(H.slurp(ws .. "/more.txt"))
      local deleted = session_of("s3", "rm -r sub")
      local now = snapshot(ws)
      out, rc = H.sh(caller.prefix .. AIRLOCK .. " ledger revert " .. deleted .. " 2>&1")
      assert.are.equal(1, rc, out)
      assert.truthy(out:find("(sub)", 1, true) and out:find("deleted or emptied a directory", 1, true), out)
      assert.are.equal(now, snapshot(ws))
    end)

    it("reverts a branch of the session, whose kept contents the branch copied", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      -- The branch is made by the session's owner (the ledger process it
      -- starts opens the journal as that user).
      if caller.prefix ~= "" and H.sanitized then
        pending("skipped: release build only: the sanitizer's preloaded runtime is root's")
        return
      end
      local branch = ldir .. "/b"
      local script = ldir .. "/branch.lua"
      H.write(script, string.format([[
        package.cpath = %q .. "/lib/?.so;" .. package.cpath
        local ledger = require("airlock").ledger
        local last = 0
        for rec in ledger.records(%q) do last = rec.seq end
        local ok, info = ledger.branch(%q, last, %q)
        print(ok, info and info.blobs, info and info.blobs_missing)
      ]], core.fs_realpath(H.build), session, session, branch))
      assert(os.execute("chmod 644 " .. script))
      local made = H.sh("cd / && " .. caller.prefix .. "lua5.4 " .. script)
      local copied, missing = made:match("^true\t(%d+)\t(%d+)\n$")
      assert.is_truthy(copied, made)
      assert.is_true(tonumber(copied) >= 5, made)
      assert.are.equal("0", missing)
      local out, rc = H.sh(caller.prefix .. AIRLOCK .. " ledger revert " .. branch .. " 2>&1")
      assert.are.equal(0, rc, out)
      assert.are.equal(original, snapshot(ws))
      -- The control: a branch whose blobs are gone is refused, writing nothing.
      out, rc = H.sh(caller.prefix .. AIRLOCK .. " ledger reapply " .. branch .. " 2>&1")
      assert.are.equal(0, rc, out)
      assert(os.execute("rm -rf " .. branch .. "/blobs"))
      out, rc = H.sh(caller.prefix .. AIRLOCK .. " ledger revert " .. branch .. " 2>&1")
      assert.are.equal(1, rc, out)
      assert.truthy(out:find("no blobs/", 1, true) or out:find("missing", 1, true), out)
      assert.are.equal(committed, snapshot(ws))
    end)

    it("refuses to revert a file changed since, writing nothing, unless --force", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      H.write(ws .. "/mod.txt", "edited by hand\n")
      local before = snapshot(ws)
      local out, rc = ledger("revert")
      assert.are.equal(1, rc, out)
      assert.truthy(out:find("mod.txt", 1, true) and out:find("--force", 1, true), out)
      assert.are.equal(before, snapshot(ws))
      out, rc = ledger("revert", " --force")   -- the control: the same revert, forced
      assert.are.equal(0, rc, out)
      assert.are.equal(original, snapshot(ws))
    end)

    it("refuses to reapply over a workspace that is not as the run found it", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local out, rc = ledger("reapply")   -- the set is applied already: mod.txt is not "old"
      assert.are.equal(1, rc, out)
      assert.truthy(out:find("nothing was changed", 1, true), out)
      assert.are.equal(committed, snapshot(ws))
    end)

    it("refuses, even forced, to write through a link planted in place of a directory", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local outside = H.tmpdir()
      H.write(outside .. "/f.txt", "subnew")
      assert(os.execute("chmod 777 " .. outside .. " && chmod 666 " .. outside .. "/f.txt && mv " .. ws ..
        "/sub " .. ws .. "/sub.real && ln -s " .. outside .. " " .. ws .. "/sub"))
      local before = snapshot(ws)
      local out, rc = ledger("revert", " --force")
      assert.are.equal(1, rc, out)
      assert.truthy(out:find("sub/f.txt cannot be looked at through no link", 1, true), out)
      assert.are.equal("subnew", H.read(outside .. "/f.txt"))
      assert.are.equal(before, snapshot(ws))
      -- The control: the directory back in place, the same revert writes it.
      assert(os.execute("rm " .. ws .. "/sub && mv " .. ws .. "/sub.real " .. ws .. "/sub"))
      out, rc = ledger("revert", " --force")
      assert.are.equal(0, rc, out)
      assert.are.equal(original, snapshot(ws))
      assert.are.equal("subnew", H.read(outside .. "/f.txt"))
      os.execute("rm -rf " .. outside)
    end)

    it("refuses when a blob is missing or altered, writing nothing", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local old = core.sha256("old\n")
      local blob = session .. "/blobs/" .. old:sub(1, 2) .. "/" .. old
      assert.are.equal("old\n", H.read(blob))
      assert(os.execute("mv " .. blob .. " " .. blob .. ".away"))
      local out, rc = ledger("revert")
      assert.are.equal(1, rc, out)
      assert.truthy(out:find("missing", 1, true), out)
      assert.are.equal(committed, snapshot(ws))
      assert(os.execute("mv " .. blob .. ".away " .. blob .. " && chmod u+w " .. blob))
      H.write(blob, "not old\n")
      out, rc = ledger("revert")
      assert.are.equal(1, rc, out)
      assert.truthy(out:find("altered", 1, true), out)
      assert.are.equal(committed, snapshot(ws))
      H.write(blob, "old\n")   -- the control: the blob as it was kept
      out, rc = ledger("revert")
      assert.are.equal(0, rc, out)
      assert.are.equal(original, snapshot(ws))
    end)

    it("refuses a tampered journal, writing nothing", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local j = assert(io.open(session .. "/journal", "rb"))
      local bytes = j:read("a")
      j:close()
      local at = assert(bytes:find("mod.txt", 1, true))
      local w = assert(io.open(session .. "/journal", "r+b"))
      w:seek("set", at - 1)
      w:write("del")   -- a record of mod.txt now names del.txt
      w:close()
      local out, rc = ledger("revert")
      assert.are.equal(1, rc, out)
      assert.truthy(out:find("does not verify", 1, true), out)
      assert.are.equal(committed, snapshot(ws))
    end)
  end)
end

-- A revert that runs out of space while writing: the workspace is a small
-- tmpfs (mounted in a mount namespace of the spec's own, as root: the
-- behaviour under test is the restorer's, whoever runs it), filled before
-- the revert; the revert then fails with nothing in the workspace changed,
-- and, the space given back, the same revert is done (the control).
describe("ledger revert on a full disk", function()
  it("fails before anything is replaced or removed, and undoes what it had added", function()
    if ABSENT then pending("skipped: " .. ABSENT) return end
    local root = H.tmpdir()
    local pol = root .. "/p.lua"
    H.write(pol, 'local policy = require "airlock.policy"\nreturn policy.extend("tool", { name = "full-spec", ' ..
      'tool = { overlay = { max_bytes = "8M", max_files = 1000, commit = "always" } } })\n')
    local script = string.format([[
set -u
ws=%s/ws; s=%s/s
mkdir $ws && mount -t tmpfs -o size=512k tmpfs $ws || { echo "cannot mount"; exit 3; }
head -c 307200 /dev/zero > $ws/big.txt
mkdir $ws/keep && printf kept > $ws/keep/f
%s exec --policy %s --workspace $ws --ledger $s -- sh -c 'printf small > big.txt; printf new > new.txt; mkdir made; printf in > made/f' >/dev/null 2>&1 || { echo "the run failed"; exit 3; }
head -c 360000 /dev/zero > $ws/fill 2>/dev/null
echo "before: $(wc -c < $ws/big.txt) $(cat $ws/new.txt) $(ls $ws | tr '\n' ' ')"
%s ledger revert $s 2>&1; echo "rc=$?"
echo "after: $(wc -c < $ws/big.txt) $(cat $ws/new.txt) $(ls -A $ws | tr '\n' ' ')"
rm $ws/fill
%s ledger revert $s >/dev/null 2>&1; echo "control rc=$?"
echo "control: $(wc -c < $ws/big.txt) $(ls -A $ws | tr '\n' ' ')"
umount $ws
]], root, root, AIRLOCK, pol, AIRLOCK, AIRLOCK)
    H.write(root .. "/full.sh", script)
    local out = H.sh("env -u LD_PRELOAD unshare -m --propagation private sh " .. root .. "/full.sh")
    os.execute("rm -rf " .. root)
    assert.matches("before: 5 new big.txt fill keep made new.txt \n", out, 1, true)
    assert.matches("No space left on device; nothing in the workspace was changed", out, 1, true)
    assert.matches("\nrc=1\n", out, 1, true)
    assert.matches("after: 5 new big.txt fill keep made new.txt \n", out, 1, true)
    assert.matches("control rc=0\n", out, 1, true)
    assert.matches("control: 307200 big.txt keep \n", out, 1, true)
  end)
end)
