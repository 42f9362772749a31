/*
** confine.c -- no_new_privs, rlimits, and the kernel probe. Landlock lives in
** confine_landlock.c, the seccomp allowlist in confine_seccomp.c. Every layer reports what it
** actually enforced, so a downgrade on an older kernel is visible, never silent.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/seccomp.h>

#include "airlock.h"
#include "confine.h"
#include "landlock_compat.h"

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

void airlock_layer_set_(airlock_layer *out, const char *name, int status, int err,
                        const char *fmt, ...)
{
  if (out == NULL)
    return;
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
    airlock_layer_set_(out, "no_new_privs", AIRLOCK_LAYER_FAILED, e,
                       "prctl(PR_SET_NO_NEW_PRIVS): %s", airlock_strerror(e));
    return -e;
  }
  /* Read it back: a kernel that ignored the option would leave setuid
  ** binaries able to regain privileges, and the report would lie. */
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) {
    airlock_layer_set_(out, "no_new_privs", AIRLOCK_LAYER_FAILED, EPERM,
                       "PR_GET_NO_NEW_PRIVS does not read back 1");
    return -EPERM;
  }
  airlock_layer_set_(out, "no_new_privs", AIRLOCK_LAYER_APPLIED, 0,
                     "%s", before == 1 ? "already set" : "set");
  return 0;
}

/* ------------------------------------------------------------------ mdwe */

int airlock_mdwe_available(void) { return prctl(PR_GET_MDWE, 0, 0, 0, 0) >= 0; }

int airlock_confine_mdwe(airlock_layer *out)
{
  if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0) {
    int e = errno;
    airlock_layer_set_(out, "mdwe", e == EINVAL ? AIRLOCK_LAYER_SKIPPED : AIRLOCK_LAYER_FAILED, e,
                       e == EINVAL ? "this kernel has no PR_SET_MDWE (it needs Linux 6.3+)"
                                   : "prctl(PR_SET_MDWE): %s", airlock_strerror(e));
    return -e;
  }
  int got = prctl(PR_GET_MDWE, 0, 0, 0, 0);
  if (got < 0 || !(got & PR_MDWE_REFUSE_EXEC_GAIN)) {
    airlock_layer_set_(out, "mdwe", AIRLOCK_LAYER_FAILED, EIO, "PR_GET_MDWE does not confirm it (%d)", got);
    return -EIO;
  }
  airlock_layer_set_(out, "mdwe", AIRLOCK_LAYER_APPLIED, 0,
                     "no mapping writable and executable, none may gain exec (PR_SET_MDWE)");
  return 0;
}

/* ------------------------------------------------------------------ rlimits */

const airlock_rlimit_kind airlock_rlimit_kinds[] = {
  { "as", AIRLOCK_RL_AS, RLIMIT_AS, offsetof(airlock_rlimits, as) },
  { "cpu", AIRLOCK_RL_CPU, RLIMIT_CPU, offsetof(airlock_rlimits, cpu) },
  { "nofile", AIRLOCK_RL_NOFILE, RLIMIT_NOFILE, offsetof(airlock_rlimits, nofile) },
  { "nproc", AIRLOCK_RL_NPROC, RLIMIT_NPROC, offsetof(airlock_rlimits, nproc) },
  { "fsize", AIRLOCK_RL_FSIZE, RLIMIT_FSIZE, offsetof(airlock_rlimits, fsize) },
  { "core", AIRLOCK_RL_CORE, RLIMIT_CORE, offsetof(airlock_rlimits, core) },
  { "stack", AIRLOCK_RL_STACK, RLIMIT_STACK, offsetof(airlock_rlimits, stack) },
  { NULL, 0, 0, 0 },
};

int airlock_apply_rlimits(const airlock_rlimits *rl)
{
  if (rl == NULL || (rl->set_mask & ~AIRLOCK_RL_ALL_) != 0)
    return -EINVAL;
  for (const airlock_rlimit_kind *k = airlock_rlimit_kinds; k->name != NULL; k++) {
    if ((rl->set_mask & k->bit) == 0)
      continue;
    uint64_t v;
    memcpy(&v, (const char *)rl + k->off, sizeof v);
    /* RLIM_INFINITY is all ones on Linux, so UINT64_MAX maps onto it. Soft
    ** equals hard: a guest cannot raise its soft limit back. Except RLIMIT_CPU:
    ** at the hard limit the kernel sends SIGKILL without SIGXCPU first (it
    ** checks hard before soft), which would read as a crash; the hard limit is
    ** one second later, so the limit shows as SIGXCPU (cause cpu) and a guest
    ** that ignores SIGXCPU is still killed a second later. */
    struct rlimit r = { .rlim_cur = (rlim_t)v, .rlim_max = (rlim_t)v };
    if (k->resource == RLIMIT_CPU && v < UINT64_MAX - 1)
      r.rlim_max = (rlim_t)(v + 1);
    if (setrlimit(k->resource, &r) != 0)
      return -errno;
  }
  return 0;
}

