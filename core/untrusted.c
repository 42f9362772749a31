/*
** untrusted.c -- the stock `untrusted` policy (policies/untrusted.lua) as a C
** host takes it: the values the Lua module resolves that policy to, for the
** init frame (limits, the layers the worker applies to itself) and for the
** spawner and broker (namespaces, rlimits, capabilities, no_new_privs,
** deadline, frame and capture bounds, the checks from outside). The policy
** file is the source; spec/core/c_defaults_spec.lua compares every value here
** with what the Lua module resolves it to, and fails on a field of the policy
** this file does not carry, so the two cannot drift apart.
*/
#include "airlock.h"

/* confine.rlimits as the planner derives them: 160M of address space (the
** 64M Lua heap, half again for the allocator, 64M for the interpreter:
** lua/airlock/confine.lua, address_space), 2 s of CPU (limits.cpu and 1 s,
** the backstop), 8 descriptors, 1 process, no file growth, no core dumps,
** "8M" of stack. */
const airlock_rlimits airlock_untrusted_rlimits = {
    .as = 160u << 20,
    .cpu = 2,
    .nofile = 8,
    .nproc = 1,
    .fsize = 0,
    .core = 0,
    .stack = 8u << 20,
    .set_mask = AIRLOCK_RL_ALL_,
};

void airlock_untrusted_defaults(airlock_init *in, airlock_run_opts *o)
{
  if (in != NULL) {
    in->instructions = 0;                /* no instruction count: the CPU budget */
    in->memory = 64u << 20;              /* limits.memory = "64M" */
    in->output = AIRLOCK_OUTPUT_DEFAULT; /* limits.output = "64K" */
    in->turn_instructions = 0;           /* no per-turn budget */
    in->cpu_ms = 1000;                   /* limits.cpu = "1s" */
    in->turn_cpu_ms = 0;
    in->confine_landlock = in->require_landlock = 1;
    in->confine_seccomp = in->require_seccomp = 1;
    in->confine_mdwe = 1; /* not required: Linux 6.3+ */
    in->require_mdwe = 0;
  }
  if (o != NULL) {
    unsigned long ns = 0; /* confine.namespaces = "all" */
    for (const airlock_namespace *x = airlock_namespaces; x->name != NULL; x++) ns |= x->flag;
    o->spawn.namespaces = ns;
    o->spawn.rlimits = &airlock_untrusted_rlimits;
    o->spawn.drop_caps = 1; /* confine.capabilities = "drop" */
    o->spawn.no_new_privs = 1;
    o->deadline_ms = 5000;                    /* limits.deadline_ms = "5s" */
    o->max_frame = AIRLOCK_FRAME_MAX_DEFAULT; /* limits.max_frame = "16M" */
    o->capture_max = AIRLOCK_CAPTURE_DEFAULT; /* limits.capture = "64K" */
    o->expect_ready = 1;
    o->verify_seccomp = 1; /* Seccomp: 2 and NoNewPrivs: 1, from outside */
  }
}
