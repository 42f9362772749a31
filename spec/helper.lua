-- spec/helper.lua -- loaded by busted before every spec file: points Lua at the
-- build under test (AIRLOCK_BUILD, default build/) and offers small helpers.
local build = os.getenv("AIRLOCK_BUILD") or "build"
package.cpath = build .. "/lib/?.so;" .. package.cpath
package.path = "spec/?.lua;" .. package.path

local H = {}
H.build = build
H.bin = build .. "/bin"
-- The stand-in is always the release build: under UBSan its deliberate null
-- store would be reported instead of crashing.
H.hostile = "build/bin/hostile-worker"
H.sanitized = os.getenv("AIRLOCK_SANITIZED") == "1"
-- The prefix that runs a command as the unprivileged user the confinement
-- specs use besides root (uid and gid 65534, no supplementary groups).
H.NOBODY = "setpriv --reuid 65534 --regid 65534 --clear-groups "

-- Reads a file (a /proc file, say), or nil.
function H.slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- Reads a file that must exist.
function H.read(path)
  local s = H.slurp(path)
  assert(s, "cannot read " .. path)
  return s
end

-- The size of a file that must exist, in bytes (without reading it).
function H.file_size(path)
  local f = assert(io.open(path, "rb"))
  local n = f:seek("end")
  f:close()
  return n
end

-- Writes text to path, replacing what was there.
function H.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- Controls for what the machine provides, read from the kernel's own files
-- or asked of it directly, never from airlock: a spec compares airlock's
-- detection with them, and is pending where the property is absent.

-- Why this host cannot bound a run with the cgroup controller name, or nil:
-- a v1 hierarchy of that name, or the controller enabled for the children
-- of this process's v2 cgroup (/proc/self/cgroup says which).
function H.cgroup_absent(name)
  for line in (H.slurp("/proc/self/cgroup") or ""):gmatch("[^\n]+") do
    local ctls, path = line:match("^%d+:([^:]*):(.*)$")
    if ctls and ctls ~= "" then
      for c in ctls:gmatch("[^,]+") do
        if c == name and H.slurp("/sys/fs/cgroup/" .. name .. "/cgroup.procs") then return nil end
      end
    elseif ctls == "" then
      local sub = H.slurp("/sys/fs/cgroup" .. (path == "/" and "" or path) .. "/cgroup.subtree_control") or ""
      if (" " .. sub:gsub("\n", " ") .. " "):find(" " .. name .. " ", 1, true) then return nil end
    end
  end
  return "this host has no " .. name .. " cgroup controller for this process's children (/proc/self/cgroup)"
end

-- The Landlock ABI this kernel answers landlock_create_ruleset(NULL, 0,
-- VERSION) with (0: none), asked by a program compiled here.
function H.landlock_abi()
  if H._landlock_abi then return H._landlock_abi end
  local dir = H.tmpdir()
  H.write(dir .. "/ll.c", "#include <stdio.h>\n#include <unistd.h>\n#include <sys/syscall.h>\n" ..
    "int main(void) { long v = syscall(444, (void *)0, 0, 1U); printf(\"%ld\\n\", v < 0 ? 0 : v); return 0; }\n")
  local out = H.sh("gcc -o " .. dir .. "/ll " .. dir .. "/ll.c && " .. dir .. "/ll")
  os.execute("rm -rf " .. dir)
  H._landlock_abi = assert(tonumber(out:match("^(%d+)\n$")), "landlock probe: " .. out)
  return H._landlock_abi
end

-- Whether this kernel lets this process make a user namespace (unshare -U).
function H.userns_works()
  return select(2, H.sh("env -u LD_PRELOAD unshare -U true")) == 0
end

-- Open file descriptors of this process (after a full collection).
function H.fd_count()
  -- Files other code left to the collector would close in the middle of a
  -- comparison: close them first, so the count is of what is really held.
  collectgarbage()
  local p = io.popen("ls /proc/" .. H.pid() .. "/fd | wc -l")
  local n = tonumber(p:read("a"))
  p:close()
  return n
end

