/*
** confine_cgroup.c -- one cgroup per child, in every hierarchy a limit needs:
** pids (the one process limit that also binds root: the kernel does not
** enforce RLIMIT_NPROC on the initial user's root), memory (RLIMIT_AS is per
** process; a run is a tree of them) and cpu (a rate, with cpuacct for the
** CPU time the whole tree used).
**
** Where: cgroup v1, each controller's own hierarchy (/sys/fs/cgroup/NAME) at
** the caller's own cgroup in it; else cgroup v2 at the caller's own cgroup,
** when its cgroup.subtree_control lists the controllers. Each child gets
** airlock/<pid>-<serial>-<n> below that, with its limits set; the spawner's
** child joins each by writing "0" into the cgroup.procs fds opened here,
** before it creates anything, so nothing it forks escapes. Removed (rmdir)
** once the child is reaped; what a parent killed by SIGKILL left behind is
** removed by the next process that makes one.
*/
#define _GNU_SOURCE
#include "airlock.h"
#include "confine.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CG_ROOT "/sys/fs/cgroup"

/* The v1 hierarchies, in airlock_cgroup.path order. */
static const char *const v1_names[AIRLOCK_CGROUP_MAX] = {"pids", "memory", "cpu", "cpuacct"};

static int read_small(const char *path, char *buf, size_t len)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = read(fd, buf, len - 1);
  int e = errno;
  close(fd);
  if (n < 0) return -e;
  buf[n] = 0;
  return (int)n;
}

static int write_small(const char *path, const char *text)
{
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = write(fd, text, strlen(text));
  int e = errno;
  close(fd);
  if (n < 0) return -e;
  return n == (ssize_t)strlen(text) ? 0 : -EIO;
}

/* This process's cgroup path in the hierarchy whose /proc/self/cgroup line
** names ctl among its controllers ("" for v2's "0::" line), into own. */
static int own_path(const char *ctl, char *own, size_t len)
{
  char buf[4096];
  if (read_small("/proc/self/cgroup", buf, sizeof buf) < 0) return -ENOENT;
  for (char *line = buf, *next; *line; line = next) {
    next = line + strcspn(line, "\n");
    if (*next) *next++ = 0;
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = 0;
    int match = ctl[0] == 0 ? c1[1] == 0 : 0;
    for (char *w = c1 + 1; !match && *w;) { /* "cpu,cpuacct" names both */
      size_t n = strcspn(w, ",");
      match = n == strlen(ctl) && strncmp(w, ctl, n) == 0;
      w += n + (w[n] == ',');
    }
    if (match) {
      if ((size_t)snprintf(own, len, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1) >= len)
        return -ENAMETOOLONG;
      return 0;
    }
  }
  return -ENOENT;
}

/* Whether pid names a process that still runs (a zombie does not: its parent
** may never reap it). */
static int pid_alive(pid_t pid)
{
  if (kill(pid, 0) < 0 && errno != EPERM) return 0;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  if (read_small(path, buf, sizeof buf) <= 0) return 1; /* cannot tell: leave it */
  const char *close = strrchr(buf, ')');
  return !(close && (close[2] == 'Z' || close[2] == 'X'));
}

/* Removes what a parent that died without cleaning up left in base: entries
** <pid>-... whose pid is gone (killing what is still in them). */
static void sweep(const char *base)
{
  DIR *d = opendir(base);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '-' || pid <= 0 || pid == (long)getpid()) continue;
    if (pid_alive((pid_t)pid)) continue; /* its maker still runs */
    airlock_cgroup left = {.procs_fd = {-1, -1, -1, -1}};
    snprintf(left.path[0], sizeof left.path[0], "%s/%s", base, e->d_name);
    airlock_cgroup_kill(&left);
    airlock_cgroup_remove(&left);
  }
  closedir(d);
}

