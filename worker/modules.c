/*
** modules.c -- require for guests, shaped like Lua 5.4's: what is already in
** the loaded table (the standard libraries the guest has, and every module
** loaded so far) is returned at once; any other name is a module.load effect,
** whose source the worker loads as text only and runs like Lua's searchers do.
*/
#include <lauxlib.h>

#include "worker.h"

/* What require returns second for a module the host supplied, and passes to
** the module's chunk as its second argument (after the name). Lua 5.4 returns
** the searcher's loader data there: the file name for a Lua file, ":preload:"
** for package.preload. The guest never sees the host's path, so the marker
** names the effect the source came from, in the same style. */
#define LOADER_DATA ":module.load:"

/* Registry keys: the set of names whose chunk is running right now, and the
** metatable of the guard that takes a name out of it. */
static const char LOADING_KEY = 'l';
static const char GUARD_KEY = 'g';

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

/* __close of the guard require holds while a chunk runs: however the chunk
** ends (a value, or an error unwinding past require), its name leaves the
** loading set. So a module that failed is tried again by the next require, as
** in Lua 5.4, where package.loaded is set only on success. */
static int loading_done(lua_State *L)
{
  lua_rawgetp(L, LUA_REGISTRYINDEX, &LOADING_KEY);
  lua_rawgeti(L, 1, 1);
  lua_pushnil(L);
  lua_rawset(L, -3);
  return 0;
}

/* Pushes a to-be-closed guard for the name at index 1 and marks it loading. */
static void guard_loading(lua_State *L, int loading)
{
  lua_pushvalue(L, 1);
  lua_pushboolean(L, 1);
  lua_rawset(L, loading);
  lua_createtable(L, 1, 0);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &GUARD_KEY);
  lua_setmetatable(L, -2);
  lua_toclose(L, -1);
}

/* require(name) -> module, loader data (see LOADER_DATA); a module found in
** the loaded table returns just itself, as Lua's does. A name required again
** while its own chunk runs is an error here; in Lua 5.4 it would recurse until
** the C stack overflows, and here each round would be one more effect. */
static int guest_require(lua_State *L)
{
  size_t len;
  const char *name = luaL_checklstring(L, 1, &len);
  lua_settop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE); /* 2: loaded */
  lua_pushvalue(L, 1);
  if (lua_rawget(L, 2) != LUA_TNIL && lua_toboolean(L, -1)) return 1;
  lua_pop(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &LOADING_KEY); /* 3: loading */
  lua_pushvalue(L, 1);
  if (lua_rawget(L, 3) != LUA_TNIL)
    return luaL_error(L, "require '%s': circular require (it is still loading)", name);
  lua_pop(L, 1);
  guard_loading(L, 3); /* 4: the guard */

  fetch_source(L, name, len);
  size_t slen;
  const char *src = lua_tolstring(L, -1, &slen);
  /* "=name": errors in the module read "name:LINE: ...", as they would read
  ** "name.lua:LINE:" (the file's path) from Lua's own searcher. */
  lua_pushfstring(L, "=%s", name);
  if (luaL_loadbufferx(L, src, slen, lua_tostring(L, -1), "t") != LUA_OK)
    return luaL_error(L, "error loading module '%s':\n\t%s", name, lua_tostring(L, -1));
  lua_pushvalue(L, 1);
  lua_pushliteral(L, LOADER_DATA);
  lua_call(L, 2, 1);
  if (!lua_isnil(L, -1)) {
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, 2);
  }
  lua_pushvalue(L, 1);
  if (lua_rawget(L, 2) == LUA_TNIL) { /* the chunk set no value: true */
    lua_pushvalue(L, 1);
    lua_pushboolean(L, 1);
    lua_rawset(L, 2);
    lua_pushboolean(L, 1);
    lua_replace(L, -2);
  }
  lua_pushliteral(L, LOADER_DATA);
  return 2;
}

void worker_modules_open(lua_State *L)
{
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &LOADING_KEY);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, loading_done);
  lua_setfield(L, -2, "__close");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &GUARD_KEY);
  lua_register(L, "require", guest_require);
}
