/*
** overlay_changes.c -- an overlaid workspace's change set, read from its
** writable layer without following any link the program made (see the
** header). overlayfs marks (userxattr): a whiteout is a 0/0 character
** device, an opaque directory has user.overlay.opaque = "y". Without
** redirect_dir a renamed file is a deletion and a creation, a renamed
** directory a deletion and a new directory copied up whole.
*/
#define _GNU_SOURCE
#include "overlay_changes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

static const char *const kind_names[] = {"created", "modified", "deleted", "symlink", "dir", "special"};

const char *airlock_overlay_kind_name(airlock_overlay_kind k)
{
  return (unsigned)k < sizeof kind_names / sizeof *kind_names ? kind_names[k] : "unknown";
}

struct walk {
  int ws_fd;
  int (*fn)(const airlock_overlay_change *, void *);
  void *ud;
  char *err;
  size_t errlen;
  uint64_t bytes, max; /* the files' lengths so far, and the layer's size */
  char path[PATH_MAX];
};

__attribute__((format(printf, 3, 4))) static int fail(struct walk *w, int e, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->err, w->errlen, fmt, ap);
  va_end(ap);
  return -e;
}

/* The workspace's own file at path, looked at beneath ws_fd through no link:
** 1 with *st, 0 when there is none, or -errno. */
static int real_stat(const struct walk *w, struct stat *st)
{
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  int fd = (int)syscall(SYS_openat2, w->ws_fd, w->path, &how, sizeof how);
  if (fd < 0) return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 0 : -errno;
  int rc = fstat(fd, st) < 0 ? -errno : 1;
  close(fd);
  return rc;
}

static int walk_dir(struct walk *w, int dirfd, size_t plen, int depth);

/* One entry of the directory at dirfd, named name (the path built in w). */
static int one_entry(struct walk *w, int dirfd, const char *name, size_t plen, int depth)
{
  struct stat st, real;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return fail(w, errno, "overlay: stat %s in the writable layer: %s", w->path, strerror(errno));
  int have = real_stat(w, &real);
  if (have < 0) return fail(w, -have, "overlay: stat %s in the workspace: %s", w->path, strerror(-have));
  airlock_overlay_change c = {.path = w->path, .mode = st.st_mode, .nlink = (unsigned long)st.st_nlink};
  char target[PATH_MAX];
  int opened = -1;
  if (S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0) {
    c.kind = AIRLOCK_CHANGE_DELETED;
    if (!have) return 0; /* a whiteout of nothing: the workspace never had it */
  } else if (S_ISREG(st.st_mode)) {
    c.kind = have ? AIRLOCK_CHANGE_MODIFIED : AIRLOCK_CHANGE_CREATED;
    c.size = (uint64_t)st.st_size;
    /* A sparse file is read, hashed and applied at its whole length: the
    ** lengths are bounded by the layer, or the disk would take more than it. */
    w->bytes += c.size;
    if (w->bytes > w->max)
      return fail(w, EFBIG,
                  "overlay: the change set's files are longer than the writable layer's %llu bytes at %s (a "
                  "sparse file counts its whole length): it is not read, and nothing of it is applied",
                  (unsigned long long)w->max, w->path);
    c.replaces = have && !S_ISREG(real.st_mode);
  } else if (S_ISLNK(st.st_mode)) {
    ssize_t n = readlinkat(dirfd, name, target, sizeof target - 1);
    if (n < 0)
      return fail(w, errno, "overlay: readlink %s in the writable layer: %s", w->path, strerror(errno));
    target[n] = 0;
    c.kind = AIRLOCK_CHANGE_SYMLINK;
    c.target = target;
    c.size = (uint64_t)n;
    c.replaces = have && !S_ISLNK(real.st_mode);
  } else if (S_ISDIR(st.st_mode)) {
    opened = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (opened < 0)
      return fail(w, errno, "overlay: open %s in the writable layer: %s", w->path, strerror(errno));
    char v[4];
    ssize_t n = fgetxattr(opened, "user.overlay.opaque", v, sizeof v);
    c.opaque = n == 1 && v[0] == 'y';
    c.kind = AIRLOCK_CHANGE_DIR;
    c.replaces = have && !S_ISDIR(real.st_mode);
  } else {
    c.kind = AIRLOCK_CHANGE_SPECIAL;
    c.replaces = have;
  }
  /* A directory copied up only to hold a change below (it was there, is
  ** still one, not opaque, the same mode) is no change of its own. */
  int own = !(c.kind == AIRLOCK_CHANGE_DIR && have && !c.replaces && !c.opaque &&
              (real.st_mode & 07777) == (st.st_mode & 07777));
  int rc = own ? w->fn(&c, w->ud) : 0;
  if (rc == 0 && opened >= 0) {
    if (depth >= AIRLOCK_OVERLAY_DEPTH)
      rc = fail(w, ELOOP, "overlay: %s is more than %d directories deep", w->path, AIRLOCK_OVERLAY_DEPTH);
    else
      rc = walk_dir(w, opened, plen, depth + 1); /* closes opened */
    opened = -1;
  }
  if (opened >= 0) close(opened);
  return rc;
}

/* Each entry of the directory at fd (owned: closed here), the path so far
** plen bytes long in w. */
static int walk_dir(struct walk *w, int fd, size_t plen, int depth)
{
  DIR *d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return fail(w, e, "overlay: read the writable layer at %s: %s", plen ? w->path : ".", strerror(e));
  }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (errno = 0, de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    size_t nl = strlen(de->d_name);
    if (plen + (plen ? 1 : 0) + nl + 1 > sizeof w->path) {
      rc = fail(w, ENAMETOOLONG, "overlay: a path in the writable layer is over %d bytes", PATH_MAX);
      break;
    }
    size_t at = plen;
    if (plen) w->path[at++] = '/';
    memcpy(w->path + at, de->d_name, nl + 1);
    rc = one_entry(w, dirfd(d), de->d_name, at + nl, depth);
    w->path[plen] = 0;
  }
  if (rc == 0 && errno) rc = fail(w, errno, "overlay: read the writable layer: %s", strerror(errno));
  closedir(d);
  return rc;
}

int airlock_overlay_changes(int layer_fd, int ws_fd, int (*fn)(const airlock_overlay_change *, void *),
                            void *ud, char *err, size_t errlen)
{
  struct walk w = {.ws_fd = ws_fd, .fn = fn, .ud = ud, .err = err, .errlen = errlen};
  w.path[0] = 0;
  struct statfs sf;
  if (fstatfs(layer_fd, &sf) < 0)
    return fail(&w, errno, "overlay: statfs the writable layer: %s", strerror(errno));
  w.max = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize;
  int up = openat(layer_fd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (up < 0) return fail(&w, errno, "overlay: open the writable layer (upper/): %s", strerror(errno));
  return walk_dir(&w, up, 0, 0);
}
