/*
** lconfine.c -- the Lua form of a confinement spec (airlock_confine_spec):
**
**   { landlock = { read = {paths}, write = {paths}, exec = {paths},
**                  bind = {ports}, connect = {ports}, scope = true },
**     seccomp = { promises = {"stdio", "rpath"} (or "stdio rpath"), syscalls = {"name", ...},
**                 mode = "allow" | "deny", refuse = "kill" | "errno" | "EPERM" | "ENOSYS" | ... },
**     no_new_privs = true }
**
** landlock = true is a ruleset with no path at all; landlock or seccomp absent
** (or false) is not applied. An unknown key is an error naming it, so a typo
** never weakens a confinement. airlock.core.confine(spec) applies it to the
** calling process; broker:_start{confine = spec} prepares it for the spawner.
*/
#include "lbinding.h"
#include "sha256.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PREPARED_MT "airlock.confine_prepared"

static const char *const TOP_KEYS[] = {"landlock", "seccomp",         "no_new_privs",
                                       "observe",  "observe_connect", NULL};
static const char *const LL_KEYS[] = {"read", "write", "exec", "bind", "connect", "scope", NULL};
static const char *const SC_KEYS[] = {"promises", "syscalls", "mode", "refuse", NULL};

/* Every key of table t must be one of keys. */
static void check_keys(lua_State *L, int t, const char *const *keys, const char *where)
{
  const char *k = airlock_l_unknown_key(L, t, keys);
  if (k) {
    airlock_l_push_names(L, keys, sizeof *keys, 0, ", ");
    luaL_error(L, "confine: unknown key '%s%s' (valid: %s)", where, k, lua_tostring(L, -1));
  }
}

/* t[field]: a list of strings (or one string), copied into a userdata left on
** the stack: a NULL-terminated array of pointers followed by the bytes. NULL
** when the field is absent. */
static const char *const *string_list(lua_State *L, int t, const char *field, const char *where)
{
  int type = lua_getfield(L, t, field);
  int v = lua_gettop(L);
  if (type == LUA_TNIL) {
    lua_pop(L, 1);
    return NULL;
  }
  lua_Integer n = 1;
  if (type == LUA_TTABLE)
    n = luaL_len(L, v);
  else if (type != LUA_TSTRING)
    luaL_error(L, "confine: %s%s must be a list of strings", where, field);
  if (n < 0 || n > 65536) luaL_error(L, "confine: %s%s holds too many entries", where, field);
  size_t bytes = 0;
  for (lua_Integer i = 1; i <= n; i++) {
    if (type == LUA_TTABLE && lua_geti(L, v, i) != LUA_TSTRING)
      luaL_error(L, "confine: %s%s[%d] must be a string", where, field, (int)i);
    size_t len;
    const char *s = lua_tolstring(L, type == LUA_TTABLE ? -1 : v, &len);
    if (strlen(s) != len) luaL_error(L, "confine: %s%s[%d] holds a NUL byte", where, field, (int)i);
    bytes += len + 1;
    if (type == LUA_TTABLE) lua_pop(L, 1);
  }
  size_t head = sizeof(char *) * ((size_t)n + 1);
  char **out = lua_newuserdatauv(L, head + bytes, 0);
  char *dst = (char *)out + head;
  for (lua_Integer i = 1; i <= n; i++) {
    if (type == LUA_TTABLE) lua_geti(L, v, i);
    size_t len;
    const char *s = lua_tolstring(L, type == LUA_TTABLE ? -1 : v, &len);
    memcpy(dst, s, len + 1);
    out[i - 1] = dst;
    dst += len + 1;
    if (type == LUA_TTABLE) lua_pop(L, 1);
  }
  out[n] = NULL;
  lua_remove(L, v); /* the copy stays on the stack, the list does not need to */
  return (const char *const *)out;
}

/* t[field]: a list of TCP ports, into a userdata left on the stack. */
static const uint16_t *port_list(lua_State *L, int t, const char *field, size_t *n_out)
{
  *n_out = 0;
  if (lua_getfield(L, t, field) == LUA_TNIL) {
    lua_pop(L, 1);
    return NULL;
  }
  int v = lua_gettop(L);
  if (!lua_istable(L, v)) luaL_error(L, "confine: landlock.%s must be a list of TCP ports", field);
  lua_Integer n = luaL_len(L, v);
  if (n < 0 || n > 65536) luaL_error(L, "confine: landlock.%s holds too many ports", field);
  uint16_t *out = lua_newuserdatauv(L, sizeof(uint16_t) * ((size_t)n + 1), 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, v, i);
    int isint;
    lua_Integer p = lua_tointegerx(L, -1, &isint);
    if (!isint || p < 0 || p > 65535)
      luaL_error(L, "confine: landlock.%s[%d] must be a port number from 0 to 65535", field, (int)i);
    out[i - 1] = (uint16_t)p;
    lua_pop(L, 1);
  }
  lua_remove(L, v);
  *n_out = (size_t)n;
  return out;
}

