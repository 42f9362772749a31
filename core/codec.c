/*
** codec.c -- protocol messages: a non-allocating msgpack validator that runs
** before msgpack-c sees untrusted bytes, and the per-kind field checks.
*/
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "airlock.h"

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt, ...)
{
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -EPROTO;
}

static uint64_t get_be(const uint8_t *p, unsigned n)
{
  uint64_t v = 0;
  while (n-- > 0) v = v << 8 | *p++;
  return v;
}

/* ------------------------------------------------------------------ check */

/* Returned by walk() in prefix mode when the bytes run out before the message
** does: they could be the start of a longer, well-formed message. */
#define SHORT        1
/* In walk(): the bytes ran out; an error unless only a prefix is being checked. */
#define RAN_OUT(...) (prefix ? SHORT : fail(err, errlen, __VA_ARGS__))

/* walk()'s modes. */
enum { WHOLE = 0, PREFIX = 1, LUA_VALUE = 2 };

/* Whether the float at p (4 or 8 bytes, big-endian) is a NaN. */
static int is_nan(const uint8_t *p, unsigned n)
{
  uint64_t v = get_be(p, n);
  if (n == 4) return (v & 0x7f800000u) == 0x7f800000u && (v & 0x007fffffu) != 0;
  return (v & 0x7ff0000000000000u) == 0x7ff0000000000000u && (v & 0x000fffffffffffffu) != 0;
}

/* What one msgpack tag says of the element it starts. */
enum shape { SCALAR, DATA, ARRAY, MAP };
struct element {
  const char *what;  /* its type, for messages */
  enum shape shape;  /* a scalar, data (str, bin, ext), or a container */
  unsigned lenbytes; /* size of the length or count field after the tag */
  uint64_t payload;  /* bytes after the tag and length field (data: besides its length) */
  uint64_t count;    /* a fix type's str length or container count */
};

/* Fills e for tag; -1 for a byte that is no msgpack type (0xc1). */
static inline int classify(uint8_t tag, struct element *e)
{
  *e = (struct element){.shape = SCALAR};
  if (tag <= 0x7f || tag >= 0xe0) {
    e->what = "fixint";
  } else if (tag <= 0x8f) {
    *e = (struct element){"map", MAP, 0, 0, tag & 0x0f};
  } else if (tag <= 0x9f) {
    *e = (struct element){"array", ARRAY, 0, 0, tag & 0x0f};
  } else if (tag <= 0xbf) {
    *e = (struct element){"str", DATA, 0, 0, tag & 0x1f};
  } else {
    switch (tag) {
      case 0xc0: e->what = "nil"; break;
      case 0xc2:
      case 0xc3: e->what = "bool"; break;
      case 0xc4:
      case 0xc5:
      case 0xc6: *e = (struct element){"bin", DATA, 1u << (tag - 0xc4), 0, 0}; break;
      case 0xc7:
      case 0xc8:
      case 0xc9: /* the extra byte is the ext type */
        *e = (struct element){"ext", DATA, 1u << (tag - 0xc7), 1, 0};
        break;
      case 0xca: *e = (struct element){"float32", SCALAR, 0, 4, 0}; break;
      case 0xcb: *e = (struct element){"float64", SCALAR, 0, 8, 0}; break;
      case 0xcc:
      case 0xcd:
      case 0xce:
      case 0xcf: *e = (struct element){"uint", SCALAR, 0, 1u << (tag - 0xcc), 0}; break;
      case 0xd0:
      case 0xd1:
      case 0xd2:
      case 0xd3: *e = (struct element){"int", SCALAR, 0, 1u << (tag - 0xd0), 0}; break;
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8: *e = (struct element){"fixext", SCALAR, 0, 1 + (1u << (tag - 0xd4)), 0}; break;
      case 0xd9:
      case 0xda:
      case 0xdb: *e = (struct element){"str", DATA, 1u << (tag - 0xd9), 0, 0}; break;
      case 0xdc:
      case 0xdd: *e = (struct element){"array", ARRAY, 2u << (tag - 0xdc), 0, 0}; break;
      case 0xde:
      case 0xdf: *e = (struct element){"map", MAP, 2u << (tag - 0xde), 0, 0}; break;
      default: return -1;
    }
  }
  return 0;
}

