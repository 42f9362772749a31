/*
** broker_observe.c -- learn mode's listener half: a confined program made an
** observed file system call (confine_observe.c); its path is read from the
** program's memory, made absolute, looked up in the program's own view, and
** recorded (res.observed); then the call continues, executed by the kernel as
** if no filter had stopped it.
**
** The record is an observation, never a decision: the program's view and its
** Landlock rules still decide what the call may reach, so the time between
** reading the path and the call's own reading of it (a thread may change the
** bytes: the TOCTOU that makes SECCOMP_USER_NOTIF_FLAG_CONTINUE unfit for
** enforcing) can only make a record wrong, never let the call do more.
*/
#define _GNU_SOURCE
#include "broker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>

/* The NUL-terminated string at addr in the caller's memory (memfd: its
** /proc/PID/mem) into buf. -> its length, or -1 when unreadable or longer than
** len - 1. Read in pieces that never cross a 256-byte boundary, so none
** crosses into a page that is not mapped. */
static int read_string(int memfd, uint64_t addr, char *buf, size_t len)
{
  size_t got = 0;
  while (got < len) {
    size_t piece = 256 - (size_t)((addr + got) & 255);
    if (piece > len - got) piece = len - got;
    ssize_t n = pread(memfd, buf + got, piece, (off_t)(addr + got));
    if (n <= 0) return -1;
    char *z = memchr(buf + got, '\0', (size_t)n);
    if (z) return (int)(z - buf);
    got += (size_t)n;
  }
  return -1; /* SECURITY: longer than PATH_MAX, which no call accepts: not recorded */
}

/* The directory a relative path of pid is relative to (dirfd, or its working
** directory for AT_FDCWD), as the program sees it. 0 or -1. */
static int base_dir(pid_t pid, int dirfd, char *out, size_t len)
{
  char link[64];
  if (dirfd == AT_FDCWD)
    snprintf(link, sizeof link, "/proc/%d/cwd", (int)pid);
  else
    snprintf(link, sizeof link, "/proc/%d/fd/%d", (int)pid, dirfd);
  ssize_t n = readlink(link, out, len - 1);
  if (n <= 0 || out[0] != '/') return -1; /* a pipe, a socket, gone */
  out[n] = '\0';
  return 0;
}

/* '+' when path exists in pid's view (its root, symbolic links resolved
** inside it), '-' when it does not, '?' when that cannot be told. */
static char in_view(pid_t pid, const char *path)
{
  char root[64];
  snprintf(root, sizeof root, "/proc/%d/root", (int)pid);
  int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) return '?';
  struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT};
  int fd = (int)syscall(SYS_openat2, rfd, path[1] ? path + 1 : ".", &how, sizeof how);
  int e = errno;
  close(rfd);
  if (fd >= 0) {
    close(fd);
    return '+';
  }
  return e == ENOENT || e == ENOTDIR ? '-' : '?';
}

static uint32_t hash(const char *s, size_t n)
{
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
  return h;
}

/* Appends "KV PATH\n" unless one of the latest records was the same. */
static void record(airlock_run *r, char kind, char view, const char *path)
{
  for (const char *p = path; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) return; /* a line per record: such a name is left out */
  char line[PATH_MAX + 8];
  int n = snprintf(line, sizeof line, "%c%c %s\n", kind, view, path);
  if (n < 0 || (size_t)n >= sizeof line) return;
  uint32_t h = hash(line, (size_t)n);
  for (unsigned i = 0; i < sizeof r->observed_recent / sizeof *r->observed_recent; i++)
    if (r->observed_recent[i] == h) return;
  r->observed_recent[r->observed_at++ % (sizeof r->observed_recent / sizeof *r->observed_recent)] = h;
  if (r->observed_len + (size_t)n > r->observed_cap) {
    size_t cap = r->observed_cap ? r->observed_cap * 2 : 16384;
    while (cap < r->observed_len + (size_t)n) cap *= 2;
    if (cap > AIRLOCK_OBSERVED_MAX) cap = AIRLOCK_OBSERVED_MAX;
    if (r->observed_len + (size_t)n > cap) {
      r->res.observed_truncated = 1;
      return;
    }
    char *grown = realloc(r->observed, cap);
    if (grown == NULL) {
      r->res.observed_truncated = 1;
      return;
    }
    r->observed = grown;
    r->observed_cap = cap;
  }
  memcpy(r->observed + r->observed_len, line, (size_t)n);
  r->observed_len += (size_t)n;
  r->res.observed = r->observed;
  r->res.observed_len = r->observed_len;
}

/* One path argument of the call: read, made absolute, looked up, recorded. */
static void observe_path(airlock_run *r, const struct seccomp_notif *n, int memfd, char kind, int path_arg,
                         int dirfd_arg)
{
  char path[PATH_MAX], full[PATH_MAX * 2 + 2];
  int len = read_string(memfd, n->data.args[path_arg], path, sizeof path);
  /* "" with AT_EMPTY_PATH: an execveat of the fd itself (fexecve), recorded
  ** as the file it names; any other "" (fstat of the dirfd) is left out. */
  int fd_itself = len == 0 && n->data.nr == SYS_execveat && (n->data.args[4] & AT_EMPTY_PATH);
  if (len < 0 || (len == 0 && !fd_itself)) return;
  if (fd_itself) {
    if (base_dir((pid_t)n->pid, (int)(uint32_t)n->data.args[dirfd_arg], full, PATH_MAX) != 0) return;
  } else if (path[0] == '/') {
    snprintf(full, sizeof full, "%s", path);
  } else {
    char base[PATH_MAX];
    int dirfd = dirfd_arg >= 0 ? (int)(uint32_t)n->data.args[dirfd_arg] : AT_FDCWD;
    if (base_dir((pid_t)n->pid, dirfd, base, sizeof base) != 0) return;
    snprintf(full, sizeof full, "%s%s%s", base, base[1] ? "/" : "", path);
  }
  if (strlen(full) >= PATH_MAX) return;
  /* SECURITY: the pid is read through only while the notification is still
  ** pending (checked after), so a reused pid is never recorded as the caller. */
  char view = in_view((pid_t)n->pid, full);
  if (ioctl(r->c.notify, SECCOMP_IOCTL_NOTIF_ID_VALID, &n->id) != 0) return;
  record(r, kind, view, full);
}

void broker_observe(airlock_run *r, const struct seccomp_notif *n)
{
  const airlock_observed_call *c = airlock_observed_call_find(n->data.nr);
  char mem[64];
  snprintf(mem, sizeof mem, "/proc/%d/mem", (int)n->pid);
  int memfd = c ? open(mem, O_RDONLY | O_CLOEXEC) : -1;
  if (memfd >= 0 && ioctl(r->c.notify, SECCOMP_IOCTL_NOTIF_ID_VALID, &n->id) == 0) {
    char kind = c->kind;
    if (c->flags_arg >= 0) {
      uint64_t fl = n->data.args[(int)c->flags_arg];
      if ((fl & O_ACCMODE) != O_RDONLY || (fl & (O_CREAT | O_TRUNC))) kind = 'w';
    }
    observe_path(r, n, memfd, kind, c->path_arg, c->dirfd_arg);
    if (c->path2_arg >= 0) observe_path(r, n, memfd, kind, c->path2_arg, c->dirfd2_arg);
  }
  if (memfd >= 0) close(memfd);
  /* Executed now as the kernel would without the filter (ENOENT: the caller
  ** died meanwhile; nothing to answer). */
  struct seccomp_notif_resp resp = {
      .id = n->id, .val = 0, .error = 0, .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
  (void)ioctl(r->c.notify, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}
