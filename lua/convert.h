/*
** convert.h -- Lua values <-> msgpack, shared by the Lua module and the worker.
** Lua -> msgpack never raises: errors come back as a message naming the path.
*/
#ifndef AIRLOCK_CONVERT_H
#define AIRLOCK_CONVERT_H

#include <lua.h>
#include <msgpack.h>

#define AIRLOCK_CONVERT_DEPTH_MAX 31 /* the frame's own map is level 1 of AIRLOCK_MSG_DEPTH_MAX */

/* Packs the value at index idx into pk. nil, booleans, integers, floats,
** strings (binary-safe), sequences (keys exactly 1..n, n >= 1) as arrays, other
** tables as maps (keys: strings, integers, floats, booleans). Metatables are
** ignored (raw access). Functions, userdata, threads, cycles and nesting deeper
** than AIRLOCK_CONVERT_DEPTH_MAX are refused.
** Returns 0, or -1 with a message in err naming the path from root, e.g.
** "args.items[3]: cannot send a function". Uses at most a few Lua stack slots
** per level (checked with lua_checkstack). */
int airlock_lua_pack(lua_State *L, int idx, msgpack_packer *pk, const char *root, char *err, size_t errlen);

/* Pushes the Lua value for o: nil, boolean, integer (uint64 above the Lua range
** becomes a float), float, str and bin as strings, arrays as sequences, maps as
** tables. Returns 0 with one value pushed, or -1 with nothing pushed and a
** message in err (ext types, nil or NaN map keys, nesting over the limit). */
int airlock_lua_push(lua_State *L, const msgpack_object *o, char *err, size_t errlen);

#endif