/* msgpack-c allocates count * sizeof(msgpack_object) as soon as it reads an
** array or map header, before any element arrives, and recurses on its own
** fixed stack. This walk proves the bytes are complete and shallow first.
** In PREFIX mode, running out of bytes is not an error but SHORT. In
** LUA_VALUE mode the message is a value for a guest's Lua (a C host's input),
** which cannot hold an ext value or a nil or NaN table key (lua/convert.c
** refuses them): those are refused here too. */
static int walk(const uint8_t *b, size_t len, int mode, char *err, size_t errlen)
{
  int prefix = mode == PREFIX;
  /* in_map[d]: the container open at depth d is a map, whose elements
  ** alternate key, value: a key when the count still owed is even. */
  uint8_t in_map[AIRLOCK_MSG_DEPTH_MAX + 1];
  size_t pos = 0;
  /* left[d]: objects still owed to the container open at depth d; left[0] is
  ** the single top-level object. */
  uint64_t left[AIRLOCK_MSG_DEPTH_MAX + 1];
  uint64_t objects = 0; /* what msgpack-c will make: one msgpack_object each */
  int depth = 0;

  if (len == 0) return RAN_OUT("empty message");
  left[0] = 1;
  in_map[0] = 0;
  for (;;) {
    while (left[depth] == 0) {
      if (depth == 0) goto complete;
      depth--;
    }
    int key = in_map[depth] && left[depth] % 2 == 0;
    left[depth]--;
    if (pos == len) return RAN_OUT("message ends at byte %zu but an element is missing", pos);

    size_t at = pos;
    uint8_t tag = b[pos++];
    objects++;
    struct element e;
    if (classify(tag, &e) < 0) return fail(err, errlen, "0x%02x at byte %zu is not a msgpack type", tag, at);
    const char *what = e.what;
    unsigned lenbytes = e.lenbytes;
    uint64_t payload = e.payload, count = e.count;
    enum shape shape = e.shape;

    if (lenbytes > 0) {
      if (len - pos < lenbytes) return RAN_OUT("%s header at byte %zu is truncated", what, at);
      count = get_be(b + pos, lenbytes);
      pos += lenbytes;
    }
    if (shape == DATA) payload += count;
    /* SECURITY: every declared length is checked against the bytes present. */
    if (payload > len - pos)
      return RAN_OUT("%s at byte %zu needs %" PRIu64 " bytes but only %zu remain", what, at, payload,
                     len - pos);
    if (mode == LUA_VALUE) {
      if ((tag >= 0xc7 && tag <= 0xc9) || (tag >= 0xd4 && tag <= 0xd8))
        return fail(err, errlen, "%s at byte %zu: a Lua value cannot be an ext type", what, at);
      if (key && (tag == 0xc0 || ((tag == 0xca || tag == 0xcb) && is_nan(b + pos, (unsigned)payload))))
        return fail(err, errlen, "map key at byte %zu is %s: a Lua table cannot have one", at,
                    tag == 0xc0 ? "nil" : "NaN");
    }
    pos += payload;

    if (shape == ARRAY || shape == MAP) {
      uint64_t items = shape == MAP ? 2 * count : count;
      /* SECURITY: each element takes at least one byte, so a count larger than
      ** the bytes left is a lie, caught here before msgpack-c would allocate. */
      if (items > len - pos && !prefix)
        return fail(err, errlen, "%s at byte %zu claims %" PRIu64 " %s but only %zu bytes remain", what, at,
                    count, shape == MAP ? "pairs" : "elements", len - pos);
      /* SECURITY: bounded nesting keeps left[] and msgpack-c's parse stack
      ** from overflowing; empty containers count too, as they do for msgpack-c. */
      if (depth == AIRLOCK_MSG_DEPTH_MAX)
        return fail(err, errlen, "%s at byte %zu nests deeper than %d levels", what, at,
                    AIRLOCK_MSG_DEPTH_MAX);
      if (items > 0) {
        left[++depth] = items;
        in_map[depth] = shape == MAP;
      }
    }
  }
complete:
  if (pos < len)
    return fail(err, errlen, "%zu trailing byte%s after the message", len - pos, len - pos == 1 ? "" : "s");
  /* SECURITY: decoding costs the copy of the bytes plus one msgpack_object per
  ** element: a frame of one-byte elements would cost 25 times its size. Past a
  ** small allowance, the objects may take at most three times the frame, so a
  ** frame never costs more than four times itself to decode, granted or not. */
  if (!prefix && objects * sizeof(msgpack_object) > 3 * (uint64_t)len + AIRLOCK_MSG_DECODE_SLACK)
    return fail(err, errlen,
                "%" PRIu64 " elements in %zu bytes would take %" PRIu64 " KiB to decode, "
                "more than four times the message",
                objects, len, (objects * sizeof(msgpack_object) + len) / 1024);
  return 0;
}

