-- exec_overlay_spec.lua -- tool.overlay: the program sees its workspace
-- through a copy-on-write overlay whose writable layer is a tmpfs the kernel
-- bounds (tool.overlay.max_bytes, max_files). A program that fills it gets
-- ENOSPC, the run a violation naming the field; the change set is read from
-- the layer and applied as tool.overlay.commit says (never: the workspace is
-- not written), by the parent, through no link and never in place. Each
-- hostile run has a control: the same program in the plain bind mode (the
-- default, unchanged) or unconfined, where the write succeeds. Run as root and as uid 65534 (setpriv); where this kernel cannot
-- mount an overlay in a user namespace (the control, asked of the kernel with
-- unshare and mount), the cases print "skipped: <reason>".
local H = require "helper"
require "airlock"
local core = require "airlock.core"
local dkjson = require "dkjson"

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")
local NOBODY = H.NOBODY

-- Why uid 65534 cannot mount an overlay on a tmpfs in a user namespace of its
-- own here (the kernel's own answer, no airlock involved), or nil.
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

-- A policy file: the stock tool policy with the overlay section given
-- (commit: Lua source of its value, default "never").
local function overlay_policy(dir, max_bytes, max_files, commit, ledger_limit)
  local path = dir .. "/overlay_policy.lua"
  H.write(path, string.format('local policy = require "airlock.policy"\n' ..
    'return policy.extend("tool", { name = "overlay-spec", %stool = { overlay = { max_bytes = %q, ' ..
    'max_files = %d, commit = %s } } })\n', ledger_limit and ("limits = { ledger = %q }, "):format(ledger_limit)
    or "", max_bytes, max_files, commit or '"never"'))
  os.execute("chmod 644 " .. path)
  return path
end

-- The --json result of a program run, and its raw text.
local function json_run(prefix, args, script)
  local out = H.sh(prefix .. AIRLOCK .. " exec --json " .. args .. " -- sh -c '" .. script .. "' 2>/dev/null")
  return dkjson.decode(out), out
end

local function rule_of(res, rule)
  for _, v in ipairs(res.violations or {}) do if v.rule == rule then return v end end
end

for _, caller in ipairs { { name = "root", prefix = "" }, { name = "uid 65534", prefix = NOBODY } } do
  describe("tool.overlay run by " .. caller.name, function()
    local ws, pdir
    before_each(function()
      ws, pdir = H.tmpdir(), H.tmpdir()
      H.write(ws .. "/kept.txt", "original\n")
      -- The caller's own workspace: an unprivileged overlay cannot copy up a
      -- file whose owner its user namespace does not map (EOVERFLOW).
      assert(os.execute("chmod -R 777 " .. ws .. " && chmod 755 " .. pdir))
      if caller.prefix ~= "" then assert(os.execute("chown -R 65534:65534 " .. ws)) end
    end)
    after_each(function() os.execute("rm -rf " .. ws .. " " .. pdir) end)

    local function bind(script) return json_run(caller.prefix, "--workspace " .. ws, script) end
    local function overlaid(max_bytes, max_files, script, commit, extra, ledger_limit)
      return json_run(caller.prefix, "--policy " ..
        overlay_policy(pdir, max_bytes, max_files, commit, ledger_limit) .. " --workspace " .. ws .. (extra or ""),
        script)
    end
    -- The workspace.change records of a session, by path.
    local function change_records(dir)
      local out = {}
      for line in H.sh(caller.prefix .. AIRLOCK .. " ledger show " .. dir .. " --json"):gmatch("[^\n]+") do
        local r = dkjson.decode(line)
        if r and r.kind == "workspace.change" then out[r.path] = r end
      end
      return out
    end
    -- The workspace as a sorted listing: "path type mode [target]" per line.
    local function listing()
      return (H.sh("cd " .. ws .. " && find . -mindepth 1 -printf '%p %y %m %l\\n' | sort"))
    end
    local function result_of(res, path)
      for _, r in ipairs(res.overlay.results or {}) do if r.path == path then return r end end
    end

    it("bounds what a program writes: ENOSPC past max_bytes, a violation, the workspace untouched", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local filler = "dd if=/dev/zero of=fill bs=1M count=24 2>&1; echo rc=$?; ls -l fill"
      -- The control: the plain bind mode writes all of it, into the workspace.
      local res = assert(bind(filler))
      assert.are.equal(0, res.exit_code)
      assert.truthy(res.stdout:find("rc=0\n", 1, true), res.stdout)
      assert.are.equal(24 * 1048576, H.file_size(ws .. "/fill"))
      assert.is_nil(rule_of(res, "tool.overlay.max_bytes"))
      os.remove(ws .. "/fill")
      -- Overlaid with an 8 MiB layer: the program is refused with ENOSPC.
      res = assert(overlaid("8M", 1000, filler))
      assert.truthy(res.stdout:find("No space left on device", 1, true), res.stdout)
      assert.truthy(res.stdout:find("rc=1\n", 1, true), res.stdout)
      local v = assert(rule_of(res, "tool.overlay.max_bytes"), "no violation for the bound")
      assert.are.equal("limit", v.kind)
      assert.are.equal(8 * 1048576, res.overlay.bytes_max)
      assert.are.equal(res.overlay.bytes_max, res.overlay.bytes_used)
      assert.are.equal("never", res.overlay.commit)
      assert.are.equal(0, res.overlay.applied)
      -- The host holds none of it: the real workspace is as it was.
      assert.is_nil(io.open(ws .. "/fill", "rb"))
      assert.are.equal("original\n", H.read(ws .. "/kept.txt"))
    end)

    it("bounds how many files a program makes: ENOSPC past max_files, a violation", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      -- (echo, not ":", whose failed redirection would end the shell: a special built-in)
      local maker = "i=0; while [ $i -lt 300 ]; do echo > f$i || break; i=$((i+1)); done; echo made=$i"
      local res = assert(bind(maker))   -- the control
      assert.are.equal("made=300\n", res.stdout)
      os.execute("rm -f " .. ws .. "/f*")
      res = assert(overlaid("8M", 100, maker))
      assert.are.equal("made=100\n", res.stdout)   -- exactly the bound
      assert.truthy(res.stderr:find("No space left on device", 1, true), res.stderr)
      assert.truthy(rule_of(res, "tool.overlay.max_files"), "no violation for the bound")
      assert.are.equal(100, res.overlay.files_max)
      assert.is_nil(io.open(ws .. "/f0", "rb"))
    end)

    it("bounds a change set's sparse files by their length: none of it is applied past max_bytes", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local sparse = "truncate -s 1G big && echo small > s && echo rc=$?"
      -- The control: the bind mode makes the sparse file (it takes no disk there).
      local res = assert(bind(sparse))
      assert.are.equal("rc=0\n", res.stdout)
      assert.are.equal(1073741824, H.file_size(ws .. "/big"))
      os.execute("rm -f " .. ws .. "/big " .. ws .. "/s")
      -- Overlaid in an 8 MiB layer it takes no space either, but applied it
      -- would be written whole: the set is not read, nothing is applied.
      res = assert(overlaid("8M", 1000, sparse, '"always"'))
      assert.are.equal("rc=0\n", res.stdout)
      local v = assert(rule_of(res, "tool.overlay.max_bytes"), "no violation for the bound")
      assert.truthy(v.reason:find("sparse file counts its whole length", 1, true), v.reason)
      assert.are.equal(0, res.overlay.applied)
      assert.is_nil(io.open(ws .. "/big", "rb"))
      assert.is_nil(io.open(ws .. "/s", "rb"))
      -- The control of the bound: a sparse file within it is applied, as
      -- sparse as the bind mode leaves it (its one written block and no more).
      local within = "truncate -s 4M big && printf xyz | dd of=big bs=1 seek=3000000 conv=notrunc 2>/dev/null"
      local function blocks_and_sum()
        return H.sh("cd " .. ws .. " && stat -c %s big && test $(stat -c %b big) -le 64 && echo sparse; " ..
          "md5sum < big")
      end
      assert.are.equal(0, assert(bind(within)).exit_code)
      local want = blocks_and_sum()
      assert.truthy(want:find("4194304\nsparse\n", 1, true), want)
      os.remove(ws .. "/big")
      res = assert(overlaid("8M", 1000, within, '"always"'))
      assert.is_nil(rule_of(res, "tool.overlay.max_bytes"))
      assert.are.equal(want, blocks_and_sum())
    end)

    it("shows the program its workspace and its own changes, and keeps none of them", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local script = "cat kept.txt; echo changed > kept.txt; cat kept.txt; mkdir -p d/e; echo n > d/e/new; " ..
        "cat d/e/new; rm kept.txt; ls"
      local res = assert(overlaid("8M", 1000, script))
      assert.are.equal(0, res.exit_code)
      assert.are.equal("original\nchanged\nn\nd\n", res.stdout)
      assert.is_nil(next(res.violations or {}))
      assert.are.equal("original\n", H.read(ws .. "/kept.txt"))
      assert.is_nil(io.open(ws .. "/d/e/new", "rb"))
      -- The control: in the bind mode the same changes land in the workspace.
      res = assert(bind(script))
      assert.are.equal(0, res.exit_code)
      assert.is_nil(io.open(ws .. "/kept.txt", "rb"))
      assert.are.equal("n\n", H.read(ws .. "/d/e/new"))
    end)

    it("reads the change set and applies it as commit says: always, on_success, never, a function", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      assert(os.execute("mkdir -p " .. ws .. "/old/deep " .. ws .. "/gone && echo r > " .. ws .. "/old/deep/r && " ..
        "echo g > " .. ws .. "/gone/x && ln -s kept.txt " .. ws .. "/link && chmod -R 777 " .. ws ..
        (caller.prefix ~= "" and " && chown -R 65534:65534 " .. ws or "")))
      local before = listing()
      local script = "echo new > new.txt; echo more >> kept.txt; chmod 600 kept.txt; rm -rf gone; " ..
        "mv old/deep/r old/deep/r2; ln -sf /etc/passwd link; mkdir -p n1/n2; echo z > n1/n2/z"
      local res = assert(overlaid("8M", 1000, script, '"never"'))
      local kinds = {}
      for _, c in ipairs(res.overlay.changes) do kinds[c.path] = c.kind end
      assert.same({ ["new.txt"] = "created", ["kept.txt"] = "modified", gone = "deleted",
                    ["old/deep/r"] = "deleted", ["old/deep/r2"] = "created", link = "symlink",
                    n1 = "dir", ["n1/n2"] = "dir", ["n1/n2/z"] = "created" }, kinds)
      assert.are.equal(before, listing())   -- never: nothing applied
      -- on_success with a failing program: nothing; a function choosing one path: that one.
      res = assert(overlaid("8M", 1000, script .. "; exit 3", '"on_success"'))
      assert.are.equal(3, res.exit_code)
      assert.are.equal(0, res.overlay.applied)
      assert.are.equal(before, listing())
      res = assert(overlaid("8M", 1000, script,
        'function(changes, ctx) assert(ctx.exit_code == 0) return { "new.txt" } end'))
      assert.are.equal(1, res.overlay.applied)
      assert.are.equal("new\n", H.read(ws .. "/new.txt"))
      assert.are.equal("original\n", H.read(ws .. "/kept.txt"))
      os.remove(ws .. "/new.txt")
      -- on_success (the default) with a program that exits 0: all of it.
      res = assert(overlaid("8M", 1000, script, '"on_success"'))
      assert.are.equal(9, res.overlay.applied)
      assert.are.equal("original\nmore\n", H.read(ws .. "/kept.txt"))
      assert.are.equal("z\n", H.read(ws .. "/n1/n2/z"))
      assert.is_nil(io.open(ws .. "/gone/x", "rb"))
      assert.is_nil(io.open(ws .. "/old/deep/r", "rb"))
      assert.are.equal("r\n", H.read(ws .. "/old/deep/r2"))
      assert.are.equal("/etc/passwd", H.readlink(ws .. "/link"))   -- a link, made as a link
      assert.truthy(listing():find("./kept.txt f 600 \n", 1, true), listing())
      assert.is_nil(listing():find(".airlock-apply", 1, true))      -- no temporary left
    end)

    it("applies a change with the times the program left on it, as the bind mode leaves them", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local script = 'echo a > f; touch -d "2001-02-03 04:05:06" f; echo b > g; ' ..
        'touch -a -d "2002-03-04 05:06:07" g; ln -s f l; touch -h -d "2003-01-01 00:00:00" l; ' ..
        'mkdir -p d/e; echo x > d/e/h; touch -d "2004-01-01 00:00:00" d/e/h d/e d'
      script = script:gsub("'", "")
      local function times()   -- modification and access times, g's access time alone (its mtime is now)
        return H.sh("cd " .. ws .. " && stat -c '%n %Y %X' f l d d/e d/e/h && stat -c '%n %X' g")
      end
      -- The control: in the bind mode the program's times are the workspace's.
      local res = assert(bind(script:gsub('"', '\"')))
      assert.are.equal(0, res.exit_code, res.stderr)
      local want = times()
      assert.truthy(want:find("f 981173106 981173106", 1, true), want)
      assert(os.execute("cd " .. ws .. " && rm -rf f g l d"))
      res = assert(overlaid("8M", 1000, script:gsub('"', '\"'), '"always"'))
      assert.are.equal(0, res.exit_code, res.stderr)
      assert.are.equal(6, res.overlay.applied)
      assert.are.equal(want, times())
    end)

    it("grants no owner's rights on a workspace root the caller does not own, as the bind mode grants none",
      function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      assert(os.execute("chown 1000:1000 " .. ws .. " && chmod 755 " .. ws))
      local write = "echo a > f; echo rc=$?"
      local res = assert(bind(write))   -- the bind mode: not the owner, no write
      assert.truthy(res.stdout:find("rc=[^0]"), res.stdout)
      res = assert(overlaid("8M", 1000, write, '"always"'))
      assert.truthy(res.stdout:find("rc=[^0]"), res.stdout)
      assert.truthy(res.stderr:find("Permission denied", 1, true), res.stderr)
      assert.is_nil(io.open(ws .. "/f", "rb"))
      -- The control: the caller's own root takes the same write, overlaid.
      assert(os.execute("chown " .. (caller.prefix == "" and "0:0 " or "65534:65534 ") .. ws))
      res = assert(overlaid("8M", 1000, write, '"always"'))
      assert.are.equal("rc=0\n", res.stdout)
      assert.are.equal("a\n", H.read(ws .. "/f"))
    end)

    it("renames a directory the workspace had with mv; rename(2) of it says EXDEV, as documented", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      assert(os.execute("mkdir -p " .. ws .. "/olddir && echo x > " .. ws .. "/olddir/f && chmod -R 777 " ..
        ws .. "/olddir" .. (caller.prefix ~= "" and " && chown -R 65534:65534 " .. ws or "")))
      local script = "perl -e \"rename(q(olddir), q(newdir)) or die qq(\\$!\\n)\"; echo rc=$?; " ..
        "mkdir mine && perl -e \"rename(q(mine), q(mine2)) or die\"; echo own=$?"
      -- The control: in the bind mode rename(2) of the directory works.
      local res = assert(bind(script))
      assert.are.equal("rc=0\nown=0\n", res.stdout, res.stderr)
      assert(os.execute("cd " .. ws .. " && mv newdir olddir && rm -rf mine2"))
      res = assert(overlaid("8M", 1000, script .. "; mv olddir newdir; echo mv=$?", '"always"'))
      assert.are.equal("rc=18\nown=0\nmv=0\n", res.stdout, res.stderr)   -- perl dies with errno: EXDEV
      assert.truthy(res.stderr:find("Invalid cross-device link", 1, true), res.stderr)
      assert.are.equal("x\n", H.read(ws .. "/newdir/f"))
      assert.is_nil(io.open(ws .. "/olddir/f", "rb"))
      assert.truthy(io.open(ws .. "/mine2", "rb"))
    end)

    it("applies through no link: a planted symlink to a directory outside stays untouched", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local outside = H.tmpdir()
      H.write(outside .. "/victim", "host\n")
      assert(os.execute("chmod -R 777 " .. outside .. " && ln -s " .. outside .. " " .. ws .. "/out" ..
        (caller.prefix ~= "" and " && chown -R 65534:65534 " .. outside .. " && chown -h 65534:65534 " ..
        ws .. "/out" or "")))
      -- The control: unconfined, writing through the link reaches outside.
      H.sh("cp " .. outside .. "/victim " .. outside .. "/v0; echo planted > " .. ws .. "/out/v0")
      assert.are.equal("planted\n", H.read(outside .. "/v0"))
      -- In the overlay the program replaces the link with a directory
      -- holding "victim": applied, that would write outside through the link.
      local res = assert(overlaid("8M", 1000, "rm out; mkdir out; echo planted > out/victim", '"always"'))
      assert.are.equal(0, res.exit_code)
      assert.truthy(result_of(res, "out").refused, dkjson.encode(res.overlay.results))
      assert.truthy(result_of(res, "out/victim").error, dkjson.encode(res.overlay.results))
      assert.are.equal("host\n", H.read(outside .. "/victim"))
      assert.are.equal(outside, H.readlink(ws .. "/out"))
      os.execute("rm -rf " .. outside)
    end)

    it("never writes in place: a hard link in the workspace to a file outside keeps the outside file", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local outside = H.tmpdir()
      H.write(outside .. "/victim", "host\n")
      assert(os.execute("chmod -R 777 " .. outside .. " && ln " .. outside .. "/victim " .. ws .. "/hl" ..
        (caller.prefix ~= "" and " && chown -R 65534:65534 " .. outside or "")))
      local res = assert(overlaid("8M", 1000, "echo changed > hl", '"always"'))
      assert.are.equal(1, res.overlay.applied)
      assert.are.equal("changed\n", H.read(ws .. "/hl"))
      assert.are.equal("host\n", H.read(outside .. "/victim"))
      -- The control: the bind mode writes in place, through the link.
      res = assert(bind("echo through > hl"))
      assert.are.equal(0, res.exit_code)
      os.execute("rm -f " .. ws .. "/hl && ln " .. outside .. "/victim " .. ws .. "/hl")
      assert(bind("echo through > hl"))
      assert.are.equal("through\n", H.read(outside .. "/victim"))
      os.execute("rm -rf " .. outside)
    end)

    it("applies no setuid bit, device node or fifo, and refuses a file renamed over a directory", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      assert(os.execute("mkdir -p " .. ws .. "/dir && echo d > " .. ws .. "/dir/f && chmod -R 777 " .. ws ..
        (caller.prefix ~= "" and " && chown -R 65534:65534 " .. ws or "")))
      -- The control, unconfined: each attempt works on a file of one's own.
      local ctl = H.tmpdir()
      assert.are.equal("", (H.sh("cd " .. ctl .. " && touch s && chmod 4755 s && mkfifo ff && " ..
        "echo x > g && rm -rf dd && mkdir dd && rm -rf dd && mv g dd")))
      os.execute("rm -rf " .. ctl)
      local script = "echo s > s; chmod 4755 s; chmod 2755 s; mkfifo ff; mknod cdev c 1 3; " ..
        "echo x > g; rm -rf dir; mv g dir; ls -l dir"
      local res = assert(overlaid("8M", 1000, script, '"always"'))
      assert.truthy(res.stdout:find("dir", 1, true), res.stdout)   -- the program saw its rename
      assert.truthy(result_of(res, "dir").refused, dkjson.encode(res.overlay.results))
      assert.are.equal("d\n", H.read(ws .. "/dir/f"))
      local l = listing()
      local mode = assert(l:match("%./s f (%d+)"), l)
      assert.is_true(#mode <= 3, l)   -- no setuid, setgid or sticky bit
      assert.is_nil(l:find("ff", 1, true), l)
      assert.is_nil(l:find("cdev", 1, true), l)
    end)

    it("records every change, committed or discarded, in the run's ledger", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local ldir = H.tmpdir()
      assert(os.execute("chmod 777 " .. ldir))
      local res = assert(overlaid("8M", 1000, "echo n > new; rm kept.txt; ln -s /etc e",
        'function(changes) return { "new" } end', " --ledger " .. ldir .. "/s"))
      assert.are.equal(1, res.overlay.applied)
      local recs = change_records(ldir .. "/s")
      assert.are.equal("committed", recs.new.decision)
      assert.are.equal("created", recs.new.change)
      assert.are.equal(2, recs.new.size)
      assert.are.equal(core.sha256("n\n"), recs.new.sha256)
      assert.are.equal("discarded", recs["kept.txt"].decision)
      assert.are.equal("deleted", recs["kept.txt"].change)
      assert.are.equal("discarded", recs.e.decision)
      assert.are.equal("/etc", recs.e.target)
      assert.are.equal("original\n", H.read(ws .. "/kept.txt"))
      os.execute("rm -rf " .. ldir)
    end)

    it("stops applying a change set larger than the ledger's bound, and says so", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local ldir = H.tmpdir()
      assert(os.execute("chmod 777 " .. ldir))
      local maker = "i=0; while [ $i -lt 400 ]; do echo $i > f$i; i=$((i+1)); done"
      -- The control: with the default bound all 400 are applied and recorded.
      local res = assert(overlaid("8M", 1000, maker, '"always"', " --ledger " .. ldir .. "/a"))
      assert.are.equal(400, res.overlay.applied)
      local n = 0
      for _ in pairs(change_records(ldir .. "/a")) do n = n + 1 end
      assert.are.equal(400, n)
      os.execute("rm -f " .. ws .. "/f*")
      res = assert(overlaid("8M", 1000, maker, '"always"', " --ledger " .. ldir .. "/b", "16K"))
      assert.truthy(res.overlay.ledger_error, dkjson.encode(res.overlay))
      assert.truthy(res.overlay.applied < 400, tostring(res.overlay.applied))
      assert.truthy(rule_of(res, "limits.ledger, ledger.max_bytes"))
      -- What was applied is what was recorded, plus at most the one whose record was refused.
      n = 0
      for _ in pairs(change_records(ldir .. "/b")) do n = n + 1 end
      assert.truthy(res.overlay.applied == n or res.overlay.applied == n + 1, n .. " " .. res.overlay.applied)
      os.execute("rm -rf " .. ldir)
    end)

    -- A blob of a session: its text, and its mode and owner ("600 65534").
    local function blob(dir, hex)
      local path = dir .. "/blobs/" .. hex:sub(1, 2) .. "/" .. hex
      return H.read(path), (H.sh("stat -c '%a %u' " .. path):gsub("\n$", ""))
    end

    it("keeps a committed set's new contents and what they replaced as blobs of the session", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local ldir = H.tmpdir()
      assert(os.execute("chmod 777 " .. ldir))
      H.write(ws .. "/mod.txt", "old\n")
      H.write(ws .. "/del.txt", "gone\n")
      assert(os.execute("ln -s kept.txt " .. ws .. "/link && chmod 666 " .. ws .. "/*.txt"))
      if caller.prefix ~= "" then assert(os.execute("chown -h -R 65534:65534 " .. ws)) end
      local res = assert(overlaid("8M", 1000, "echo n > new; echo changed > mod.txt; rm del.txt; " ..
        "ln -sfn elsewhere link", '"always"', " --ledger " .. ldir .. "/s"))
      assert.are.equal(4, res.overlay.applied, dkjson.encode(res.overlay))
      assert.is_nil(res.overlay.keep_error)
      local recs, s = change_records(ldir .. "/s"), ldir .. "/s"
      local owner = caller.prefix == "" and "600 0" or "600 65534"
      assert.are.equal("none", recs.new.before)
      assert.are.same({ "n\n", owner }, { blob(s, recs.new.sha256) })
      assert.are.equal(core.sha256("changed\n"), recs["mod.txt"].sha256)
      assert.are.same({ "changed\n", owner }, { blob(s, recs["mod.txt"].sha256) })
      assert.are.equal("file", recs["mod.txt"].before)
      assert.are.equal(core.sha256("old\n"), recs["mod.txt"].before_sha256)
      assert.are.same({ "old\n", owner }, { blob(s, recs["mod.txt"].before_sha256) })
      assert.are.equal(tonumber("666", 8), recs["mod.txt"].before_mode)
      assert.are.equal(core.sha256("gone\n"), recs["del.txt"].before_sha256)
      assert.are.equal("gone\n", (blob(s, recs["del.txt"].before_sha256)))
      assert.are.equal("link", recs.link.before)
      assert.are.equal("kept.txt", (blob(s, recs.link.before_sha256)))   -- a link's text, not followed
      assert.are.equal(core.fs_realpath(ws), recs.new.workspace)
      assert.are.equal("changed\n", H.read(ws .. "/mod.txt"))
      os.execute("rm -rf " .. ldir)
    end)

    it("applies nothing of a set whose contents would pass ledger.max_bytes, and names the field", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local ldir = H.tmpdir()
      assert(os.execute("chmod 777 " .. ldir))
      H.write(ws .. "/big", string.rep("b", 300 * 1024))
      assert(os.execute("chmod 666 " .. ws .. "/big"))
      if caller.prefix ~= "" then assert(os.execute("chown 65534:65534 " .. ws .. "/big")) end
      local pol = pdir .. "/bounded.lua"
      local script = "head -c 307200 /dev/zero > big; echo n > new"
      local function run(bound, session)
        H.write(pol, 'local policy = require "airlock.policy"\nreturn policy.extend("tool", { name = "keep-spec", ' ..
          'ledger = { max_bytes = "' .. bound .. '" }, tool = { overlay = { max_bytes = "8M", max_files = 1000, ' ..
          'commit = "always" } } })\n')
        os.execute("chmod 644 " .. pol)
        return assert(json_run(caller.prefix, "--policy " .. pol .. " --workspace " .. ws .. " --ledger " ..
          ldir .. "/" .. session, script))
      end
      -- The control: under a bound of 1 MiB both contents and the pre-image fit.
      local res = run("1M", "a")
      assert.are.equal(2, res.overlay.applied, dkjson.encode(res.overlay))
      assert.are.equal(string.rep("\0", 307200), H.read(ws .. "/big"))
      H.write(ws .. "/big", string.rep("b", 300 * 1024))
      os.execute("rm -f " .. ws .. "/new")
      res = run("512K", "b")
      assert.are.equal(0, res.overlay.applied, dkjson.encode(res.overlay))
      local v = rule_of(res, "ledger.max_bytes")
      assert.truthy(v, dkjson.encode(res.violations))
      assert.truthy(v.reason:find("ledger.max_bytes", 1, true), v.reason)
      assert.are.equal(string.rep("b", 300 * 1024), H.read(ws .. "/big"))
      assert.is_nil(io.open(ws .. "/new"))
      -- Without --json the command says so on its standard error.
      local said = H.sh("(" .. caller.prefix .. AIRLOCK .. " exec --policy " .. pol .. " --workspace " .. ws ..
        " --ledger " .. ldir .. "/c -- sh -c '" .. script .. "' 2>&1 >/dev/null)")
      assert.truthy(said:find("not applied", 1, true) and said:find("ledger.max_bytes", 1, true), said)
      assert.are.equal(string.rep("b", 300 * 1024), H.read(ws .. "/big"))
      local recs = change_records(ldir .. "/b")
      assert.are.equal("discarded", recs.big.decision)
      assert.truthy(recs.big.reason:find("ledger.max_bytes", 1, true), recs.big.reason)
      os.execute("rm -rf " .. ldir)
    end)

    it("refuses a second overlaid run on a workspace while one runs there", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local pol = overlay_policy(pdir, "8M", 1000, '"always"')
      local fifo = H.tmpdir()
      assert(os.execute("chmod 777 " .. fifo .. " && mkfifo -m 666 " .. fifo .. "/in"))
      local ex = caller.prefix .. AIRLOCK .. " exec --policy " .. pol .. " --workspace " .. ws .. " -- "
      -- The first holds the workspace until the spec writes to its stdin; the
      -- second starts once the first has said it runs (a guard, not a timing).
      local out = H.sh("(" .. ex .. "sh -c 'echo started; read x; echo one > one' < " .. fifo .. "/in > " .. fifo ..
        "/out1 2>&1 & p=$!; exec 3> " .. fifo .. "/in; i=0; until grep -q started " .. fifo .. "/out1; do " ..
        "i=$((i+1)); [ $i -gt " .. H.GUARD_S * 20 .. " ] && break; sleep 0.05; done; " ..
        ex .. "sh -c 'echo two > two'; echo second=$?; echo go >&3; exec 3>&-; wait $p; echo first=$?)")
      os.execute("rm -rf " .. fifo)
      assert.truthy(out:find("in use by another overlaid run", 1, true), out)
      assert.truthy(out:find("second=125\n", 1, true), out)
      assert.truthy(out:find("first=0\n", 1, true), out)
      assert.are.equal("one\n", H.read(ws .. "/one"))
      assert.is_nil(io.open(ws .. "/two", "rb"))
      -- The control: once the first has ended, the same second run goes.
      assert.truthy(H.sh(ex .. "sh -c 'echo two > two'; echo rc=$?"):find("rc=0\n", 1, true))
      assert.are.equal("two\n", H.read(ws .. "/two"))
    end)

    it("reads the change set only once a program that keeps writing as the run ends is gone", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      -- A writer left behind, appending whole lines, still running when the
      -- program exits (it has written before the exit: the guard loop waits
      -- for that, not for a time).
      local script = "(while :; do echo xxxxxxxx >> f; done) & i=0; until [ -s f ] || [ $i -gt 100000 ]; do " ..
        "i=$((i+1)); done; kill -0 $! && echo writer-running"
      local res = assert(overlaid("64M", 1000, script, '"always"'))
      assert.are.equal("writer-running\n", res.stdout)
      assert.are.equal(1, res.overlay.applied)
      local body = H.read(ws .. "/f")
      assert.truthy(#body > 0)
      assert.are.equal("", (body:gsub("xxxxxxxx\n", "")))   -- whole lines only
      local rec
      for _, c in ipairs(res.overlay.changes) do if c.path == "f" then rec = c end end
      assert.are.equal(#body, rec.size)                      -- what was read is what was applied
      assert.are.equal(core.sha256(body), rec.sha256)
      assert.is_nil(listing():find(".airlock-apply", 1, true))
    end)

    it("--review shows the change set and applies it only on y", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local ex = caller.prefix .. AIRLOCK .. " exec --review --policy " .. overlay_policy(pdir, "8M", 1000,
        '"always"') .. " --workspace " .. ws .. " -- sh -c 'echo new > b; rm kept.txt; ln -s x l'"
      local out = H.sh("(echo n | " .. ex .. " 2>&1; echo rc=$?)")
      assert.truthy(out:find("A  b (4 bytes)", 1, true), out)
      assert.truthy(out:find("D  kept.txt", 1, true), out)
      assert.truthy(out:find("L  l -> x", 1, true), out)
      assert.truthy(out:find("3 changes: 1 added, 0 modified, 1 deleted, 1 links, 4 bytes to write", 1, true), out)
      assert.truthy(out:find("rc=0\n", 1, true), out)
      assert.truthy(out:find("not applied: " .. ws .. " left as it was (3 changes discarded)", 1, true), out)
      assert.are.equal("original\n", H.read(ws .. "/kept.txt"))   -- n: nothing applied
      assert.is_nil(io.open(ws .. "/b", "rb"))
      out = H.sh("(echo y | " .. ex .. " 2>&1; echo rc=$?)")
      assert.truthy(out:find("rc=0\n", 1, true), out)
      assert.are.equal("new\n", H.read(ws .. "/b"))
      assert.is_nil(io.open(ws .. "/kept.txt", "rb"))
      assert.are.equal("x", H.readlink(ws .. "/l"))
      -- The bind mode has nothing to review: refused, the program not run.
      out = H.sh("(" .. caller.prefix .. AIRLOCK .. " exec --review --workspace " .. ws .. " -- touch z 2>&1; " ..
        "echo rc=$?)")
      assert.truthy(out:find("needs a policy with tool.overlay", 1, true), out)
      assert.is_nil(io.open(ws .. "/z", "rb"))
    end)

    it("reads a change set of 10^5 files", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      local res = assert(overlaid("256M", 100000, "mkdir m && cd m && seq 1 99999 | xargs touch", '"never"'))
      assert.are.equal(0, res.exit_code)
      assert.are.equal(100000, #res.overlay.changes)   -- m and its 99999 files
      assert.are.equal(100000, res.overlay.files_used)
      assert.truthy(rule_of(res, "tool.overlay.max_files"))   -- exactly at the bound
      assert.is_nil(io.open(ws .. "/m", "rb"))
    end)

    it("keeps tool.protect's paths read-only over the overlay", function()
      if ABSENT then pending("skipped: " .. ABSENT) return end
      assert(os.execute("mkdir -p " .. ws .. "/.git && echo cfg > " .. ws .. "/.git/config && chmod -R 777 " ..
        ws .. "/.git" .. (caller.prefix ~= "" and " && chown -R 65534:65534 " .. ws or "")))
      local script = "echo planted >> .git/config; cat .git/config"
      local copy = H.tmpdir()   -- the control: the same program, unconfined, on a copy
      assert(os.execute("cp -r " .. ws .. "/.git " .. copy .. "/"))
      assert.are.equal("cfg\nplanted\n", (H.sh("cd " .. copy .. " && sh -c '" .. script .. "'")))
      os.execute("rm -rf " .. copy)
      local res = assert(overlaid("8M", 1000, script))
      assert.are.equal("cfg\n", res.stdout)
      assert.truthy(res.stderr:find("Read-only file system", 1, true), res.stderr)
      assert.are.equal("cfg\n", H.read(ws .. "/.git/config"))
    end)
  end)
end

describe("tool.overlay in a policy", function()
  local policy = require "airlock.policy"
  it("takes max_bytes, max_files and commit, with on_success the default", function()
    assert.truthy(policy.new { tool = { overlay = { max_bytes = "1G", max_files = 100000, commit = "never" } } })
    assert.truthy(policy.new { tool = { overlay = { commit = function() return true end } } })
    assert.are.equal("on_success", policy.default("tool.overlay.commit"))
    for _, bad in ipairs {
      { overlay = { commit = "sometimes" } },
      { overlay = { max_bytes = 100, commit = "never" } },                     -- under 4K
      { overlay = { max_files = 0, commit = "never" } },
    } do
      local ok, err = pcall(policy.new, { tool = bad })
      assert.is_false(ok)
      assert.truthy(tostring(err):find("tool.overlay", 1, true), tostring(err))
    end
  end)
end)
