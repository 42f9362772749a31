/*
** frame.c -- length-prefixed frames: an incremental reader, a blocking writer,
** and helpers that build one frame in a msgpack_sbuffer.
*/
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "airlock.h"

#define FRAME_HDR 4
#define GROW_MIN  (64u << 10) /* first body allocation for a large frame */
#define KEEP_MAX  (1u << 20)  /* larger buffers are released by reset */

static uint32_t get_be32(const uint8_t *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

void airlock_frame_reader_init(airlock_frame_reader *r, uint32_t max)
{
  memset(r, 0, sizeof *r);
  r->max = max ? max : AIRLOCK_FRAME_MAX_DEFAULT;
}

void airlock_frame_reader_free(airlock_frame_reader *r)
{
  free(r->body);
  r->body = NULL;
  r->cap = 0;
  r->hdr_have = r->len = r->have = 0;
  r->ahead_off = r->ahead_len = 0;
  r->drained = 0;
}

void airlock_frame_reader_reset(airlock_frame_reader *r)
{
  r->hdr_have = r->len = r->have = 0;
  if (r->cap > KEEP_MAX) {
    free(r->body);
    r->body = NULL;
    r->cap = 0;
  }
}

/* Makes room for at least one more body byte. */
static int grow(airlock_frame_reader *r)
{
  /* SECURITY: the buffer only doubles once the bytes already received fill it,
  ** so a peer must actually send about as many bytes as we allocate; the length
  ** header alone buys at most GROW_MIN. */
  uint64_t want = (uint64_t)r->cap * 2;
  if (want < GROW_MIN) want = GROW_MIN;
  if (want > r->len) want = r->len;
  uint8_t *p = realloc(r->body, (size_t)want);
  if (p == NULL) return -ENOMEM;
  r->body = p;
  r->cap = (uint32_t)want;
  return 0;
}

/* Reads once into the read-ahead buffer (empty on entry). Returns the bytes
** read (> 0), 0 at end of stream, or -errno (EINTR included). */
static ssize_t fill_ahead(airlock_frame_reader *r, airlock_read_fn src, void *ctx)
{
  ssize_t n = src(ctx, r->ahead, sizeof r->ahead);
  if (n > 0) {
    r->ahead_off = 0;
    r->ahead_len = (uint32_t)n;
    r->drained = (size_t)n < sizeof r->ahead;
  }
  return n;
}

/* Moves up to want bytes from the read-ahead buffer to dst; returns how many. */
static uint32_t take_ahead(airlock_frame_reader *r, uint8_t *dst, uint32_t want)
{
  uint32_t k = r->ahead_len - r->ahead_off;
  if (k > want) k = want;
  memcpy(dst, r->ahead + r->ahead_off, k);
  r->ahead_off += k;
  if (r->ahead_off == r->ahead_len) r->ahead_off = r->ahead_len = 0;
  return k;
}

int airlock_frame_reader_pull(airlock_frame_reader *r, airlock_read_fn src, void *ctx)
{
  for (;;) {
    if (r->hdr_have < FRAME_HDR) {
      if (r->ahead_len > 0) {
        r->hdr_have += take_ahead(r, r->hdr + r->hdr_have, FRAME_HDR - r->hdr_have);
        if (r->hdr_have == FRAME_HDR) r->len = get_be32(r->hdr);
        continue;
      }
    } else {
      /* SECURITY: the length is validated before any allocation, and again
      ** on every call, so a caller that ignores an error still cannot make the
      ** reader allocate for a bad header. */
      if (r->len == 0) return -EPROTO;
      if (r->len > r->max) return -EMSGSIZE;
      if (r->have == r->len) return AIRLOCK_FRAME_READY;
      if (r->have == r->cap) {
        int rc = grow(r);
        if (rc < 0) return rc;
      }
      if (r->ahead_len > 0) {
        uint32_t room = (r->cap < r->len ? r->cap : r->len) - r->have;
        r->have += take_ahead(r, r->body + r->have, room);
        continue;
      }
    }
    /* Nothing read ahead: one read. The header, and a small rest of a body,
    ** come through the read-ahead buffer with whatever follows them; a large
    ** rest straight into the body, asking for no more than this frame's bytes. */
    ssize_t n;
    if (r->hdr_have < FRAME_HDR || r->len - r->have < sizeof r->ahead) {
      n = fill_ahead(r, src, ctx);
    } else {
      uint32_t room = (r->cap < r->len ? r->cap : r->len) - r->have;
      if ((n = src(ctx, r->body + r->have, room)) > 0) {
        r->drained = (uint32_t)n < room;
        r->have += (uint32_t)n;
      }
    }
    if (n > 0 || n == -EINTR) continue;
    if (n == -EAGAIN) return AIRLOCK_FRAME_AGAIN;
    if (n < 0) return (int)n;
    /* End of stream: clean only between frames. */
    return r->hdr_have == 0 ? AIRLOCK_FRAME_EOF : -EPROTO;
  }
}

int airlock_frame_reader_drained(const airlock_frame_reader *r)
{
  return r->ahead_len == 0 && r->drained;
}

uint32_t airlock_frame_reader_buffered(const airlock_frame_reader *r)
{
  return r->ahead_len - r->ahead_off;
}

static ssize_t fd_read(void *ctx, void *buf, size_t n)
{
  ssize_t k = read(*(const int *)ctx, buf, n);
  return k < 0 ? -errno : k;
}

int airlock_frame_read_fd(airlock_frame_reader *r, int fd)
{
  return airlock_frame_reader_pull(r, fd_read, &fd);
}

/* sendmsg with MSG_NOSIGNAL turns a dead peer into EPIPE instead of a SIGPIPE
** that would kill the host; pipes and files are not sockets, so they fall back
** to writev (and there SIGPIPE stays the caller's business). */
static ssize_t put(int fd, struct iovec *v, int cnt, int *is_sock)
{
  if (*is_sock) {
    struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)cnt};
    ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (n >= 0 || errno != ENOTSOCK) return n;
    *is_sock = 0;
  }
  return writev(fd, v, cnt);
}

