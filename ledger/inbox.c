/*
** inbox.c -- the client's frames, read in large chunks (ledger/inbox.h).
** One read takes what the socket holds, up to the buffer; a frame larger
** than the buffer grows it only as its bytes arrive.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "inbox.h"

#define HDR 4
#define CAP (256u << 10) /* the buffer a batch of small frames is read into */

static uint32_t be32(const uint8_t *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int ledger_inbox_init(ledger_inbox *in, uint32_t max)
{
  memset(in, 0, sizeof *in);
  in->max = max;
  in->buf = malloc(CAP);
  if (in->buf == NULL) return -ENOMEM;
  in->cap = CAP;
  return 0;
}

int ledger_inbox_next(ledger_inbox *in, const uint8_t **body, uint32_t *len)
{
  size_t have = in->len - in->pos;
  if (have < HDR) return 0;
  uint32_t n = be32(in->buf + in->pos);
  *len = n;
  /* SECURITY: the declared length is bounded before the buffer grows for it. */
  if (n > in->max) return -EMSGSIZE;
  if (n == 0) return -EPROTO;
  if (have - HDR < n) return 0;
  *body = in->buf + in->pos + HDR;
  in->pos += HDR + (size_t)n;
  if (in->pos == in->len) in->pos = in->len = 0;
  return 1;
}

int ledger_inbox_partial(const ledger_inbox *in)
{
  return in->len > in->pos;
}

/* Room for at least one more byte: the unread bytes move to the front; a
** frame that does not fit doubles the buffer (at most to its own size) only
** once its bytes fill it, so a peer must send about what it makes us hold;
** a buffer grown for a big frame goes back to CAP once it is taken. */
static int make_room(ledger_inbox *in)
{
  if (in->pos > 0) {
    memmove(in->buf, in->buf + in->pos, in->len - in->pos);
    in->len -= in->pos;
    in->pos = 0;
  }
  if (in->len == 0 && in->cap > CAP) {
    uint8_t *p = realloc(in->buf, CAP);
    if (p != NULL) {
      in->buf = p;
      in->cap = CAP;
    }
  }
  if (in->len < in->cap) return 0;
  /* full: only a frame larger than the buffer does that (its header was
  ** checked against max by ledger_inbox_next before this read) */
  size_t want = (size_t)be32(in->buf) + HDR;
  if (want > (size_t)in->max + HDR || want <= in->cap) return -EPROTO;
  size_t grow = in->cap * 2 < want ? in->cap * 2 : want;
  uint8_t *p = realloc(in->buf, grow);
  if (p == NULL) return -ENOMEM;
  in->buf = p;
  in->cap = grow;
  return 0;
}

ssize_t ledger_inbox_fill(ledger_inbox *in, int fd)
{
  int rc = make_room(in);
  if (rc < 0) return rc;
  for (;;) {
    ssize_t n = recv(fd, in->buf + in->len, in->cap - in->len, MSG_DONTWAIT);
    if (n > 0) {
      in->drained = (size_t)n < in->cap - in->len;
      in->len += (size_t)n;
      return n;
    }
    if (n == 0) return 0;
    if (errno == EINTR) continue;
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  }
}