/* The directory runs' cgroups of controller i go under (made if missing), or
** -errno with what to change. v2: i is ignored, the unified hierarchy. */
static int find_base(int i, int *v2, char *base, size_t len, char *err, size_t errlen)
{
  char own[1024], file[1200];
  struct stat st;
  snprintf(file, sizeof file, "%s/%s/cgroup.procs", CG_ROOT, v1_names[i]);
  if (stat(file, &st) == 0) {
    *v2 = 0;
    if (own_path(v1_names[i], own, sizeof own) < 0) own[0] = 0;
    if ((size_t)snprintf(base, len, "%s/%s%s/airlock", CG_ROOT, v1_names[i], own) >= len)
      return -ENAMETOOLONG;
  } else {
    *v2 = 1;
    if (own_path("", own, sizeof own) < 0) {
      snprintf(err, errlen,
               "cgroup: no %s controller here: neither the cgroup v1 %s hierarchy "
               "(%s/%s) nor a cgroup v2 hierarchy is mounted",
               v1_names[i], v1_names[i], CG_ROOT, v1_names[i]);
      return -ENOENT;
    }
    char ctl[512];
    const char *want = i == AIRLOCK_CGROUP_CPUACCT ? "cpu" : v1_names[i];
    snprintf(file, sizeof file, "%s%s/cgroup.subtree_control", CG_ROOT, own);
    int n = read_small(file, ctl, sizeof ctl);
    int found = 0;
    for (char *w = n > 0 ? strtok(ctl, " \n") : NULL; w && !found; w = strtok(NULL, " \n"))
      found = strcmp(w, want) == 0;
    if (!found) {
      snprintf(err, errlen,
               "cgroup: the %s controller is not enabled for the children of this "
               "process's cgroup (%s%s): echo +%s > %s%s/cgroup.subtree_control as its owner, or "
               "run under a systemd unit with Delegate=yes",
               want, CG_ROOT, own, want, CG_ROOT, own);
      return -ENOENT;
    }
    if ((size_t)snprintf(base, len, "%s%s/airlock", CG_ROOT, own) >= len) return -ENAMETOOLONG;
  }
  if ((mkdir(base, 0755) < 0 && errno != EEXIST) || access(base, W_OK) < 0) {
    int e = errno;
    snprintf(err, errlen,
             "cgroup: cannot create cgroups in %s: %s (a cgroup per run needs root "
             "or a delegated cgroup)",
             base, airlock_strerror(e));
    return -e;
  }
  sweep(base); /* a readdir of a few entries: cheap beside the mkdir */
  return 0;
}

int airlock_cgroup_probe(char *where, size_t len, char *err, size_t errlen)
{
  int v2;
  return find_base(AIRLOCK_CGROUP_PIDS, &v2, where, len, err, errlen);
}

int airlock_cgroup_probe_controller(int i, char *where, size_t len, char *err, size_t errlen)
{
  int v2;
  if (i < 0 || i >= AIRLOCK_CGROUP_MAX) return -EINVAL;
  return find_base(i, &v2, where, len, err, errlen);
}

/* Writes text into file of the cgroup dir; -errno with the message in err. */
static int set_file(const char *dir, const char *file, const char *text, char *err, size_t errlen)
{
  char path[600];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  int rc = write_small(path, text);
  if (rc < 0) snprintf(err, errlen, "cgroup: cannot write %s to %s: %s", text, path, airlock_strerror(-rc));
  return rc;
}

/* The limits of controller i in dir (v2: every controller's, in the one dir). */
static int set_limits(int i, int v2, const char *dir, const airlock_cgroup_limits *lim, char *err,
                      size_t errlen)
{
  char num[64];
  int rc = 0;
  if ((v2 || i == AIRLOCK_CGROUP_PIDS) && lim->pids_max) {
    snprintf(num, sizeof num, "%llu", (unsigned long long)lim->pids_max);
    rc = set_file(dir, "pids.max", num, err, errlen);
  }
  if (rc == 0 && (v2 || i == AIRLOCK_CGROUP_MEMORY) && lim->memory_max) {
    snprintf(num, sizeof num, "%llu", (unsigned long long)lim->memory_max);
    if (v2) {
      rc = set_file(dir, "memory.max", num, err, errlen);
      char path[600];
      snprintf(path, sizeof path, "%s/memory.swap.max", dir);
      if (rc == 0 && access(path, F_OK) == 0) rc = set_file(dir, "memory.swap.max", "0", err, errlen);
    } else {
      rc = set_file(dir, "memory.limit_in_bytes", num, err, errlen);
      char path[600]; /* memory plus swap: no escape into swap (when swap accounting is on) */
      snprintf(path, sizeof path, "%s/memory.memsw.limit_in_bytes", dir);
      if (rc == 0 && access(path, F_OK) == 0)
        rc = set_file(dir, "memory.memsw.limit_in_bytes", num, err, errlen);
    }
  }
  if (rc == 0 && (v2 || i == AIRLOCK_CGROUP_CPU) && lim->cpu_millis) {
    unsigned long long quota = (unsigned long long)lim->cpu_millis * 100; /* per 100 ms period */
    if (v2) {
      snprintf(num, sizeof num, "%llu 100000", quota);
      rc = set_file(dir, "cpu.max", num, err, errlen);
    } else {
      rc = set_file(dir, "cpu.cfs_period_us", "100000", err, errlen);
      snprintf(num, sizeof num, "%llu", quota);
      if (rc == 0) rc = set_file(dir, "cpu.cfs_quota_us", num, err, errlen);
    }
  }
  return rc;
}

