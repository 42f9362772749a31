/*
** repl_readline.c -- the REPL's line editing: GNU readline, opened on first
** use. Linking it cost every command's start half a millisecond (readline
** and its terminal library loaded and relocated) for the one command, the
** REPL at a terminal, that edits lines. A readline that cannot be opened is
** an error at the prompt naming the library.
*/
#define _GNU_SOURCE
#include "repl_readline.h"

#include <lauxlib.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>
#include <readline/history.h>
#include <readline/readline.h>

#define STR2(x)     #x
#define STR(x)      STR2(x)
/* The soname of the readline the headers belong to: libreadline.so.8. */
#define LIBREADLINE "libreadline.so." STR(RL_VERSION_MAJOR)

/* readline's functions, and the addresses of its variables. */
static struct {
  __typeof__(&rl_callback_handler_install) rl_callback_handler_install;
  __typeof__(&rl_callback_handler_remove) rl_callback_handler_remove;
  __typeof__(&rl_callback_read_char) rl_callback_read_char;
  __typeof__(&rl_free_line_state) rl_free_line_state;
  __typeof__(&rl_callback_sigcleanup) rl_callback_sigcleanup;
  __typeof__(&rl_completion_matches) rl_completion_matches;
  __typeof__(&add_history) add_history;
  __typeof__(&read_history) read_history;
  __typeof__(&write_history) write_history;
  __typeof__(&history_truncate_file) history_truncate_file;
  __typeof__(&rl_instream) rl_instream;
  __typeof__(&rl_outstream) rl_outstream;
  __typeof__(&rl_catch_signals) rl_catch_signals;
  __typeof__(&rl_attempted_completion_over) rl_attempted_completion_over;
  __typeof__(&rl_completion_append_character) rl_completion_append_character;
  __typeof__(&rl_line_buffer) rl_line_buffer;
  __typeof__(&rl_attempted_completion_function) rl_attempted_completion_function;
  __typeof__(&rl_completer_word_break_characters) rl_completer_word_break_characters;
} rl;
static int loaded; /* 0: not tried; 1: loaded; -1: cannot be */
static char load_error[300];

static volatile sig_atomic_t *interrupted; /* main.c's Ctrl-C flag */

/* Every symbol, or none: one missing is a readline this was not built for. */
static int load(void)
{
  void *h = dlopen(LIBREADLINE, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(load_error, sizeof load_error, "readline: cannot load %s (%s)", LIBREADLINE,
             why ? why : "no reason given");
    return -1;
  }
  const struct {
    void **slot;
    const char *name;
  } syms[] = {
#define SYM(n) {(void **)&rl.n, #n}
      SYM(rl_callback_handler_install),
      SYM(rl_callback_handler_remove),
      SYM(rl_callback_read_char),
      SYM(rl_free_line_state),
      SYM(rl_callback_sigcleanup),
      SYM(rl_completion_matches),
      SYM(add_history),
      SYM(read_history),
      SYM(write_history),
      SYM(history_truncate_file),
      SYM(rl_instream),
      SYM(rl_outstream),
      SYM(rl_catch_signals),
      SYM(rl_attempted_completion_over),
      SYM(rl_completion_append_character),
      SYM(rl_line_buffer),
      SYM(rl_attempted_completion_function),
      SYM(rl_completer_word_break_characters),
#undef SYM
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    if ((*syms[i].slot = dlsym(h, syms[i].name)) == NULL) {
      snprintf(load_error, sizeof load_error, "readline: %s has no %s", LIBREADLINE, syms[i].name);
      return -1;
    }
  }
  *rl.rl_catch_signals = 0; /* Ctrl-C is ours (main.c's on_sigint), at the prompt too */
  return 1;
}

/* Opens readline on the first call; raises when it cannot be. */
static void need(lua_State *L)
{
  if (loaded == 0) loaded = load();
  if (loaded < 0) luaL_error(L, "%s", load_error);
}

