/*
** convert.c -- Lua values <-> msgpack, shared by the Lua module and the worker.
** Packing reads tables raw and never raises; a refusal names the path to the value.
** Pushing builds Lua values from decoded msgpack-c objects, bounded in depth.
*/
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "convert.h"

#define KEY_SHOW_MAX 40 /* bytes of an odd string key quoted in a message */

/* ------------------------------------------------------------ Lua -> msgpack */

/* One step from a table to the value being packed: the map key's stack slot,
** or (key_idx == 0) the position in an array. */
typedef struct path_step {
  int key_idx;
  lua_Integer slot;
} path_step;

typedef struct pack_state {
  lua_State *L;
  msgpack_packer *pk;
  const char *root;
  char *err;
  size_t errlen;
  int depth;                                   /* tables open on the path */
  const void *open[AIRLOCK_CONVERT_DEPTH_MAX]; /* those tables, for cycles */
  path_step path[AIRLOCK_CONVERT_DEPTH_MAX];   /* path[i]: key inside open[i] */
} pack_state;

static int pack_value(pack_state *ps, int idx);

/* Appends to the message without overrunning it; *at may pass errlen, which
** only means the message was cut. */
__attribute__((format(printf, 3, 4))) static void put(pack_state *ps, size_t *at, const char *fmt, ...)
{
  if (*at >= ps->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(ps->err + *at, ps->errlen - *at, fmt, ap);
  va_end(ap);
  if (n > 0) *at += (size_t)n;
}

static int is_identifier(const char *s, size_t len)
{
  if (len == 0 || (s[0] >= '0' && s[0] <= '9')) return 0;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return 0;
  }
  return 1;
}

/* ["odd key"]: quotes, backslashes and control bytes are escaped so a hostile
** key cannot forge the rest of the message; long keys are shortened. */
static void put_quoted_key(pack_state *ps, size_t *at, const char *s, size_t len)
{
  put(ps, at, "[\"");
  for (size_t i = 0; i < len && i < KEY_SHOW_MAX; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      put(ps, at, "\\%c", c);
    else if (c < 0x20 || c == 0x7f)
      put(ps, at, "\\%d", c);
    else
      put(ps, at, "%c", c);
  }
  put(ps, at, len > KEY_SHOW_MAX ? "...\"]" : "\"]");
}

/* Reads the key without lua_tolstring on numbers: converting a key in place
** would break the lua_next traversal that owns it. */
static void put_step(pack_state *ps, size_t *at, const path_step *st)
{
  lua_State *L = ps->L;
  if (st->key_idx == 0) {
    put(ps, at, "[%lld]", (long long)st->slot);
    return;
  }
  switch (lua_type(L, st->key_idx)) {
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L, st->key_idx, &len);
      if (is_identifier(s, len))
        put(ps, at, ".%s", s);
      else
        put_quoted_key(ps, at, s, len);
      break;
    }
    case LUA_TNUMBER:
      if (lua_isinteger(L, st->key_idx))
        put(ps, at, "[%lld]", (long long)lua_tointeger(L, st->key_idx));
      else
        put(ps, at, "[%.14g]", (double)lua_tonumber(L, st->key_idx));
      break;
    case LUA_TBOOLEAN: put(ps, at, lua_toboolean(L, st->key_idx) ? "[true]" : "[false]"); break;
    default: put(ps, at, "[?]"); break;
  }
}

