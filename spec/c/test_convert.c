/*
** test_convert.c -- C tests for lua/convert.c: round trips, refusals and the
** messages that name a path, depth and cycle limits, stack balance after errors.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "convert.h"
#include "check.h"

/* Deep equality that also tells integers from floats. */
static const char *EQUAL_LUA =
    "local function eq(a, b)\n"
    "  if type(a) ~= type(b) then return false end\n"
    "  if type(a) == 'number' then\n"
    "    return math.type(a) == math.type(b) and (a == b or (a ~= a and b ~= b))\n"
    "  end\n"
    "  if type(a) ~= 'table' then return a == b end\n"
    "  for k, v in next, a do if not eq(v, rawget(b, k)) then return false end end\n"
    "  for k in next, b do if rawget(a, k) == nil then return false end end\n"
    "  return true\n"
    "end\n"
    "return eq\n";

/* Runs a chunk that returns one value and leaves it on the stack. */
static void eval(lua_State *L, const char *code)
{
  if (luaL_dostring(L, code) != LUA_OK) {
    fprintf(stderr, "bad test chunk: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    lua_pushnil(L);
  }
}

/* Packs the value at the top, returning the packer's result; sb holds bytes. */
static int pack_top(lua_State *L, msgpack_sbuffer *sb, const char *root, char *err, size_t errlen)
{
  msgpack_packer pk;
  msgpack_sbuffer_clear(sb);
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  return airlock_lua_pack(L, -1, &pk, root, err, errlen);
}

/* Packs the result of code, unpacks it, pushes it back and compares it with
** the original; expect_type is the msgpack type of the encoded top object. */
static void round_trip(lua_State *L, const char *code, msgpack_object_type expect_type)
{
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  char err[256] = "";
  int top = lua_gettop(L);
  eval(L, code);
  int rc = pack_top(L, &sb, "value", err, sizeof err);
  CHECK_MSG(rc == 0, code);
  CHECK_MSG(lua_gettop(L) == top + 1, "pack leaves the stack as it was");
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  int ur = msgpack_unpack_next(&u, sb.data, sb.size, &off);
  CHECK_MSG(ur == MSGPACK_UNPACK_SUCCESS && off == sb.size, "packed bytes decode");
  if (ur == MSGPACK_UNPACK_SUCCESS) {
    CHECK_MSG(u.data.type == expect_type, code);
    rc = airlock_lua_push(L, &u.data, err, sizeof err);
    CHECK_MSG(rc == 0, err);
    if (rc == 0) {
      eval(L, EQUAL_LUA);
      lua_insert(L, -3);
      lua_call(L, 2, 1);
      CHECK_MSG(lua_toboolean(L, -1), code);
    }
  }
  lua_settop(L, top);
  msgpack_unpacked_destroy(&u);
  msgpack_sbuffer_destroy(&sb);
}

/* Packs the result of code and expects exactly the message want. */
static void pack_fails(lua_State *L, const char *code, const char *root, const char *want)
{
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  char err[256] = "";
  int top = lua_gettop(L);
  eval(L, code);
  int rc = pack_top(L, &sb, root, err, sizeof err);
  CHECK_MSG(rc == -1, code);
  if (strcmp(err, want) != 0) fprintf(stderr, "  got  '%s'\n  want '%s'\n", err, want);
  CHECK_MSG(strcmp(err, want) == 0, want);
  CHECK_MSG(lua_gettop(L) == top + 1, "stack balanced after a pack error");
  lua_settop(L, top);
  msgpack_sbuffer_destroy(&sb);
}

static void test_round_trips(lua_State *L)
{
  round_trip(L, "return nil", MSGPACK_OBJECT_NIL);
  round_trip(L, "return true", MSGPACK_OBJECT_BOOLEAN);
  round_trip(L, "return false", MSGPACK_OBJECT_BOOLEAN);
  round_trip(L, "return 42", MSGPACK_OBJECT_POSITIVE_INTEGER);
  round_trip(L, "return -7", MSGPACK_OBJECT_NEGATIVE_INTEGER);
  round_trip(L, "return math.maxinteger", MSGPACK_OBJECT_POSITIVE_INTEGER);
  round_trip(L, "return math.mininteger", MSGPACK_OBJECT_NEGATIVE_INTEGER);
  round_trip(L, "return 1.5", MSGPACK_OBJECT_FLOAT64);
  round_trip(L, "return 3.0", MSGPACK_OBJECT_FLOAT64);
  round_trip(L, "return 0/0", MSGPACK_OBJECT_FLOAT64);
  round_trip(L, "return 1/0", MSGPACK_OBJECT_FLOAT64);
  round_trip(L, "return ''", MSGPACK_OBJECT_STR);
  round_trip(L, "return 'bin\\0ary\\255'", MSGPACK_OBJECT_STR);
  round_trip(L, "return {1, 2, 3}", MSGPACK_OBJECT_ARRAY);
  round_trip(L, "return {'a', {true, false}, {x = 1}}", MSGPACK_OBJECT_ARRAY);
  round_trip(L, "return {a = 1, b = {c = {1, 2, {d = 'x'}}}}", MSGPACK_OBJECT_MAP);
  round_trip(L, "return {[1] = 1, [3] = 3}", MSGPACK_OBJECT_MAP);
  round_trip(L, "return {[0] = 'zero', 'one'}", MSGPACK_OBJECT_MAP);
  round_trip(L, "return {[-1] = 1}", MSGPACK_OBJECT_MAP);
  round_trip(L, "return {[1.5] = 2, [true] = 'yes', [false] = 'no'}", MSGPACK_OBJECT_MAP);
  round_trip(L, "return {1, 2, n = 2}", MSGPACK_OBJECT_MAP);
  round_trip(L, "return {}", MSGPACK_OBJECT_MAP);
  round_trip(L, "local s = {1}; return {s, s, {s}}", MSGPACK_OBJECT_ARRAY);
  round_trip(L,
             "return setmetatable({1}, {__index = function() error('raw!') end,"
             " __pairs = function() error('raw!') end})",
             MSGPACK_OBJECT_ARRAY);
}

static void test_pack_errors(lua_State *L)
{
  pack_fails(L, "return {items = {1, 2, print}}", "args", "args.items[3]: cannot send a function");
  pack_fails(L, "return print", "value", "value: cannot send a function");
  pack_fails(L, "return {['odd key'] = {coroutine.create(print)}}", "args",
             "args[\"odd key\"][1]: cannot send a thread");
  pack_fails(L, "return {x = {[7] = io.stdout}}", "args", "args.x[7]: cannot send a userdata");
  pack_fails(L, "return {[2.5] = print}", "v", "v[2.5]: cannot send a function");
  pack_fails(L, "return {[true] = print}", "v", "v[true]: cannot send a function");
  pack_fails(L, "return {['a\"b\\n'] = print}", "v", "v[\"a\\\"b\\10\"]: cannot send a function");
  pack_fails(L, "return {_ok9 = print}", "v", "v._ok9: cannot send a function");
  pack_fails(L, "return {['9lives'] = print}", "v", "v[\"9lives\"]: cannot send a function");
  pack_fails(L, "return {t = {[{}] = 1}}", "v", "v.t: cannot send a table as a table key");
  pack_fails(L, "local t = {a = {b = {}}}; t.a.b = t; return t", "input",
             "input.a.b: cycle (table contains itself)");
  pack_fails(L, "local t = {}; t[1] = t; return t", "value", "value[1]: cycle (table contains itself)");
  pack_fails(L, "return {f = print}", NULL, "value.f: cannot send a function");
}

/* A chain of n tables, each the only element of the one before. */
static void push_chain_code(char *buf, size_t len, int n)
{
  snprintf(buf, len, "local t = {} for i = 2, %d do t = {t} end return t", n);
}

static void test_depth(lua_State *L)
{
  char code[128];
  push_chain_code(code, sizeof code, AIRLOCK_CONVERT_DEPTH_MAX);
  round_trip(L, code, MSGPACK_OBJECT_ARRAY);
  char want[64];
  snprintf(want, sizeof want, "value: nesting deeper than %d", AIRLOCK_CONVERT_DEPTH_MAX);
  push_chain_code(code, sizeof code, AIRLOCK_CONVERT_DEPTH_MAX + 1);
  pack_fails(L, code, "value", want);
}

static void test_long_path_is_cut(lua_State *L)
{
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  char err[16];
  memset(err, 'x', sizeof err);
  eval(L, "return {aaaaaaaaaaaaaaaaaaaaaaaaaaaa = {bbbbbbbbbbbbbbbbbbbbbb = print}}");
  int rc = pack_top(L, &sb, "value", err, sizeof err);
  CHECK_MSG(rc == -1, "long path refused");
  CHECK_MSG(memchr(err, '\0', sizeof err) != NULL, "message is cut and terminated");
  CHECK_MSG(strncmp(err, "value.aaaaaaaaa", sizeof err - 1) == 0, "cut message keeps its start");
  rc = pack_top(L, &sb, "value", NULL, 0);
  CHECK_MSG(rc == -1, "refused without a message buffer");
  lua_pop(L, 1);
  msgpack_sbuffer_destroy(&sb);
}

/* idx may be relative and below other values; the result must not depend on
** what sits above it. */
static void test_relative_index(lua_State *L)
{
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  char err[64] = "";
  eval(L, "return {7}");
  lua_pushcfunction(L, luaopen_base); /* unsendable, and above the value */
  int rc = airlock_lua_pack(L, -2, &pk, "value", err, sizeof err);
  CHECK_MSG(rc == 0 && sb.size == 2 && (uint8_t)sb.data[0] == 0x91 && sb.data[1] == 7,
            "packs the value at a relative index");
  lua_pop(L, 2);
  msgpack_sbuffer_destroy(&sb);
}

static int refuse_after(void *data, const char *buf, size_t len)
{
  (void)buf;
  size_t *room = data;
  if (len > *room) return -1;
  *room -= len;
  return 0;
}

static void test_writer_refusal(lua_State *L)
{
  size_t room = 8;
  msgpack_packer pk;
  msgpack_packer_init(&pk, &room, refuse_after);
  char err[128] = "";
  int top = lua_gettop(L);
  eval(L, "return {a = {b = string.rep('x', 100)}}");
  int rc = airlock_lua_pack(L, -1, &pk, "args", err, sizeof err);
  CHECK_MSG(rc == -1, "a refusing writer fails the pack");
  CHECK_MSG(strcmp(err, "args: too large to send") == 0, err);
  CHECK_MSG(lua_gettop(L) == top + 1, "stack balanced after a writer refusal");
  lua_settop(L, top);
}

/* Pushes o and expects the message want with the stack unchanged. */
static void push_fails(lua_State *L, const msgpack_object *o, const char *want)
{
  char err[128] = "";
  int top = lua_gettop(L);
  int rc = airlock_lua_push(L, o, err, sizeof err);
  CHECK_MSG(rc == -1, want);
  if (strcmp(err, want) != 0) fprintf(stderr, "  got  '%s'\n  want '%s'\n", err, want);
  CHECK_MSG(strcmp(err, want) == 0, want);
  CHECK_MSG(lua_gettop(L) == top, "stack balanced after a push error");
}

/* Unpacks the bytes in sb into u (which the caller destroys). */
static const msgpack_object *unpack(msgpack_sbuffer *sb, msgpack_unpacked *u)
{
  size_t off = 0;
  msgpack_unpacked_init(u);
  if (msgpack_unpack_next(u, sb->data, sb->size, &off) != MSGPACK_UNPACK_SUCCESS) return NULL;
  return &u->data;
}

static void test_push_scalars(lua_State *L)
{
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_unpacked u;
  char err[128];

  msgpack_pack_bin(&pk, 3);
  msgpack_pack_bin_body(&pk, "a\0b", 3);
  const msgpack_object *o = unpack(&sb, &u);
  CHECK_MSG(o != NULL && airlock_lua_push(L, o, err, sizeof err) == 0, "bin pushes");
  size_t len = 0;
  const char *s = lua_tolstring(L, -1, &len);
  CHECK_MSG(lua_type(L, -1) == LUA_TSTRING && len == 3 && memcmp(s, "a\0b", 3) == 0, "bin becomes a string");
  lua_pop(L, 1);
  msgpack_unpacked_destroy(&u);

  msgpack_sbuffer_clear(&sb);
  msgpack_pack_uint64(&pk, UINT64_MAX);
  o = unpack(&sb, &u);
  CHECK_MSG(o != NULL && airlock_lua_push(L, o, err, sizeof err) == 0, "uint64 max pushes");
  CHECK_MSG(!lua_isinteger(L, -1) && lua_tonumber(L, -1) == 18446744073709551616.0,
            "uint64 max becomes a float");
  lua_pop(L, 1);
  msgpack_unpacked_destroy(&u);

  msgpack_sbuffer_clear(&sb);
  msgpack_pack_uint64(&pk, (uint64_t)INT64_MAX);
  o = unpack(&sb, &u);
  CHECK_MSG(o != NULL && airlock_lua_push(L, o, err, sizeof err) == 0, "int64 max pushes");
  CHECK_MSG(lua_isinteger(L, -1) && lua_tointeger(L, -1) == LUA_MAXINTEGER, "int64 max stays an integer");
  lua_pop(L, 1);
  msgpack_unpacked_destroy(&u);

  msgpack_sbuffer_clear(&sb);
  msgpack_pack_float(&pk, 0.5f);
  o = unpack(&sb, &u);
  CHECK_MSG(o != NULL && airlock_lua_push(L, o, err, sizeof err) == 0, "float32 pushes");
  CHECK_MSG(!lua_isinteger(L, -1) && lua_tonumber(L, -1) == 0.5, "float32 becomes a float");
  lua_pop(L, 1);
  msgpack_unpacked_destroy(&u);

  msgpack_sbuffer_destroy(&sb);
}

static void test_push_errors(lua_State *L)
{
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_unpacked u;

  msgpack_pack_ext(&pk, 2, 5);
  msgpack_pack_ext_body(&pk, "hi", 2);
  push_fails(L, unpack(&sb, &u), "ext type 5 is not supported");
  msgpack_unpacked_destroy(&u);

  /* The error deep inside containers still unwinds every partial table. */
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 2);
  msgpack_pack_int(&pk, 1);
  msgpack_pack_map(&pk, 1);
  msgpack_pack_str(&pk, 1);
  msgpack_pack_str_body(&pk, "k", 1);
  msgpack_pack_ext(&pk, 1, -3);
  msgpack_pack_ext_body(&pk, "z", 1);
  push_fails(L, unpack(&sb, &u), "ext type -3 is not supported");
  msgpack_unpacked_destroy(&u);

  msgpack_sbuffer_clear(&sb);
  msgpack_pack_map(&pk, 2);
  msgpack_pack_int(&pk, 1);
  msgpack_pack_int(&pk, 1);
  msgpack_pack_nil(&pk);
  msgpack_pack_int(&pk, 2);
  push_fails(L, unpack(&sb, &u), "map key is nil");
  msgpack_unpacked_destroy(&u);

  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 1);
  msgpack_pack_map(&pk, 1);
  msgpack_pack_double(&pk, NAN);
  msgpack_pack_int(&pk, 2);
  push_fails(L, unpack(&sb, &u), "map key is NaN");
  msgpack_unpacked_destroy(&u);

  msgpack_sbuffer_destroy(&sb);
}

