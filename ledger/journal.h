/*
** journal.h -- the journal engine: writing a session directory (the writer
** lock, recovery on open, appends in three durability modes, sealing into
** segments), reading and verifying it as a stream, and branching a session.
** It runs inside airlock-ledgerd (ledger/main.c), the one process that opens
** a session's directory; it is not part of libairlock. The format, the
** report and the record are in core/ledger.h. Same conventions as there.
**
** Threads: a ledger or reader object is used by one thread at a time; distinct
** objects may be used on distinct threads. Within one process, open a session
** directory for writing once (flock is per open file, so a second open in the
** same process is refused like any other writer).
*/
#ifndef AIRLOCK_JOURNAL_H
#define AIRLOCK_JOURNAL_H

#include "ledger.h"

/* A block codec for sealed segments. The engine carries none (it links no
** compression library): airlock-ledgerd registers zstd's (ledger/zstd.c), as
** the engine's tests and benchmark do. Without one, the writer seals blocks
** as codec none, and the reader refuses a zstd block with a "codec:" reason. */
typedef struct airlock_ledger_codec {
  uint8_t id;       /* AIRLOCK_LEDGER_CODEC_ZSTD */
  const char *name; /* "zstd" */
  /* Compresses n plain bytes into dst (cap bytes). Returns the stored size,
  ** or 0 when it failed or would not fit (the block is then stored plain). */
  size_t (*compress)(const void *src, size_t n, void *dst, size_t cap);
  /* Decompresses src (n bytes, untrusted) into dst, whose cap is exactly the
  ** plain length the block declares. Returns 0 when that many bytes came
  ** out, or -1 with a clause in why (a frame that declares another size,
  ** that would decompress past cap, corrupt data, trailing bytes). */
  int (*decompress)(const void *src, size_t n, void *dst, size_t cap, char *why, size_t whylen);
} airlock_ledger_codec;

/* Sets the process's codec (NULL: none). Call before any ledger is opened. */
void airlock_ledger_set_codec(const airlock_ledger_codec *c);
/* The codec set, or NULL. */
const airlock_ledger_codec *airlock_ledger_get_codec(void);

typedef struct airlock_ledger airlock_ledger;

typedef struct airlock_ledger_opts {
  int create;                           /* 1: make DIR (mode 0700, and its missing parents) and
                                           start a new session when there is no journal yet,
                                           or it is empty. 0: the journal must exist */
  int durability;                       /* AIRLOCK_DURABLE_*; 0 is none */
  unsigned batch_ms;                    /* batch: group-commit window; 0 means the default (2) */
  const msgpack_object *session_fields; /* a new session's extra fields (a map
                              with string keys other than seq, kind, run, t, id,
                              created), e.g. a policy digest; NULL for none.
                              Used only when this open starts the session;
                              read only during the call */
  uint64_t seal_bytes;                  /* seal the journal into a segment once it holds this
                                           many bytes; 0 means AIRLOCK_LEDGER_SEAL_DEFAULT */
  int coalesce;                         /* 1 (not in always): an append keeps its record in
                                           memory until airlock_ledger_write_out (or a sync,
                                           seal, close, or 1 MiB of them) writes them all in
                                           one write(2); a record is in the journal only then.
                                           In batch, an append then never syncs: the caller's
                                           airlock_ledger_tick does, within batch_ms */
  int seal_stepped;                     /* 1: a seal does not run inside the append that
                                           starts it; the caller runs its steps (each a
                                           bounded piece of work) with
                                           airlock_ledger_seal_step when nothing waits, and
                                           close finishes it */
} airlock_ledger_opts;

/* ------------------------------------------------------------------ writer */

