/*
** spawn_protect.h -- tool.protect for the spawner (internal): the paths of a
** workspace a program may read but not change, including ones that do not
** exist when it starts.
**
**   parent, before the child:  airlock_protect_hold   looks at every path
**       beneath the workspace without following a symbolic link; a missing
**       one (and its missing parents) gets an empty placeholder, made under
**       a temporary name, marked (xattr AIRLOCK_PROTECT_MARK) and share-locked
**       before it appears at its name. Every protected path is share-locked
**       (flock) for the run, so a concurrent run never removes one in use.
**   child, workspace mounted:  airlock_protect_mask   binds every directory
**       between the workspace and a protected path onto itself (it can then
**       be neither renamed nor removed), then each protected path onto itself
**       read-only, after checking it is still the inode the parent found.
**   parent, child gone:        airlock_protect_release   removes each
**       placeholder (deepest first) if no other run holds it, it is still
**       the marked, empty inode at its name; otherwise leaves it.
*/
#ifndef AIRLOCK_SPAWN_PROTECT_H
#define AIRLOCK_SPAWN_PROTECT_H

#include <stddef.h>
#include <sys/types.h>

#define AIRLOCK_PROTECT_MAX       128 /* protected paths a run may have */
#define AIRLOCK_PROTECT_MAX_HELD  256 /* paths held: protected ones and the parents made for them */
#define AIRLOCK_PROTECT_MAX_BINDS 256 /* directories bound onto themselves above them */
#define AIRLOCK_PROTECT_MARK      "user.airlock.placeholder"

struct airlock_protect_path {
  char *rel; /* beneath the workspace, no trailing slash (owned) */
  dev_t dev;
  ino_t ino;       /* the inode the child must find there */
  int fd;          /* O_RDONLY, share-locked for the run, or -1 (not a file or directory) */
  int dirfd;       /* a placeholder's parent directory (O_PATH), or -1 */
  int placeholder; /* 1: made by this run or left by an earlier one (marked, empty) */
  int dir;
  int masked; /* 1: made read-only in the child; 0: a parent made for one;
                 2: a file a path would lie beneath, bound onto itself */
};

struct airlock_protect {
  int n, nbinds;
  struct airlock_protect_path path[AIRLOCK_PROTECT_MAX_HELD];
  char *binds[AIRLOCK_PROTECT_MAX_BINDS]; /* shallowest first (owned) */
};

/* Looks at (and makes) every path: paths are absolute beneath workdir, a
** trailing '/' asking for a directory placeholder. Returns 0 and *out
** (NULL when paths is empty), or -errno with a message in err naming
** tool.protect; nothing made is left behind on failure. */
int airlock_protect_hold(const char *workdir, const char *const *paths, struct airlock_protect **out,
                         char *err, size_t errlen);

/* In the child (raw system calls only): wsfd is the workspace in the child's
** mount namespace; realfd, where each protected path is found and checked
** (the real workspace when wsfd is an overlay of it: the read-only clone of
** the real one is bound over the overlay's), or -1 for wsfd. Returns 0, or
** -errno and *step. */
int airlock_protect_mask(const struct airlock_protect *h, int wsfd, int realfd, const char **step);

/* Removes what may be removed (see above), closes and frees h (NULL: nothing).
** child_gone 0: the child may still run, so every placeholder stays. */
void airlock_protect_release(struct airlock_protect *h, int child_gone);

/* Whether the child behind pidfd has exited (-1: cannot tell, so no). */
int airlock_protect_child_gone(int pidfd);

#endif
