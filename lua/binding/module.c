/*
** module.c -- luaopen_airlock: the C core table, the embedded Lua parts as
** package.preload entries, and where to find airlock-worker.
*/
#define _GNU_SOURCE /* dladdr */
#include "lbinding.h"
#include "embedded.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef AIRLOCK_LIBEXECDIR
#define AIRLOCK_LIBEXECDIR "/usr/local/libexec/airlock"
#endif

#if defined(__GNUC__)
#define AIRLOCK_EXPORT __attribute__((visibility("default")))
#else
#define AIRLOCK_EXPORT
#endif

AIRLOCK_EXPORT int luaopen_airlock(lua_State *L);

int airlock_l_fail(lua_State *L, const char *cause, const char *message, int err)
{
  char ebuf[32];
  const char *name = err > 0 ? airlock_errno_name(err, ebuf, sizeof ebuf) : NULL;
  lua_pushnil(L);
  /* The errno by name beside the text, unless the message already says it. */
  if (name != NULL && strstr(message, name) == NULL)
    lua_pushfstring(L, "%s: %s (%s)", cause, message, name);
  else
    lua_pushfstring(L, "%s: %s", cause, message);
  lua_pushinteger(L, err);
  return 3;
}

static int load_embedded(lua_State *L)
{
  const airlock_embedded *e = lua_touserdata(L, lua_upvalueindex(1));
  /* Bytecode made by tools/embed.lua from our own sources at build time. */
  if (luaL_loadbufferx(L, e->source, e->len, e->chunkname, "b") != LUA_OK) return lua_error(L);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

void airlock_install_preloads(lua_State *L, const airlock_embedded *files)
{
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  for (const airlock_embedded *e = files; e->name; e++) {
    lua_pushlightuserdata(L, (void *)e);
    lua_pushcclosure(L, load_embedded, 1);
    lua_setfield(L, -2, e->name);
  }
  lua_pop(L, 1);
}

/* Directory of the file holding this code: the module (.so) or the command. */
static int self_dir(char *buf, size_t len)
{
  Dl_info info;
  char path[PATH_MAX];
  const char *p = NULL;
  if (dladdr((void *)(uintptr_t)luaopen_airlock, &info) && info.dli_fname && strstr(info.dli_fname, ".so"))
    p = realpath(info.dli_fname, path);
  if (!p) {
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return -1;
    path[n] = 0;
    p = path;
  }
  const char *slash = strrchr(p, '/');
  if (!slash || (size_t)(slash - p) >= len) return -1;
  memcpy(buf, p, (size_t)(slash - p));
  buf[slash - p] = 0;
  return 0;
}

/* airlock.core.worker_path() -> the airlock-worker next to us: bin/ beside the
** command, ../bin/ from lib/airlock.so; installed (make install, any PREFIX):
** PREFIX/libexec/airlock/ from PREFIX/bin/airlock, PREFIX/lib/lua/5.4/airlock.so
** or PREFIX/lib/<triplet>/lua/5.4/airlock.so; in a luarocks tree, beside the
** module (TREE/lib/lua/5.4/, from TREE/bin/airlock too); else the compiled-in
** libexec copy. */
static int l_worker_path(lua_State *L)
{
  /* Found once per process: where this code lives does not change, and a
  ** command asks three times before its program starts. */
  static char found[PATH_MAX + 64];
  if (found[0]) {
    lua_pushstring(L, found);
    return 1;
  }
  char dir[PATH_MAX], cand[PATH_MAX + 64];
  if (self_dir(dir, sizeof dir) == 0) {
    static const char *const rel[] = {
        "/airlock-worker",
        "/../bin/airlock-worker",
        "/../libexec/airlock/airlock-worker",
        "/../../../libexec/airlock/airlock-worker",
        "/../../../../libexec/airlock/airlock-worker",
        "/../lib/lua/5.4/airlock-worker"}; /* a luarocks tree: beside the module */
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
      snprintf(cand, sizeof cand, "%s%s", dir, rel[i]);
      if (access(cand, X_OK) == 0) {
        char real[PATH_MAX];
        snprintf(found, sizeof found, "%s", realpath(cand, real) ? real : cand);
        lua_pushstring(L, found);
        return 1;
      }
    }
  }
  snprintf(cand, sizeof cand, "%s/airlock-worker", AIRLOCK_LIBEXECDIR);
  if (access(cand, X_OK) == 0) {
    snprintf(found, sizeof found, "%s", cand);
    lua_pushstring(L, found);
    return 1;
  }
  return airlock_l_fail(L, "worker",
                        "cannot find airlock-worker beside the module or in " AIRLOCK_LIBEXECDIR
                        "; set the policy's 'worker' field or AIRLOCK_WORKER",
                        ENOENT);
}

static int l_now_ms(lua_State *L)
{
  lua_pushnumber(L, airlock_now_ms());
  return 1;
}

/* core.layer_available(name) -> whether this kernel has the layer of the layer
** table (confine.h: "mdwe", ...). A function, not a value read when the module
** loads: a process confined by airlock.confine may load the module, and its
** filter need not allow what the question asks (prctl). */
static int l_layer_available(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1);
  const airlock_confine_layer *l = airlock_confine_layer_named(name);
  if (l == NULL) {
    AIRLOCK_L_NAMES(L, airlock_confine_layers, name, ", ");
    return luaL_error(L, "layer_available: '%s' is not a layer of the table (%s)", name, lua_tostring(L, -1));
  }
  lua_pushboolean(L, l->available == NULL || l->available() == 1);
  return 1;
}

