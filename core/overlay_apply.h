/*
** overlay_apply.h -- one change of an overlaid workspace applied to the real
** workspace by the trusted parent, as the layer holds it now (the path is
** all it takes from its caller): every path opened beneath the workspace's
** and the layer's own descriptors with openat2(RESOLVE_BENEATH |
** RESOLVE_NO_SYMLINKS), so neither a link the program made nor one in the
** workspace is followed; a file written to a temporary name beside its place,
** synced, then renamed into place (the workspace holds the file as it was or
** as it is, never a part); the access and modification times the program
** left kept (a file's and a link's when staged, a directory's once what is
** beneath it is placed: `make` and `tar` see the times they would have seen
** in the bind mode); setuid, setgid and sticky bits stripped; device
** nodes, fifos and sockets refused; a change that would replace a directory
** with a file or link refused.
*/
#ifndef AIRLOCK_OVERLAY_APPLY_H
#define AIRLOCK_OVERLAY_APPLY_H

#include <stddef.h>

/* A file or link written under a temporary name beside its place, waiting
** to be renamed there (airlock_overlay_place). */
typedef struct airlock_overlay_staged {
  int dirfd;      /* its directory in the workspace, or -1: nothing staged */
  char tmp[64];   /* the temporary's name there */
  char base[256]; /* its own name there */
  int dir_times;  /* a directory made or changed: its times to set by airlock_overlay_dir_times */
} airlock_overlay_staged;

/* The first step of applying the change at path (relative, as
** airlock_overlay_changes gave it) from layer_fd's upper/ to the workspace
** at ws_fd (a directory opened O_RDONLY): a directory is made (or emptied,
** when opaque) and a deletion done now; a file or link is written under a
** temporary name beside its place, into *st, for airlock_overlay_place once
** every change is staged and the file system synced (one syncfs, not one
** fsync per file). Returns 0, 1 when it was refused (the reason in err), or
** -errno with a message in err. */
int airlock_overlay_stage(int layer_fd, int ws_fd, const char *path, airlock_overlay_staged *st, char *err,
                          size_t errlen);
/* syncfs of the workspace's file system: what was staged is on disk. */
int airlock_overlay_sync(int ws_fd);
/* Renames a staged file or link into place and lets st go (also on failure,
** removing the temporary). Returns 0 or -errno with a message in err. */
int airlock_overlay_place(airlock_overlay_staged *st, const char *path, char *err, size_t errlen);
/* Lets a staged file go without placing it (its temporary removed). */
void airlock_overlay_unstage(airlock_overlay_staged *st);
/* The access and modification times of the directory at path in the layer
** given to the same directory of the workspace (both opened through no link):
** for a directory change (st->dir_times), once every change is placed, since
** placing one beneath it sets its time. Returns 0 or -errno with a message. */
int airlock_overlay_dir_times(int layer_fd, int ws_fd, const char *path, char *err, size_t errlen);

#endif
