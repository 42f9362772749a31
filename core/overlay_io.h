/*
** overlay_io.h -- what the overlay's applier, keeper and restorer share: the
** one way they open a path (beneath a directory, through no link), the one
** copy loop (bounded, optionally hashed with SHA-256 and kept in memory), the
** hash's text and their error messages.
*/
#ifndef AIRLOCK_OVERLAY_IO_H
#define AIRLOCK_OVERLAY_IO_H

#include <stddef.h>
#include <stdint.h>

/* dir (relative; "" is base itself) beneath base through no link (openat2
** RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), opened as
** flags | O_NOFOLLOW | O_CLOEXEC, or -1 with errno. */
int airlock_overlay_open_beneath(int base, const char *dir, int flags);

/* What airlock_overlay_copy does besides reading. */
typedef struct airlock_overlay_sink {
  int out;    /* written here, or -1 */
  int hash;   /* hashed with SHA-256 into hex */
  char *keep; /* kept here, up to cap bytes (*kept set), or NULL */
  size_t cap;
  size_t *kept;
  char hex[65]; /* the hash, when hash */
} airlock_overlay_sink;

/* Reads src until size bytes (AIRLOCK_OVERLAY_TO_END: to its end) into the
** sink. 0, or -errno: EIO when src ends before size (what follows size is
** not read), EFBIG when more than cap would be kept, ENOMEM. */
#define AIRLOCK_OVERLAY_TO_END UINT64_MAX
int airlock_overlay_copy(int src, uint64_t size, airlock_overlay_sink *sink);

/* The regular file src, exactly size bytes long, into out (a new, empty
** file) with its holes kept: only the data SEEK_DATA and SEEK_HOLE find is
** written, then out is sized; so a sparse file takes no more room applied
** than in the layer. 0, or -errno: EIO when src is not size long. */
int airlock_overlay_copy_sparse(int src, uint64_t size, int out);

/* All n bytes at p written to fd: 0 or -errno. */
int airlock_overlay_write_all(int fd, const char *p, size_t n);

/* SHA-256 of n bytes at p, as 64 hex digits: 0 or -EIO. */
int airlock_overlay_hash(const void *p, size_t n, char hex[65]);

/* A message into err (errlen bytes); returns rc. */
__attribute__((format(printf, 4, 5))) int airlock_overlay_say(char *err, size_t errlen, int rc,
                                                              const char *fmt, ...);

#endif
