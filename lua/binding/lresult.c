/*
** lresult.c -- the result table of a run that ended, from the core's
** airlock_result (see docs/API.md for its fields).
*/
#define _GNU_SOURCE
#include "lbroker.h"

#include <stdio.h>
#include <string.h>

static void set_num(lua_State *L, const char *k, double v)
{
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}
static void set_int(lua_State *L, const char *k, lua_Integer v)
{
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

void airlock_l_push_result(lua_State *L, lrun *lr, const airlock_result *res)
{
  char err[256];
  const char *cause = airlock_cause_name(res->cause);
  const char *message = res->message;
  char msg[640];
  int ok = res->ok;

  lua_createtable(L, 0, 16);
  if (res->value) {
    if (airlock_lua_push(L, res->value, err, sizeof err) == 0)
      lua_setfield(L, -2, "value");
    else {
      ok = 0;
      cause = "protocol";
      snprintf(msg, sizeof msg, "protocol: result value: %s", err);
      message = msg;
    }
  }
  if (res->err) {
    lua_createtable(L, 0, 2);
    const msgpack_object *tb = airlock_msg_field(res->err, "traceback");
    if (tb && tb->type == MSGPACK_OBJECT_STR) {
      lua_pushlstring(L, tb->via.str.ptr, tb->via.str.size);
      lua_setfield(L, -2, "traceback");
    }
    lua_pushstring(L, message);
    lua_setfield(L, -2, "message");
    lua_setfield(L, -2, "error");
  }
  if (res->confined && airlock_lua_push(L, res->confined, err, sizeof err) == 0)
    lua_setfield(L, -2, "confinement");
  lua_pushboolean(L, ok);
  lua_setfield(L, -2, "ok");
  lua_pushstring(L, cause);
  lua_setfield(L, -2, "cause");
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  set_int(L, "run", lr->serial);
  if (res->exit_code >= 0) set_int(L, "exit_code", res->exit_code);
  /* A signal only when it ended the run: a worker that sent its last frame
  ** is hung up on by the parent, which is not how the run ended. */
  if (res->term_signal && res->cause != AIRLOCK_CAUSE_OK && res->cause != AIRLOCK_CAUSE_ERROR &&
      res->cause != AIRLOCK_CAUSE_PAUSED && res->cause != AIRLOCK_CAUSE_DENIED) {
    char sig[32];
    lua_pushfstring(L, "SIG%s", airlock_signal_name(res->term_signal, sig, sizeof sig));
    lua_setfield(L, -2, "signal");
  }
  lua_pushlstring(L, res->out.data, res->out.len);
  lua_setfield(L, -2, "stdout");
  lua_pushlstring(L, res->errout.data, res->errout.len);
  lua_setfield(L, -2, "stderr");
  lua_pushboolean(L, res->out.truncated);
  lua_setfield(L, -2, "stdout_truncated");
  lua_pushboolean(L, res->errout.truncated);
  lua_setfield(L, -2, "stderr_truncated");
  if (res->refused_total) {
    /* refused = { {syscall = "setresuid", errno = "EPERM", count = 2}, ... } */
    lua_createtable(L, (int)res->nrefused, 0);
    for (size_t i = 0; i < res->nrefused; i++) {
      char name[64], ebuf[24];
      lua_createtable(L, 0, 3);
      lua_pushstring(L, airlock_syscall_name(res->refused[i].nr, name, sizeof name));
      lua_setfield(L, -2, "syscall");
      lua_pushstring(L, airlock_errno_name(res->refused[i].err, ebuf, sizeof ebuf));
      lua_setfield(L, -2, "errno");
      set_int(L, "count", (lua_Integer)res->refused[i].count);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "refused");
    set_int(L, "refused_total", (lua_Integer)res->refused_total);
  }
  if (res->connects_total) {
    /* a run with a proxy: connects = { "127.0.0.1:8080", ... }, the direct ones */
    lua_createtable(L, (int)res->nconnects, 0);
    for (size_t i = 0; i < res->nconnects; i++) {
      lua_pushstring(L, res->connects[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "connects");
    set_int(L, "connects_total", (lua_Integer)res->connects_total);
  }
  if (res->observed) {
    /* learn mode: the observed calls' records, "KV PATH\n" each (airlock.h) */
    lua_pushlstring(L, res->observed, res->observed_len);
    lua_setfield(L, -2, "observed");
    lua_pushboolean(L, res->observed_truncated);
    lua_setfield(L, -2, "observed_truncated");
  }
  lua_createtable(L, 0, 7);
  set_num(L, "wall_ms", res->usage.wall_ms);
  set_num(L, "user_ms", res->usage.user_ms);
  set_num(L, "sys_ms", res->usage.sys_ms);
  set_int(L, "max_rss_kb", res->usage.max_rss_kb);
  set_int(L, "effects", (lua_Integer)res->usage.effects);
  set_int(L, "notes", (lua_Integer)res->usage.notes);
  set_int(L, "bytes_in", (lua_Integer)res->usage.bytes_in);
  set_int(L, "bytes_out", (lua_Integer)res->usage.bytes_out);
  if (res->usage.first_instruction_ms > 0)
    set_num(L, "first_instruction_ms", res->usage.first_instruction_ms);
  if (res->usage.done_frame_ms > 0) set_num(L, "done_frame_ms", res->usage.done_frame_ms);
  if (res->usage.pids_peak) set_int(L, "pids_peak", (lua_Integer)res->usage.pids_peak);
  if (res->usage.pids_refused) set_int(L, "pids_refused", (lua_Integer)res->usage.pids_refused);
  if (res->usage.memory_peak) set_int(L, "memory_peak", (lua_Integer)res->usage.memory_peak);
  if (res->usage.oom_kills) set_int(L, "oom_kills", (lua_Integer)res->usage.oom_kills);
  if (res->usage.cpu_usec) set_int(L, "cpu_ms", (lua_Integer)(res->usage.cpu_usec / 1000));
  lua_setfield(L, -2, "usage");
}
