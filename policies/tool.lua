-- tool -- programs run under `airlock exec` (issue 6): the system read-only
-- (Landlock read and exec on /usr /lib /lib64 /bin /etc), one writable
-- workspace (`workspace`, the directory the tool runs in unless exec is given
-- another; besides it only /dev/null), no network (an empty net namespace, no
-- inet promise), and the seccomp promises of a program that reads, writes and
-- runs others. Guests run under it keep untrusted's worker settings.
-- tool.confine is locked.
local policy = require "airlock.policy"

local SYSTEM = { "/usr", "/lib", "/lib64", "/bin", "/etc" }

return policy.extend("untrusted", {
  name = "tool",
  description = "tools: read-only system, one writable workspace, no network",
  locked = { "tool.confine" },
  tool = {
    limits = { deadline_ms = "5m", capture = "1M" },
    confine = {
      namespaces = "all",
      rlimits = { core = 0 },
      no_new_privs = true,
      landlock = { read = { "/usr", "/lib", "/lib64", "/bin", "/etc", "/dev/null" }, write = { "/dev/null" },
                   exec = SYSTEM, scope = true },
      seccomp = { promises = "stdio rpath wpath cpath fattr proc exec" },
    },
    env = { PATH = "/usr/local/bin:/usr/bin:/bin", LANG = "C.UTF-8" },
    workspace = ".",
  },
})