/* Writes "<root><first nsteps of the path>: <reason>" and returns -1. */
__attribute__((format(printf, 3, 4))) static int fail(pack_state *ps, int nsteps, const char *fmt, ...)
{
  if (ps->err == NULL || ps->errlen == 0) return -1;
  size_t at = 0;
  put(ps, &at, "%s", ps->root);
  for (int i = 0; i < nsteps; i++) put_step(ps, &at, &ps->path[i]);
  put(ps, &at, ": ");
  if (at < ps->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + at, ps->errlen - at, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* msgpack-c reports a refusing writer (out of memory, or a size cap set by the
** caller) as a nonzero return; the path of the value that tipped it over says
** nothing useful, so only the root is named. */
static int packed(pack_state *ps, int rc)
{
  return rc == 0 ? 0 : fail(ps, 0, "too large to send");
}

static int pack_string(pack_state *ps, int idx)
{
  size_t len;
  const char *s = lua_tolstring(ps->L, idx, &len);
  if (len > UINT32_MAX) return fail(ps, ps->depth, "string longer than 4 GiB");
  if (packed(ps, msgpack_pack_str(ps->pk, len)) != 0) return -1;
  return packed(ps, msgpack_pack_str_body(ps->pk, s, len));
}

static int pack_number(pack_state *ps, int idx)
{
  if (lua_isinteger(ps->L, idx))
    return packed(ps, msgpack_pack_int64(ps->pk, (int64_t)lua_tointeger(ps->L, idx)));
  return packed(ps, msgpack_pack_double(ps->pk, (double)lua_tonumber(ps->L, idx)));
}

static int pack_key(pack_state *ps, int idx)
{
  switch (lua_type(ps->L, idx)) {
    case LUA_TSTRING: return pack_string(ps, idx);
    case LUA_TNUMBER: return pack_number(ps, idx);
    case LUA_TBOOLEAN:
      return packed(ps, lua_toboolean(ps->L, idx) ? msgpack_pack_true(ps->pk) : msgpack_pack_false(ps->pk));
    default:
      /* The path stops at the table: the key itself has no printable name. */
      return fail(ps, ps->depth - 1, "cannot send a %s as a table key",
                  lua_typename(ps->L, lua_type(ps->L, idx)));
  }
}

/* Counts the keys of the table at idx; *is_seq tells whether they are exactly
** 1..n with n >= 1. Distinct positive integer keys whose maximum equals their
** count can only be 1..n, so one pass suffices. */
static size_t count_keys(lua_State *L, int idx, int *is_seq)
{
  size_t n = 0;
  lua_Integer max = 0;
  int ints = 1;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    n++;
    if (ints && lua_isinteger(L, -2)) {
      lua_Integer k = lua_tointeger(L, -2);
      if (k < 1)
        ints = 0;
      else if (k > max)
        max = k;
    } else {
      ints = 0;
    }
    lua_pop(L, 1);
  }
  *is_seq = ints && n > 0 && (lua_Unsigned)max == n;
  return n;
}

static int pack_array(pack_state *ps, int idx, size_t n)
{
  lua_State *L = ps->L;
  if (packed(ps, msgpack_pack_array(ps->pk, n)) != 0) return -1;
  path_step *st = &ps->path[ps->depth - 1];
  for (size_t i = 1; i <= n; i++) {
    st->key_idx = 0;
    st->slot = (lua_Integer)i;
    lua_rawgeti(L, idx, (lua_Integer)i);
    int rc = pack_value(ps, lua_gettop(L));
    lua_pop(L, 1);
    if (rc != 0) return -1;
  }
  return 0;
}

static int pack_map(pack_state *ps, int idx, size_t n)
{
  lua_State *L = ps->L;
  if (packed(ps, msgpack_pack_map(ps->pk, n)) != 0) return -1;
  path_step *st = &ps->path[ps->depth - 1];
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int top = lua_gettop(L);
    st->key_idx = top - 1;
    if (pack_key(ps, top - 1) != 0 || pack_value(ps, top) != 0) {
      lua_pop(L, 2);
      return -1;
    }
    lua_pop(L, 1);
  }
  return 0;
}

static int pack_table(pack_state *ps, int idx)
{
  lua_State *L = ps->L;
  /* The path of a too-deep value is itself too long to read; the root says
  ** which value it was. */
  if (ps->depth == AIRLOCK_CONVERT_DEPTH_MAX)
    return fail(ps, 0, "nesting deeper than %d", AIRLOCK_CONVERT_DEPTH_MAX);
  const void *self = lua_topointer(L, idx);
  for (int i = 0; i < ps->depth; i++)
    if (ps->open[i] == self) return fail(ps, ps->depth, "cycle (table contains itself)");
  /* Each level holds a key and a value while it walks its table. */
  if (!lua_checkstack(L, 4)) return fail(ps, ps->depth, "out of Lua stack space");
  int is_seq;
  size_t n = count_keys(L, idx, &is_seq);
  if (n > UINT32_MAX) return fail(ps, ps->depth, "table with more than 2^32 entries");
  ps->open[ps->depth++] = self;
  int rc = is_seq ? pack_array(ps, idx, n) : pack_map(ps, idx, n);
  ps->depth--;
  return rc;
}

static int pack_value(pack_state *ps, int idx)
{
  lua_State *L = ps->L;
  int t = lua_type(L, idx);
  switch (t) {
    case LUA_TNIL: return packed(ps, msgpack_pack_nil(ps->pk));
    case LUA_TBOOLEAN:
      return packed(ps, lua_toboolean(L, idx) ? msgpack_pack_true(ps->pk) : msgpack_pack_false(ps->pk));
    case LUA_TNUMBER: return pack_number(ps, idx);
    case LUA_TSTRING: return pack_string(ps, idx);
    case LUA_TTABLE: return pack_table(ps, idx);
    default: return fail(ps, ps->depth, "cannot send a %s", lua_typename(L, t));
  }
}

