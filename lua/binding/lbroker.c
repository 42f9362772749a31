/*
** lbroker.c -- the airlock.broker userdata: start runs, step the epoll loop,
** dispatch calls to Lua handlers (under pcall); the run's methods are in
** lrun.c, its result table in lresult.c.
*/
#define _GNU_SOURCE
#include "lbroker.h"
#include "lstart_opts.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

static char defer_key;

/* airlock.core.shared_netns() -> true, or nil, message when this process
** cannot make the shared empty net namespace (it needs CAP_SYS_ADMIN). */
static int l_shared_netns(lua_State *L)
{
  const char *why;
  int fd = airlock_l_shared_netns(&why);
  if (fd < 0) return airlock_l_fail(L, "netns", why, -fd);
  lua_pushboolean(L, 1);
  return 1;
}

static lbroker *check_broker(lua_State *L, int i)
{
  lbroker *lb = luaL_checkudata(L, i, AIRLOCK_BROKER_MT);
  if (lb->closed) luaL_argerror(L, i, "broker is closed");
  return lb;
}

/* ------------------------------------------------------------ packing */

/* Packs the value at idx as a standalone msgpack object into sb. */
static int pack_value(lua_State *L, int idx, msgpack_sbuffer *sb, const char *root, char *err, size_t n)
{
  msgpack_packer pk;
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  return airlock_lua_pack(L, idx, &pk, root, err, n);
}

/* Answers call id with the value at idx. effect: the handler's effect, whose
** name a failure gives ("handler for 'x' ..."), or NULL for a deferred answer
** (run:reply), whose failure reaches the guest as the core says it, as
** run:fail's does. An answer too large to send fails the call at once
** (airlock_run_answer_too_large): -EMSGSIZE, with the message in why. */
int airlock_l_reply_value(lua_State *L, lrun *lr, uint64_t id, int idx, const char *effect, char *why,
                          size_t whylen)
{
  msgpack_sbuffer *sb = &lr->lb->reply;
  char err[256], msg[640];
  msgpack_sbuffer_clear(sb);
  int rc, n;
  if (pack_value(L, idx, sb, "result", err, sizeof err) < 0) {
    n = snprintf(msg, sizeof msg, "handler for '%s' returned a value that cannot be sent: %s",
                 effect ? effect : "deferred", err);
    rc = airlock_run_fail(lr->r, id, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1, NULL);
  } else if (airlock_run_answer_too_large(lr->r, sb->size, err, sizeof err)) {
    snprintf(why, whylen, "%s", err);
    if (effect) { /* as a handler's error reads: the guest cannot tell them apart */
      n = snprintf(msg, sizeof msg, "handler for '%s' failed: %s", effect, err);
      rc = airlock_run_fail(lr->r, id, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1, NULL);
    } else {
      rc = airlock_run_reply(lr->r, id, sb->data, sb->size); /* fails it with err */
    }
    if (rc == 0 || rc == -EMSGSIZE) rc = -EMSGSIZE;
  } else {
    rc = airlock_run_reply(lr->r, id, sb->data, sb->size);
  }
  /* A large answer's buffer is not kept. */
  if (sb->alloc > 65536) {
    msgpack_sbuffer_destroy(sb);
    msgpack_sbuffer_init(sb);
  }
  return rc;
}

/* ------------------------------------------------------------ dispatch */

