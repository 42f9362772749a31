/*
** lledger_proc.c -- the ledger in a process of its own (core/ledger_proc.h) for
** Lua: airlock.core.ledger_proc_open and the airlock.ledger_proc userdata
** (the methods of airlock.ledger: append, head, checkpoint, flush, tick, ...,
** plus pid, grant and sync), ledger_proc_records, ledger_proc_verify,
** ledger_proc_branch and ledger_proc_probe. These are the module's only way
** to a journal: no host process opens one itself.
**
** Conventions: an expected failure of the environment or of the journal is
** nil, message, errno (the message is the C API's, "ledger: ..."); a wrong
** argument raises; damage met while iterating raises, naming the seq and the
** damage word ("altered", "deleted", ...).
*/
#include "lbinding.h"
#include "ledger.h"
#include "ledger_proc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define PROC_MT    "airlock.ledger_proc"
#define PREADER_MT "airlock.ledger_proc_reader"

typedef struct lproc {
  airlock_ledger_proc *p;
  airlock_ledger_report rep;
} lproc;

typedef struct lpreader {
  airlock_ledger_proc_reader *r;
  airlock_ledger_report rep;
  int failed;
} lpreader;

enum { LUV_DIR = 1 };

static void set_int(lua_State *L, const char *k, uint64_t v)
{
  lua_pushinteger(L, (lua_Integer)v);
  lua_setfield(L, -2, k);
}

/* Pushes a report table. ok < 0 leaves the field out (a writer's open report).
** first_bad_seq and damage (the reason's first word) only when damaged; reason
** when there is one (a torn tail is reported there even when ok). */
void airlock_l_push_ledger_report(lua_State *L, const airlock_ledger_report *rep, int ok)
{
  lua_createtable(L, 0, 10);
  if (ok >= 0) {
    lua_pushboolean(L, ok);
    lua_setfield(L, -2, "ok");
  }
  set_int(L, "records", rep->records);
  set_int(L, "last_seq", rep->last_seq);
  set_int(L, "bytes", rep->bytes);
  set_int(L, "torn_bytes", rep->torn_bytes);
  char cp[96];
  lua_pushstring(L, airlock_ledger_format_checkpoint(rep->last_seq, rep->head, cp, sizeof cp));
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

static int fail(lua_State *L, const char *message, int err)
{
  lua_pushnil(L);
  lua_pushstring(L, message);
  lua_pushinteger(L, err);
  return 3;
}

/* A verify that could not read the journal (not one that found damage):
** nil, "ledger: ...", errno. */
int airlock_l_verify_failed(lua_State *L, const char *dir, const airlock_ledger_report *rep, int rc)
{
  char msg[600];
  if (strncmp(rep->reason, "io: ledger: ", 12) == 0)
    snprintf(msg, sizeof msg, "%s", rep->reason + 4);
  else
    snprintf(msg, sizeof msg, "ledger: %s: %s", dir, rep->reason);
  return fail(L, msg, -rc);
}

/* Packs the table at idx into sb (cleared). 0, or -1 with a message. */
static int pack_table(lua_State *L, int idx, const char *root, msgpack_sbuffer *sb, char *err, size_t errlen)
{
  msgpack_packer pk;
  msgpack_sbuffer_clear(sb);
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  return airlock_lua_pack(L, idx, &pk, root, err, errlen) < 0 ? -1 : 0;
}

static lproc *check_proc(lua_State *L, int i)
{
  lproc *lp = luaL_checkudata(L, i, PROC_MT);
  if (lp->p == NULL) luaL_argerror(L, i, "ledger is closed");
  return lp;
}

static unsigned opt_uint(lua_State *L, int t, const char *k, lua_Integer max)
{
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

/* core.ledger_proc_open(program, dir, {create=, durability=, batch_ms=,
** session={fields}, max_bytes=, admit_ms=, seal_bytes=}) -> ledger, or nil, message, errno */
static int l_open(lua_State *L)
{
  static const char *const known[] = {"create",    "durability", "batch_ms",   "session",
                                      "max_bytes", "admit_ms",   "seal_bytes", NULL};
  const char *program = luaL_checkstring(L, 1);
  const char *dir = luaL_checkstring(L, 2);
  airlock_ledger_proc_opts o;
  memset(&o, 0, sizeof o);
  o.program = program;
  int sess = 0;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    const char *bad = airlock_l_unknown_key(L, 3, known);
    if (bad)
      return luaL_error(L,
                        "ledger_open: unknown option '%s' (create, durability, batch_ms, session, "
                        "max_bytes, admit_ms, seal_bytes)",
                        bad);
    lua_getfield(L, 3, "create");
    o.create = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, 3, "durability") != LUA_TNIL) {
      const char *w = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
      int d = w ? airlock_ledger_durability_from_name(w) : -1;
      if (d < 0)
        return luaL_error(L, "ledger_open: option 'durability' must be \"none\", \"batch\" or \"always\"");
      o.durability = d;
    }
    lua_pop(L, 1);
    o.batch_ms = opt_uint(L, 3, "batch_ms", 3600000);
    o.admit_ms = opt_uint(L, 3, "admit_ms", 3600000);
    lua_getfield(L, 3, "max_bytes");
    if (!lua_isnil(L, -1)) {
      int isint;
      lua_Integer v = lua_tointegerx(L, -1, &isint);
      if (!isint || v < 0) return luaL_error(L, "ledger_open: option 'max_bytes' must be an integer >= 0");
      o.max_bytes = (uint64_t)v;
    }
    lua_pop(L, 1);
    lua_getfield(L, 3, "seal_bytes");
    if (!lua_isnil(L, -1)) {
      int isint;
      lua_Integer v = lua_tointegerx(L, -1, &isint);
      if (!isint || v < 0) return luaL_error(L, "ledger_open: option 'seal_bytes' must be an integer >= 0");
      o.seal_bytes = (uint64_t)v;
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 3, "session") != LUA_TNIL) {
      if (!lua_istable(L, -1))
        return luaL_error(L, "ledger_open: option 'session' must be a table of fields");
      sess = lua_gettop(L);
    }
  }

  lproc *lp = lua_newuserdatauv(L, sizeof *lp, 1);
  memset(lp, 0, sizeof *lp);
  luaL_setmetatable(L, PROC_MT);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, LUV_DIR);

  char err[1024];
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  if (sess) {
    if (pack_table(L, sess, "session", &sb, err, sizeof err) < 0) {
      msgpack_sbuffer_destroy(&sb);
      char msg[1100];
      snprintf(msg, sizeof msg, "ledger: %s", err);
      return fail(L, msg, EINVAL);
    }
    o.session = sb.data;
    o.session_len = sb.size;
  }
  int rc = airlock_ledger_proc_open(dir, &o, &lp->p, &lp->rep, err, sizeof err);
  msgpack_sbuffer_destroy(&sb);
  if (rc < 0) {
    lp->p = NULL;
    return fail(L, err, -rc);
  }
  return 1;
}