/* t.promises: a list of words, {"stdio", "rpath"}, as the planner gives it,
** read as it is; or, written by hand, one string of words ("stdio rpath"),
** split here. Left on the stack as string_list leaves its copy; NULL when absent. */
static const char *const *promise_list(lua_State *L, int t)
{
  int pt = lua_getfield(L, t, "promises");
  if (pt == LUA_TTABLE) {
    lua_pop(L, 1);
    return string_list(L, t, "promises", "seccomp.");
  }
  if (pt == LUA_TNIL) {
    lua_pop(L, 1);
    return NULL;
  }
  if (pt != LUA_TSTRING)
    luaL_error(L, "confine: seccomp.promises must be a list of words or a string of them");
  int v = lua_gettop(L);
  lua_newtable(L);
  const char *w = lua_tostring(L, v);
  lua_Integer n = 0;
  while (*w != '\0') {
    size_t len = strcspn(w, " \t,");
    if (len > 0) {
      if (++n > 256) luaL_error(L, "confine: seccomp.promises holds too many words");
      lua_pushlstring(L, w, len);
      lua_rawseti(L, -2, n);
    }
    w += len;
    w += strspn(w, " \t,");
  }
  lua_newtable(L); /* {promises = the words}, for string_list to read */
  lua_insert(L, -2);
  lua_setfield(L, -2, "promises");
  const char *const *list = string_list(L, lua_gettop(L), "promises", "seccomp.");
  lua_remove(L, -2); /* the wrapper table */
  lua_remove(L, v);  /* the string: the list holds copies */
  return list;
}

static int opt_bool(lua_State *L, int t, const char *field, int def, const char *where)
{
  int type = lua_getfield(L, t, field);
  int v = def;
  if (type == LUA_TBOOLEAN)
    v = lua_toboolean(L, -1);
  else if (type != LUA_TNIL)
    luaL_error(L, "confine: %s%s must be true or false", where, field);
  lua_pop(L, 1);
  return v;
}