-- Runs a shell command; returns its stdout and stderr together, and its exit
-- status. (gsub's count is dropped: the status is the second result.)
function H.sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  return (out:gsub("rc=%d+\n$", "")), rc
end

-- H.sh for a host tool (curl, git, python3, ...): without the sanitizer run's
-- preloaded runtime, which only lua5.4 loading the sanitizer build needs and
-- under which some tools hang (curl waits on a futex forever).
function H.host(cmd)
  return H.sh("env -u LD_PRELOAD sh -c '" .. cmd:gsub("'", "'\\''") .. "'")
end

-- H.sh for an installed tree, which must not lean on the build: sh -c cmd
-- without the build's worker and directory, the sanitizer run's preloaded
-- runtime or a policy from the environment.
function H.sh_installed(cmd)
  return H.sh("env -u AIRLOCK_WORKER -u AIRLOCK_BUILD -u LD_PRELOAD -u AIRLOCK_POLICY sh -c " ..
    string.format("%q", cmd))
end

-- How long a spec waits for something that must happen before it calls it a
-- hang: only a guard against a hang, never a measure, so it is large.
H.GUARD_S = 120

-- Polls cond() (every 10 ms, sleeping in between, no process started) until
-- it returns a true value, which is returned; after H.GUARD_S seconds (or
-- seconds) of wall time, fails naming what was awaited. For what only the
-- kernel or another process can make true, which nothing can be waited on for.
local system = require "system"   -- lua-system, which busted itself needs
function H.wait_until(what, cond, seconds)
  local t0 = system.monotime()
  while true do
    local v = cond()
    if v then return v end
    if system.monotime() - t0 > (seconds or H.GUARD_S) then
      error("still waiting after " .. (seconds or H.GUARD_S) .. " s for " .. what, 2)
    end
    system.sleep(0.01)
  end
end

-- Whether pid is dead: gone, or a zombie its parent has not reaped (which
-- kill -0 would still find).
function H.dead(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  local st = f and f:read("a"):match("^%d+ %b() (%a)")
  if f then f:close() end
  return st == nil or st == "Z" or st == "X"
end

-- Kills pid with SIGKILL and waits until it is dead. No shell loop: under the
-- sanitizer's preload every process it starts is slow.
function H.kill_dead(pid)
  os.execute("env -u LD_PRELOAD kill -9 " .. pid)
  H.wait_until("pid " .. pid .. " to die of SIGKILL", function() return H.dead(pid) end)
end

-- Steps broker b until n runs have ended; -> their results by run id.
function H.step_all(b, n)
  local results, ended = {}, 0
  while ended < n do
    for _, res in ipairs(assert(b:step(-1))) do results[res.run], ended = res, ended + 1 end
  end
  return results
end

-- A fresh temporary directory (created), for specs to remove when done;
-- whatever of it is left when the suite ends is removed then.
local made = {}
function H.tmpdir()
  local p = io.popen("mktemp -d /tmp/airlock-spec-XXXXXX")
  local d = p:read("l")
  p:close()
  if d and d:match("^/tmp/airlock%-spec%-%w+$") then made[#made + 1] = d end
  return d
end
local busted_ok, busted = pcall(require, "busted")
if busted_ok and type(busted) == "table" and busted.subscribe then
  busted.subscribe({ "suite", "end" }, function()
    for i = 1, #made, 200 do   -- a command line of at most 200 names
      os.execute("env -u LD_PRELOAD rm -rf " .. table.concat(made, " ", i, math.min(i + 199, #made)))
    end
    made = {}
    return nil, true
  end)
end

-- The target of a symbolic link (e.g. /proc/self/ns/net), or nil.
function H.readlink(path)
  local p = io.popen("readlink " .. path .. " 2>/dev/null")
  local s = p:read("l")
  p:close()
  return s
end

function H.pid()
  return tonumber(H.slurp("/proc/self/stat"):match("^(%d+)"))
end

function H.rss_kb()
  return tonumber(H.slurp("/proc/self/status"):match("VmRSS:%s*(%d+)"))
end

-- Children of this process that still exist (zombies included). Read from
-- /proc rather than through a shell, which would itself be a child.
function H.children()
  local pid = H.pid()
  local kids = {}
  local s = H.slurp("/proc/" .. pid .. "/task/" .. pid .. "/children") or ""
  for k in s:gmatch("%d+") do kids[#kids + 1] = tonumber(k) end
  return kids
end

_G.H = H
return H
