/*
** host_api.c -- the guest's way out: host.call, host.input, the sugar
** (host.fs.read(args) is host.call("fs.read", args)), and print as the log effect.
*/
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "convert.h"
#include "worker.h"

#define TRUNCATED_MARK "\n[output truncated]\n"

/* Sends effect(args at index args) and pushes the reply's value. */
static int call_effect(lua_State *L, const char *effect, size_t len, int args)
{
  worker *w = worker_of(L);
  char err[256];
  msgpack_packer *pk = worker_call_begin(w, effect, len);
  if (airlock_lua_pack(L, args, pk, "args", err, sizeof err) != 0) return luaL_error(L, "%s", err);
  return worker_call_finish(L, w);
}

/* host.call(effect, args). The name is checked here because the parent
** would treat a bad one as a protocol breach and kill the run. */
static int host_call(lua_State *L)
{
  size_t len;
  const char *effect = luaL_checklstring(L, 1, &len);
  if (len == 0 || len > AIRLOCK_EFFECT_NAME_MAX)
    return luaL_argerror(L, 1, "effect names are 1 to 256 bytes");
  lua_settop(L, 2);
  return call_effect(L, effect, len, 2);
}

/* Whether effect is in init.notify. */
static int is_note(const worker *w, const char *name, size_t len)
{
  const msgpack_object *n = w->init.notify;
  for (uint32_t i = 0; n != NULL && i < n->via.array.size; i++) {
    const msgpack_object_str *s = &n->via.array.ptr[i].via.str;
    if (s->size == len && memcmp(s->ptr, name, len) == 0) return 1;
  }
  return 0;
}

/* __call of host.<name> (host.fs.read(args)): the effect's name is the
** closure's upvalue, the object itself is argument 1 and args argument 2. The
** name is checked as host.call checks it; the parent decides the rest. */
static int host_sugar(lua_State *L)
{
  size_t len;
  const char *effect = lua_tolstring(L, lua_upvalueindex(1), &len);
  if (len == 0 || len > AIRLOCK_EFFECT_NAME_MAX)
    return luaL_error(L, "effect names are 1 to 256 bytes, not %I", (lua_Integer)len);
  lua_settop(L, 2);
  return call_effect(L, effect, len, 2);
}

/* The same for a notification (init.notify): queued, returns nothing. */
static int host_note(lua_State *L)
{
  worker *w = worker_of(L);
  char err[256];
  size_t len;
  const char *effect = lua_tolstring(L, lua_upvalueindex(1), &len);
  lua_settop(L, 2);
  msgpack_packer *pk = worker_note_begin(w, effect, len);
  if (airlock_lua_pack(L, 2, pk, "args", err, sizeof err) != 0) return luaL_error(L, "%s", err);
  return worker_note_finish(L, w);
}

/* host.input(prompt): the run ends paused here; resuming is a new worker
** that replays the journal up to this point, and gets the answers to the
** pauses so far in init.resume.inputs: host.input returns those in order, and
** pauses again only past the last. */
static int host_input(lua_State *L)
{
  worker *w = worker_of(L);
  char err[256];
  lua_settop(L, 1);
  const msgpack_object *inputs = w->init.resume_inputs;
  if (inputs != NULL && w->inputs_used < inputs->via.array.size) {
    const msgpack_object *v = &inputs->via.array.ptr[w->inputs_used++];
    if (airlock_lua_push(L, v, err, sizeof err) != 0) return luaL_error(L, "resume input: %s", err);
    return 1;
  }
  msgpack_packer *pk = worker_frame_begin(w, AIRLOCK_MSG_PAUSE, 2);
  airlock_pack_cstr(pk, "prompt");
  if (airlock_lua_pack(L, 1, pk, "prompt", err, sizeof err) != 0) return luaL_error(L, "%s", err);
  worker_frame_send(w);
  worker_end(w);
}

/* ---------------------------------------------------------------- sugar */

/* host.X.Y(args) is host.call("X.Y", args) for every name, granted or not:
** the parent decides, and refuses what the policy does not grant (cause
** denied, a record in the ledger) exactly as it does for host.call. Nothing
** in host says which effects the policy grants, so the guest cannot probe
** the grant through the sugar either.
**
** host.X is made when first read: an empty table whose own metatable calls
** effect "X" (__call) and makes host.X.Y the same way (__index); it is kept
** in the table it was read from, so host.X is the same object every time.
** The guest's own reads alone make them, in its own order: its world stays a
** function of its source and its inputs. A key that is not a string reads
** nil, as in any table; host.call and host.input are plain fields. */

static void push_effect_object(lua_State *L, const char *name, size_t len);

/* __index(t, k) of host (upvalue: "") and of host.X (upvalue: "X"). */
static int sugar_index(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE); /* a guest may call it by hand */
  if (lua_type(L, 2) != LUA_TSTRING) {
    lua_pushnil(L);
    return 1;
  }
  size_t plen, klen;
  const char *prefix = lua_tolstring(L, lua_upvalueindex(1), &plen);
  const char *key = lua_tolstring(L, 2, &klen);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  if (plen > 0) {
    luaL_addlstring(&b, prefix, plen);
    luaL_addchar(&b, '.');
  }
  luaL_addlstring(&b, key, klen);
  luaL_pushresult(&b);
  size_t len;
  const char *name = lua_tolstring(L, -1, &len);
  push_effect_object(L, name, len);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, 1); /* kept: the same object next time */
  return 1;
}

