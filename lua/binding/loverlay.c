/*
** loverlay.c -- an overlaid workspace's writable layer, as Lua holds it: the
** tmpfs the child handed over (airlock_child.overlay), owned by one userdata
** that closes it. layer:usage() says how full the kernel's bound is, measured
** by the kernel (fstatfs), never from anything the program wrote;
** layer:changes(workspace) reads its change set (core/overlay_changes.c).
*/
#define _GNU_SOURCE
#include "lbinding.h"
#include "overlay_apply.h"
#include "overlay_changes.h"

#include <errno.h>
#include <fcntl.h>
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

/* One change as a table appended to the list at the top of the stack. */
static int push_change(const airlock_overlay_change *c, void *ud)
{
  lua_State *L = ud;
  lua_createtable(L, 0, 8);
  lua_pushstring(L, c->path);
  lua_setfield(L, -2, "path");
  lua_pushstring(L, airlock_overlay_kind_name(c->kind));
  lua_setfield(L, -2, "kind");
  lua_pushinteger(L, (lua_Integer)(c->mode & 07777));
  lua_setfield(L, -2, "mode");
  if (c->kind == AIRLOCK_CHANGE_CREATED || c->kind == AIRLOCK_CHANGE_MODIFIED ||
      c->kind == AIRLOCK_CHANGE_SYMLINK) {
    lua_pushinteger(L, (lua_Integer)c->size);
    lua_setfield(L, -2, "size");
  }
  if (c->target) {
    lua_pushstring(L, c->target);
    lua_setfield(L, -2, "target");
  }
  if (c->nlink > 1 && c->kind != AIRLOCK_CHANGE_DIR && c->kind != AIRLOCK_CHANGE_DELETED) {
    lua_pushinteger(L, (lua_Integer)c->nlink);
    lua_setfield(L, -2, "links");
  }
  if (c->opaque) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "opaque");
  }
  if (c->replaces) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "replaces");
  }
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  return 0;
}

/* layer:changes(workspace) -> { {path, kind, mode, size, target, links,
** opaque, replaces}... } in the order of the layer's directories (parents
** first), or nil, message, errno. As many as the layer's inodes at most. */
static int l_changes(lua_State *L)
{
  llayer *l = check_layer(L);
  const char *ws = luaL_checkstring(L, 2);
  int wfd = open(ws, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (wfd < 0) {
    int e = errno;
    return airlock_l_fail(L, "overlay", strerror(e), e);
  }
  char err[512];
  lua_newtable(L);
  int rc = airlock_overlay_changes(l->fd, wfd, push_change, L, err, sizeof err);
  close(wfd);
  if (rc < 0) return airlock_l_fail(L, "overlay", err, -rc);
  return 1;
}

/* layer:apply(workspace, paths) -> { {path, applied = true} | {path, refused =
** reason} | {path, error = message}... }: each path applied in the order
** given, from what the layer holds (core/overlay_apply.c); or nil, message,
** errno when the workspace cannot be opened. */
static int l_apply(lua_State *L)
{
  llayer *l = check_layer(L);
  const char *ws = luaL_checkstring(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  int wfd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (wfd < 0) {
    int e = errno;
    return airlock_l_fail(L, "overlay", strerror(e), e);
  }
  lua_Integer n = (lua_Integer)lua_rawlen(L, 3);
  lua_createtable(L, (int)(n < 1000000 ? n : 0), 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, 3, i);
    const char *path = lua_tostring(L, -1);
    char err[512] = "";
    int rc = path ? airlock_overlay_apply(l->fd, wfd, path, err, sizeof err) : -EINVAL;
    lua_createtable(L, 0, 2);
    lua_pushstring(L, path ? path : "?");
    lua_setfield(L, -2, "path");
    if (rc == 0)
      lua_pushboolean(L, 1);
    else
      lua_pushstring(L, err[0] ? err : "overlay: apply: not a path");
    lua_setfield(L, -2, rc == 0 ? "applied" : rc > 0 ? "refused" : "error");
    lua_rawseti(L, -3, i);
    lua_pop(L, 1);
  }
  close(wfd);
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
  static const luaL_Reg methods[] = {
      {"usage", l_usage}, {"changes", l_changes}, {"apply", l_apply}, {"close", l_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_close}, {"__close", l_close}, {NULL, NULL}};
  airlock_l_class(L, LAYER_CLASS, methods, meta);
}
