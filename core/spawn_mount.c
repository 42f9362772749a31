/*
** spawn_mount.c -- a spawn's mount list: the records checked and planned in the
** parent (spawn_mount_plan), the plan carried out in the child (spawn_mount_run).
** The child's part makes raw system calls only: it may share the parent's
** memory (core/spawn.c), so it allocates nothing and takes no lock.
*/
#define _GNU_SOURCE
#include "spawn_mount.h"
#include "fd_send.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PATH_BUF   4200 /* a path (under 4096) below VIEW_STAGE */
/* Where the view's root is built before pivot_root: a directory every system
** has, covered by then. */
#define VIEW_STAGE "/tmp"

static const char *const kind_names[AIRLOCK_MOUNT_KIND_COUNT_] = {
    [AIRLOCK_MOUNT_WORKSPACE] = "workspace", [AIRLOCK_MOUNT_KEEP] = "keep",
    [AIRLOCK_MOUNT_TMPFS] = "tmpfs",         [AIRLOCK_MOUNT_VIEW_RO] = "view_ro",
    [AIRLOCK_MOUNT_VIEW_RW] = "view_rw",     [AIRLOCK_MOUNT_ROOTFS] = "rootfs",
    [AIRLOCK_MOUNT_PROTECT] = "protect",     [AIRLOCK_MOUNT_OVERLAY] = "overlay",
};

const char *airlock_mount_kind_name(airlock_mount_kind k)
{
  return (unsigned)k < AIRLOCK_MOUNT_KIND_COUNT_ && kind_names[k] ? kind_names[k] : "unknown";
}

/* ------------------------------------------------------------ the parent's plan */

/* Writes the message and returns -e. */
__attribute__((format(printf, 4, 5))) static int refuse(char *err, size_t errlen, int e, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -e;
}

/* The same message a failed step of the spawner gives: "spawn: STEP: text (NAME)". */
static int refuse_step(char *err, size_t errlen, int e, const char *step)
{
  return refuse(err, errlen, e, "spawn: %s: %s", step, airlock_strerror(e));
}

/* Whether path is dir or lies beneath it. */
static int beneath(const char *path, const char *dir)
{
  size_t n = strlen(dir);
  return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == 0 || (n == 1 && dir[0] == '/'));
}

/* The index of the tmpfs entry that path lies beneath, or -1. */
static long under_tmpfs(const struct spawn_mount_plan *p, const char *path)
{
  for (int i = 0; i < p->ntmpfs; i++)
    if (beneath(path, p->tmpfs[i].at)) return i;
  return -1;
}

/* Adds a path of the view as it is now: at, where it appears, and source,
** what appears there (NULL: at itself; else owned by the entry). Returns 0
** when added, 1 when there is nothing to add (missing, or a link whose target
** does not fit), -E2BIG when the view is full. */
static int add_view_path(struct spawn_mount_plan *p, const char *at, char *source, int rw)
{
  const char *what = source ? source : at;
  struct stat st;
  if (lstat(what, &st) < 0) return 1;
  if (p->nview == SPAWN_MOUNT_VIEW) return -E2BIG;
  struct spawn_mount_view *v = &p->view[p->nview];
  memset(v, 0, sizeof *v);
  v->kind = S_ISLNK(st.st_mode) ? 'l' : S_ISDIR(st.st_mode) ? 'd' : 'f';
  if (v->kind == 'l') {
    ssize_t n = readlink(what, v->target, sizeof v->target - 1);
    if (n < 0 || (size_t)n >= sizeof v->target - 1) return 1;
    v->target[n] = 0;
  }
  v->path = at;
  v->source = source;
  v->rw = rw;
  p->nview++;
  return 0;
}

/* Whether /name (a top-level entry) is a directory above one of the paths
** the child makes or binds itself. */
static int above_own(const struct spawn_mount_plan *p, const char *name)
{
  char top[300];
  snprintf(top, sizeof top, "/%s", name);
  for (int k = 0; k < p->ntrees; k++)
    if (beneath(p->trees[k].at, top)) return 1;
  for (int k = 0; k < p->ntmpfs; k++)
    if (beneath(p->tmpfs[k].at, top)) return 1;
  for (int k = 0; k < p->nview; k++)
    if (!p->view[k].source && beneath(p->view[k].path, top)) return 1;
  return 0;
}

