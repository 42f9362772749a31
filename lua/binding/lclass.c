/*
** lclass.c -- a class of userdata: the one metatable every object of it
** shares, registered under its name.
*/
#include "lbinding.h"

void airlock_l_class(lua_State *L, const char *name, const luaL_Reg *methods, const luaL_Reg *meta)
{
  luaL_newmetatable(L, name); /* sets __name */
  if (methods != NULL) {
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
  }
  if (meta != NULL) luaL_setfuncs(L, meta, 0);
  lua_pop(L, 1);
}
