/*
** channel.c -- the worker's end of fd 3: frames out, init and replies in.
** A channel that breaks, or carries anything but the awaited frame, ends the
** worker at once (exit 3): a guest never continues on a channel out of step.
*/
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "convert.h"
#include "worker.h"

/* SECURITY: the parent treats a frame over its limit as a protocol breach and
** kills the run; refusing here, before the frame grows past the limit, turns
** an oversized value into an error the guest can see and handle. */
static int capped_write(void *data, const char *buf, size_t len)
{
  worker *w = data;
  if (w->out_refused || len > AIRLOCK_FRAME_MAX_DEFAULT - w->out.size ||
      msgpack_sbuffer_write(&w->out, buf, len) != 0) {
    w->out_refused = 1;
    return -1;
  }
  return 0;
}

/* The spawner hands over a blocking socket; a non-blocking one would make the
** blocking reads below fail with EAGAIN, so it is made blocking once here. */
/* Notes waiting in w->notes past these go out at once, without the next
** frame; the buffer holds four batches, so a batch and the frame or note
** that follows it always fit. */
#define NOTES_BATCH_BYTES (16u << 10)
#define NOTES_BATCH_COUNT 256u
#define NOTES_CAPACITY    (4 * NOTES_BATCH_BYTES)

void worker_channel_open(worker *w)
{
  int fl = fcntl(AIRLOCK_CHANNEL_FD, F_GETFL);
  if (fl < 0)
    worker_die(WORKER_EXIT_CHANNEL, "fd %d is not open: airlock-worker is started by airlock",
               AIRLOCK_CHANNEL_FD);
  if ((fl & O_NONBLOCK) && fcntl(AIRLOCK_CHANNEL_FD, F_SETFL, fl & ~O_NONBLOCK) < 0)
    worker_die(WORKER_EXIT_CHANNEL, "cannot make fd %d blocking: %s", AIRLOCK_CHANNEL_FD, strerror(errno));
  msgpack_sbuffer_init(&w->out);
  msgpack_packer_init(&w->pk, w, capped_write);
  airlock_frame_reader_init(&w->in, AIRLOCK_FRAME_MAX_DEFAULT);
  msgpack_unpacked_init(&w->reply);
  /* The notes' buffer is allocated once, at its full size (NOTES_CAPACITY,
  ** below), and never grows: when notes go out (with a frame, a full batch,
  ** or at a CPU tick, whose moment is the machine's) then changes nothing
  ** the allocator does, so a replay's guest sees the addresses, and the
  ** pairs order, its recording saw. */
  msgpack_sbuffer_init(&w->notes);
  w->notes.data = malloc(NOTES_CAPACITY);
  if (w->notes.data == NULL) worker_die(WORKER_EXIT_INTERNAL, "out of memory for the notes' buffer");
  w->notes.alloc = NOTES_CAPACITY;
}

static const char *read_error(int rc)
{
  switch (rc) {
    case AIRLOCK_FRAME_EOF: return "the parent closed the channel";
    case AIRLOCK_FRAME_AGAIN: return "the channel is non-blocking";
    case -EMSGSIZE: return "frame over the size limit";
    case -EPROTO: return "empty or truncated frame";
    default: return strerror(-rc);
  }
}

