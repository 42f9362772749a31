/*
** main.c -- the airlock command: a Lua 5.4 host with the module built in.
** All behaviour lives in the embedded airlock.cli.main module; this file only sets
** up the state (the REPL's line editing is repl_readline.c), and maps errors
** to exit status 2.
*/
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>
#include <malloc.h>
#include <stdint.h>
#include <sys/mman.h>
#include "binding/embedded.h"
#include "repl_readline.h"

int luaopen_airlock(lua_State *L);

/* Ctrl-C in the REPL: the handler only sets a flag. The REPL's loops poll it
** (airlock.core.interrupted()) and cancel the running guest; at the prompt it
** abandons the line being typed. Installed by airlock.core.catch_sigint(),
** which only the REPL calls, so `airlock run` keeps the default behaviour. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
  (void)sig;
  interrupted = 1;
}

/* airlock.core.catch_sigint(): Ctrl-C sets the flag instead of ending the process.
** SA_RESTART keeps plain reads going; select and epoll_wait still return EINTR. */
static int l_catch_sigint(lua_State *L)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGINT, &sa, NULL) < 0) return luaL_error(L, "sigaction: %s", strerror(errno));
  lua_pushboolean(L, 1);
  return 1;
}

/* airlock.core.interrupted([peek]) -> true once after each Ctrl-C (peek: do not clear) */
static int l_interrupted(lua_State *L)
{
  int was = interrupted != 0;
  if (was && !lua_toboolean(L, 1)) interrupted = 0;
  lua_pushboolean(L, was);
  return 1;
}

static int traceback(lua_State *L)
{
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : luaL_tolstring(L, 1, NULL), 1);
  return 1;
}

static int pmain(lua_State *L)
{
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  luaL_openlibs(L);
  luaL_requiref(L, "airlock", luaopen_airlock, 1);
  lua_pop(L, 1);
  airlock_install_preloads(L, airlock_embedded_cli); /* the command's own modules */
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "airlock.core");
  lua_pushcfunction(L, l_catch_sigint);
  lua_setfield(L, -2, "catch_sigint");
  lua_pushcfunction(L, l_interrupted);
  lua_setfield(L, -2, "interrupted");
  if (isatty(0) && isatty(1)) airlock_repl_readline_install(L, &interrupted); /* for a person at a terminal */
  lua_pop(L, 2);
  lua_createtable(L, argc, 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i);
  }
  lua_setglobal(L, "arg");
  lua_getglobal(L, "require");
  lua_pushliteral(L, "airlock.cli.main");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "main");
  lua_getglobal(L, "arg");
  lua_call(L, 1, 1);
  return 1;
}

/* The command's start (its Lua modules, the policy, the plan) grows the heap
** to about 1 MiB, a page at a time: 250 page faults, each a trap that costs
** microseconds on a virtual machine (about 1 ms of a short `airlock exec`).
** The heap's first 1.25 MiB are made present in one call instead (Linux
** 5.14's MADV_POPULATE_WRITE; older kernels refuse it and nothing changes).
** Under the sanitizers the heap is theirs, not brk's: nothing is done. */
#define PREFAULT_BYTES (1280 * 1024)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static void prefault_heap(void)
{
#if !defined(__SANITIZE_ADDRESS__)
  if (mallopt(M_TOP_PAD, PREFAULT_BYTES) != 1) return;
  char *p = malloc(1); /* grows the heap by the pad */
  char *top = sbrk(0);
  char *page = (char *)((uintptr_t)p & ~(uintptr_t)4095);
  if (p && top != (char *)-1 && page < top && (size_t)(top - page) <= 2 * PREFAULT_BYTES)
    (void)madvise(page, (size_t)(top - page), MADV_POPULATE_WRITE);
  free(p);
#endif
}

int main(int argc, char **argv)
{
  prefault_heap();
  lua_State *L = luaL_newstate();
  if (!L) {
    fputs("airlock: cannot create a Lua state (out of memory)\n", stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN); /* a closed pipe is an error return, not a death */
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = lua_pcall(L, 2, 1, 1);
  int code = 2;
  if (status != LUA_OK) {
    fprintf(stderr, "airlock: %s\n", lua_tostring(L, -1));
  } else {
    code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
  }
  lua_close(L);
  return code;
}