/* The message handler of a handler's pcall: a denial passes unchanged (the
** call's failure is read from its type); any other error gets a traceback. */
static int traceback(lua_State *L)
{
  if (airlock_l_denial_reason(L, 1)) {
    lua_settop(L, 1);
    return 1;
  }
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = luaL_tolstring(L, 1, NULL);
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Pushes a handler's ctx: run, seq, effect, handle, and through its
** metatable the run's grant (RUV_CTX: policy, secrets, nest, ...). It is a
** table of its own per call, so a handler may set fields of its own; the
** grant is read through __index, not copied, which kept a copy loop off
** every call. The metatable is made once per grant (RUV_CTX_MT), and again
** if the grant was replaced (run:_unpark). It comes from
** the broker's grant, never from guest bytes. */
static void push_ctx(lua_State *L, int runud, const airlock_event *ev, const char *effect)
{
  lrun *lr = lua_touserdata(L, runud);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, lr->serial);
  lua_setfield(L, -2, "run");
  lua_pushinteger(L, (lua_Integer)ev->id);
  lua_setfield(L, -2, "seq");
  lua_pushstring(L, effect);
  lua_setfield(L, -2, "effect");
  lua_pushvalue(L, runud);
  lua_setfield(L, -2, "handle");
  int ctx = lua_gettop(L);
  lua_getiuservalue(L, runud, RUV_CTX);
  int grant = lua_gettop(L);
  int current = lua_getiuservalue(L, runud, RUV_CTX_MT) == LUA_TTABLE;
  if (current) {
    lua_getfield(L, -1, "__index");
    current = lua_rawequal(L, -1, grant);
    lua_pop(L, 1);
  }
  if (!current) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 2);
    lua_pushvalue(L, grant);
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable"); /* a handler cannot swap it */
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, runud, RUV_CTX_MT);
  }
  lua_setmetatable(L, ctx);
  lua_settop(L, ctx);
}

/* Runs the handler for one call: deny, answer, defer, or fail. Stack-neutral. */
static void dispatch(lua_State *L, int runud, const airlock_event *ev)
{
  lrun *lr = lua_touserdata(L, runud);
  int top = lua_gettop(L);
  char effect[AIRLOCK_EFFECT_NAME_MAX + 1], err[256];
  memcpy(effect, ev->effect, ev->effect_len);
  effect[ev->effect_len] = 0;

  lua_getiuservalue(L, runud, RUV_HANDLERS);
  lua_pushlstring(L, ev->effect, ev->effect_len);
  lua_rawget(L, -2);
  if (!lua_isfunction(L, -1) && !(lua_istable(L, -1) || lua_isuserdata(L, -1))) {
    char msg[640];
    int n = snprintf(msg, sizeof msg, "denied: effect '%s' is not granted by the policy", effect);
    airlock_run_note_denied(lr->r);
    airlock_run_fail(lr->r, ev->id, msg, (size_t)n, "denied");
    /* ctx.on_denied(effect, id): the recorder's hook, so an audit sees the
    ** attempt. The args are never turned into Lua for a call nobody grants. */
    lua_getiuservalue(L, runud, RUV_CTX);
    if (lua_getfield(L, -1, "on_denied") == LUA_TFUNCTION) {
      lua_pushstring(L, effect);
      lua_pushinteger(L, (lua_Integer)ev->id);
      lua_pcall(L, 2, 0, 0);
    }
    lua_settop(L, top);
    return;
  }
  lua_pushcfunction(L, traceback);
  lua_insert(L, -2); /* msgh, handler */
  int msgh = lua_gettop(L) - 1;
  if (airlock_lua_push(L, ev->args, err, sizeof err) < 0) {
    char msg[640];
    snprintf(msg, sizeof msg, "protocol: call %llu ('%s') args: %s", (unsigned long long)ev->id, effect, err);
    airlock_run_abort(lr->r, AIRLOCK_CAUSE_PROTOCOL, msg);
    lua_settop(L, top);
    return;
  }
  push_ctx(L, runud, ev, effect);

  if (lua_pcall(L, 2, 1, msgh) != LUA_OK) {
    /* The guest sees the message's first line; the host-side traceback stays
    ** in the host. A handler that refuses raises a denial (core.deny: the
    ** handlers' refusals, airlock.handlers.deny): the guest gets a denied
    ** error, "denied: why", and a run the guest lets it end is cause denied,
    ** like an effect the policy lacks. */
    const char *why = airlock_l_denial_reason(L, -1);
    int denied = why != NULL;
    size_t len = 0;
    const char *tb = denied ? why : lua_tolstring(L, -1, &len);
    if (denied) len = strlen(why);
    const char *nl = tb ? memchr(tb, '\n', len) : NULL;
    char msg[600];
    size_t first = nl ? (size_t)(nl - tb) : (tb ? len : 0);
    int n = denied ? snprintf(msg, sizeof msg, "denied: %.*s", (int)first, tb)
                   : snprintf(msg, sizeof msg, "handler for '%s' failed: %.*s", effect, (int)first,
                              tb ? tb : "(no message)");
    if (denied) airlock_run_note_denied(lr->r);
    airlock_run_fail(lr->r, ev->id, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1,
                     denied ? "denied" : NULL);
    if (denied) {
      luaL_tolstring(L, -1, NULL);
      lua_replace(L, -2);
    } /* the hook hears text */
    lua_getiuservalue(L, runud, RUV_CTX);
    lua_getfield(L, -1, "on_handler_error");
    if (lua_isfunction(L, -1)) {
      lua_pushvalue(L, -3);
      lua_pcall(L, 1, 0, 0);
    }
  } else if (!(lua_islightuserdata(L, -1) && lua_touserdata(L, -1) == &defer_key)) {
    char why[256];
    airlock_l_reply_value(L, lr, ev->id, lua_gettop(L), effect, why, sizeof why);
  }
  lua_settop(L, top);
}

