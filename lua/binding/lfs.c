/*
** lfs.c -- filesystem primitives for airlock.handlers' workspace, kv and
** modules handlers: every path a guest names is resolved beneath a root
** directory by the kernel, in one step, with openat2(RESOLVE_BENEATH |
** RESOLVE_NO_MAGICLINKS), so neither `..`, an absolute path, a symlink leading
** out (however it is swapped in), nor a /proc magic link can reach outside.
**
**   core.fs_read(root, path, max_bytes)    -> data
**   core.fs_stat(root, path)               -> {type = "file"|"dir", size, mtime}, or false if absent
**   core.fs_list(root, path, max_entries)  -> {names...} (unsorted)
**   core.fs_write(root, path, data, mkdirs)-> true   (temp file + fsync + renameat + fsync dir)
**   core.fs_remove(root, path)             -> true   (a file, or an empty directory)
**   core.fs_check_path(path)               -> normalised path
**   core.fs_realpath(path)                 -> the absolute, canonical path of a host directory
**   core.fs_realpath_in(root, path)        -> {real = host path, type, mode}: path as a
**                                             process whose root is root would find it
**
** Failures return nil, code, detail. code is one word the Lua layer turns into
** a message: bad_path, escape, magic, type, raced, not_found, not_dir, is_dir,
** not_empty, too_large, too_many, access, no_space, unsupported, root, io.
** Only regular files and directories are ever opened for reading or writing:
** a FIFO, socket or device is looked at through an O_PATH descriptor (which
** opens nothing) and refused.
*/
#define _GNU_SOURCE
#include "lbinding.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FS_PATH_MAX (PATH_MAX - 1) /* bytes, without the terminating NUL */
#define FS_NAME_MAX NAME_MAX       /* bytes per component */

/* ------------------------------------------------------------ results */

static int fs_fail(lua_State *L, const char *code, const char *detail)
{
  lua_pushnil(L);
  lua_pushstring(L, code);
  lua_pushstring(L, detail ? detail : "");
  return 3;
}

/* The code for a failed system call (err > 0), with "what: strerror" as detail. */
static int fs_fail_errno(lua_State *L, const char *what, int err)
{
  const char *code;
  switch (err) {
    case EXDEV: code = "escape"; break; /* RESOLVE_BENEATH: the walk would leave the root */
    case ELOOP: code = "magic"; break;  /* RESOLVE_NO_MAGICLINKS, or a symlink loop */
    case ENOENT: code = "not_found"; break;
    case ENOTDIR: code = "not_dir"; break;
    case EISDIR: code = "is_dir"; break;
    case ENOTEMPTY:
    case EEXIST: code = "not_empty"; break;
    case EACCES:
    case EPERM:
    case EROFS: code = "access"; break;
    case ENOSPC:
    case EDQUOT:
    case EFBIG: code = "no_space"; break;
    case ENAMETOOLONG: code = "bad_path"; break;
    case ENOSYS: code = "unsupported"; break;
    default: code = "io"; break;
  }
  char detail[256];
  snprintf(detail, sizeof detail, "%s: %s", what, airlock_strerror(err));
  return fs_fail(L, code, detail);
}

/* ------------------------------------------------------------ paths */

/* Checks a guest path and writes its normal form into out (FS_PATH_MAX + 1
** bytes): components joined by '/', without empty or "." components; "" is
** the root itself. Returns NULL, or why the path is refused. */
static const char *norm_path(const char *p, size_t len, char *out)
{
  if (len > FS_PATH_MAX) return "is longer than 4095 bytes";
  if (memchr(p, 0, len)) return "contains a NUL byte";
  if (len > 0 && p[0] == '/') return "is absolute";
  size_t o = 0, i = 0;
  while (i < len) {
    size_t j = i;
    while (j < len && p[j] != '/') j++;
    size_t n = j - i;
    if (n > FS_NAME_MAX) return "has a component longer than 255 bytes";
    if (n == 2 && p[i] == '.' && p[i + 1] == '.') return "has a '..' component";
    if (n > 0 && !(n == 1 && p[i] == '.')) {
      if (o) out[o++] = '/';
      memcpy(out + o, p + i, n);
      o += n;
    }
    i = j + 1;
  }
  out[o] = 0;
  return NULL;
}

