/*
** ldenial.c -- a denial: what a handler raises to refuse a call on the
** policy's grounds. core.deny(reason) raises a table {reason = text} with the
** metatable airlock.denial; the broker reads the type (airlock_l_denial_reason),
** never the text, and fails the call with code "denied" and the message
** "denied: <reason>", which is also what tostring gives.
*/
#include "lbinding.h"

#include <string.h>

#define DENIAL_MT "airlock.denial"

const char *airlock_l_denial_reason(lua_State *L, int idx)
{
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TTABLE || !lua_getmetatable(L, idx)) return NULL;
  luaL_getmetatable(L, DENIAL_MT);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  if (!same) return NULL;
  lua_pushliteral(L, "reason");
  lua_rawget(L, idx);
  /* The string stays referenced by the table at idx, which the caller holds. */
  const char *reason = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "refused by the policy";
  lua_pop(L, 1);
  return reason;
}

/* core.deny(reason = "refused by the policy"): raises a denial. */
static int l_deny(lua_State *L)
{
  const char *reason = luaL_optstring(L, 1, "refused by the policy");
  lua_createtable(L, 0, 1);
  lua_pushstring(L, reason);
  lua_setfield(L, -2, "reason");
  luaL_setmetatable(L, DENIAL_MT);
  return lua_error(L);
}

/* core.denial(v) -> v's reason when v is a denial, else nil. */
static int l_denial(lua_State *L)
{
  const char *reason = airlock_l_denial_reason(L, 1);
  if (reason)
    lua_pushstring(L, reason);
  else
    lua_pushnil(L);
  return 1;
}

static int l_denial_tostring(lua_State *L)
{
  const char *reason = airlock_l_denial_reason(L, 1);
  lua_pushfstring(L, "denied: %s", reason ? reason : "refused by the policy");
  return 1;
}

void airlock_l_open_denial(lua_State *L)
{
  if (luaL_newmetatable(L, DENIAL_MT)) {
    lua_pushcfunction(L, l_denial_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_deny);
  lua_setfield(L, -2, "deny");
  lua_pushcfunction(L, l_denial);
  lua_setfield(L, -2, "denial");
}
