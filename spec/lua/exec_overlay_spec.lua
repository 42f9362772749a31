-- exec_overlay_spec.lua -- tool.overlay: the program sees its workspace
-- through a copy-on-write overlay whose writable layer is a tmpfs the kernel
-- bounds (tool.overlay.max_bytes, max_files). A program that fills it gets
-- ENOSPC, the run a violation naming the field, and the real workspace is
-- never written (commit = "never"). Each hostile run has a control: the same
-- program in the plain bind mode (the default, unchanged), where the write
-- succeeds. Run as root and as uid 65534 (setpriv); where this kernel cannot
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

-- A policy file: the stock tool policy with the overlay section given.
local function overlay_policy(dir, max_bytes, max_files)
  local path = dir .. "/overlay_policy.lua"
  H.write(path, string.format('local policy = require "airlock.policy"\n' ..
    'return policy.extend("tool", { name = "overlay-spec", tool = { overlay = { max_bytes = %q, ' ..
    'max_files = %d, commit = "never" } } })\n', max_bytes, max_files))
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
    local function overlaid(max_bytes, max_files, script)
      return json_run(caller.prefix, "--policy " .. overlay_policy(pdir, max_bytes, max_files) ..
        " --workspace " .. ws, script)
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
      assert.is_false(res.overlay.applied)
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
  it("takes max_bytes, max_files and commit = \"never\", and refuses what it cannot do", function()
    assert.truthy(policy.new { tool = { overlay = { max_bytes = "1G", max_files = 100000, commit = "never" } } })
    for _, bad in ipairs {
      { overlay = { max_bytes = "1G", max_files = 10 } },                      -- commit not said
      { overlay = { commit = "always" } },                                     -- not built yet
      { overlay = { max_bytes = 100, commit = "never" } },                     -- under 4K
      { overlay = { max_files = 0, commit = "never" } },
    } do
      local ok, err = pcall(policy.new, { tool = bad })
      assert.is_false(ok)
      assert.truthy(tostring(err):find("tool.overlay", 1, true), tostring(err))
    end
  end)
end)
