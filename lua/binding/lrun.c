/*
** lrun.c -- the airlock.run userdata's methods: answer, fail, cancel or unpark
** a run, and read its pid, CPU time, output and result.
*/
#define _GNU_SOURCE
#include "lbroker.h"
#include "lstart_opts.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

lrun *airlock_l_check_run(lua_State *L, int i)
{
  lrun *lr = luaL_checkudata(L, i, AIRLOCK_RUN_MT);
  if (lr->lb->closed) luaL_argerror(L, i, "its broker is closed");
  return lr;
}

static int count_bytes(void *data, const char *buf, size_t len)
{
  (void)buf;
  *(size_t *)data += len;
  return 0;
}

/* run:_answer_fits(value) -> true, or nil, message: whether an answer can be
** sent to this run, as airlock_l_reply_value decides it, without sending anything. A
** recorded run asks before it records the answer, so the journal holds the
** failure the guest is given rather than a value it never got. */
static int l_run_answer_fits(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  luaL_checkany(L, 2);
  size_t len = 0;
  char err[256];
  msgpack_packer pk;
  msgpack_packer_init(&pk, &len, count_bytes);
  if (airlock_lua_pack(L, 2, &pk, "result", err, sizeof err) == 0 &&
      airlock_run_answer_too_large(lr->r, len, err, sizeof err)) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  lua_pushboolean(L, 1); /* fits, or cannot be sent at all: airlock_l_reply_value says which */
  return 1;
}

/* The start frame of a prepared worker's run, into sb (initialised): {t =
** "start", v, run, guest = {name, source}, input} (input only when there is
** one: a run without input is a script without arguments). Packed straight
** from the stack (2 the name, 3 the source, 4 the input), as pack_init would
** pack the same table. 0, or -1 with the cause in err. */
static int pack_start(lua_State *L, lua_Integer run, msgpack_sbuffer *sb, char *err, size_t n)
{
  msgpack_packer pk;
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  int has_input = !lua_isnoneornil(L, 4);
  if (airlock_frame_begin(sb) < 0) {
    snprintf(err, n, "out of memory");
    return -1;
  }
  airlock_pack_head(&pk, AIRLOCK_MSG_START, 4 + (uint32_t)has_input);
  airlock_pack_cstr(&pk, "v");
  msgpack_pack_uint64(&pk, AIRLOCK_PROTOCOL_VERSION);
  airlock_pack_cstr(&pk, "run");
  msgpack_pack_int64(&pk, (int64_t)run);
  airlock_pack_cstr(&pk, "guest");
  msgpack_pack_map(&pk, 2);
  airlock_pack_cstr(&pk, "name");
  if (airlock_lua_pack(L, 2, &pk, "init.guest.name", err, n) < 0) return -1;
  airlock_pack_cstr(&pk, "source");
  if (airlock_lua_pack(L, 3, &pk, "init.guest.source", err, n) < 0) return -1;
  if (has_input) {
    airlock_pack_cstr(&pk, "input");
    if (airlock_lua_pack(L, 4, &pk, "init.input", err, n) < 0) return -1;
  }
  if (airlock_frame_end(sb, UINT32_MAX) < 0) {
    snprintf(err, n, "the start frame is too large");
    return -1;
  }
  return 0;
}

/* Argument i: nil (0), or a whole number from 0 to max. */
static lua_Integer opt_int_arg(lua_State *L, int i, const char *what, lua_Integer max)
{
  if (lua_isnoneornil(L, i)) return 0;
  int isnum = 0;
  lua_Integer v = lua_tointegerx(L, i, &isnum);
  if (!isnum || v < 0 || v > max) luaL_error(L, "unpark: %s must be a whole number from 0 to %I", what, max);
  return v;
}

