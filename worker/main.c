/*
** main.c -- airlock-worker: read init from fd 3, build the guest's Lua state,
** confine, say ready, run the guest once, report done, exit. One guest per process.
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "convert.h"
#include "worker.h"

/* One write, so the line arrives whole in the parent's capture. */
void worker_die(int code, const char *fmt, ...)
{
  char line[1024] = "airlock-worker: ";
  size_t at = strlen(line);
  va_list ap;
  va_start(ap, fmt);
  size_t room = sizeof line - at - 1;   /* one byte stays free for the newline */
  int n = vsnprintf(line + at, room, fmt, ap);
  va_end(ap);
  if (n > 0)
    at += (size_t)n < room ? (size_t)n : room - 1;
  line[at++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, at);
  (void)ignored;
  _exit(code);
}

/* Every Lua call the worker makes is protected; reaching this means a bug in
** the worker, and the run must end loudly rather than continue in a bad state. */
static int on_panic(lua_State *L)
{
  const char *msg = lua_tostring(L, -1);
  worker_die(WORKER_EXIT_INTERNAL, "unprotected Lua error: %s", msg ? msg : "?");
}

/* Runs under lua_pcall: the environment, then the input as the one result
** (or nil and a message when the input cannot become a Lua value). */
static int setup(lua_State *L)
{
  worker *w = lua_touserdata(L, 1);
  worker_env_open(L, w);
  if (w->init.input == NULL) {
    lua_pushnil(L);
    return 1;
  }
  char err[128];
  if (airlock_lua_push(L, w->init.input, err, sizeof err) != 0) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  return 1;
}

/* Leaves the guest's input at stack index 1. */
static void build_state(worker *w)
{
  lua_State *L = worker_newstate(w);
  if (L == NULL)
    worker_die(WORKER_EXIT_INTERNAL, "cannot create a Lua state");
  w->L = L;
  lua_atpanic(L, on_panic);
  lua_pushcfunction(L, setup);
  lua_pushlightuserdata(L, w);
  if (lua_pcall(L, 1, 2, 0) != LUA_OK)
    worker_die(WORKER_EXIT_INTERNAL, "building the guest runtime: %s", lua_tostring(L, -1));
  if (!lua_isnil(L, -1))
    worker_die(WORKER_EXIT_BADINIT, "init: input: %s", lua_tostring(L, -1));
  lua_pop(L, 1);
}

/* The ready frame carries the confinement report. A layer the policy requires
** but that could not be applied stops the worker before any guest code. */
static void confine_and_ready(worker *w)
{
  msgpack_packer *pk = worker_frame_begin(w, AIRLOCK_MSG_READY, 3);
  airlock_pack_cstr(pk, "v");
  msgpack_pack_uint64(pk, AIRLOCK_PROTOCOL_VERSION);
  airlock_pack_cstr(pk, "confined");
  char why[320] = "";
  /* A missing required layer sends no ready: the exit status and the line on
  ** stderr are the report (cause confinement), and the parent is never asked
  ** to trust a half-confined worker. */
  if (worker_confine(w->init.confine, pk, why, sizeof why) != 0)
    worker_die(WORKER_EXIT_CONFINE, "confinement: %s; the guest will not run", why);
  worker_frame_send(w);
}

int main(void)
{
  static worker w;
  msgpack_unpacked init;   /* lives as long as the process: w.init points into it */
  airlock_msg msg;

  worker_channel_open(&w);
  msgpack_unpacked_init(&init);
  worker_channel_read_init(&init, &msg);
  if (msg.version != AIRLOCK_PROTOCOL_VERSION)
    worker_die(WORKER_EXIT_BADINIT, "init: protocol version %llu, this worker speaks %d",
               (unsigned long long)msg.version, AIRLOCK_PROTOCOL_VERSION);
  worker_init_parse(&w, msg.value);
  build_state(&w);
  confine_and_ready(&w);
  worker_limits_start(&w);
  worker_run_guest(&w, 1);
}
