/*
** spawn_protect.c -- tool.protect for the spawner: see spawn_protect.h.
**
** Why placeholders: a mount needs a mount point, and Landlock cannot deny a
** name inside a tree it lets the program write. So a protected path that is
** missing is made, empty, by the trusted parent before the child starts, and
** covered read-only like any other; after the run it is removed if it is
** still the empty inode the parent made and no other run holds it.
**
** Why the directories above are bound too: a protected path can be neither
** renamed nor removed while it is a mount point, but the directory holding it
** could be (rename(".git", "g") carries the mount along), and a fresh ".git"
** put in its place. A bind of each such directory onto itself makes it a mount
** point as well; its contents stay writable.
*/
#define _GNU_SOURCE
#include "spawn_protect.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <linux/openat2.h>
#include <unistd.h>

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#define MOUNT_ATTR_NODEV  0x00000004
struct mount_attr {
  unsigned long long attr_set, attr_clr, propagation, userns_fd;
};
#endif

static void close_fd(int *fd)
{
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static int refuse(char *err, size_t errlen, int e, const char *fmt, const char *path)
{
  snprintf(err, errlen, fmt, path);
  return -e;
}

/* A plain file or directory that may be opened (and locked) without side
** effects; other kinds are covered, never opened. */
static int openable(mode_t m)
{
  return S_ISREG(m) || S_ISDIR(m);
}

static int marked(int fd)
{
  char v[4];
  return fgetxattr(fd, AIRLOCK_PROTECT_MARK, v, sizeof v) > 0;
}

static int add_path(struct airlock_protect *h, const char *rel, size_t len, char *err, size_t errlen)
{
  if (h->n == AIRLOCK_PROTECT_MAX_HELD)
    return refuse(err, errlen, E2BIG, "tool.protect: more than 256 paths and the parents made for them (%s)",
                  rel);
  struct airlock_protect_path *e = &h->path[h->n];
  memset(e, 0, sizeof *e);
  e->fd = e->dirfd = -1;
  if (!(e->rel = strndup(rel, len))) return -ENOMEM;
  h->n++;
  return 0;
}

/* Makes name in dirfd: an empty, marked, share-locked file or directory,
** under a temporary name first so it appears at name whole (RENAME_NOREPLACE:
** never over something that appeared meanwhile, -EEXIST then). Returns the
** locked O_RDONLY descriptor, or -errno. */
static int make_placeholder(int dirfd, const char *name, int dir)
{
  unsigned char rnd[8];
  char tmp[64];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) return -errno;
  snprintf(tmp, sizeof tmp, ".airlock-placeholder-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
           rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
  int fd;
  if (dir) {
    if (mkdirat(dirfd, tmp, 0755) < 0) return -errno;
    fd = openat(dirfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  } else {
    fd = openat(dirfd, tmp, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  }
  int e = errno;
  if (fd >= 0 && fsetxattr(fd, AIRLOCK_PROTECT_MARK, "1", 1, 0) < 0 && errno != ENOTSUP) {
    e = errno; /* no user xattrs here: unmarked, so a run after a crash keeps it as the user's */
    close_fd(&fd);
  }
  if (fd >= 0 && flock(fd, LOCK_SH) < 0) {
    e = errno;
    close_fd(&fd);
  }
  if (fd >= 0 && renameat2(dirfd, tmp, dirfd, name, RENAME_NOREPLACE) < 0) {
    e = errno;
    close_fd(&fd);
  }
  if (fd < 0) {
    unlinkat(dirfd, tmp, dir ? AT_REMOVEDIR : 0);
    return -e;
  }
  return fd;
}

/* One path (rel, NUL-terminated, no trailing slash): walks it from the
** workspace a component at a time, never through a symbolic link; makes what
** is missing; holds the last component (and any placeholder on the way). */
static int hold_one(struct airlock_protect *h, int wsfd, char *rel, int want_dir, char *err, size_t errlen)
{
  int cur = fcntl(wsfd, F_DUPFD_CLOEXEC, 0), rc = 0;
  if (cur < 0) return -errno;
  size_t len = strlen(rel);
  for (size_t i = 0; i < len && rc == 0;) {
    size_t j = i;
    while (j < len && rel[j] != '/') j++;
    size_t n = j - i;
    if (n == 0) {
      i = j + 1;
      continue;
    }
    int last = j == len;
    char name[256];
    if (n > 255 || (n == 1 && rel[i] == '.') || (n == 2 && rel[i] == '.' && rel[i + 1] == '.')) {
      rc = refuse(err, errlen, EINVAL, "tool.protect: %s is not a plain path beneath the workspace", rel);
      break;
    }
    memcpy(name, rel + i, n);
    name[n] = 0;
    rel[j] = 0; /* rel is now the prefix up to this component */
    int fd = -1, made = 0;
    struct stat st;
    for (int tries = 0; tries < 4 && fd < 0; tries++) {
      fd = openat(cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0 || errno != ENOENT) break;
      if (h->n == AIRLOCK_PROTECT_MAX_HELD) {
        errno = E2BIG;
        break;
      } /* nothing made that cannot be held */
      fd = make_placeholder(cur, name, last ? want_dir : 1);
      if (fd >= 0)
        made = 1;
      else if (fd != -EEXIST) {
        errno = -fd;
        break;
      }
    }
    if (fd < 0) {
      int e = errno;
      snprintf(err, errlen, "tool.protect: %s cannot be held or made in the workspace: %s", rel, strerror(e));
      rc = -e;
    } else if (fstat(fd, &st) < 0) {
      rc = -errno;
    } else if (S_ISLNK(st.st_mode)) {
      rc = refuse(err, errlen, ELOOP,
                  "tool.protect: %s is a symbolic link; a protected path (and each "
                  "directory above it) must be the thing itself",
                  rel);
    } else if (!last && !S_ISDIR(st.st_mode)) {
      /* Nothing can be made beneath a file: binding the file onto itself (below)
      ** keeps it from being replaced by a directory during the run. */
      rc = add_path(h, rel, strlen(rel), err, errlen);
      if (rc == 0) {
        struct airlock_protect_path *e = &h->path[h->n - 1];
        e->dev = st.st_dev;
        e->ino = st.st_ino;
        e->masked = 2; /* bound onto itself (plan_binds), not made read-only */
      }
      rel[j] = j < len ? '/' : 0;
      close_fd(&fd);
      break;
    } else {
      int lfd = fd;
      if (!made && openable(st.st_mode)) {
        /* Reopened to lock (and read the mark): the same inode, or refused. */
        struct stat st2;
        lfd = openat(cur, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (lfd < 0 || fstat(lfd, &st2) < 0 || st2.st_ino != st.st_ino || st2.st_dev != st.st_dev) {
          rc = refuse(err, errlen, ESTALE, "tool.protect: %s changed while it was looked at; try again", rel);
          if (lfd >= 0) close(lfd);
          lfd = -1;
        } else if (flock(lfd, LOCK_SH) < 0) {
          rc = -errno;
        }
      }
      int adopt = rc == 0 && !made && lfd != fd && marked(lfd) && (S_ISDIR(st.st_mode) || st.st_size == 0);
      if (rc == 0 && last && S_ISREG(st.st_mode) && st.st_nlink > 1 && !made) {
        snprintf(err, errlen,
                 "tool.protect: %s has %lu names (hard links): through another it could be changed; "
                 "remove the others",
                 rel, (unsigned long)st.st_nlink);
        rc = -EMLINK;
      }
      if (rc == 0 && (last || made || adopt)) {
        rc = add_path(h, rel, strlen(rel), err, errlen);
        if (rc == 0) {
          struct airlock_protect_path *e = &h->path[h->n - 1];
          e->dev = st.st_dev;
          e->ino = st.st_ino;
          e->dir = S_ISDIR(st.st_mode);
          e->masked = last;
          e->placeholder = made || adopt;
          if (lfd != fd || made) {
            e->fd = lfd;
            lfd = -1;
          }
          if (e->placeholder && (e->dirfd = fcntl(cur, F_DUPFD_CLOEXEC, 0)) < 0) rc = -errno;
        }
      }
      if (lfd >= 0 && lfd != fd) close(lfd); /* not kept: an intermediate directory, or a failure */
    }
    rel[j] = j < len ? '/' : 0;
    close(cur);
    cur = fd;
    if (made) { /* fd is the placeholder's locked descriptor, now owned by its entry */
      cur = fcntl(fd, F_DUPFD_CLOEXEC, 0);
      if (cur < 0 && rc == 0) rc = -errno;
    }
    i = j + 1;
  }
  if (cur >= 0) close(cur);
  return rc;
}

static size_t depth(const char *rel)
{
  size_t d = 0;
  for (; *rel; rel++) d += *rel == '/';
  return d;
}

/* The directories between the workspace and each protected path (and a file
** a path would lie beneath), each once, shallowest first. */
static int plan_binds(struct airlock_protect *h, char *err, size_t errlen)
{
  for (int k = 0; k < h->n; k++) {
    const struct airlock_protect_path *e = &h->path[k];
    if (!e->masked) continue;
    size_t len = strlen(e->rel);
    for (size_t i = 1; i <= len; i++) {
      if (!(i == len ? e->masked == 2 : e->rel[i] == '/')) continue;
      int seen = 0;
      for (int b = 0; b < h->nbinds && !seen; b++)
        seen = strlen(h->binds[b]) == i && !strncmp(h->binds[b], e->rel, i);
      if (seen) continue;
      if (h->nbinds == AIRLOCK_PROTECT_MAX_BINDS)
        return refuse(err, errlen, E2BIG,
                      "tool.protect: more than 256 directories above protected paths (%s)", e->rel);
      if (!(h->binds[h->nbinds] = strndup(e->rel, i))) return -ENOMEM;
      h->nbinds++;
    }
  }
  for (int a = 1; a < h->nbinds; a++) /* insertion sort by depth, stable */
    for (int b = a; b > 0 && depth(h->binds[b - 1]) > depth(h->binds[b]); b--) {
      char *t = h->binds[b];
      h->binds[b] = h->binds[b - 1];
      h->binds[b - 1] = t;
    }
  return 0;
}

int airlock_protect_hold(const char *workdir, const char *const *paths, struct airlock_protect **out,
                         char *err, size_t errlen)
{
  *out = NULL;
  if (!paths || !paths[0]) return 0;
  size_t wl = strlen(workdir);
  struct airlock_protect *h = calloc(1, sizeof *h);
  if (!h) return -ENOMEM;
  int wsfd = open(workdir, O_PATH | O_DIRECTORY | O_CLOEXEC), rc = 0;
  if (wsfd < 0) rc = refuse(err, errlen, errno, "tool.protect: the workspace %s cannot be opened", workdir);
  for (size_t i = 0; rc == 0 && paths[i]; i++) {
    if (i == AIRLOCK_PROTECT_MAX) {
      rc = refuse(err, errlen, E2BIG, "tool.protect: more than 128 paths (%s)", paths[i]);
      break;
    }
    char rel[4096];
    size_t len = strlen(paths[i]);
    if (len <= wl + 1 || len - wl - 1 >= sizeof rel || strncmp(paths[i], workdir, wl) != 0 ||
        paths[i][wl] != '/') {
      rc = refuse(err, errlen, EINVAL, "tool.protect: %s is not beneath the workspace", paths[i]);
      break;
    }
    memcpy(rel, paths[i] + wl + 1, len - wl);
    len -= wl + 1;
    int want_dir = rel[len - 1] == '/';
    while (len > 0 && rel[len - 1] == '/') rel[--len] = 0;
    int dup = 0;
    for (int k = 0; k < h->n && !dup; k++) dup = h->path[k].masked == 1 && !strcmp(h->path[k].rel, rel);
    if (!dup && len > 0) rc = hold_one(h, wsfd, rel, want_dir, err, errlen);
  }
  if (wsfd >= 0) close(wsfd);
  if (rc == 0) rc = plan_binds(h, err, errlen);
  if (rc < 0) {
    airlock_protect_release(h, 1);
    return rc;
  }
  *out = h;
  return 0;
}

/* Opens rel beneath wsfd as O_PATH, through no symbolic link. */
__attribute__((no_sanitize("address", "undefined"))) static int open_in(int wsfd, const char *rel)
{
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return (int)syscall(SYS_openat2, wsfd, rel, &how, sizeof how);
}

/* src's tree, cloned (with what is mounted beneath), set to attr when attr is
** not 0, and mounted onto dst (src itself, or its place in an overlay). 0 or
** -1 (errno). */
__attribute__((no_sanitize("address", "undefined"))) static int bind_onto(int src, int dst,
                                                                          unsigned long long attr)
{
  int t = (int)syscall(SYS_open_tree, src, "",
                       OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
  if (t < 0) return -1;
  struct mount_attr a;
  memset(&a, 0, sizeof a);
  a.attr_set = attr;
  int rc =
      (attr && syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) < 0) ||
              syscall(SYS_move_mount, t, "", dst, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0
          ? -1
          : 0;
  int e = errno;
  syscall(SYS_close, t);
  errno = e;
  return rc;
}

__attribute__((no_sanitize("address", "undefined"))) int
airlock_protect_mask(const struct airlock_protect *h, int wsfd, int realfd, const char **step)
{
  if (!h) return 0;
  if (realfd < 0) realfd = wsfd;
  for (int b = 0; b < h->nbinds; b++) {
    int fd = open_in(wsfd, h->binds[b]);
    if (fd < 0) {
      *step = "tool.protect: open a directory above a protected path (through no symbolic link)";
      return -errno;
    }
    int rc = bind_onto(fd, fd, 0);
    int e = errno;
    syscall(SYS_close, fd);
    if (rc < 0) {
      *step = "tool.protect: bind a directory above a protected path onto itself";
      return -e;
    }
  }
  for (int k = 0; k < h->n; k++) {
    const struct airlock_protect_path *p = &h->path[k];
    if (p->masked != 1) continue;
    int fd = open_in(realfd, p->rel);
    int dst = fd < 0 || realfd == wsfd ? fd : open_in(wsfd, p->rel);
    if (fd < 0 || dst < 0) {
      if (fd >= 0) syscall(SYS_close, fd);
      *step = "tool.protect: open a protected path (through no symbolic link)";
      return -errno;
    }
    struct stat st;
    if (syscall(SYS_fstat, fd, &st) < 0 || st.st_dev != p->dev || st.st_ino != p->ino) {
      syscall(SYS_close, fd);
      if (dst != fd) syscall(SYS_close, dst);
      *step = "tool.protect: a protected path changed between the parent's look and the mount; try again";
      return -ESTALE;
    }
    int rc = bind_onto(fd, dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    int e = errno;
    syscall(SYS_close, fd);
    if (dst != fd) syscall(SYS_close, dst);
    if (rc < 0) {
      *step = "tool.protect: make a protected path read-only (open_tree, mount_setattr, move_mount)";
      return -e;
    }
  }
  return 0;
}

/* The last component of rel. */
static const char *base_name(const char *rel)
{
  const char *s = strrchr(rel, '/');
  return s ? s + 1 : rel;
}

static void remove_placeholder(const struct airlock_protect_path *e)
{
  struct stat st, at;
  if (flock(e->fd, LOCK_EX | LOCK_NB) < 0) return; /* another run holds it: it stays */
  if (fstat(e->fd, &st) < 0 || st.st_ino != e->ino || st.st_dev != e->dev) return;
  if (!e->dir && st.st_size != 0) return; /* written to (by whom? not this run): kept */
  const char *name = base_name(e->rel);
  if (fstatat(e->dirfd, name, &at, AT_SYMLINK_NOFOLLOW) < 0 || at.st_ino != e->ino || at.st_dev != e->dev)
    return;
  unlinkat(e->dirfd, name, e->dir ? AT_REMOVEDIR : 0); /* a directory no longer empty stays (ENOTEMPTY) */
}

void airlock_protect_release(struct airlock_protect *h, int child_gone)
{
  if (!h) return;
  for (int k = h->n - 1; k >= 0; k--) {
    struct airlock_protect_path *e = &h->path[k];
    if (e->placeholder && child_gone && e->fd >= 0 && e->dirfd >= 0) remove_placeholder(e);
    close_fd(&e->fd);
    close_fd(&e->dirfd);
    free(e->rel);
  }
  for (int b = 0; b < h->nbinds; b++) free(h->binds[b]);
  free(h);
}

int airlock_protect_child_gone(int pidfd)
{
  struct pollfd p = {.fd = pidfd, .events = POLLIN};
  return pidfd >= 0 && poll(&p, 1, 0) == 1;
}
