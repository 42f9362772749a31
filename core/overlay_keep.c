/*
** overlay_keep.c -- a committed change set's contents kept as blobs of the
** ledger's session before it is applied (see the header).
*/
#define _GNU_SOURCE
#include "overlay_keep.h"
#include "overlay_apply.h"
#include "overlay_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directory of path in the workspace (through no link) and its last
** name: the directory's fd, or -1 with errno (ENOENT: not there). */
static int parent_of(int ws_fd, const char *path, const char **base)
{
  char dir[PATH_MAX];
  size_t pl = strlen(path);
  if (pl == 0 || pl >= sizeof dir || path[0] == '/') {
    errno = EINVAL;
    return -1;
  }
  memcpy(dir, path, pl + 1);
  char *slash = strrchr(dir, '/');
  *base = slash ? path + (slash - dir) + 1 : path;
  if (slash)
    *slash = 0;
  else
    dir[0] = 0;
  if (!(*base)[0] || strcmp(*base, ".") == 0 || strcmp(*base, "..") == 0) {
    errno = EINVAL;
    return -1;
  }
  return airlock_overlay_open_beneath(ws_fd, dir, O_RDONLY | O_DIRECTORY);
}

/* Bytes of the regular files in dir (not following links), with those of
** its subdirectories to depth more levels. */
static int dir_bytes(int dir, int depth, uint64_t *total)
{
  int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd < 0 ? NULL : fdopendir(fd);
  if (!d) {
    if (fd >= 0) close(fd);
    return -1;
  }
  struct dirent *de;
  int rc = 0;
  while (rc == 0 && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    if (S_ISREG(st.st_mode)) {
      *total += (uint64_t)st.st_size;
    } else if (S_ISDIR(st.st_mode) && depth > 0) {
      int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0 || dir_bytes(sub, depth - 1, total) < 0) rc = -1;
      if (sub >= 0) close(sub);
    }
  }
  int e = errno;
  closedir(d);
  errno = e;
  return rc;
}

/* A blob written but not yet named: its temporary in blobs/ and its hash. */
typedef struct {
  char tmp[64];
  char hex[65];
} pending_blob;

/* The blobs being kept: each written under a temporary name first; once
** all are, one syncfs makes their contents durable, then each is renamed to
** blobs/ab/<hex> and a second syncfs makes the names durable. A blob is
** never named before its content is on disk. (One fsync per blob and per
** directory cost a git commit's 20 blobs 40 waits for the disk.) */
typedef struct {
  int blobs;
  pending_blob *p;
  size_t n;
} pending_set;

/* One blob: size bytes from src (a file, read to its end, which must come
** at size) or from buf, written under a temporary name in blobs and hashed
** into hex; added to ps. 0 or -errno (EIO: the file's size changed while it
** was kept). */
static int write_blob(pending_set *ps, int src, const char *buf, uint64_t size, char hex[65])
{
  static unsigned serial;
  pending_blob *pb = &ps->p[ps->n];
  int out = -1;
  for (int tries = 0; out < 0 && tries < 100; tries++) {
    snprintf(pb->tmp, sizeof pb->tmp, ".keep.%d.%u", (int)getpid(), ++serial);
    out = openat(ps->blobs, pb->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0 && errno != EEXIST) return -errno;
  }
  if (out < 0) return -EEXIST;
  int rc;
  if (src >= 0) {
    airlock_overlay_sink sink = {.out = out, .hash = 1};
    rc = airlock_overlay_copy(src, size, &sink);
    if (rc == 0) memcpy(hex, sink.hex, sizeof sink.hex);
    if (rc == 0) { /* the file must end where its size said */
      char one;
      ssize_t n = read(src, &one, 1);
      if (n != 0) rc = n < 0 ? -errno : -EIO;
    }
  } else {
    rc = airlock_overlay_write_all(out, buf, (size_t)size);
    if (rc == 0) rc = airlock_overlay_hash(buf, (size_t)size, hex);
  }
  close(out);
  if (rc < 0) {
    unlinkat(ps->blobs, pb->tmp, 0);
    return rc;
  }
  memcpy(pb->hex, hex, sizeof pb->hex);
  ps->n++;
  return 0;
}