/* Which controllers lim needs: a bit per index (cpuacct comes with cpu). */
static unsigned needed(const airlock_cgroup_limits *lim)
{
  unsigned m = 0;
  if (lim->pids_max) m |= 1u << AIRLOCK_CGROUP_PIDS;
  if (lim->memory_max) m |= 1u << AIRLOCK_CGROUP_MEMORY;
  if (lim->cpu_millis) m |= 1u << AIRLOCK_CGROUP_CPU | 1u << AIRLOCK_CGROUP_CPUACCT;
  return m;
}

int airlock_cgroup_new(airlock_cgroup *cg, const airlock_cgroup_limits *lim, uint64_t serial, char *err,
                       size_t errlen)
{
  memset(cg, 0, sizeof *cg);
  for (int i = 0; i < AIRLOCK_CGROUP_MAX; i++) cg->procs_fd[i] = -1;
  /* Unique in this process whatever broker asks (each counts its runs from 1). */
  static uint64_t made;
  uint64_t n = __atomic_add_fetch(&made, 1, __ATOMIC_RELAXED);
  unsigned want = needed(lim);
  for (int i = 0; i < AIRLOCK_CGROUP_MAX; i++) {
    if (!(want & (1u << i))) continue;
    char base[sizeof cg->path[0] - 64], path[sizeof cg->path[0] + 32];
    int v2, rc = find_base(i, &v2, base, sizeof base, err, errlen);
    if (rc < 0) {
      airlock_cgroup_remove(cg);
      return rc;
    }
    cg->v2 = v2;
    int slot = v2 ? 0 : i;
    if (cg->path[slot][0]) continue; /* v2: one directory for all */
    /* v1 with cpu and cpuacct mounted together: one directory for both. */
    char real[PATH_MAX];
    if (!v2 && realpath(base, real)) {
      int same = 0;
      for (int k = 0; k < i && !same; k++) {
        char other[PATH_MAX], kb[sizeof cg->path[0]];
        if (!cg->path[k][0]) continue;
        snprintf(kb, sizeof kb, "%s", cg->path[k]);
        char *slash = strrchr(kb, '/');
        if (slash) *slash = 0;
        same = realpath(kb, other) && strcmp(other, real) == 0;
      }
      if (same) continue;
    }
    snprintf(cg->path[slot], sizeof cg->path[slot], "%s/%ld-%llu-%llu", base, (long)getpid(),
             (unsigned long long)serial, (unsigned long long)n);
    if (mkdir(cg->path[slot], 0755) < 0) {
      rc = -errno;
      snprintf(err, errlen, "cgroup: cannot create %s: %s", cg->path[slot], airlock_strerror(-rc));
      cg->path[slot][0] = 0;
      airlock_cgroup_remove(cg);
      return rc;
    }
    if ((rc = set_limits(i, v2, cg->path[slot], lim, err, errlen)) < 0) {
      airlock_cgroup_remove(cg);
      return rc;
    }
    snprintf(path, sizeof path, "%s/cgroup.procs", cg->path[slot]);
    cg->procs_fd[slot] = open(path, O_WRONLY | O_CLOEXEC);
    if (cg->procs_fd[slot] < 0) {
      rc = -errno;
      snprintf(err, errlen, "cgroup: cannot open %s: %s", path, airlock_strerror(-rc));
      airlock_cgroup_remove(cg);
      return rc;
    }
  }
  return 0;
}

