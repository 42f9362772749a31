/*
** journal_int.h -- what the journal engine's files share: the writer
** (journal.c), the reader and verify (journal_read.c), sealed segments
** (segment.c), and airlock-ledgerd (main.c). Not part of any API.
*/
#ifndef AIRLOCK_JOURNAL_INT_H
#define AIRLOCK_JOURNAL_INT_H

#include <stdarg.h>
#include <sys/types.h>
#include "journal.h"
#include "ledger_int.h"

#define LEDGER_HDR     4                       /* length header */
#define LEDGER_HASH    AIRLOCK_LEDGER_HASH_LEN /* chain hash after each body */
#define LEDGER_JOURNAL "journal"
#define LEDGER_LOCK    "lock"

/* fetches OpenSSL's SHA-256 once per process and a digest context per thread. Returns 0,
** or -EIO with a message. */
int ledger_crypto_init(char *err, size_t errlen);
/* h_0 = SHA-256("airlock-ledger-v1\0" || id). */
void ledger_h0(const uint8_t id[AIRLOCK_LEDGER_ID_LEN], uint8_t out[LEDGER_HASH]);
/* h_n = SHA-256(prev || body). */
void ledger_chain(const uint8_t prev[LEDGER_HASH], const void *body, size_t len, uint8_t out[LEDGER_HASH]);
/* malloc'd "dir/name", or NULL. */
char *ledger_join(const char *dir, const char *name);

/* ------------------------------------------------------------------ the writer */

/* A seal in progress (segment.c). */
struct ledger_seal {
  int phase;
  int rfd, wfd;    /* the journal, read; the .tmp being written */
  int old_fd;      /* the journal replaced, its blocks being freed */
  uint64_t jlen;   /* the journal's bytes going into the segment */
  uint64_t at;     /* journal offset read up to */
  uint64_t synced; /* segment bytes written since its last fdatasync */
  size_t block;
  uint8_t *plain, *packed;
  char tmp[4096]; /* the .tmp being written ("" when none) */
};

struct airlock_ledger {
  int fd;      /* DIR/journal, O_WRONLY | O_APPEND */
  int lock_fd; /* DIR/lock */
  int locked;  /* lock_fd holds the flock: the pid in the file is ours */
  int created; /* this open wrote the session record */
  char *dir, *journal;
  int durability;
  unsigned batch_ms;
  uint64_t seq;         /* last record written */
  uint64_t durable_seq; /* last record known on disk */
  uint64_t off;         /* plain-stream size: the end of the last whole record */
  uint64_t base;        /* where the journal starts in it (the segments' plain bytes) */
  unsigned nseg;        /* sealed segments */
  uint64_t seal_bytes;  /* seal once the journal holds this much */
  uint64_t seal_at;     /* journal size at which the next seal is tried */
  uint8_t head[LEDGER_HASH];
  char id_hex[2 * AIRLOCK_LEDGER_ID_LEN + 1];
  double pending_since; /* monotonic ms when the oldest unsynced record was written */
  int sticky;           /* 0, or the -errno every append now returns */
  msgpack_sbuffer sb;   /* one record: header, body, hash */
  msgpack_packer pk;
  /* coalesce (opts.coalesce, not in always): records are kept in wq and
  ** written together by airlock_ledger_write_out; seq, off and head already
  ** count them, w_* are the journal's end on disk before the first of them */
  int coalesce;
  msgpack_sbuffer wq;
  uint64_t w_seq, w_off;
  uint8_t w_head[LEDGER_HASH];
  int seal_stepped;      /* opts.seal_stepped: the caller runs a seal's steps */
  struct ledger_seal sj; /* the seal in progress */
  char err[1024];
};

/* journal.c, for the seal: l->err from fmt, then returns rc. */
__attribute__((format(printf, 3, 4))) int ledger_set_err(airlock_ledger *l, int rc, const char *fmt, ...);
/* Writes the records coalesce kept, then fdatasyncs if any record is not yet
** durable. 0 or -errno (sticky). */
int ledger_sync_now(airlock_ledger *l);
/* Writes the records coalesce kept, in one write(2). 0 or -errno (sticky). */
int ledger_write_out(airlock_ledger *l);
/* Writes n bytes; *done says how many went out, also on failure. 0 or -errno. */
int ledger_write_all(int fd, const void *p, size_t n, size_t *done);
/* fsyncs the directory path. 0 or -errno. */
int ledger_fsync_path(const char *path);

/* segment.c, for the writer. */
/* Ends the seal in progress, if any; a .tmp left unfinished is removed. */
void ledger_seal_drop(airlock_ledger *l);
/* Runs the seal in progress to its end. 0 or -errno (sticky). */
int ledger_seal_finish(airlock_ledger *l);
/* After an append: seals once the journal is big enough (stepped: starts the job). */
void ledger_maybe_seal(airlock_ledger *l);
/* Open: the journal's first skip bytes repeat the last segment (a seal was cut
** short after its segment was in place): replaces it with one holding only what
** follows them. 0 or -errno. */
int ledger_drop_repeat(airlock_ledger *l, uint64_t skip);

