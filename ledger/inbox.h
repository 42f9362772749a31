/*
** inbox.h -- the client's frames as airlock-ledgerd reads them: as many
** bytes as the socket holds in one read (a producer's queued appends arrive
** as one batch), frames taken from that buffer in place. Lengths are bounded
** before anything is allocated for them.
*/
#ifndef AIRLOCK_LEDGER_INBOX_H
#define AIRLOCK_LEDGER_INBOX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
  uint8_t *buf;
  size_t cap, pos, len; /* bytes [pos, len) are read and not yet taken */
  uint32_t max;         /* the largest body accepted */
  int drained;          /* the last read took less than there was room for */
} ledger_inbox;

/* An empty inbox for bodies of at most max bytes; -ENOMEM. */
int ledger_inbox_init(ledger_inbox *in, uint32_t max);
/* The next whole frame already read: 1 with its body (valid until the next
** ledger_inbox_fill), 0 when none is whole yet, -EMSGSIZE (*len: the length
** it declares, over max) or -EPROTO (a zero length). */
int ledger_inbox_next(ledger_inbox *in, const uint8_t **body, uint32_t *len);
/* One read from the socket fd, without blocking: the bytes read (> 0), 0 at
** its end, -EAGAIN when it holds nothing now, or -errno. */
ssize_t ledger_inbox_fill(ledger_inbox *in, int fd);
/* 1 when bytes of a frame not yet whole are held. */
int ledger_inbox_partial(const ledger_inbox *in);

#endif
