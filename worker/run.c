/*
** run.c -- runs the guest chunk once and reports how it ended in a done frame:
** its value, or an error with message, traceback and the worker's cause word.
*/
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "convert.h"
#include "worker.h"

/* Registry key of the set of messages the policy denied during this run. */
static const char DENIED_KEY = 'd';

void worker_note_denied(lua_State *L, const char *msg, size_t len)
{
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &DENIED_KEY) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &DENIED_KEY);
  }
  lua_pushlstring(L, msg, len);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

/* Whether the string at idx is, exactly, a denial the guest let escape. */
static int was_denied(lua_State *L, int idx)
{
  if (lua_type(L, idx) != LUA_TSTRING) return 0;
  int denied = 0;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &DENIED_KEY) == LUA_TTABLE) {
    lua_pushvalue(L, idx);
    denied = lua_rawget(L, -2) != LUA_TNIL;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return denied;
}

/* done's started: when the guest's first instruction was about to run
** (CLOCK_MONOTONIC ns; 0 when it never was), for the parent's usage figures. */
static void pack_started(worker *w, msgpack_packer *pk)
{
  airlock_pack_cstr(pk, "started");
  msgpack_pack_uint64(pk, w->started_ns);
}

static uint64_t worker_clock_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* the vDSO: no system call */
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pack_text(msgpack_packer *pk, const char *key, const char *s, size_t len)
{
  airlock_pack_cstr(pk, key);
  airlock_pack_str(pk, s, len < WORKER_TEXT_MAX ? len : WORKER_TEXT_MAX);
}

/* Texts are cut to WORKER_TEXT_MAX so the frame always fits, whatever the
** guest's error message held. */
static void pack_error(worker *w, const char *message, size_t mlen, const char *traceback, size_t tlen,
                       const char *cause)
{
  msgpack_packer *pk = worker_frame_begin(w, AIRLOCK_MSG_DONE, 3);
  pack_started(w, pk);
  airlock_pack_cstr(pk, "err");
  msgpack_pack_map(pk, 3);
  pack_text(pk, "message", message, mlen);
  pack_text(pk, "traceback", traceback, tlen);
  pack_text(pk, "cause", cause, strlen(cause));
}

void worker_send_error(worker *w, const char *message, size_t mlen, const char *traceback, size_t tlen,
                       const char *cause)
{
  w->cpu_on = 0; /* the run is over: no more ticks */
  pack_error(w, message, mlen, traceback, tlen, cause);
  worker_frame_send(w);
  worker_end(w);
}

/* Sends the done frame packed in w->out, after the guest's finalizers: lua.c
** closes its state when the script ends (returned or failed), and lua_close
** calls every pending __gc, of garbage and of live objects alike; a finalizer
** that prints is seen there, so it is seen here, in the run's log. The frame
** (the value as the chunk returned it, or the error) waits aside meanwhile,
** because each effect a finalizer makes packs its call in w->out. They run
** under the memory cap; Lua turns off hooks inside a __gc, so the instruction
** budget cannot stop one, and a finalizer that never returns is ended by the
** run's deadline and CPU limit like any other hang. An error in one is a
** warning (see host_api.c), as in lua.c. Once the state is closed no guest
** code exists, so nothing can make an effect after done. */
__attribute__((noreturn)) static void send_done(worker *w)
{
  msgpack_sbuffer done = w->out;
  int refused = w->out_refused;
  msgpack_sbuffer_init(&w->out);
  w->mem_exempt = 0;
  /* The CPU budgets' tick stops here: lua_close frees the state's call
  ** frames, which a hook set from the tick would walk. */
  w->cpu_on = 0;
  lua_close(w->L);
  w->L = NULL;
  msgpack_sbuffer_destroy(&w->out);
  w->out = done;
  w->out_refused = refused;
  worker_frame_send(w);
  worker_end(w);
}

