/*
** overlay_changes.h -- the change set of an overlaid workspace
** (AIRLOCK_MOUNT_OVERLAY), read by the trusted parent from the writable
** layer the child handed over, after the run: every entry of upper/ seen
** with fstatat(AT_SYMLINK_NOFOLLOW) and opened with O_NOFOLLOW, so no link
** the program made is followed; the real workspace looked at beneath its
** own descriptor (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS).
*/
#ifndef AIRLOCK_OVERLAY_CHANGES_H
#define AIRLOCK_OVERLAY_CHANGES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define AIRLOCK_OVERLAY_DEPTH 128 /* directories deep, then the walk refuses */

typedef enum airlock_overlay_kind {
  AIRLOCK_CHANGE_CREATED,  /* a regular file the workspace did not have */
  AIRLOCK_CHANGE_MODIFIED, /* a regular file it had (content or mode changed) */
  AIRLOCK_CHANGE_DELETED,  /* removed (a whiteout: a 0/0 character device) */
  AIRLOCK_CHANGE_SYMLINK,  /* a symbolic link made or changed (target: its text) */
  AIRLOCK_CHANGE_DIR,      /* a directory made (or an opaque one: replaced whole) */
  AIRLOCK_CHANGE_SPECIAL,  /* a device node, fifo or socket: never applied */
} airlock_overlay_kind;

typedef struct airlock_overlay_change {
  const char *path; /* relative to the workspace, no leading '/' */
  airlock_overlay_kind kind;
  mode_t mode;   /* the layer's mode bits (type and permissions, setuid included) */
  uint64_t size; /* a regular file's size */
  unsigned long nlink;
  const char *target; /* a symbolic link's text, else NULL */
  int opaque;         /* a directory that replaces the workspace's whole */
  int replaces;       /* the workspace has this path as another type of file */
} airlock_overlay_change;

/* Calls fn for each change beneath layer_fd's upper/ (parents before their
** children), with ws_fd the real workspace (an O_PATH directory). fn returns
** 0 to go on, else the walk stops and returns that. Returns 0, or -errno
** with a message in err (an entry it cannot read, deeper than
** AIRLOCK_OVERLAY_DEPTH, a path over PATH_MAX; EFBIG when the regular files'
** lengths add up to more than the layer's size, sparse files counted whole,
** checked before fn is called for the file that passes it). */
int airlock_overlay_changes(int layer_fd, int ws_fd, int (*fn)(const airlock_overlay_change *, void *),
                            void *ud, char *err, size_t errlen);

/* The kind's word: "created", "modified", "deleted", "symlink", "dir", "special". */
const char *airlock_overlay_kind_name(airlock_overlay_kind k);

#endif
