/*
** ledger_proto.c -- what both ends of the ledger process's protocol share
** (core/ledger_proto.h): the report as a map, and typed field lookups.
*/
#include <string.h>

#include "airlock.h"
#include "ledger_proto.h"

static void kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
  airlock_pack_cstr(pk, k);
  msgpack_pack_uint64(pk, v);
}

void ledger_proto_pack_report(msgpack_packer *pk, const airlock_ledger_report *rep)
{
  msgpack_pack_map(pk, 8);
  kv_u64(pk, "records", rep->records);
  kv_u64(pk, "last_seq", rep->last_seq);
  airlock_pack_cstr(pk, "head");
  msgpack_pack_bin(pk, AIRLOCK_LEDGER_HASH_LEN);
  msgpack_pack_bin_body(pk, rep->head, AIRLOCK_LEDGER_HASH_LEN);
  kv_u64(pk, "bytes", rep->bytes);
  kv_u64(pk, "torn_bytes", rep->torn_bytes);
  kv_u64(pk, "first_bad_seq", rep->first_bad_seq);
  airlock_pack_cstr(pk, "session_id");
  airlock_pack_cstr(pk, rep->session_id);
  airlock_pack_cstr(pk, "reason");
  airlock_pack_cstr(pk, rep->reason);
}

/* Copies string field key into buf (NUL-terminated, cut to fit). */
static void copy_str(const msgpack_object *m, const char *key, char *buf, size_t len)
{
  const char *s;
  uint32_t n;
  buf[0] = '\0';
  if (!ledger_proto_str(m, key, &s, &n)) return;
  if (n >= len) n = (uint32_t)len - 1;
  memcpy(buf, s, n);
  buf[n] = '\0'; /* an embedded NUL just ends the text early */
}

void ledger_proto_read_report(const msgpack_object *o, airlock_ledger_report *rep)
{
  memset(rep, 0, sizeof *rep);
  if (o == NULL || o->type != MSGPACK_OBJECT_MAP) return;
  ledger_proto_u64(o, "records", &rep->records);
  ledger_proto_u64(o, "last_seq", &rep->last_seq);
  ledger_proto_u64(o, "bytes", &rep->bytes);
  ledger_proto_u64(o, "torn_bytes", &rep->torn_bytes);
  ledger_proto_u64(o, "first_bad_seq", &rep->first_bad_seq);
  const char *h;
  uint32_t n;
  if (ledger_proto_bin(o, "head", &h, &n) && n == AIRLOCK_LEDGER_HASH_LEN) memcpy(rep->head, h, n);
  copy_str(o, "session_id", rep->session_id, sizeof rep->session_id);
  copy_str(o, "reason", rep->reason, sizeof rep->reason);
}

int ledger_proto_u64(const msgpack_object *m, const char *key, uint64_t *v)
{
  const msgpack_object *o = airlock_msg_field(m, key);
  if (o == NULL || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return 0;
  *v = o->via.u64;
  return 1;
}

int ledger_proto_i64(const msgpack_object *m, const char *key, int64_t *v)
{
  const msgpack_object *o = airlock_msg_field(m, key);
  if (o == NULL) return 0;
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    *v = o->via.i64;
    return 1;
  }
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
    *v = (int64_t)o->via.u64;
    return 1;
  }
  return 0;
}

int ledger_proto_str(const msgpack_object *m, const char *key, const char **s, uint32_t *n)
{
  const msgpack_object *o = airlock_msg_field(m, key);
  if (o == NULL || o->type != MSGPACK_OBJECT_STR) return 0;
  *s = o->via.str.ptr;
  *n = o->via.str.size;
  return 1;
}

int ledger_proto_bin(const msgpack_object *m, const char *key, const char **s, uint32_t *n)
{
  const msgpack_object *o = airlock_msg_field(m, key);
  if (o == NULL || o->type != MSGPACK_OBJECT_BIN) return 0;
  *s = o->via.bin.ptr;
  *n = o->via.bin.size;
  return 1;
}

int ledger_proto_is(const msgpack_object *m, const char *word)
{
  const char *s;
  uint32_t n;
  return ledger_proto_str(m, "t", &s, &n) && n == strlen(word) && memcmp(s, word, n) == 0;
}