/* A root file system's top-level entries as view paths (read-only, each at
** /NAME), except what the view makes itself (dev, proc, sys, tmp) and any
** directory above the workspace, a kept directory, a tmpfs or one of the
** view's own paths (those come from the host, so the view's root holds them). */
static int plan_rootfs(struct spawn_mount_plan *p, char *err, size_t errlen)
{
  static const char *const own[] = {".", "..", "dev", "proc", "sys", "tmp", NULL};
  const char *rootfs = p->rootfs;
  size_t rl = strlen(rootfs);
  if (rootfs[0] != '/' || rl >= 3800 || rl < 2)
    return refuse(err, errlen, EINVAL,
                  "spawn: a root file system must be an absolute directory other than / "
                  "(got '%s')",
                  rootfs);
  DIR *d = opendir(rootfs);
  if (!d) {
    int e = errno;
    return refuse(err, errlen, e, "rootfs: %s: %s", rootfs, airlock_strerror(e));
  }
  struct dirent *de;
  int rc = 0;
  while (rc == 0 && (de = readdir(d))) {
    int skip = strlen(de->d_name) > 250 || above_own(p, de->d_name);
    for (size_t i = 0; own[i] && !skip; i++) skip = strcmp(de->d_name, own[i]) == 0;
    if (skip) continue;
    char *src = malloc(rl + strlen(de->d_name) + 2), *at = malloc(strlen(de->d_name) + 2);
    if (!src || !at) {
      free(src);
      free(at);
      rc = refuse(err, errlen, ENOMEM, "rootfs: out of memory");
      break;
    }
    sprintf(src, "%s/%s", rootfs, de->d_name);
    sprintf(at, "/%s", de->d_name);
    int added = add_view_path(p, at, src, 0);
    if (added != 0) {
      free(src);
      free(at);
    } /* only an entry in the view owns them */
    if (added == -E2BIG)
      rc = refuse(err, errlen, E2BIG, "rootfs: %s has more than %d entries at its top", rootfs,
                  SPAWN_MOUNT_VIEW);
  }
  closedir(d);
  return rc;
}

/* The view's paths, shortest first, as they are now (a missing one is left
** out: nothing is there to see). Returns 0, or -errno with a message. */
static int plan_view(struct spawn_mount_plan *p, const airlock_spawn_opts *o, char *err, size_t errlen)
{
  int rc;
  for (int rw = 0; rw < 2; rw++) /* the read-only paths first: a writable one of the same path wins */
    for (size_t i = 0; i < o->nmounts; i++) {
      if (o->mounts[i].kind != (rw ? AIRLOCK_MOUNT_VIEW_RW : AIRLOCK_MOUNT_VIEW_RO)) continue;
      const char *path = o->mounts[i].target;
      if (path[0] != '/' || strlen(path) >= 4000 || (path[1] == 0))
        return refuse(err, errlen, EINVAL,
                      "spawn: a view path must be an absolute path other than / (got '%s')", path);
      int skip = 0; /* the workspace and kept directories come in whole, as trees */
      for (int k = 0; k < p->ntrees && !skip; k++) skip = beneath(path, p->trees[k].at);
      for (int k = 0; k < p->nview && !skip; k++) {
        if (strcmp(p->view[k].path, path) == 0) {
          p->view[k].rw |= rw;
          skip = 1;
        }
      }
      if (!skip && add_view_path(p, path, NULL, rw) == -E2BIG)
        return refuse(err, errlen, E2BIG, "spawn: a view holds at most %d paths", SPAWN_MOUNT_VIEW);
    }
  if (p->rootfs && (rc = plan_rootfs(p, err, errlen)) < 0) return rc;
  for (int i = 1; i < p->nview; i++) /* insertion sort by length: parents first */
    for (int j = i; j > 0 && strlen(p->view[j].path) < strlen(p->view[j - 1].path); j--) {
      struct spawn_mount_view t = p->view[j];
      p->view[j] = p->view[j - 1];
      p->view[j - 1] = t;
    }
  if (p->nview == 0) return refuse(err, errlen, ENOENT, "spawn: none of the view's paths exists");
  if (!(o->namespaces & CLONE_NEWNS))
    return refuse(err, errlen, EINVAL, "spawn: a view needs the mount namespace");
  return 0;
}