int airlock_msg_check(const void *body, size_t len, char *err, size_t errlen)
{
  return walk(body, len, WHOLE, err, errlen);
}

int airlock_msg_check_prefix(const void *body, size_t len, char *err, size_t errlen)
{
  return walk(body, len, PREFIX, err, errlen);
}

/* ------------------------------------------------------------------ decode */

static const char *const kind_names[] = {
    [AIRLOCK_MSG_INIT] = "init",   [AIRLOCK_MSG_READY] = "ready", [AIRLOCK_MSG_CALL] = "call",
    [AIRLOCK_MSG_REPLY] = "reply", [AIRLOCK_MSG_PAUSE] = "pause", [AIRLOCK_MSG_DONE] = "done",
    [AIRLOCK_MSG_NOTE] = "note",   [AIRLOCK_MSG_START] = "start",
};

/* Top-level fields any kind reads; found in one pass over the map. */
enum field {
  F_T,
  F_V,
  F_ID,
  F_EFFECT,
  F_ARGS,
  F_OK,
  F_ERR,
  F_CODE,
  F_PROMPT,
  F_CONFINED,
  F_TURN,
  F_STARTED,
  F_COUNT
};
static const char *const field_names[F_COUNT] = {
    "t", "v", "id", "effect", "args", "ok", "err", "code", "prompt", "confined", "turn", "started",
};

static const msgpack_object nil_object = {.type = MSGPACK_OBJECT_NIL};

static const char *type_name(msgpack_object_type t)
{
  switch (t) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "boolean";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "integer";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return "float";
    case MSGPACK_OBJECT_STR: return "string";
    case MSGPACK_OBJECT_BIN: return "binary";
    case MSGPACK_OBJECT_ARRAY: return "array";
    case MSGPACK_OBJECT_MAP: return "map";
    case MSGPACK_OBJECT_EXT: return "ext";
  }
  return "?";
}

static int key_is(const msgpack_object *k, const char *s, size_t n)
{
  return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
         (n == 0 || memcmp(k->via.str.ptr, s, n) == 0);
}

/* A peer-chosen string quoted in a message: short, and no control bytes that
** could forge log lines. */
static const char *printable(char *out, size_t cap, const char *s, size_t n)
{
  size_t i;
  for (i = 0; i < n && i + 1 < cap; i++) out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
  out[i] = '\0';
  return out;
}

/* msgpack-c's strings point into the bytes they were parsed from. Parsing a
** copy held by u's zone makes every object live exactly as long as u, so the
** caller may reuse the frame buffer while a message is still in use. */
static int unpack_copy(const void *body, size_t len, msgpack_unpacked *u, char *err, size_t errlen)
{
  /* A zone that held the previous message is cleared and used again (it
  ** keeps its first chunk): no allocation per frame on the hot path. */
  if (u->zone != NULL)
    msgpack_zone_clear(u->zone);
  else
    u->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
  memset(&u->data, 0, sizeof u->data);
  char *copy = u->zone ? msgpack_zone_malloc_no_align(u->zone, len) : NULL;
  if (copy == NULL) {
    fail(err, errlen, "out of memory for a %zu-byte message", len);
    return -ENOMEM;
  }
  memcpy(copy, body, len);
  size_t off = 0;
  switch (msgpack_unpack(copy, len, &off, u->zone, &u->data)) {
    case MSGPACK_UNPACK_SUCCESS: return 0;
    case MSGPACK_UNPACK_NOMEM_ERROR:
      fail(err, errlen, "out of memory decoding a %zu-byte message", len);
      return -ENOMEM;
    default: return fail(err, errlen, "msgpack-c rejected a message that passed the check");
  }
}

