/*
** overlay_io.c -- opening beneath, copying and hashing for the overlay's
** applier, keeper and restorer (see the header).
*/
#define _GNU_SOURCE
#include "overlay_io.h"
#include "ledger.h"
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define COPY_CHUNK (256 * 1024)

int airlock_overlay_open_beneath(int base, const char *dir, int flags)
{
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (unsigned)(flags | O_NOFOLLOW | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return (int)syscall(SYS_openat2, base, dir[0] ? dir : ".", &how, sizeof how);
}

int airlock_overlay_write_all(int fd, const char *p, size_t n)
{
  for (size_t w = 0; w < n;) {
    ssize_t k = write(fd, p + w, n - w);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    w += (size_t)k;
  }
  return 0;
}

int airlock_overlay_hash(const void *p, size_t n, char hex[65])
{
  return airlock_sha256_hex(p, n, hex, NULL, 0);
}

/* One chunk of n bytes into the sink (and into the hash when ctx). */
static int sink_chunk(airlock_overlay_sink *s, airlock_sha256_ctx *ctx, const char *p, size_t n)
{
  if (ctx && airlock_sha256_update(ctx, p, n, NULL, 0) != 0) return -EIO;
  if (s->keep) {
    if (n > s->cap - *s->kept) return -EFBIG;
    memcpy(s->keep + *s->kept, p, n);
    *s->kept += n;
  }
  return s->out >= 0 ? airlock_overlay_write_all(s->out, p, n) : 0;
}

int airlock_overlay_copy(int src, uint64_t size, airlock_overlay_sink *s)
{
  airlock_sha256_ctx hctx;
  airlock_sha256_ctx *ctx = s->hash ? &hctx : NULL;
  char *chunk = malloc(COPY_CHUNK);
  int rc = chunk ? 0 : -ENOMEM;
  if (rc == 0 && ctx) rc = airlock_sha256_init(ctx, NULL, 0);
  if (s->kept) *s->kept = 0;
  uint64_t left = size;
  while (rc == 0 && left > 0) {
    ssize_t n = read(src, chunk, left < COPY_CHUNK ? (size_t)left : COPY_CHUNK);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = -errno;
    } else if (n == 0) {
      if (size != AIRLOCK_OVERLAY_TO_END) rc = -EIO; /* shorter than it said: it changed under the copy */
      break;
    } else {
      rc = sink_chunk(s, ctx, chunk, (size_t)n);
      if (size != AIRLOCK_OVERLAY_TO_END) left -= (uint64_t)n;
    }
  }
  uint8_t md[AIRLOCK_SHA256_LEN];
  if (rc == 0 && ctx) {
    rc = airlock_sha256_final(ctx, md, NULL, 0) == 0 ? 0 : -EIO;
    if (rc == 0) airlock_ledger_hex(md, s->hex);
  }
  free(chunk);
  return rc;
}

/* All n bytes at p written to fd at offset at: 0 or -errno. */
static int pwrite_all(int fd, const char *p, size_t n, off_t at)
{
  for (size_t w = 0; w < n;) {
    ssize_t k = pwrite(fd, p + w, n - w, at + (off_t)w);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    w += (size_t)k;
  }
  return 0;
}

int airlock_overlay_copy_sparse(int src, uint64_t size, int out)
{
  const off_t end = (off_t)size;
  char *chunk = malloc(COPY_CHUNK);
  if (!chunk) return -ENOMEM;
  int rc = 0;
  for (off_t pos = 0; rc == 0 && pos < end;) {
    off_t data = lseek(src, pos, SEEK_DATA), hole;
    if (data < 0 && errno == ENXIO) break; /* the rest is a hole */
    if (data < 0 && errno != EINVAL) {
      rc = -errno;
      break;
    }
    if (data < 0) { /* no SEEK_DATA on this file system: all of it is data */
      data = pos;
      hole = end;
    } else if ((hole = lseek(src, data, SEEK_HOLE)) < 0) {
      rc = -errno;
      break;
    }
    if (data >= end) break;
    if (hole > end) hole = end;
    for (off_t at = data; rc == 0 && at < hole;) {
      size_t want = hole - at < COPY_CHUNK ? (size_t)(hole - at) : COPY_CHUNK;
      ssize_t n = pread(src, chunk, want, at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        rc = n < 0 ? -errno : -EIO; /* shorter than it said: it changed under the copy */
        break;
      }
      rc = pwrite_all(out, chunk, (size_t)n, at);
      at += n;
    }
    pos = hole;
  }
  free(chunk);
  struct stat st;
  if (rc == 0 && ftruncate(out, end) < 0) rc = -errno;
  if (rc == 0 && (fstat(src, &st) < 0 || st.st_size != end)) rc = -EIO;
  return rc;
}

int airlock_overlay_say(char *err, size_t errlen, int rc, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return rc;
}
