/*
** overlay_restore.c -- a committed change set undone or done again from a
** session's blobs (see the header).
*/
#define _GNU_SOURCE
#include "overlay_restore.h"

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

#define RESTORE_DEPTH 128

/* path's directory (made in base when make, each part 0700) and last name:
** the directory's fd or -1 with errno (EINVAL: not a plain relative path). */
static int parent_of(int base, const char *path, const char **name, int make)
{
  char dir[PATH_MAX];
  size_t pl = strlen(path);
  if (pl == 0 || pl >= sizeof dir || path[0] == '/') {
    errno = EINVAL;
    return -1;
  }
  memcpy(dir, path, pl + 1);
  for (char *p = dir, *e; p; p = e ? e + 1 : NULL) { /* no empty, "." or ".." part */
    e = strchr(p, '/');
    size_t k = e ? (size_t)(e - p) : strlen(p);
    if (k == 0 || (k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.')) {
      errno = EINVAL;
      return -1;
    }
  }
  char *slash = strrchr(dir, '/');
  *name = slash ? path + (slash - dir) + 1 : path;
  if (!slash) return airlock_overlay_open_beneath(base, "", O_RDONLY | O_DIRECTORY);
  *slash = 0;
  if (make) {
    for (char *p = strchr(dir, '/');; p = strchr(p + 1, '/')) {
      if (p) *p = 0;
      if (mkdirat(base, dir, 0700) < 0 && errno != EEXIST) return -1;
      if (!p) break;
      *p = '/';
    }
  }
  return airlock_overlay_open_beneath(base, dir, O_RDONLY | O_DIRECTORY);
}

/* Everything read from fd (to its end), hashed into hex, and written to out
** (-1: only hashed) or kept in buf (up to cap bytes; *len set). 0 or -errno
** (EFBIG: more than cap). */
static int hash_copy(int fd, int out, char *buf, size_t cap, size_t *len, char hex[65])
{
  size_t kept = 0;
  airlock_overlay_sink sink = {.out = out, .hash = 1, .keep = buf, .cap = cap, .kept = &kept};
  int rc = airlock_overlay_copy(fd, AIRLOCK_OVERLAY_TO_END, &sink);
  if (rc == 0) memcpy(hex, sink.hex, sizeof sink.hex);
  if (len) *len = kept;
  return rc;
}

int airlock_overlay_look(int ws_fd, const char *path, int *kind, char hex[65], unsigned *mode)
{
  const char *name;
  *kind = 0;
  hex[0] = 0;
  *mode = 0;
  int dir = parent_of(ws_fd, path, &name, 0);
  if (dir < 0) return errno == ENOENT ? 0 : -errno;
  struct stat st;
  int rc = 0;
  if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    rc = errno == ENOENT ? 0 : -errno;
  } else if (S_ISREG(st.st_mode)) {
    *kind = 1;
    *mode = st.st_mode & 07777;
    int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    rc = fd < 0 ? -errno : hash_copy(fd, -1, NULL, 0, NULL, hex);
    if (fd >= 0) close(fd);
  } else if (S_ISLNK(st.st_mode)) {
    *kind = 2;
    char text[PATH_MAX];
    ssize_t n = readlinkat(dir, name, text, sizeof text);
    rc = n < 0 ? -errno : airlock_overlay_hash(text, (size_t)n, hex);
  } else {
    *kind = S_ISDIR(st.st_mode) ? 4 : 3;
    *mode = st.st_mode & 07777;
  }
  close(dir);
  return rc;
}

/* Removes dir's contents (fd owned), depth bounded. */
static void remove_tree(int fd, int depth)
{
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (unlinkat(dirfd(d), de->d_name, 0) == 0 || depth >= RESTORE_DEPTH) continue;
    int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub >= 0) remove_tree(sub, depth + 1);
    unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
  }
  closedir(d);
}