/* Waits until the channel has bytes to read. A worker blocked in read(2) on
** its unix socket is woken twice per answer: once when the parent reads what
** the worker sent (the socket's write space wakes every waiter, readers too),
** and once for the answer itself. Waiting in poll for POLLIN sleeps through
** the first; on a machine whose wake-ups are dear (a VM) that is about a
** fifth more effects a second through one broker with 200 guests (airlock
** bench scale, four interleaved runs: +11% to +27%). An error or a hang-up is
** left to the read that follows, which says what it was. */
static void wait_readable(void)
{
  struct pollfd p = {.fd = AIRLOCK_CHANNEL_FD, .events = POLLIN};
  while (poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
}

void worker_channel_read_first(msgpack_unpacked *u, airlock_msg *msg, airlock_msg_kind want)
{
  airlock_frame_reader r;
  char err[256];
  const char *what = airlock_msg_kind_name(want);
  airlock_frame_reader_init(&r, WORKER_INIT_MAX);
  wait_readable();
  int rc = airlock_frame_read_fd(&r, AIRLOCK_CHANNEL_FD);
  if (rc != AIRLOCK_FRAME_READY) worker_die(WORKER_EXIT_CHANNEL, "reading %s: %s", what, read_error(rc));
  /* The parent says nothing more until ready (after init) or the first call
  ** (after start), so this reader (and what it read ahead) can go: anything
  ** past the frame would be a parent's bug. */
  if (airlock_frame_reader_buffered(&r) != 0)
    worker_die(WORKER_EXIT_BADINIT, "the parent sent more than the %s frame", what);
  /* The codec copies the body into u, so the reader can go at once. */
  rc = airlock_msg_decode(r.body, r.len, u, msg, err, sizeof err);
  airlock_frame_reader_free(&r);
  if (rc < 0) worker_die(WORKER_EXIT_BADINIT, "%s: %s", what, err);
  if (msg->kind != want)
    worker_die(WORKER_EXIT_BADINIT, "the frame is '%s', not '%s'", airlock_msg_kind_name(msg->kind), what);
}

msgpack_packer *worker_frame_begin(worker *w, airlock_msg_kind kind, uint32_t nfields)
{
  w->out_refused = 0;
  msgpack_sbuffer_clear(&w->out);
  airlock_pack_head(&w->pk, kind, nfields);
  return &w->pk;
}

/* Appends the frame in w->out, with its header, to the notes waiting; the
** caller has made sure it fits (notes_fit). */
static void notes_append(worker *w)
{
  uint8_t hdr[4] = {(uint8_t)(w->out.size >> 24), (uint8_t)(w->out.size >> 16), (uint8_t)(w->out.size >> 8),
                    (uint8_t)w->out.size};
  if (msgpack_sbuffer_write(&w->notes, (const char *)hdr, sizeof hdr) != 0 ||
      msgpack_sbuffer_write(&w->notes, w->out.data, w->out.size) != 0)
    worker_die(WORKER_EXIT_INTERNAL, "out of memory queueing a note");
  w->notes_n++;
}

static void notes_write(worker *w)
{
  int rc = airlock_frames_write_fd(AIRLOCK_CHANNEL_FD, w->notes.data, w->notes.size);
  if (rc < 0) worker_die(WORKER_EXIT_CHANNEL, "writing to fd %d: %s", AIRLOCK_CHANNEL_FD, strerror(-rc));
  msgpack_sbuffer_clear(&w->notes);
  w->notes_n = 0;
}

/* Whether the frame in w->out, with its header, fits beside the notes waiting. */
static int notes_fit(const worker *w)
{
  return w->out.size + 4 <= w->notes.alloc - w->notes.size;
}

void worker_notes_flush(worker *w)
{
  if (w->notes.size > 0) notes_write(w);
}

void worker_frame_send(worker *w)
{
  if (w->out_refused) worker_die(WORKER_EXIT_INTERNAL, "an outgoing frame was cut short");
  if (w->notes.size > 0) { /* the notes first, in the same write when the frame fits */
    if (notes_fit(w)) {
      notes_append(w);
      notes_write(w);
      return;
    }
    notes_write(w);
  }
  int rc = airlock_frame_write_fd(AIRLOCK_CHANNEL_FD, w->out.data, w->out.size);
  if (rc < 0) worker_die(WORKER_EXIT_CHANNEL, "writing to fd %d: %s", AIRLOCK_CHANNEL_FD, strerror(-rc));
}

msgpack_packer *worker_note_begin(worker *w, const char *effect, size_t len)
{
  w->out_refused = 0;
  msgpack_sbuffer_clear(&w->out);
  airlock_pack_note(&w->pk, w->last_id + 1, effect, len);
  return &w->pk;
}

int worker_note_finish(lua_State *L, worker *w)
{
  if (w->out_refused) { /* without L (a warning), the note is dropped */
    if (L == NULL) return -1;
    return luaL_error(L, "note too large to send (frames are limited to %d MiB)",
                      (int)(AIRLOCK_FRAME_MAX_DEFAULT >> 20));
  }
  w->last_id++;
  if (!notes_fit(w)) worker_notes_flush(w);
  if (!notes_fit(w)) { /* larger than the whole buffer: it goes out on its own */
    int rc = airlock_frame_write_fd(AIRLOCK_CHANNEL_FD, w->out.data, w->out.size);
    if (rc < 0) worker_die(WORKER_EXIT_CHANNEL, "writing to fd %d: %s", AIRLOCK_CHANNEL_FD, strerror(-rc));
    return 0;
  }
  notes_append(w);
  if (w->notes.size >= NOTES_BATCH_BYTES || w->notes_n >= NOTES_BATCH_COUNT) notes_write(w);
  return 0;
}

/* The id is taken only when the call is sent, so a call that fails while it
** is being packed leaves no gap in the sequence. */
msgpack_packer *worker_call_begin(worker *w, const char *effect, size_t len)
{
  w->out_refused = 0;
  msgpack_sbuffer_clear(&w->out);
  msgpack_packer *pk = &w->pk;
  airlock_pack_call(pk, w->last_id + 1, effect, len);
  return pk;
}

/* Reads the next frame, which must be the reply to call id. */
static void await_reply(worker *w, uint64_t id, airlock_msg *msg)
{
  char err[256];
  /* the reply may already be buffered with an earlier frame's bytes */
  if (airlock_frame_reader_buffered(&w->in) == 0) wait_readable();
  int rc = airlock_frame_read_fd(&w->in, AIRLOCK_CHANNEL_FD);
  if (rc != AIRLOCK_FRAME_READY)
    worker_die(WORKER_EXIT_CHANNEL, "waiting for the reply to call %" PRIu64 ": %s", id, read_error(rc));
  rc = airlock_msg_decode(w->in.body, w->in.len, &w->reply, msg, err, sizeof err);
  airlock_frame_reader_reset(&w->in);
  if (rc < 0) worker_die(WORKER_EXIT_CHANNEL, "waiting for the reply to call %" PRIu64 ": %s", id, err);
  if (msg->kind != AIRLOCK_MSG_REPLY)
    worker_die(WORKER_EXIT_CHANNEL, "waiting for the reply to call %" PRIu64 ", got '%s'", id,
               airlock_msg_kind_name(msg->kind));
  if (msg->id != id)
    worker_die(WORKER_EXIT_CHANNEL,
               "waiting for the reply to call %" PRIu64 ", got the reply to call %" PRIu64, id, msg->id);
  /* The host answered a call it deferred: the guest's turn ends here, and the
  ** next one starts with a whole limits.turn_instructions (see limits.c). */
  if (msg->turn) {
    w->turn_start = w->executed;
    worker_cpu_turn(w);
  }
}

/* Registry key of the guard worker_call_finish holds while a call is out. */
static const char GUARD_KEY = 'g';

/* __close of that guard: the collector runs again. */
static int gc_restart(lua_State *L)
{
  lua_gc(L, LUA_GCRESTART);
  return 0;
}

/* From the moment the call leaves until its reply is a Lua value, the
** collector is stopped: a collection step could run a guest's __gc, and an
** effect that finalizer made (a print) would decode its own reply over this
** one while it is being read. A to-be-closed guard restarts the collector
** however this ends, with a value or with an error unwinding past the guest's
** C function. Inside a finalizer lua_gc does nothing, and needs nothing: Lua
** runs no collection step there. An allocation that fails meanwhile still
** gets Lua's emergency collection, which runs no finalizer. */
static int stop_collector(lua_State *L)
{
  luaL_checkstack(L, 2, NULL);
  lua_gc(L, LUA_GCSTOP);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &GUARD_KEY);
  lua_toclose(L, -1);
  return lua_gettop(L);
}