/* ------------------------------------------------------------------ segments */

#define LEDGER_SEG_MAGIC "airlseg1" /* 8 bytes */
#define LEDGER_SEG_HDR   16         /* magic, u64 plain bytes */
#define LEDGER_BLK_HDR   12         /* codec, 3 zero, u32 plain, u32 stored */
#define LEDGER_SEG_LAST  999999u    /* segment.NNNNNN */
#define LEDGER_SEG_HEAD  64         /* leading bytes compared for a stale journal */

/* "DIR/segment.NNNNNN" (suffix appended, e.g. ".tmp") into out. */
void ledger_seg_name(const char *dir, unsigned n, const char *suffix, char *out, size_t outlen);

/* The plain stream of a session directory, as a reader takes it (segment.c):
** segment.000001, ... decoded block by block as the stream reaches them, then
** the journal after the last, the repeat of an interrupted seal skipped. */
typedef struct ledger_stream {
  int fd;                       /* the journal, opened (by the reader) before any segment */
  const char *dir;              /* the session directory (the reader's copy) */
  int in_journal;               /* reading the journal (after the last segment) */
  int stale;                    /* the journal was a stale copy of the last segment */
  int sfd;                      /* the segment being read, or -1 */
  unsigned seg;                 /* its number (0: none yet) */
  uint64_t seg_off;             /* file offset of its next block header */
  uint64_t seg_plain, seg_done; /* its plain bytes: declared, delivered */
  uint64_t base;                /* plain bytes of the segments finished */
  uint8_t *blk, *cblk;          /* a decoded block [blk_pos, blk_len); stored bytes */
  size_t blk_pos, blk_len;
  uint8_t head[LEDGER_SEG_HEAD]; /* the last segment's first plain bytes */
  size_t head_len;
  char damage[320]; /* what is wrong in a segment, when a read said -EBADMSG:
                       "WORD: segment.N, at offset X: what" */
} ledger_stream;

/* Up to cap bytes of the plain stream. Returns the count, 0 at its end, or
** -errno: -EBADMSG with s->damage set for a damaged segment. */
ssize_t ledger_stream_read(ledger_stream *s, uint8_t *dst, size_t cap);
/* Closes the segment being read and frees the blocks (not the journal's fd). */
void ledger_stream_free(ledger_stream *s);

/* Opens a session directory for streaming reads: the journal is opened first,
** then segment.000001, ... are read in turn as the stream reaches them, and
** the journal after the last. decode 0 skips msgpack-c (verify needs only the
** fields it reads itself), and rec->body is then NULL. */
int ledger_reader_open_dir(const char *dir, int decode, airlock_ledger_reader **out, char *err,
                           size_t errlen);
/* After the end: where the journal starts in the plain stream, the segments
** read, and *stale: 0, or how many of the journal's first bytes repeat the
** last segment (a seal interrupted before it replaced the journal), which the
** reader skipped (the journal's records, if any, follow them). */
void ledger_reader_layout(const airlock_ledger_reader *r, uint64_t *base, unsigned *nseg, uint64_t *stale);

/* Crash points: named places in a seal's steps (ledger/segment.c) where a test
** build of the ledger process stops itself, so a spec can kill it -9 in that
** phase and no other (spec/lua/ledger_seal_spec.lua):
**   segment  a block of segment.N.tmp is written; the segment is not renamed
**   placed   segment.N is renamed into place; the directory is not fsynced
**   journal  journal.tmp holds the journal's tail, fdatasynced; it is not
**            renamed over the journal (which still repeats the segment)
**   swapped  journal.tmp is renamed over the journal; the directory is not
**            fsynced
** They exist only where AIRLOCK_CRASH_POINTS is defined at compile time:
** premake5.lua defines it for airlock-ledgerd-crashpoints alone, a test
** program that make install and install-rock never copy. Everywhere else
** (libairlock, airlock.so, the airlock-ledgerd that hosts run)
** LEDGER_CRASH_POINT expands to nothing and ledger_crash_arm does not exist,
** so no option, message, file or environment can switch production code into
** stopping. In the test build, ledger_crash_arm(phase) (airlock-ledgerd reads
** AIRLOCK_LEDGER_CRASH_AT before it clears its environment) names the phase:
** the process raises SIGSTOP the first time a seal reaches it, and should it
** be continued, _exits (LEDGER_EXIT_CRASH_POINT) without a further step: the
** disk stays exactly as it was at the point, as after a kill -9 there. */
#ifdef AIRLOCK_CRASH_POINTS
#define LEDGER_EXIT_CRASH_POINT 86
/* 0 (NULL or "" disarms), or -EINVAL for a phase that is not one of the above. */
int ledger_crash_arm(const char *phase);
void ledger_crash_point(const char *phase);
#define LEDGER_CRASH_POINT(phase) ledger_crash_point(phase)
#else
#define LEDGER_CRASH_POINT(phase) ((void)0)
#endif

#endif