/* Runs the handler for one note: no answer goes back. A note for an effect
** the policy does not declare a notification (ctx.notify) is a breach of the
** protocol: the worker sends notes only for those. A handler's error cannot
** reach the guest; ctx.on_note_error(message) hears of it. Stack-neutral. */
static void dispatch_note(lua_State *L, int runud, const airlock_event *ev)
{
  lrun *lr = lua_touserdata(L, runud);
  int top = lua_gettop(L);
  char effect[AIRLOCK_EFFECT_NAME_MAX + 1], err[256];
  memcpy(effect, ev->effect, ev->effect_len);
  effect[ev->effect_len] = 0;
  lua_getiuservalue(L, runud, RUV_CTX);
  int ctxt = lua_gettop(L);
  int declared = lua_getfield(L, ctxt, "notify") == LUA_TTABLE &&
                 lua_getfield(L, -1, effect) == LUA_TBOOLEAN && lua_toboolean(L, -1);
  lua_settop(L, ctxt);
  if (!declared) {
    char msg[640];
    snprintf(msg, sizeof msg,
             "protocol: note %llu for '%s', which the policy does not declare a "
             "notification (notify)",
             (unsigned long long)ev->id, effect);
    airlock_run_abort(lr->r, AIRLOCK_CAUSE_PROTOCOL, msg);
    lua_settop(L, top);
    return;
  }
  lua_getiuservalue(L, runud, RUV_HANDLERS);
  lua_pushlstring(L, ev->effect, ev->effect_len);
  lua_rawget(L, -2);
  if (!lua_isfunction(L, -1) && !(lua_istable(L, -1) || lua_isuserdata(L, -1))) {
    airlock_run_note_denied(lr->r); /* declared but not granted: dropped, said so */
    lua_settop(L, top);
    airlock_run_note_done(lr->r, ev->id);
    return;
  }
  lua_pushcfunction(L, traceback);
  lua_insert(L, -2);
  int msgh = lua_gettop(L) - 1;
  if (airlock_lua_push(L, ev->args, err, sizeof err) < 0) {
    char msg[640];
    snprintf(msg, sizeof msg, "protocol: note %llu ('%s') args: %s", (unsigned long long)ev->id, effect, err);
    airlock_run_abort(lr->r, AIRLOCK_CAUSE_PROTOCOL, msg);
    lua_settop(L, top);
    return;
  }
  push_ctx(L, runud, ev, effect);
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "note");
  if (lua_pcall(L, 2, 0, msgh) != LUA_OK) {
    if (airlock_l_denial_reason(L, -1)) {
      luaL_tolstring(L, -1, NULL);
      lua_replace(L, -2);
    }
    if (lua_getfield(L, ctxt, "on_note_error") == LUA_TFUNCTION) {
      lua_pushstring(L, effect);
      lua_pushvalue(L, -3);
      lua_pcall(L, 2, 0, 0);
    }
  }
  lua_settop(L, top);
  airlock_run_note_done(lr->r, ev->id); /* the next frame may follow now */
}