/* 0 once fd can take more, or an errno. */
static int wait_writable(int fd)
{
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  for (;;) {
    if (poll(&p, 1, -1) < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    return p.revents & POLLNVAL ? EBADF : 0; /* room, or an error the next write reports */
  }
}

/* Writes the iovecs whole, retrying on EINTR and short writes; on a
** non-blocking fd (its flags may be shared with other processes, so they are
** not changed) it waits for room. */
static int put_all(int fd, struct iovec *v, int cnt)
{
  int is_sock = 1;
  while (cnt > 0) {
    ssize_t n = put(fd, v, cnt, &is_sock);
    if (n < 0) {
      int e = errno;
      if (e == EINTR) continue;
      if ((e == EAGAIN || e == EWOULDBLOCK) && (e = wait_writable(fd)) == 0) continue;
      return -e;
    }
    size_t done = (size_t)n;
    while (cnt > 0 && done >= v->iov_len) {
      done -= v->iov_len;
      v++;
      cnt--;
    }
    if (cnt > 0) {
      v->iov_base = (char *)v->iov_base + done;
      v->iov_len -= done;
    }
  }
  return 0;
}

int airlock_frame_write_fd(int fd, const void *body, size_t len)
{
  if (len == 0 || len > UINT32_MAX) return -EMSGSIZE;
  uint8_t hdr[FRAME_HDR];
  put_be32(hdr, (uint32_t)len);
  /* iov_base is not const, but sendmsg and writev only read through it. */
  struct iovec iov[2] = {
      {.iov_base = hdr, .iov_len = sizeof hdr},
      {.iov_base = (void *)body, .iov_len = len},
  };
  return put_all(fd, iov, 2);
}

int airlock_frames_write_fd(int fd, const void *frames, size_t len)
{
  if (len == 0) return 0;
  struct iovec iov = {.iov_base = (void *)frames, .iov_len = len};
  return put_all(fd, &iov, 1);
}

/* The sbuffer holds exactly one frame, so end finds the header at offset 0. */
int airlock_frame_begin(msgpack_sbuffer *sb)
{
  static const char zero[FRAME_HDR];
  msgpack_sbuffer_clear(sb);
  return msgpack_sbuffer_write(sb, zero, sizeof zero) == 0 ? 0 : -ENOMEM;
}

int airlock_frame_end(msgpack_sbuffer *sb, uint32_t max)
{
  if (sb->size < FRAME_HDR) return -EINVAL;
  size_t len = sb->size - FRAME_HDR;
  if (max == 0) max = AIRLOCK_FRAME_MAX_DEFAULT;
  if (len == 0 || len > max) return -EMSGSIZE;
  put_be32((uint8_t *)sb->data, (uint32_t)len);
  return 0;
}
