/*
** lcall.c -- the program's side of fd 3: one effect call and the parent's
** reply, for `airlock call` (a shell script under `airlock exec` asking the
** trusted parent for an effect).
**
**   core.channel_call(fd, effect, args [, max_reply_bytes])
**     -> true, value                   the parent answered ok (value may be nil)
**     -> false, message, code          the parent answered err; code is its word
**                                      ("denied": refused by policy) or nil
**     -> nil, "cause: message", errno  no answer: cause is usage (bad effect
**                                      name), args (args cannot be sent), channel
**                                      (fd is not an open socket, I/O failed, the
**                                      parent hung up), protocol (a reply that
**                                      breaks the protocol) or memory
**
** fd nil means 3. max_reply_bytes (default and ceiling 16 MiB) bounds the
** reply's body; the length header is checked against it before anything is
** allocated, and the body buffer grows only as bytes arrive.
**
** The call carries id 1: a program has one call outstanding at a time, and
** each client process starts its own sequence. Only system calls of seccomp
** promise "stdio" are used (fstat, sendmsg, read, poll), so this works inside the
** tool sandbox; no file is opened and no socket made. A non-blocking fd 3 is
** waited on with poll rather than switched to blocking: its flags are shared
** with every process holding the same channel.
*/
#include "lbinding.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define CALL_STATE_MT "airlock.channel_call"
#define CALL_ID       1u
#define FRAME_HDR     4u

/* Everything a call allocates, owned by a userdata so that a Lua error midway
** (out of memory while a reply is converted) still frees it, through __gc. */
typedef struct call_state {
  msgpack_sbuffer out; /* the call frame, header included */
  int out_refused;     /* the frame would pass the size limit */
  airlock_frame_reader in;
  msgpack_unpacked reply;
} call_state;

static void state_release(call_state *st)
{
  msgpack_sbuffer_destroy(&st->out);
  msgpack_sbuffer_init(&st->out);
  airlock_frame_reader_free(&st->in);
  msgpack_unpacked_destroy(&st->reply); /* idempotent: clears its zone */
}

static int state_gc(lua_State *L)
{
  state_release(luaL_checkudata(L, 1, CALL_STATE_MT));
  return 0;
}

/* SECURITY: the call frame is bounded while it is packed, so a huge args
** table fails with a message instead of first growing a buffer without end. */
static int capped_write(void *data, const char *buf, size_t len)
{
  call_state *st = data;
  if (st->out_refused || len > FRAME_HDR + AIRLOCK_FRAME_MAX_DEFAULT - st->out.size ||
      msgpack_sbuffer_write(&st->out, buf, len) != 0) {
    st->out_refused = 1;
    return -1;
  }
  return 0;
}

/* Formats "message" and returns nil, "cause: message", err. */
__attribute__((format(printf, 4, 5))) static int call_fail(lua_State *L, const char *cause, int err,
                                                           const char *fmt, ...)
{
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return airlock_l_fail(L, cause, msg, err);
}

/* Waits until fd is ready for events; 0, or -errno. */
static int wait_fd(int fd, short events)
{
  struct pollfd p = {.fd = fd, .events = events};
  for (;;) {
    int n = poll(&p, 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (p.revents & POLLNVAL) return -EBADF;
    return 0; /* readable, writable, or hung up / in error: the next I/O says which */
  }
}

/* The frame reader's byte source: read(2), waiting out EAGAIN and EINTR. */
static ssize_t chan_read(void *ctx, void *buf, size_t n)
{
  int fd = *(const int *)ctx;
  for (;;) {
    ssize_t k = read(fd, buf, n);
    if (k >= 0) return k;
    int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      int rc = wait_fd(fd, POLLIN);
      if (rc < 0) return rc;
      continue;
    }
    return -e;
  }
}

static const char *file_kind(mode_t m)
{
  if (S_ISREG(m)) return "regular file";
  if (S_ISDIR(m)) return "directory";
  if (S_ISCHR(m)) return "character device";
  if (S_ISBLK(m)) return "block device";
  if (S_ISFIFO(m)) return "pipe";
  if (S_ISLNK(m)) return "symbolic link";
  return "file of unknown type";
}