/* ------------------------------------------------------------ broker methods */

static int l_broker_new(lua_State *L)
{
  lbroker *lb = lua_newuserdatauv(L, sizeof *lb, BUV_COUNT_);
  memset(lb, 0, sizeof *lb);
  msgpack_sbuffer_init(&lb->reply);
  lb->closed = 1; /* created closed, then the resource is acquired */
  luaL_setmetatable(L, AIRLOCK_BROKER_MT);
  lua_newtable(L);
  lua_setiuservalue(L, -2, BUV_RUNS);
  int rc = airlock_broker_new(&lb->b);
  if (rc < 0) return airlock_l_fail(L, "broker", "cannot create the broker's epoll set", -rc);
  lb->closed = 0;
  return 1;
}

/* t.init, a table, packed as the whole init frame into sb (which the caller
** has initialised); o points at it. Frees sb before it raises. */
static void pack_init(lua_State *L, int t, msgpack_sbuffer *sb, airlock_run_opts *o)
{
  char err[256];
  lua_getfield(L, t, "init");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  if (!lua_istable(L, -1)) {
    msgpack_sbuffer_destroy(sb);
    luaL_error(L, "start: field 'init' must be a table");
  }
  if (airlock_frame_begin(sb) < 0 || pack_value(L, -1, sb, "init", err, sizeof err) < 0) {
    msgpack_sbuffer_destroy(sb);
    luaL_error(L, "start: %s", err);
  }
  if (airlock_frame_end(sb, UINT32_MAX) < 0) {
    msgpack_sbuffer_destroy(sb);
    luaL_error(L, "start: the init frame is too large");
  }
  lua_pop(L, 1);
  o->init = sb->data;
  o->init_len = sb->size;
}

/* b:_start{argv=, handlers=, ctx=, init=, confine={spec, see lconfine.c}, and
**           the options lstart_opts.c reads} -> run, or nil, message, errno
**           and, when the spawn failed, the step it failed in as a word
**           (airlock_spawn_step_name: "cgroup", "protect", "clone", ...)
** workspace = true: workdir is the run's workspace (AIRLOCK_MOUNT_WORKSPACE).
** program = true: a plain program (no channel, no init, no ready; exit 0 is ok). */
static int l_broker_start(lua_State *L)
{
  lbroker *lb = check_broker(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  airlock_l_start s;
  msgpack_sbuffer sb;
  char err[256];

  airlock_l_read_start(L, 2, &s); /* lstart_opts.c */
  airlock_run_opts *o = &s.o;
  /* A confinement spec (lconfine.c), prepared here and freed once the spawner
  ** has applied it; its userdata's __gc frees it if an error comes first. */
  airlock_confine_prepared *prep = NULL;
  if (lua_getfield(L, 2, "confine") != LUA_TNIL) {
    if (!lua_istable(L, -1)) return luaL_error(L, "start: field 'confine' must be a confinement spec table");
    int crc = airlock_l_confine_prepare(L, -1, &prep, err, sizeof err);
    if (crc < 0) return airlock_l_fail(L, "confinement", err, -crc);
    o->spawn.confine = prep;
  }
  lua_getfield(L, 2, "handlers");
  int handlers = lua_gettop(L);
  if (!lua_istable(L, handlers)) return luaL_error(L, "start: field 'handlers' must be a table");
  lua_getfield(L, 2, "ctx");
  int ctx = lua_gettop(L);
  if (lua_isnil(L, ctx)) {
    lua_newtable(L);
    lua_replace(L, ctx);
  } else if (!lua_istable(L, ctx))
    return luaL_error(L, "start: field 'ctx' must be a table");

  msgpack_sbuffer_init(&sb);
  pack_init(L, 2, &sb, o); /* the last step that may raise: sb is freed by then */

  lrun *lr = lua_newuserdatauv(L, sizeof *lr, RUV_COUNT_);
  memset(lr, 0, sizeof *lr);
  lr->lb = lb;
  lr->finished = 1; /* until the run exists */
  luaL_setmetatable(L, AIRLOCK_RUN_MT);
  int runud = lua_gettop(L);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, runud, RUV_BROKER);
  lua_pushvalue(L, handlers);
  lua_setiuservalue(L, runud, RUV_HANDLERS);
  lua_pushvalue(L, ctx);
  lua_setiuservalue(L, runud, RUV_CTX);

  /* Past the last Lua error: the fd cannot leak from here on. */
  int in_fd;
  int rc = airlock_l_open_stdin(&s.io, &in_fd, err, sizeof err), stdin_failed = rc < 0;
  o->spawn.stdin_fd = in_fd;
  if (rc == 0)
    rc = airlock_broker_start(lb->b, o, &lr->r);
  else
    lr->r = NULL;
  if (in_fd >= 0) close(in_fd);
  msgpack_sbuffer_destroy(&sb);
  if (prep) airlock_confine_prepared_free(prep);
  if (stdin_failed) return airlock_l_fail(L, "stdin", err, -rc);
  if (rc < 0) {
    lr->r = NULL;
    /* The spawner's messages name their step already ("spawn: ..."): said once. */
    const char *msg = airlock_broker_error(lb->b);
    if (strncmp(msg, "spawn: ", 7) == 0) msg += 7;
    int n = airlock_l_fail(L, "spawn", msg, -rc);
    lua_pushstring(L, airlock_spawn_step_name(airlock_broker_error_step(lb->b)));
    return n + 1;
  }
  lr->finished = 0;
  lr->serial = (lua_Integer)airlock_run_serial(lr->r);
  lua_getiuservalue(L, 1, BUV_RUNS);
  lua_pushvalue(L, runud);
  lua_rawseti(L, -2, lr->serial);
  lua_pushvalue(L, runud);
  return 1;
}

