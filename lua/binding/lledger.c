/*
** lledger.c -- the ledger (core/ledger.h) for Lua: airlock.core.ledger_open and
** the airlock.ledger userdata (append, head, checkpoint, flush, ...),
** ledger_records (a streaming iterator over a journal), ledger_verify,
** ledger_branch, and sha256.
**
** Conventions: an expected failure of the environment or of the journal is
** nil, message, errno (the message is the C API's, "ledger: ..."); a wrong
** argument is a Lua error. Damage met while iterating records is a Lua error
** whose message names the seq and the damage word ("altered", "deleted", ...).
*/
#include "lbinding.h"
#include "ledger.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#define LEDGER_MT "airlock.ledger"
#define READER_MT "airlock.ledger_reader"

typedef struct lledger {
  airlock_ledger *l;
  airlock_ledger_report rep;   /* what the open found (torn tail, head) */
} lledger;

typedef struct lreader {
  airlock_ledger_reader *r;
  airlock_ledger_report rep;   /* kept once the reader is closed */
  int failed;                  /* damage or an I/O error was met */
} lreader;

/* User values of a ledger: 1 = its directory (a string). */
enum { LUV_DIR = 1 };

/* nil, message, errno (a positive errno). */
static int fail(lua_State *L, const char *message, int err) {
  lua_pushnil(L);
  lua_pushstring(L, message);
  lua_pushinteger(L, err);
  return 3;
}

static void set_int(lua_State *L, const char *k, uint64_t v) {
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}

static void push_checkpoint(lua_State *L, uint64_t seq, const uint8_t hash[AIRLOCK_LEDGER_HASH_LEN]) {
  char cp[96];
  lua_pushstring(L, airlock_ledger_format_checkpoint(seq, hash, cp, sizeof cp));
}

/* Pushes a report table. ok < 0 leaves the field out (a writer's open report).
** first_bad_seq and damage (the reason's first word) only when damaged; reason
** when there is one (a torn tail is reported there even when ok). */
void airlock_l_push_ledger_report(lua_State *L, const airlock_ledger_report *rep, int ok) {
  lua_createtable(L, 0, 10);
  if (ok >= 0) {
    lua_pushboolean(L, ok);
    lua_setfield(L, -2, "ok");
  }
  set_int(L, "records", rep->records);
  set_int(L, "last_seq", rep->last_seq);
  set_int(L, "bytes", rep->bytes);
  set_int(L, "torn_bytes", rep->torn_bytes);
  push_checkpoint(L, rep->last_seq, rep->head);
  lua_setfield(L, -2, "head");
  if (rep->session_id[0]) {
    lua_pushstring(L, rep->session_id);
    lua_setfield(L, -2, "session_id");
  }
  if (rep->first_bad_seq) set_int(L, "first_bad_seq", rep->first_bad_seq);
  if (rep->reason[0]) {
    lua_pushstring(L, rep->reason);
    lua_setfield(L, -2, "reason");
    if (ok == 0) {
      size_t n = strcspn(rep->reason, ":");
      lua_pushlstring(L, rep->reason, n);
      lua_setfield(L, -2, "damage");
    }
  }
}

