/*
** overlay_keep.h -- the contents a committed change set needs to be undone
** and done again, kept in the ledger's session directory before the set is
** applied: each new regular file as the writable layer holds it and each
** file's or link's previous state as the real workspace holds it (its
** pre-image), as blobs named by their SHA-256 (blobs/ab/abcdef...), by the
** trusted parent. Nothing is followed: the workspace and the layer are read
** through openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), a link's text is
** kept as its content, and a blob is written to a temporary name in the
** session's blobs/ (O_EXCL, O_NOFOLLOW, mode 0600); when all are written,
** one syncfs, each renamed to its name, and one syncfs more. Their bytes are counted against the session's
*bound before one
** is written.
*/
#ifndef AIRLOCK_OVERLAY_KEEP_H
#define AIRLOCK_OVERLAY_KEEP_H

#include <stddef.h>
#include <stdint.h>

enum {
  AIRLOCK_BEFORE_NONE = 0,
  AIRLOCK_BEFORE_FILE,
  AIRLOCK_BEFORE_LINK,
  AIRLOCK_BEFORE_DIR,
  AIRLOCK_BEFORE_OTHER
};

typedef struct airlock_overlay_kept {
  const char *path; /* relative to the workspace, as airlock_overlay_changes gave it */
  int want_new;     /* keep the layer's regular file at path */
  /* Filled in: */
  char sha256[65];        /* the new content's blob, or "" */
  char before_sha256[65]; /* the previous file's content or link's text, or "" */
  int before_kind;        /* AIRLOCK_BEFORE_* */
  unsigned before_mode;   /* permission bits of what was there */
  uint64_t size, before_size;
} airlock_overlay_kept;

/* Keeps the contents of items[0..n) from layer_fd's upper/ and the workspace
** at ws_fd into session_fd's blobs/. max_bytes (0: unbounded) bounds what the
** session directory holds (its journal and segments, the blobs there
** already, and every content to keep, each counted as new). Returns 0; 1
** when keeping them would pass max_bytes (nothing written; the message in
** err names ledger.max_bytes); or -errno with a message in err (blobs
** already written stay: each is whole, named by its content). */
int airlock_overlay_keep(int layer_fd, int ws_fd, int session_fd, airlock_overlay_kept *items, size_t n,
                         uint64_t max_bytes, char *err, size_t errlen);

#endif
