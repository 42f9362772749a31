/*
** ledger_proto.h -- the protocol between a ledger process (ledger/main.c,
** airlock-ledgerd) and its clients (core/ledger_proc.c). Not part of the
** public API: a host uses core/ledger_proc.h.
**
** Transport: the spawner's fd-3 socketpair; frames as everywhere in airlock (a
** 4-byte big-endian length, then one msgpack map with string keys; the length
** is checked before anything is allocated for the body). Field t names the
** kind. The ledger process is started with its grant on argv, by the host:
**   airlock-ledgerd write  DIR GRANT DURABILITY BATCH_MS CREATE MAX_BYTES
**   airlock-ledgerd read   DIR GRANT
**   airlock-ledgerd verify DIR GRANT [SEQ:HEX | --at SEQ,SEQ,...]
**   airlock-ledgerd branch SRC AT DST GRANT
**   airlock-ledgerd probe  DIR GRANT     (confines itself as write does, then
**                                         tries to leave: for the specs)
** GRANT is 32 hex digits the host draws for this start alone; the process
** echoes it in its first frame and nothing from a client can change it, nor
** the directory: a client cannot name a session.
**
** client -> process (write mode)
**   open    {t, session = bin (a packed map) | absent}      first, once
**   append  {t, kind, run, fields = bin (a packed map) | absent}
**   flush   {t}                  commit: fdatasync what was accepted
**   close   {t}                  flush (but in durability none), then exit
** process -> client
**   hello   {t, v, grant, pid, session_id, seq, head = bin32, durable, bytes,
**            records, torn_bytes, reason, created, confined = {layer = word}}
**   ack     {t, seq, n, bytes, hash = bin32, durable, due}   the n appends up
**            to seq were ACCEPTED: written whole to the journal by this
**            process (they survive the process's death; a machine crash only
**            once durable >= seq); bytes: what they added to it; hash: seq's
**            chain hash; due: ms until the process commits them on its own
**            (batch), -1 if none. One ack answers every append the process
**            read before it would wait for more (at most 1024), and comes
**            before any other message: answers stay in request order
**   synced  {t, durable}         COMMITTED: every record up to durable is on disk
**   refuse  {t, errno, message, fatal}  this request was not carried out; fatal:
**            the process is about to exit (protocol error, failed open)
**   closed  {t, durable, errno, message}
** read / verify / branch / probe modes send, unasked:
**   rec     {t, seq, offset, hash = bin32, body = bin}   (read) one verified record
**   end     {t, rc, report = {...}, message}             (read, verify, branch)
**           verify --at adds at = [[seq, hash = bin32], ...]: the chain hash
**           at each seq asked for that the journal reaches, in order
**   probe   {t, name, rc}                                (probe) one attempt's errno
*/
#ifndef AIRLOCK_LEDGER_PROTO_H
#define AIRLOCK_LEDGER_PROTO_H

#include <msgpack.h>
#include "ledger.h"

#define LEDGER_PROTO_VERSION   2
/* The largest frame either side accepts: a record body and its envelope. */
#define LEDGER_PROTO_FRAME_MAX (AIRLOCK_LEDGER_BODY_MAX + (64u << 10))
#define LEDGER_PROTO_GRANT_HEX 32

/* Exit statuses of airlock-ledgerd. */
enum {
  LEDGER_EXIT_OK = 0,
  LEDGER_EXIT_USAGE = 64,
  LEDGER_EXIT_PROTOCOL = 65, /* a client sent a bad frame */
  LEDGER_EXIT_OPEN = 66,     /* the session could not be opened */
  LEDGER_EXIT_CONFINE = 70,  /* confinement could not be applied: nothing was read */
};

/* Packs a report as a map (11 fields). */
void ledger_proto_pack_report(msgpack_packer *pk, const airlock_ledger_report *rep);
/* Reads a report map (missing fields stay 0 / ""). */
void ledger_proto_read_report(const msgpack_object *o, airlock_ledger_report *rep);
/* Field lookups on a decoded map: 1 when key is there with the type, else 0. */
int ledger_proto_u64(const msgpack_object *m, const char *key, uint64_t *v);
int ledger_proto_i64(const msgpack_object *m, const char *key, int64_t *v);
int ledger_proto_str(const msgpack_object *m, const char *key, const char **s, uint32_t *n);
int ledger_proto_bin(const msgpack_object *m, const char *key, const char **s, uint32_t *n);
/* Whether map m's t is word. */
int ledger_proto_is(const msgpack_object *m, const char *word);

#endif