/* Packs the Lua table at idx and decodes it again into *obj (objects live in
** zone and point into sb). Returns 0, or -1 with a message in err. */
static int table_object(lua_State *L, int idx, const char *root, msgpack_sbuffer *sb,
                        msgpack_zone *zone, msgpack_object *obj, char *err, size_t errlen) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  if (airlock_lua_pack(L, idx, &pk, root, err, errlen) < 0) return -1;
  size_t off = 0;
  if (msgpack_unpack(sb->data, sb->size, &off, zone, obj) != MSGPACK_UNPACK_SUCCESS) {
    snprintf(err, errlen, "%s: cannot decode the packed value (out of memory?)", root);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ the writer */

static lledger *check_ledger(lua_State *L, int i) {
  lledger *ll = luaL_checkudata(L, i, LEDGER_MT);
  if (ll->l == NULL) luaL_argerror(L, i, "ledger is closed");
  return ll;
}

static unsigned opt_uint(lua_State *L, int t, const char *k, lua_Integer max) {
  lua_getfield(L, t, k);
  lua_Integer v = 0;
  if (!lua_isnil(L, -1)) {
    int isint;
    v = lua_tointegerx(L, -1, &isint);
    if (!isint || v < 0 || v > max)
      luaL_error(L, "ledger_open: option '%s' must be an integer from 0 to %I", k, max);
  }
  lua_pop(L, 1);
  return (unsigned)v;
}

/* core.ledger_open(dir, {create=, durability=, batch_ms=, session={fields}})
**   -> ledger, or nil, message, errno */
static int l_ledger_open(lua_State *L) {
  static const char *const known[] = { "create", "durability", "batch_ms", "session", NULL };
  const char *dir = luaL_checkstring(L, 1);
  airlock_ledger_opts o;
  memset(&o, 0, sizeof o);
  int have_session = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
      const char *const *p = known;
      while (k && *p && strcmp(k, *p) != 0) p++;
      if (!k || !*p)
        return luaL_error(L, "ledger_open: unknown option '%s' (create, durability, batch_ms, session)",
                          k ? k : luaL_typename(L, -2));
      lua_pop(L, 1);
    }
    lua_getfield(L, 2, "create");
    o.create = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, 2, "durability") != LUA_TNIL) {
      const char *w = lua_tostring(L, -1);
      int d = w && lua_type(L, -1) == LUA_TSTRING ? airlock_ledger_durability_from_name(w) : -1;
      if (d < 0) return luaL_error(L, "ledger_open: option 'durability' must be \"none\", \"batch\" or \"always\"");
      o.durability = d;
    }
    lua_pop(L, 1);
    o.batch_ms = opt_uint(L, 2, "batch_ms", 3600000);
    if (lua_getfield(L, 2, "session") != LUA_TNIL) {
      if (!lua_istable(L, -1)) return luaL_error(L, "ledger_open: option 'session' must be a table of fields");
      have_session = 1;
    }
  }
  int sess = lua_gettop(L);

  lledger *ll = lua_newuserdatauv(L, sizeof *ll, 1);
  memset(ll, 0, sizeof *ll);
  luaL_setmetatable(L, LEDGER_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, LUV_DIR);

  char err[512];
  msgpack_sbuffer sb;
  msgpack_zone zone;
  msgpack_object fields;
  msgpack_sbuffer_init(&sb);
  if (!msgpack_zone_init(&zone, 1024)) {
    msgpack_sbuffer_destroy(&sb);
    return fail(L, "ledger: out of memory", ENOMEM);
  }
  int rc = 0;
  if (have_session) {
    if (table_object(L, sess, "session", &sb, &zone, &fields, err, sizeof err) < 0) rc = -EINVAL;
    else o.session_fields = &fields;
  }
  if (rc == 0) rc = airlock_ledger_open(dir, &o, &ll->l, &ll->rep, err, sizeof err);
  msgpack_zone_destroy(&zone);
  msgpack_sbuffer_destroy(&sb);
  if (rc < 0) {
    ll->l = NULL;
    if (have_session && o.session_fields == NULL) {
      char msg[600];
      snprintf(msg, sizeof msg, "ledger: %s", err);
      return fail(L, msg, EINVAL);
    }
    return fail(L, err, -rc);
  }
  return 1;
}