/* Every pending blob named by its hash, as the header above says. 0 or
** -errno; the temporaries not named are removed either way. */
static int name_blobs(pending_set *ps, int ok)
{
  int rc = ok && ps->n > 0 && syncfs(ps->blobs) < 0 ? -errno : 0;
  size_t i = 0;
  for (; ok && rc == 0 && i < ps->n; i++) {
    const char *hex = ps->p[i].hex;
    char two[3] = {hex[0], hex[1], 0};
    int sub = -1;
    if (mkdirat(ps->blobs, two, 0700) < 0 && errno != EEXIST) rc = -errno;
    if (rc == 0 && (sub = openat(ps->blobs, two, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
      rc = -errno;
    if (rc == 0 && renameat(ps->blobs, ps->p[i].tmp, sub, hex) < 0) rc = -errno;
    if (sub >= 0) close(sub);
    if (rc < 0) break;
  }
  for (; i < ps->n; i++) unlinkat(ps->blobs, ps->p[i].tmp, 0);
  if (ok && rc == 0 && ps->n > 0 && syncfs(ps->blobs) < 0) rc = -errno;
  return rc;
}

/* What the workspace holds at the item's path now, into it (kind, mode,
** size). 0 or -errno. */
static int look_before(int ws_fd, airlock_overlay_kept *it, struct stat *st)
{
  const char *base;
  it->before_kind = AIRLOCK_BEFORE_NONE;
  it->before_size = 0;
  int wp = parent_of(ws_fd, it->path, &base);
  if (wp < 0) return errno == ENOENT ? 0 : -errno;
  int rc = 0;
  if (fstatat(wp, base, st, AT_SYMLINK_NOFOLLOW) < 0) {
    rc = errno == ENOENT ? 0 : -errno;
  } else {
    it->before_mode = st->st_mode & 07777;
    it->before_kind = S_ISREG(st->st_mode)   ? AIRLOCK_BEFORE_FILE
                      : S_ISLNK(st->st_mode) ? AIRLOCK_BEFORE_LINK
                      : S_ISDIR(st->st_mode) ? AIRLOCK_BEFORE_DIR
                                             : AIRLOCK_BEFORE_OTHER;
    if (it->before_kind == AIRLOCK_BEFORE_FILE || it->before_kind == AIRLOCK_BEFORE_LINK)
      it->before_size = (uint64_t)st->st_size;
  }
  close(wp);
  return rc;
}

/* The pre-image's blob: the file's content or the link's text, as it was
** when looked at (the same inode, the same size). 0 or -errno. */
static int keep_before(int ws_fd, pending_set *ps, airlock_overlay_kept *it, const struct stat *was)
{
  const char *base;
  int wp = parent_of(ws_fd, it->path, &base);
  if (wp < 0) return -errno;
  int rc = 0;
  if (it->before_kind == AIRLOCK_BEFORE_LINK) {
    char target[PATH_MAX];
    ssize_t n = readlinkat(wp, base, target, sizeof target);
    if (n < 0)
      rc = -errno;
    else if ((uint64_t)n != it->before_size)
      rc = -EIO;
    else
      rc = write_blob(ps, -1, target, (uint64_t)n, it->before_sha256);
  } else {
    int fd = openat(wp, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat now;
    if (fd < 0 || fstat(fd, &now) < 0)
      rc = -errno;
    else if (now.st_ino != was->st_ino || now.st_dev != was->st_dev || !S_ISREG(now.st_mode))
      rc = -EIO;
    else
      rc = write_blob(ps, fd, NULL, it->before_size, it->before_sha256);
    if (fd >= 0) close(fd);
  }
  close(wp);
  return rc;
}

int airlock_overlay_keep(int layer_fd, int ws_fd, int session_fd, airlock_overlay_kept *items, size_t n,
                         uint64_t max_bytes, char *err, size_t errlen)
{
  int upper = openat(layer_fd, "upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (upper < 0)
    return airlock_overlay_say(err, errlen, -errno, "overlay: keep: open the writable layer: %s",
                               strerror(errno));
  uint64_t need = 0, held = 0;
  int rc = 0;
  struct stat *was = calloc(n ? n : 1, sizeof *was);
  if (!was) rc = airlock_overlay_say(err, errlen, -ENOMEM, "overlay: keep: out of memory");
  /* First what there is to keep and how many bytes it is, before one is written. */
  for (size_t i = 0; rc == 0 && i < n; i++) {
    airlock_overlay_kept *it = &items[i];
    it->sha256[0] = it->before_sha256[0] = 0;
    it->size = 0;
    it->before_mode = 0;
    int r = look_before(ws_fd, it, &was[i]);
    if (r < 0) {
      rc = airlock_overlay_say(err, errlen, r,
                               "overlay: keep %s: look at it in the workspace (through no link): %s",
                               it->path, strerror(-r));
      break;
    }
    need += it->before_size;
    if (it->want_new) {
      struct stat st;
      int fd = airlock_overlay_open_beneath(upper, it->path, O_PATH);
      int ok = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
      if (fd >= 0) close(fd);
      if (!ok) {
        rc = airlock_overlay_say(err, errlen, -EINVAL,
                                 "overlay: keep %s: not a regular file of the writable layer", it->path);
        break;
      }
      it->size = (uint64_t)st.st_size;
      need += it->size;
    }
  }
  if (rc == 0 && dir_bytes(session_fd, 2, &held) < 0)
    rc = airlock_overlay_say(err, errlen, -errno, "overlay: keep: count the session directory's bytes: %s",
                             strerror(errno));
  if (rc == 0 && max_bytes > 0 && (need > max_bytes || held > max_bytes - need))
    rc = airlock_overlay_say(
        err, errlen, 1,
        "the change set's contents (%llu bytes, with the %llu the session holds) would pass the "
        "session's bound of %llu bytes, the policy's ledger.max_bytes; nothing was applied (raise "
        "ledger.max_bytes, or record in a new session)",
        (unsigned long long)need, (unsigned long long)held, (unsigned long long)max_bytes);
  int blobs = -1;
  if (rc == 0) {
    if (mkdirat(session_fd, "blobs", 0700) < 0 && errno != EEXIST)
      rc = airlock_overlay_say(err, errlen, -errno, "overlay: keep: make the session's blobs/: %s",
                               strerror(errno));
    else if ((blobs = openat(session_fd, "blobs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
      rc = airlock_overlay_say(err, errlen, -errno,
                               "overlay: keep: open the session's blobs/ (not a link): %s", strerror(errno));
  }
  pending_set ps = {.blobs = blobs, .p = rc == 0 ? calloc(2 * n + 1, sizeof *ps.p) : NULL};
  if (rc == 0 && !ps.p) rc = airlock_overlay_say(err, errlen, -ENOMEM, "overlay: keep: out of memory");
  for (size_t i = 0; rc == 0 && i < n; i++) {
    airlock_overlay_kept *it = &items[i];
    int r = 0;
    if (it->before_kind == AIRLOCK_BEFORE_FILE || it->before_kind == AIRLOCK_BEFORE_LINK)
      r = keep_before(ws_fd, &ps, it, &was[i]);
    if (r < 0) {
      rc = airlock_overlay_say(err, errlen, r, "overlay: keep %s: its previous content: %s%s", it->path,
                               strerror(-r), r == -EIO ? " (it changed while it was kept)" : "");
      break;
    }
    if (it->want_new) {
      int fd = airlock_overlay_open_beneath(upper, it->path, O_RDONLY);
      r = fd < 0 ? -errno : write_blob(&ps, fd, NULL, it->size, it->sha256);
      if (fd >= 0) close(fd);
      if (r < 0)
        rc = airlock_overlay_say(err, errlen, r, "overlay: keep %s: its new content: %s", it->path,
                                 strerror(-r));
    }
  }
  if (ps.p) {
    int r = name_blobs(&ps, rc == 0);
    if (rc == 0 && r < 0)
      rc = airlock_overlay_say(err, errlen, r, "overlay: keep: sync and name the session's blobs: %s",
                               strerror(-r));
    free(ps.p);
  }
  if (blobs >= 0) close(blobs);
  free(was);
  close(upper);
  return rc;
}
