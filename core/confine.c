/*
** confine.c -- layers a process applies to itself: no_new_privs and rlimits
** (the table of those set with one call is confine_layers.c), and how every
** layer reports what it actually enforced, so a downgrade on an older kernel
** is visible, never silent. Landlock lives in
** confine_landlock.c, the seccomp allowlist in confine_seccomp.c, the kernel
** probe (what can be enforced here) in probe.c.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "airlock.h"
#include "confine.h"

/* ------------------------------------------------------------------ layers */

const char *airlock_layer_status_name(int status)
{
  switch (status) {
    case AIRLOCK_LAYER_APPLIED: return "applied";
    case AIRLOCK_LAYER_SKIPPED: return "skipped";
    case AIRLOCK_LAYER_FAILED: return "failed";
    default: return "unknown";
  }
}

void airlock_layer_set_(airlock_layer *out, const char *name, int status, int err, const char *fmt, ...)
{
  if (out == NULL) return;
  out->name = name;
  out->status = status;
  out->err = err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->detail, sizeof out->detail, fmt, ap);
  va_end(ap);
}

/* ------------------------------------------------------------------ no_new_privs */

int airlock_confine_no_new_privs(airlock_layer *out)
{
  int before = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    int e = errno;
    airlock_layer_set_(out, "no_new_privs", AIRLOCK_LAYER_FAILED, e, "prctl(PR_SET_NO_NEW_PRIVS): %s",
                       airlock_strerror(e));
    return -e;
  }
  /* Read it back: a kernel that ignored the option would leave setuid
  ** binaries able to regain privileges, and the report would lie. */
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) {
    airlock_layer_set_(out, "no_new_privs", AIRLOCK_LAYER_FAILED, EPERM,
                       "PR_GET_NO_NEW_PRIVS does not read back 1");
    return -EPERM;
  }
  airlock_layer_set_(out, "no_new_privs", AIRLOCK_LAYER_APPLIED, 0, "%s",
                     before == 1 ? "already set" : "set");
  return 0;
}

/* ------------------------------------------------------------------ rlimits */

const airlock_rlimit_kind airlock_rlimit_kinds[] = {
    {"as", AIRLOCK_RL_AS, RLIMIT_AS, offsetof(airlock_rlimits, as)},
    {"cpu", AIRLOCK_RL_CPU, RLIMIT_CPU, offsetof(airlock_rlimits, cpu)},
    {"nofile", AIRLOCK_RL_NOFILE, RLIMIT_NOFILE, offsetof(airlock_rlimits, nofile)},
    {"nproc", AIRLOCK_RL_NPROC, RLIMIT_NPROC, offsetof(airlock_rlimits, nproc)},
    {"fsize", AIRLOCK_RL_FSIZE, RLIMIT_FSIZE, offsetof(airlock_rlimits, fsize)},
    {"core", AIRLOCK_RL_CORE, RLIMIT_CORE, offsetof(airlock_rlimits, core)},
    {"stack", AIRLOCK_RL_STACK, RLIMIT_STACK, offsetof(airlock_rlimits, stack)},
    {NULL, 0, 0, 0},
};

int airlock_apply_rlimits(const airlock_rlimits *rl)
{
  if (rl == NULL || (rl->set_mask & ~AIRLOCK_RL_ALL_) != 0) return -EINVAL;
  for (const airlock_rlimit_kind *k = airlock_rlimit_kinds; k->name != NULL; k++) {
    if ((rl->set_mask & k->bit) == 0) continue;
    uint64_t v;
    memcpy(&v, (const char *)rl + k->off, sizeof v);
    /* RLIM_INFINITY is all ones on Linux, so UINT64_MAX maps onto it. Soft
    ** equals hard: a guest cannot raise its soft limit back. Except RLIMIT_CPU:
    ** at the hard limit the kernel sends SIGKILL without SIGXCPU first (it
    ** checks hard before soft), which would read as a crash; the hard limit is
    ** one second later, so the limit shows as SIGXCPU (cause cpu) and a guest
    ** that ignores SIGXCPU is still killed a second later. */
    struct rlimit r = {.rlim_cur = (rlim_t)v, .rlim_max = (rlim_t)v};
    if (k->resource == RLIMIT_CPU && v < UINT64_MAX - 1) r.rlim_max = (rlim_t)(v + 1);
    if (setrlimit(k->resource, &r) != 0) return -errno;
  }
  return 0;
}
