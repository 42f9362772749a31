/*
** probe.c -- the kernel probe: what this kernel and privilege level can
** enforce (seccomp, Landlock's ABI, each namespace, pidfds, a delegated
** cgroup v2 subtree, the user-namespace sysctls), found by asking the kernel
** without changing the calling process.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/seccomp.h>

#include "airlock.h"
#include "confine.h"

/* Runs unshare(flags) in a forked child so the caller keeps its namespaces.
** Without privilege, the spawner would add CLONE_NEWUSER to gain the capability
** the other namespaces need, so an EPERM is retried that way. */
static int probe_unshare(int flags)
{
  pid_t pid = fork();
  if (pid < 0) return -errno;
  if (pid == 0) {
    if (unshare(flags) == 0) _exit(0);
    int e = errno;
    if (e == EPERM && (flags & CLONE_NEWUSER) == 0 && unshare(flags | CLONE_NEWUSER) == 0) _exit(0);
    _exit(e > 0 && e < 256 ? e : 255);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) return -errno;
  }
  if (WIFEXITED(st)) return WEXITSTATUS(st) == 0 ? 1 : -WEXITSTATUS(st);
  return -ECHILD;
}

/* An integer sysctl, or -1 when the file is absent or unreadable. */
static int read_int_file(const char *path)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[32];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *end;
  long v = strtol(buf, &end, 10);
  if (end == buf) return -1;
  return (int)v;
}

static int probe_cgroup2(void)
{
  struct statfs sf;
  if (statfs("/sys/fs/cgroup", &sf) != 0 || sf.f_type != 0x63677270 /* CGROUP2_SUPER_MAGIC */) return 0;
  int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  /* The unified hierarchy's line is "0::/path"; on a pure cgroup2 host it is
  ** the only one. */
  char *line = strstr(buf, "0::");
  if (line == NULL || (line != buf && line[-1] != '\n')) return 0;
  line += 3;
  line[strcspn(line, "\n")] = '\0';
  char path[4096];
  int len = snprintf(path, sizeof path, "/sys/fs/cgroup%s", line);
  if (len < 0 || (size_t)len >= sizeof path - 32) return 0;
  /* Writable directory (to create a child cgroup) and cgroup.procs (to move
  ** a process): both are needed to confine a run. */
  if (access(path, W_OK) != 0) return 0;
  strcat(path, "/cgroup.procs");
  return access(path, W_OK) == 0;
}

int airlock_probe(airlock_probe_report *r)
{
  if (r == NULL) return -EINVAL;
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
      r->seccomp = -e; /* cannot happen with a NULL program */
    }
  }
  act = SECCOMP_RET_KILL_PROCESS;
  r->seccomp_kill_process = syscall(__NR_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &act) == 0 ? 1 : -errno;

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
  r->apparmor_restrict_userns = read_int_file("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  r->is_root = geteuid() == 0;
  return 0;
}