/* Whether the call ev of run lr is still to be given to admission: its run
** is recorded (or not looked at yet), and admit_calls has not looked at this
** call (one a run sent after its notes, in this step, comes in a second round). */
static int needs_admission(const lrun *lr, const airlock_event *ev)
{
  return lr->recorded >= 0 && !(lr->recorded > 0 && lr->admitted == ev->id);
}

/* The calls waiting in the queue of recorded runs (whose ctx has admit, a
** function): admit(effect, args, id) for each, before any call is handled,
** then the first one's ctx.admit_flush() once. The recorder queues each call
** record and waits for each ledger once (airlock.session), so the ledger
** processes of many runs work at the same time. Only a granted effect's args
** are turned into Lua (a denied call's never are); a failure here is left to
** the call's own dispatch, which records and answers it as ever. */
#define ADMIT_MAX 256
static void admit_calls(lua_State *L, lbroker *lb, int runs)
{
  airlock_event evs[ADMIT_MAX];
  size_t n = airlock_broker_peek_calls(lb->b, evs, ADMIT_MAX);
  if (n == 0) return;
  int top = lua_gettop(L);
  lua_pushnil(L); /* the flush function, once a recorded run has one */
  int fslot = lua_gettop(L);
  char err[256];
  for (size_t i = 0; i < n; i++) {
    const airlock_event *ev = &evs[i];
    lua_settop(L, fslot);
    if (lua_rawgeti(L, runs, (lua_Integer)airlock_run_serial(ev->run)) != LUA_TUSERDATA) continue;
    int runud = lua_gettop(L);
    lrun *lr = lua_touserdata(L, runud);
    if (!needs_admission(lr, ev)) continue;
    lua_getiuservalue(L, runud, RUV_CTX);
    int ctxt = lua_gettop(L);
    if (lua_getfield(L, ctxt, "admit") != LUA_TFUNCTION) {
      lr->recorded = -1;
      continue;
    }
    lr->recorded = 1;
    lr->admitted = ev->id; /* looked at once, granted or not */
    int fn = lua_gettop(L);
    lua_getiuservalue(L, runud, RUV_HANDLERS);
    lua_pushlstring(L, ev->effect, ev->effect_len);
    int granted = lua_rawget(L, -2);
    if (granted != LUA_TFUNCTION && granted != LUA_TTABLE && granted != LUA_TUSERDATA) continue;
    if (lua_isnil(L, fslot)) {
      lua_getfield(L, ctxt, "admit_flush");
      lua_replace(L, fslot);
    }
    lua_settop(L, fn);
    lua_pushlstring(L, ev->effect, ev->effect_len);
    if (airlock_lua_push(L, ev->args, err, sizeof err) < 0) continue; /* dispatch says so */
    lua_pushinteger(L, (lua_Integer)ev->id);
    lua_pcall(L, 3, 0, 0);
  }
  lua_settop(L, fslot);
  if (lua_isfunction(L, fslot)) lua_pcall(L, 0, 0, 0);
  lua_settop(L, top);
}

