-- ledger -- the journal writer: read and write to one session directory only
-- (the one being recorded, given when the writer starts:
-- policy.authority(p, "ledger", {session = dir})), nothing else on the
-- filesystem, no network, no new programs. Guests run under it keep
-- untrusted's worker settings. ledger.confine is locked.
local policy = require "airlock.policy"

return policy.extend("untrusted", {
  name = "ledger",
  description = "the journal writer: read-write to one session directory only",
  locked = { "ledger.confine" },
  ledger = {
    confine = {
      namespaces = "all",
      rlimits = { core = 0, nproc = 1 },
      no_new_privs = true,
      landlock = { read = {}, write = {}, exec = {}, scope = true },
      seccomp = { promises = "stdio rpath wpath cpath", syscalls = { "flock" } },
    },
  },
})