/* L:append(kind, run, fields) -> seq, bytes (what the record added to the journal), or nil, message, errno */
static int l_append(lua_State *L) {
  lledger *ll = check_ledger(L, 1);
  const char *kind = luaL_checkstring(L, 2);
  lua_Integer run = luaL_checkinteger(L, 3);
  if (run < 0) return luaL_argerror(L, 3, "run must be >= 0");
  if (!lua_isnoneornil(L, 4)) luaL_checktype(L, 4, LUA_TTABLE);
  msgpack_sbuffer sb;
  msgpack_zone zone;
  msgpack_object fields;
  const msgpack_object *fp = NULL;
  char err[512];
  msgpack_sbuffer_init(&sb);
  if (!msgpack_zone_init(&zone, 1024)) {
    msgpack_sbuffer_destroy(&sb);
    return fail(L, "ledger: out of memory", ENOMEM);
  }
  int rc = 0;
  if (lua_istable(L, 4)) {
    if (table_object(L, 4, "fields", &sb, &zone, &fields, err, sizeof err) < 0) rc = -EINVAL;
    else fp = &fields;
  }
  uint64_t seq = 0;
  int packed = rc == 0;
  uint64_t before = airlock_ledger_size(ll->l);
  if (packed) rc = airlock_ledger_append(ll->l, kind, (uint64_t)run, fp, &seq);
  msgpack_zone_destroy(&zone);
  msgpack_sbuffer_destroy(&sb);
  if (rc < 0) {
    if (!packed) {
      char msg[600];
      snprintf(msg, sizeof msg, "ledger: %s", err);
      return fail(L, msg, EINVAL);
    }
    return fail(L, airlock_ledger_error(ll->l), -rc);
  }
  lua_pushinteger(L, (lua_Integer)seq);
  lua_pushinteger(L, (lua_Integer)(airlock_ledger_size(ll->l) - before));
  return 2;
}

/* L:head() -> seq, "HEX" */
static int l_head(lua_State *L) {
  lledger *ll = check_ledger(L, 1);
  uint64_t seq;
  uint8_t h[AIRLOCK_LEDGER_HASH_LEN];
  char hex[65];
  airlock_ledger_head(ll->l, &seq, h);
  airlock_ledger_hex(h, hex);
  lua_pushinteger(L, (lua_Integer)seq);
  lua_pushstring(L, hex);
  return 2;
}

/* L:checkpoint() -> "SEQ:HEX" */
static int l_checkpoint(lua_State *L) {
  lledger *ll = check_ledger(L, 1);
  uint64_t seq;
  uint8_t h[AIRLOCK_LEDGER_HASH_LEN];
  airlock_ledger_head(ll->l, &seq, h);
  push_checkpoint(L, seq, h);
  return 1;
}

static int l_session_id(lua_State *L) {
  lua_pushstring(L, airlock_ledger_session_id(check_ledger(L, 1)->l));
  return 1;
}

static int l_durable_seq(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)airlock_ledger_durable_seq(check_ledger(L, 1)->l));
  return 1;
}

static int l_durability(lua_State *L) {
  lua_pushstring(L, airlock_ledger_durability_name(airlock_ledger_durability(check_ledger(L, 1)->l)));
  return 1;
}

static int l_sync_due_ms(lua_State *L) {
  lua_pushinteger(L, airlock_ledger_sync_due_ms(check_ledger(L, 1)->l));
  return 1;
}