/* run:_unpark(name, source, input, handlers, ctx, deadline_ms, max_frame,
** capture_max) -> true, or nil, message, errno: a parked run (b:_start{park =
** true}) gets its run, as b:_start would have given it: the start frame
** (pack_start), the handlers and ctx of its calls, and its limits (nil: the
** defaults). Positional, so a start interns no key. An input that cannot be
** sent leaves the run parked: nil, "start: ...", "input". */
static int l_run_unpark(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  luaL_checkany(L, 4);
  luaL_checktype(L, 5, LUA_TTABLE);
  if (!lua_isnil(L, 6)) luaL_checktype(L, 6, LUA_TTABLE);
  airlock_run_opts o;
  memset(&o, 0, sizeof o);
  o.deadline_ms = (uint64_t)opt_int_arg(L, 7, "deadline_ms", (lua_Integer)1 << 40);
  o.max_frame = (uint32_t)opt_int_arg(L, 8, "max_frame", UINT32_MAX);
  o.capture_max = (size_t)opt_int_arg(L, 9, "capture_max", (lua_Integer)1 << 30);
  char err[256];
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  if (pack_start(L, lr->serial, &sb, err, sizeof err) < 0) {
    msgpack_sbuffer_destroy(&sb);
    lua_pushnil(L);
    lua_pushfstring(L, "start: %s", err);
    lua_pushliteral(L, "input");
    return 3;
  }
  o.init = sb.data;
  o.init_len = sb.size;
  int rc = airlock_run_unpark(lr->r, &o);
  msgpack_sbuffer_destroy(&sb); /* the broker queued its own copy */
  if (rc == -EINVAL) return luaL_error(L, "unpark: the run is not parked");
  if (rc < 0) return airlock_l_fail(L, "ended", "the parked worker has died", -rc);
  /* Sent: the calls it makes are read in b:step, after these are in place. */
  lua_pushvalue(L, 5);
  lua_setiuservalue(L, 1, RUV_HANDLERS);
  if (lua_isnil(L, 6))
    lua_newtable(L);
  else
    lua_pushvalue(L, 6);
  lua_setiuservalue(L, 1, RUV_CTX);
  lua_pushboolean(L, 1);
  return 1;
}

/* run:_t_start() -> when the run started as the broker counts it (spawn, or
** unpark for a pooled worker): ms on core.now_ms's clock. */
static int l_run_t_start(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  lua_pushnumber(L, airlock_run_t_start(lr->r));
  return 1;
}

/* run:_joined() -> whether a parked run's worker said ready and passed the
** checks from outside (it may join its pool). */
static int l_run_joined(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  lua_pushboolean(L, airlock_run_joined(lr->r));
  return 1;
}

/* run:_await_ready(timeout_ms) -> true, or nil, why, "ended" | "timeout":
** waits for a parked run's ready frame and its checks (nothing else is read). */
static int l_run_await_ready(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  int ms = (int)luaL_checkinteger(L, 2);
  const char *why = NULL;
  int rc = airlock_run_await_ready(lr->r, ms, &why);
  if (rc == 1) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (rc == -EINVAL) return luaL_error(L, "await_ready: the run is not parked");
  lua_pushnil(L);
  if (rc == 0) {
    lua_pushstring(L, why ? why : "the worker ended");
    lua_pushliteral(L, "ended");
  } else if (rc == -ETIMEDOUT) {
    lua_pushfstring(L, "the worker did not say ready within %d ms", ms);
    lua_pushliteral(L, "timeout");
  } else {
    lua_pushstring(L, strerror(-rc));
    lua_pushliteral(L, "ended");
  }
  return 3;
}