/* The guard, made once with the runtime: one table, its own metatable. */
void worker_channel_lua(lua_State *L)
{
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, gc_restart);
  lua_setfield(L, -2, "__close");
  lua_pushvalue(L, -1);
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &GUARD_KEY);
}

int worker_call_finish(lua_State *L, worker *w)
{
  if (w->out_refused)
    return luaL_error(L, "call too large to send (frames are limited to %d MiB)",
                      (int)(AIRLOCK_FRAME_MAX_DEFAULT >> 20));
  int guard = stop_collector(L);
  worker_frame_send(w);
  airlock_msg msg;
  await_reply(w, ++w->last_id, &msg);
  if (msg.err != NULL) {
    /* The effect's message is the error value itself, with no position
    ** prefix: the guest sees exactly what the policy said. */
    const msgpack_object_str *e = &msg.err->via.str;
    if (msg.code != NULL && msg.code->via.str.size == 6 && memcmp(msg.code->via.str.ptr, "denied", 6) == 0)
      worker_note_denied(L, e->ptr, e->size);
    lua_pushlstring(L, e->ptr, e->size);
    return lua_error(L);
  }
  char err[128];
  if (airlock_lua_push(L, msg.value, err, sizeof err) != 0)
    return luaL_error(L, "unusable reply to call %I: %s", (lua_Integer)w->last_id, err);
  lua_closeslot(L, guard);
  lua_remove(L, guard);
  return 1;
}

int worker_call_finish_quiet(worker *w)
{
  if (w->out_refused) return -1;
  worker_frame_send(w);
  airlock_msg msg;
  await_reply(w, ++w->last_id, &msg);
  return msg.err != NULL ? -1 : 0;
}

/* After the final frame (done or pause): wait for the parent to hang up (it
** kills the process group once it has the final frame) and only then exit.
** So the parent always finds this process alive, and its filter in place,
** when it checks from outside what ready reported; an exit right after done
** would leave it a zombie whose confinement can no longer be seen. */
void worker_end(worker *w)
{
  (void)w;
  char byte;
  while (read(AIRLOCK_CHANNEL_FD, &byte, 1) > 0) {
  }
  _exit(WORKER_EXIT_DONE);
}