/* readline's callback interface, driven by select(), so that Ctrl-C at the
** prompt abandons the line (select returns EINTR) instead of being lost. */
static char *rl_got;
static int rl_finished;

static void on_line(char *line)
{
  rl_got = line;
  rl_finished = 1;
  rl.rl_callback_handler_remove();
}

/* airlock.core.readline(prompt) -> line, or nil at end of input, or
** nil, "interrupted" after Ctrl-C */
static int l_readline(lua_State *L)
{
  need(L);
  const char *prompt = luaL_optstring(L, 1, "> ");
  rl_got = NULL;
  rl_finished = 0;
  *interrupted = 0;
  fflush(stdout);
  rl.rl_callback_handler_install(prompt, on_line);
  while (!rl_finished) {
    int fd = fileno((*rl.rl_instream) ? (*rl.rl_instream) : stdin);
    fd_set in;
    FD_ZERO(&in);
    FD_SET(fd, &in);
    int n = select(fd + 1, &in, NULL, NULL, NULL);
    if (n < 0) {
      if (errno != EINTR) {
        rl.rl_callback_handler_remove();
        return luaL_error(L, "select: %s", strerror(errno));
      }
      if (*interrupted) {
        FILE *out = (*rl.rl_outstream) ? (*rl.rl_outstream) : stdout;
        *interrupted = 0;
        fputs("^C\n", out); /* after what was typed, which is dropped */
        fflush(out);
        rl.rl_free_line_state();
        rl.rl_callback_sigcleanup();
        rl.rl_callback_handler_remove();
        lua_pushnil(L);
        lua_pushliteral(L, "interrupted");
        return 2;
      }
      continue;
    }
    rl.rl_callback_read_char();
  }
  if (!rl_got) return 0;
  lua_pushstring(L, rl_got);
  free(rl_got);
  return 1;
}

static int l_add_history(lua_State *L)
{
  need(L);
  const char *line = luaL_checkstring(L, 1);
  if (*line) rl.add_history(line);
  return 0;
}

/* airlock.core.history_load(path) / history_save(path, max): the REPL's history file */
static int l_history_load(lua_State *L)
{
  need(L);
  int rc = rl.read_history(luaL_checkstring(L, 1));
  lua_pushboolean(L, rc == 0);
  return 1;
}

static int l_history_save(lua_State *L)
{
  need(L);
  const char *path = luaL_checkstring(L, 1);
  int max = (int)luaL_optinteger(L, 2, 1000);
  int rc = rl.write_history(path);
  if (rc == 0 && max > 0) rl.history_truncate_file(path, max);
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
  (*rl.rl_attempted_completion_over) = 1;   /* never file names */
  (*rl.rl_completion_append_character) = 0; /* "airlock.pol" -> "airlock.policy", ready for ".load" */
  free_candidates();
  if (!rl_L || completer_ref == LUA_NOREF) return NULL;
  lua_State *L = rl_L;
  int top = lua_gettop(L);
  lua_pushcfunction(L, call_completer);
  lua_pushstring(L, text);
  lua_pushstring(L, (*rl.rl_line_buffer) ? (*rl.rl_line_buffer) : "");
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
  return ncandidates ? rl.rl_completion_matches(text, next_candidate) : NULL;
}

static int l_set_completer(lua_State *L)
{
  need(L);
  luaL_checktype(L, 1, LUA_TFUNCTION);
  luaL_unref(L, LUA_REGISTRYINDEX, completer_ref);
  lua_pushvalue(L, 1);
  completer_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  rl_L = L;
  (*rl.rl_attempted_completion_function) = complete;
  (*rl.rl_completer_word_break_characters) = " \t\n\"\\'`@$><=;|&{(,+-*/%^#~[]";
  return 0;
}

void airlock_repl_readline_install(lua_State *L, volatile sig_atomic_t *flag)
{
  interrupted = flag;
  const luaL_Reg fns[] = {{"readline", l_readline},           {"add_history", l_add_history},
                          {"history_load", l_history_load},   {"history_save", l_history_save},
                          {"set_completer", l_set_completer}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
