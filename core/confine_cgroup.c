/*
** confine_cgroup.c -- a pids cgroup per child: the one limit on how many
** processes a run may have that also binds root (the kernel does not enforce
** RLIMIT_NPROC on the initial user's root, and a tool run as root inside a user
** namespace is still that user to the kernel's count).
**
** Where: the cgroup v1 pids hierarchy (/sys/fs/cgroup/pids), else cgroup v2 at
** the caller's own cgroup when the pids controller is enabled for its children
** (cgroup.subtree_control lists pids). Each child gets airlock/<pid>-<serial>
** below that, with pids.max set; the spawner's child joins it by writing "0"
** into the cgroup.procs fd opened here, before it creates anything, so nothing
** it forks can escape the count. Removed (rmdir) once the child is reaped.
*/
#define _GNU_SOURCE
#include "confine.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define V1_PIDS "/sys/fs/cgroup/pids"
#define V2_ROOT "/sys/fs/cgroup"

static int read_small(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = read(fd, buf, len - 1);
  int e = errno;
  close(fd);
  if (n < 0) return -e;
  buf[n] = 0;
  return (int)n;
}

static int write_small(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = write(fd, text, strlen(text));
  int e = errno;
  close(fd);
  if (n < 0) return -e;
  return n == (ssize_t)strlen(text) ? 0 : -EIO;
}

/* The directory runs' cgroups go under (made if missing), or -errno with why. */
static int find_base(char *base, size_t len, char *err, size_t errlen) {
  struct stat st;
  char buf[4096];
  if (stat(V1_PIDS "/cgroup.procs", &st) == 0) {
    snprintf(base, len, "%s/airlock", V1_PIDS);
  } else {
    /* cgroup v2: our own cgroup, from the "0::/path" line. */
    if (read_small("/proc/self/cgroup", buf, sizeof buf) < 0) {
      snprintf(err, errlen, "cgroup: cannot read /proc/self/cgroup");
      return -ENOENT;
    }
    char *line = strstr(buf, "0::");
    if (line != buf && (!line || line[-1] != '\n')) line = NULL;
    if (!line) {
      snprintf(err, errlen, "cgroup: no pids controller here: neither the cgroup v1 pids "
               "hierarchy (%s) nor a cgroup v2 hierarchy is mounted", V1_PIDS);
      return -ENOENT;
    }
    line += 3;
    line[strcspn(line, "\n")] = 0;
    char own[1024], ctl[512], file[1100];
    if ((size_t)snprintf(own, sizeof own, "%s%s", V2_ROOT, strcmp(line, "/") == 0 ? "" : line) >= sizeof own)
      return -ENAMETOOLONG;
    snprintf(file, sizeof file, "%s/cgroup.subtree_control", own);
    if (read_small(file, ctl, sizeof ctl) < 0 || !strstr(ctl, "pids")) {
      snprintf(err, errlen, "cgroup: the pids controller is not enabled for the children of "
               "this process's cgroup (%s): echo +pids > %s/cgroup.subtree_control as its "
               "owner, or run under a systemd unit with Delegate=yes", own, own);
      return -ENOENT;
    }
    if ((size_t)snprintf(base, len, "%s/airlock", own) >= len) return -ENAMETOOLONG;
  }
  if ((mkdir(base, 0755) < 0 && errno != EEXIST) || access(base, W_OK) < 0) {
    int e = errno;
    snprintf(err, errlen, "cgroup: cannot create cgroups in %s: %s (a pids cgroup needs root "
             "or a delegated cgroup)", base, strerror(e));
    return -e;
  }
  return 0;
}

int airlock_cgroup_probe(char *where, size_t len, char *err, size_t errlen) {
  return find_base(where, len, err, errlen);
}