/* Parses the spec table at idx into *s. Everything s points to is left on the
** stack above the caller's top: lua_settop back once s is no longer needed. */
static void parse_spec(lua_State *L, int idx, airlock_confine_spec *s)
{
  idx = lua_absindex(L, idx);
  luaL_checktype(L, idx, LUA_TTABLE);
  memset(s, 0, sizeof *s);
  check_keys(L, idx, TOP_KEYS, "");

  int type = lua_getfield(L, idx, "landlock");
  if (type == LUA_TTABLE) {
    int t = lua_gettop(L);
    check_keys(L, t, LL_KEYS, "landlock.");
    s->landlock = 1;
    s->fs_read = string_list(L, t, "read", "landlock.");
    s->fs_write = string_list(L, t, "write", "landlock.");
    s->fs_exec = string_list(L, t, "exec", "landlock.");
    s->tcp_bind = port_list(L, t, "bind", &s->n_tcp_bind);
    s->tcp_connect = port_list(L, t, "connect", &s->n_tcp_connect);
    s->no_scope = !opt_bool(L, t, "scope", 1, "landlock.");
  } else if (type == LUA_TBOOLEAN) {
    s->landlock = lua_toboolean(L, -1); /* true: no path, no port */
  } else if (type != LUA_TNIL) {
    luaL_error(L, "confine: landlock must be a table {read = ..., write = ...} or a boolean");
  }

  type = lua_getfield(L, idx, "seccomp");
  if (type == LUA_TTABLE) {
    int t = lua_gettop(L);
    check_keys(L, t, SC_KEYS, "seccomp.");
    s->seccomp = 1;
    s->promises = promise_list(L, t);
    s->syscalls = string_list(L, t, "syscalls", "seccomp.");
    if (lua_getfield(L, t, "mode") != LUA_TNIL) {
      const char *m = lua_tostring(L, -1);
      if (m && strcmp(m, "deny") == 0)
        s->seccomp_deny = 1;
      else if (!m || strcmp(m, "allow") != 0)
        luaL_error(L, "confine: seccomp.mode must be \"allow\" or \"deny\"");
    }
    lua_pop(L, 1);
    int rt = lua_getfield(L, t, "refuse");
    if (rt == LUA_TNUMBER) {
      int isint;
      lua_Integer e = lua_tointegerx(L, -1, &isint);
      if (!isint || e < 1 || e > 4095)
        luaL_error(L, "confine: seccomp.refuse as a number must be an errno from 1 to 4095");
      s->refuse_errno = (int)e;
    } else if (rt == LUA_TSTRING) {
      const char *w = lua_tostring(L, -1);
      if (strcmp(w, "errno") == 0) {
        s->refuse_errno = AIRLOCK_REFUSE_CHOSEN;
      } else if (strcmp(w, "kill") != 0) {
        const airlock_errno_word *x = airlock_refuse_errnos;
        while (x->name && strcmp(w, x->name) != 0) x++;
        if (x->name) {
          s->refuse_errno = x->err;
        } else {
          AIRLOCK_L_NAMES(L, airlock_refuse_errnos, name, ", ");
          luaL_error(L, "confine: seccomp.refuse must be \"kill\", \"errno\" or an errno name (%s), got '%s'",
                     lua_tostring(L, -1), w);
        }
      }
    } else if (rt != LUA_TNIL) {
      luaL_error(L, "confine: seccomp.refuse must be \"kill\", \"errno\" or an errno name");
    }
    lua_pop(L, 1);
  } else if (type != LUA_TNIL && !(type == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
    luaL_error(L, "confine: seccomp must be a table {promises = ..., syscalls = ..., mode = ...}");
  }
  s->no_new_privs = opt_bool(L, idx, "no_new_privs", 0, "");
  s->observe = opt_bool(L, idx, "observe", 0, "");
  /* the egress proxy's port on 127.0.0.1: direct connects elsewhere recorded */
  lua_getfield(L, idx, "observe_connect");
  if (!lua_isnil(L, -1)) {
    int isnum = 0;
    lua_Integer port = lua_tointegerx(L, -1, &isnum);
    if (!isnum || port < 1 || port > 65535)
      luaL_error(L, "confine: observe_connect must be the proxy's port (an integer from 1 to 65535)");
    s->observe_connect = (int)port;
  }
  lua_pop(L, 1);
}

static void push_layer(lua_State *L, const airlock_layer *l)
{
  lua_pushfstring(L, "%s: %s", airlock_layer_status_name(l->status), l->detail);
  lua_setfield(L, -2, l->name);
}

/* airlock.core.confine(spec) -> { landlock = "applied: ...", seccomp = "...",
** no_new_privs = "applied: set" (when asked) }, or nil, message, errno. */
static int l_confine(lua_State *L)
{
  int top = lua_gettop(L);
  airlock_confine_spec s;
  parse_spec(L, 1, &s);
  /* Observed calls wait for a listener, which only a spawned run has (its
  ** broker): here they would fail, the caller none the wiser. */
  if (s.observe || s.observe_connect)
    return luaL_error(L,
                      "confine: %s needs the listener of a spawned run (airlock.exec); this process has none",
                      s.observe ? "observe" : "observe_connect");
  /* OpenSSL is loaded on first use (core/sha256.h): load it now, while
  ** Landlock still lets this process read it, so that the policy digest of
  ** every later run still works. Failing here is not fatal: a digest says why. */
  (void)airlock_sha256_load(NULL, 0);
  airlock_layer layers[2];
  int rc = airlock_confine_apply(&s, layers);
  lua_settop(L, top);
  if (rc != 0) {
    const airlock_layer *bad = layers[0].status == AIRLOCK_LAYER_FAILED ? &layers[0] : &layers[1];
    lua_pushnil(L);
    lua_pushfstring(L, "confine: %s", bad->detail);
    lua_pushinteger(L, -rc);
    return 3;
  }
  lua_createtable(L, 0, 3);
  push_layer(L, &layers[0]);
  push_layer(L, &layers[1]);
  if (s.no_new_privs) {
    lua_pushliteral(L, "applied: set");
    lua_setfield(L, -2, "no_new_privs");
  }
  return 1;
}

static int prepared_gc(lua_State *L)
{
  airlock_confine_prepared *p = luaL_checkudata(L, 1, PREPARED_MT);
  airlock_confine_prepared_free(p);
  return 0;
}

int airlock_l_confine_prepare(lua_State *L, int idx, airlock_confine_prepared **out, char *err, size_t errlen)
{
  idx = lua_absindex(L, idx);
  airlock_confine_prepared *p = lua_newuserdatauv(L, sizeof *p, 0);
  memset(p, 0, sizeof *p);
  p->ruleset_fd = -1;
  luaL_setmetatable(L, PREPARED_MT);
  int top = lua_gettop(L);
  airlock_confine_spec s;
  parse_spec(L, idx, &s);
  int rc = airlock_confine_prepare(&s, p, err, errlen);
  lua_settop(L, top);
  *out = p;
  return rc;
}

/* core.seccomp_stock() -> { usable = N, hits = N }, or nil, message: the
** seccomp programs compiled when airlock was built that this process may use,
** each compiled again here and found the same byte for byte (usable), and
** how many prepared confinements took one so far (hits). */
static int l_seccomp_stock(lua_State *L)
{
  unsigned long usable, hits;
  char err[256];
  int rc = airlock_seccomp_stock_check(&usable, &hits, err, sizeof err);
  if (rc < 0) return airlock_l_fail(L, "seccomp", err, -rc);
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, (lua_Integer)usable);
  lua_setfield(L, -2, "usable");
  lua_pushinteger(L, (lua_Integer)hits);
  lua_setfield(L, -2, "hits");
  return 1;
}

void airlock_l_open_confine(lua_State *L)
{
  static const luaL_Reg meta[] = {{"__gc", prepared_gc}, {NULL, NULL}};
  airlock_l_class(L, PREPARED_MT, NULL, meta);
  lua_pushcfunction(L, l_confine);
  lua_setfield(L, -2, "confine");
  lua_pushcfunction(L, l_seccomp_stock);
  lua_setfield(L, -2, "seccomp_stock");
}
