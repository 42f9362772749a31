/*
** overlay_restore.h -- a committed change set undone or done again from the
** contents a session kept (core/overlay_keep.h), by the caller: each file
** and link is first staged from its blob into a private directory of the
** session (its SHA-256 checked as it is copied), then written into the
** workspace through the overlay applier (core/overlay_apply.h: a temporary
** beside its place, one syncfs, a rename into place, every path beneath the
** workspace through no link); a path to be absent is removed through no
** link; a directory to be made is made (one already there is kept), one to
** be absent is removed only when empty (one that holds anything is left:
** nothing the records do not name is removed). Nothing is written to the
** workspace until every blob is staged and checked.
*/
#ifndef AIRLOCK_OVERLAY_RESTORE_H
#define AIRLOCK_OVERLAY_RESTORE_H

#include <stddef.h>

enum { AIRLOCK_RESTORE_NONE = 0, AIRLOCK_RESTORE_FILE, AIRLOCK_RESTORE_LINK, AIRLOCK_RESTORE_DIR };

typedef struct airlock_overlay_restore_item {
  const char *path;   /* relative to the workspace, checked by the caller */
  int kind;           /* AIRLOCK_RESTORE_*: what the path is to hold */
  const char *sha256; /* a file's content or a link's text: its blob's name (64 hex) */
  const char *text;   /* a link's text itself (no blob read), or NULL */
  unsigned mode;      /* a file's or directory's permission bits */
} airlock_overlay_restore_item;

/* Puts items[0..n) into the workspace at ws_fd from the blobs of session_fd.
** Returns 0; 1 when it refused before writing anything (a blob missing, not
** a regular file, or not of its hash; the reason in err); or -errno with a
** message in err. A failure while adding (a directory made, a file staged
** beside its place: a full disk, say) undoes what was added, and err ends
** "nothing in the workspace was changed". So does a failure of a rename or
** a removal after those (an I/O error, an immutable file): each file or
** link was put in place by exchanging it with what was there, and each one
** removed was renamed aside, both kept until every step was taken, so the
** steps before it are undone too; only when an undoing fails as well does
** err say the workspace holds part of the restore, and where. (A file
** system that cannot exchange names replaces for good, as a rename.) */
int airlock_overlay_restore(int ws_fd, int session_fd, const airlock_overlay_restore_item *items, size_t n,
                            char *err, size_t errlen);

/* What the workspace holds at path (through no link): kind (0 absent, 1 a
** regular file, 2 a link, 3 anything else, 4 a directory), the SHA-256 of
** a file's content or a link's text in hex[65], and its permission bits. 0
** or -errno. */
int airlock_overlay_look(int ws_fd, const char *path, int *kind, char hex[65], unsigned *mode);

#endif