/* Nothing here allocates Lua memory (lua_next, lua_rawgeti and lua_tolstring
** on strings do not), and lua_checkstack reports failure instead of raising,
** so packing never longjmps out. */
int airlock_lua_pack(lua_State *L, int idx, msgpack_packer *pk, const char *root, char *err, size_t errlen)
{
  pack_state ps;
  ps.L = L;
  ps.pk = pk;
  ps.root = root != NULL ? root : "value";
  ps.err = err;
  ps.errlen = errlen;
  ps.depth = 0;
  int top = lua_gettop(L);
  int rc = pack_value(&ps, lua_absindex(L, idx));
  lua_settop(L, top);
  return rc;
}

/* ------------------------------------------------------------ msgpack -> Lua */

/* Decoding errors carry no path: the object came from the trusted side, and
** its shape (not a location) is what is wrong. */
typedef struct push_state {
  lua_State *L;
  char *err;
  size_t errlen;
} push_state;

static int push_object(push_state *s, const msgpack_object *o, int depth);

__attribute__((format(printf, 2, 3))) static int push_fail(push_state *s, const char *fmt, ...)
{
  if (s->err != NULL && s->errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, s->errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int push_array(push_state *s, const msgpack_object_array *a, int depth)
{
  lua_State *L = s->L;
  lua_createtable(L, a->size > INT32_MAX ? INT32_MAX : (int)a->size, 0);
  for (uint32_t i = 0; i < a->size; i++) {
    if (push_object(s, &a->ptr[i], depth) != 0) {
      lua_pop(L, 1);
      return -1;
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 0;
}

/* Lua tables cannot hold nil or NaN keys; lua_rawset would raise. */
static int check_key(push_state *s)
{
  int t = lua_type(s->L, -1);
  if (t == LUA_TNIL) return push_fail(s, "map key is nil");
  if (t == LUA_TNUMBER && !lua_isinteger(s->L, -1) && isnan(lua_tonumber(s->L, -1)))
    return push_fail(s, "map key is NaN");
  return 0;
}

static int push_map(push_state *s, const msgpack_object_map *m, int depth)
{
  lua_State *L = s->L;
  lua_createtable(L, 0, m->size > INT32_MAX ? INT32_MAX : (int)m->size);
  for (uint32_t i = 0; i < m->size; i++) {
    if (push_object(s, &m->ptr[i].key, depth) != 0) {
      lua_pop(L, 1);
      return -1;
    }
    if (check_key(s) != 0 || push_object(s, &m->ptr[i].val, depth) != 0) {
      lua_pop(L, 2);
      return -1;
    }
    lua_rawset(L, -3);
  }
  return 0;
}

/* depth counts the containers already open around o. */
static int push_object(push_state *s, const msgpack_object *o, int depth)
{
  lua_State *L = s->L;
  /* A container leaves its table on the stack while it pushes a key and a
  ** value: three slots per level. */
  if (!lua_checkstack(L, 3)) return push_fail(s, "out of Lua stack space");
  switch (o->type) {
    case MSGPACK_OBJECT_NIL: lua_pushnil(L); return 0;
    case MSGPACK_OBJECT_BOOLEAN: lua_pushboolean(L, o->via.boolean); return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
      if (o->via.u64 <= (uint64_t)LUA_MAXINTEGER)
        lua_pushinteger(L, (lua_Integer)o->via.u64);
      else
        lua_pushnumber(L, (lua_Number)o->via.u64);
      return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: lua_pushinteger(L, (lua_Integer)o->via.i64); return 0;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: lua_pushnumber(L, (lua_Number)o->via.f64); return 0;
    case MSGPACK_OBJECT_STR: lua_pushlstring(L, o->via.str.ptr, o->via.str.size); return 0;
    case MSGPACK_OBJECT_BIN: lua_pushlstring(L, o->via.bin.ptr, o->via.bin.size); return 0;
    case MSGPACK_OBJECT_ARRAY:
    case MSGPACK_OBJECT_MAP:
      if (depth >= AIRLOCK_CONVERT_DEPTH_MAX)
        return push_fail(s, "nesting deeper than %d", AIRLOCK_CONVERT_DEPTH_MAX);
      return o->type == MSGPACK_OBJECT_ARRAY ? push_array(s, &o->via.array, depth + 1)
                                             : push_map(s, &o->via.map, depth + 1);
    case MSGPACK_OBJECT_EXT: return push_fail(s, "ext type %d is not supported", (int)o->via.ext.type);
    default: return push_fail(s, "unknown msgpack type %d", (int)o->type);
  }
}

/* lua_createtable, lua_pushlstring and lua_rawset allocate and so may raise a
** memory error (a longjmp). That is acceptable because this function holds no
** C resources across them; the caller must be a Lua C function or run under
** lua_pcall (the worker always is), never bare C code with no protection. */
int airlock_lua_push(lua_State *L, const msgpack_object *o, char *err, size_t errlen)
{
  push_state s = {L, err, errlen};
  return push_object(&s, o, 0);
}