/* One item's blob, checked, into the staging directory's upper/. 0, 1
** (refused: the reason in err) or -errno. */
static int stage_blob(int blobs, int upper, const airlock_overlay_restore_item *it, char *err, size_t errlen)
{
  if (it->kind == AIRLOCK_RESTORE_LINK && it->text) { /* the journal's own text: no blob */
    const char *name;
    int dir = parent_of(upper, it->path, &name, 1);
    int rc = dir < 0 || symlinkat(it->text, dir, name) < 0 ? -errno : 0;
    if (dir >= 0) close(dir);
    if (rc < 0)
      return airlock_overlay_say(err, errlen, rc, "ledger: %s: stage the link: %s", it->path, strerror(-rc));
    return 0;
  }
  char two[3] = {it->sha256[0], it->sha256[1], 0}, where[80];
  snprintf(where, sizeof where, "%s/%s", two, it->sha256);
  int src = airlock_overlay_open_beneath(blobs, where, O_RDONLY);
  struct stat st;
  if (src < 0 || fstat(src, &st) < 0 || !S_ISREG(st.st_mode)) {
    if (src >= 0) close(src);
    return airlock_overlay_say(err, errlen, 1,
                               "ledger: %s: its blob blobs/%s is missing or not a regular file (%s)",
                               it->path, where, src < 0 ? strerror(errno) : "not a file");
  }
  const char *name;
  int dir = parent_of(upper, it->path, &name, 1);
  if (dir < 0) {
    close(src);
    return airlock_overlay_say(err, errlen, -errno, "ledger: %s: stage it: %s", it->path, strerror(errno));
  }
  char hex[65] = "";
  int rc;
  if (it->kind == AIRLOCK_RESTORE_LINK) {
    char text[PATH_MAX];
    size_t len = 0;
    rc = hash_copy(src, -1, text, sizeof text - 1, &len, hex);
    if (rc == 0 && strcmp(hex, it->sha256) == 0) {
      text[len] = 0;
      if (strlen(text) != len || len == 0)
        rc = airlock_overlay_say(err, errlen, 1, "ledger: %s: its blob is not a link's text", it->path);
      else if (symlinkat(text, dir, name) < 0)
        rc = -errno;
    }
  } else {
    int out = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    rc = out < 0 ? -errno : hash_copy(src, out, NULL, 0, NULL, hex);
    if (rc == 0 && fchmod(out, it->mode & 0777) < 0) rc = -errno;
    if (out >= 0) close(out);
  }
  close(src);
  close(dir);
  if (rc == -EFBIG)
    return airlock_overlay_say(err, errlen, 1, "ledger: %s: its blob is too long for a link's text",
                               it->path);
  if (rc < 0)
    return airlock_overlay_say(err, errlen, rc, "ledger: %s: stage its blob: %s", it->path, strerror(-rc));
  if (rc == 0 && strcmp(hex, it->sha256) != 0)
    return airlock_overlay_say(err, errlen, 1,
                               "ledger: %s: its blob blobs/%s has been altered (its SHA-256 is %s)", it->path,
                               where, hex);
  return rc;
}

/* What the second step did to one path, so that a later failure can undo
** it: nothing is lost until every step has been taken. */
enum { DONE_NONE = 0, DONE_NEW, DONE_SWAP, DONE_ASIDE, DONE_DIR, DONE_FINAL };
typedef struct {
  int kind;       /* DONE_*: NEW placed where nothing was; SWAP placed, the old entry now under
                     other; ASIDE removed, renamed to other; DIR a directory to remove once the
                     rest is settled; FINAL done for good (this file system cannot exchange) */
  int dirfd;      /* its directory, or -1 */
  char name[256]; /* its name there */
  char other[64]; /* SWAP: the staged temporary's name; ASIDE: the name it was moved to */
} done_t;

/* A free name beside the entry, for one removed until the restore is done. */
static int move_aside(int dir, const char *name, char aside[64])
{
  static unsigned serial;
  for (int tries = 0; tries < 100; tries++) {
    snprintf(aside, 64, ".airlock-restore.%d.%u", (int)getpid(), ++serial);
    if (renameat2(dir, name, dir, aside, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EEXIST) return -errno;
  }
  return -EEXIST;
}

/* A path to be absent: a file or link moved aside (removed when every step
** is taken), a directory marked for removal then (only if empty: one that
** holds anything is left as it is). */
static int remove_path(int ws_fd, const char *path, done_t *d, char *err, size_t errlen)
{
  const char *name;
  int dir = parent_of(ws_fd, path, &name, 0);
  if (dir < 0)
    return errno == ENOENT
               ? 0
               : airlock_overlay_say(err, errlen, -errno, "ledger: remove %s: %s", path, strerror(errno));
  struct stat st;
  int rc = 0;
  if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0) { /* a name of at most NAME_MAX bytes */
    snprintf(d->name, sizeof d->name, "%s", name);
    if (S_ISDIR(st.st_mode)) {
      d->kind = DONE_DIR;
    } else if ((rc = move_aside(dir, name, d->other)) == 0) {
      d->kind = DONE_ASIDE;
    } else {
      airlock_overlay_say(err, errlen, rc, "ledger: remove %s: %s", path, strerror(-rc));
    }
  }
  if (d->kind != DONE_NONE)
    d->dirfd = dir;
  else
    close(dir);
  return rc;
}

