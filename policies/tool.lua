-- tool -- programs run under `airlock exec`: the system read-only (Landlock
-- read and exec on /usr /lib /lib64 /bin /etc), one writable workspace (the
-- directory exec is given, else the current one; it is also HOME; what is
-- built there may be run, under the same confinement), a private
-- /tmp (a fresh tmpfs in the program's own mount namespace), no network (an
-- empty net namespace, no inet promise), at most 128 processes, 4 GiB of
-- memory and 2 cores for the whole run (a cgroup each), and the seccomp promises of a program that reads, writes and runs
-- others. Guests run under it keep untrusted's worker settings.
-- tool.confine is locked.
local policy = require "airlock.policy"

local SYSTEM = { "/usr", "/lib", "/lib64", "/bin", "/etc" }

return policy.extend("untrusted", {
  name = "tool",
  description = "tools: read-only system, one writable workspace, private /tmp, no network",
  locked = { "tool.confine" },
  tool = {
    limits = { deadline_ms = "5m", capture = "1M", pids = 128, tmp_size = "64M", memory = "4G", cpu = 2 },
    confine = {
      namespaces = "all",
      rlimits = { core = 0, as = "4G", fsize = "1G", nofile = 1024 },
      no_new_privs = true,
      landlock = { read = { "/usr", "/lib", "/lib64", "/bin", "/etc", "/dev/null", "/dev/urandom", "/dev/zero" },
                   write = { "/dev/null" }, exec = SYSTEM, scope = true },
      seccomp = { promises = "stdio rpath wpath cpath fattr proc exec tty" },
    },
    env = { PATH = "/usr/local/bin:/usr/bin:/bin", LANG = "C.UTF-8" },
    workspace = ".",
    workspace_exec = true,   -- build, then run what was built (it gains no more than sh has)
    tmp = "private",
  },
})