/* The message for the error value at index 1, pushed: strings and numbers as
** they are, a __tostring result if there is one, else a description. The
** guest's __tostring runs under the memory cap and its own pcall. */
static void push_message(lua_State *L, worker *w)
{
  int t = lua_type(L, 1);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    luaL_tolstring(L, 1, NULL);
    return;
  }
  if (luaL_getmetafield(L, 1, "__tostring") != LUA_TNIL) {
    lua_pushvalue(L, 1);
    w->mem_exempt--;
    int status = lua_pcall(L, 1, 1, 0);
    w->mem_exempt++;
    if (status == LUA_OK && lua_type(L, -1) == LUA_TSTRING) return;
    lua_pop(L, 1);
  }
  lua_pushfstring(L, "(error object is a %s value)", lua_typename(L, t));
}

/* The message handler of the guest's pcall: it runs where the error was
** raised, so this is the only place the guest's stack can be walked. It
** returns {message, traceback, denied} as the new error value. The cap is
** lifted while it builds them (the guest is stopping), except for __tostring. */
static int message_handler(lua_State *L)
{
  worker *w = worker_of(L);
  w->mem_exempt++;
  int denied = was_denied(L, 1);
  lua_createtable(L, 0, 3);
  push_message(L, w);
  lua_setfield(L, -2, "message");
  luaL_traceback(L, L, NULL, 1);
  lua_setfield(L, -2, "traceback");
  lua_pushboolean(L, denied);
  lua_setfield(L, -2, "denied");
  w->mem_exempt--;
  return 1;
}

/* Reads field key of the table at idx as a string; "" if it is not one. */
static const char *text_field(lua_State *L, int idx, const char *key, size_t *len)
{
  lua_getfield(L, idx, key);
  const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, len) : NULL;
  lua_pop(L, 1); /* the table still holds the string */
  if (s == NULL) *len = 0;
  return s != NULL ? s : "";
}

/* Sizes as a policy writes them: "1G", "64M", "1536K", or bytes. */
static void size_text(char *buf, size_t len, uint64_t n)
{
  if (n != 0 && n % (1u << 30) == 0)
    snprintf(buf, len, "%" PRIu64 "G", n >> 30);
  else if (n != 0 && n % (1u << 20) == 0)
    snprintf(buf, len, "%" PRIu64 "M", n >> 20);
  else if (n != 0 && n % (1u << 10) == 0)
    snprintf(buf, len, "%" PRIu64 "K", n >> 10);
  else
    snprintf(buf, len, "%" PRIu64, n);
}

/* Lua's "not enough memory", with the limit that was reached and the field
** that sets it: the guest's heap cap (limits.memory), or the process's
** address space (confine.rlimits.as), which the heap could not fill first. */
static const char *memory_message(const worker *w, char *buf, size_t len)
{
  char cap[32], as[32];
  size_text(cap, sizeof cap, w->init.memory);
  size_text(as, sizeof as, w->as_limit);
  if (w->mem_refused == MEM_CAP)
    snprintf(buf, len,
             "not enough memory: the guest's Lua heap reached its limit of %s "
             "(limits.memory)",
             cap);
  else if (w->as_limit != 0)
    snprintf(buf, len,
             "not enough memory: the worker's address space reached its limit of %s "
             "(confine.rlimits.as) before the heap reached %s (limits.memory)",
             as, w->init.memory != 0 ? cap : "its limit");
  else
    snprintf(buf, len, "not enough memory: the system refused the worker more memory");
  return buf;
}

