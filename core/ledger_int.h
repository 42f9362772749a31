/*
** ledger_int.h -- what core/ledger.c (writer, branch) and core/ledger_read.c
** (reader, verify) share. Not part of the public API.
*/
#ifndef AIRLOCK_LEDGER_INT_H
#define AIRLOCK_LEDGER_INT_H

#include <stdarg.h>
#include "ledger.h"

#define LEDGER_HDR   4                          /* length header */
#define LEDGER_HASH  AIRLOCK_LEDGER_HASH_LEN    /* chain hash after each body */
#define LEDGER_JOURNAL "journal"
#define LEDGER_LOCK    "lock"

/* fetches OpenSSL's SHA-256 once per process and a digest context per thread. Returns 0,
** or -EIO with a message. */
int ledger_crypto_init(char *err, size_t errlen);
/* h_0 = SHA-256("airlock-ledger-v1\0" || id). */
void ledger_h0(const uint8_t id[AIRLOCK_LEDGER_ID_LEN], uint8_t out[LEDGER_HASH]);
/* h_n = SHA-256(prev || body). */
void ledger_chain(const uint8_t prev[LEDGER_HASH], const void *body, size_t len,
                  uint8_t out[LEDGER_HASH]);
/* Decodes 2n hex digits (either case) into n bytes. Returns 0, or -EINVAL. */
int ledger_unhex(const char *s, size_t n, uint8_t *out);
/* malloc'd "dir/name", or NULL. */
char *ledger_join(const char *dir, const char *name);
/* vsnprintf into err (when there is room), then returns rc. */
__attribute__((format(printf, 4, 5)))
int ledger_fail(char *err, size_t errlen, int rc, const char *fmt, ...);

#define LEDGER_SEG_MAGIC "airlseg1"                 /* 8 bytes */
#define LEDGER_SEG_HDR   16                         /* magic, u64 plain bytes */
#define LEDGER_BLK_HDR   12                         /* codec, 3 zero, u32 plain, u32 stored */
#define LEDGER_SEG_LAST  999999u                    /* segment.NNNNNN */
#define LEDGER_SEG_HEAD  64                         /* leading bytes compared for a stale journal */

/* "DIR/segment.NNNNNN" (suffix appended, e.g. ".tmp") into out. */
void ledger_seg_name(const char *dir, unsigned n, const char *suffix, char *out, size_t outlen);

/* Opens a session directory for streaming reads: the journal is opened first,
** then segment.000001, ... are read in turn as the stream reaches them, and
** the journal after the last. decode 0 skips msgpack-c (verify needs only the
** fields it reads itself), and rec->body is then NULL. */
int ledger_reader_open_dir(const char *dir, int decode, airlock_ledger_reader **out,
                           char *err, size_t errlen);
/* After the end: where the journal starts in the plain stream, the segments
** read, and *stale: 0, or how many of the journal's first bytes repeat the
** last segment (a seal interrupted before it replaced the journal), which the
** reader skipped (the journal's records, if any, follow them). */
void ledger_reader_layout(const airlock_ledger_reader *r, uint64_t *base, unsigned *nseg,
                          uint64_t *stale);

/* Crash points: named places in a seal's steps (core/ledger.c) where a test
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
