/*
** zstd.c -- the zstd block codec for sealed segments, registered by
** airlock-ledgerd alone (libzstd is linked into it, not into libairlock or
** airlock.so). Every frame it reads is untrusted: it must declare the block's
** plain length, and it decodes into a buffer of exactly that length.
*/
#include <stdio.h>
#include <zstd.h>

#include "journal.h"
#include "ledger_zstd.h"

#define LEVEL      3  /* zstd's default: ~3x on journals at hundreds of MB/s */
#define WINDOW_LOG 21 /* 2 MiB: a block is never larger, so no frame needs more */

static __thread ZSTD_CCtx *cctx;
static __thread ZSTD_DCtx *dctx;

static size_t zstd_compress(const void *src, size_t n, void *dst, size_t cap)
{
  if (cctx == NULL) {
    if ((cctx = ZSTD_createCCtx()) == NULL) return 0;
    /* the content size in the header (a reader checks it against the block's),
    ** a checksum of the content (a flipped stored byte fails in the decoder) */
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, LEVEL)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, WINDOW_LOG))) {
      ZSTD_freeCCtx(cctx);
      cctx = NULL;
      return 0;
    }
  }
  size_t z = ZSTD_compress2(cctx, dst, cap, src, n);
  return ZSTD_isError(z) ? 0 : z;
}

static int zstd_decompress(const void *src, size_t n, void *dst, size_t cap, char *why, size_t whylen)
{
  /* SECURITY: the frame's own claims are checked before it is decoded, and
  ** the output buffer is exactly the block's declared length: a frame that
  ** would write more fails in ZSTD_decompressDCtx (dstSize_tooSmall). */
  unsigned long long size = ZSTD_getFrameContentSize(src, n);
  if (size == ZSTD_CONTENTSIZE_ERROR) {
    snprintf(why, whylen, "not a zstd frame");
    return -1;
  }
  if (size == ZSTD_CONTENTSIZE_UNKNOWN || size != cap) {
    snprintf(why, whylen,
             size == ZSTD_CONTENTSIZE_UNKNOWN ? "the frame declares no content size"
                                              : "the frame declares %llu bytes",
             size);
    return -1;
  }
  size_t framed = ZSTD_findFrameCompressedSize(src, n);
  if (ZSTD_isError(framed) || framed != n) {
    snprintf(why, whylen, ZSTD_isError(framed) ? "the frame is cut short (%s)" : "bytes follow the frame",
             ZSTD_isError(framed) ? ZSTD_getErrorName(framed) : "");
    return -1;
  }
  if (dctx == NULL) {
    if ((dctx = ZSTD_createDCtx()) == NULL ||
        ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, WINDOW_LOG))) {
      ZSTD_freeDCtx(dctx);
      dctx = NULL;
      snprintf(why, whylen, "out of memory for a zstd context");
      return -1;
    }
  }
  size_t got = ZSTD_decompressDCtx(dctx, dst, cap, src, n);
  if (ZSTD_isError(got) || got != cap) {
    snprintf(why, whylen, "%s", ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short output");
    return -1;
  }
  return 0;
}

static const airlock_ledger_codec zstd_codec = {
    .id = AIRLOCK_LEDGER_CODEC_ZSTD,
    .name = "zstd",
    .compress = zstd_compress,
    .decompress = zstd_decompress,
};

const airlock_ledger_codec *ledger_zstd_codec(void)
{
  return &zstd_codec;
}