/* Opens DIR for writing. Steps: set up SHA-256 (OpenSSL); with o->create, mkdir DIR if
** missing; take DIR/lock (flock LOCK_EX|LOCK_NB, the holder's pid written in
** it); scan and verify the whole journal, streaming, in bounded memory; a torn
** tail (a partial last record: short header, short body or short hash, or a
** zero-filled tail) is cut off (ftruncate, then fdatasync) and reported in
** rep->torn_bytes; finally fdatasync the journal, so everything in it counts as
** durable. A new session's record is written and synced, and DIR is fsynced.
** o may be NULL (open an existing journal, durability none). rep may be NULL.
** Returns 0 and *out, or -errno with a message in err:
**   -EWOULDBLOCK  another writer holds the lock: "ledger: DIR is in use by pid N"
**   -EBADMSG      a complete record is bad (rep->first_bad_seq, rep->reason);
**                 the journal is left exactly as it is and no writer is opened
**   -ENOENT       no journal and o->create is 0
**   -EINVAL       bad options or session fields; other -errno from the system. */
int airlock_ledger_open(const char *dir, const airlock_ledger_opts *o, airlock_ledger **out,
                        airlock_ledger_report *rep, char *err, size_t errlen);

/* Appends one record {seq, kind, run, t, fields...}. kind is the caller's word
** (1 to AIRLOCK_LEDGER_KIND_MAX of a-z 0-9 . _ -, starting with a letter; not
** "session"; the Lua session layer writes init, call, reply, pause, resume and
** done); fields is a map with string keys other than seq,
** kind, run and t, or NULL, nested at most AIRLOCK_MSG_DEPTH_MAX deep (what a
** reader accepts). The record is admitted once it is in the file: one
** write(2) of the whole record (header, body, hash) with O_APPEND; then
**   always: fdatasync before returning (durable_seq == the new seq);
**   batch:  group commit: once the oldest unsynced record is batch_ms old, one
**           fdatasync covers every record written since the last one; it is
**           done by airlock_ledger_tick, airlock_ledger_flush, or the next
**           append (before it writes its own record);
**   none:   no sync until flush or close.
** Returns 0 and *seq_out (may be NULL), or -errno:
**   -EINVAL (bad kind or fields), -EMSGSIZE (body over AIRLOCK_LEDGER_BODY_MAX),
**      -ENOMEM: nothing written, the ledger stays usable;
**   any write or sync failure (-ENOSPC, -EIO, -EFBIG, ...): the file is cut back
**      so it holds no partial record (always mode: not this record either), and
**      the ledger refuses every later append with the same error (sticky);
**      airlock_ledger_error says what happened. A caller that sets RLIMIT_FSIZE
**      should ignore SIGXFSZ so that the limit surfaces here as -EFBIG. */
int airlock_ledger_append(airlock_ledger *l, const char *kind, uint64_t run, const msgpack_object *fields,
                          uint64_t *seq_out);

/* The same with the fields as a packed msgpack map (fields, n; n == 0: none),
** untrusted bytes: its pairs are copied into the body as they are, not
** decoded and packed again. Bytes that are not one map with string keys are
** -EPROTO; a reserved key, -EINVAL; the body is checked as a reader would
** (airlock_msg_check) before it is written. */
int airlock_ledger_append_packed(airlock_ledger *l, const char *kind, uint64_t run, const void *fields,
                                 size_t n, uint64_t *seq_out);

/* Coalesce: writes the records appends kept in memory, in one write(2).
** Returns 0, or -errno: then none of them is in the journal (seq and head go
** back to the last record written), the file holds no partial record, and
** the ledger is sticky. Without coalesce: 0 (every append wrote its record). */
int airlock_ledger_write_out(airlock_ledger *l);

/* Seals the journal now (if it holds a record): its bytes become the next
** segment, in blocks of the codec set (or none), the segment is fsynced, and
** an empty journal replaces the old one; every record is then durable. An
** append seals on its own once the journal reaches seal_bytes. Returns 0, or
** -errno: before the segment is in place the journal is left as it was and the
** ledger stays usable; after, a journal that cannot be replaced is sticky. */
int airlock_ledger_seal(airlock_ledger *l);
/* 1 while a seal is in progress (seal_stepped: started by an append). */
int airlock_ledger_seal_pending(const airlock_ledger *l);
/* Runs one step of the seal in progress: a block compressed (at most 128
** KiB of the journal) or 256 KiB of the journal's tail copied, each
** fdatasynced now and then; the last step swaps the journal (a copy of what
** is left, an fdatasync, two renames' worth of directory syncs). Returns 0 or
** -errno (before the segment is in place the seal is dropped and tried again
** later; after, the ledger is sticky). */
int airlock_ledger_seal_step(airlock_ledger *l);
/* Sealed segments so far. */
unsigned airlock_ledger_segments(const airlock_ledger *l);

