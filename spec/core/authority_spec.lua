-- authority_spec.lua -- a program under `airlock exec` holds no authority over
-- host files beyond what its policy grants, whoever runs it: root (the run is
-- host uid 65534, its workspace idmapped back to root) or a user who is not
-- (setpriv to 65534; everything outside the workspace is a read-only mount).
-- Each attempt in spec/fixtures/authority_attack.py is real, and each is run
-- unconfined first, as the same caller, so the test fails if it could not
-- have succeeded.
local H = require "helper"
require "airlock"
local core = require "airlock.core"

local FIXTURE = "spec/fixtures/authority_attack.py"
local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")
local NOBODY = H.NOBODY

-- What each caller's control run must be able to do (else the confined
-- result proves nothing); the rest are asserted only when the control did it.
local MUST = {
  root = { "read-shadow", "chmod-outside", "utime-outside", "xattr-outside", "lease-outside",
           "dnotify-outside", "setuid-copy", "setuid-create", "setgid-dir", "pwd-lock", "inotify-root",
           "inotify-outside", "flock-outside" },
  unprivileged = { "chmod-outside", "utime-outside", "xattr-outside", "lease-outside", "dnotify-outside",
                   "setuid-copy", "setuid-create", "setgid-dir", "inotify-outside", "flock-outside" },
}

local function results(out)
  local r = {}
  for name, verdict in out:gmatch("([%w%-]+) (%a+)[^\n]*\n") do r[name] = verdict end
  return r
end

-- A directory owned by uid (mode 0755), under base.
local function dir_for(base, uid)
  local d = H.sh("mktemp -d " .. base .. "/airlock-authority-XXXXXX"):match("^(%S+)")
  assert(os.execute(string.format("chmod 755 %s && chown %d:%d %s", d, uid, uid, d)))
  return d
end

-- The files the attempts go after, outside any workspace, owned by uid.
local function outside_for(uid)
  local d = dir_for("/var/tmp", uid)
  H.write(d .. "/target", "target\n")
  H.write(d .. "/secret", "secret\n")
  assert(os.execute(string.format("chmod 644 %s/target && chmod 600 %s/secret && chown %d:%d %s/target %s/secret",
    d, d, uid, uid, d, d)))
  return d
end

local function fresh_workspace(base, uid)
  local ws = dir_for(base, uid)
  H.write(ws .. "/attack.py", H.read(FIXTURE))
  return ws
end

for _, caller in ipairs { { name = "root", uid = 0, prefix = "" },
                          { name = "unprivileged", uid = 65534, prefix = NOBODY } } do
  describe("airlock exec run by " .. caller.name, function()
    local outside
    before_each(function()
      outside = outside_for(caller.uid)
      -- /etc/.pwd.lock is what passwd and useradd lock: make sure there is one.
      if not H.slurp("/etc/.pwd.lock") then os.execute("touch /etc/.pwd.lock && chmod 600 /etc/.pwd.lock") end
    end)
    after_each(function() os.execute("rm -rf " .. outside) end)

    local function usable()
      local probe = H.sh(caller.prefix .. AIRLOCK .. " version")
      if not probe:match("airlock") then
        pending("skipped: uid " .. caller.uid .. " cannot run " .. AIRLOCK .. " here: " .. probe)
        return false
      end
      return true
    end

    for _, base in ipairs { "/var/tmp", "/tmp" } do
      it("refuses every grab at host files beyond the workspace (workspace under " .. base .. ")", function()
        if not usable() then return end
        -- The control: the same program, the same caller, no airlock.
        local cws = fresh_workspace(base, caller.uid)
        local cout = H.sh("cd " .. cws .. " && " .. caller.prefix .. "/usr/bin/python3 attack.py " .. outside .. " " .. cws)
        os.execute("rm -rf " .. cws)
        local control = results(cout)
        for _, name in ipairs(MUST[caller.name]) do
          assert.are.equal("ok", control[name], "control run could not " .. name .. ":\n" .. cout)
        end
        -- Reset what the control changed.
        os.execute("rm -rf " .. outside)
        outside = outside_for(caller.uid)

        local ws = fresh_workspace(base, caller.uid)
        -- A caller whose home holds no git configuration (tool.home shows the
        -- caller's ~/.gitconfig, which would put a /root of the view's own
        -- there; exec_spec's HOME cases try that home).
        local out, rc = H.sh("cd " .. ws .. " && HOME=/nonexistent " .. caller.prefix .. AIRLOCK .. " exec --workspace " .. ws ..
          " -- /usr/bin/python3 attack.py " .. outside .. " " .. ws)
        local confined = results(out)
        assert.are.equal(0, rc, out)
        for name, verdict in pairs(control) do
          if name == "workspace-write" then
            assert.are.equal("ok", confined[name], out)
          elseif verdict == "ok" then
            assert.are.equal("refused", confined[name], name .. " was not refused:\n" .. out)
          end
        end
        -- Nothing outside changed, and what it made in its workspace is the caller's.
        local st = H.sh("stat -c '%a %u %X' " .. outside .. "/target")
        assert.matches("^644 " .. caller.uid .. " ", st)
        assert.are.equal("[]\n", H.sh("python3 -c 'import os,sys; print(os.listxattr(sys.argv[1]))' " ..
          outside .. "/target"))
        assert.are.equal("made\n", H.read(ws .. "/plain"))
        assert.matches("^644 " .. caller.uid .. " " .. caller.uid .. "\n$",
          H.sh("stat -c '%a %u %g' " .. ws .. "/plain"))
        -- The copied id is there, without its setuid bit, and owned by the caller.
        assert.matches("^[0-7][0-7][0-7] " .. caller.uid .. "\n$", H.sh("stat -c '%a %u' " .. ws .. "/id-copy"))
        local files = H.sh("find " .. ws .. " -perm /6000")
        assert.are.equal("", files)
        os.execute("rm -rf " .. ws)
      end)
    end

    it("sees no host process in /proc, only its own", function()
      if not usable() then return end
      local ws = fresh_workspace("/var/tmp", caller.uid)
      local probe = string.format("import os\nfor p in ('/proc/%d', '/proc/self'):\n  print(p, os.path.exists(p))\n", H.pid())
      H.write(ws .. "/procs.py", probe)
      -- The control: unconfined, the test's own process is there to see.
      local control = H.sh("cd " .. ws .. " && " .. caller.prefix .. "/usr/bin/python3 procs.py")
      assert.matches("/proc/" .. H.pid() .. " True", control)
      local out = H.sh("cd " .. ws .. " && " .. caller.prefix .. AIRLOCK .. " exec --workspace " .. ws ..
        " -- /usr/bin/python3 procs.py")
      os.execute("rm -rf " .. ws)
      assert.matches("/proc/" .. H.pid() .. " False", out)
      assert.matches("/proc/self True", out)
    end)

    it("runs the program as uid 65534, and never as the caller when that is root", function()
      if not usable() then return end
      local ws = fresh_workspace("/var/tmp", caller.uid)
      local out = H.sh("cd " .. ws .. " && " .. caller.prefix .. AIRLOCK .. " exec --workspace " .. ws ..
        " -- sh -c 'id -u; id -g; id -G'")
      os.execute("rm -rf " .. ws)
      local uid, gid, groups = out:match("^(%d+)\n(%d+)\n([%d ]+)\n")
      assert.are.equal("65534", uid, out)
      assert.are.equal("65534", gid, out)
      assert.are.equal("65534", groups, out)
    end)
  end)
end