/* A staged file or link renamed into place, what was there kept under the
** temporary's name (an exchange) until every step is taken. */
static int place(airlock_overlay_staged *st, const char *path, done_t *d, char *err, size_t errlen)
{
  if (st->dirfd < 0) return 0;
  struct stat cur;
  int there = fstatat(st->dirfd, st->base, &cur, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(cur.st_mode);
  if (there && renameat2(st->dirfd, st->tmp, st->dirfd, st->base, RENAME_EXCHANGE) == 0) {
    d->kind = DONE_SWAP;
  } else if (there && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
    int e = errno;
    airlock_overlay_unstage(st);
    return airlock_overlay_say(err, errlen, -e, "ledger: %s: rename into place: %s", path, strerror(e));
  } else { /* nothing there, or this file system cannot exchange */
    int keep = fcntl(st->dirfd, F_DUPFD_CLOEXEC, 0);
    if (keep < 0) {
      int e = errno;
      airlock_overlay_unstage(st);
      return airlock_overlay_say(err, errlen, -e, "ledger: %s: %s", path, strerror(e));
    }
    snprintf(d->name, sizeof d->name, "%s", st->base);
    int rc = airlock_overlay_place(st, path, err, errlen); /* lets st go */
    if (rc < 0) {
      close(keep);
      return rc;
    }
    d->kind = there ? DONE_FINAL : DONE_NEW;
    d->dirfd = keep;
    return 0;
  }
  d->dirfd = st->dirfd;
  snprintf(d->name, sizeof d->name, "%s", st->base);
  snprintf(d->other, sizeof d->other, "%s", st->tmp);
  st->dirfd = -1; /* its directory and temporary are d's now */
  return 0;
}

/* Undoes one step: 0, or -errno. */
static int undo(done_t *d)
{
  int rc = 0;
  if (d->kind == DONE_SWAP) {
    if (renameat2(d->dirfd, d->other, d->dirfd, d->name, RENAME_EXCHANGE) < 0)
      rc = -errno;
    else
      unlinkat(d->dirfd, d->other, 0);
  } else if (d->kind == DONE_NEW) {
    if (unlinkat(d->dirfd, d->name, 0) < 0) rc = -errno;
  } else if (d->kind == DONE_ASIDE) {
    if (renameat2(d->dirfd, d->other, d->dirfd, d->name, RENAME_NOREPLACE) < 0) rc = -errno;
  } else if (d->kind == DONE_FINAL) {
    rc = -EOPNOTSUPP;
  }
  return rc;
}

/* Takes one step for good: what it replaced or removed goes. */
static void settle(done_t *d)
{
  if (d->kind == DONE_SWAP || d->kind == DONE_ASIDE) unlinkat(d->dirfd, d->other, 0);
  if (d->kind == DONE_DIR) unlinkat(d->dirfd, d->name, AT_REMOVEDIR); /* only when empty */
}

/* A directory to be there made through no link (one already there kept).
** 1 when it was made, 0 when it was there, or -errno with a message. */
static int make_dir(int ws_fd, const char *path, unsigned mode, char *err, size_t errlen)
{
  const char *name;
  int dir = parent_of(ws_fd, path, &name, 0);
  if (dir < 0) return airlock_overlay_say(err, errlen, -errno, "ledger: make %s: %s", path, strerror(errno));
  struct stat st;
  int rc = 1;
  if (mkdirat(dir, name, mode & 0777) < 0) {
    rc = 0;
    if (errno != EEXIST || fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
      rc = airlock_overlay_say(err, errlen, errno == EEXIST ? -EEXIST : -errno,
                               "ledger: make the directory %s: %s", path,
                               errno == EEXIST ? "something else is there" : strerror(errno));
  }
  close(dir);
  return rc;
}

/* A directory make_dir made, removed again (a restore that failed before
** writing anything else). */
static void unmake_dir(int ws_fd, const char *path)
{
  const char *name;
  int dir = parent_of(ws_fd, path, &name, 0);
  if (dir < 0) return;
  unlinkat(dir, name, AT_REMOVEDIR);
  close(dir);
}

int airlock_overlay_restore(int ws_fd, int session_fd, const airlock_overlay_restore_item *items, size_t n,
                            char *err, size_t errlen)
{
  char stage_name[64];
  snprintf(stage_name, sizeof stage_name, ".restore.%d", (int)getpid());
  int blobs = openat(session_fd, "blobs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (blobs < 0 && n > 0)
    return airlock_overlay_say(err, errlen, 1,
                               "ledger: the session has no blobs/ (%s): nothing was kept to restore from",
                               strerror(errno));
  if (mkdirat(session_fd, stage_name, 0700) < 0) {
    int e = errno;
    if (blobs >= 0) close(blobs);
    return airlock_overlay_say(err, errlen, -e, "ledger: make the staging directory %s: %s", stage_name,
                               strerror(e));
  }
  int stage = openat(session_fd, stage_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int upper = -1, rc = 0;
  if (stage < 0 || mkdirat(stage, "upper", 0700) < 0 ||
      (upper = openat(stage, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
    rc = airlock_overlay_say(err, errlen, -errno, "ledger: the staging directory: %s", strerror(errno));
  /* Every blob staged and checked before the workspace is written. */
  for (size_t i = 0; rc == 0 && i < n; i++)
    if (items[i].kind == AIRLOCK_RESTORE_FILE || items[i].kind == AIRLOCK_RESTORE_LINK)
      rc = stage_blob(blobs, upper, &items[i], err, errlen);
  /* The workspace in two steps. First what only adds (directories made,
  ** files and links staged beside their places), undone whole when one
  ** fails (a full disk, say); then, once synced, what replaces or removes
  ** (renames into place, removals), which needs no space. */
  airlock_overlay_staged *st = rc == 0 ? calloc(n ? n : 1, sizeof *st) : NULL;
  unsigned char *made = rc == 0 ? calloc(n ? n : 1, 1) : NULL;
  done_t *done = rc == 0 ? calloc(n ? n : 1, sizeof *done) : NULL;
  if (rc == 0 && (!st || !made || !done))
    rc = airlock_overlay_say(err, errlen, -ENOMEM, "ledger: out of memory");
  size_t staged = 0;
  for (size_t i = 0; rc == 0 && i < n; i++, staged++) {
    st[i].dirfd = -1;
    done[i].dirfd = -1;
    if (items[i].kind == AIRLOCK_RESTORE_DIR) {
      int r = make_dir(ws_fd, items[i].path, items[i].mode, err, errlen);
      if (r > 0) made[i] = 1;
      if (r < 0) rc = r;
    } else if (items[i].kind != AIRLOCK_RESTORE_NONE) {
      int r = airlock_overlay_stage(stage, ws_fd, items[i].path, &st[i], err, errlen);
      if (r != 0) rc = r < 0 ? r : -EPERM;
    }
  }
  if (rc == 0) {
    int r = airlock_overlay_sync(ws_fd);
    if (r < 0)
      rc = airlock_overlay_say(err, errlen, r, "ledger: sync the workspace's file system: %s", strerror(-r));
  }
  size_t added = staged;    /* how far the first step went, for its undoing */
  int undo_first = rc != 0; /* nothing replaced or removed yet */
  /* The second step: each replacement an exchange, each removal a rename
  ** aside, so that a failure (an I/O error) undoes the steps before it. */
  size_t failed = staged;
  for (size_t i = 0; !undo_first && i < staged; i++) {
    if (rc != 0) {
      airlock_overlay_unstage(&st[i]);
    } else if (items[i].kind == AIRLOCK_RESTORE_NONE) {
      if ((rc = remove_path(ws_fd, items[i].path, &done[i], err, errlen)) != 0) failed = i;
    } else if (items[i].kind != AIRLOCK_RESTORE_DIR) {
      if ((rc = place(&st[i], items[i].path, &done[i], err, errlen)) != 0) failed = i;
    }
  }
  if (!undo_first && rc == 0) {
    for (size_t i = 0; i < staged; i++)
      if (done[i].kind != DONE_DIR) settle(&done[i]);
    for (size_t i = 0; i < staged; i++) /* directories once what was in them has gone */
      if (done[i].kind == DONE_DIR) settle(&done[i]);
  } else if (!undo_first) {
    size_t undone = 0;
    const char *stuck = NULL;
    int stuck_rc = 0;
    for (size_t i = failed; i-- > 0;) {
      if (done[i].kind == DONE_NONE || done[i].kind == DONE_DIR) continue;
      int r = undo(&done[i]);
      if (r == 0) {
        undone++;
      } else if (!stuck) {
        stuck = items[i].path;
        stuck_rc = r;
      }
    }
    size_t len = strlen(err);
    if (stuck)
      snprintf(err + len, errlen - len,
               "; undoing the changes before it failed at %s (%s): the workspace holds part of the restore",
               stuck, strerror(-stuck_rc));
    else
      snprintf(err + len, errlen - len, "; the %zu change%s before it undone", undone,
               undone == 1 ? "" : "s");
    undo_first = !stuck;
  }
  if (undo_first) {
    for (size_t i = 0; st && i < added; i++) airlock_overlay_unstage(&st[i]);
    for (size_t i = added; made && i-- > 0;)
      if (made[i]) unmake_dir(ws_fd, items[i].path);
    size_t len = strlen(err);
    if (rc < 0 && len + 40 < errlen)
      snprintf(err + len, errlen - len, "; nothing in the workspace was changed");
  }
  for (size_t i = 0; done && i < added; i++)
    if (done[i].dirfd >= 0) close(done[i].dirfd);
  free(done);
  free(made);
  free(st);
  if (upper >= 0) close(upper);
  if (stage >= 0) {
    remove_tree(stage, 0);
    unlinkat(session_fd, stage_name, AT_REMOVEDIR);
  }
  if (blobs >= 0) close(blobs);
  return rc;
}
