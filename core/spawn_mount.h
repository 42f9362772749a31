/*
** spawn_mount.h -- a spawn's mount list (airlock_spawn_opts.mounts): checked
** and planned against the host in the parent, carried out by the child.
**
**   parent:  spawn_mount_plan   checks every record, then finds the paths as
**            the host has them now (the view's, a root file system's top
**            entries), each where the child puts it
**   child:   spawn_mount_run    the plan's mounts, in its own mount namespace,
**            with raw system calls only (core/spawn.c's child)
*/
#ifndef AIRLOCK_SPAWN_MOUNT_H
#define AIRLOCK_SPAWN_MOUNT_H

#include "airlock.h"
#include "spawn_protect.h"

#define SPAWN_MOUNT_TREES 5  /* the workspace and up to four kept directories */
#define SPAWN_MOUNT_VIEW  64 /* paths of a view (its VIEW_* records, a root file system's entries) */
#define SPAWN_MOUNT_TMPFS 32 /* TMPFS records */

/* A directory put back at its path after the mounts; the child clones it
** itself (a mount source must be in its own mount namespace). */
struct spawn_mount_tree {
  const char *at;
  long under; /* the tmpfs entry it lies beneath, or -1 */
  int rw;     /* the workspace; the others are read-only */
};

/* A path of the view, as the parent found it. */
struct spawn_mount_view {
  const char *path; /* where it appears */
  char *source;     /* with a root file system: what appears there (owned, and path
                       too), else NULL */
  char kind;        /* 'd' directory, 'f' other file, 'l' symbolic link */
  int rw;
  char target[256]; /* a link's target */
};

struct spawn_mount_tmpfs {
  const char *at;
  char data[64]; /* its mount options */
};

/* The workspace overlaid (an OVERLAY record): the tmpfs of its writable layer. */
struct spawn_mount_overlay {
  char size[32];   /* the tmpfs's "size=" */
  char inodes[24]; /* its "nr_inodes=" */
  int not_owner;   /* the workspace's root is not the caller's (so not the program's) */
  int not_group;   /* nor of the caller's group */
};

/* What the child mounts, in the order spawn_mount_run takes it. */
struct spawn_mount_plan {
  const char *workspace; /* the WORKSPACE record's target, or NULL */
  const char *rootfs;    /* the ROOTFS record's source, or NULL */
  int viewed;            /* a VIEW_* or ROOTFS record: the root is a view */
  struct spawn_mount_tree trees[SPAWN_MOUNT_TREES];
  int ntrees;
  struct spawn_mount_view view[SPAWN_MOUNT_VIEW]; /* shortest path first */
  int nview;
  struct spawn_mount_tmpfs tmpfs[SPAWN_MOUNT_TMPFS];
  int ntmpfs;
  const char *protect[AIRLOCK_PROTECT_MAX + 1]; /* NULL-terminated */
  size_t nprotect;
  /* Set by the spawner before the child runs the plan: */
  int root;    /* the parent is root: made directories are the run's */
  int proc;    /* a /proc of its own (a pid namespace) */
  int ruleset; /* the confinement's Landlock ruleset, or -1 */
  const airlock_confine_prepared *confine;
  int idmap_fd;                        /* the workspace's idmapping namespace, or -1 */
  const struct airlock_protect *held;  /* what airlock_protect_hold held, or NULL */
  struct spawn_mount_overlay *overlay; /* the OVERLAY record's, or NULL (points into overlay_) */
  struct spawn_mount_overlay overlay_;
  int overlay_w; /* with overlay: the child's end of the layer's hand-over socket */
};

/* Checks o's mount list (at most AIRLOCK_MOUNTS_MAX records of known kinds,
** each with what its kind needs, the mount namespace asked for) and plans it
** into p (zeroed first). Returns 0, or -errno with a message in err and the
** step in *code (AIRLOCK_STEP_MOUNT, or AIRLOCK_STEP_PROTECT for a protected
** path). The plan may own memory even on failure: spawn_mount_plan_free in
** every case. */
int spawn_mount_plan(struct spawn_mount_plan *p, const airlock_spawn_opts *o, airlock_spawn_step *code,
                     char *err, size_t errlen);
/* Whether the child has any mount to make. */
int spawn_mount_any(const struct spawn_mount_plan *p);
void spawn_mount_plan_free(struct spawn_mount_plan *p);

/* In the child, before it gives up its privilege: makes the plan's mounts.
** Returns 0, or -errno, *step (a string literal naming what failed) and *code
** (AIRLOCK_STEP_MOUNT, or AIRLOCK_STEP_PROTECT for a protected path). */
int spawn_mount_run(const struct spawn_mount_plan *p, const char **step, airlock_spawn_step *code);

#endif