/* One record checked and taken into p (the view's paths are planned after all
** are in). Returns 0, or -errno with a message. */
static int take_record(struct spawn_mount_plan *p, const airlock_spawn_opts *o, size_t i, int *nkeep,
                       char *err, size_t errlen)
{
  const airlock_mount *m = &o->mounts[i];
  if ((unsigned)m->kind >= AIRLOCK_MOUNT_KIND_COUNT_ || !kind_names[m->kind])
    return refuse(err, errlen, EINVAL, "spawn: mount %zu has an unknown kind (%d)", i + 1, (int)m->kind);
  const char *name = kind_names[m->kind];
  if (m->kind == AIRLOCK_MOUNT_ROOTFS ? !m->source : !m->target)
    return refuse(err, errlen, EINVAL, "spawn: mount %zu (%s) has no %s", i + 1, name,
                  m->kind == AIRLOCK_MOUNT_ROOTFS ? "source" : "target");
  if (!(o->namespaces & CLONE_NEWNS) && m->kind == AIRLOCK_MOUNT_TMPFS)
    return refuse(err, errlen, EINVAL, "spawn: a private tmpfs (%s) needs the mount namespace", m->target);
  switch (m->kind) {
    case AIRLOCK_MOUNT_WORKSPACE:
      if (p->workspace) return refuse(err, errlen, EINVAL, "spawn: a spawn has at most one workspace");
      if (m->target[0] != '/' || strlen(m->target) >= 4096 || !m->target[1])
        return refuse(err, errlen, EINVAL,
                      "spawn: a workspace must be an absolute directory other than /, "
                      "under 4096 bytes");
      p->workspace = m->target;
      break;
    case AIRLOCK_MOUNT_KEEP:
      if (m->target[0] != '/' || strlen(m->target) >= 4096)
        return refuse(err, errlen, EINVAL,
                      "spawn: a kept directory must be an absolute path under 4096 bytes");
      if (++*nkeep > SPAWN_MOUNT_TREES - 1)
        return refuse_step(err, errlen, E2BIG, "more than four kept directories");
      break;
    case AIRLOCK_MOUNT_TMPFS: {
      if (p->ntmpfs == SPAWN_MOUNT_TMPFS)
        return refuse(err, errlen, E2BIG, "spawn: at most %d private tmpfs", SPAWN_MOUNT_TMPFS);
      struct spawn_mount_tmpfs *t = &p->tmpfs[p->ntmpfs++];
      t->at = m->target;
      /* What the child's mount needs, made here where stdio may be used. */
      char size[24];
      snprintf(size, sizeof size, "%lu", AIRLOCK_TMPFS_SIZE_DEFAULT);
      if ((size_t)snprintf(t->data, sizeof t->data, "mode=1777,size=%s,nr_inodes=%lu",
                           m->size ? m->size : size,
                           m->inodes ? m->inodes : AIRLOCK_TMPFS_INODES_DEFAULT) >= sizeof t->data)
        return refuse_step(err, errlen, EINVAL, "tmpfs size");
      break;
    }
    case AIRLOCK_MOUNT_VIEW_RO:
    case AIRLOCK_MOUNT_VIEW_RW: p->viewed = 1; break;
    case AIRLOCK_MOUNT_ROOTFS:
      if (p->rootfs) return refuse(err, errlen, EINVAL, "spawn: a spawn has at most one root file system");
      p->rootfs = m->source;
      p->viewed = 1;
      break;
    case AIRLOCK_MOUNT_PROTECT:
      if (p->nprotect >= AIRLOCK_PROTECT_MAX || m->target[0] != '/' || strlen(m->target) >= 4096)
        return refuse(err, errlen, EINVAL,
                      "spawn: tool.protect: protected paths must be at most %d absolute paths "
                      "beneath the workspace (%s)",
                      AIRLOCK_PROTECT_MAX, m->target);
      p->protect[p->nprotect++] = m->target;
      break;
    case AIRLOCK_MOUNT_OVERLAY: {
      if (p->overlay) return refuse(err, errlen, EINVAL, "spawn: a spawn has at most one overlay");
      const char *sz = m->size;
      size_t zl = sz ? strlen(sz) : 0;
      if (zl == 0 || zl >= sizeof p->overlay_.size || strspn(sz, "0123456789") == 0 ||
          sz[strspn(sz, "0123456789") + strspn(sz + strspn(sz, "0123456789"), "kKmMgG")] != 0 ||
          m->inodes == 0 || m->inodes > 100000000ul)
        return refuse(err, errlen, EINVAL,
                      "spawn: an overlay needs a size (digits, then k, m or g) and a number of "
                      "files from 1 to 100000000 for its writable layer");
      p->overlay = &p->overlay_;
      memcpy(p->overlay_.size, sz, zl + 1);
      snprintf(p->overlay_.inodes, sizeof p->overlay_.inodes, "%lu", m->inodes + AIRLOCK_OVERLAY_OWN_INODES);
      break;
    }
    default: break;
  }
  return 0;
}

