/*
** frame_fuzz.c -- libFuzzer target: the frame reader fed arbitrary bytes in
** arbitrary chunkings, every complete frame then decoded as a protocol message.
** The first input byte seeds the chunk sizes, so the fuzzer explores both the
** bytes and how they are split across reads.
*/
#include <stdint.h>
#include <string.h>

#include "airlock.h"

struct src {
  const uint8_t *p;
  size_t left;
  uint32_t rng;
};

/* Returns 1..64 bytes per read (xorshift on the seed), or 0 at the end. */
static ssize_t chunked(void *ctx, void *buf, size_t n)
{
  struct src *s = ctx;
  if (s->left == 0) return 0;
  s->rng ^= s->rng << 13;
  s->rng ^= s->rng >> 17;
  s->rng ^= s->rng << 5;
  size_t k = 1 + s->rng % 64;
  if (k > n) k = n;
  if (k > s->left) k = s->left;
  memcpy(buf, s->p, k);
  s->p += k;
  s->left -= k;
  return (ssize_t)k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size == 0) return 0;
  struct src s = {data + 1, size - 1, 0x9e3779b9u ^ data[0]};
  airlock_frame_reader r;
  airlock_frame_reader_init(&r, 1u << 20);
  for (;;) {
    int rc = airlock_frame_reader_pull(&r, chunked, &s);
    if (rc != AIRLOCK_FRAME_READY) break; /* EOF, a refused length, or EOF inside a frame: all fine */
    msgpack_unpacked u;
    airlock_msg m;
    char err[256];
    msgpack_unpacked_init(&u);
    airlock_msg_decode(r.body, r.len, &u, &m, err, sizeof err);
    msgpack_unpacked_destroy(&u);
    airlock_frame_reader_reset(&r);
  }
  airlock_frame_reader_free(&r);
  return 0;
}