/* core.isatty(fd) -> whether fd (0, 1, 2, ...) is a terminal. */
static int l_isatty(lua_State *L)
{
  lua_Integer fd = luaL_checkinteger(L, 1);
  luaL_argcheck(L, fd >= 0 && fd <= 1 << 20, 1, "not a file descriptor");
  lua_pushboolean(L, isatty((int)fd) == 1);
  return 1;
}

static int l_causes(lua_State *L)
{
  lua_createtable(L, AIRLOCK_CAUSE_COUNT_, 0);
  for (int c = 0; c < AIRLOCK_CAUSE_COUNT_; c++) {
    lua_pushstring(L, airlock_cause_name((airlock_cause)c));
    lua_rawseti(L, -2, c + 1);
  }
  return 1;
}

void airlock_l_push_names(lua_State *L, const void *table, size_t stride, size_t off, const char *sep)
{
  luaL_Buffer b;
  if (sep)
    luaL_buffinit(L, &b);
  else
    lua_newtable(L);
  lua_Integer i = 0;
  for (const char *e = table;; e += stride) {
    const char *name;
    memcpy(&name, e + off, sizeof name);
    if (name == NULL) break;
    if (sep) {
      if (i++ > 0) luaL_addstring(&b, sep);
      luaL_addstring(&b, name);
    } else {
      lua_pushstring(L, name);
      lua_rawseti(L, -2, ++i);
    }
  }
  if (sep) luaL_pushresult(&b);
}

const char *airlock_l_unknown_key(lua_State *L, int t, const char *const *keys)
{
  lua_pushnil(L);
  while (lua_next(L, t)) {
    lua_pop(L, 1);
    const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    size_t i = 0;
    while (k && keys[i] && strcmp(k, keys[i]) != 0) i++;
    if (!k || !keys[i]) return k ? k : luaL_tolstring(L, -1, NULL);
  }
  return NULL;
}

/* The names in C's tables, so Lua restates none of them, in order:
** core.rlimits ({"as", "cpu", ...}), core.namespaces ({"user", "pid", ...}),
** core.promises ({"stdio", "rpath", ...}), core.refuse_errnos ({"EPERM", ...}) and
** core.confine_layers ({"mdwe", ...}: the layer table's, confine.h). */
static void l_names(lua_State *L)
{
  AIRLOCK_L_NAMES(L, airlock_rlimit_kinds, name, NULL);
  lua_setfield(L, -2, "rlimits");
  AIRLOCK_L_NAMES(L, airlock_namespaces, name, NULL);
  lua_setfield(L, -2, "namespaces");
  AIRLOCK_L_NAMES(L, airlock_promises, word, NULL);
  lua_setfield(L, -2, "promises");
  AIRLOCK_L_NAMES(L, airlock_refuse_errnos, name, NULL);
  lua_setfield(L, -2, "refuse_errnos");
  AIRLOCK_L_NAMES(L, airlock_confine_layers, name, NULL);
  lua_setfield(L, -2, "confine_layers");
}

/* core.limits: C's defaults, which the policy schema's defaults name, so no
** number is restated in Lua: max_frame (limits.max_frame), capture
** (limits.capture, tool.limits.capture), output (limits.output), tmp_size
** (tool.limits.tmp_size), tmp_inodes (the private /tmp's inodes). */
static void l_limits(lua_State *L)
{
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, AIRLOCK_FRAME_MAX_DEFAULT);
  lua_setfield(L, -2, "max_frame");
  lua_pushinteger(L, AIRLOCK_CAPTURE_DEFAULT);
  lua_setfield(L, -2, "capture");
  lua_pushinteger(L, AIRLOCK_OUTPUT_DEFAULT);
  lua_setfield(L, -2, "output");
  lua_pushinteger(L, (lua_Integer)AIRLOCK_TMPFS_SIZE_DEFAULT);
  lua_setfield(L, -2, "tmp_size");
  lua_pushinteger(L, (lua_Integer)AIRLOCK_TMPFS_INODES_DEFAULT);
  lua_setfield(L, -2, "tmp_inodes");
}

int luaopen_airlock(lua_State *L)
{
  luaL_checkversion(L);
  airlock_install_preloads(L, airlock_embedded_files);
  lua_newtable(L);
  airlock_l_open_broker(L);
  airlock_l_open_ledger_proc(L);
  airlock_l_open_checkpoint(L);
  airlock_l_open_fs(L);
  airlock_l_open_pty(L);
  airlock_l_open_http(L);
  airlock_l_open_denial(L);
  airlock_l_open_overlay(L);
  lua_pushcfunction(L, l_worker_path);
  lua_setfield(L, -2, "worker_path");
  lua_pushcfunction(L, airlock_l_probe);
  lua_setfield(L, -2, "probe");
  lua_pushcfunction(L, airlock_l_pids_cgroup);
  lua_setfield(L, -2, "pids_cgroup");
  airlock_l_open_confine(L);
  lua_pushcfunction(L, airlock_l_seccomp_worker_program);
  lua_setfield(L, -2, "seccomp_worker_program");
  lua_pushcfunction(L, l_now_ms);
  lua_setfield(L, -2, "now_ms");
  lua_pushcfunction(L, l_isatty);
  lua_setfield(L, -2, "isatty");
  lua_pushcfunction(L, l_layer_available);
  lua_setfield(L, -2, "layer_available");
  airlock_l_open_call(L);
  l_causes(L);
  lua_setfield(L, -2, "causes");
  l_names(L);
  lua_pushinteger(L, AIRLOCK_PROTOCOL_VERSION);
  lua_setfield(L, -2, "protocol_version");
  l_limits(L);
  lua_setfield(L, -2, "limits");
  /* The pure-Lua layer builds the public module on top of the C core. */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "airlock.core");
  lua_pop(L, 2);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "airlock.init");
  lua_call(L, 1, 1);
  return 1;
}