int airlock_cgroup_new(airlock_cgroup *cg, uint64_t pids_max, uint64_t serial, char *err,
                       size_t errlen) {
  char base[sizeof cg->path - 64], path[sizeof cg->path + 32], num[32];
  cg->procs_fd = -1;
  cg->path[0] = 0;
  int rc = find_base(base, sizeof base, err, errlen);
  if (rc < 0) return rc;
  /* Unique in this process whatever broker asks (each counts its runs from 1). */
  static uint64_t made;
  uint64_t n = __atomic_add_fetch(&made, 1, __ATOMIC_RELAXED);
  snprintf(cg->path, sizeof cg->path, "%s/%ld-%llu-%llu", base, (long)getpid(), (unsigned long long)serial,
           (unsigned long long)n);
  if (mkdir(cg->path, 0755) < 0) {
    int e = errno;
    snprintf(err, errlen, "cgroup: cannot create %s: %s", cg->path, strerror(e));
    cg->path[0] = 0;
    return -e;
  }
  snprintf(path, sizeof path, "%s/pids.max", cg->path);
  snprintf(num, sizeof num, "%llu", (unsigned long long)pids_max);
  if ((rc = write_small(path, num)) < 0) {
    snprintf(err, errlen, "cgroup: cannot write %s to %s: %s", num, path, strerror(-rc));
    airlock_cgroup_remove(cg);
    return rc;
  }
  snprintf(path, sizeof path, "%s/cgroup.procs", cg->path);
  cg->procs_fd = open(path, O_WRONLY | O_CLOEXEC);
  if (cg->procs_fd < 0) {
    rc = -errno;
    snprintf(err, errlen, "cgroup: cannot open %s: %s", path, strerror(-rc));
    airlock_cgroup_remove(cg);
    return rc;
  }
  return 0;
}

/* A number from one of the cgroup's files: the first one, or the one after
** key ("max " in pids.events). */
static int read_count(const airlock_cgroup *cg, const char *file, const char *key, uint64_t *out) {
  char path[sizeof cg->path + 32], buf[128];
  snprintf(path, sizeof path, "%s/%s", cg->path, file);
  int n = read_small(path, buf, sizeof buf);
  if (n < 0) return n;
  const char *at = key ? strstr(buf, key) : buf;
  if (!at) return -EINVAL;
  if (key) at += strlen(key);
  char *end;
  errno = 0;
  unsigned long long v = strtoull(at, &end, 10);
  if (end == at || errno) return -EINVAL;
  *out = v;
  return 0;
}

int airlock_cgroup_pids_peak(const airlock_cgroup *cg, uint64_t *out) {
  return read_count(cg, "pids.peak", NULL, out);
}

/* pids.events: "max N", forks refused because the limit was reached. */
int airlock_cgroup_pids_refused(const airlock_cgroup *cg, uint64_t *out) {
  return read_count(cg, "pids.events", "max ", out);
}

void airlock_cgroup_kill(const airlock_cgroup *cg) {
  char path[sizeof cg->path + 32], buf[8192];
  if (!cg->path[0]) return;
  snprintf(path, sizeof path, "%s/cgroup.kill", cg->path);   /* cgroup v2, Linux 5.14+ */
  if (write_small(path, "1") == 0) return;
  /* v1: one pass over the members (a pid namespace or the process group has
  ** normally taken them already; this catches one that left the group). */
  snprintf(path, sizeof path, "%s/cgroup.procs", cg->path);
  if (read_small(path, buf, sizeof buf) <= 0) return;
  for (char *p = buf, *end; *p; p = end) {
    long pid = strtol(p, &end, 10);
    if (end == p) break;
    if (pid > 1) kill((pid_t)pid, SIGKILL);
    while (*end == '\n') end++;
  }
}

void airlock_cgroup_remove(airlock_cgroup *cg) {
  if (cg->procs_fd >= 0) close(cg->procs_fd);
  cg->procs_fd = -1;
  if (!cg->path[0]) return;
  /* The last members may still be on their way out after the reap (EBUSY). */
  for (int i = 0; i < 200 && rmdir(cg->path) < 0 && errno == EBUSY; i++) {
    struct timespec ts = { 0, 1000000 };
    nanosleep(&ts, NULL);
  }
  cg->path[0] = 0;
}