/* status is lua_pcall's; the error value is on top. A memory error skips the
** message handler, so it has a message but no traceback. */
__attribute__((noreturn)) static void report_error(worker *w, int status)
{
  lua_State *L = w->L;
  w->mem_exempt++;
  char text[256];
  size_t mlen, tlen = 0;
  const char *msg, *tb = "", *cause = "error";
  if (status == LUA_ERRRUN && lua_type(L, -1) == LUA_TTABLE) {
    msg = text_field(L, -1, "message", &mlen);
    tb = text_field(L, -1, "traceback", &tlen);
    lua_getfield(L, -1, "denied");
    if (lua_toboolean(L, -1)) cause = "denied";
    lua_pop(L, 1);
  } else {
    msg = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &mlen) : NULL;
    if (msg == NULL) {
      msg = "(error object is not a string)";
      mlen = strlen(msg);
    }
    if (status == LUA_ERRMEM) {
      cause = "memory";
      msg = memory_message(w, text, sizeof text);
      mlen = strlen(msg);
    }
  }
  pack_error(w, msg, mlen, tb, tlen, cause);
  send_done(w);
}

/* done {ok = value}: a value that cannot be sent becomes the run's error. */
__attribute__((noreturn)) static void report_value(worker *w)
{
  char err[256];
  msgpack_packer *pk = worker_frame_begin(w, AIRLOCK_MSG_DONE, 3);
  pack_started(w, pk);
  airlock_pack_cstr(pk, "ok");
  if (airlock_lua_pack(w->L, -1, pk, "value", err, sizeof err) != 0)
    pack_error(w, err, strlen(err), "", 0, "error");
  send_done(w);
}

/* The source as lua.c reads a script file (luaL_loadfilex): a UTF-8 byte
** order mark is skipped, and so is a first line starting with '#' (a "#!"
** line), up to but not including its newline, so line numbers stay right. */
static const char *skip_prefix(const char *src, size_t *len)
{
  const char *p = src, *end = src + *len;
  if (end - p >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3;
  if (p < end && *p == '#') {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    p = nl != NULL ? nl : end;
  }
  *len = (size_t)(end - p);
  return p;
}

/* Runs under lua_pcall, as lua.c's pmain runs its script: 1 the input, 2 the
** worker. Loads the guest's chunk and calls it under the message handler;
** returns the chunk's value or the error, and the status. The extra C frame
** is lua.c's too (main -> pmain -> the chunk), so the guest's chunk starts at
** the same C-call depth as under lua5.4 and meets LUAI_MAXCCALLS ("C stack
** overflow") at the same nesting. And as pmain does, the collector runs in
** generational mode from here on: collectgarbage("incremental") returns
** "generational" to a guest, as to a script under lua5.4. */
static int guest_main(lua_State *L)
{
  worker *w = lua_touserdata(L, 2);
  lua_settop(L, 1);
  lua_gc(L, LUA_GCGEN, 0, 0);
  lua_pushcfunction(L, message_handler);
  char chunkname[256] = "=guest";
  if (w->init.name_len > 0) /* Lua shows at most LUA_IDSIZE bytes of it anyway */
    snprintf(chunkname, sizeof chunkname, "@%.*s", (int)(w->init.name_len < 200 ? w->init.name_len : 200),
             w->init.name);
  size_t len = w->init.source_len;
  const char *src = skip_prefix(w->init.source, &len);
  int status = luaL_loadbufferx(L, src, len, chunkname, "t");
  if (status == LUA_OK) {
    /* A run without input is a script without arguments: ... is empty, and
    ** the chunk's frame sits where lua5.4's does (a vararg chunk's frame is
    ** placed above its arguments), so "stack overflow" comes at the same depth. */
    int nargs = w->init.input != NULL;
    if (nargs) lua_pushvalue(L, 1);
    w->started_ns = worker_clock_ns(); /* reported in done: a timing figure only */
    status = lua_pcall(L, nargs, 1, 2);
  }
  lua_pushinteger(L, status); /* no allocation: the stack has room for it */
  return 2;
}

void worker_run_guest(worker *w, int input_idx)
{
  lua_State *L = w->L;
  lua_pushcfunction(L, guest_main);
  lua_pushvalue(L, input_idx);
  lua_pushlightuserdata(L, w);
  int status = lua_pcall(L, 2, 2, 0);
  if (status == LUA_OK) {
    status = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  if (status != LUA_OK) report_error(w, status);
  report_value(w);
}