static int want_type(const char *kind, enum field f, const msgpack_object *o, msgpack_object_type t,
                     char *err, size_t errlen)
{
  if (o != NULL && o->type != t)
    return fail(err, errlen, "%s: field '%s' must be a %s (got %s)", kind, field_names[f], type_name(t),
                type_name(o->type));
  return 0;
}

static int want_id(const char *kind, const msgpack_object *o, uint64_t *id, char *err, size_t errlen)
{
  if (o == NULL) return fail(err, errlen, "%s: missing field 'id'", kind);
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
    return fail(err, errlen, "%s: field 'id' must be a positive integer (got %" PRId64 ")", kind, o->via.i64);
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 == 0)
    return fail(err, errlen, "%s: field 'id' must be a positive integer (got %s)", kind,
                o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? "0" : type_name(o->type));
  *id = o->via.u64;
  return 0;
}

/* v is optional: a peer that omits it is reported as version 0. */
static int want_version(const char *kind, const msgpack_object *o, uint64_t *v, char *err, size_t errlen)
{
  if (o == NULL) return 0;
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    return fail(err, errlen, "%s: field 'v' must be a non-negative integer (got %s)", kind,
                type_name(o->type));
  *v = o->via.u64;
  return 0;
}

/* reply and done carry exactly one outcome: ok (any value) or err. */
static int want_outcome(const char *kind, const msgpack_object *const *f, msgpack_object_type err_type,
                        airlock_msg *msg, char *err, size_t errlen)
{
  if (f[F_OK] != NULL && f[F_ERR] != NULL)
    return fail(err, errlen, "%s: fields 'ok' and 'err' cannot both be present", kind);
  if (f[F_OK] == NULL && f[F_ERR] == NULL) return fail(err, errlen, "%s: needs field 'ok' or 'err'", kind);
  int rc = want_type(kind, F_ERR, f[F_ERR], err_type, err, errlen);
  if (rc < 0) return rc;
  msg->value = f[F_OK];
  msg->err = f[F_ERR];
  return 0;
}

static int want_effect(const msgpack_object *o, airlock_msg *msg, char *err, size_t errlen)
{
  if (o == NULL) return fail(err, errlen, "call: missing field 'effect'");
  int rc = want_type("call", F_EFFECT, o, MSGPACK_OBJECT_STR, err, errlen);
  if (rc < 0) return rc;
  if (o->via.str.size == 0) return fail(err, errlen, "call: field 'effect' must not be empty");
  if (o->via.str.size > AIRLOCK_EFFECT_NAME_MAX)
    return fail(err, errlen, "call: field 'effect' is %" PRIu32 " bytes, over the limit of %d",
                o->via.str.size, AIRLOCK_EFFECT_NAME_MAX);
  msg->effect = o->via.str.ptr;
  msg->effect_len = o->via.str.size;
  return 0;
}

/* Collects the known fields; a duplicated one is refused, since two readers
** of the same bytes could otherwise pick different copies. */
static int collect(const msgpack_object *map, const msgpack_object **f, char *err, size_t errlen)
{
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object_kv *kv = &map->via.map.ptr[i];
    if (kv->key.type != MSGPACK_OBJECT_STR)
      return fail(err, errlen, "message key #%" PRIu32 " is not a string (got %s)", i + 1,
                  type_name(kv->key.type));
    for (int j = 0; j < F_COUNT; j++) {
      if (!key_is(&kv->key, field_names[j], strlen(field_names[j]))) continue;
      if (f[j] != NULL) return fail(err, errlen, "duplicate field '%s'", field_names[j]);
      f[j] = &kv->val;
      break;
    }
  }
  return 0;
}

