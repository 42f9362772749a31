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
#include "overlay_io.h"
#include "overlay_keep.h"
#include "overlay_restore.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <unistd.h>

#define LAYER_CLASS "airlock.overlay_layer"
#define OWN_INODES  ((lua_Integer)AIRLOCK_OVERLAY_OWN_INODES)

typedef struct {
  int fd;    /* the tmpfs's root */
  int mount; /* the overlay mount, held for its teardown to happen at close, off our path; or -1 */
} llayer;

static llayer *check_layer(lua_State *L)
{
  llayer *l = luaL_checkudata(L, 1, LAYER_CLASS);
  if (l->fd < 0) luaL_error(L, "overlay layer: closed");
  return l;
}

void airlock_l_push_overlay_layer(lua_State *L, int fd, int mount)
{
  llayer *l = lua_newuserdatauv(L, sizeof *l, 0);
  l->fd = fd;
  l->mount = mount;
  luaL_setmetatable(L, LAYER_CLASS);
}

/* A message of core/overlay_*.c without its "overlay: ", which
** airlock_l_fail puts back as the cause. */
static const char *bare(const char *msg)
{
  return strncmp(msg, "overlay: ", 9) == 0 ? msg + 9 : msg;
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

struct change_walk {
  lua_State *L;
  int upper; /* the layer's upper/ */
};

/* The SHA-256 of the regular file at path beneath upper (through no link), in
** hex, into hex[65]. Returns 0 or -errno. */
static int file_sha256(int upper, const char *path, char hex[65])
{
  int fd = airlock_overlay_open_beneath(upper, path, O_RDONLY);
  if (fd < 0) return -errno;
  airlock_overlay_sink sink = {.out = -1, .hash = 1};
  int rc = airlock_overlay_copy(fd, AIRLOCK_OVERLAY_TO_END, &sink);
  close(fd);
  if (rc == 0) memcpy(hex, sink.hex, sizeof sink.hex);
  return rc;
}

/* One change as a table appended to the list at the top of the stack; a
** regular file's with the SHA-256 of its content. */
static int push_change(const airlock_overlay_change *c, void *ud)
{
  struct change_walk *cw = ud;
  lua_State *L = cw->L;
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
  if (c->kind == AIRLOCK_CHANGE_CREATED || c->kind == AIRLOCK_CHANGE_MODIFIED) {
    char hex[65];
    int rc = file_sha256(cw->upper, c->path, hex);
    if (rc < 0) return rc;
    lua_pushstring(L, hex);
    lua_setfield(L, -2, "sha256");
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

/* layer:changes(workspace) -> { {path, kind, mode, size, target, sha256,
** links, opaque, replaces}... } in the order of the layer's directories (parents
** first), or nil, message, errno; or nil, message, "bound" when the files'
** lengths (a sparse file's whole) add up to more than the layer's size. As
** many as the layer's inodes at most. */
static int l_changes(lua_State *L)
{
  llayer *l = check_layer(L);
  const char *ws = luaL_checkstring(L, 2);
  int wfd = open(ws, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (wfd < 0) {
    int e = errno;
    return airlock_l_fail(L, "overlay", strerror(e), e);
  }
  char err[512] = "";
  struct change_walk cw = {L, openat(l->fd, "upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  lua_newtable(L);
  int rc = cw.upper < 0 ? -errno : airlock_overlay_changes(l->fd, wfd, push_change, &cw, err, sizeof err);
  close(wfd);
  if (cw.upper >= 0) close(cw.upper);
  if (rc == -EFBIG) { /* the files' lengths pass the layer's size: the caller names the bound */
    lua_pushnil(L);
    lua_pushfstring(L, "overlay: %s", bare(err));
    lua_pushliteral(L, "bound");
    return 3;
  }
  if (rc < 0)
    return airlock_l_fail(L, "overlay", err[0] ? bare(err) : "hash a changed file of the writable layer",
                          -rc);
  return 1;
}

/* layer:apply(workspace, paths) -> { {path, applied = true} | {path, refused =
** reason} | {path, error = message}... }: each path staged in the order given
** from what the layer holds (core/overlay_apply.c), the workspace's file
** system synced once, then each staged file renamed into place in the same
** order, then each directory given the times the program left it with (each
** file and link has its own already); or nil, message, errno when the
** workspace cannot be opened or synced (then nothing staged is placed). At
** most 1000000 paths. */
static int l_apply(lua_State *L)
{
  llayer *l = check_layer(L);
  const char *ws = luaL_checkstring(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 3);
  if (n > 1000000) return luaL_argerror(L, 3, "at most 1000000 paths");
  int wfd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (wfd < 0) {
    int e = errno;
    return airlock_l_fail(L, "overlay", strerror(e), e);
  }
  airlock_overlay_staged *st = lua_newuserdatauv(L, sizeof *st * (size_t)(n ? n : 1), 0);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, 3, i);
    const char *path = lua_tostring(L, -1);
    char err[512] = "";
    int rc = -EINVAL;
    st[i - 1].dirfd = -1;
    if (path) rc = airlock_overlay_stage(l->fd, wfd, path, &st[i - 1], err, sizeof err);
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
  int rc = airlock_overlay_sync(wfd);
  for (lua_Integer i = 1; i <= n; i++) {
    if (rc < 0) {
      airlock_overlay_unstage(&st[i - 1]);
      continue;
    }
    char err[512] = "";
    lua_rawgeti(L, -1, i);
    lua_getfield(L, -1, "path");
    if (airlock_overlay_place(&st[i - 1], lua_tostring(L, -1), err, sizeof err) < 0) {
      lua_pushnil(L);
      lua_setfield(L, -3, "applied");
      lua_pushstring(L, err);
      lua_setfield(L, -3, "error");
    }
    lua_pop(L, 2);
  }
  /* Directories last: placing what is beneath one sets its times. */
  for (lua_Integer i = 1; rc == 0 && i <= n; i++) {
    if (!st[i - 1].dir_times) continue;
    char err[512] = "";
    lua_rawgeti(L, -1, i);
    lua_getfield(L, -1, "path");
    if (airlock_overlay_dir_times(l->fd, wfd, lua_tostring(L, -1), err, sizeof err) < 0) {
      lua_pushnil(L);
      lua_setfield(L, -3, "applied");
      lua_pushstring(L, err);
      lua_setfield(L, -3, "error");
    }
    lua_pop(L, 2);
  }
  close(wfd);
  if (rc < 0) return airlock_l_fail(L, "overlay", "sync the workspace's file system (syncfs)", -rc);
  return 1;
}

static const char *const BEFORE_KIND[] = {"none", "file", "link", "dir", "other"};

/* layer:keep(workspace, session_dir, items, max_bytes) -> { {path, sha256,
** size, before = "none" | "file" | "link" | "dir" | "other", before_sha256,
** before_mode, before_size}... } in the items' order, each item { path, new
** = bool (keep the layer's regular file) }: the contents a committed set
** needs to be undone and done again, kept as the session's blobs
** (core/overlay_keep.c); or nil, message, "bound" when they would pass
** max_bytes (0: unbounded), or nil, message, errno. At most 1000000 items. */
static int l_keep(lua_State *L)
{
  llayer *l = check_layer(L);
  const char *ws = luaL_checkstring(L, 2);
  const char *dir = luaL_checkstring(L, 3);
  luaL_checktype(L, 4, LUA_TTABLE);
  lua_Integer max = luaL_checkinteger(L, 5);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 4);
  if (n > 1000000) return luaL_argerror(L, 4, "at most 1000000 items");
  if (max < 0) return luaL_argerror(L, 5, "a bound of 0 or more bytes");
  airlock_overlay_kept *items = lua_newuserdatauv(L, sizeof *items * (size_t)(n ? n : 1), 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, 4, i);
    luaL_argcheck(L, lua_istable(L, -1), 4, "items are tables");
    lua_getfield(L, -1, "path");
    items[i - 1].path = lua_tostring(L, -1);
    luaL_argcheck(L, items[i - 1].path != NULL, 4, "an item's path is a string");
    lua_getfield(L, -2, "new");
    items[i - 1].want_new = lua_toboolean(L, -1);
    lua_pop(L, 2); /* the path string stays referenced by the item table, held by the argument */
    lua_pop(L, 1);
  }
  int wfd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int sfd = wfd < 0 ? -1 : open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sfd < 0) {
    int e = errno;
    if (wfd >= 0) close(wfd);
    return airlock_l_fail(L, "ledger", wfd < 0 ? "open the workspace" : "open the session directory", e);
  }
  char err[512] = "";
  int rc = airlock_overlay_keep(l->fd, wfd, sfd, items, (size_t)n, (uint64_t)max, err, sizeof err);
  close(wfd);
  close(sfd);
  if (rc > 0) {
    lua_pushnil(L);
    lua_pushfstring(L, "ledger: %s", err);
    lua_pushliteral(L, "bound");
    return 3;
  }
  if (rc < 0) return airlock_l_fail(L, "overlay", bare(err), -rc);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    airlock_overlay_kept *it = &items[i - 1];
    lua_createtable(L, 0, 7);
    lua_pushstring(L, it->path);
    lua_setfield(L, -2, "path");
    if (it->sha256[0]) {
      lua_pushstring(L, it->sha256);
      lua_setfield(L, -2, "sha256");
      lua_pushinteger(L, (lua_Integer)it->size);
      lua_setfield(L, -2, "size");
    }
    lua_pushstring(L, BEFORE_KIND[it->before_kind]);
    lua_setfield(L, -2, "before");
    if (it->before_kind != AIRLOCK_BEFORE_NONE) {
      lua_pushinteger(L, (lua_Integer)it->before_mode);
      lua_setfield(L, -2, "before_mode");
    }
    if (it->before_sha256[0]) {
      lua_pushstring(L, it->before_sha256);
      lua_setfield(L, -2, "before_sha256");
      lua_pushinteger(L, (lua_Integer)it->before_size);
      lua_setfield(L, -2, "before_size");
    }
    lua_rawseti(L, -2, i);
  }
  return 1;
}

/* layer:close(): the tmpfs goes once nothing else holds it, and the overlay
** mount (which holds it) is let go in a helper (airlock_close_later), so the
** kernel frees both off our path. Idempotent. */
static int l_close(lua_State *L)
{
  llayer *l = luaL_checkudata(L, 1, LAYER_CLASS);
  if (l->fd >= 0) close(l->fd);
  l->fd = -1;
  airlock_close_later(l->mount);
  l->mount = -1;
  return 0;
}

#define LOCK_CLASS "airlock.overlay_lock"

typedef struct {
  int fd; /* the workspace directory, flocked */
} llock;

/* core.overlay_lock(workspace) -> a lock held until it is closed (or
** collected): flock(LOCK_EX | LOCK_NB) on the workspace directory itself, so
** that one overlaid run at a time reads and applies there; or nil, message,
** errno (EWOULDBLOCK: another run holds it). */
static int l_lock(lua_State *L)
{
  const char *ws = luaL_checkstring(L, 1);
  llock *k = lua_newuserdatauv(L, sizeof *k, 0);
  k->fd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (k->fd < 0) {
    int e = errno;
    return airlock_l_fail(L, "workspace", strerror(e), e);
  }
  luaL_setmetatable(L, LOCK_CLASS);
  if (flock(k->fd, LOCK_EX | LOCK_NB) < 0) {
    int e = errno;
    close(k->fd);
    k->fd = -1;
    return airlock_l_fail(L, "workspace", e == EWOULDBLOCK ? "another overlaid run holds it" : strerror(e),
                          e);
  }
  return 1;
}

static int l_unlock(lua_State *L)
{
  llock *k = luaL_checkudata(L, 1, LOCK_CLASS);
  if (k->fd >= 0) close(k->fd);
  k->fd = -1;
  return 0;
}

/* core.overlay_look(workspace, path) -> "none" | "file" | "link" | "other" | "dir",
** sha256 (a file's content or a link's text), mode; or nil, message, errno.
** Nothing is followed (core/overlay_restore.c). */
static int l_look(lua_State *L)
{
  const char *ws = luaL_checkstring(L, 1);
  const char *path = luaL_checkstring(L, 2);
  int wfd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (wfd < 0) {
    int e = errno;
    return airlock_l_fail(L, "workspace", "open the workspace", e);
  }
  int kind;
  char hex[65];
  unsigned mode;
  int rc = airlock_overlay_look(wfd, path, &kind, hex, &mode);
  close(wfd);
  if (rc < 0) return airlock_l_fail(L, "workspace", path, -rc);
  static const char *const KIND[] = {"none", "file", "link", "other", "dir"};
  lua_pushstring(L, KIND[kind]);
  if (hex[0])
    lua_pushstring(L, hex);
  else
    lua_pushnil(L);
  lua_pushinteger(L, (lua_Integer)mode);
  return 3;
}

/* core.overlay_restore(workspace, session_dir, items) -> true; or nil,
** message, "refused" (nothing written), or nil, message, errno. items: {
** {path, kind = "none" | "file" | "link" | "dir", sha256, mode, text (a link's, from the journal)}... }, at
*most
** 1000000, each path and hash checked by the caller (and again here). */
static int l_restore(lua_State *L)
{
  const char *ws = luaL_checkstring(L, 1);
  const char *dir = luaL_checkstring(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 3);
  if (n > 1000000) return luaL_argerror(L, 3, "at most 1000000 items");
  airlock_overlay_restore_item *items = lua_newuserdatauv(L, sizeof *items * (size_t)(n ? n : 1), 0);
  for (lua_Integer i = 1; i <= n; i++) {
    airlock_overlay_restore_item *it = &items[i - 1];
    lua_rawgeti(L, 3, i);
    luaL_argcheck(L, lua_istable(L, -1), 3, "items are tables");
    lua_getfield(L, -1, "path");
    it->path = lua_tostring(L, -1);
    lua_getfield(L, -2, "kind");
    const char *k = lua_tostring(L, -1);
    lua_getfield(L, -3, "sha256");
    it->sha256 = lua_tostring(L, -1);
    lua_getfield(L, -4, "mode");
    it->mode = (unsigned)lua_tointeger(L, -1) & 0777;
    lua_getfield(L, -5, "text");
    it->text = lua_tostring(L, -1);
    luaL_argcheck(L, it->path && k, 3, "an item has a path and a kind");
    it->kind = strcmp(k, "file") == 0   ? AIRLOCK_RESTORE_FILE
               : strcmp(k, "link") == 0 ? AIRLOCK_RESTORE_LINK
               : strcmp(k, "dir") == 0  ? AIRLOCK_RESTORE_DIR
               : strcmp(k, "none") == 0 ? AIRLOCK_RESTORE_NONE
                                        : -1;
    luaL_argcheck(L, it->kind >= 0, 3, "an item's kind is none, file, link or dir");
    int hexok = it->sha256 && strlen(it->sha256) == 64 && strspn(it->sha256, "0123456789abcdef") == 64;
    int blob = it->kind == AIRLOCK_RESTORE_FILE || it->kind == AIRLOCK_RESTORE_LINK;
    luaL_argcheck(L, !blob || hexok, 3, "a file's or link's sha256 is 64 hex digits");
    lua_pop(L, 5); /* the strings stay referenced by the item tables the argument holds */
  }
  int wfd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int sfd = wfd < 0 ? -1 : open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sfd < 0) {
    int e = errno;
    if (wfd >= 0) close(wfd);
    return airlock_l_fail(L, "ledger", wfd < 0 ? "open the workspace" : "open the session directory", e);
  }
  char err[512] = "";
  int rc = airlock_overlay_restore(wfd, sfd, items, (size_t)n, err, sizeof err);
  close(wfd);
  close(sfd);
  if (rc > 0) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    lua_pushliteral(L, "refused");
    return 3;
  }
  if (rc < 0) return airlock_l_fail(L, "ledger", strncmp(err, "ledger: ", 8) == 0 ? err + 8 : err, -rc);
  lua_pushboolean(L, 1);
  return 1;
}

void airlock_l_open_overlay(lua_State *L)
{
  lua_pushcfunction(L, l_look);
  lua_setfield(L, -2, "overlay_look");
  lua_pushcfunction(L, l_restore);
  lua_setfield(L, -2, "overlay_restore");
  static const luaL_Reg lock_methods[] = {{"close", l_unlock}, {NULL, NULL}};
  static const luaL_Reg lock_meta[] = {{"__gc", l_unlock}, {"__close", l_unlock}, {NULL, NULL}};
  airlock_l_class(L, LOCK_CLASS, lock_methods, lock_meta);
  lua_pushcfunction(L, l_lock);
  lua_setfield(L, -2, "overlay_lock");
  static const luaL_Reg methods[] = {{"usage", l_usage}, {"changes", l_changes}, {"apply", l_apply},
                                     {"keep", l_keep},   {"close", l_close},     {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_close}, {"__close", l_close}, {NULL, NULL}};
  airlock_l_class(L, LAYER_CLASS, methods, meta);
}
