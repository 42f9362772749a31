/*
** ledger_proc.h -- a session's ledger in a confined process of its own. The
** host starts one airlock-ledgerd per session (ledger/main.c); it is the only
** process that opens the session directory, confined before it reads a byte
** from anyone (Landlock: that directory alone; a measured seccomp allowlist
** without exec or sockets; a net namespace of its own; environment cleared,
** inherited descriptors closed). Producers and readers are its clients over a
** socketpair (core/ledger_proto.h); what the process runs is the journal
** engine (ledger/journal.h), whose functions the comments below name. Same
** conventions as ledger.h: 0 or -errno, messages into caller buffers or the
** error accessor; nothing prints or exits.
**
** Accepted and committed. An append returns once the ledger process has
** ACCEPTED the record: written it whole to the journal, so it survives the
** death of the ledger process (and of the host), though not a machine crash
** until it is COMMITTED (fdatasync: airlock_ledger_proc_durable_seq, exact
** after airlock_ledger_proc_flush). In durability always both happen before
** the ack; in batch the ledger process commits within batch_ms on its own.
**
** Fail closed. A ledger process that is gone (EOF, EPIPE, its death), that
** does not answer within the admission deadline, or that refuses a record
** makes the append fail; every later append fails the same way (sticky), and
** the message says which. The caller must then not perform what the record
** was to admit. A new open starts a new process under a new grant.
*/
#ifndef AIRLOCK_LEDGER_PROC_H
#define AIRLOCK_LEDGER_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "ledger.h"

#define AIRLOCK_LEDGER_ADMIT_MS_DEFAULT 5000

typedef struct airlock_ledger_proc airlock_ledger_proc;

typedef struct airlock_ledger_proc_opts {
  const char *program; /* path of airlock-ledgerd (required) */
  int create;          /* as airlock_ledger_opts */
  int durability;      /* AIRLOCK_DURABLE_* */
  unsigned batch_ms;   /* 0: the default */
  const void *session; /* a new session's fields: one packed msgpack map, or NULL */
  size_t session_len;
  uint64_t max_bytes;  /* the session's journal may not grow past this many
                          bytes (appends are refused, -EDQUOT); 0: no bound */
  unsigned admit_ms;   /* admission deadline per request; 0: the default */
  uint64_t seal_bytes; /* seal the journal into a compressed segment once it
                          holds this many bytes; 0: AIRLOCK_LEDGER_SEAL_DEFAULT */
} airlock_ledger_proc_opts;

/* Starts the ledger process for dir and opens the session in it. Returns 0
** and *out (rep filled as airlock_ledger_open fills it), or -errno with a
** message: the open's own errors (-EWOULDBLOCK "ledger: DIR is in use by pid
** N", -ENOENT, -EBADMSG, -EINVAL), -ETIMEDOUT, or -EPERM for confinement that
** could not be applied (the process then never read a byte). */
int airlock_ledger_proc_open(const char *dir, const airlock_ledger_proc_opts *o, airlock_ledger_proc **out,
                             airlock_ledger_report *rep, char *err, size_t errlen);
/* Appends {kind, run, fields...} (fields: one packed map, or NULL). wait 1:
** returns once the record is accepted (*seq: its seq; *bytes: what it and the
** queued appends accepted with it or since the last waited one added to the
** journal, so a caller adding up *bytes counts every record once). wait 0:
** the request is queued (sent in batches; at most a window's worth are in
** flight) and *seq is the seq it will have if accepted; a refusal surfaces at
** the next waiting call (sticky). Returns 0 or -errno. */
int airlock_ledger_proc_append(airlock_ledger_proc *p, const char *kind, uint64_t run, const void *fields,
                               size_t fields_len, int wait, uint64_t *seq, uint64_t *bytes);