int spawn_mount_plan(struct spawn_mount_plan *p, const airlock_spawn_opts *o, airlock_spawn_step *code,
                     char *err, size_t errlen)
{
  int rc, nkeep = 0;
  memset(p, 0, sizeof *p);
  *code = AIRLOCK_STEP_MOUNT;
  p->ruleset = p->idmap_fd = -1;
  if (o->nmounts && !o->mounts)
    return refuse(err, errlen, EINVAL, "spawn: nmounts is %zu but mounts is NULL", o->nmounts);
  /* Too many protected paths is tool.protect's failure, however long the list. */
  size_t nprotect = 0;
  for (size_t i = 0; i < o->nmounts; i++) nprotect += o->mounts[i].kind == AIRLOCK_MOUNT_PROTECT;
  if (nprotect > AIRLOCK_PROTECT_MAX) {
    *code = AIRLOCK_STEP_PROTECT;
    return refuse(err, errlen, EINVAL,
                  "spawn: tool.protect: protected paths must be at most %d absolute paths "
                  "beneath the workspace (%zu given)",
                  AIRLOCK_PROTECT_MAX, nprotect);
  }
  if (o->nmounts > AIRLOCK_MOUNTS_MAX)
    return refuse(err, errlen, E2BIG, "spawn: at most %d mounts (got %zu)", AIRLOCK_MOUNTS_MAX, o->nmounts);
  for (size_t i = 0; i < o->nmounts; i++)
    if ((rc = take_record(p, o, i, &nkeep, err, errlen)) < 0) {
      if (o->mounts[i].kind == AIRLOCK_MOUNT_PROTECT) *code = AIRLOCK_STEP_PROTECT;
      return rc;
    }
  /* Protected paths lie beneath the workspace. */
  size_t wl = p->workspace ? strlen(p->workspace) : 0;
  for (size_t i = 0; i < p->nprotect; i++)
    if (!p->workspace || strncmp(p->protect[i], p->workspace, wl) != 0 || p->protect[i][wl] != '/') {
      *code = AIRLOCK_STEP_PROTECT;
      return refuse(err, errlen, EINVAL,
                    "spawn: tool.protect: protected paths must be at most %d absolute paths "
                    "beneath the workspace (%s)",
                    AIRLOCK_PROTECT_MAX, p->protect[i]);
    }
  if (p->workspace && !(o->namespaces & CLONE_NEWNS))
    return refuse_step(err, errlen, EINVAL, "a workspace needs a workdir and the mount namespace");
  if (p->overlay) {
    const char *target = NULL;
    for (size_t i = 0; i < o->nmounts; i++)
      if (o->mounts[i].kind == AIRLOCK_MOUNT_OVERLAY) target = o->mounts[i].target;
    if (!p->workspace || strcmp(target, p->workspace) != 0)
      return refuse(err, errlen, EINVAL,
                    "spawn: an overlay covers the workspace: its target must be the "
                    "workspace's");
    /* The program is the caller's identity on the workspace (idmapped, or
    ** in the caller's user namespace): a root it does not own grants it no
    ** owner's rights in the bind mode, nor may upper/ (overlay_workspace). */
    struct stat ws;
    int known = stat(p->workspace, &ws) == 0;
    p->overlay_.not_owner = !known || ws.st_uid != geteuid();
    p->overlay_.not_group = !known || ws.st_gid != getegid();
  }
  if (p->workspace) p->trees[p->ntrees++] = (struct spawn_mount_tree){p->workspace, -1, 1};
  /* A kept directory matters below a tmpfs, or in a view (elsewhere it is
  ** visible anyway). */
  for (size_t i = 0; i < o->nmounts; i++) {
    if (o->mounts[i].kind != AIRLOCK_MOUNT_KEEP) continue;
    p->trees[p->ntrees] = (struct spawn_mount_tree){o->mounts[i].target, -1, 0};
    p->ntrees += p->viewed || under_tmpfs(p, o->mounts[i].target) >= 0;
  }
  for (int k = 0; k < p->ntrees; k++) p->trees[k].under = under_tmpfs(p, p->trees[k].at);
  if (p->viewed && (rc = plan_view(p, o, err, errlen)) < 0) return rc;
  p->proc = (o->namespaces & CLONE_NEWPID) != 0;
  return 0;
}