/* b:_step(timeout_ms) -> list of finished results (each also kept by its run) */
static int l_broker_step(lua_State *L)
{
  lbroker *lb = check_broker(L, 1);
  lua_Integer t = luaL_optinteger(L, 2, -1);
  if (lb->busy) return luaL_error(L, "step: called from inside a handler (the broker is not re-entrant)");
  if (t < -1 || t > 86400000) return luaL_argerror(L, 2, "timeout must be -1 (wait) or 0 to 86400000 ms");
  if (lb->extra_err[0]) {
    char msg[sizeof lb->extra_err];
    memcpy(msg, lb->extra_err, sizeof msg);
    lb->extra_err[0] = 0;
    return luaL_error(L, "step: the watched engine failed: %s", msg);
  }
  int rc = airlock_broker_step(lb->b, (int)t);
  if (rc < 0) return airlock_l_fail(L, "broker", airlock_broker_error(lb->b), -rc);

  lua_newtable(L);
  int out = lua_gettop(L);
  lua_getiuservalue(L, 1, BUV_RUNS);
  int runs = lua_gettop(L);
  airlock_event ev;
  lua_Integer nres = 0;
  lb->busy = 1;
  /* The host's own engine first (b:_watch_extra): what it finished answers
  ** calls waiting on it before this step's new calls are handled. */
  if (airlock_broker_extra_ready(lb->b) && lua_getiuservalue(L, 1, BUV_EXTRA) == LUA_TFUNCTION) {
    lua_pushcfunction(L, traceback);
    lua_insert(L, -2);
    if (lua_pcall(L, 0, 0, -2) != LUA_OK) /* raised by the next step: this one's results are kept */
      snprintf(lb->extra_err, sizeof lb->extra_err, "%s",
               lua_tostring(L, -1) ? lua_tostring(L, -1) : "(no message)");
  }
  lua_settop(L, runs);
  admit_calls(L, lb, runs);
  while (!lb->closed && airlock_broker_next(lb->b, &ev)) {
    lua_rawgeti(L, runs, (lua_Integer)airlock_run_serial(ev.run));
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      continue;
    }
    int runud = lua_gettop(L);
    lrun *lr = lua_touserdata(L, runud);
    if (ev.kind == AIRLOCK_EV_CALL) {
      /* A call that came after notes in this step: it and every call waiting
      ** now are admitted together (the ledger processes work at once). */
      if (needs_admission(lr, &ev)) admit_calls(L, lb, runs);
      dispatch(L, runud, &ev);
    } else if (ev.kind == AIRLOCK_EV_NOTE) {
      dispatch_note(L, runud, &ev);
    } else {
      lr->finished = 1;
      airlock_l_push_result(L, lr, airlock_run_result(ev.run));
      lua_pushvalue(L, -1);
      lua_setiuservalue(L, runud, RUV_RESULT);
      lua_rawseti(L, out, ++nres);
      lua_pushnil(L);
      lua_rawseti(L, runs, lr->serial); /* the broker no longer keeps it alive */
    }
    lua_settop(L, runs);
  }
  lb->busy = 0;
  lua_settop(L, out);
  return 1;
}