/* Pushes a new host.<name> object. */
static void push_effect_object(lua_State *L, const char *name, size_t len)
{
  lua_createtable(L, 0, 0);
  lua_createtable(L, 0, 2);
  lua_pushlstring(L, name, len);
  lua_pushcclosure(L, is_note(worker_of(L), name, len) ? host_note : host_sugar, 1);
  lua_setfield(L, -2, "__call");
  lua_pushlstring(L, name, len);
  lua_pushcclosure(L, sugar_index, 1);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
}

/* ---------------------------------------------------------------- print */

/* Sends text as one log effect; when cut, the mark follows the kept prefix.
** Without L (a warning) the reply is not read and a refusal is dropped. */
static void send_log(lua_State *L, worker *w, const char *text, size_t len, int cut)
{
  size_t mark = cut ? sizeof TRUNCATED_MARK - 1 : 0;
  int note = is_note(w, "log", 3);
  msgpack_packer *pk = note ? worker_note_begin(w, "log", 3) : worker_call_begin(w, "log", 3);
  msgpack_pack_map(pk, 1);
  airlock_pack_cstr(pk, "text");
  msgpack_pack_str(pk, len + mark);
  msgpack_pack_str_body(pk, text, len);
  msgpack_pack_str_body(pk, TRUNCATED_MARK, mark);
  if (note) {
    worker_note_finish(L, w); /* queued: print does not wait */
    return;
  }
  if (L == NULL) {
    worker_call_finish_quiet(w);
    return;
  }
  worker_call_finish(L, w);
  lua_pop(L, 1);
}

/* limits.output caps the bytes printed over the whole run: the print that
** crosses it sends what still fits and the mark, later ones are dropped. */
static void print_text(lua_State *L, worker *w, const char *text, size_t len)
{
  uint64_t cap = w->init.output;
  if (cap == 0) {
    send_log(L, w, text, len, 0);
  } else if (!w->out_truncated) {
    uint64_t room = cap - w->out_used;
    if (len <= room) {
      w->out_used += len;
      send_log(L, w, text, len, 0);
    } else {
      w->out_truncated = 1;
      w->out_used = cap;
      send_log(L, w, text, (size_t)room, 1);
    }
  }
}

/* print(...): tostring of each argument, tab-separated, newline-terminated. */
static int guest_print(lua_State *L)
{
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; i++) {
    if (i > 1) luaL_addchar(&b, '\t');
    luaL_tolstring(L, i, NULL);
    luaL_addvalue(&b);
  }
  luaL_addchar(&b, '\n');
  luaL_pushresult(&b);
  size_t len;
  const char *text = lua_tolstring(L, -1, &len);
  print_text(L, worker_of(L), text, len);
  return 0;
}

/* ---------------------------------------------------------------- warn */

#define WARN_PREFIX "Lua warning: "

/* The warning function, as lua.c's (lauxlib's): off at first; "@on" and
** "@off" as a whole message switch it; when on, a message (its pieces joined)
** becomes one line "Lua warning: ...\n" in the run's log, through the same
** output budget as print. It may be called where nothing may raise (Lua warns
** of an error in a __gc from the collector), so it never touches the Lua
** state: the line is built here and sent without reading the reply. */
static void guest_warnf(void *ud, const char *msg, int tocont)
{
  worker *w = ud;
  if (!w->warn_cont && msg[0] == '@') { /* a control message */
    if (strcmp(msg + 1, "off") == 0)
      w->warn_on = 0;
    else if (strcmp(msg + 1, "on") == 0)
      w->warn_on = 1;
    return;
  }
  if (!w->warn_on) return;
  if (!w->warn_cont) {
    memcpy(w->warn_buf, WARN_PREFIX, sizeof WARN_PREFIX - 1);
    w->warn_len = sizeof WARN_PREFIX - 1;
  }
  size_t n = strlen(msg), room = sizeof w->warn_buf - 1 - w->warn_len; /* 1: the newline */
  n = n < room ? n : room;
  memcpy(w->warn_buf + w->warn_len, msg, n);
  w->warn_len += n;
  w->warn_cont = tocont;
  if (tocont) return;
  w->warn_buf[w->warn_len++] = '\n';
  print_text(NULL, w, w->warn_buf, w->warn_len);
}

void worker_host_open(lua_State *L, worker *w)
{
  lua_setwarnf(L, guest_warnf, w);
  lua_createtable(L, 0, 2);
  int host = lua_gettop(L);
  lua_pushcfunction(L, host_call);
  lua_setfield(L, host, "call");
  lua_pushcfunction(L, host_input);
  lua_setfield(L, host, "input");
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "");
  lua_pushcclosure(L, sugar_index, 1);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, host);
  lua_setglobal(L, "host");
  lua_register(L, "print", guest_print);
}