int spawn_mount_any(const struct spawn_mount_plan *p)
{
  return p->ntmpfs || p->ntrees || p->nview;
}

void spawn_mount_plan_free(struct spawn_mount_plan *p)
{
  for (int i = 0; i < p->nview; i++)
    if (p->view[i].source) {
      free(p->view[i].source);
      free((char *)p->view[i].path);
    }
  p->nview = 0;
}

/* ------------------------------------------------------------ the child's mounts */

#define FAIL(what)  \
  do {              \
    *step = (what); \
    return -errno;  \
  } while (0)
#define TRY(call)          \
  do {                     \
    int e_ = (call);       \
    if (e_ < 0) return e_; \
  } while (0)
#define CHILD __attribute__((no_sanitize("address", "undefined")))

/* mkdir -p of dir below the directory top (which it lies beneath); with own,
** the new directories are the run's when the parent is root (they are on its
** private /tmp). */
CHILD static int mkdir_below(const struct spawn_mount_plan *p, const char *top, const char *at, int own,
                             const char **step)
{
  char dir[PATH_BUF];
  size_t dl = strlen(at);
  memcpy(dir, at, dl + 1);
  for (size_t j = strlen(top) + 1; j <= dl; j++) {
    if (dir[j] != '/' && dir[j] != 0) continue;
    dir[j] = 0;
    if (mkdir(dir, 0755) == 0) {
      if (own && p->root && chown(dir, AIRLOCK_RUN_UID, AIRLOCK_RUN_GID) < 0) FAIL("chown(mount point)");
    } else if (errno != EEXIST) {
      FAIL("mkdir(mount point)");
    }
    if (j < dl) dir[j] = '/';
  }
  return 0;
}

/* pre followed by path, into buf (the parent bounded both). */
CHILD static const char *under(char buf[PATH_BUF], const char *pre, const char *path)
{
  size_t pl = strlen(pre), n = strlen(path);
  memcpy(buf, pre, pl);
  memcpy(buf + pl, path, n + 1);
  return buf;
}

/* Clones the tree at path (before anything hides it) and sets attr on it:
** the fd, or -errno and *step. */
CHILD static int clone_tree(const char *path, struct mount_attr *a, const char *what, const char **step)
{
  int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (fd < 0) FAIL(what);
  if (a->attr_set && syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, a, sizeof *a) < 0)
    FAIL(what);
  return fd;
}

/* Grants the directory at path in the Landlock ruleset: read and write, or read. */
CHILD static int grant(const struct spawn_mount_plan *p, const char *path, int rw, const char *open_step,
                       const char *rule_step, const char **step)
{
  int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) FAIL(open_step);
  int e = rw ? airlock_confine_prepared_grant_rw(p->confine, p->ruleset, fd)
             : airlock_confine_prepared_grant_read(p->confine, p->ruleset, fd);
  close(fd);
  if (e < 0) {
    errno = -e;
    FAIL(rule_step);
  }
  return 0;
}

