/*
** modules.c -- require for guests: the module.load effect supplies the source,
** the worker loads it as text only and caches what it returns, once per name.
*/
#include <lauxlib.h>

#include "worker.h"

/* Registry keys: the cache of loaded modules, and the mark a module holds in
** it while it runs (it stays after a failed load, as in Lua 5.1). */
static const char CACHE_KEY = 'm';
static const char LOADING = 'l';

/* Asks the parent for name's source and leaves it on the stack. */
static void fetch_source(lua_State *L, const char *name, size_t len)
{
  worker *w = worker_of(L);
  msgpack_packer *pk = worker_call_begin(w, "module.load", 11);
  msgpack_pack_map(pk, 1);
  airlock_pack_cstr(pk, "name");
  msgpack_pack_str(pk, len);
  msgpack_pack_str_body(pk, name, len);
  worker_call_finish(L, w);
  if (lua_type(L, -1) != LUA_TTABLE || lua_getfield(L, -1, "source") != LUA_TSTRING)
    luaL_error(L, "require '%s': module.load returned no source string", name);
}

static int guest_require(lua_State *L)
{
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_typeerror(L, 1, "string");
  size_t len;
  const char *name = lua_tolstring(L, 1, &len);
  lua_settop(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &CACHE_KEY);   /* 2: the cache */
  lua_pushvalue(L, 1);
  int cached = lua_rawget(L, 2);                   /* 3 */
  if (cached == LUA_TLIGHTUSERDATA && lua_touserdata(L, 3) == &LOADING)
    return luaL_error(L, "require '%s': circular require, or it failed to load before", name);
  if (cached != LUA_TNIL)
    return 1;
  lua_pop(L, 1);
  lua_pushvalue(L, 1);
  lua_pushlightuserdata(L, (void *)&LOADING);
  lua_rawset(L, 2);

  fetch_source(L, name, len);
  size_t slen;
  const char *src = lua_tolstring(L, -1, &slen);
  lua_pushfstring(L, "=%s", name);
  if (luaL_loadbufferx(L, src, slen, lua_tostring(L, -1), "t") != LUA_OK)
    return lua_error(L);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, 1);
  lua_pushvalue(L, -2);
  lua_rawset(L, 2);
  return 1;
}

void worker_modules_open(lua_State *L)
{
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &CACHE_KEY);
  lua_register(L, "require", guest_require);
}
