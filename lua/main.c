/*
** main.c -- the airlock command: a Lua 5.4 host with the module built in.
** All behaviour lives in the embedded airlock.cli module; this file only sets
** up the state, readline for the REPL, and maps errors to exit status 2.
*/
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <readline/readline.h>
#include <readline/history.h>

int luaopen_airlock(lua_State *L);

/* airlock.core.readline(prompt) -> line or nil at end of input */
static int l_readline(lua_State *L) {
  const char *prompt = luaL_optstring(L, 1, "> ");
  char *line = readline(prompt);
  if (!line) return 0;
  lua_pushstring(L, line);
  free(line);
  return 1;
}

static int l_add_history(lua_State *L) {
  const char *line = luaL_checkstring(L, 1);
  if (*line) add_history(line);
  return 0;
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : luaL_tolstring(L, 1, NULL), 1);
  return 1;
}

static int pmain(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  luaL_openlibs(L);
  luaL_requiref(L, "airlock", luaopen_airlock, 1);
  lua_pop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "airlock.core");
  if (isatty(0) && isatty(1)) {   /* readline only for a person at a terminal */
    lua_pushcfunction(L, l_readline); lua_setfield(L, -2, "readline");
    lua_pushcfunction(L, l_add_history); lua_setfield(L, -2, "add_history");
  }
  lua_pop(L, 2);
  lua_createtable(L, argc, 1);
  for (int i = 0; i < argc; i++) { lua_pushstring(L, argv[i]); lua_rawseti(L, -2, i); }
  lua_setglobal(L, "arg");
  lua_getglobal(L, "require");
  lua_pushliteral(L, "airlock.cli");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "main");
  lua_getglobal(L, "arg");
  lua_call(L, 1, 1);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (!L) { fputs("airlock: cannot create a Lua state (out of memory)\n", stderr); return 2; }
  signal(SIGPIPE, SIG_IGN);   /* a closed pipe is an error return, not a death */
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
