-- tool -- programs run under `airlock exec`: the system read-only (Landlock
-- read and exec on /usr /lib /lib64 /bin /etc), one writable workspace (the
-- directory exec is given, else the current one; what is built there may be
-- run, under the same confinement; also HOME, with the caller's git
-- configuration shown read-only: tool.home), a private
-- /tmp (a fresh tmpfs in the program's own mount namespace), no network (an
-- empty net namespace, no inet promise), at most 128 processes, 4 GiB of
-- memory and 2 cores for the whole run (a cgroup each), and the seccomp
-- promises of a program that reads, writes and runs others. A call no promise
-- grants fails with an errno (EPERM, EAFNOSUPPORT for sockets, ENOSYS for
-- probes) and is named in the result, as programs expect of a sandbox.
-- Guests run under it keep untrusted's worker settings. tool.confine is locked;
-- the budgets (tool.limits.deadline_ms, memory and capture, and
-- tool.confine.rlimits.cpu and stack) may be raised up to the host's ceilings.
--
-- Two promises look like privilege and are not, here:
--   id    set*id and capset: the program holds no capability (the spawner
--         empties every set, no_new_privs voids file capabilities) and every
--         id it has is one (65534), so the kernel lets it "change" only to the
--         ids it already has; make and other tools call setresuid that way.
--   unix  unix-domain sockets (socketpair for asyncio and subprocess pipes):
--         its file tree holds only what the policy names, Landlock scopes
--         abstract sockets to the run, so it reaches only sockets it made.
local policy = require "airlock.policy"

local SYSTEM = { "/usr", "/lib", "/lib64", "/bin", "/etc" }

return policy.extend("untrusted", {
  name = "tool",
  description = "tools: read-only system, one writable workspace, private /tmp, no network",
  locked = { "tool.confine", "tool.protect" },
  tool = {
    limits = { deadline_ms = "5m", capture = "1M", pids = 128, tmp_size = "64M", memory = "4G", cpu = 2 },
    confine = {
      namespaces = "all",
      shared_net = true,   -- the one empty net namespace all runs share (root; else its own)
      rlimits = { core = 0, fsize = "1G", nofile = 1024 },   -- as: each process gets tool.limits.memory
      no_new_privs = true,
      landlock = { read = { "/usr", "/lib", "/lib64", "/bin", "/etc", "/dev/null", "/dev/urandom", "/dev/zero" },
                   write = { "/dev/null" }, exec = SYSTEM, scope = true },
      seccomp = { promises = "stdio rpath wpath cpath fattr proc exec tty id unix", refuse = "errno" },
    },
    env = { PATH = "/usr/local/bin:/usr/bin:/bin", LANG = "C.UTF-8" },
    workspace = ".",
    -- A repository's hooks and config: what git runs and trusts later, outside
    -- the sandbox. With a .git at the start (the //), both are protected
    -- whether they exist yet or not (a missing one is an empty placeholder for
    -- the run; the trailing / makes it a directory); without one, nothing is
    -- made, so `git init` works and the repository it makes is the program's.
    -- The rest of .git stays writable, so commits work.
    protect = { ".git//hooks/", ".git//config" },
    workspace_exec = true,   -- build, then run what was built (it gains no more than sh has)
    tmp = "private",
  },
})
