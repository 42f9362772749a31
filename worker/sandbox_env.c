/*
** sandbox_env.c -- the guest's global environment: six standard libraries,
** minus everything that reads files, loads bytecode or reaches the process.
** What the guest gets from the world instead comes through effects (host_api.c).
*/
#include <lauxlib.h>
#include <lualib.h>

#include "worker.h"

/* No io, os, debug or package: each of them reaches past the interpreter. */
static const luaL_Reg guest_libs[] = {
    {LUA_GNAME, luaopen_base},
    {LUA_STRLIBNAME, luaopen_string},
    {LUA_TABLIBNAME, luaopen_table},
    {LUA_MATHLIBNAME, luaopen_math},
    {LUA_UTF8LIBNAME, luaopen_utf8},
    {LUA_COLIBNAME, luaopen_coroutine},
    {NULL, NULL},
};

/* ---------------------------------------------------------------- load */

/* load is Lua 5.4's own (luaB_load: the same arguments, results and
** messages) but for two things. A binary chunk is always refused, as if the
** mode were "t": binary chunks can break the VM's invariants, so they are no
** boundary. The chunk's first byte says which it is, so the mode given is
** passed on for a text chunk (load(s, n, "b") fails with Lua's own message)
** and "t" for a binary one ("attempt to load a binary chunk (mode is 't')").
** And the loading runs under a pcall of its own: a load inside the guest's
** chunk would otherwise inherit the worker's message handler, and an error in
** a reader function would come back as the worker's error table. */
#define READER_SLOT 5 /* holds the piece the parser is reading */

typedef struct {
  int first; /* the piece read ahead is still to be handed to the parser */
} reader_state;

/* Calls the reader function at index 1 and keeps its piece in READER_SLOT;
** NULL at the end of the chunk (nil or an empty string), as Lua's. */
static const char *call_reader(lua_State *L, size_t *size)
{
  luaL_checkstack(L, 2, "too many nested functions");
  lua_pushvalue(L, 1);
  lua_call(L, 0, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    *size = 0;
    return NULL;
  }
  if (!lua_isstring(L, -1)) { /* placed at load's caller (level 0 is load_chunk) */
    luaL_where(L, 2);
    lua_pushliteral(L, "reader function must return a string");
    lua_concat(L, 2);
    lua_error(L);
  }
  lua_replace(L, READER_SLOT);
  return lua_tolstring(L, READER_SLOT, size);
}

static const char *guest_reader(lua_State *L, void *ud, size_t *size)
{
  reader_state *rs = ud;
  if (rs->first) {
    rs->first = 0;
    if (lua_type(L, READER_SLOT) == LUA_TSTRING) return lua_tolstring(L, READER_SLOT, size);
    *size = 0;
    return NULL;
  }
  return call_reader(L, size);
}

/* Under lua_pcall: 1 chunk (a string or a reader), 2 chunk name, 3 mode;
** leaves the loaded function on top, or raises the load's message. */
static int load_chunk(lua_State *L)
{
  lua_settop(L, READER_SLOT);
  const char *chunkname = lua_tostring(L, 2), *mode = lua_tostring(L, 3);
  int status;
  if (lua_type(L, 1) == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(L, 1, &len);
    if (len > 0 && s[0] == LUA_SIGNATURE[0]) mode = "t";
    status = luaL_loadbufferx(L, s, len, chunkname, mode);
  } else {
    size_t len;
    const char *piece = call_reader(L, &len); /* read ahead: which kind? */
    if (piece != NULL && len > 0 && piece[0] == LUA_SIGNATURE[0]) mode = "t";
    if (piece == NULL || len == 0) {
      lua_pushnil(L);
      lua_replace(L, READER_SLOT);
    }
    reader_state rs = {1};
    status = lua_load(L, guest_reader, &rs, chunkname, mode);
  }
  if (status != LUA_OK) return lua_error(L);
  return 1;
}

static int guest_load(lua_State *L)
{
  int env = !lua_isnone(L, 4) ? 4 : 0;
  const char *s = lua_tostring(L, 1); /* a number is a string chunk too */
  if (s != NULL) {
    luaL_optstring(L, 2, s);
  } else {
    luaL_optstring(L, 2, "=(load)");
    luaL_checktype(L, 1, LUA_TFUNCTION); /* before settop: "got no value" */
  }
  lua_settop(L, 4);
  if (lua_isnoneornil(L, 2)) {
    lua_pushstring(L, s != NULL ? s : "=(load)");
    lua_replace(L, 2);
  }
  luaL_optstring(L, 3, "bt");
  if (lua_isnil(L, 3)) {
    lua_pushliteral(L, "bt");
    lua_replace(L, 3);
  }
  lua_pushcfunction(L, load_chunk);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 3);
  if (lua_pcall(L, 3, 1, 0) != LUA_OK) {
    luaL_pushfail(L);
    lua_insert(L, -2);
    return 2; /* nil and the message, as load returns them */
  }
  if (env != 0) { /* the first upvalue of a main chunk is its _ENV */
    lua_pushvalue(L, env);
    if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
  }
  return 1;
}

/* Calls the original function (upvalue 1) with this call's arguments and
** returns what it returns. The wrappers below check every argument first,
** so that an error names the function and the guest's line: raised from
** the original, called from C, it would read "bad argument #1 to '?'". */
static int call_original(lua_State *L)
{
  int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L);
}

/* Replaces t[name] by a C closure over its original value. */
static void wrap_field(lua_State *L, int t, const char *name, lua_CFunction f)
{
  lua_getfield(L, t, name);
  lua_pushcclosure(L, f, 1);
  lua_setfield(L, t, name);
}

/* collectgarbage stays Lua's own, every option included: the memory cap is
** the allocator's (limits.c), which counts every byte whatever the collector
** does, and Lua runs a full emergency collection before it reports a memory
** error, even with the collector stopped (lmem.c, tryagain). So a guest that
** stops, retunes or switches the collector meets the cap only with live data,
** as under the default tuning; collecting is not instructions, so the budget
** is untouched, and the time it costs is bounded by the deadline and the CPU
** limit. spec/worker/escape_spec.lua holds this to the cap. */
static void restrict_base(lua_State *L)
{
  lua_pushglobaltable(L);
  int g = lua_gettop(L);
  lua_pushnil(L);
  lua_setfield(L, g, "dofile");
  lua_pushnil(L);
  lua_setfield(L, g, "loadfile");
  lua_pushcfunction(L, guest_load);
  lua_setfield(L, g, "load");
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
  if (lua_isnone(L, 1)) {
    lua_pushinteger(L, (lua_Integer)worker_of(L)->init.seed);
  } else {
    luaL_checkinteger(L, 1);
    luaL_optinteger(L, 2, 0);
  }
  return call_original(L);
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
  worker_channel_lua(L);
  worker_host_open(L, w);
  worker_modules_open(L);
  worker_os_open(L);
}
