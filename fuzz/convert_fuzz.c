/*
** convert_fuzz.c -- libFuzzer target: msgpack -> Lua -> msgpack, as the worker
** and the parent convert values (depth, sizes, ext types, invalid UTF-8). The
** Lua state has a 64 MiB allocator cap, as a guest's has.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "airlock.h"
#include "convert.h"

static size_t used;
#define CAP (64u << 20)

static void *capped(void *ud, void *ptr, size_t osize, size_t nsize)
{
  (void)ud;
  if (ptr == NULL) osize = 0;
  if (nsize == 0) {
    used -= osize;
    free(ptr);
    return NULL;
  }
  if (nsize > osize && used + (nsize - osize) > CAP) return NULL;
  void *p = realloc(ptr, nsize);
  if (p != NULL) used = used - osize + nsize;
  return p;
}

static int round_trip(lua_State *L)
{
  const msgpack_object *o = lua_touserdata(L, 1);
  char err[256];
  if (airlock_lua_push(L, o, err, sizeof err) != 0) return 0;
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  airlock_lua_pack(L, -1, &pk, "value", err, sizeof err);
  msgpack_sbuffer_destroy(&sb);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char err[256];
  /* The prescan first, exactly as every receiver does before msgpack-c. */
  if (airlock_msg_check(data, size, err, sizeof err) != 0) return 0;
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  if (msgpack_unpack_next(&u, (const char *)data, size, &off) == MSGPACK_UNPACK_SUCCESS) {
    used = 0;
    lua_State *L = lua_newstate(capped, NULL);
    if (L != NULL) {
      lua_pushcfunction(L, round_trip);
      lua_pushlightuserdata(L, &u.data);
      lua_pcall(L, 1, 0, 0); /* out of memory is an answer, not a crash */
      lua_close(L);
    }
  }
  msgpack_unpacked_destroy(&u);
  return 0;
}
