/*
** overlay_io.c -- opening beneath, copying and hashing for the overlay's
** applier, keeper and restorer (see the header).
*/
#define _GNU_SOURCE
#include "overlay_io.h"
#include "ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int finish(EVP_MD_CTX *ctx, char hex[65])
{
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (EVP_DigestFinal_ex(ctx, md, &len) != 1 || len != 32) return -EIO;
  airlock_ledger_hex(md, hex);
  return 0;
}

int airlock_overlay_hash(const void *p, size_t n, char hex[65])
{
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  int rc = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 ? 0 : -ENOMEM;
  if (rc == 0 && EVP_DigestUpdate(ctx, p, n) != 1) rc = -EIO;
  if (rc == 0) rc = finish(ctx, hex);
  EVP_MD_CTX_free(ctx);
  return rc;
}

/* One chunk of n bytes into the sink. */
static int sink_chunk(airlock_overlay_sink *s, EVP_MD_CTX *ctx, const char *p, size_t n)
{
  if (ctx && EVP_DigestUpdate(ctx, p, n) != 1) return -EIO;
  if (s->keep) {
    if (n > s->cap - *s->kept) return -EFBIG;
    memcpy(s->keep + *s->kept, p, n);
    *s->kept += n;
  }
  return s->out >= 0 ? airlock_overlay_write_all(s->out, p, n) : 0;
}

int airlock_overlay_copy(int src, uint64_t size, airlock_overlay_sink *s)
{
  EVP_MD_CTX *ctx = s->hash ? EVP_MD_CTX_new() : NULL;
  char *chunk = malloc(COPY_CHUNK);
  int rc = chunk && (!s->hash || (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1)) ? 0 : -ENOMEM;
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
  if (rc == 0 && ctx) rc = finish(ctx, s->hex);
  EVP_MD_CTX_free(ctx);
  free(chunk);
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
