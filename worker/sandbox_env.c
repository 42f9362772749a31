/*
** sandbox_env.c -- the guest's global environment: six standard libraries,
** minus everything that reads files, loads bytecode or reaches the process.
** What the guest gets from the world instead comes through effects (host_api.c).
*/
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "worker.h"

/* No io, os, debug or package: each of them reaches past the interpreter. */
static const luaL_Reg guest_libs[] = {
  { LUA_GNAME, luaopen_base },
  { LUA_STRLIBNAME, luaopen_string },
  { LUA_TABLIBNAME, luaopen_table },
  { LUA_MATHLIBNAME, luaopen_math },
  { LUA_UTF8LIBNAME, luaopen_utf8 },
  { LUA_COLIBNAME, luaopen_coroutine },
  { NULL, NULL },
};

/* load with the mode forced to text: binary chunks can break the VM's
** invariants, so they are no boundary. Everything else (a reader function,
** chunk name, env) is the original load's business; env is passed only when
** given, since load tells "no env" from an explicit nil. */
static int load_text_only(lua_State *L)
{
  int nargs = lua_gettop(L) >= 4 ? 4 : 3;
  lua_settop(L, nargs);
  lua_pushliteral(L, "t");
  lua_replace(L, 3);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, nargs, LUA_MULTRET);
  return lua_gettop(L);
}

/* Only collecting and observing are left to the guest: the other options
** stop or retune the collector, and a guest that stopped it would run into
** the memory cap carrying garbage it never freed. */
static int collectgarbage_limited(lua_State *L)
{
  static const char *const allowed[] = { "collect", "count", "step", "isrunning" };
  const char *opt = luaL_optstring(L, 1, "collect");
  for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
    if (strcmp(opt, allowed[i]) == 0) {
      int n = lua_gettop(L);
      lua_pushvalue(L, lua_upvalueindex(1));
      lua_insert(L, 1);
      lua_call(L, n, LUA_MULTRET);
      return lua_gettop(L);
    }
  }
  return luaL_error(L, "collectgarbage option '%s' is not allowed", opt);
}

/* Replaces t[name] by a C closure over its original value. */
static void wrap_field(lua_State *L, int t, const char *name, lua_CFunction f)
{
  lua_getfield(L, t, name);
  lua_pushcclosure(L, f, 1);
  lua_setfield(L, t, name);
}

static void restrict_base(lua_State *L)
{
  lua_pushglobaltable(L);
  int g = lua_gettop(L);
  lua_pushnil(L);
  lua_setfield(L, g, "dofile");
  lua_pushnil(L);
  lua_setfield(L, g, "loadfile");
  wrap_field(L, g, "load", load_text_only);
  wrap_field(L, g, "collectgarbage", collectgarbage_limited);
  lua_pop(L, 1);
}

/* The string table is also the __index of every string's metatable, so one
** removal covers ("").dump as well. */
static void restrict_string(lua_State *L)
{
  lua_getglobal(L, LUA_STRLIBNAME);
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  lua_pop(L, 1);
}

/* math.randomseed() without arguments would seed from the clock and an
** address; it reseeds from the run's seed instead, so replay stays exact. */
static int randomseed_replayable(lua_State *L)
{
  if (lua_isnone(L, 1))
    lua_pushinteger(L, (lua_Integer)worker_of(L)->init.seed);
  int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L);
}

/* Seeds through math.randomseed itself, so the generator's state is exactly
** what a guest calling math.randomseed(seed) would get. */
static void seed_random(lua_State *L, int64_t seed)
{
  lua_getglobal(L, LUA_MATHLIBNAME);
  int m = lua_gettop(L);
  wrap_field(L, m, "randomseed", randomseed_replayable);
  lua_getfield(L, m, "randomseed");
  lua_pushinteger(L, (lua_Integer)seed);
  lua_call(L, 1, 0);
  lua_pop(L, 1);
}

void worker_env_open(lua_State *L, worker *w)
{
  for (const luaL_Reg *lib = guest_libs; lib->func != NULL; lib++) {
    luaL_requiref(L, lib->name, lib->func, 1);
    lua_pop(L, 1);
  }
  restrict_base(L);
  restrict_string(L);
  seed_random(L, w->init.seed);
  worker_host_open(L, w);
  worker_modules_open(L);
  worker_os_open(L);
}