/* 0 when fd is an open socket, else pushes the failure and returns its count. */
static int check_channel(lua_State *L, int fd)
{
  struct stat sb;
  if (fstat(fd, &sb) < 0) {
    int e = errno;
    if (e == EBADF)
      return call_fail(L, "channel", e,
                       "fd %d is not open: effects are asked of the parent over "
                       "fd %d, which `airlock exec` passes to the program it runs",
                       fd, fd);
    return call_fail(L, "channel", e, "cannot inspect fd %d: %s", fd, airlock_strerror(e));
  }
  if (!S_ISSOCK(sb.st_mode))
    return call_fail(L, "channel", ENOTSOCK,
                     "fd %d is a %s, not the airlock channel (a socket): "
                     "effects can only be asked by a program run under `airlock exec`",
                     fd, file_kind(sb.st_mode));
  return 0;
}

/* Reads the reply frame into st->in; 0, or pushes the failure and returns its count. */
static int read_reply(lua_State *L, call_state *st, int fd)
{
  int rc = airlock_frame_reader_pull(&st->in, chan_read, &fd);
  if (rc == AIRLOCK_FRAME_READY) return 0;
  switch (rc) {
    case AIRLOCK_FRAME_EOF:
      return call_fail(L, "channel", EPIPE,
                       "the parent closed fd %d without replying "
                       "(the run may have ended or been cancelled)",
                       fd);
    case -EMSGSIZE:
      return call_fail(L, "protocol", EMSGSIZE,
                       "the reply is %" PRIu32 " bytes, over the limit "
                       "of %" PRIu32 " bytes",
                       st->in.len, st->in.max);
    case -EPROTO:
      if (st->in.hdr_have == FRAME_HDR && st->in.len == 0)
        return call_fail(L, "protocol", EPROTO, "the parent sent an empty frame (length 0)");
      return call_fail(L, "protocol", EPROTO,
                       "the parent closed fd %d in the middle of the reply "
                       "(%" PRIu32 " of %" PRIu32 " bytes)",
                       fd, st->in.hdr_have == FRAME_HDR ? st->in.have + FRAME_HDR : st->in.hdr_have,
                       st->in.hdr_have == FRAME_HDR ? st->in.len + FRAME_HDR : FRAME_HDR);
    case -ENOMEM:
      return call_fail(L, "memory", ENOMEM, "no memory for a reply of %" PRIu32 " bytes", st->in.len);
    case -ECONNRESET:
      return call_fail(L, "channel", ECONNRESET, "the parent reset fd %d while the reply was awaited", fd);
    default: return call_fail(L, "channel", -rc, "reading the reply on fd %d: %s", fd, airlock_strerror(-rc));
  }
}