/* ------------------------------------------------------------ resolution */

static int open_root(const char *root)
{
  int fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  return fd >= 0 ? fd : -errno;
}

/* openat2 beneath dirfd: never above it, never through a magic link. rel ""
** is dirfd itself. Returns a descriptor or -errno. */
static int open_beneath(int dirfd, const char *rel, int flags, mode_t mode)
{
#ifdef SYS_openat2
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (unsigned long long)(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  for (int tries = 0; tries < 16; tries++) {
    long fd = syscall(SYS_openat2, dirfd, *rel ? rel : ".", &how, sizeof how);
    if (fd >= 0) return (int)fd;
    /* EAGAIN: a rename somewhere on the filesystem raced the walk; try again. */
    if (errno != EAGAIN && errno != EINTR) return -errno;
  }
  return -EAGAIN;
#else
  (void)dirfd;
  (void)rel;
  (void)flags;
  (void)mode;
  return -ENOSYS;
#endif
}

static const char *kind_of(mode_t m)
{
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISFIFO(m)) return "fifo";
  if (S_ISSOCK(m)) return "socket";
  if (S_ISCHR(m)) return "character device";
  if (S_ISBLK(m)) return "block device";
  if (S_ISLNK(m)) return "symlink";
  return "special file";
}

/* The arguments every call starts with: the root (a directory the host
** names) and the guest's path, normalised into rel. Returns the root's
** descriptor, or pushes a failure and returns -1 (*nret set). */
static int begin(lua_State *L, char *rel, int *nret)
{
  const char *root = luaL_checkstring(L, 1);
  size_t len;
  const char *path = luaL_checklstring(L, 2, &len);
  const char *why = norm_path(path, len, rel);
  if (why) {
    *nret = fs_fail(L, "bad_path", why);
    return -1;
  }
  int rfd = open_root(root);
  if (rfd < 0) {
    *nret = fs_fail(L, "root", airlock_strerror(-rfd));
    return -1;
  }
  return rfd;
}

/* Opens rel beneath rfd for reading when it is a regular file (or, with
** want_dir, a directory), without opening anything else: an O_PATH descriptor
** is looked at first, then reopened through /proc/self/fd (the same inode, or
** a second openat2 compared by device and inode where /proc is missing).
** Returns the descriptor and fills st, or -errno, or WRONG_TYPE when the
** object is of another type (st filled), or -ESTALE when it was swapped. */
#define WRONG_TYPE (-100000)
static int open_checked(int rfd, const char *rel, int want_dir, struct stat *st)
{
  int pfd = open_beneath(rfd, rel, O_PATH, 0);
  if (pfd < 0) return pfd;
  if (fstat(pfd, st) < 0) {
    int e = errno;
    close(pfd);
    return -e;
  }
  if (want_dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode)) {
    close(pfd);
    return WRONG_TYPE;
  }
  int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (want_dir ? O_DIRECTORY : 0);
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", pfd);
  int fd = open(proc, flags);
  if (fd < 0) fd = open_beneath(rfd, rel, flags, 0); /* no /proc here: resolve again */
  close(pfd);
  if (fd < 0) return fd;
  struct stat st2;
  if (fstat(fd, &st2) < 0 || st2.st_dev != st->st_dev || st2.st_ino != st->st_ino ||
      (st2.st_mode & S_IFMT) != (st->st_mode & S_IFMT)) {
    close(fd);
    return -ESTALE; /* swapped between the look and the open */
  }
  *st = st2;
  return fd;
}

static int fail_open(lua_State *L, int rc, const struct stat *st, int want_dir)
{
  if (rc == WRONG_TYPE) {
    if (!want_dir && S_ISDIR(st->st_mode)) return fs_fail(L, "is_dir", "a directory");
    if (want_dir && S_ISREG(st->st_mode)) return fs_fail(L, "not_dir", "a file");
    return fs_fail(L, "type", kind_of(st->st_mode));
  }
  if (rc == -ESTALE) return fs_fail(L, "raced", "the file changed while it was opened");
  return fs_fail_errno(L, "openat2", -rc);
}