/* A number from file in the directory of controller i: the first one, or the
** one after key ("max " in pids.events). */
static int read_count(const airlock_cgroup *cg, int i, const char *file, const char *key, uint64_t *out)
{
  const char *dir = cg->v2 ? cg->path[0] : cg->path[i];
  char path[sizeof cg->path[0] + 32], buf[1024];
  if (!dir[0]) return -ENOENT;
  snprintf(path, sizeof path, "%s/%s", dir, file);
  int n = read_small(path, buf, sizeof buf);
  if (n < 0) return n;
  const char *at = buf;
  if (key) { /* at the start of a line */
    at = strstr(buf, key);
    while (at && at != buf && at[-1] != '\n') at = strstr(at + 1, key);
    if (!at) return -EINVAL;
    at += strlen(key);
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(at, &end, 10);
  if (end == at || errno) return -EINVAL;
  *out = v;
  return 0;
}

int airlock_cgroup_pids_peak(const airlock_cgroup *cg, uint64_t *out)
{
  return read_count(cg, AIRLOCK_CGROUP_PIDS, "pids.peak", NULL, out);
}

/* pids.events: "max N", forks refused because the limit was reached. */
int airlock_cgroup_pids_refused(const airlock_cgroup *cg, uint64_t *out)
{
  return read_count(cg, AIRLOCK_CGROUP_PIDS, "pids.events", "max ", out);
}

int airlock_cgroup_memory_peak(const airlock_cgroup *cg, uint64_t *out)
{
  return read_count(cg, AIRLOCK_CGROUP_MEMORY, cg->v2 ? "memory.peak" : "memory.max_usage_in_bytes", NULL,
                    out);
}

int airlock_cgroup_oom_kills(const airlock_cgroup *cg, uint64_t *out)
{
  return read_count(cg, AIRLOCK_CGROUP_MEMORY, cg->v2 ? "memory.events" : "memory.oom_control", "oom_kill ",
                    out);
}

int airlock_cgroup_cpu_usec(const airlock_cgroup *cg, uint64_t *out)
{
  if (cg->v2) return read_count(cg, 0, "cpu.stat", "usage_usec ", out);
  uint64_t ns;
  int i = cg->path[AIRLOCK_CGROUP_CPUACCT][0] ? AIRLOCK_CGROUP_CPUACCT : AIRLOCK_CGROUP_CPU;
  int rc = read_count(cg, i, "cpuacct.usage", NULL, &ns);
  if (rc == 0) *out = ns / 1000;
  return rc;
}

/* SIGKILLs every member of one cgroup directory. */
static void kill_dir(const char *dir)
{
  char path[600], buf[8192];
  snprintf(path, sizeof path, "%s/cgroup.kill", dir); /* cgroup v2, Linux 5.14+ */
  if (write_small(path, "1") == 0) return;
  /* v1: one pass over the members (a pid namespace or the process group has
  ** normally taken them already; this catches one that left the group). */
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  if (read_small(path, buf, sizeof buf) <= 0) return;
  for (char *p = buf, *end; *p; p = end) {
    long pid = strtol(p, &end, 10);
    if (end == p) break;
    if (pid > 1) kill((pid_t)pid, SIGKILL);
    while (*end == '\n') end++;
  }
}

void airlock_cgroup_kill(const airlock_cgroup *cg)
{
  for (int i = 0; i < AIRLOCK_CGROUP_MAX; i++)
    if (cg->path[i][0]) kill_dir(cg->path[i]);
}

void airlock_cgroup_remove(airlock_cgroup *cg)
{
  for (int i = 0; i < AIRLOCK_CGROUP_MAX; i++) {
    if (cg->procs_fd[i] >= 0) close(cg->procs_fd[i]);
    cg->procs_fd[i] = -1;
    if (!cg->path[i][0]) continue;
    /* The last members may still be on their way out after the reap (EBUSY). */
    for (int k = 0; k < 200 && rmdir(cg->path[i]) < 0 && errno == EBUSY; k++) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
    cg->path[i][0] = 0;
  }
}