/* The overlay over the workspace: a new tmpfs bounded by the plan (its
** writable layer: upper/ and work/, upper/ given the owner and mode of the
** workspace's root, which the overlay's root shows), the cloned workspace
** *lower below it, mounted detached (nosuid, nodev) into *lower in its place.
** The tmpfs goes to the parent over overlay_w before anything else can fail
** late: it outlives this mount namespace for the parent to read. */
CHILD static int overlay_workspace(const struct spawn_mount_plan *p, int *lower, const char **step)
{
  struct stat st;
  if (fstat(*lower, &st) < 0) FAIL("overlay: stat the workspace");
  int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
  if (fs < 0) FAIL("overlay: fsopen(tmpfs)");
  if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", p->overlay->size, 0) < 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "nr_inodes", p->overlay->inodes, 0) < 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0700", 0) < 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
    FAIL("overlay: configure the writable layer's tmpfs (fsconfig)");
  /* noatime: reading the change set (hashing, keeping, applying) must not
  ** stamp the access times the program left, which are applied with it. */
  int layer = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                           MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOATIME);
  close(fs);
  if (layer < 0) FAIL("overlay: fsmount(tmpfs)");
  if (mkdirat(layer, "upper", 0700) < 0 || mkdirat(layer, "work", 0700) < 0)
    FAIL("overlay: mkdir(upper, work)");
  /* The owner's and the group's rights are the others' where the program is
  ** not them on the workspace: an unmapped owner shows as the overflow id,
  ** which may be the program's own. */
  mode_t mode = st.st_mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID), other = mode & 07;
  if (p->overlay->not_owner) mode = (mode & ~(mode_t)0700) | other << 6;
  if (p->overlay->not_group) mode = (mode & ~(mode_t)0070) | other << 3;
  if (fchownat(layer, "upper", st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0 ||
      fchmodat(layer, "upper", mode, 0) < 0)
    FAIL("overlay: give upper/ the workspace's owner and mode");
  /* Handed over first: the parent never runs a program whose layer it lacks. */
  if (airlock_fd_send(p->overlay_w, layer, 'O', MSG_NOSIGNAL) < 0)
    FAIL("overlay: hand the writable layer to the parent");
  int up = openat(layer, "upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int work = openat(layer, "work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  close(layer);
  if (up < 0 || work < 0) FAIL("overlay: open(upper, work)");
  int ov = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
  if (ov < 0) FAIL("overlay: fsopen(overlay)");
  /* userxattr: its marks are user.overlay.* (trusted.* needs the host's
  ** CAP_SYS_ADMIN), which leaves redirect_dir and metacopy off: a renamed
  ** directory is copied up whole, a renamed file is a removal and a new file. */
  if (syscall(SYS_fsconfig, ov, FSCONFIG_SET_FD, "lowerdir+", NULL, *lower) < 0 ||
      syscall(SYS_fsconfig, ov, FSCONFIG_SET_FD, "upperdir", NULL, up) < 0 ||
      syscall(SYS_fsconfig, ov, FSCONFIG_SET_FD, "workdir", NULL, work) < 0 ||
      syscall(SYS_fsconfig, ov, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0 ||
      syscall(SYS_fsconfig, ov, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
    FAIL("overlay: configure the overlay (fsconfig lowerdir+, upperdir, workdir, userxattr)");
  int m = (int)syscall(SYS_fsmount, ov, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  close(ov);
  close(up);
  close(work);
  if (m < 0) FAIL("overlay: fsmount(overlay)");
  /* The parent holds the mount too, so that its teardown (every inode the
  ** program's lookups made) is not airlock-init's exit's (core/release.c). */
  if (airlock_fd_send(p->overlay_w, m, 'M', MSG_NOSIGNAL) < 0)
    FAIL("overlay: hand the overlay to the parent");
  close(*lower);
  *lower = m;
  return 0;
}

/* The workspace and kept directories cloned, into fds. */
CHILD static int clone_trees(const struct spawn_mount_plan *p, int fds[SPAWN_MOUNT_TREES], const char **step)
{
  for (int i = 0; i < p->ntrees; i++) {
    const struct spawn_mount_tree *t = &p->trees[i];
    struct mount_attr a = {.attr_set = t->rw ? MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                                             : MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
    if (t->rw && p->idmap_fd >= 0) {
      a.attr_set |= MOUNT_ATTR_IDMAP;
      a.userns_fd = (unsigned)p->idmap_fd;
    }
    fds[i] = clone_tree(t->at, &a,
                        !t->rw             ? "clone the kept directory (open_tree, mount_setattr)"
                        : p->idmap_fd >= 0 ? "idmap the workspace (mount_setattr MOUNT_ATTR_IDMAP)"
                                           : "clone the workspace (open_tree, mount_setattr)",
                        step);
    if (fds[i] < 0) return fds[i];
    if (t->rw && p->overlay) TRY(overlay_workspace(p, &fds[i], step));
  }
  return 0;
}

/* The view's root: a new tmpfs at VIEW_STAGE holding each of its paths, cloned
** first (before the tmpfs hides them). */
CHILD static int build_view(const struct spawn_mount_plan *p, const char **step)
{
  int vfds[SPAWN_MOUNT_VIEW];
  char a_buf[PATH_BUF];
  for (int i = 0; i < p->nview; i++) {
    const struct spawn_mount_view *v = &p->view[i];
    /* A root file system's entries are nodev too: an image may hold device nodes. */
    struct mount_attr a = {.attr_set = MOUNT_ATTR_NOSUID | (v->rw ? 0 : MOUNT_ATTR_RDONLY) |
                                       (v->source ? MOUNT_ATTR_NODEV : 0)};
    vfds[i] = v->kind == 'l' ? -1
                             : clone_tree(v->source ? v->source : v->path, &a,
                                          "clone a path of the view (open_tree)", step);
    if (v->kind != 'l' && vfds[i] < 0) return vfds[i];
  }
  if (mount("tmpfs", VIEW_STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096") < 0)
    FAIL("mount(the view's root tmpfs)");
  for (int i = 0; i < p->nview; i++) { /* shortest first: a nested path lands on its parent */
    const struct spawn_mount_view *v = &p->view[i];
    under(a_buf, VIEW_STAGE, v->path);
    TRY(mkdir_below(p, VIEW_STAGE, a_buf, 0, step)); /* the path itself too; a file's is replaced below */
    if (v->kind == 'l') {
      if (rmdir(a_buf) < 0 || symlink(v->target, a_buf) < 0) FAIL("symlink(a path of the view)");
      continue;
    }
    if (v->kind == 'f') {
      int fd;
      if (rmdir(a_buf) < 0 || (fd = open(a_buf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) < 0)
        FAIL("create a file's mount point in the view");
      close(fd);
    }
    if (syscall(SYS_move_mount, vfds[i], "", AT_FDCWD, a_buf, MOVE_MOUNT_F_EMPTY_PATH) < 0)
      FAIL("move_mount(a path of the view)");
    close(vfds[i]);
  }
  return 0;
}

/* A /proc of the run's own pid namespace at pre/proc: the host's shows every
** host pid (stat answers even where Landlock forbids reading). Readable, as
** bubblewrap's --proc is: it shows the run's own processes alone (ps, a
** runtime reading /proc/self); the parent could not name it. */
CHILD static int mount_proc(const struct spawn_mount_plan *p, const char *pre, const char **step)
{
  char a_buf[PATH_BUF];
  under(a_buf, pre, "/proc");
  if (p->nview) TRY(mkdir_below(p, pre, a_buf, 0, step));
  if (mount("proc", a_buf, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
    FAIL("mount(/proc of the run's pid namespace)");
  if (p->ruleset >= 0) TRY(grant(p, a_buf, 0, "open(/proc)", "landlock_add_rule(/proc)", step));
  return 0;
}

/* Each tmpfs, with the mount points of the trees beneath it (the run's), each
** granted read and write in the Landlock ruleset (the parent could only have
** named the directory underneath). */
CHILD static int mount_tmpfs(const struct spawn_mount_plan *p, const char *pre, const char **step)
{
  char a_buf[PATH_BUF], b_buf[PATH_BUF];
  for (int i = 0; i < p->ntmpfs; i++) {
    under(a_buf, pre, p->tmpfs[i].at);
    if (p->nview) TRY(mkdir_below(p, pre, a_buf, 0, step));
    if (mount("tmpfs", a_buf, "tmpfs", MS_NOSUID | MS_NODEV, p->tmpfs[i].data) < 0) FAIL("mount(tmpfs)");
    for (int k = 0; k < p->ntrees; k++)
      if (p->trees[k].under == (long)i)
        TRY(mkdir_below(p, a_buf, under(b_buf, pre, p->trees[k].at), 1, step));
    if (p->ruleset >= 0) TRY(grant(p, a_buf, 1, "open(tmpfs)", "landlock_add_rule(tmpfs)", step));
  }
  return 0;
}

/* The cloned trees back at their paths. */
CHILD static int place_trees(const struct spawn_mount_plan *p, const char *pre,
                             const int fds[SPAWN_MOUNT_TREES], const char **step)
{
  char a_buf[PATH_BUF];
  for (int i = 0; i < p->ntrees; i++) {
    under(a_buf, pre, p->trees[i].at);
    if (p->nview && p->trees[i].under < 0) TRY(mkdir_below(p, pre, a_buf, 0, step));
    if (syscall(SYS_move_mount, fds[i], "", AT_FDCWD, a_buf, MOVE_MOUNT_F_EMPTY_PATH) < 0)
      FAIL(p->trees[i].rw ? "move_mount(workspace)" : "move_mount(kept directory)");
    close(fds[i]);
    /* An overlay's inodes are its own: Landlock's rules for the workspace
    ** (on the host's inode) do not reach beneath it in a view. */
    if (p->trees[i].rw && p->overlay && p->ruleset >= 0)
      TRY(grant(p, a_buf, 1, "open(the overlaid workspace)", "landlock_add_rule(the overlaid workspace)",
                step));
  }
  return 0;
}

/* The mounts of the child's own mount namespace, made while it still has the
** privilege. The root is made rprivate (nothing reaches the host). The
** workspace, the kept directories and, with a view, each of its paths are
** cloned before anything hides them: the workspace nosuid and nodev
** (idmapped to the caller when root), the kept ones and the view's read-only
** ones read-only. With a view the child's root becomes a new, empty tmpfs
** holding those clones alone at their paths (pivot_root), so what the policy
** does not name is not there at all: not for reading, nor for stat, inotify
** or locks; without one, with a workspace, the whole tree is made read-only
** instead. Then the tmpfs, the trees, a pid namespace's /proc and the
** protected paths. */
CHILD int spawn_mount_run(const struct spawn_mount_plan *p, const char **step, airlock_spawn_step *code)
{
  int fds[SPAWN_MOUNT_TREES];
  char a_buf[PATH_BUF];
  const char *pre = p->nview ? VIEW_STAGE : "";
  *code = AIRLOCK_STEP_MOUNT;
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) FAIL("mount(/, MS_REC|MS_PRIVATE)");
  /* Over an overlay, the protected paths are the real workspace's, found
  ** here before the overlay covers it (the mount it is on stays attached). */
  int realfd = -1;
  if (p->overlay && p->held && (realfd = open(p->workspace, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
    FAIL("tool.protect: open the real workspace beneath the overlay");
  TRY(clone_trees(p, fds, step));
  if (p->nview) {
    TRY(build_view(p, step));
  } else if (p->workspace) {
    /* Everything else read-only: Landlock does not cover chmod, chown, utimes
    ** or xattrs, and a caller who is not root stays the owner of its own
    ** files; a read-only mount refuses all of them (EROFS). The clones above
    ** are not attached, so the workspace stays writable. */
    struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID}; /* devices stay: /dev/null */
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof ro) < 0)
      FAIL("mount_setattr(/, read-only)");
  }
  if ((p->nview || p->workspace) && p->proc) TRY(mount_proc(p, pre, step));
  TRY(mount_tmpfs(p, pre, step));
  TRY(place_trees(p, pre, fds, step));
  /* Protected paths inside the workspace, now it is in place (spawn_protect.c):
  ** each a read-only bind of itself, the directories above it binds of
  ** themselves, so the program can neither change them nor add to them,
  ** remove or rename them (a mount point is busy). */
  if (p->held) {
    *code = AIRLOCK_STEP_PROTECT;
    int wfd = open(under(a_buf, pre, p->workspace), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (wfd < 0) FAIL("tool.protect: open the workspace");
    int e = airlock_protect_mask(p->held, wfd, realfd, step);
    close(wfd);
    if (realfd >= 0) close(realfd);
    if (e < 0) {
      errno = -e;
      return e;
    }
    *code = AIRLOCK_STEP_MOUNT;
  }
  if (p->nview) {
    /* The view becomes the root; the old one is let go, then the new root's
    ** own tmpfs made read-only (the program makes nothing at the top). */
    if (chdir(VIEW_STAGE) < 0 || syscall(SYS_pivot_root, ".", ".") < 0) FAIL("pivot_root(the view)");
    if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0) FAIL("umount2(the old root)");
    struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY};
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, &ro, sizeof ro) < 0)
      FAIL("mount_setattr(the view's root, read-only)");
  }
  return 0;
}