/* b:_watch_extra(fd, fn) or b:_watch_extra(nil): fd wakes a step when it is
** readable, and that step calls fn() before it handles its calls (a host's
** I/O engine: the http handler's). One per broker. */
static int l_broker_watch_extra(lua_State *L)
{
  lbroker *lb = check_broker(L, 1);
  if (lua_isnoneornil(L, 2)) {
    airlock_broker_watch_extra(lb->b, -1);
    lua_pushnil(L);
    lua_setiuservalue(L, 1, BUV_EXTRA);
    return 0;
  }
  lua_Integer fd = luaL_checkinteger(L, 2);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  if (fd < 0 || fd > INT_MAX) return luaL_argerror(L, 2, "not a descriptor");
  int rc = airlock_broker_watch_extra(lb->b, (int)fd);
  if (rc == -EBUSY) return luaL_error(L, "watch_extra: this broker watches a descriptor already");
  if (rc < 0) return airlock_l_fail(L, "broker", "cannot watch the descriptor", -rc);
  lua_pushvalue(L, 3);
  lua_setiuservalue(L, 1, BUV_EXTRA);
  lua_pushboolean(L, 1);
  return 1;
}

/* b:_next_serial() -> the id the next b:_start's run gets */
static int l_broker_next_serial(lua_State *L)
{
  lbroker *lb = check_broker(L, 1);
  lua_pushinteger(L, (lua_Integer)airlock_broker_next_serial(lb->b));
  return 1;
}

static int l_broker_live(lua_State *L)
{
  lbroker *lb = check_broker(L, 1);
  lua_pushinteger(L, (lua_Integer)airlock_broker_live(lb->b));
  return 1;
}

static int l_broker_close(lua_State *L)
{
  lbroker *lb = luaL_checkudata(L, 1, AIRLOCK_BROKER_MT);
  if (lb->busy) return luaL_error(L, "close: called from inside a handler");
  if (!lb->closed) {
    lb->closed = 1;
    airlock_broker_free(lb->b); /* kills and reaps every live run */
    lb->b = NULL;
    msgpack_sbuffer_destroy(&lb->reply);
    msgpack_sbuffer_init(&lb->reply);
  }
  return 0;
}

static int l_broker_tostring(lua_State *L)
{
  lbroker *lb = luaL_checkudata(L, 1, AIRLOCK_BROKER_MT);
  if (lb->closed)
    lua_pushfstring(L, "airlock.broker (closed)");
  else
    lua_pushfstring(L, "airlock.broker (%d live)", (int)airlock_broker_live(lb->b));
  return 1;
}

static int l_defer(lua_State *L)
{
  lua_pushlightuserdata(L, &defer_key);
  return 1;
}

void airlock_l_open_broker(lua_State *L)
{
  static const luaL_Reg bm[] = {{"_start", l_broker_start},
                                {"_step", l_broker_step},
                                {"live", l_broker_live},
                                {"_next_serial", l_broker_next_serial},
                                {"_watch_extra", l_broker_watch_extra},
                                {"close", l_broker_close},
                                {NULL, NULL}};

  static const luaL_Reg bmeta[] = {
      {"__gc", l_broker_close}, {"__close", l_broker_close}, {"__tostring", l_broker_tostring}, {NULL, NULL}};

  airlock_l_class(L, AIRLOCK_BROKER_MT, bm, bmeta);

  /* The pure-Lua layer adds start/step wrappers to the same method tables. */
  luaL_getmetatable(L, AIRLOCK_BROKER_MT);
  lua_getfield(L, -1, "__index");
  lua_setfield(L, -3, "broker_methods");
  lua_pop(L, 1);
  airlock_l_open_run(L);
  lua_pushcfunction(L, l_broker_new);
  lua_setfield(L, -2, "broker");
  lua_pushcfunction(L, l_shared_netns);
  lua_setfield(L, -2, "shared_netns");
  lua_pushcfunction(L, l_defer);
  lua_setfield(L, -2, "defer");
}