static int find_kind(const msgpack_object *t, airlock_msg_kind *kind, char *err, size_t errlen)
{
  if (t == NULL) return fail(err, errlen, "message has no field 't'");
  if (t->type != MSGPACK_OBJECT_STR)
    return fail(err, errlen, "field 't' must be a string (got %s)", type_name(t->type));
  for (int k = AIRLOCK_MSG_INIT; k <= AIRLOCK_MSG_LAST; k++) {
    if (key_is(t, kind_names[k], strlen(kind_names[k]))) {
      *kind = (airlock_msg_kind)k;
      return 0;
    }
  }
  char shown[33];
  return fail(err, errlen, "unknown message kind '%s'%s",
              printable(shown, sizeof shown, t->via.str.ptr, t->via.str.size),
              t->via.str.size >= sizeof shown ? "..." : "");
}

int airlock_msg_decode(const void *body, size_t len, msgpack_unpacked *u, airlock_msg *msg, char *err,
                       size_t errlen)
{
  const msgpack_object *f[F_COUNT] = {NULL};
  memset(msg, 0, sizeof *msg);
  int rc = airlock_msg_check(body, len, err, errlen);
  if (rc == 0) rc = unpack_copy(body, len, u, err, errlen);
  if (rc < 0) return rc;

  const msgpack_object *root = &u->data;
  if (root->type != MSGPACK_OBJECT_MAP)
    return fail(err, errlen, "frame is not a msgpack map (got %s)", type_name(root->type));
  if ((rc = collect(root, f, err, errlen)) < 0 || (rc = find_kind(f[F_T], &msg->kind, err, errlen)) < 0)
    return rc;

  const char *kind = kind_names[msg->kind];
  switch (msg->kind) {
    case AIRLOCK_MSG_INIT:
    case AIRLOCK_MSG_START: msg->value = root; return want_version(kind, f[F_V], &msg->version, err, errlen);
    case AIRLOCK_MSG_READY:
      msg->value = f[F_CONFINED];
      if ((rc = want_version(kind, f[F_V], &msg->version, err, errlen)) < 0) return rc;
      return want_type(kind, F_CONFINED, f[F_CONFINED], MSGPACK_OBJECT_MAP, err, errlen);
    case AIRLOCK_MSG_CALL:
    case AIRLOCK_MSG_NOTE:
      msg->value = f[F_ARGS] != NULL ? f[F_ARGS] : &nil_object;
      if ((rc = want_id(kind, f[F_ID], &msg->id, err, errlen)) < 0) return rc;
      return want_effect(f[F_EFFECT], msg, err, errlen);
    case AIRLOCK_MSG_REPLY:
      msg->code = f[F_CODE];
      if ((rc = want_id(kind, f[F_ID], &msg->id, err, errlen)) < 0 ||
          (rc = want_outcome(kind, f, MSGPACK_OBJECT_STR, msg, err, errlen)) < 0 ||
          (rc = want_type(kind, F_TURN, f[F_TURN], MSGPACK_OBJECT_BOOLEAN, err, errlen)) < 0)
        return rc;
      msg->turn = f[F_TURN] != NULL && f[F_TURN]->via.boolean;
      return want_type(kind, F_CODE, f[F_CODE], MSGPACK_OBJECT_STR, err, errlen);
    case AIRLOCK_MSG_PAUSE: msg->value = f[F_PROMPT]; return 0;
    case AIRLOCK_MSG_DONE:
      if ((rc = want_type(kind, F_STARTED, f[F_STARTED], MSGPACK_OBJECT_POSITIVE_INTEGER, err, errlen)) < 0)
        return rc;
      msg->started = f[F_STARTED] != NULL ? f[F_STARTED]->via.u64 : 0;
      return want_outcome(kind, f, MSGPACK_OBJECT_MAP, msg, err, errlen);
  }
  return fail(err, errlen, "unhandled message kind");
}

const char *airlock_msg_kind_name(airlock_msg_kind k)
{
  if ((unsigned)k < sizeof kind_names / sizeof kind_names[0] && kind_names[k] != NULL) return kind_names[k];
  return "?";
}