/* Builds arrays nested n deep by hand, the innermost holding 7: msgpack-c's
** own unpacker stops at 32 levels, so it cannot make the too-deep case. */
static const msgpack_object *nested_arrays(msgpack_object *objs, int n)
{
  for (int i = 0; i < n; i++) {
    objs[i].type = MSGPACK_OBJECT_ARRAY;
    objs[i].via.array.size = 1;
    objs[i].via.array.ptr = &objs[i + 1];
  }
  objs[n].type = MSGPACK_OBJECT_POSITIVE_INTEGER;
  objs[n].via.u64 = 7;
  return &objs[0];
}

static void test_push_depth(lua_State *L)
{
  msgpack_object objs[AIRLOCK_CONVERT_DEPTH_MAX + 2];
  char err[128];

  const msgpack_object *o = nested_arrays(objs, AIRLOCK_CONVERT_DEPTH_MAX);
  CHECK_MSG(airlock_lua_push(L, o, err, sizeof err) == 0, "the deepest nesting allowed pushes");
  int inner = 1;
  for (int i = 0; i < AIRLOCK_CONVERT_DEPTH_MAX && inner; i++) inner = lua_rawgeti(L, -1, 1) != LUA_TNIL;
  CHECK_MSG(inner && lua_tointeger(L, -1) == 7, "the deepest value is intact");
  lua_pop(L, AIRLOCK_CONVERT_DEPTH_MAX + 1);

  char want[64];
  snprintf(want, sizeof want, "nesting deeper than %d", AIRLOCK_CONVERT_DEPTH_MAX);
  o = nested_arrays(objs, AIRLOCK_CONVERT_DEPTH_MAX + 1);
  push_fails(L, o, want);
}

int main(void)
{
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  lua_pushboolean(L, 1); /* a sentinel below everything the tests push */

  test_round_trips(L);
  test_pack_errors(L);
  test_depth(L);
  test_long_path_is_cut(L);
  test_relative_index(L);
  test_writer_refusal(L);
  test_push_scalars(L);
  test_push_errors(L);
  test_push_depth(L);
  CHECK_MSG(lua_gettop(L) == 1 && lua_toboolean(L, 1), "the stack ends where it began");

  lua_close(L);
  return check_summary();
}
