/*
** segment.c -- sealed segments, the one place that knows them: their names and
** format, the block codec, reading them back as part of a session's plain
** stream (segments, then the journal, the repeat an interrupted seal left
** skipped), sealing the journal into the next one in bounded steps, and, on
** open, dropping a journal that repeats the last segment. The format is in
** core/ledger.h.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef AIRLOCK_CRASH_POINTS
#include <signal.h>
#endif

#include "airlock.h"
#include "journal_int.h"

static uint32_t get_be32(const uint8_t *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ------------------------------------------------------------------ format */

static const airlock_ledger_codec *codec;

void airlock_ledger_set_codec(const airlock_ledger_codec *c)
{
  codec = c;
}

const airlock_ledger_codec *airlock_ledger_get_codec(void)
{
  return codec;
}

void ledger_seg_name(const char *dir, unsigned n, const char *suffix, char *out, size_t outlen)
{
  snprintf(out, outlen, "%s/segment.%06u%s", dir, n, suffix ? suffix : "");
}

/* ------------------------------------------------------------------ reading */

/* Damage in segment s->seg at file offset at: s->damage, starting with word
** (the reader adds which seq is in it). Returns -EBADMSG. */
__attribute__((format(printf, 4, 5))) static int seg_bad(ledger_stream *s, const char *word, uint64_t at,
                                                         const char *fmt, ...)
{
  char what[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(s->damage, sizeof s->damage, "%s: segment.%06u, at offset %" PRIu64 ": %s", word, s->seg, at,
           what);
  return -EBADMSG;
}

/* Reads exactly n bytes at off of fd. Returns 0, 1 when the file ends first, or -errno. */
static int pread_full(int fd, void *p, size_t n, uint64_t off)
{
  size_t got = 0;
  while (got < n) {
    ssize_t k = pread(fd, (uint8_t *)p + got, n - got, (off_t)(off + got));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -errno;
    if (k == 0) return 1;
    got += (size_t)k;
  }
  return 0;
}

static uint64_t get_be64(const uint8_t *p)
{
  return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

/* The journal follows the last segment. A seal renames the new segment into
** place before it replaces the journal, so a journal whose first bytes are
** the last segment's is the one a seal left behind (or one a reader opened
** before the seal): it repeats the segment's bytes, then holds the records
** appended while the seal ran (or none). The stream goes on after the
** repeated bytes; what follows them is checked as ever (seq and chain from
** the segment's last record), so a journal that only looked like a copy
** fails there. */
static int start_journal(ledger_stream *s)
{
  s->in_journal = 1;
  if (s->seg <= 1 || s->head_len == 0) return 0; /* no segment was read */
  uint8_t b[LEDGER_SEG_HEAD];
  int rc = pread_full(s->fd, b, s->head_len, 0);
  if (rc < 0) return rc;
  if (rc == 0 && memcmp(b, s->head, s->head_len) == 0) {
    s->stale = 1;
    if (lseek(s->fd, (off_t)s->seg_plain, SEEK_SET) < 0) return -errno;
  }
  return 0;
}

/* Opens segment s->seg + 1, or moves on to the journal when there is none. */
static int next_segment(ledger_stream *s)
{
  if (s->seg >= LEDGER_SEG_LAST) return start_journal(s);
  char name[4096];
  ledger_seg_name(s->dir, ++s->seg, NULL, name, sizeof name);
  s->sfd = open(name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (s->sfd < 0) {
    if (errno != ENOENT) return -errno;
    return start_journal(s);
  }
  posix_fadvise(s->sfd, 0, 0, POSIX_FADV_SEQUENTIAL);
  uint8_t h[LEDGER_SEG_HDR];
  int rc = pread_full(s->sfd, h, sizeof h, 0);
  if (rc < 0) return rc;
  if (rc == 1 || memcmp(h, LEDGER_SEG_MAGIC, 8) != 0)
    return seg_bad(s, "malformed", 0,
                   rc == 1 ? "the file is shorter than a segment header"
                           : "it does not start with \"" LEDGER_SEG_MAGIC "\"");
  s->seg_plain = get_be64(h + 8);
  if (s->seg_plain == 0) return seg_bad(s, "malformed", 8, "the header declares no plain bytes");
  s->seg_off = LEDGER_SEG_HDR;
  s->seg_done = 0;
  s->head_len = 0;
  return 0;
}

/* Reads, checks and decodes the next block of the open segment into blk.
** SECURITY: both lengths are bounded before anything is allocated or read
** for them; a block never decodes past the length it declares. */
static int next_block(ledger_stream *s)
{
  uint64_t at = s->seg_off;
  uint8_t h[LEDGER_BLK_HDR];
  int rc = pread_full(s->sfd, h, sizeof h, at);
  if (rc < 0) return rc;
  if (rc == 1)
    return seg_bad(s, "truncated", at,
                   "the segment ends after %" PRIu64 " of the %" PRIu64 " plain bytes its header declares",
                   s->seg_done, s->seg_plain);
  uint8_t id = h[0];
  uint32_t plain = get_be32(h + 4), stored = get_be32(h + 8);
  if (id != AIRLOCK_LEDGER_CODEC_NONE && id != AIRLOCK_LEDGER_CODEC_ZSTD)
    return seg_bad(s, "codec", at,
                   "the block names codec %u; this reader knows 0 (none) and "
                   "1 (zstd), and does not guess",
                   id);
  if (h[1] | h[2] | h[3]) return seg_bad(s, "malformed", at, "the block's reserved bytes are not zero");
  if (plain == 0 || plain > AIRLOCK_LEDGER_BLOCK_MAX || plain > s->seg_plain - s->seg_done)
    return seg_bad(s, "altered", at,
                   "the block claims %" PRIu32 " plain bytes; a block holds 1 "
                   "to %u, and %" PRIu64 " remain of the segment's",
                   plain, AIRLOCK_LEDGER_BLOCK_MAX, s->seg_plain - s->seg_done);
  if (stored > AIRLOCK_LEDGER_BLOCK_MAX || (id == AIRLOCK_LEDGER_CODEC_NONE && stored != plain) ||
      stored == 0)
    return seg_bad(
        s, "altered", at,
        "the block claims %" PRIu32 " stored bytes for %" PRIu32 " plain ones (codec %s; at most %u)", stored,
        plain, id == AIRLOCK_LEDGER_CODEC_NONE ? "none" : "zstd", AIRLOCK_LEDGER_BLOCK_MAX);
  if (id == AIRLOCK_LEDGER_CODEC_ZSTD && (codec == NULL || codec->id != id))
    return seg_bad(s, "codec", at,
                   "the block is zstd, which this process cannot decode (sealed "
                   "segments are read through airlock-ledgerd)");
  if (s->blk == NULL && (s->blk = malloc(AIRLOCK_LEDGER_BLOCK_MAX)) == NULL) return -ENOMEM;
  if (id == AIRLOCK_LEDGER_CODEC_NONE) {
    rc = pread_full(s->sfd, s->blk, plain, at + LEDGER_BLK_HDR);
  } else {
    if (s->cblk == NULL && (s->cblk = malloc(AIRLOCK_LEDGER_BLOCK_MAX)) == NULL) return -ENOMEM;
    rc = pread_full(s->sfd, s->cblk, stored, at + LEDGER_BLK_HDR);
  }
  if (rc < 0) return rc;
  if (rc == 1)
    return seg_bad(s, "truncated", at,
                   "the block claims %" PRIu32 " stored bytes, and the "
                   "segment ends before them",
                   stored);
  if (id == AIRLOCK_LEDGER_CODEC_ZSTD) {
    char why[160] = "";
    if (codec->decompress(s->cblk, stored, s->blk, plain, why, sizeof why) < 0)
      return seg_bad(s, "altered", at,
                     "the zstd block does not decode to the %" PRIu32 " bytes it declares: %s", plain, why);
  }
  if (s->seg_done == 0) {
    s->head_len = plain < LEDGER_SEG_HEAD ? plain : LEDGER_SEG_HEAD;
    memcpy(s->head, s->blk, s->head_len);
  }
  s->seg_off = at + LEDGER_BLK_HDR + stored;
  s->seg_done += plain;
  s->blk_pos = 0;
  s->blk_len = plain;
  return 0;
}

ssize_t ledger_stream_read(ledger_stream *s, uint8_t *dst, size_t cap)
{
  for (;;) {
    if (s->blk_pos < s->blk_len) {
      size_t n = s->blk_len - s->blk_pos < cap ? s->blk_len - s->blk_pos : cap;
      memcpy(dst, s->blk + s->blk_pos, n);
      s->blk_pos += n;
      return (ssize_t)n;
    }
    if (s->in_journal) {
      ssize_t n = read(s->fd, dst, cap);
      return n < 0 ? -errno : n;
    }
    int rc;
    if (s->sfd < 0) {
      rc = next_segment(s);
    } else if (s->seg_done == s->seg_plain) {
      uint8_t extra;
      rc = pread_full(s->sfd, &extra, 1, s->seg_off);
      if (rc == 0) return seg_bad(s, "malformed", s->seg_off, "bytes follow the last block");
      if (rc == 1) {
        close(s->sfd);
        s->sfd = -1;
        s->base += s->seg_plain;
        rc = 0;
      }
    } else {
      rc = next_block(s);
    }
    if (rc < 0) return rc;
  }
}

void ledger_stream_free(ledger_stream *s)
{
  if (s->sfd >= 0) close(s->sfd);
  s->sfd = -1;
  free(s->blk);
  free(s->cblk);
  s->blk = s->cblk = NULL;
}

/* ------------------------------------------------------------------ sealing */

static void put_be32(uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* A seal is a job in steps, each bounded: with seal_stepped the caller runs
** them when nothing waits (airlock_ledger_seal_step), otherwise the append
** that starts it runs them all. The journal stays authoritative throughout:
**   compress  the journal's first jlen bytes (a whole number of records, on
**             disk: synced first), a block per step, into segment.N.tmp,
**             fdatasynced every SYNC_EVERY bytes and at the end; then fsync,
**             rename to segment.N, fsync of the directory. A crash before:
**             the .tmp is removed on the next open, nothing else changed.
**   tail      appends went on into the journal meanwhile: its bytes after
**             jlen are copied into journal.tmp, a step at a time, each
**             fdatasynced; once it has caught up, the rest (a step's worth at
**             most), fdatasync, rename over the journal, fsync of the
**             directory. A crash before: the journal repeats segment N's
**             bytes, then its own records; readers skip the repeat, the next
**             open rewrites the journal without it.
** LEDGER_CRASH_POINT marks the phases a test build of the ledger process can
** be stopped in (journal_int.h); elsewhere it is nothing. */
#define SEAL_BLOCK (128u << 10) /* plain bytes per block (per step) of a stepped seal */
#define TAIL_STEP  (256u << 10) /* journal bytes copied per step */
#define SYNC_EVERY (1u << 20)   /* segment bytes written between fdatasyncs */

#define RELEASE_STEP (256u << 10) /* old journal bytes freed per step */

enum { SEAL_NONE, SEAL_COMPRESS, SEAL_SYNC, SEAL_PLACE, SEAL_TAIL, SEAL_RELEASE };

/* Reads exactly n bytes at at of a file the writer knows to be that long:
** 0, or -errno (-EIO when it ends first). */
static int pread_all(int fd, uint8_t *p, size_t n, uint64_t at)
{
  int rc = pread_full(fd, p, n, at);
  return rc == 1 ? -EIO : rc;
}

/* Ends the job; a .tmp left unfinished is removed. */
void ledger_seal_drop(airlock_ledger *l)
{
  if (l->sj.rfd >= 0) close(l->sj.rfd);
  if (l->sj.wfd >= 0) close(l->sj.wfd);
  if (l->sj.old_fd >= 0) close(l->sj.old_fd);
  l->sj.old_fd = -1;
  if (l->sj.phase != SEAL_NONE && l->sj.tmp[0]) unlink(l->sj.tmp);
  l->sj.rfd = l->sj.wfd = -1;
  l->sj.phase = SEAL_NONE;
  l->sj.tmp[0] = '\0';
  free(l->sj.plain);
  free(l->sj.packed);
  l->sj.plain = l->sj.packed = NULL;
}

/* A step failed before the segment was in place: the journal is as it was,
** the ledger goes on, and the seal is tried again later. */
static int seal_abort(airlock_ledger *l, int rc, const char *what)
{
  ledger_set_err(l, rc,
                 "ledger: sealing %s into segment.%06u failed (%s): %s; the journal is as it "
                 "was and the seal is tried again later",
                 l->journal, l->nseg + 1, what, airlock_strerror(-rc));
  ledger_seal_drop(l);
  l->seal_at = l->off - l->base + l->seal_bytes / 4 + 1;
  return rc;
}

static int seal_broken(airlock_ledger *l, int rc, const char *what);

static int seal_start(airlock_ledger *l)
{
  if (l->nseg >= LEDGER_SEG_LAST)
    return ledger_set_err(l, -EFBIG, "ledger: %s has %u segments, the most it may have", l->dir, l->nseg);
  int rc = ledger_sync_now(l); /* the bytes sealed are on disk in the journal too */
  if (rc < 0) return rc;
  l->sj.jlen = l->off - l->base;
  l->sj.at = l->sj.synced = 0;
  l->sj.block = l->seal_stepped ? SEAL_BLOCK : AIRLOCK_LEDGER_BLOCK_PLAIN;
  ledger_seg_name(l->dir, l->nseg + 1, ".tmp", l->sj.tmp, sizeof l->sj.tmp);
  l->sj.phase = SEAL_COMPRESS;
  l->sj.rfd = open(l->journal, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  l->sj.wfd = open(l->sj.tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (l->sj.rfd < 0 || l->sj.wfd < 0) return seal_abort(l, -errno, "open");
  l->sj.plain = malloc(l->sj.block);
  l->sj.packed = malloc(l->sj.block);
  if (l->sj.plain == NULL || l->sj.packed == NULL) return seal_abort(l, -ENOMEM, "memory for a block");
  uint8_t h[LEDGER_SEG_HDR] = LEDGER_SEG_MAGIC;
  put_be32(h + 8, (uint32_t)(l->sj.jlen >> 32));
  put_be32(h + 12, (uint32_t)l->sj.jlen);
  size_t done;
  if ((rc = ledger_write_all(l->sj.wfd, h, sizeof h, &done)) < 0) return seal_abort(l, rc, "write");
  return 0;
}

/* One block into the segment, in the codec's form when that is smaller; the
** last one puts the segment in place and starts the tail. */
static int seal_compress_step(airlock_ledger *l)
{
  const airlock_ledger_codec *c = airlock_ledger_get_codec();
  uint64_t left = l->sj.jlen - l->sj.at;
  size_t n = left < l->sj.block ? (size_t)left : l->sj.block, done;
  int rc = pread_all(l->sj.rfd, l->sj.plain, n, l->sj.at);
  if (rc < 0) return seal_abort(l, rc, "read");
  /* stored only when smaller: so a stored block never exceeds its plain size */
  size_t z = c ? c->compress(l->sj.plain, n, l->sj.packed, n - 1) : 0;
  uint8_t b[LEDGER_BLK_HDR] = {z ? c->id : AIRLOCK_LEDGER_CODEC_NONE, 0, 0, 0};
  put_be32(b + 4, (uint32_t)n);
  put_be32(b + 8, (uint32_t)(z ? z : n));
  if ((rc = ledger_write_all(l->sj.wfd, b, sizeof b, &done)) < 0 ||
      (rc = ledger_write_all(l->sj.wfd, z ? l->sj.packed : l->sj.plain, z ? z : n, &done)) < 0)
    return seal_abort(l, rc, "write");
  LEDGER_CRASH_POINT("segment");
  l->sj.at += n;
  l->sj.synced += LEDGER_BLK_HDR + (z ? z : n);
  if (l->sj.at < l->sj.jlen) {
    /* the final fsync then has little left to write */
    if (l->seal_stepped && l->sj.synced >= SYNC_EVERY) {
      if (fdatasync(l->sj.wfd) < 0) return seal_abort(l, -errno, "fdatasync");
      l->sj.synced = 0;
    }
    return 0;
  }
  l->sj.phase = SEAL_SYNC;
  return 0;
}

/* The segment is on disk (a step), and its name (the next), before the
** journal is replaced. */
static int seal_sync_step(airlock_ledger *l)
{
  if (fsync(l->sj.wfd) < 0) return seal_abort(l, -errno, "fsync");
  l->sj.phase = SEAL_PLACE;
  return 0;
}

static int seal_place_step(airlock_ledger *l)
{
  int rc;
  char seg[4096];
  ledger_seg_name(l->dir, l->nseg + 1, NULL, seg, sizeof seg);
  if (rename(l->sj.tmp, seg) < 0) return seal_abort(l, -errno, "rename");
  LEDGER_CRASH_POINT("placed");
  l->nseg++;
  close(l->sj.wfd);
  free(l->sj.packed);
  l->sj.packed = NULL;
  l->sj.wfd = -1;
  l->sj.phase = SEAL_TAIL; /* from here on, a failure is sticky */
  if ((rc = ledger_fsync_path(l->dir)) < 0) {
    l->sticky = rc;
    return ledger_set_err(l, rc,
                          "ledger: after sealing segment.%06u, fsync of %s failed: %s; the "
                          "ledger refuses further appends",
                          l->nseg, l->dir, airlock_strerror(-rc));
  }
  snprintf(l->sj.tmp, sizeof l->sj.tmp, "%s.tmp", l->journal);
  l->sj.wfd = open(l->sj.tmp, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  l->sj.at = l->sj.jlen; /* the journal's offset copied up to */
  if (l->sj.wfd < 0) return seal_broken(l, -errno, "open");
  return 0;
}

/* After the segment is in place, a failure leaves the journal repeating it
** (readers skip that); the ledger refuses further appends. */
static int seal_broken(airlock_ledger *l, int rc, const char *what)
{
  l->sticky = rc;
  ledger_set_err(l, rc,
                 "ledger: after sealing segment.%06u, replacing %s failed (%s: %s); it repeats "
                 "the segment, which readers skip, and the next open replaces it; the ledger refuses "
                 "further appends",
                 l->nseg, l->journal, what, airlock_strerror(-rc));
  ledger_seal_drop(l);
  return rc;
}

/* Copies the journal's bytes [at, end) into journal.tmp, at most max of them. */
static int tail_copy(airlock_ledger *l, uint64_t end, size_t max)
{
  while (l->sj.at < end && max > 0) {
    uint64_t left = end - l->sj.at;
    size_t n = left < l->sj.block ? (size_t)left : l->sj.block, done;
    if (n > max) n = max;
    int rc = pread_all(l->sj.rfd, l->sj.plain, n, l->sj.at);
    if (rc == 0) rc = ledger_write_all(l->sj.wfd, l->sj.plain, n, &done);
    if (rc < 0) return rc;
    l->sj.at += n;
    max -= n;
  }
  return 0;
}

/* A step of the tail; once it has caught up with the journal, the swap. */
static int seal_tail_step(airlock_ledger *l)
{
  /* the journal's end on disk (records kept by coalesce are not yet in it) */
  uint64_t jend = (l->wq.size > 0 ? l->w_off : l->off) - l->base;
  if (jend - l->sj.at > TAIL_STEP) {
    int rc = tail_copy(l, jend, TAIL_STEP);
    if (rc == 0 && fdatasync(l->sj.wfd) < 0) rc = -errno;
    return rc < 0 ? seal_broken(l, rc, "copy") : 0;
  }
  int rc = ledger_write_out(l); /* every accepted record goes along */
  if (rc < 0) return rc;
  jend = l->off - l->base;
  if ((rc = tail_copy(l, jend, SIZE_MAX)) < 0) return seal_broken(l, rc, "copy");
  if (fdatasync(l->sj.wfd) < 0) return seal_broken(l, -errno, "fdatasync");
  LEDGER_CRASH_POINT("journal");
  if (rename(l->sj.tmp, l->journal) < 0) return seal_broken(l, -errno, "rename");
  LEDGER_CRASH_POINT("swapped");
  l->sj.tmp[0] = '\0'; /* in place: nothing to remove */
  /* the old journal's blocks are freed a step at a time (its last close
  ** would free them all at once, with a discard each) */
  l->sj.old_fd = l->fd;
  l->fd = l->sj.wfd;
  l->sj.wfd = -1;
  l->base += l->sj.jlen;
  l->durable_seq = l->seq; /* all of it is in the fdatasynced new journal */
  l->pending_since = 0;
  l->seal_at = l->seal_bytes;
  l->sj.phase = SEAL_RELEASE;
  /* before any later record can be called durable: its journal's name is */
  if ((rc = ledger_fsync_path(l->dir)) < 0) {
    l->sticky = rc;
    ledger_seal_drop(l);
    return ledger_set_err(l, rc,
                          "ledger: after sealing segment.%06u, fsync of %s failed: %s; the "
                          "ledger refuses further appends",
                          l->nseg, l->dir, airlock_strerror(-rc));
  }
  return 0;
}

static int seal_release_step(airlock_ledger *l)
{
  struct stat st;
  if (fstat(l->sj.old_fd, &st) == 0 && (uint64_t)st.st_size > RELEASE_STEP) {
    if (ftruncate(l->sj.old_fd, st.st_size - RELEASE_STEP) == 0) return 0;
  }
  ledger_seal_drop(l); /* the last of it goes with the descriptor */
  return 0;
}

int airlock_ledger_seal_pending(const airlock_ledger *l)
{
  return l->sj.phase != SEAL_NONE && !l->sticky;
}

int airlock_ledger_seal_step(airlock_ledger *l)
{
  if (l->sticky) return l->sticky;
  switch (l->sj.phase) {
    case SEAL_COMPRESS: return seal_compress_step(l);
    case SEAL_SYNC: return seal_sync_step(l);
    case SEAL_PLACE: return seal_place_step(l);
    case SEAL_TAIL: return seal_tail_step(l);
    case SEAL_RELEASE: return seal_release_step(l);
    default: return 0;
  }
}

int ledger_seal_finish(airlock_ledger *l)
{
  int rc = 0;
  while (rc == 0 && airlock_ledger_seal_pending(l)) rc = airlock_ledger_seal_step(l);
  return l->sticky ? l->sticky : rc;
}

int airlock_ledger_seal(airlock_ledger *l)
{
  if (l->sticky) return l->sticky;
  if (l->sj.phase == SEAL_NONE) {
    if (l->off - l->base == 0) return 0;
    int rc = seal_start(l);
    if (rc < 0) return rc;
  }
  return ledger_seal_finish(l);
}

unsigned airlock_ledger_segments(const airlock_ledger *l)
{
  return l->nseg;
}

/* After an append: seal once the journal is big enough (stepped: start the
** job; the caller's idle time runs it). A seal that fails before its segment
** is in place costs nothing but a retry later (the record is in the journal
** either way); one that fails after is sticky. */
void ledger_maybe_seal(airlock_ledger *l)
{
  if (l->sj.phase != SEAL_NONE || l->off - l->base < l->seal_at) return;
  if (l->seal_stepped) {
    if (seal_start(l) < 0 && !l->sticky) l->seal_at = l->off - l->base + l->seal_bytes / 4 + 1;
    return;
  }
  if (airlock_ledger_seal(l) < 0 && !l->sticky) l->seal_at = l->off - l->base + l->seal_bytes / 4 + 1;
}

/* ------------------------------------------------------------------ crash points */

#ifdef AIRLOCK_CRASH_POINTS
/* Test builds only (journal_int.h says why production has none of this). */
static const char *const crash_phases[] = {"segment", "placed", "journal", "swapped", NULL};
static const char *crash_at; /* the armed phase, one of crash_phases; NULL: none */

int ledger_crash_arm(const char *phase)
{
  crash_at = NULL;
  if (phase == NULL || *phase == '\0') return 0;
  for (const char *const *p = crash_phases; *p; p++)
    if (strcmp(*p, phase) == 0) {
      crash_at = *p;
      return 0;
    }
  return -EINVAL;
}

void ledger_crash_point(const char *phase)
{
  if (crash_at == NULL || strcmp(crash_at, phase) != 0) return;
  raise(SIGSTOP);
  _exit(LEDGER_EXIT_CRASH_POINT); /* continued: still not a step further */
}
#endif

/* ------------------------------------------------------------------ after an interrupted seal */

/* The journal's first skip bytes repeat the last segment: it is replaced by
** one holding only what follows them (synced, renamed, directory synced). */
int ledger_drop_repeat(airlock_ledger *l, uint64_t skip)
{
  struct stat st;
  if (fstat(l->fd, &st) < 0) return -errno;
  if ((uint64_t)st.st_size <= skip) return ftruncate(l->fd, 0) < 0 || fdatasync(l->fd) < 0 ? -errno : 0;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", l->journal);
  int rfd = open(l->journal, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  int wfd = open(tmp, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  uint8_t *buf = malloc(1u << 20);
  int rc = rfd < 0 || wfd < 0 ? -errno : buf == NULL ? -ENOMEM : 0;
  for (uint64_t at = skip; rc == 0 && at < (uint64_t)st.st_size;) {
    uint64_t left = (uint64_t)st.st_size - at;
    size_t n = left < (1u << 20) ? (size_t)left : (1u << 20), done;
    if ((rc = pread_all(rfd, buf, n, at)) == 0) rc = ledger_write_all(wfd, buf, n, &done);
    at += n;
  }
  if (rc == 0 && (fdatasync(wfd) < 0 || rename(tmp, l->journal) < 0)) rc = -errno;
  if (rc == 0 && (rc = ledger_fsync_path(l->dir)) == 0) {
    close(l->fd);
    l->fd = wfd;
    wfd = -1;
  }
  free(buf);
  if (rfd >= 0) close(rfd);
  if (wfd >= 0) {
    close(wfd);
    unlink(tmp);
  }
  return rc;
}