/* Batch mode: fdatasync when the oldest unsynced record is batch_ms old. Cheap
** otherwise; call it from the event loop. Returns 0 or -errno (sticky). */
int airlock_ledger_tick(airlock_ledger *l);
/* Milliseconds until airlock_ledger_tick has work (0: now), or -1 when no record
** awaits a sync; an event loop's wait should not exceed it. */
int airlock_ledger_sync_due_ms(const airlock_ledger *l);
/* fdatasync now if any record is not yet durable. Returns 0 or -errno (sticky). */
int airlock_ledger_flush(airlock_ledger *l);
/* The durability l was opened with (AIRLOCK_DURABLE_*). */
int airlock_ledger_durability(const airlock_ledger *l);
/* Highest seq known to be on disk (after an fdatasync). */
uint64_t airlock_ledger_durable_seq(const airlock_ledger *l);
/* The last record's seq and chain hash (both may be NULL). */
void airlock_ledger_head(const airlock_ledger *l, uint64_t *seq, uint8_t hash[AIRLOCK_LEDGER_HASH_LEN]);
/* The session's size in plain bytes (sealed segments and the journal): the
** end of its last whole record. */
uint64_t airlock_ledger_size(const airlock_ledger *l);
/* The session id as 32 hex digits; lives as long as l. */
const char *airlock_ledger_session_id(const airlock_ledger *l);
/* The message for the last failure on l ("" if none). */
const char *airlock_ledger_error(const airlock_ledger *l);
/* Flushes (except in durability none, which promises no sync), releases the
** lock and frees l. Returns 0, or the -errno of the final flush (l is freed
** either way). NULL is a no-op. */
int airlock_ledger_close(airlock_ledger *l);

/* ------------------------------------------------------------------ reading */

typedef struct airlock_ledger_reader airlock_ledger_reader;

/* Opens DIR/journal for reading; needs no lock (a record a writer is still
** writing reads as a torn tail). Returns 0 and *out, or -errno with a message. */
int airlock_ledger_reader_open(const char *dir, airlock_ledger_reader **out, char *err, size_t errlen);
/* Reads and verifies the next record (chain, seq, fields; record 1 must be the
** session). Returns 1 with rec filled, 0 at the end (a torn tail, if any, is in
** the report), or -EBADMSG / -errno; the report then says which seq and why, and
** every later call returns the same. Memory stays bounded by the largest record. */
int airlock_ledger_reader_next(airlock_ledger_reader *r, airlock_ledger_record *rec);
/* What the reader has seen so far (see airlock_ledger_report). */
void airlock_ledger_reader_report(const airlock_ledger_reader *r, airlock_ledger_report *rep);
/* The reader's error message ("" if none). */
const char *airlock_ledger_reader_error(const airlock_ledger_reader *r);
/* NULL is a no-op. */
void airlock_ledger_reader_close(airlock_ledger_reader *r);

/* Verifies the whole journal, streaming, without a lock. With a checkpoint
** (checkpoint_seq non-NULL), the record with that seq must exist and carry that
** chain hash. Returns 0 (a torn tail is reported in rep->torn_bytes, not an
** error), -EBADMSG with rep->first_bad_seq and rep->reason (altered, substituted,
** deleted, reordered, malformed, truncated before the checkpoint, checkpoint
** hash differs), or -errno (rep->reason says what failed). rep must not be NULL. */
int airlock_ledger_verify(const char *dir, const uint64_t *checkpoint_seq,
                          const uint8_t checkpoint_hash[AIRLOCK_LEDGER_HASH_LEN], airlock_ledger_report *rep);

/* Starts session dst from src's records 1..at_seq: a new session record (new id,
** created now, src's session fields, and branch = {from = src's id, at = at_seq,
** head = "SEQ:HEX" of src at at_seq}), then src's records 2..at_seq with their
** bodies unchanged and the chain rebuilt for the new id. src is read without a
** lock and must verify up to at_seq. dst is created (mode 0700) and must not
** already hold records; the result is synced. Returns 0, or -errno with a
** message: -ERANGE (src ends before at_seq, or at_seq is 0), -EEXIST, -EBADMSG. */
int airlock_ledger_branch(const char *src, uint64_t at_seq, const char *dst, char *err, size_t errlen);

#endif
