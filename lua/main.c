/*
** main.c -- the airlock command: a Lua 5.4 host with the module built in.
** All behaviour lives in the embedded airlock.cli.main module; this file only sets
** up the state, readline for the REPL, and maps errors to exit status 2.
*/
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/select.h>
#include <stdlib.h>
#include <unistd.h>
#include <malloc.h>
#include <stdint.h>
#include <sys/mman.h>
#include <readline/readline.h>
#include <readline/history.h>
#include "binding/embedded.h"

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

/* readline's callback interface, driven by select(), so that Ctrl-C at the
** prompt abandons the line (select returns EINTR) instead of being lost. */
static char *rl_got;
static int rl_finished;

static void on_line(char *line)
{
  rl_got = line;
  rl_finished = 1;
  rl_callback_handler_remove();
}

/* airlock.core.readline(prompt) -> line, or nil at end of input, or
** nil, "interrupted" after Ctrl-C */
static int l_readline(lua_State *L)
{
  const char *prompt = luaL_optstring(L, 1, "> ");
  rl_got = NULL;
  rl_finished = 0;
  interrupted = 0;
  fflush(stdout);
  rl_callback_handler_install(prompt, on_line);
  while (!rl_finished) {
    int fd = fileno(rl_instream ? rl_instream : stdin);
    fd_set in;
    FD_ZERO(&in);
    FD_SET(fd, &in);
    int n = select(fd + 1, &in, NULL, NULL, NULL);
    if (n < 0) {
      if (errno != EINTR) {
        rl_callback_handler_remove();
        return luaL_error(L, "select: %s", strerror(errno));
      }
      if (interrupted) {
        FILE *out = rl_outstream ? rl_outstream : stdout;
        interrupted = 0;
        fputs("^C\n", out); /* after what was typed, which is dropped */
        fflush(out);
        rl_free_line_state();
        rl_callback_sigcleanup();
        rl_callback_handler_remove();
        lua_pushnil(L);
        lua_pushliteral(L, "interrupted");
        return 2;
      }
      continue;
    }
    rl_callback_read_char();
  }
  if (!rl_got) return 0;
  lua_pushstring(L, rl_got);
  free(rl_got);
  return 1;
}

static int l_add_history(lua_State *L)
{
  const char *line = luaL_checkstring(L, 1);
  if (*line) add_history(line);
  return 0;
}

/* airlock.core.history_load(path) / history_save(path, max): the REPL's history file */
static int l_history_load(lua_State *L)
{
  int rc = read_history(luaL_checkstring(L, 1));
  lua_pushboolean(L, rc == 0);
  return 1;
}

static int l_history_save(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  int max = (int)luaL_optinteger(L, 2, 1000);
  int rc = write_history(path);
  if (rc == 0 && max > 0) history_truncate_file(path, max);
  if (rc != 0) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(rc));
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* Tab completion: readline asks, the REPL's Lua completer answers.
** airlock.core.set_completer(fn): fn(word, line) -> { candidates... }. */
static lua_State *rl_L;
static int completer_ref = LUA_NOREF;
static char **candidates;
static size_t ncandidates;

static void free_candidates(void)
{
  for (size_t i = 0; i < ncandidates; i++) free(candidates[i]);
  free(candidates);
  candidates = NULL;
  ncandidates = 0;
}

static char *next_candidate(const char *text, int state)
{
  static size_t at;
  (void)text;
  if (state == 0) at = 0;
  return at < ncandidates ? strdup(candidates[at++]) : NULL;
}

/* Calls the completer in protected mode: an error in it completes nothing. */
static int call_completer(lua_State *L)
{
  lua_rawgeti(L, LUA_REGISTRYINDEX, completer_ref);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_call(L, 2, 1);
  return 1;
}

static char **complete(const char *text, int start, int end)
{
  (void)start;
  (void)end;
  rl_attempted_completion_over = 1;   /* never file names */
  rl_completion_append_character = 0; /* "airlock.pol" -> "airlock.policy", ready for ".load" */
  free_candidates();
  if (!rl_L || completer_ref == LUA_NOREF) return NULL;
  lua_State *L = rl_L;
  int top = lua_gettop(L);
  lua_pushcfunction(L, call_completer);
  lua_pushstring(L, text);
  lua_pushstring(L, rl_line_buffer ? rl_line_buffer : "");
  if (lua_pcall(L, 2, 1, 0) == LUA_OK && lua_istable(L, -1)) {
    size_t n = (size_t)lua_rawlen(L, -1);
    if (n > 4096) n = 4096;
    candidates = calloc(n ? n : 1, sizeof *candidates);
    for (size_t i = 0; candidates && i < n; i++) {
      lua_rawgeti(L, -1, (lua_Integer)i + 1);
      const char *c = lua_tostring(L, -1);
      if (c && (candidates[ncandidates] = strdup(c)) != NULL) ncandidates++;
      lua_pop(L, 1);
    }
  }
  lua_settop(L, top);
  return ncandidates ? rl_completion_matches(text, next_candidate) : NULL;
}

static int l_set_completer(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TFUNCTION);
  luaL_unref(L, LUA_REGISTRYINDEX, completer_ref);
  lua_pushvalue(L, 1);
  completer_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  rl_L = L;
  rl_attempted_completion_function = complete;
  rl_completer_word_break_characters = " \t\n\"\\'`@$><=;|&{(,+-*/%^#~[]";
  return 0;
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
  if (isatty(0) && isatty(1)) { /* readline only for a person at a terminal */
    rl_catch_signals = 0;       /* Ctrl-C is ours (on_sigint), at the prompt too */
    lua_pushcfunction(L, l_readline);
    lua_setfield(L, -2, "readline");
    lua_pushcfunction(L, l_add_history);
    lua_setfield(L, -2, "add_history");
    lua_pushcfunction(L, l_history_load);
    lua_setfield(L, -2, "history_load");
    lua_pushcfunction(L, l_history_save);
    lua_setfield(L, -2, "history_save");
    lua_pushcfunction(L, l_set_completer);
    lua_setfield(L, -2, "set_completer");
  }
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
