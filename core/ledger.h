/*
** ledger.h -- the ledger: a hash-chained, append-only journal of a session's
** records, with crash recovery, streaming verification against checkpoints,
** and branching. This header holds what libairlock's users see of it: the
** format, what a scan reports, one record as read, the durability modes and
** checkpoints as text. A session's journal is opened only by its ledger
** process, airlock-ledgerd, whose journal engine (ledger/journal.h: the
** writer, the reader, verify, branch) is not part of libairlock; hosts are
** its clients (ledger_proc.h). Same conventions as airlock.h: 0 (or a count)
** on success, -errno on failure, messages into caller buffers or a message
** accessor; nothing prints, exits or touches signal dispositions.
**
** On disk, a session directory DIR holds:
**   DIR/lock     flock(2)ed by the one writer, which writes its pid in it
**   DIR/segment.000001, DIR/segment.000002, ...  sealed segments (see below), if any
**   DIR/journal  the open segment: records, back to back, appended. Each record is
**                  4-byte big-endian length N (1 <= N <= AIRLOCK_LEDGER_BODY_MAX)
**                  N bytes: the body, one msgpack map
**                  32 bytes: the chain hash h_n = SHA-256(h_{n-1} || body_n)
**                where h_0 = SHA-256("airlock-ledger-v1\0" || the 16 session id bytes).
** The records, in order, are the plain stream: the sealed segments' plain
** bytes, then the journal's. The writer seals the journal once it holds
** seal_bytes: its bytes go into the next segment file, in blocks, and the
** journal starts empty again. A segment file is
**   16-byte header: "airlseg1", then the u64 (big-endian) count of plain bytes
**   blocks, each:   codec (1 byte: AIRLOCK_LEDGER_CODEC_*), 3 zero bytes,
**                   plain length P (u32, 1 <= P <= AIRLOCK_LEDGER_BLOCK_MAX),
**                   stored length S (u32, S <= AIRLOCK_LEDGER_BLOCK_MAX; S == P
**                   for codec none), then S bytes: the plain bytes (none) or
**                   one zstd frame that declares its content size P (zstd)
** and ends where the blocks' P add up to the header's count. The chain is over
** the plain bytes, so how a segment is stored changes no hash: a sealed and an
** unsealed copy of one session have the same head. A journal from before
** segments existed is a session with no segment: it reads as it always did.
** Every body's map holds seq (1, 2, 3, ... consecutive), kind (string), run
** (unsigned integer) and t (unix time, float) exactly once -- the writer puts
** them first -- and then the caller's fields (string keys). Record 1 is kind "session" and also holds id
** (the session id: 16 random bytes as 32 lowercase hex digits) and created
** (unix seconds, float). Kinds written by callers: init, call, reply, pause,
** resume, done.
**
** What verification proves, and what it cannot:
**  - Any altered byte, substituted, deleted or reordered record up to the end of
**    the journal breaks the chain and is named with the first bad seq.
**  - Removing records from the end, or rewriting the whole journal with fresh
**    hashes, is only detected against a checkpoint (seq, hash) kept outside the
**    ledger's authority: records after the last checkpoint can be lost without
**    detection.
**  - The chain proves the journal is what its producer wrote, not that what it
**    wrote is true: a lying producer can record lies.
*/
#ifndef AIRLOCK_LEDGER_H
#define AIRLOCK_LEDGER_H

#include <stddef.h>
#include <stdint.h>
#include <msgpack.h>

#define AIRLOCK_LEDGER_BODY_MAX         (16u << 20) /* largest body, as for frames */
#define AIRLOCK_LEDGER_HASH_LEN         32
#define AIRLOCK_LEDGER_ID_LEN           16 /* session id bytes (32 hex digits) */
#define AIRLOCK_LEDGER_KIND_MAX         32 /* bytes in a kind read from a journal */
#define AIRLOCK_LEDGER_BATCH_MS_DEFAULT 2
#define AIRLOCK_LEDGER_CODEC_NONE       0          /* a block stored as it is */
#define AIRLOCK_LEDGER_CODEC_ZSTD       1          /* a block stored as one zstd frame */
#define AIRLOCK_LEDGER_BLOCK_PLAIN      (1u << 20) /* plain bytes per block the writer makes */
#define AIRLOCK_LEDGER_BLOCK_MAX        (2u << 20) /* largest block (plain or stored) a reader takes */
#define AIRLOCK_LEDGER_SEAL_DEFAULT     (8u << 20) /* journal bytes at which the writer seals it */

/* How far an append goes before it returns. */
enum {
  AIRLOCK_DURABLE_NONE = 0, /* write(2) only: survives a crash of the process,
                               not of the machine, until flush or close */
  AIRLOCK_DURABLE_BATCH,    /* group commit: one fdatasync covers every record
                               written within batch_ms (see airlock_ledger_tick) */
  AIRLOCK_DURABLE_ALWAYS,   /* fdatasync before each append returns */
};

/* "none", "batch", "always"; "?" for another value. */
const char *airlock_ledger_durability_name(int durability);
/* The mode for a word, or -1. */
int airlock_ledger_durability_from_name(const char *word);

/* What a scan found. Filled by open, verify and the reader. */
typedef struct airlock_ledger_report {
  uint64_t records;                               /* complete, verified records */
  uint64_t last_seq;                              /* seq of the last of them (0: none) */
  uint8_t head[AIRLOCK_LEDGER_HASH_LEN];          /* its chain hash (h_0 if none) */
  uint64_t bytes;                                 /* plain-stream bytes they take (sealed segments' and
                                                     the journal's) */
  uint64_t torn_bytes;                            /* bytes of a partial last record (open: truncated) */
  uint64_t first_bad_seq;                         /* 0, or the seq where verification failed */
  char session_id[2 * AIRLOCK_LEDGER_ID_LEN + 1]; /* "" until record 1 is read */
  char reason[256];                               /* "" when all is well; otherwise one sentence that
                                                     starts with the word naming the damage: altered,
                                                     substituted, deleted, reordered, malformed,
                                                     truncated, checkpoint, codec (a sealed block in a
                                                     codec this process cannot decode), torn (a torn
                                                     tail alone is not a failure), or io */
} airlock_ledger_report;

/* One record, as read. Pointers live until the next call on the reader. */
typedef struct airlock_ledger_record {
  uint64_t seq;
  uint64_t run;
  double t;
  char kind[AIRLOCK_LEDGER_KIND_MAX + 1];
  const msgpack_object *body; /* the whole map */
  const uint8_t *raw;         /* the body's bytes */
  size_t raw_len;
  uint8_t hash[AIRLOCK_LEDGER_HASH_LEN]; /* chain hash after this record */
  uint64_t offset;                       /* of its length header in the plain stream */
} airlock_ledger_record;

/* ------------------------------------------------------------------ checkpoints */

/* 64 lowercase hex digits and a NUL into out. */
void airlock_ledger_hex(const uint8_t hash[AIRLOCK_LEDGER_HASH_LEN], char out[65]);
/* "SEQ:HEX" into out (at least 86 bytes). Returns out. */
char *airlock_ledger_format_checkpoint(uint64_t seq, const uint8_t hash[AIRLOCK_LEDGER_HASH_LEN], char *out,
                                       size_t outlen);
/* Parses "SEQ:HEX" (decimal seq >= 1, 64 hex digits of either case). Returns 0,
** or -EINVAL. */
int airlock_ledger_parse_checkpoint(const char *s, uint64_t *seq, uint8_t hash[AIRLOCK_LEDGER_HASH_LEN]);

#endif