/* Waits until every queued append is accepted or refused. 0 or -errno. */
int airlock_ledger_proc_sync(airlock_ledger_proc *p);
/* Sends the queued appends now, without waiting for their answers (the
** process works on them while the caller does something else, e.g. sends
** other ledgers theirs); airlock_ledger_proc_sync then waits. 0 or -errno. */
int airlock_ledger_proc_send(airlock_ledger_proc *p);
/* The bytes the records acknowledged since the last waited append (or the
** last call of this) added to the journal; counting starts again from 0. */
uint64_t airlock_ledger_proc_take_bytes(airlock_ledger_proc *p);
/* Commits: waits for every append, then for the fdatasync. 0 or -errno. */
int airlock_ledger_proc_flush(airlock_ledger_proc *p);
/* Checks, without waiting, that the process is alive and reads what it sent.
** 0 or the sticky -errno. */
int airlock_ledger_proc_poll(airlock_ledger_proc *p);
/* Batch: milliseconds until the ledger process commits the last accepted
** record on its own (0: by now), or -1 when nothing awaits a commit. */
int airlock_ledger_proc_sync_due_ms(const airlock_ledger_proc *p);
/* airlock_ledger_proc_poll, then, once a batch window is due, a flush (the
** process has committed by then; this learns durable_seq). 0 or -errno. */
int airlock_ledger_proc_tick(airlock_ledger_proc *p);
/* For specs, a hostile producer: writes bytes to the process as they are,
** within the admission deadline (-ETIMEDOUT past it). 0 or -errno. */
int airlock_ledger_proc_raw_send(airlock_ledger_proc *p, const void *bytes, size_t len);
/* The last accepted record: seq and chain hash (either may be NULL). */
void airlock_ledger_proc_head(const airlock_ledger_proc *p, uint64_t *seq,
                              uint8_t hash[AIRLOCK_LEDGER_HASH_LEN]);
uint64_t airlock_ledger_proc_durable_seq(const airlock_ledger_proc *p); /* committed */
int airlock_ledger_proc_durability(const airlock_ledger_proc *p);
const char *airlock_ledger_proc_session_id(const airlock_ledger_proc *p);
const char *airlock_ledger_proc_grant(const airlock_ledger_proc *p);
pid_t airlock_ledger_proc_pid(const airlock_ledger_proc *p);
const char *airlock_ledger_proc_error(const airlock_ledger_proc *p);
/* Asks the process to close (a final commit, but in durability none), waits
** for it within the deadline (else SIGKILL) and reaps it; frees p. Returns 0
** or the -errno of the final commit or of a process that was already gone. */
int airlock_ledger_proc_close(airlock_ledger_proc *p);

/* ------------------------------------------------------------------ readers */

typedef struct airlock_ledger_proc_reader airlock_ledger_proc_reader;

/* Starts a read-only ledger process on dir (Landlock: read beneath dir alone;
** no lock taken) streaming its verified records. */
int airlock_ledger_proc_reader_open(const char *program, const char *dir, airlock_ledger_proc_reader **out,
                                    char *err, size_t errlen);
/* As airlock_ledger_reader_next (rec->body decoded; the bytes are checked as
** untrusted before they are). 1, 0 at the end, or -errno (-EBADMSG: damage). */
int airlock_ledger_proc_reader_next(airlock_ledger_proc_reader *r, airlock_ledger_record *rec);
void airlock_ledger_proc_reader_report(const airlock_ledger_proc_reader *r, airlock_ledger_report *rep);
const char *airlock_ledger_proc_reader_error(const airlock_ledger_proc_reader *r);
/* Kills the process if it still runs, reaps it, frees r. NULL is a no-op. */
void airlock_ledger_proc_reader_close(airlock_ledger_proc_reader *r);

/* airlock_ledger_verify, in a read-only ledger process. */
int airlock_ledger_proc_verify(const char *program, const char *dir, const uint64_t *checkpoint_seq,
                               const uint8_t checkpoint_hash[AIRLOCK_LEDGER_HASH_LEN],
                               airlock_ledger_report *rep);
/* The most seqs one airlock_ledger_proc_verify_at asks about. */
#define AIRLOCK_LEDGER_PROC_AT_MAX 4096

/* One walk, in a read-only ledger process, that verifies the whole journal as
** airlock_ledger_proc_verify does (no checkpoint) and learns the chain hash at
** each of seqs[0..n) (>= 1, strictly increasing, 1 <= n <= AT_MAX): found[i]
** is 1 and hashes[i] set for each seq the journal reaches before any damage,
** else found[i] is 0. Returns as airlock_ledger_proc_verify (-EBADMSG: damage,
** reported in rep). The caller compares the hashes with its checkpoints. */
int airlock_ledger_proc_verify_at(const char *program, const char *dir, const uint64_t *seqs, size_t n,
                                  uint8_t (*hashes)[AIRLOCK_LEDGER_HASH_LEN], uint8_t *found,
                                  airlock_ledger_report *rep);
/* airlock_ledger_branch, in a ledger process that may read src and write dst. */
int airlock_ledger_proc_branch(const char *program, const char *src, uint64_t at_seq, const char *dst,
                               char *err, size_t errlen);

/* A ledger process in probe mode (for specs): confined as a writer of dir,
** it tries what it must not do; each attempt's result (0 or -errno) is handed
** to cb, in order, and *status gets its wait status. Returns 0 or -errno. */
int airlock_ledger_proc_probe(const char *program, const char *dir,
                              void (*cb)(void *ctx, const char *name, int64_t rc), void *ctx, int *status,
                              char *err, size_t errlen);

#endif
