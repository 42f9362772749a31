/*
** codec_fuzz.c -- libFuzzer target: one frame body, as the parent receives it
** from a child, through the bounds prescan and the protocol decoder for every
** message kind; anything accepted must also survive re-packing. The same
** bytes as a C host's input (airlock_init.input): an input airlock_init_frame
** accepts must give a frame the worker decodes and a Lua value it can make.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "airlock.h"
#include "convert.h"

/* Under lua_pcall: the input (a light userdata) as a Lua value, or an error. */
static int push_input(lua_State *L)
{
  const msgpack_object *o = lua_touserdata(L, 1);
  char err[128];
  if (airlock_lua_push(L, o, err, sizeof err) != 0) return luaL_error(L, "%s", err);
  return 1;
}

static void as_input(const uint8_t *data, size_t size)
{
  static lua_State *L;
  char err[256];
  airlock_init in = {.source = "return ...", .source_len = 10, .input = data, .input_len = size};
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  if (airlock_init_frame(&sb, &in, 0, err, sizeof err) == 0) {
    msgpack_unpacked u;
    airlock_msg m;
    msgpack_unpacked_init(&u);
    if (airlock_msg_decode(sb.data + 4, sb.size - 4, &u, &m, err, sizeof err) != 0 ||
        airlock_msg_field(m.value, "input") == NULL)
      abort(); /* accepted, yet the worker would refuse the frame */
    if (L == NULL && (L = luaL_newstate()) == NULL) abort();
    lua_settop(L, 0);
    lua_pushcfunction(L, push_input);
    lua_pushlightuserdata(L, (void *)airlock_msg_field(m.value, "input"));
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) abort(); /* accepted, yet the worker could not make it a Lua value */
    lua_settop(L, 0);
    lua_gc(L, LUA_GCCOLLECT);
    msgpack_unpacked_destroy(&u);
  }
  msgpack_sbuffer_destroy(&sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char err[256];
  airlock_msg_check_prefix(data, size, err, sizeof err);
  msgpack_unpacked u;
  airlock_msg m;
  msgpack_unpacked_init(&u);
  if (airlock_msg_decode(data, size, &u, &m, err, sizeof err) == 0) {
    /* Accepted: the decoded object packs back without trouble. */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, u.data);
    (void)airlock_msg_kind_name(m.kind);
    (void)airlock_msg_field(&u.data, "effect");
    msgpack_sbuffer_destroy(&sb);
  }
  msgpack_unpacked_destroy(&u);
  as_input(data, size);
  return 0;
}