/* L:append(kind, run, fields, wait) -> seq, bytes, or nil, message, errno.
** wait false: queued (sent in batches); seq is the one it will have. */
static int l_append(lua_State *L)
{
  lproc *lp = check_proc(L, 1);
  const char *kind = luaL_checkstring(L, 2);
  lua_Integer run = luaL_checkinteger(L, 3);
  if (run < 0) return luaL_argerror(L, 3, "run must be >= 0");
  if (!lua_isnoneornil(L, 4)) luaL_checktype(L, 4, LUA_TTABLE);
  int wait = lua_isnoneornil(L, 5) ? 1 : lua_toboolean(L, 5);
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  char err[512];
  if (lua_istable(L, 4) && pack_table(L, 4, "fields", &sb, err, sizeof err) < 0) {
    msgpack_sbuffer_destroy(&sb);
    char msg[600];
    snprintf(msg, sizeof msg, "ledger: %s", err);
    return fail(L, msg, EINVAL);
  }
  uint64_t seq = 0, bytes = 0;
  int rc = airlock_ledger_proc_append(lp->p, kind, (uint64_t)run, lua_istable(L, 4) ? sb.data : NULL, sb.size,
                                      wait, &seq, &bytes);
  msgpack_sbuffer_destroy(&sb);
  if (rc < 0) return fail(L, airlock_ledger_proc_error(lp->p), -rc);
  lua_pushinteger(L, (lua_Integer)seq);
  lua_pushinteger(L, (lua_Integer)bytes);
  return 2;
}