/* ------------------------------------------------------------------ probe */

/* Runs unshare(flags) in a forked child so the caller keeps its namespaces.
** Without privilege, the spawner would add CLONE_NEWUSER to gain the capability
** the other namespaces need, so an EPERM is retried that way. */
static int probe_unshare(int flags)
{
  pid_t pid = fork();
  if (pid < 0)
    return -errno;
  if (pid == 0) {
    if (unshare(flags) == 0)
      _exit(0);
    int e = errno;
    if (e == EPERM && (flags & CLONE_NEWUSER) == 0 && unshare(flags | CLONE_NEWUSER) == 0)
      _exit(0);
    _exit(e > 0 && e < 256 ? e : 255);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR)
      return -errno;
  }
  if (WIFEXITED(st))
    return WEXITSTATUS(st) == 0 ? 1 : -WEXITSTATUS(st);
  return -ECHILD;
}

/* An integer sysctl, or -1 when the file is absent or unreadable. */
static int read_int_file(const char *path)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  char buf[32];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  char *end;
  long v = strtol(buf, &end, 10);
  if (end == buf)
    return -1;
  return (int)v;
}

static int probe_cgroup2(void)
{
  struct statfs sf;
  if (statfs("/sys/fs/cgroup", &sf) != 0 || sf.f_type != 0x63677270 /* CGROUP2_SUPER_MAGIC */)
    return 0;
  int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  /* The unified hierarchy's line is "0::/path"; on a pure cgroup2 host it is
  ** the only one. */
  char *line = strstr(buf, "0::");
  if (line == NULL || (line != buf && line[-1] != '\n'))
    return 0;
  line += 3;
  line[strcspn(line, "\n")] = '\0';
  char path[4096];
  int len = snprintf(path, sizeof path, "/sys/fs/cgroup%s", line);
  if (len < 0 || (size_t)len >= sizeof path - 32)
    return 0;
  /* Writable directory (to create a child cgroup) and cgroup.procs (to move
  ** a process): both are needed to confine a run. */
  if (access(path, W_OK) != 0)
    return 0;
  strcat(path, "/cgroup.procs");
  return access(path, W_OK) == 0;
}

int airlock_probe(airlock_probe_report *r)
{
  if (r == NULL)
    return -EINVAL;
  memset(r, 0, sizeof *r);
  r->landlock_abi = airlock_landlock_abi();

  /* SECCOMP_GET_ACTION_AVAIL (4.14) answers both questions without changing
  ** anything. On an older kernel, PR_SET_SECCOMP with a NULL program fails
  ** with EFAULT (or EACCES without no_new_privs) when filter mode is built in
  ** and EINVAL when it is not. */
  uint32_t act = SECCOMP_RET_ALLOW;
  if (syscall(__NR_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &act) == 0) {
    r->seccomp = 1;
  } else {
    int e = errno;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, NULL, 0, 0) != 0) {
      e = errno;
      r->seccomp = (e == EFAULT || e == EACCES) ? 1 : -e;
    } else {
      r->seccomp = -e;   /* cannot happen with a NULL program */
    }
  }
  act = SECCOMP_RET_KILL_PROCESS;
  r->seccomp_kill_process =
      syscall(__NR_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &act) == 0 ? 1 : -errno;

  r->user_ns = probe_unshare(CLONE_NEWUSER);
  r->net_ns = probe_unshare(CLONE_NEWNET);
  r->pid_ns = probe_unshare(CLONE_NEWPID);
  r->mount_ns = probe_unshare(CLONE_NEWNS);
  r->ipc_ns = probe_unshare(CLONE_NEWIPC);
  r->uts_ns = probe_unshare(CLONE_NEWUTS);
  r->cgroup_ns = probe_unshare(CLONE_NEWCGROUP);

  long pfd = syscall(__NR_pidfd_open, (long)getpid(), 0L);
  if (pfd >= 0) {
    close((int)pfd);
    r->pidfd = 1;
  } else {
    r->pidfd = -errno;
  }

  r->cgroup2_delegated = probe_cgroup2();
  r->unprivileged_userns_clone = read_int_file("/proc/sys/kernel/unprivileged_userns_clone");
  r->apparmor_restrict_userns =
      read_int_file("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  r->is_root = geteuid() == 0;
  return 0;
}
