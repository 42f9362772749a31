/*
** main.c -- airlock-worker: read init from fd 3, build the guest's Lua state,
** confine, say ready, run the guest once, report done, exit. One guest per process.
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sys/resource.h>

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
  size_t room = sizeof line - at - 1; /* one byte stays free for the newline */
  int n = vsnprintf(line + at, room, fmt, ap);
  va_end(ap);
  if (n > 0) at += (size_t)n < room ? (size_t)n : room - 1;
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

/* Runs under lua_pcall: the guest's environment. */
static int setup(lua_State *L)
{
  worker_env_open(L, lua_touserdata(L, 1));
  return 0;
}

/* Runs under lua_pcall: the input as the one result (or nil and a message
** when the input cannot become a Lua value). */
static int convert_input(lua_State *L)
{
  worker *w = lua_touserdata(L, 1);
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

/* The Lua state with the guest's world open (libraries, host, require). */
static void build_state(worker *w)
{
  lua_State *L = worker_newstate(w);
  if (L == NULL) worker_die(WORKER_EXIT_INTERNAL, "cannot create a Lua state");
  w->L = L;
  lua_atpanic(L, on_panic);
  lua_pushcfunction(L, setup);
  lua_pushlightuserdata(L, w);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK)
    worker_die(WORKER_EXIT_INTERNAL, "building the guest runtime: %s", lua_tostring(L, -1));
}

/* Leaves the guest's input at stack index 1. */
static void push_input(worker *w, const char *frame)
{
  lua_State *L = w->L;
  lua_pushcfunction(L, convert_input);
  lua_pushlightuserdata(L, w);
  if (lua_pcall(L, 1, 2, 0) != LUA_OK)
    worker_die(WORKER_EXIT_INTERNAL, "building the guest runtime: %s", lua_tostring(L, -1));
  if (!lua_isnil(L, -1)) worker_die(WORKER_EXIT_BADINIT, "%s: input: %s", frame, lua_tostring(L, -1));
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

/* A prepared worker may wait long for its run, and the first guest would pay
** for touching the compiler and the interpreter's code for the first time
** (a page fault for each page). A throwaway state, with the plain allocator
** and nothing of the guest's, compiles and runs a chunk that exercises them
** once; the guest's own state is untouched. Best effort: it cannot fail the
** worker. */
static void warm_up(void)
{
  lua_State *L = luaL_newstate();
  if (L == NULL) return;
  static const char chunk[] = "local t, s = {}, 0\n"
                              "for i = 1, 64 do t[i] = { i, tostring(i) .. 'k', i * 0.5 } end\n"
                              "for _, v in ipairs(t) do s = s + v[1] + #v[2] + v[3] end\n"
                              "local function f(a, ...) return a, select('#', ...) end\n"
                              "return f(s, 'x', 'y')\n";
  if (luaL_loadbufferx(L, chunk, sizeof chunk - 1, "=warm-up", "t") == LUA_OK) (void)lua_pcall(L, 0, 1, 0);
  lua_close(L);
}

/* Two ways to a run. Fresh: init brings everything; the state is built with
** the input in it, the worker confines itself, says ready and runs the guest.
** Prepared (init says prepare = true, a pool's worker): init brings all but
** the run; the state is built and the worker confined and ready before any
** run exists, and it then waits, blocked on fd 3, for the start frame with
** its run id, guest and input, so a run costs only the guest's own work. */
/* The first frame of a kind (init, or a prepared worker's start), decoded
** into u, which lives as long as the process; a protocol version other than
** ours ends the worker. */
static void read_first(msgpack_unpacked *u, airlock_msg *msg, airlock_msg_kind kind, const char *what)
{
  msgpack_unpacked_init(u);
  worker_channel_read_first(u, msg, kind);
  if (msg->version != AIRLOCK_PROTOCOL_VERSION)
    worker_die(WORKER_EXIT_BADINIT, "%s: protocol version %llu, this worker speaks %d", what,
               (unsigned long long)msg->version, AIRLOCK_PROTOCOL_VERSION);
}

int main(void)
{
  static worker w;
  static msgpack_unpacked init, start; /* live as long as the process: w.init points into them */
  airlock_msg msg;

  /* The address space limit the spawner set, for "not enough memory" to
  ** name; read now, while getrlimit is still allowed. */
  struct rlimit as;
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) w.as_limit = (uint64_t)as.rlim_cur;
  worker_channel_open(&w);
  read_first(&init, &msg, AIRLOCK_MSG_INIT, "init");
  worker_init_parse(&w, msg.value);
  build_state(&w);
  worker_cpu_timer(&w); /* before confining: timer_create and sigaction are not allowed after */
  if (!w.init.prepared) {
    push_input(&w, "init");
    confine_and_ready(&w);
  } else {
    warm_up();
    /* The collector's switch to generational mode (guest_main's) is a full
    ** collection of the runtime: done here, it costs the run nothing. */
    lua_gc(w.L, LUA_GCGEN, 0, 0);
    confine_and_ready(&w);
    worker_limits_hook(&w); /* all that does not wait for the run is done before it */
    read_first(&start, &msg, AIRLOCK_MSG_START, "start");
    worker_start_parse(&w, msg.value);
    push_input(&w, "start");
  }
  worker_limits_start(&w);
  worker_run_guest(&w, 1);
}