static int l_head(lua_State *L)
{
  lproc *lp = check_proc(L, 1);
  uint64_t seq;
  uint8_t h[AIRLOCK_LEDGER_HASH_LEN];
  char hex[65];
  airlock_ledger_proc_head(lp->p, &seq, h);
  airlock_ledger_hex(h, hex);
  lua_pushinteger(L, (lua_Integer)seq);
  lua_pushstring(L, hex);
  return 2;
}

static int l_checkpoint(lua_State *L)
{
  lproc *lp = check_proc(L, 1);
  uint64_t seq;
  uint8_t h[AIRLOCK_LEDGER_HASH_LEN];
  char cp[96];
  airlock_ledger_proc_head(lp->p, &seq, h);
  lua_pushstring(L, airlock_ledger_format_checkpoint(seq, h, cp, sizeof cp));
  return 1;
}

static int l_session_id(lua_State *L)
{
  lua_pushstring(L, airlock_ledger_proc_session_id(check_proc(L, 1)->p));
  return 1;
}

static int l_grant(lua_State *L)
{
  lua_pushstring(L, airlock_ledger_proc_grant(check_proc(L, 1)->p));
  return 1;
}

static int l_pid(lua_State *L)
{
  lua_pushinteger(L, airlock_ledger_proc_pid(check_proc(L, 1)->p));
  return 1;
}

static int l_durable_seq(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)airlock_ledger_proc_durable_seq(check_proc(L, 1)->p));
  return 1;
}

static int l_durability(lua_State *L)
{
  lua_pushstring(L, airlock_ledger_durability_name(airlock_ledger_proc_durability(check_proc(L, 1)->p)));
  return 1;
}

/* Batch: ms until the ledger process commits on its own (-1: nothing pending). */
static int l_sync_due_ms(lua_State *L)
{
  lua_pushinteger(L, airlock_ledger_proc_sync_due_ms(check_proc(L, 1)->p));
  return 1;
}