/* ------------------------------------------------------------------ packing */

void airlock_pack_str(msgpack_packer *pk, const char *s, size_t n)
{
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

void airlock_pack_cstr(msgpack_packer *pk, const char *s)
{
  airlock_pack_str(pk, s, strlen(s));
}

void airlock_pack_head(msgpack_packer *pk, airlock_msg_kind kind, uint32_t nfields)
{
  msgpack_pack_map(pk, nfields);
  airlock_pack_cstr(pk, "t");
  airlock_pack_cstr(pk, airlock_msg_kind_name(kind));
}

void airlock_pack_call(msgpack_packer *pk, uint64_t id, const char *effect, size_t len)
{
  airlock_pack_head(pk, AIRLOCK_MSG_CALL, 4);
  airlock_pack_cstr(pk, "id");
  msgpack_pack_uint64(pk, id);
  airlock_pack_cstr(pk, "effect");
  airlock_pack_str(pk, effect, len);
  airlock_pack_cstr(pk, "args");
}

void airlock_pack_note(msgpack_packer *pk, uint64_t id, const char *effect, size_t len)
{
  airlock_pack_head(pk, AIRLOCK_MSG_NOTE, 4);
  airlock_pack_cstr(pk, "id");
  msgpack_pack_uint64(pk, id);
  airlock_pack_cstr(pk, "effect");
  airlock_pack_str(pk, effect, len);
  airlock_pack_cstr(pk, "args");
}

/* turn comes before ok, whose value the caller packs after the head. */
static void pack_reply_head(msgpack_packer *pk, uint64_t id, int turn, uint32_t nfields)
{
  airlock_pack_head(pk, AIRLOCK_MSG_REPLY, nfields + (turn != 0));
  airlock_pack_cstr(pk, "id");
  msgpack_pack_uint64(pk, id);
  if (turn) {
    airlock_pack_cstr(pk, "turn");
    msgpack_pack_true(pk);
  }
}

void airlock_pack_reply_ok(msgpack_packer *pk, uint64_t id, int turn)
{
  pack_reply_head(pk, id, turn, 3);
  airlock_pack_cstr(pk, "ok");
}

void airlock_pack_reply_err(msgpack_packer *pk, uint64_t id, const char *msg, size_t len, const char *code,
                            int turn)
{
  pack_reply_head(pk, id, turn, code != NULL ? 4 : 3);
  airlock_pack_cstr(pk, "err");
  airlock_pack_str(pk, msg, len);
  if (code != NULL) {
    airlock_pack_cstr(pk, "code");
    airlock_pack_cstr(pk, code);
  }
}

/* ------------------------------------------------------------ init, start */

/* A packer whose first failed write (out of memory) sticks: nothing after it
** is written, and the frame is refused as a whole. */
typedef struct frame_out {
  msgpack_sbuffer *sb;
  int failed;
} frame_out;

static int frame_write(void *data, const char *buf, size_t len)
{
  frame_out *o = data;
  if (o->failed || msgpack_sbuffer_write(o->sb, buf, len) != 0) {
    o->failed = 1;
    return -1;
  }
  return 0;
}

/* The NULL-terminated list names (effects or notify): how many, or -EINVAL
** for a name the worker would refuse. */
static int64_t count_names(const char *const *names, const char *what, char *err, size_t errlen)
{
  int64_t n = 0;
  for (; names != NULL && names[n] != NULL; n++) {
    size_t len = strlen(names[n]);
    if (len == 0 || len > AIRLOCK_EFFECT_NAME_MAX) {
      fail(err, errlen, "init: %s[%" PRId64 "] is %zu bytes: an effect's name is 1 to %d bytes", what, n + 1,
           len, AIRLOCK_EFFECT_NAME_MAX);
      return -EINVAL;
    }
    if (n == UINT32_MAX) {
      fail(err, errlen, "init: %s has more names than a msgpack array holds", what);
      return -EINVAL;
    }
  }
  return n;
}

static void pack_names(msgpack_packer *pk, const char *const *names, uint32_t n)
{
  msgpack_pack_array(pk, n);
  for (uint32_t i = 0; i < n; i++) airlock_pack_cstr(pk, names[i]);
}

static void pack_bool(msgpack_packer *pk, const char *key, int v)
{
  airlock_pack_cstr(pk, key);
  if (v)
    msgpack_pack_true(pk);
  else
    msgpack_pack_false(pk);
}

/* The checks both frames share, before anything is packed: the sizes the
** caller gives (each must fit the frame, so a huge one is refused before it
** is copied) and the input, a value for a guest's Lua. */
static int check_sizes(const airlock_init *in, uint32_t max, char *err, size_t errlen)
{
  if ((in->source == NULL && in->source_len != 0) || (in->input == NULL && in->input_len != 0) ||
      (in->seccomp_program == NULL && in->seccomp_program_len != 0)) {
    fail(err, errlen, "init: a NULL source, input or seccomp_program with a length");
    return -EINVAL;
  }
  if (in->source_len > max || in->input_len > max || in->seccomp_program_len > max ||
      in->source_len + in->input_len + in->seccomp_program_len > max) {
    fail(err, errlen,
         "init: the guest's source (%zu bytes), input (%zu) and seccomp_program (%zu) "
         "are more than the frame's limit of %" PRIu32 " bytes",
         in->source_len, in->input_len, in->seccomp_program_len, max);
    return -EMSGSIZE;
  }
  if (in->input != NULL) {
    char why[200];
    if (walk(in->input, in->input_len, LUA_VALUE, why, sizeof why) < 0)
      return fail(err, errlen, "init: input: %s (one msgpack value a Lua value can be)", why);
  }
  return 0;
}

static void pack_guest(msgpack_packer *pk, const airlock_init *in)
{
  airlock_pack_cstr(pk, "guest");
  msgpack_pack_map(pk, 2);
  airlock_pack_cstr(pk, "name");
  airlock_pack_cstr(pk, in->guest_name != NULL ? in->guest_name : "guest");
  airlock_pack_cstr(pk, "source");
  airlock_pack_str(pk, in->source != NULL ? in->source : "", in->source_len);
}

/* The input's bytes as they are: checked to be exactly one value. */
static void pack_input(msgpack_packer *pk, frame_out *o, const airlock_init *in)
{
  airlock_pack_cstr(pk, "input");
  frame_write(o, in->input, in->input_len);
}

/* Ends the frame: its length within max, then the walk the worker's decoder
** makes of it (the input's nesting now counts from the frame's own map). */
static int finish(frame_out *o, uint32_t max, const char *what, char *err, size_t errlen)
{
  if (o->failed) {
    fail(err, errlen, "%s: out of memory building the frame", what);
    return -ENOMEM;
  }
  if (airlock_frame_end(o->sb, max) < 0) {
    fail(err, errlen, "%s: the frame is %zu bytes, more than its limit of %" PRIu32 " bytes", what,
         o->sb->size - 4, max);
    return -EMSGSIZE;
  }
  char why[200];
  if (airlock_msg_check(o->sb->data + 4, o->sb->size - 4, why, sizeof why) < 0)
    return fail(err, errlen, "%s: the worker would refuse the frame: %s", what, why);
  return 0;
}

int airlock_init_frame(msgpack_sbuffer *sb, const airlock_init *in, uint32_t max, char *err, size_t errlen)
{
  if (max == 0) max = AIRLOCK_FRAME_MAX_DEFAULT;
  int rc = check_sizes(in, max, err, errlen);
  int64_t neffects = rc < 0 ? rc : count_names(in->effects, "effects", err, errlen);
  int64_t nnotify = neffects < 0 ? neffects : count_names(in->notify, "notify", err, errlen);
  if (nnotify < 0) return (int)nnotify;

  frame_out o = {sb, 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &o, frame_write);
  if (airlock_frame_begin(sb) < 0) o.failed = 1;
  const struct {
    const char *key;
    uint64_t v;
  } limits[] = {
      {"instructions", in->instructions},           {"memory", in->memory}, {"output", in->output},
      {"turn_instructions", in->turn_instructions}, {"cpu", in->cpu_ms},    {"turn_cpu", in->turn_cpu_ms},
  };
  uint32_t nlimits = 0;
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) nlimits += limits[i].v != 0;
  int guest = !in->prepare, input = guest && in->input != NULL, seed = in->seed != 0;
  int notify = nnotify > 0, program = in->seccomp_program != NULL;
  uint32_t nrequire = (uint32_t)(in->require_landlock != 0) + (uint32_t)(in->require_seccomp != 0) +
                      (uint32_t)(in->require_mdwe != 0);

  airlock_pack_head(&pk, AIRLOCK_MSG_INIT,
                    (uint32_t)(5 + guest + input + seed + notify + (in->prepare != 0)));
  airlock_pack_cstr(&pk, "v");
  msgpack_pack_uint32(&pk, AIRLOCK_PROTOCOL_VERSION);
  if (in->prepare) pack_bool(&pk, "prepare", 1);
  if (guest) pack_guest(&pk, in);
  if (input) pack_input(&pk, &o, in);
  if (seed) {
    airlock_pack_cstr(&pk, "seed");
    msgpack_pack_int64(&pk, in->seed);
  }
  airlock_pack_cstr(&pk, "limits");
  msgpack_pack_map(&pk, nlimits);
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
    if (limits[i].v != 0) {
      airlock_pack_cstr(&pk, limits[i].key);
      msgpack_pack_uint64(&pk, limits[i].v);
    }
  }
  airlock_pack_cstr(&pk, "effects");
  pack_names(&pk, in->effects, (uint32_t)neffects);
  if (notify) {
    airlock_pack_cstr(&pk, "notify");
    pack_names(&pk, in->notify, (uint32_t)nnotify);
  }
  airlock_pack_cstr(&pk, "confine");
  msgpack_pack_map(&pk, 3 + (uint32_t)(nrequire != 0) + (uint32_t)program);
  pack_bool(&pk, "landlock", in->confine_landlock);
  pack_bool(&pk, "seccomp", in->confine_seccomp);
  pack_bool(&pk, "mdwe", in->confine_mdwe);
  if (nrequire != 0) {
    airlock_pack_cstr(&pk, "require");
    msgpack_pack_array(&pk, nrequire);
    if (in->require_landlock) airlock_pack_cstr(&pk, "landlock");
    if (in->require_seccomp) airlock_pack_cstr(&pk, "seccomp");
    if (in->require_mdwe) airlock_pack_cstr(&pk, "mdwe");
  }
  if (program) {
    airlock_pack_cstr(&pk, "seccomp_program");
    msgpack_pack_bin(&pk, in->seccomp_program_len);
    msgpack_pack_bin_body(&pk, in->seccomp_program, in->seccomp_program_len);
  }
  return finish(&o, max, "init", err, errlen);
}