static int l_channel_call(lua_State *L)
{
  lua_settop(L, 4);
  lua_Integer fdi = luaL_optinteger(L, 1, AIRLOCK_CHANNEL_FD);
  size_t elen;
  const char *effect = luaL_checklstring(L, 2, &elen);
  lua_Integer max = luaL_optinteger(L, 4, AIRLOCK_FRAME_MAX_DEFAULT);
  luaL_argcheck(L, fdi >= 0 && fdi <= INT_MAX, 1, "must be a file descriptor");
  luaL_argcheck(L, max >= 1 && max <= (lua_Integer)AIRLOCK_FRAME_MAX_DEFAULT, 4, "must be from 1 to 16 MiB");
  int fd = (int)fdi;
  if (elen == 0) return call_fail(L, "usage", EINVAL, "the effect name is empty");
  if (elen > AIRLOCK_EFFECT_NAME_MAX)
    return call_fail(L, "usage", EINVAL, "the effect name is %zu bytes, over the limit of %d", elen,
                     AIRLOCK_EFFECT_NAME_MAX);
  int n = check_channel(L, fd);
  if (n) return n;

  call_state *st = lua_newuserdatauv(L, sizeof *st, 0);
  memset(st, 0, sizeof *st);
  msgpack_sbuffer_init(&st->out);
  airlock_frame_reader_init(&st->in, (uint32_t)max);
  msgpack_unpacked_init(&st->reply);
  luaL_setmetatable(L, CALL_STATE_MT);

  /* The call: {t = "call", id = 1, effect = effect, args = args}. */
  char err[256];
  msgpack_packer pk;
  msgpack_packer_init(&pk, st, capped_write);
  if (airlock_frame_begin(&st->out) < 0)
    return call_fail(L, "memory", ENOMEM, "no memory for the call frame");
  airlock_pack_call(&pk, CALL_ID, effect, elen);
  if (airlock_lua_pack(L, 3, &pk, "args", err, sizeof err) < 0 && !st->out_refused) {
    state_release(st);
    return call_fail(L, "args", EINVAL, "%s", err);
  }
  if (st->out_refused || airlock_frame_end(&st->out, AIRLOCK_FRAME_MAX_DEFAULT) < 0) {
    state_release(st);
    return call_fail(L, "args", EMSGSIZE, "the call is over the frame limit of %u MiB",
                     AIRLOCK_FRAME_MAX_DEFAULT >> 20);
  }
  int rc = airlock_frame_write_fd(fd, st->out.data + FRAME_HDR, st->out.size - FRAME_HDR);
  state_release(st); /* the frame is sent: its buffer may be large */
  if (rc == -EPIPE || rc == -ECONNRESET)
    return call_fail(L, "channel", -rc,
                     "the parent has closed fd %d (the run may have ended "
                     "or been cancelled)",
                     fd);
  if (rc < 0) return call_fail(L, "channel", -rc, "sending the call on fd %d: %s", fd, airlock_strerror(-rc));

  /* The reply: {t = "reply", id = 1, ok = value} or {..., err = message, code = word}. */
  n = read_reply(L, st, fd);
  if (n) {
    state_release(st);
    return n;
  }
  airlock_msg msg;
  rc = airlock_msg_decode(st->in.body, st->in.len, &st->reply, &msg, err, sizeof err);
  airlock_frame_reader_free(&st->in); /* the codec copied the body */
  if (rc < 0) {
    state_release(st);
    return call_fail(L, "protocol", EPROTO, "the parent's reply is malformed: %s", err);
  }
  if (msg.kind != AIRLOCK_MSG_REPLY) {
    state_release(st);
    return call_fail(L, "protocol", EPROTO, "expected a 'reply' frame from the parent, got '%s'",
                     airlock_msg_kind_name(msg.kind));
  }
  if (msg.id != CALL_ID) {
    uint64_t got = msg.id;
    state_release(st);
    return call_fail(L, "protocol", EPROTO,
                     "the reply is for call %" PRIu64 ", not for this "
                     "call (%u)",
                     got, CALL_ID);
  }
  if (msg.err != NULL) {
    lua_pushboolean(L, 0);
    lua_pushlstring(L, msg.err->via.str.ptr, msg.err->via.str.size);
    if (msg.code != NULL)
      lua_pushlstring(L, msg.code->via.str.ptr, msg.code->via.str.size);
    else
      lua_pushnil(L);
    state_release(st);
    return 3;
  }
  lua_pushboolean(L, 1);
  if (airlock_lua_push(L, msg.value, err, sizeof err) != 0) {
    state_release(st);
    return call_fail(L, "protocol", EPROTO, "the reply's value cannot be used: %s", err);
  }
  state_release(st);
  return 2;
}

void airlock_l_open_call(lua_State *L)
{
  static const luaL_Reg meta[] = {{"__gc", state_gc}, {NULL, NULL}};
  airlock_l_class(L, CALL_STATE_MT, NULL, meta);
  lua_pushcfunction(L, l_channel_call);
  lua_setfield(L, -2, "channel_call");
}