static int done_or_fail(lua_State *L, lproc *lp, int rc)
{
  if (rc < 0) return fail(L, airlock_ledger_proc_error(lp->p), -rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_flush(lua_State *L)
{
  lproc *lp = check_proc(L, 1);
  return done_or_fail(L, lp, airlock_ledger_proc_flush(lp->p));
}

/* L:send() -> true: the queued appends go out now, unanswered (sync waits) */
static int l_send(lua_State *L)
{
  lproc *lp = check_proc(L, 1);
  return done_or_fail(L, lp, airlock_ledger_proc_send(lp->p));
}

/* L:sync() -> true, bytes (what the records accepted since the last waited
** append or sync added), or nil, message, errno */
static int l_sync(lua_State *L)
{
  lproc *lp = check_proc(L, 1);
  int rc = airlock_ledger_proc_sync(lp->p);
  if (rc < 0) return done_or_fail(L, lp, rc);
  lua_pushboolean(L, 1);
  lua_pushinteger(L, (lua_Integer)airlock_ledger_proc_take_bytes(lp->p));
  return 2;
}

/* tick: is the ledger process still there (one poll)? A due window is asked about. */
static int l_tick(lua_State *L)
{
  lproc *lp = check_proc(L, 1);
  return done_or_fail(L, lp, airlock_ledger_proc_tick(lp->p));
}

/* L:raw_send(bytes) -> true, or nil, message, errno: for specs (a hostile
** producer), bytes written to the ledger process as they are. */
static int l_raw_send(lua_State *L)
{
  lproc *lp = check_proc(L, 1);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  int rc = airlock_ledger_proc_raw_send(lp->p, s, n);
  if (rc < 0)
    return fail(L,
                rc == -ETIMEDOUT ? "ledger: the ledger process took no more bytes"
                                 : airlock_ledger_proc_error(lp->p),
                -rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_report(lua_State *L)
{
  lproc *lp = luaL_checkudata(L, 1, PROC_MT);
  airlock_l_push_ledger_report(L, &lp->rep, -1);
  return 1;
}

static int l_dir(lua_State *L)
{
  luaL_checkudata(L, 1, PROC_MT);
  lua_getiuservalue(L, 1, LUV_DIR);
  return 1;
}

static int l_close(lua_State *L)
{
  lproc *lp = luaL_checkudata(L, 1, PROC_MT);
  if (lp->p == NULL) {
    lua_pushboolean(L, 1);
    return 1;
  }
  airlock_ledger_proc *p = lp->p;
  lp->p = NULL;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", airlock_ledger_proc_error(p));
  int rc = airlock_ledger_proc_close(p);
  if (rc < 0) return fail(L, msg[0] ? msg : "ledger: closing the ledger process failed", -rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_gc(lua_State *L)
{
  lproc *lp = luaL_checkudata(L, 1, PROC_MT);
  if (lp->p) airlock_ledger_proc_close(lp->p);
  lp->p = NULL;
  return 0;
}

static int l_tostring(lua_State *L)
{
  lproc *lp = luaL_checkudata(L, 1, PROC_MT);
  lua_getiuservalue(L, 1, LUV_DIR);
  if (lp->p == NULL) {
    lua_pushfstring(L, "airlock.ledger %s (closed)", lua_tostring(L, -1));
  } else {
    uint64_t seq;
    airlock_ledger_proc_head(lp->p, &seq, NULL);
    lua_pushfstring(L, "airlock.ledger %s (seq %I, ledger process %d)", lua_tostring(L, -1), (lua_Integer)seq,
                    (int)airlock_ledger_proc_pid(lp->p));
  }
  return 1;
}

/* ------------------------------------------------------------ reading */

static void reader_close(lpreader *lr)
{
  if (lr->r == NULL) return;
  airlock_ledger_proc_reader_report(lr->r, &lr->rep);
  airlock_ledger_proc_reader_close(lr->r);
  lr->r = NULL;
}

static int records_next(lua_State *L)
{
  lpreader *lr = luaL_checkudata(L, 1, PREADER_MT);
  if (lr->r == NULL) {
    if (lr->failed) return luaL_error(L, "ledger: the reader stopped at damage and is closed");
    return 0;
  }
  airlock_ledger_record rec;
  int rc = airlock_ledger_proc_reader_next(lr->r, &rec);
  if (rc == 0) return 0;
  if (rc < 0) {
    lr->failed = 1;
    lua_pushstring(L, airlock_ledger_proc_reader_error(lr->r));
    return lua_error(L);
  }
  char err[256];
  if (airlock_lua_push(L, rec.body, err, sizeof err) < 0) {
    lr->failed = 1;
    return luaL_error(L, "ledger: seq %I: the body cannot be converted for Lua: %s", (lua_Integer)rec.seq,
                      err);
  }
  if (!lua_istable(L, -1)) {
    lr->failed = 1;
    return luaL_error(L, "ledger: seq %I: the body is not a map", (lua_Integer)rec.seq);
  }
  char hex[65];
  airlock_ledger_hex(rec.hash, hex);
  lua_pushstring(L, hex);
  lua_setfield(L, -2, "hash");
  lua_pushinteger(L, (lua_Integer)rec.offset);
  lua_setfield(L, -2, "offset");
  return 1;
}

/* core.ledger_proc_records(program, dir) -> iterator, reader, nil, reader */
static int l_records(lua_State *L)
{
  const char *program = luaL_checkstring(L, 1);
  const char *dir = luaL_checkstring(L, 2);
  lpreader *lr = lua_newuserdatauv(L, sizeof *lr, 0);
  memset(lr, 0, sizeof *lr);
  luaL_setmetatable(L, PREADER_MT);
  char err[512];
  int rc = airlock_ledger_proc_reader_open(program, dir, &lr->r, err, sizeof err);
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

static int l_reader_report(lua_State *L)
{
  lpreader *lr = luaL_checkudata(L, 1, PREADER_MT);
  airlock_ledger_report rep;
  if (lr->r)
    airlock_ledger_proc_reader_report(lr->r, &rep);
  else
    rep = lr->rep;
  airlock_l_push_ledger_report(L, &rep, !lr->failed);
  return 1;
}

static int l_reader_close(lua_State *L)
{
  reader_close(luaL_checkudata(L, 1, PREADER_MT));
  return 0;
}

/* core.ledger_proc_verify(program, dir, checkpoint) -> report, or nil, message, errno */
static int l_verify(lua_State *L)
{
  const char *program = luaL_checkstring(L, 1);
  const char *dir = luaL_checkstring(L, 2);
  uint64_t cseq, *cp = NULL;
  uint8_t chash[AIRLOCK_LEDGER_HASH_LEN];
  if (!lua_isnoneornil(L, 3)) {
    const char *s = luaL_checkstring(L, 3);
    if (airlock_ledger_parse_checkpoint(s, &cseq, chash) < 0)
      return luaL_argerror(L, 3, "checkpoint must be \"SEQ:HEX\" (seq >= 1, 64 hex digits)");
    cp = &cseq;
  }
  airlock_ledger_report rep;
  int rc = airlock_ledger_proc_verify(program, dir, cp, cp ? chash : NULL, &rep);
  if (rc < 0 && rc != -EBADMSG) return airlock_l_verify_failed(L, dir, &rep, rc);
  airlock_l_push_ledger_report(L, &rep, rc == 0);
  return 1;
}

/* core.ledger_proc_branch(program, src, at, dst) -> true, or nil, message, errno */
static int l_branch(lua_State *L)
{
  const char *program = luaL_checkstring(L, 1);
  const char *src = luaL_checkstring(L, 2);
  lua_Integer at = luaL_checkinteger(L, 3);
  const char *dst = luaL_checkstring(L, 4);
  if (at < 1) return luaL_argerror(L, 3, "seq must be >= 1");
  char err[1024];
  int rc = airlock_ledger_proc_branch(program, src, (uint64_t)at, dst, err, sizeof err);
  if (rc < 0) return fail(L, err, -rc);
  lua_pushboolean(L, 1);
  return 1;
}

static void probe_cb(void *ctx, const char *name, int64_t rc)
{
  lua_State *L = ctx;
  lua_pushinteger(L, (lua_Integer)rc);
  lua_setfield(L, -2, name);
}

/* core.ledger_proc_probe(program, dir) -> {attempt = 0 or -errno, ...}, {exit=, signal=} */
static int l_probe(lua_State *L)
{
  const char *program = luaL_checkstring(L, 1);
  const char *dir = luaL_checkstring(L, 2);
  lua_newtable(L);
  int status = 0;
  char err[512];
  int rc = airlock_ledger_proc_probe(program, dir, probe_cb, L, &status, err, sizeof err);
  if (rc < 0) return fail(L, err, -rc);
  lua_newtable(L);
  if (WIFSIGNALED(status)) {
    lua_pushinteger(L, WTERMSIG(status));
    lua_setfield(L, -2, "signal");
  } else if (WIFEXITED(status)) {
    lua_pushinteger(L, WEXITSTATUS(status));
    lua_setfield(L, -2, "exit");
  }
  return 2;
}

void airlock_l_open_ledger_proc(lua_State *L)
{
  static const luaL_Reg pm[] = {{"append", l_append},
                                {"head", l_head},
                                {"checkpoint", l_checkpoint},
                                {"session_id", l_session_id},
                                {"durable_seq", l_durable_seq},
                                {"flush", l_flush},
                                {"sync", l_sync},
                                {"send", l_send},
                                {"tick", l_tick},
                                {"sync_due_ms", l_sync_due_ms},
                                {"durability", l_durability},
                                {"report", l_report},
                                {"close", l_close},
                                {"dir", l_dir},
                                {"pid", l_pid},
                                {"grant", l_grant},
                                {"raw_send", l_raw_send},
                                {NULL, NULL}};
  static const luaL_Reg rm[] = {{"report", l_reader_report}, {"close", l_reader_close}, {NULL, NULL}};

  static const luaL_Reg pmeta[] = {
      {"__gc", l_gc}, {"__close", l_gc}, {"__tostring", l_tostring}, {NULL, NULL}};
  static const luaL_Reg rmeta[] = {{"__gc", l_reader_close}, {"__close", l_reader_close}, {NULL, NULL}};

  airlock_l_class(L, PROC_MT, pm, pmeta);
  airlock_l_class(L, PREADER_MT, rm, rmeta);

  lua_pushcfunction(L, l_open);
  lua_setfield(L, -2, "ledger_proc_open");
  lua_pushcfunction(L, l_records);
  lua_setfield(L, -2, "ledger_proc_records");
  lua_pushcfunction(L, l_verify);
  lua_setfield(L, -2, "ledger_proc_verify");
  lua_pushcfunction(L, l_branch);
  lua_setfield(L, -2, "ledger_proc_branch");
  lua_pushcfunction(L, l_probe);
  lua_setfield(L, -2, "ledger_proc_probe");
}
