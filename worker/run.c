/*
** run.c -- runs the guest chunk once and reports how it ended in a done frame:
** its value, or an error with message, traceback and the worker's cause word.
*/
#include <stdio.h>
#include <string.h>
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
  if (lua_type(L, idx) != LUA_TSTRING)
    return 0;
  int denied = 0;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &DENIED_KEY) == LUA_TTABLE) {
    lua_pushvalue(L, idx);
    denied = lua_rawget(L, -2) != LUA_TNIL;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return denied;
}

static void pack_text(msgpack_packer *pk, const char *key, const char *s, size_t len)
{
  airlock_pack_cstr(pk, key);
  airlock_pack_str(pk, s, len < WORKER_TEXT_MAX ? len : WORKER_TEXT_MAX);
}

/* Texts are cut to WORKER_TEXT_MAX so the frame always fits, whatever the
** guest's error message held. */
void worker_send_error(worker *w, const char *message, size_t mlen, const char *traceback,
                       size_t tlen, const char *cause)
{
  msgpack_packer *pk = worker_frame_begin(w, AIRLOCK_MSG_DONE, 2);
  airlock_pack_cstr(pk, "err");
  msgpack_pack_map(pk, 3);
  pack_text(pk, "message", message, mlen);
  pack_text(pk, "traceback", traceback, tlen);
  pack_text(pk, "cause", cause, strlen(cause));
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
    if (status == LUA_OK && lua_type(L, -1) == LUA_TSTRING)
      return;
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
  lua_pop(L, 1);   /* the table still holds the string */
  if (s == NULL)
    *len = 0;
  return s != NULL ? s : "";
}

/* status is lua_pcall's; the error value is on top. A memory error skips the
** message handler, so it has a message but no traceback. */
__attribute__((noreturn))
static void report_error(worker *w, int status)
{
  lua_State *L = w->L;
  w->mem_exempt++;
  size_t mlen, tlen = 0;
  const char *msg, *tb = "", *cause = "error";
  if (status == LUA_ERRRUN && lua_type(L, -1) == LUA_TTABLE) {
    msg = text_field(L, -1, "message", &mlen);
    tb = text_field(L, -1, "traceback", &tlen);
    lua_getfield(L, -1, "denied");
    if (lua_toboolean(L, -1))
      cause = "denied";
    lua_pop(L, 1);
  } else {
    msg = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &mlen) : NULL;
    if (msg == NULL) {
      msg = "(error object is not a string)";
      mlen = strlen(msg);
    }
    if (status == LUA_ERRMEM)
      cause = "memory";
  }
  worker_send_error(w, msg, mlen, tb, tlen, cause);
}

/* done {ok = value}: a value that cannot be sent becomes the run's error. */
__attribute__((noreturn))
static void report_value(worker *w)
{
  char err[256];
  msgpack_packer *pk = worker_frame_begin(w, AIRLOCK_MSG_DONE, 2);
  airlock_pack_cstr(pk, "ok");
  if (airlock_lua_pack(w->L, -1, pk, "value", err, sizeof err) != 0)
    worker_send_error(w, err, strlen(err), "", 0, "error");
  worker_frame_send(w);
  worker_end(w);
}

void worker_run_guest(worker *w, int input_idx)
{
  lua_State *L = w->L;
  char chunkname[256] = "=guest";
  if (w->init.name_len > 0)   /* Lua shows at most LUA_IDSIZE bytes of it anyway */
    snprintf(chunkname, sizeof chunkname, "@%.*s",
             (int)(w->init.name_len < 200 ? w->init.name_len : 200), w->init.name);
  lua_pushcfunction(L, message_handler);
  int msgh = lua_gettop(L);
  int status = luaL_loadbufferx(L, w->init.source, w->init.source_len, chunkname, "t");
  if (status != LUA_OK)
    report_error(w, status);
  lua_pushvalue(L, input_idx);
  status = lua_pcall(L, 1, 1, msgh);
  if (status != LUA_OK)
    report_error(w, status);
  report_value(w);
}
