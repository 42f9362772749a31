/*
** overlay_apply.c -- one change of an overlaid workspace into the real
** workspace (see the header for what is and is not applied).
*/
#define _GNU_SOURCE
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
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define REMOVE_DEPTH 128

/* Everything inside the directory fd (owned), then nothing more; depth bounded. */
static int empty_dir(int fd, int depth)
{
  if (depth > REMOVE_DEPTH) {
    close(fd);
    errno = ELOOP;
    return -1;
  }
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  struct dirent *de;
  int rc = 0;
  while (rc == 0 && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      rc = -1;
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0 || empty_dir(sub, depth + 1) < 0 || unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0)
        rc = -1;
    } else if (unlinkat(dirfd(d), de->d_name, 0) < 0) {
      rc = -1;
    }
  }
  int e = errno;
  closedir(d);
  errno = e;
  return rc;
}

/* A free temporary name beside the file's place, created: its fd, or -1. */
static int temp_file(int parent, char name[64])
{
  static unsigned serial;
  for (int tries = 0; tries < 100; tries++) {
    snprintf(name, 64, ".airlock-apply.%d.%u", (int)getpid(), ++serial);
    int fd = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

/* The access and modification times of st, as futimens and utimensat take them. */
static void times_of(const struct stat *st, struct timespec ts[2])
{
  ts[0] = st->st_atim;
  ts[1] = st->st_mtim;
}

/* The regular file src (its stat in st) into a new temporary in parent, its
** holes kept, mode and times set: 0 with its name in tmp, or -1 (errno;
** nothing left behind). */
static int stage_file(int src, const struct stat *st, mode_t mode, int parent, char tmp[64])
{
  int out = temp_file(parent, tmp);
  if (out < 0) return -1;
  int rc = airlock_overlay_copy_sparse(src, (uint64_t)st->st_size, out);
  if (rc < 0) {
    errno = -rc;
    rc = -1;
  }
  struct timespec ts[2];
  times_of(st, ts);
  if (rc == 0 && (fchmod(out, mode) < 0 || futimens(out, ts) < 0)) rc = -1;
  int e = errno;
  close(out);
  if (rc < 0) unlinkat(parent, tmp, 0);
  errno = e;
  return rc;
}

int airlock_overlay_sync(int ws_fd)
{
  return syncfs(ws_fd) < 0 ? -errno : 0;
}

void airlock_overlay_unstage(airlock_overlay_staged *st)
{
  if (st->dirfd < 0) return;
  unlinkat(st->dirfd, st->tmp, 0);
  close(st->dirfd);
  st->dirfd = -1;
}

int airlock_overlay_place(airlock_overlay_staged *st, const char *path, char *err, size_t errlen)
{
  if (st->dirfd < 0) return 0;
  int rc = renameat(st->dirfd, st->tmp, st->dirfd, st->base) < 0 ? -errno : 0;
  if (rc < 0) {
    airlock_overlay_say(err, errlen, rc, "overlay: apply %s: rename into place: %s", path, strerror(-rc));
    airlock_overlay_unstage(st); /* the temporary removed */
    return rc;
  }
  /* Renamed: the temporary's name is free, and not ours to remove again
  ** (another file may have taken it since). */
  close(st->dirfd);
  st->dirfd = -1;
  return 0;
}

int airlock_overlay_stage(int layer_fd, int ws_fd, const char *path, airlock_overlay_staged *staged,
                          char *err, size_t errlen)
{
  staged->dirfd = -1;
  staged->dir_times = 0;
  size_t pl = strlen(path);
  if (pl == 0 || pl >= PATH_MAX || path[0] == '/')
    return airlock_overlay_say(err, errlen, -EINVAL,
                               "overlay: apply: '%s' is not a path inside the workspace", path);
  char dir[PATH_MAX];
  memcpy(dir, path, pl + 1);
  char *slash = strrchr(dir, '/');
  const char *base = slash ? path + (slash - dir) + 1 : path;
  if (slash)
    *slash = 0;
  else
    dir[0] = 0;
  if (!base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
    return airlock_overlay_say(err, errlen, -EINVAL,
                               "overlay: apply: '%s' is not a path inside the workspace", path);
  int up = -1, lp = -1, wp = -1, rc = 0;
  up = openat(layer_fd, "upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (up >= 0) lp = airlock_overlay_open_beneath(up, dir, O_RDONLY | O_DIRECTORY);
  if (lp < 0) {
    rc = airlock_overlay_say(err, errlen, -errno,
                             "overlay: apply %s: open its directory in the writable layer: %s", path,
                             strerror(errno));
    goto out;
  }
  wp = airlock_overlay_open_beneath(ws_fd, dir, O_RDONLY | O_DIRECTORY);
  if (wp < 0) {
    rc = airlock_overlay_say(err, errlen, -errno,
                             "overlay: apply %s: open its directory in the workspace (through no link): %s",
                             path, strerror(errno));
    goto out;
  }
  struct stat st, real;
  if (fstatat(lp, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    rc = airlock_overlay_say(err, errlen, -errno, "overlay: apply %s: not in the writable layer: %s", path,
                             strerror(errno));
    goto out;
  }
  int have = fstatat(wp, base, &real, AT_SYMLINK_NOFOLLOW) == 0;
  mode_t perm = st.st_mode & 0777; /* setuid, setgid and sticky stripped */
  /* A directory keeps rwx for its owner (the caller), who applies what is
  ** beneath it and may remove it later. */
  mode_t dperm = perm | 0700;
  if (S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0) { /* a whiteout */
    if (!have) goto out;
    if (S_ISDIR(real.st_mode)) {
      int d = openat(wp, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (d < 0 || empty_dir(d, 0) < 0 || unlinkat(wp, base, AT_REMOVEDIR) < 0)
        rc = airlock_overlay_say(err, errlen, -errno, "overlay: apply %s: remove the directory: %s", path,
                                 strerror(errno));
    } else if (unlinkat(wp, base, 0) < 0) {
      rc = airlock_overlay_say(err, errlen, -errno, "overlay: apply %s: remove: %s", path, strerror(errno));
    }
  } else if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
    if (have && S_ISDIR(real.st_mode)) {
      rc = airlock_overlay_say(
          err, errlen, 1, "overlay: apply %s: refused: it would replace a directory of the workspace", path);
      goto out;
    }
    if (strlen(base) >= sizeof staged->base) {
      rc = airlock_overlay_say(err, errlen, -ENAMETOOLONG, "overlay: apply %s: its name is over %zu bytes",
                               path, sizeof staged->base - 1);
      goto out;
    }
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlinkat(lp, base, target, sizeof target - 1);
      int t = n < 0 ? -1 : temp_file(wp, staged->tmp); /* a name is taken, then freed for the link */
      if (t >= 0) {
        close(t);
        unlinkat(wp, staged->tmp, 0);
      }
      struct timespec ts[2];
      times_of(&st, ts);
      if (n < 0 || t < 0 || (target[n] = 0, symlinkat(target, wp, staged->tmp)) < 0 ||
          utimensat(wp, staged->tmp, ts, AT_SYMLINK_NOFOLLOW) < 0) {
        if (n >= 0 && t >= 0) unlinkat(wp, staged->tmp, 0);
        rc = airlock_overlay_say(err, errlen, -errno, "overlay: apply %s: make the symbolic link: %s", path,
                                 strerror(errno));
        goto out;
      }
    } else {
      int src = openat(lp, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      struct stat s2;
      if (src < 0 || fstat(src, &s2) < 0 || !S_ISREG(s2.st_mode) || s2.st_ino != st.st_ino ||
          stage_file(src, &s2, perm, wp, staged->tmp) < 0) {
        rc = airlock_overlay_say(err, errlen, -errno, "overlay: apply %s: write the file: %s", path,
                                 strerror(errno));
        if (src >= 0) close(src);
        goto out;
      }
      close(src);
    }
    memcpy(staged->base, base, strlen(base) + 1);
    staged->dirfd = wp; /* kept for the rename */
    wp = -1;
  } else if (S_ISDIR(st.st_mode)) {
    if (have && !S_ISDIR(real.st_mode)) {
      rc = airlock_overlay_say(
          err, errlen, 1, "overlay: apply %s: refused: a directory would replace a file of the workspace",
          path);
      goto out;
    }
    int opaque = 0;
    int ld = openat(lp, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    char v[4];
    if (ld >= 0) {
      opaque = fgetxattr(ld, "user.overlay.opaque", v, sizeof v) == 1 && v[0] == 'y';
      close(ld);
    }
    if (!have && mkdirat(wp, base, dperm) < 0) {
      rc = airlock_overlay_say(err, errlen, -errno, "overlay: apply %s: mkdir: %s", path, strerror(errno));
      goto out;
    }
    int d = openat(wp, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d < 0 || fchmod(d, dperm) < 0 || (opaque && have && empty_dir(dup(d), 0) < 0))
      rc = airlock_overlay_say(err, errlen, -errno, "overlay: apply %s: the directory: %s", path,
                               strerror(errno));
    if (d >= 0) close(d);
    staged->dir_times = rc == 0; /* its times once what is beneath it is placed */
  } else {
    rc = airlock_overlay_say(
        err, errlen, 1, "overlay: apply %s: refused: a device node, fifo or socket is never applied", path);
  }
out:
  if (up >= 0) close(up);
  if (lp >= 0) close(lp);
  if (wp >= 0) close(wp);
  return rc;
}

int airlock_overlay_dir_times(int layer_fd, int ws_fd, const char *path, char *err, size_t errlen)
{
  int up = openat(layer_fd, "upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int from = up < 0 ? -1 : airlock_overlay_open_beneath(up, path, O_RDONLY | O_DIRECTORY);
  int to = from < 0 ? -1 : airlock_overlay_open_beneath(ws_fd, path, O_RDONLY | O_DIRECTORY);
  struct stat st;
  struct timespec ts[2];
  int rc = to >= 0 && fstat(from, &st) == 0 && (times_of(&st, ts), futimens(to, ts) == 0) ? 0 : -errno;
  if (rc < 0)
    airlock_overlay_say(err, errlen, rc, "overlay: apply %s: the directory's times: %s", path, strerror(-rc));
  if (up >= 0) close(up);
  if (from >= 0) close(from);
  if (to >= 0) close(to);
  return rc;
}