/* ------------------------------------------------------------ read */

static int l_fs_read(lua_State *L)
{
  char rel[FS_PATH_MAX + 1];
  int nret;
  lua_Integer max = luaL_checkinteger(L, 3);
  if (max < 0 || max > (lua_Integer)1 << 40) return luaL_argerror(L, 3, "max_bytes out of range");
  int rfd = begin(L, rel, &nret);
  if (rfd < 0) return nret;
  if (!*rel) {
    close(rfd);
    return fs_fail(L, "is_dir", "the workspace root");
  }
  struct stat st;
  int fd = open_checked(rfd, rel, 0, &st);
  close(rfd);
  if (fd < 0) return fail_open(L, fd, &st, 0);
  if (st.st_size > max) {
    close(fd);
    return fs_fail(L, "too_large", "file size");
  }
  size_t cap = (size_t)st.st_size + 1, n = 0;
  char *buf = malloc(cap);
  int err = buf ? 0 : ENOMEM;
  while (!err) {
    if (n == cap) {
      if (n > (size_t)max) break;
      size_t ncap = cap * 2 > (size_t)max + 1 ? (size_t)max + 1 : cap * 2;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        err = ENOMEM;
        break;
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (err) {
    free(buf);
    return fs_fail_errno(L, "read", err);
  }
  if (n > (size_t)max) {
    free(buf);
    return fs_fail(L, "too_large", "file grew past the bound");
  }
  lua_pushlstring(L, buf, n);
  free(buf);
  return 1;
}

/* ------------------------------------------------------------ stat */

static int l_fs_stat(lua_State *L)
{
  char rel[FS_PATH_MAX + 1];
  int nret;
  int rfd = begin(L, rel, &nret);
  if (rfd < 0) return nret;
  int fd = open_beneath(rfd, rel, O_PATH, 0);
  close(rfd);
  if (fd == -ENOENT) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (fd < 0) return fs_fail_errno(L, "openat2", -fd);
  struct stat st;
  int rc = fstat(fd, &st) < 0 ? errno : 0;
  close(fd);
  if (rc) return fs_fail_errno(L, "fstat", rc);
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return fs_fail(L, "type", kind_of(st.st_mode));
  lua_createtable(L, 0, 4);
  lua_pushstring(L, kind_of(st.st_mode));
  lua_setfield(L, -2, "type");
  lua_pushinteger(L, (lua_Integer)st.st_size);
  lua_setfield(L, -2, "size");
  lua_pushinteger(L, (lua_Integer)st.st_mtim.tv_sec);
  lua_setfield(L, -2, "mtime");
  lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
  lua_setfield(L, -2, "mode");
  return 1;
}

/* ------------------------------------------------------------ list */

static int l_fs_list(lua_State *L)
{
  char rel[FS_PATH_MAX + 1];
  int nret;
  lua_Integer max = luaL_checkinteger(L, 3);
  if (max < 0 || max > 10000000) return luaL_argerror(L, 3, "max_entries out of range");
  int rfd = begin(L, rel, &nret);
  if (rfd < 0) return nret;
  struct stat st;
  int fd = open_checked(rfd, rel, 1, &st);
  close(rfd);
  if (fd < 0) return fail_open(L, fd, &st, 1);
  DIR *d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return fs_fail_errno(L, "fdopendir", e);
  }
  /* Names are gathered outside Lua, so no Lua error can leak the DIR. */
  size_t cap = 4096, used = 0;
  lua_Integer count = 0;
  char *names = malloc(cap);
  int err = names ? 0 : ENOMEM, too_many = 0;
  struct dirent *e;
  while (!err && (errno = 0, e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (++count > max) {
      too_many = 1;
      break;
    }
    size_t n = strlen(e->d_name) + 1;
    if (used + n > cap) {
      char *nb = realloc(names, cap * 2 + n);
      if (!nb) {
        err = ENOMEM;
        break;
      }
      names = nb;
      cap = cap * 2 + n;
    }
    memcpy(names + used, e->d_name, n);
    used += n;
  }
  if (!err && !too_many && errno) err = errno;
  closedir(d);
  if (err || too_many) {
    free(names);
    return too_many ? fs_fail(L, "too_many", "directory entries") : fs_fail_errno(L, "readdir", err);
  }
  lua_createtable(L, (int)count, 0);
  lua_Integer i = 0;
  for (size_t off = 0; off < used; off += strlen(names + off) + 1) {
    lua_pushstring(L, names + off);
    lua_rawseti(L, -2, ++i);
  }
  free(names);
  return 1;
}

/* ------------------------------------------------------------ write */

/* Splits rel ("a/b/c") into its parent ("a/b", or "") and last name ("c"). */
static const char *split_last(char *rel)
{
  char *slash = strrchr(rel, '/');
  if (!slash) return NULL;
  *slash = 0;
  return slash + 1;
}

/* Creates the missing directories of dir (normalised, beneath rfd), each
** resolved beneath the root before anything is made in it. 0 or -errno. */
static int make_dirs(int rfd, const char *dir)
{
  char prefix[FS_PATH_MAX + 1];
  size_t len = strlen(dir);
  for (size_t i = 0; i <= len; i++) {
    if (i < len && dir[i] != '/') continue;
    memcpy(prefix, dir, i);
    prefix[i] = 0;
    int fd = open_beneath(rfd, prefix, O_PATH | O_DIRECTORY, 0);
    if (fd >= 0) {
      close(fd);
      continue;
    }
    if (fd != -ENOENT) return fd;
    char *slash = strrchr(prefix, '/');
    const char *name = slash ? slash + 1 : prefix;
    if (slash) *slash = 0;
    int pfd = open_beneath(rfd, slash ? prefix : "", O_PATH | O_DIRECTORY, 0);
    if (pfd < 0) return pfd;
    int rc = mkdirat(pfd, name, 0755) < 0 && errno != EEXIST ? -errno : 0;
    close(pfd);
    if (rc) return rc;
  }
  return 0;
}

static int write_all(int fd, const char *p, size_t n)
{
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int l_fs_write(lua_State *L)
{
  char rel[FS_PATH_MAX + 1];
  int nret;
  size_t dlen;
  const char *data = luaL_checklstring(L, 3, &dlen);
  int mkdirs = lua_toboolean(L, 4);
  int rfd = begin(L, rel, &nret);
  if (rfd < 0) return nret;
  if (!*rel) {
    close(rfd);
    return fs_fail(L, "is_dir", "the workspace root");
  }
  const char *name = split_last(rel);
  const char *dir = name ? rel : "";
  if (!name) name = rel;
  int dfd = open_beneath(rfd, dir, O_RDONLY | O_DIRECTORY, 0);
  if (dfd == -ENOENT && mkdirs) {
    int rc = make_dirs(rfd, dir);
    dfd = rc < 0 ? rc : open_beneath(rfd, dir, O_RDONLY | O_DIRECTORY, 0);
  }
  close(rfd);
  if (dfd < 0) return fs_fail_errno(L, "openat2", -dfd);
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
    close(dfd);
    return fs_fail(L, "is_dir", "a directory");
  }
  /* The temporary file: a fresh name in the same directory, never followed. */
  char tmp[64];
  int fd = -1;
  for (int tries = 0; tries < 16 && fd < 0; tries++) {
    unsigned char rnd[8];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
      int e = errno;
      close(dfd);
      return fs_fail_errno(L, "getrandom", e);
    }
    snprintf(tmp, sizeof tmp, ".airlock-tmp-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3],
             rnd[4], rnd[5], rnd[6], rnd[7]);
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    int e = errno;
    close(dfd);
    return fs_fail_errno(L, "create", e);
  }
  const char *step = "write";
  int rc = write_all(fd, data, dlen);
  if (rc == 0) {
    step = "fsync";
    rc = fsync(fd) < 0 ? -errno : 0;
  }
  if (close(fd) < 0 && rc == 0) {
    step = "close";
    rc = -errno;
  }
  if (rc == 0) {
    step = "rename";
    rc = renameat(dfd, tmp, dfd, name) < 0 ? -errno : 0;
  }
  if (rc < 0) {
    unlinkat(dfd, tmp, 0);
    close(dfd);
    return fs_fail_errno(L, step, -rc);
  }
  fsync(dfd); /* the rename itself durable; a failure here loses nothing visible */
  close(dfd);
  lua_pushboolean(L, 1);
  return 1;
}

/* ------------------------------------------------------------ remove */

static int l_fs_remove(lua_State *L)
{
  char rel[FS_PATH_MAX + 1];
  int nret;
  int rfd = begin(L, rel, &nret);
  if (rfd < 0) return nret;
  if (!*rel) {
    close(rfd);
    return fs_fail(L, "root", "the workspace root cannot be removed");
  }
  const char *name = split_last(rel);
  const char *dir = name ? rel : "";
  if (!name) name = rel;
  int dfd = open_beneath(rfd, dir, O_PATH | O_DIRECTORY, 0);
  close(rfd);
  if (dfd < 0) return fs_fail_errno(L, "openat2", -dfd);
  int rc = unlinkat(dfd, name, 0) < 0 ? errno : 0;
  if (rc == EISDIR) rc = unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? errno : 0;
  close(dfd);
  if (rc) return fs_fail_errno(L, "unlink", rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.fs_check_path(path) -> the normal form, or nil, "bad_path", why. */
static int l_fs_check_path(lua_State *L)
{
  char rel[FS_PATH_MAX + 1];
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  const char *why = norm_path(path, len, rel);
  if (why) return fs_fail(L, "bad_path", why);
  lua_pushstring(L, rel);
  return 1;
}

/* core.fs_realpath(path) -> absolute canonical path (the host's own paths:
** a root is fixed when a handler is made, not at each call's cwd). */
static int l_fs_realpath(lua_State *L)
{
  char out[PATH_MAX];
  const char *path = luaL_checkstring(L, 1);
  if (!realpath(path, out)) return fs_fail_errno(L, "realpath", errno);
  lua_pushstring(L, out);
  return 1;
}

/* core.fs_realpath_in(root, path) -> { real = the host path, type = "file" |
** "dir" | "other", mode = permission bits }, or nil, code, detail: path (absolute
** or not) resolved as if root were / (openat2 RESOLVE_IN_ROOT: absolute
** symlinks and .. stay inside), as a program run in that root file system
** would find it. */
static int l_fs_realpath_in(lua_State *L)
{
  const char *root = luaL_checkstring(L, 1);
  const char *path = luaL_checkstring(L, 2);
  int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) return fs_fail_errno(L, "root", errno);
  struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
  int fd = (int)syscall(SYS_openat2, rfd, path, &how, sizeof how);
  int e = errno;
  close(rfd);
  if (fd < 0) return fs_fail_errno(L, "openat2", e);
  struct stat st;
  char link[64], out[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = fstat(fd, &st) == 0 ? readlink(link, out, sizeof out - 1) : -1;
  e = errno;
  close(fd);
  if (n < 0) return fs_fail_errno(L, "readlink", e);
  out[n] = 0;
  lua_createtable(L, 0, 3);
  lua_pushstring(L, out);
  lua_setfield(L, -2, "real");
  lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir" : "other");
  lua_setfield(L, -2, "type");
  lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
  lua_setfield(L, -2, "mode");
  return 1;
}

void airlock_l_open_fs(lua_State *L)
{
  static const luaL_Reg fns[] = {
      {"fs_read", l_fs_read},
      {"fs_stat", l_fs_stat},
      {"fs_list", l_fs_list},
      {"fs_write", l_fs_write},
      {"fs_remove", l_fs_remove},
      {"fs_check_path", l_fs_check_path},
      {"fs_realpath", l_fs_realpath},
      {"fs_realpath_in", l_fs_realpath_in},
      {NULL, NULL},
  };
  luaL_setfuncs(L, fns, 0);
}