static int done_or_fail(lua_State *L, lledger *ll, int rc) {
  if (rc < 0) return fail(L, airlock_ledger_error(ll->l), -rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_flush(lua_State *L) {
  lledger *ll = check_ledger(L, 1);
  return done_or_fail(L, ll, airlock_ledger_flush(ll->l));
}

static int l_tick(lua_State *L) {
  lledger *ll = check_ledger(L, 1);
  return done_or_fail(L, ll, airlock_ledger_tick(ll->l));
}

/* L:report() -> what the open found: {records, last_seq, bytes, torn_bytes,
** head = "SEQ:HEX", session_id, reason (a torn tail, if one was cut)} */
static int l_report(lua_State *L) {
  lledger *ll = luaL_checkudata(L, 1, LEDGER_MT);
  airlock_l_push_ledger_report(L, &ll->rep, -1);
  return 1;
}

static int l_dir(lua_State *L) {
  luaL_checkudata(L, 1, LEDGER_MT);
  lua_getiuservalue(L, 1, LUV_DIR);
  return 1;
}

/* L:close() -> true, or nil, message, errno (the final flush failed; the
** ledger is closed either way). Idempotent; also __gc and __close. */
static int l_close(lua_State *L) {
  lledger *ll = luaL_checkudata(L, 1, LEDGER_MT);
  if (ll->l == NULL) {
    lua_pushboolean(L, 1);
    return 1;
  }
  airlock_ledger *l = ll->l;
  ll->l = NULL;
  char msg[512] = "";
  int rc = airlock_ledger_flush(l);
  if (rc < 0) snprintf(msg, sizeof msg, "%s", airlock_ledger_error(l));
  int crc = airlock_ledger_close(l);
  if (rc == 0 && crc < 0) {
    rc = crc;
    snprintf(msg, sizeof msg, "ledger: closing failed: %s", airlock_strerror(-crc));
  }
  if (rc < 0) return fail(L, msg, -rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_gc(lua_State *L) {
  lledger *ll = luaL_checkudata(L, 1, LEDGER_MT);
  if (ll->l) airlock_ledger_close(ll->l);
  ll->l = NULL;
  return 0;
}

static int l_tostring(lua_State *L) {
  lledger *ll = luaL_checkudata(L, 1, LEDGER_MT);
  lua_getiuservalue(L, 1, LUV_DIR);
  if (ll->l == NULL) {
    lua_pushfstring(L, "airlock.ledger %s (closed)", lua_tostring(L, -1));
  } else {
    uint64_t seq;
    airlock_ledger_head(ll->l, &seq, NULL);
    lua_pushfstring(L, "airlock.ledger %s (seq %I)", lua_tostring(L, -1), (lua_Integer)seq);
  }
  return 1;
}

/* ------------------------------------------------------------ reading */

static void reader_close(lreader *lr) {
  if (lr->r == NULL) return;
  airlock_ledger_reader_report(lr->r, &lr->rep);
  airlock_ledger_reader_close(lr->r);
  lr->r = NULL;
}

/* The iterator: the next record as a table, nil at the end; damage raises. */
static int records_next(lua_State *L) {
  lreader *lr = luaL_checkudata(L, 1, READER_MT);
  if (lr->r == NULL) {
    if (lr->failed) return luaL_error(L, "ledger: the reader stopped at damage and is closed");
    return 0;
  }
  airlock_ledger_record rec;
  int rc = airlock_ledger_reader_next(lr->r, &rec);
  if (rc == 0) return 0;
  if (rc < 0) {
    lr->failed = 1;
    lua_pushstring(L, airlock_ledger_reader_error(lr->r));
    return lua_error(L);
  }
  char err[256];
  if (airlock_lua_push(L, rec.body, err, sizeof err) < 0) {
    lr->failed = 1;
    return luaL_error(L, "ledger: seq %I: the body cannot be converted for Lua: %s", (lua_Integer)rec.seq, err);
  }
  if (!lua_istable(L, -1)) {
    lr->failed = 1;
    return luaL_error(L, "ledger: seq %I: the body is not a map", (lua_Integer)rec.seq);
  }
  char hex[65];
  airlock_ledger_hex(rec.hash, hex);
  lua_pushstring(L, hex);
  lua_setfield(L, -2, "hash");
  set_int(L, "offset", rec.offset);
  return 1;
}

/* core.ledger_records(dir) -> iterator, reader, nil, reader (the reader is the
** loop's to-be-closed value), or nil, message, errno. The reader's methods:
** report() (as ledger_verify's, ok = no damage met so far) and close(). */
static int l_ledger_records(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  lreader *lr = lua_newuserdatauv(L, sizeof *lr, 0);
  memset(lr, 0, sizeof *lr);
  luaL_setmetatable(L, READER_MT);
  char err[512];
  int rc = airlock_ledger_reader_open(dir, &lr->r, err, sizeof err);
  if (rc < 0) {
    lr->r = NULL;
    return fail(L, err, -rc);
  }
  int ud = lua_gettop(L);
  lua_pushcfunction(L, records_next);
  lua_pushvalue(L, ud);
  lua_pushnil(L);
  lua_pushvalue(L, ud);
  return 4;
}

static int l_reader_report(lua_State *L) {
  lreader *lr = luaL_checkudata(L, 1, READER_MT);
  airlock_ledger_report rep;
  if (lr->r) airlock_ledger_reader_report(lr->r, &rep);
  else rep = lr->rep;
  airlock_l_push_ledger_report(L, &rep, !lr->failed);
  return 1;
}

static int l_reader_close(lua_State *L) {
  reader_close(luaL_checkudata(L, 1, READER_MT));
  return 0;
}

/* core.ledger_verify(dir, checkpoint_or_nil) -> report {ok, records, last_seq,
** head, bytes, torn_bytes, session_id, first_bad_seq, damage, reason}, or nil,
** message, errno when the journal cannot be read at all. */
static int l_ledger_verify(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  uint64_t cseq, *cp = NULL;
  uint8_t chash[AIRLOCK_LEDGER_HASH_LEN];
  if (!lua_isnoneornil(L, 2)) {
    const char *s = luaL_checkstring(L, 2);
    if (airlock_ledger_parse_checkpoint(s, &cseq, chash) < 0)
      return luaL_argerror(L, 2, "checkpoint must be \"SEQ:HEX\" (seq >= 1, 64 hex digits)");
    cp = &cseq;
  }
  airlock_ledger_report rep;
  int rc = airlock_ledger_verify(dir, cp, cp ? chash : NULL, &rep);
  if (rc < 0 && rc != -EBADMSG) {
    char msg[600];
    if (strncmp(rep.reason, "io: ledger: ", 12) == 0) snprintf(msg, sizeof msg, "%s", rep.reason + 4);
    else snprintf(msg, sizeof msg, "ledger: %s: %s", dir, rep.reason);
    return fail(L, msg, -rc);
  }
  airlock_l_push_ledger_report(L, &rep, rc == 0);
  return 1;
}

/* core.ledger_branch(src, at_seq, dst) -> true, or nil, message, errno */
static int l_ledger_branch(lua_State *L) {
  const char *src = luaL_checkstring(L, 1);
  lua_Integer at = luaL_checkinteger(L, 2);
  const char *dst = luaL_checkstring(L, 3);
  if (at < 1) return luaL_argerror(L, 2, "seq must be >= 1");
  char err[512];
  int rc = airlock_ledger_branch(src, (uint64_t)at, dst, err, sizeof err);
  if (rc < 0) return fail(L, err, -rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.sha256(s) -> 64 lowercase hex digits */
static int l_sha256(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (EVP_Digest(s, len, md, &n, EVP_sha256(), NULL) != 1 || n != AIRLOCK_LEDGER_HASH_LEN)
    return luaL_error(L, "sha256: OpenSSL's digest failed");
  char hex[65];
  airlock_ledger_hex(md, hex);
  lua_pushstring(L, hex);
  return 1;
}

void airlock_l_open_ledger(lua_State *L) {
  static const luaL_Reg lm[] = {
    { "append", l_append }, { "head", l_head }, { "checkpoint", l_checkpoint },
    { "session_id", l_session_id }, { "durable_seq", l_durable_seq }, { "flush", l_flush },
    { "tick", l_tick }, { "sync_due_ms", l_sync_due_ms }, { "durability", l_durability }, { "report", l_report },
    { "close", l_close }, { "dir", l_dir }, { NULL, NULL } };
  static const luaL_Reg rm[] = {
    { "report", l_reader_report }, { "close", l_reader_close }, { NULL, NULL } };

  luaL_newmetatable(L, LEDGER_MT);
  luaL_newlib(L, lm);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_gc); lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_gc); lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, l_tostring); lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);

  luaL_newmetatable(L, READER_MT);
  luaL_newlib(L, rm);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_reader_close); lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_reader_close); lua_setfield(L, -2, "__close");
  lua_pop(L, 1);

  lua_pushcfunction(L, l_ledger_open); lua_setfield(L, -2, "ledger_open");
  lua_pushcfunction(L, l_ledger_records); lua_setfield(L, -2, "ledger_records");
  lua_pushcfunction(L, l_ledger_verify); lua_setfield(L, -2, "ledger_verify");
  lua_pushcfunction(L, l_ledger_branch); lua_setfield(L, -2, "ledger_branch");
  lua_pushcfunction(L, l_sha256); lua_setfield(L, -2, "sha256");
}