static int l_run_reply(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  lua_Integer id = luaL_checkinteger(L, 2);
  luaL_checkany(L, 3);
  lua_settop(L, 3);
  if (lr->finished) return airlock_l_fail(L, "ended", "the run has ended; the answer was dropped", EPIPE);
  /* A deferred answer ends the guest's turn (limits.turn_instructions). */
  if (airlock_run_turn(lr->r, (uint64_t)id) == -EINVAL)
    return luaL_argerror(L, 2, "no such outstanding call");
  char why[256];
  int rc = airlock_l_reply_value(L, lr, (uint64_t)id, 3, NULL, why, sizeof why);
  if (rc == -EINVAL) return luaL_argerror(L, 2, "no such outstanding call");
  if (rc == -EMSGSIZE) { /* the call failed with why */
    lua_pushnil(L);
    lua_pushfstring(L, "reply: %s", why);
    return 2;
  }
  if (rc < 0) return airlock_l_fail(L, "reply", "cannot send the reply", -rc);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_run_fail(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  lua_Integer id = luaL_checkinteger(L, 2);
  size_t len;
  const char *msg = luaL_checklstring(L, 3, &len);
  const char *code = luaL_optstring(L, 4, NULL);
  if (code && strcmp(code, "denied") != 0) return luaL_argerror(L, 4, "code must be 'denied' or nil");
  if (lr->finished) return airlock_l_fail(L, "ended", "the run has ended; the answer was dropped", EPIPE);
  if (airlock_run_turn(lr->r, (uint64_t)id) == -EINVAL)
    return luaL_argerror(L, 2, "no such outstanding call");
  if (code) airlock_run_note_denied(lr->r);
  int rc = airlock_run_fail(lr->r, (uint64_t)id, msg, len, code);
  if (rc == -EINVAL) return luaL_argerror(L, 2, "no such outstanding call");
  if (rc < 0) return airlock_l_fail(L, "reply", "cannot send the reply", -rc);
  lua_pushboolean(L, 1);
  return 1;
}

/* run:_turn(seq): the answer to call seq, even one its handler returns, ends
** the guest's turn. A replay's server marks so the answers the journal holds
** as deferred (run:reply and run:fail mark their own). */
static int l_run_turn(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  lua_Integer id = luaL_checkinteger(L, 2);
  if (lr->finished) return airlock_l_fail(L, "ended", "the run has ended", EPIPE);
  if (airlock_run_turn(lr->r, (uint64_t)id) == -EINVAL)
    return luaL_argerror(L, 2, "no such outstanding call");
  lua_pushboolean(L, 1);
  return 1;
}

static int l_run_cancel(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  if (!lr->finished) airlock_run_cancel(lr->r);
  return 0;
}

static int l_run_abort(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  const char *word = luaL_checkstring(L, 2);
  const char *msg = luaL_checkstring(L, 3);
  int c = airlock_cause_from_name(word);
  if (c < 0 || c == AIRLOCK_CAUSE_OK) return luaL_argerror(L, 2, "not a failure cause word");
  if (!lr->finished) airlock_run_abort(lr->r, (airlock_cause)c, msg);
  return 0;
}

static int l_run_id(lua_State *L)
{
  lua_pushinteger(L, airlock_l_check_run(L, 1)->serial);
  return 1;
}
/* run:_broker() -> the broker it runs on */
static int l_run_broker(lua_State *L)
{
  airlock_l_check_run(L, 1);
  lua_getiuservalue(L, 1, RUV_BROKER);
  return 1;
}
static int l_run_live(lua_State *L)
{
  lua_pushboolean(L, !airlock_l_check_run(L, 1)->finished);
  return 1;
}

static int l_run_pid(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  if (lr->finished) return 0;
  lua_pushinteger(L, airlock_run_pid(lr->r));
  return 1;
}

/* run:cpu_time() -> the seconds of CPU (user and system) the run's process has
** used, read by the kernel from outside the child; nil, message, errno once the
** process is gone. */
static int l_run_cpu_time(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  uint64_t ns = 0;
  int rc = lr->finished ? -ESRCH : airlock_run_cpu_ns(lr->r, &ns);
  if (rc < 0)
    return airlock_l_fail(L, "cpu_time", rc == -ESRCH ? "the run's process has ended" : airlock_strerror(-rc),
                          -rc);
  lua_pushnumber(L, (lua_Number)ns / 1e9);
  return 1;
}

/* run:_egress_fd() -> the run's egress listener (b:_start{egress_port =}), a
** descriptor the run still owns (pass it as another run's stdin_fd, which dups
** it), or nil; run:_egress_close() closes the run's copy. */
static int l_run_egress_fd(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  int fd = lr->finished || !lr->r ? -1 : airlock_run_egress_fd(lr->r);
  if (fd < 0) return 0;
  lua_pushinteger(L, fd);
  return 1;
}

static int l_run_egress_close(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  if (!lr->finished && lr->r) airlock_run_egress_close(lr->r);
  return 0;
}

/* run:_overlay_take() -> the run's overlay layer (b:_start{overlay_bytes =}),
** handed to the caller as an airlock.overlay_layer, or nil (none, or taken).
** Taken while the run is live: it outlives the run for the caller to read. */
static int l_run_overlay_take(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  int mount = -1;
  int fd = lr->finished || !lr->r ? -1 : airlock_run_overlay_take(lr->r, &mount);
  if (fd < 0) {
    airlock_close_later(mount);
    return 0;
  }
  airlock_l_push_overlay_layer(L, fd, mount);
  return 1;
}

/* run:output(which, from) -> the bytes stdout ("stdout") or stderr ("stderr") has
** captured past offset from (0-based), while the run goes on (for streaming);
** nil once the run has finished (its result then holds everything). */
static int l_run_output(lua_State *L)
{
  lrun *lr = airlock_l_check_run(L, 1);
  static const char *const names[] = {"stdout", "stderr", NULL};
  int which = luaL_checkoption(L, 2, NULL, names) + 1;
  lua_Integer from = luaL_optinteger(L, 3, 0);
  if (lr->finished || !lr->r) return 0;
  const char *data;
  size_t n = airlock_run_output(lr->r, which, &data);
  if (from < 0 || (size_t)from > n) from = (lua_Integer)n;
  lua_pushlstring(L, data + from, n - (size_t)from);
  return 1;
}

static int l_run_result(lua_State *L)
{
  airlock_l_check_run(L, 1);
  lua_getiuservalue(L, 1, RUV_RESULT);
  return 1;
}

static int l_run_gc(lua_State *L)
{
  lrun *lr = luaL_checkudata(L, 1, AIRLOCK_RUN_MT);
  if (lr->r && !lr->lb->closed) airlock_run_release(lr->r); /* a live run is killed */
  lr->r = NULL;
  lr->finished = 1;
  return 0;
}

static int l_run_tostring(lua_State *L)
{
  lrun *lr = luaL_checkudata(L, 1, AIRLOCK_RUN_MT);
  if (!lr->r) {
    lua_pushliteral(L, "airlock.run (released)");
    return 1;
  }
  if (!lr->finished) {
    lua_pushfstring(L, "airlock.run %d (live)", (int)lr->serial);
    return 1;
  }
  lua_getiuservalue(L, 1, RUV_RESULT);
  lua_getfield(L, -1, "cause");
  lua_pushfstring(L, "airlock.run %d (%s)", (int)lr->serial, lua_tostring(L, -1));
  return 1;
}

void airlock_l_open_run(lua_State *L)
{
  static const luaL_Reg rm[] = {{"reply", l_run_reply},
                                {"fail", l_run_fail},
                                {"cancel", l_run_cancel},
                                {"abort", l_run_abort},
                                {"id", l_run_id},
                                {"pid", l_run_pid},
                                {"cpu_time", l_run_cpu_time},
                                {"live", l_run_live},
                                {"result", l_run_result},
                                {"output", l_run_output},
                                {"_unpark", l_run_unpark},
                                {"_egress_fd", l_run_egress_fd},
                                {"_egress_close", l_run_egress_close},
                                {"_overlay_take", l_run_overlay_take},
                                {"_turn", l_run_turn},
                                {"_broker", l_run_broker},
                                {"_joined", l_run_joined},
                                {"_t_start", l_run_t_start},
                                {"_await_ready", l_run_await_ready},
                                {"_answer_fits", l_run_answer_fits},
                                {NULL, NULL}};
  static const luaL_Reg rmeta[] = {
      {"__gc", l_run_gc}, {"__close", l_run_gc}, {"__tostring", l_run_tostring}, {NULL, NULL}};
  airlock_l_class(L, AIRLOCK_RUN_MT, rm, rmeta);
  luaL_getmetatable(L, AIRLOCK_RUN_MT);
  lua_getfield(L, -1, "__index");
  lua_setfield(L, -3, "run_methods");
  lua_pop(L, 1);
}