int airlock_start_frame(msgpack_sbuffer *sb, const airlock_init *in, uint64_t run, uint32_t max, char *err,
                        size_t errlen)
{
  if (max == 0) max = AIRLOCK_FRAME_MAX_DEFAULT;
  int rc = check_sizes(in, max, err, errlen);
  if (rc < 0) return rc;
  frame_out o = {sb, 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &o, frame_write);
  if (airlock_frame_begin(sb) < 0) o.failed = 1;
  airlock_pack_head(&pk, AIRLOCK_MSG_START, 4 + (uint32_t)(in->input != NULL));
  airlock_pack_cstr(&pk, "v");
  msgpack_pack_uint32(&pk, AIRLOCK_PROTOCOL_VERSION);
  airlock_pack_cstr(&pk, "run");
  msgpack_pack_uint64(&pk, run);
  pack_guest(&pk, in);
  if (in->input != NULL) pack_input(&pk, &o, in);
  return finish(&o, max, "start", err, errlen);
}

const msgpack_object *airlock_msg_field(const msgpack_object *o, const char *key)
{
  if (o == NULL || o->type != MSGPACK_OBJECT_MAP) return NULL;
  size_t n = strlen(key);
  for (uint32_t i = 0; i < o->via.map.size; i++)
    if (key_is(&o->via.map.ptr[i].key, key, n)) return &o->via.map.ptr[i].val;
  return NULL;
}
