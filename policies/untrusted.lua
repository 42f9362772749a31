-- untrusted -- the strict default policy for guest code nobody vouches for.
-- Every confinement layer on and required: if this kernel cannot enforce one,
-- the run ends with cause "confinement" before any guest code runs
-- (`airlock probe` tells what this machine can enforce). Small budgets, no
-- effects beyond the built-in log (print) and clock.now. The confine section
-- is locked: policy.extend may tighten it, never loosen it. Budgets are not
-- confinement: a derived policy may raise limits.* and rlimits.cpu and
-- rlimits.stack up to the host's ceilings (airlock.policy.ceilings, the
-- command's --ceiling), with every layer still on.
return {
  name = "untrusted",
  description = "strict default: every confinement layer required, small limits, no granted effects",
  locked = { "confine" },
  limits = {
    deadline_ms = "5s",
    memory = "64M",
    cpu = "1s",                    -- the worker's own CPU time (cause cpu), read at a tick
                                   -- each ms of CPU: no instruction count, so guest code
                                   -- runs at the interpreter's full speed
    output = "64K",
    max_frame = "16M",
    capture = "64K",
  },
  effects = {},
  confine = {
    namespaces = "all",            -- user pid net ipc uts mount cgroup: no network at all
    shared_net = true,             -- runs join one pre-made empty net namespace (root only;
                                   -- 0.35 ms less per run; docs/CONFINEMENT.md says why it is safe)
    rlimits = {
      cpu = "1s",                  -- the process's RLIMIT_CPU (SIGXCPU, cause cpu): with
                                   -- limits.cpu set it is that and 1 s more, a backstop
      nofile = 8,                  -- the worker holds 4 fds and cannot open more anyway
      nproc = 1,                   -- no new process (root outside ignores it; seccomp holds)
      fsize = 0,                   -- no file may grow
      core = 0,                    -- no core dumps
      stack = "8M",
      -- No `as`: the address space follows limits.memory (for 64M of heap,
      -- 160M: the heap, half again for the allocator, 64M for the interpreter).
    },
    capabilities = "drop",
    no_new_privs = true,
    landlock = true,
    seccomp = true,
    mdwe = true,                   -- no writable+executable memory (Linux 6.3+; skipped, and
                                   -- said so, on older kernels: not required)
    require = { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp" },
  },
}
