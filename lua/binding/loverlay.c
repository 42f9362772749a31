/*
** loverlay.c -- an overlaid workspace's writable layer, as Lua holds it: the
** tmpfs the child handed over (airlock_child.overlay), owned by one userdata
** that closes it. layer:usage() says how full the kernel's bound is, measured
** by the kernel (fstatfs), never from anything the program wrote.
*/
#include "lbinding.h"

#include <errno.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#define LAYER_CLASS "airlock.overlay_layer"
#define OWN_INODES  ((lua_Integer)AIRLOCK_OVERLAY_OWN_INODES)

typedef struct {
  int fd;
} llayer;

static llayer *check_layer(lua_State *L)
{
  llayer *l = luaL_checkudata(L, 1, LAYER_CLASS);
  if (l->fd < 0) luaL_error(L, "overlay layer: closed");
  return l;
}

void airlock_l_push_overlay_layer(lua_State *L, int fd)
{
  llayer *l = lua_newuserdatauv(L, sizeof *l, 0);
  l->fd = fd;
  luaL_setmetatable(L, LAYER_CLASS);
}

/* layer:usage() -> { bytes_used, bytes_max, files_used, files_max }, or nil,
** message, errno. */
static int l_usage(lua_State *L)
{
  llayer *l = check_layer(L);
  struct statfs sf;
  if (fstatfs(l->fd, &sf) < 0) {
    int e = errno;
    return airlock_l_fail(L, "overlay", strerror(e), e);
  }
  lua_Integer files_max = (lua_Integer)sf.f_files - OWN_INODES;
  lua_Integer files_used = (lua_Integer)(sf.f_files - sf.f_ffree) - OWN_INODES;
  lua_createtable(L, 0, 4);
  lua_Integer bsize = (lua_Integer)sf.f_bsize;
  lua_pushinteger(L, (lua_Integer)(sf.f_blocks - sf.f_bfree) * bsize);
  lua_setfield(L, -2, "bytes_used");
  lua_pushinteger(L, (lua_Integer)sf.f_blocks * bsize);
  lua_setfield(L, -2, "bytes_max");
  lua_pushinteger(L, files_used < 0 ? 0 : files_used);
  lua_setfield(L, -2, "files_used");
  lua_pushinteger(L, files_max < 0 ? 0 : files_max);
  lua_setfield(L, -2, "files_max");
  return 1;
}

/* layer:close(): the tmpfs goes once nothing else holds it. Idempotent. */
static int l_close(lua_State *L)
{
  llayer *l = luaL_checkudata(L, 1, LAYER_CLASS);
  if (l->fd >= 0) close(l->fd);
  l->fd = -1;
  return 0;
}

void airlock_l_open_overlay(lua_State *L)
{
  static const luaL_Reg methods[] = {{"usage", l_usage}, {"close", l_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_close}, {"__close", l_close}, {NULL, NULL}};
  airlock_l_class(L, LAYER_CLASS, methods, meta);
}
