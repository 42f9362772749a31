/*
** test_codec.c -- tests for core/cause.c, core/frame.c and core/codec.c:
** frames in every chunking, hostile lengths, each message kind, and fuzzing.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock.h"
#include "check.h"

/* Deterministic, so a failure reproduces. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* ------------------------------------------------------------------ a byte source */

/* Hands out data[0..avail) in reads shaped by the test, then EOF or EAGAIN. */
struct feed {
  const uint8_t *data;
  size_t avail, pos;
  size_t chunk; /* largest single read; 0: whatever the reader asks for */
  int random;   /* read a random size between 1 and the largest allowed */
  int eof;      /* at avail: 1 -> end of stream, 0 -> EAGAIN */
  int eintr;    /* fail every other call with EINTR */
  unsigned calls;
};

static ssize_t feed_read(void *ctx, void *buf, size_t n)
{
  struct feed *f = ctx;
  if (f->eintr && f->calls++ % 2 == 0) return -EINTR;
  if (f->pos == f->avail) return f->eof ? 0 : -EAGAIN;
  size_t k = f->avail - f->pos;
  if (k > n) k = n;
  if (f->chunk && k > f->chunk) k = f->chunk;
  if (f->random) k = 1 + (size_t)(rnd() % k);
  memcpy(buf, f->data + f->pos, k);
  f->pos += k;
  return (ssize_t)k;
}

static void put_frame(msgpack_sbuffer *sb, const void *body, uint32_t len)
{
  uint8_t h[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
  msgpack_sbuffer_write(sb, (const char *)h, 4);
  msgpack_sbuffer_write(sb, body, len);
}

static uint8_t pattern(size_t i, size_t seed)
{
  return (uint8_t)(i * 7 + seed * 13 + (i >> 8));
}

/* ------------------------------------------------------------------ causes */

static void test_causes(void)
{
  for (int c = 0; c < AIRLOCK_CAUSE_COUNT_; c++)
    CHECK(airlock_cause_from_name(airlock_cause_name((airlock_cause)c)) == c);
  CHECK(strcmp(airlock_cause_name(AIRLOCK_CAUSE_OK), "ok") == 0);
  CHECK(strcmp(airlock_cause_name(AIRLOCK_CAUSE_PROTOCOL), "protocol") == 0);
  CHECK(strcmp(airlock_cause_name(AIRLOCK_CAUSE_CANCELLED), "cancelled") == 0);
  CHECK(strcmp(airlock_cause_name(AIRLOCK_CAUSE_COUNT_), "unknown") == 0);
  CHECK(strcmp(airlock_cause_name((airlock_cause)-1), "unknown") == 0);
  CHECK(airlock_cause_from_name("nope") == -1);
  CHECK(airlock_cause_from_name("") == -1);
  CHECK(airlock_cause_from_name(NULL) == -1);

  char buf[32];
  CHECK(strcmp(airlock_signal_name(SIGSEGV, buf, sizeof buf), "SEGV") == 0);
  CHECK(strcmp(airlock_signal_name(SIGKILL, buf, sizeof buf), "KILL") == 0);
  CHECK(strcmp(airlock_signal_name(SIGSYS, buf, sizeof buf), "SYS") == 0);
  CHECK(strcmp(airlock_signal_name(SIGXCPU, buf, sizeof buf), "XCPU") == 0);
  const char *s = airlock_signal_name(9999, buf, sizeof buf);
  CHECK(s == buf && strcmp(s, "signal 9999") == 0);

  double t1 = airlock_now_ms(), t2 = airlock_now_ms();
  CHECK(t1 > 0 && t2 >= t1);
}

/* ------------------------------------------------------------------ frame reader */

static void test_chunkings(void)
{
  static const uint32_t sizes[] = {1, 5, 300, 70000, 200000, 3, 65536, 65537};
  const size_t nframes = sizeof sizes / sizeof sizes[0];
  msgpack_sbuffer stream;
  msgpack_sbuffer_init(&stream);
  size_t ends[sizeof sizes / sizeof sizes[0]];
  for (size_t i = 0; i < nframes; i++) {
    uint8_t *body = malloc(sizes[i]);
    for (size_t j = 0; j < sizes[i]; j++) body[j] = pattern(j, i);
    put_frame(&stream, body, sizes[i]);
    ends[i] = stream.size;
    free(body);
  }

  /* 1 byte at a time, random sizes, random with EINTR, everything at once */
  static const struct {
    size_t chunk;
    int random, eintr;
  } modes[] = {
      {1, 0, 0}, {0, 1, 0}, {0, 1, 1}, {0, 0, 0}, {4096, 0, 1},
  };
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    struct feed f = {.data = (const uint8_t *)stream.data,
                     .avail = stream.size,
                     .eof = 1,
                     .chunk = modes[m].chunk,
                     .random = modes[m].random,
                     .eintr = modes[m].eintr};
    airlock_frame_reader r;
    airlock_frame_reader_init(&r, 0);
    int bad = 0;
    for (size_t i = 0; i < nframes; i++) {
      int rc = airlock_frame_reader_pull(&r, feed_read, &f);
      if (rc != AIRLOCK_FRAME_READY || r.len != sizes[i]) {
        bad++;
        break;
      }
      for (size_t j = 0; j < r.len; j++) bad += r.body[j] != pattern(j, i);
      /* what the reader took from the source is this frame and at most a
      ** read-ahead's worth of the next, which it holds for the next pull */
      bad += f.pos - airlock_frame_reader_buffered(&r) != ends[i];
      bad += airlock_frame_reader_buffered(&r) > AIRLOCK_FRAME_AHEAD;
      airlock_frame_reader_reset(&r);
    }
    CHECK(bad == 0);
    CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_EOF);
    airlock_frame_reader_free(&r);
  }
  msgpack_sbuffer_destroy(&stream);
}

static void test_again_and_eof(void)
{
  uint8_t s[14] = {0, 0, 0, 10};
  for (int i = 0; i < 10; i++) s[4 + i] = (uint8_t)(i + 1);
  airlock_frame_reader r;
  airlock_frame_reader_init(&r, 0);

  struct feed f = {.data = s, .avail = 2};
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_AGAIN);
  CHECK(r.hdr_have == 2);
  f.avail = 7;
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_AGAIN);
  CHECK(r.len == 10 && r.have == 3);
  f.avail = 14;
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_READY);
  CHECK(r.body[0] == 1 && r.body[9] == 10);
  /* READY is stable until the caller resets */
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_READY);
  airlock_frame_reader_reset(&r);
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_AGAIN);
  f.eof = 1;
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_EOF);
  airlock_frame_reader_reset(&r);

  struct feed empty = {.data = s, .avail = 0, .eof = 1};
  CHECK(airlock_frame_reader_pull(&r, feed_read, &empty) == AIRLOCK_FRAME_EOF);
  struct feed mid_hdr = {.data = s, .avail = 2, .eof = 1};
  CHECK(airlock_frame_reader_pull(&r, feed_read, &mid_hdr) == -EPROTO);
  airlock_frame_reader_reset(&r);
  struct feed mid_body = {.data = s, .avail = 7, .eof = 1};
  CHECK(airlock_frame_reader_pull(&r, feed_read, &mid_body) == -EPROTO);
  airlock_frame_reader_reset(&r);

  airlock_frame_reader_free(&r);
  airlock_frame_reader_free(&r); /* idempotent */
  CHECK(r.body == NULL && r.cap == 0);
}

/* A source over a fixed buffer that counts its calls and what it was asked. */
struct counted {
  const uint8_t *data;
  size_t len, pos;
  int calls;
  size_t asked_max;
};
static ssize_t counted_read(void *ctx, void *buf, size_t n)
{
  struct counted *c = ctx;
  c->calls++;
  if (n > c->asked_max) c->asked_max = n;
  if (c->pos == c->len) return -EAGAIN;
  size_t k = c->len - c->pos < n ? c->len - c->pos : n;
  memcpy(buf, c->data + c->pos, k);
  c->pos += k;
  return (ssize_t)k;
}

/* Small frames come header and body in one read, and what follows waits in
** the reader; a large frame is read straight into its body. */
static void test_read_ahead(void)
{
  uint8_t two[28] = {0, 0, 0, 10};
  memset(two + 4, 'a', 10);
  two[14] = 0, two[15] = 0, two[16] = 0, two[17] = 10;
  memset(two + 18, 'b', 10);
  struct counted c = {.data = two, .len = sizeof two};
  airlock_frame_reader r;
  airlock_frame_reader_init(&r, 0);
  CHECK(airlock_frame_reader_pull(&r, counted_read, &c) == AIRLOCK_FRAME_READY);
  CHECK(c.calls == 1 && r.len == 10 && r.body[0] == 'a');
  CHECK(airlock_frame_reader_buffered(&r) == 14 && !airlock_frame_reader_drained(&r));
  airlock_frame_reader_reset(&r);
  CHECK(airlock_frame_reader_pull(&r, counted_read, &c) == AIRLOCK_FRAME_READY);
  CHECK(c.calls == 1 && r.len == 10 && r.body[9] == 'b'); /* no second read */
  /* The one read returned less than asked: the source was empty then. */
  CHECK(airlock_frame_reader_buffered(&r) == 0 && airlock_frame_reader_drained(&r));
  airlock_frame_reader_reset(&r);
  CHECK(airlock_frame_reader_pull(&r, counted_read, &c) == AIRLOCK_FRAME_AGAIN && c.calls == 2);
  airlock_frame_reader_free(&r);

  /* 100000 bytes of body: after the first read-ahead, the source is asked
  ** for at most the frame's remaining bytes, never for the next frame's. */
  size_t big = 100000;
  uint8_t *s = calloc(1, 4 + big + 14);
  s[0] = 0, s[1] = (uint8_t)(big >> 16), s[2] = (uint8_t)(big >> 8), s[3] = (uint8_t)big;
  s[4 + big + 3] = 10;
  struct counted cb = {.data = s, .len = 4 + big + 14};
  airlock_frame_reader_init(&r, 0);
  CHECK(airlock_frame_reader_pull(&r, counted_read, &cb) == AIRLOCK_FRAME_READY && r.len == big);
  CHECK(cb.pos == 4 + big && airlock_frame_reader_buffered(&r) == 0 && cb.asked_max <= big);
  airlock_frame_reader_reset(&r);
  CHECK(airlock_frame_reader_pull(&r, counted_read, &cb) == AIRLOCK_FRAME_READY && r.len == 10);
  airlock_frame_reader_free(&r);
  free(s);
}

static ssize_t eio_read(void *ctx, void *buf, size_t n)
{
  (void)ctx, (void)buf, (void)n;
  return -EIO;
}

static void test_lengths(void)
{
  airlock_frame_reader r;
  airlock_frame_reader_init(&r, 0);
  CHECK(r.max == AIRLOCK_FRAME_MAX_DEFAULT);
  CHECK(airlock_frame_reader_pull(&r, eio_read, NULL) == -EIO);
  airlock_frame_reader_free(&r);

  uint8_t zero[4] = {0};
  struct feed fz = {.data = zero, .avail = 4};
  airlock_frame_reader_init(&r, 0);
  CHECK(airlock_frame_reader_pull(&r, feed_read, &fz) == -EPROTO);
  CHECK(r.cap == 0);
  airlock_frame_reader_free(&r);

  /* max accepted, max + 1 refused before any allocation */
  uint8_t big[4 + 101] = {0, 0, 0, 100};
  airlock_frame_reader_init(&r, 100);
  struct feed fm = {.data = big, .avail = 104};
  CHECK(airlock_frame_reader_pull(&r, feed_read, &fm) == AIRLOCK_FRAME_READY && r.len == 100);
  airlock_frame_reader_reset(&r);
  big[3] = 101;
  struct feed fm1 = {.data = big, .avail = sizeof big};
  airlock_frame_reader_free(&r);
  airlock_frame_reader_init(&r, 100);
  CHECK(airlock_frame_reader_pull(&r, feed_read, &fm1) == -EMSGSIZE);
  CHECK(r.cap == 0 && fm1.pos - airlock_frame_reader_buffered(&r) == 4);
  airlock_frame_reader_free(&r);

  /* a 4 GiB claim costs nothing, and the error sticks */
  uint8_t huge[8] = {0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4};
  struct feed fh = {.data = huge, .avail = sizeof huge};
  airlock_frame_reader_init(&r, 0);
  CHECK(airlock_frame_reader_pull(&r, feed_read, &fh) == -EMSGSIZE);
  CHECK(r.cap == 0 && r.body == NULL);
  CHECK(airlock_frame_reader_pull(&r, feed_read, &fh) == -EMSGSIZE);
  CHECK(r.cap == 0 && fh.pos - airlock_frame_reader_buffered(&r) == 4);
  airlock_frame_reader_free(&r);

  /* a 16 MiB claim followed by 10 bytes allocates at most 64 KiB, and the
  ** buffer then grows only in step with the bytes that arrive */
  const size_t total = 4 + 200000;
  uint8_t *claim = calloc(1, total);
  claim[0] = 0x01; /* 0x01000000 = 16 MiB, exactly the default max */
  struct feed fc = {.data = claim, .avail = 14};
  airlock_frame_reader_init(&r, 0);
  CHECK(airlock_frame_reader_pull(&r, feed_read, &fc) == AIRLOCK_FRAME_AGAIN);
  CHECK(r.len == (16u << 20) && r.have == 10);
  CHECK(r.cap > 0 && r.cap <= (64u << 10));
  fc.avail = total;
  CHECK(airlock_frame_reader_pull(&r, feed_read, &fc) == AIRLOCK_FRAME_AGAIN);
  CHECK(r.have == 200000 && r.cap >= r.have && r.cap <= 2 * r.have);
  airlock_frame_reader_free(&r);
  claim[3] = 1; /* 16 MiB + 1 */
  struct feed fc1 = {.data = claim, .avail = total};
  airlock_frame_reader_init(&r, 0);
  CHECK(airlock_frame_reader_pull(&r, feed_read, &fc1) == -EMSGSIZE && r.cap == 0);
  airlock_frame_reader_free(&r);
  free(claim);
}

static void test_reset_releases(void)
{
  msgpack_sbuffer s;
  msgpack_sbuffer_init(&s);
  uint8_t *body = calloc(1, 2u << 20);
  put_frame(&s, body, 1000);
  put_frame(&s, body, 500);
  put_frame(&s, body, 2u << 20);
  put_frame(&s, body, 10);
  free(body);

  struct feed f = {.data = (const uint8_t *)s.data, .avail = s.size};
  airlock_frame_reader r;
  airlock_frame_reader_init(&r, 0);
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_READY && r.cap == 1000);
  airlock_frame_reader_reset(&r);
  CHECK(r.cap == 1000 && r.body != NULL); /* small buffers are kept */
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_READY && r.cap == 1000);
  airlock_frame_reader_reset(&r);
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_READY);
  CHECK(r.len == (2u << 20) && r.cap == (2u << 20));
  airlock_frame_reader_reset(&r);
  CHECK(r.cap == 0 && r.body == NULL); /* big buffers are not */
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_READY && r.len == 10);
  airlock_frame_reader_free(&r);
  msgpack_sbuffer_destroy(&s);
}

/* ------------------------------------------------------------------ frame writer */

static int write_pattern(int fd, size_t len, size_t seed)
{
  uint8_t *b = malloc(len);
  for (size_t i = 0; i < len; i++) b[i] = pattern(i, seed);
  int rc = airlock_frame_write_fd(fd, b, len);
  free(b);
  return rc;
}

/* Writes the sizes' frames from a child, its end blocking or not, while this
** side reads them back (after a pause, so a non-blocking writer meets a full
** socket buffer and must wait for room rather than fail with EAGAIN). */
static void write_fd_round(int nonblocking)
{
  /* 3 MiB is far beyond the socket buffer: short writes must be resumed */
  static const size_t sizes[] = {1, 1000, 3u << 20, 7};
  const size_t n = sizeof sizes / sizeof sizes[0];
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    if (nonblocking && fcntl(sv[1], F_SETFL, O_NONBLOCK) < 0) _exit(2);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad |= write_pattern(sv[1], sizes[i], i) != 0;
    _exit(bad);
  }
  close(sv[1]);
  if (nonblocking) {
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  airlock_frame_reader r;
  airlock_frame_reader_init(&r, 0);
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (airlock_frame_read_fd(&r, sv[0]) != AIRLOCK_FRAME_READY || r.len != sizes[i]) {
      bad++;
      break;
    }
    for (size_t j = 0; j < r.len; j++) bad += r.body[j] != pattern(j, i);
    airlock_frame_reader_reset(&r);
  }
  CHECK(bad == 0);
  CHECK(airlock_frame_read_fd(&r, sv[0]) == AIRLOCK_FRAME_EOF);
  int status = -1;
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(sv[0]);
  airlock_frame_reader_free(&r);
}

static void test_write_fd(void)
{
  write_fd_round(0);
  write_fd_round(1);
  int sv[2];
  airlock_frame_reader r;
  airlock_frame_reader_init(&r, 0);

  /* a dead peer is -EPIPE, not a SIGPIPE that kills this process */
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  close(sv[1]);
  CHECK(airlock_frame_write_fd(sv[0], "x", 1) == -EPIPE);
  close(sv[0]);

  /* non-blocking and empty: AGAIN */
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
  CHECK(airlock_frame_read_fd(&r, sv[0]) == AIRLOCK_FRAME_AGAIN);
  close(sv[0]);
  close(sv[1]);

  /* a pipe is not a socket: the writer falls back to writev */
  int p[2];
  CHECK(pipe(p) == 0);
  CHECK(airlock_frame_write_fd(p[1], "hello", 5) == 0);
  CHECK(airlock_frame_read_fd(&r, p[0]) == AIRLOCK_FRAME_READY);
  CHECK(r.len == 5 && memcmp(r.body, "hello", 5) == 0);
  airlock_frame_reader_reset(&r);
  close(p[1]);
  CHECK(airlock_frame_read_fd(&r, p[0]) == AIRLOCK_FRAME_EOF);
  close(p[0]);
  airlock_frame_reader_free(&r);

  CHECK(airlock_frame_write_fd(1, "", 0) == -EMSGSIZE);
  CHECK(airlock_frame_write_fd(1, "x", (size_t)UINT32_MAX + 1) == -EMSGSIZE);
  CHECK(airlock_frame_write_fd(-1, "x", 1) == -EBADF);
}

/* ------------------------------------------------------------------ codec helpers */

static msgpack_sbuffer sb;
static msgpack_packer pk;
static msgpack_unpacked u;
static airlock_msg m;
static char err[256];

static void start(uint32_t nfields)
{
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_map(&pk, nfields);
}

static void key(const char *k)
{
  airlock_pack_cstr(&pk, k);
}
static void kv_str(const char *k, const char *v)
{
  key(k);
  airlock_pack_cstr(&pk, v);
}
static void kv_int(const char *k, int64_t v)
{
  key(k);
  msgpack_pack_int64(&pk, v);
}

static int decode(void)
{
  err[0] = '\0';
  return airlock_msg_decode(sb.data, sb.size, &u, &m, err, sizeof err);
}

static int check_bytes(const void *b, size_t n)
{
  err[0] = '\0';
  return airlock_msg_check(b, n, err, sizeof err);
}

/* The decode must fail with -EPROTO and a message containing needle. */
static void expect_reject(const char *needle, int line)
{
  int rc = decode();
  if (rc != -EPROTO || strstr(err, needle) == NULL) {
    failed++;
    fprintf(stderr, "%s:%d: expected rejection with \"%s\", got rc=%d \"%s\"\n", __FILE__, line, needle, rc,
            err);
  } else {
    passed++;
  }
}
#define REJECT(needle) expect_reject(needle, __LINE__)

static int str_is(const msgpack_object *o, const char *s)
{
  return o != NULL && o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
         memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

/* ------------------------------------------------------------------ codec: kinds */

static void test_kinds(void)
{
  start(9);
  kv_str("t", "init");
  kv_int("v", 1);
  kv_int("run", 3);
  key("guest");
  msgpack_pack_map(&pk, 2);
  kv_str("name", "g");
  kv_str("source", "return 1");
  key("input");
  msgpack_pack_nil(&pk);
  kv_int("seed", 42);
  key("limits");
  msgpack_pack_map(&pk, 3);
  kv_int("instructions", 0);
  kv_int("memory", 1 << 20);
  kv_int("output", 0);
  key("effects");
  msgpack_pack_array(&pk, 1);
  airlock_pack_cstr(&pk, "fs.read");
  key("confine");
  msgpack_pack_map(&pk, 0);
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_INIT && m.version == 1 && m.value == &u.data);
  const msgpack_object *seed = airlock_msg_field(m.value, "seed");
  CHECK(seed != NULL && seed->type == MSGPACK_OBJECT_POSITIVE_INTEGER && seed->via.u64 == 42);
  CHECK(str_is(airlock_msg_field(airlock_msg_field(m.value, "guest"), "source"), "return 1"));

  start(3);
  kv_str("t", "ready");
  kv_int("v", 1);
  key("confined");
  msgpack_pack_map(&pk, 1);
  kv_str("seccomp", "applied");
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_READY && m.version == 1);
  CHECK(str_is(airlock_msg_field(m.value, "seccomp"), "applied"));

  start(1);
  kv_str("t", "ready");
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_READY && m.version == 0 && m.value == NULL);

  start(4);
  kv_str("t", "call");
  kv_int("id", 1);
  kv_str("effect", "fs.read");
  key("args");
  msgpack_pack_map(&pk, 1);
  kv_str("path", "/x");
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_CALL && m.id == 1);
  CHECK(m.effect_len == 7 && memcmp(m.effect, "fs.read", 7) == 0);
  CHECK(str_is(airlock_msg_field(m.value, "path"), "/x"));
  /* objects live as long as u, not as long as the frame bytes */
  memset(sb.data, 0xaa, sb.size);
  CHECK(memcmp(m.effect, "fs.read", 7) == 0);
  CHECK(str_is(airlock_msg_field(m.value, "path"), "/x"));

  start(4);
  kv_str("t", "call");
  kv_int("id", 2);
  kv_str("effect", "clock");
  key("extra");
  msgpack_pack_array(&pk, 2);
  msgpack_pack_true(&pk);
  msgpack_pack_false(&pk);
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_CALL && m.id == 2 && m.value != NULL);
  CHECK(m.value->type == MSGPACK_OBJECT_NIL); /* absent args read as nil */

  /* A note is a call without an answer: the same fields, the same rules. */
  start(4);
  kv_str("t", "note");
  kv_int("id", 3);
  kv_str("effect", "move");
  key("args");
  msgpack_pack_int(&pk, 9);
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_NOTE && m.id == 3 && m.effect_len == 4);
  CHECK(m.value != NULL && m.value->type == MSGPACK_OBJECT_POSITIVE_INTEGER && m.value->via.u64 == 9);
  CHECK(strcmp(airlock_msg_kind_name(AIRLOCK_MSG_NOTE), "note") == 0);
  start(2); /* no id: refused, as for a call */
  kv_str("t", "note");
  kv_str("effect", "move");
  CHECK(decode() < 0);
  start(3); /* no effect */
  kv_str("t", "note");
  kv_int("id", 4);
  key("args");
  msgpack_pack_nil(&pk);
  CHECK(decode() < 0);

  start(3);
  kv_str("t", "reply");
  kv_int("id", 5);
  kv_int("ok", 42);
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_REPLY && m.id == 5 && m.err == NULL && m.code == NULL);
  CHECK(m.value != NULL && m.value->type == MSGPACK_OBJECT_POSITIVE_INTEGER);
  CHECK(m.value->via.u64 == 42);

  start(4);
  kv_str("t", "reply");
  kv_int("id", 6);
  kv_str("err", "refused");
  kv_str("code", "denied");
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_REPLY && m.id == 6 && m.value == NULL);
  CHECK(str_is(m.err, "refused") && str_is(m.code, "denied"));

  start(2);
  kv_str("t", "pause");
  kv_str("prompt", "name?");
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_PAUSE && str_is(m.value, "name?"));
  start(1);
  kv_str("t", "pause");
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_PAUSE && m.value == NULL);

  start(2);
  kv_str("t", "done");
  key("ok");
  msgpack_pack_nil(&pk);
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_DONE && m.value != NULL && m.value->type == MSGPACK_OBJECT_NIL);
  CHECK(m.err == NULL);

  start(2);
  kv_str("t", "done");
  key("err");
  msgpack_pack_map(&pk, 3);
  kv_str("message", "boom");
  kv_str("traceback", "");
  kv_str("cause", "error");
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_DONE && m.value == NULL);
  CHECK(str_is(airlock_msg_field(m.err, "message"), "boom"));

  /* binary-safe strings */
  start(2);
  kv_str("t", "pause");
  key("prompt");
  airlock_pack_str(&pk, "a\0b", 3);
  CHECK(decode() == 0);
  CHECK(m.value->type == MSGPACK_OBJECT_STR && m.value->via.str.size == 3);

  CHECK(strcmp(airlock_msg_kind_name(AIRLOCK_MSG_CALL), "call") == 0);
  CHECK(strcmp(airlock_msg_kind_name(AIRLOCK_MSG_DONE), "done") == 0);
  CHECK(strcmp(airlock_msg_kind_name((airlock_msg_kind)0), "?") == 0);
  CHECK(strcmp(airlock_msg_kind_name((airlock_msg_kind)99), "?") == 0);
  CHECK(airlock_msg_field(NULL, "t") == NULL);
  CHECK(airlock_msg_field(m.value, "t") == NULL); /* not a map */

  /* done's started: the worker's clock at the guest's first instruction */
  start(3);
  kv_str("t", "done");
  kv_int("started", 123456789);
  key("ok");
  msgpack_pack_nil(&pk);
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_DONE && m.started == 123456789);
  start(2);
  kv_str("t", "done");
  key("ok");
  msgpack_pack_nil(&pk);
  CHECK(decode() == 0 && m.started == 0);

  /* start: a prepared worker's run */
  start(4);
  kv_str("t", "start");
  kv_int("v", 1);
  kv_int("run", 7);
  key("guest");
  msgpack_pack_map(&pk, 1);
  kv_str("source", "return 1");
  CHECK(decode() == 0);
  CHECK(m.kind == AIRLOCK_MSG_START && m.version == 1 && m.value == &u.data);
  CHECK(strcmp(airlock_msg_kind_name(AIRLOCK_MSG_START), "start") == 0);
}

/* ------------------------------------------------------------------ codec: violations */

static void call_with_id(void (*pack_id)(void))
{
  start(3);
  kv_str("t", "call");
  key("id");
  pack_id();
  kv_str("effect", "x");
}
static void id_zero(void)
{
  msgpack_pack_uint64(&pk, 0);
}
static void id_negative(void)
{
  msgpack_pack_int64(&pk, -3);
}
static void id_string(void)
{
  airlock_pack_cstr(&pk, "1");
}
static void id_float(void)
{
  msgpack_pack_double(&pk, 1.0);
}

static void test_violations(void)
{
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 1);
  airlock_pack_cstr(&pk, "t");
  REJECT("frame is not a msgpack map (got array)");

  start(2);
  msgpack_pack_int(&pk, 1);
  msgpack_pack_int(&pk, 2);
  kv_str("t", "call");
  REJECT("message key #1 is not a string (got integer)");

  start(1);
  kv_int("id", 1);
  REJECT("no field 't'");
  start(1);
  kv_int("t", 1);
  REJECT("field 't' must be a string (got integer)");
  start(1);
  kv_str("t", "foo");
  REJECT("unknown message kind 'foo'");
  start(1);
  kv_str("t", "a\nb\x1b");
  REJECT("unknown message kind 'a?b?'");
  start(2);
  kv_str("t", "call");
  kv_str("t", "done");
  REJECT("duplicate field 't'");

  start(2);
  kv_str("t", "call");
  kv_str("effect", "x");
  REJECT("call: missing field 'id'");
  call_with_id(id_zero);
  REJECT("call: field 'id' must be a positive integer (got 0)");
  call_with_id(id_negative);
  REJECT("call: field 'id' must be a positive integer (got -3)");
  call_with_id(id_string);
  REJECT("call: field 'id' must be a positive integer (got string)");
  call_with_id(id_float);
  REJECT("call: field 'id' must be a positive integer (got float)");

  start(2);
  kv_str("t", "call");
  kv_int("id", 1);
  REJECT("call: missing field 'effect'");
  start(3);
  kv_str("t", "call");
  kv_int("id", 1);
  kv_int("effect", 7);
  CHECK(decode() == -EPROTO);
  CHECK(strcmp(err, "call: field 'effect' must be a string (got integer)") == 0);
  start(3);
  kv_str("t", "call");
  kv_int("id", 1);
  kv_str("effect", "");
  REJECT("call: field 'effect' must not be empty");

  char name[AIRLOCK_EFFECT_NAME_MAX + 2];
  memset(name, 'e', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  start(3);
  kv_str("t", "call");
  kv_int("id", 1);
  kv_str("effect", name);
  REJECT("call: field 'effect' is 257 bytes");
  name[AIRLOCK_EFFECT_NAME_MAX] = '\0';
  start(3);
  kv_str("t", "call");
  kv_int("id", 1);
  kv_str("effect", name);
  CHECK(decode() == 0 && m.effect_len == AIRLOCK_EFFECT_NAME_MAX);

  start(2);
  kv_str("t", "reply");
  kv_int("ok", 1);
  REJECT("reply: missing field 'id'");
  start(2);
  kv_str("t", "reply");
  kv_int("id", 1);
  REJECT("reply: needs field 'ok' or 'err'");
  start(4);
  kv_str("t", "reply");
  kv_int("id", 1);
  kv_int("ok", 1);
  kv_str("err", "x");
  REJECT("reply: fields 'ok' and 'err'");
  start(3);
  kv_str("t", "reply");
  kv_int("id", 1);
  kv_int("err", 1);
  REJECT("reply: field 'err' must be a string (got integer)");
  start(4);
  kv_str("t", "reply");
  kv_int("id", 1);
  kv_str("err", "x");
  kv_int("code", 1);
  REJECT("reply: field 'code' must be a string (got integer)");

  start(1);
  kv_str("t", "done");
  REJECT("done: needs field 'ok' or 'err'");
  start(2);
  kv_str("t", "done");
  kv_str("err", "boom");
  REJECT("done: field 'err' must be a map (got string)");
  start(3);
  kv_str("t", "done");
  kv_str("started", "now");
  key("ok");
  msgpack_pack_nil(&pk);
  REJECT("done: field 'started' must be");
  start(2);
  kv_str("t", "start");
  kv_str("v", "1");
  REJECT("start: field 'v' must be a non-negative integer");

  start(2);
  kv_str("t", "ready");
  kv_str("confined", "all");
  REJECT("ready: field 'confined' must be a map (got string)");
  start(2);
  kv_str("t", "ready");
  kv_int("v", -1);
  REJECT("ready: field 'v' must be a non-negative integer (got integer)");
  start(2);
  kv_str("t", "init");
  kv_str("v", "1");
  REJECT("init: field 'v' must be a non-negative integer (got string)");

  start(1);
  kv_str("t", "pause");
  msgpack_sbuffer_write(&sb, "\xc0\xc0\xc0", 3);
  REJECT("3 trailing bytes after the message");

  msgpack_sbuffer_clear(&sb);
  CHECK(decode() == -EPROTO && strcmp(err, "empty message") == 0);
}

/* ------------------------------------------------------------------ codec: raw bytes */

static size_t unhex(const char *hex, uint8_t *out)
{
  size_t n = 0;
  for (; hex[0] && hex[1]; hex += 2) out[n++] = (uint8_t)strtoul((char[]){hex[0], hex[1], 0}, NULL, 16);
  return n;
}

/* msgpack-c parses exactly the bytes the validator accepted. */
static int msgpack_agrees(const uint8_t *b, size_t n)
{
  msgpack_zone *z = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
  msgpack_object o;
  size_t off = 0;
  int ok = msgpack_unpack((const char *)b, n, &off, z, &o) == MSGPACK_UNPACK_SUCCESS && off == n;
  msgpack_zone_free(z);
  return ok;
}

static void test_every_type(void)
{
  static const char *const valid[] = {
      "c0",
      "c2",
      "c3",
      "00",
      "7f",
      "e0",
      "ff",
      "cc01",
      "cd0102",
      "ce01020304",
      "cf0102030405060708",
      "d0ff",
      "d1fffe",
      "d2fffffffe",
      "d3fffffffffffffffe",
      "ca3f800000",
      "cb3ff0000000000000",
      "a0",
      "a3616263",
      "d900",
      "d903616263",
      "da0003616263",
      "db00000003616263",
      "c400",
      "c403010203",
      "c5000101",
      "c600000001ff",
      "d40101",
      "d5010102",
      "d60101020304",
      "d7010102030405060708",
      "d80100112233445566778899aabbccddeeff",
      "c700ff",
      "c70201aabb",
      "c8000201aabb",
      "c90000000201aabb",
      "90",
      "9201c0",
      "dc0000",
      "dc000101",
      "dd0000000101",
      "80",
      "8101c0",
      "de0001a161c0",
      "df00000001a161c0",
      "82a161c3a162929190c0",
  };
  uint8_t b[64];
  int bad_accept = 0, bad_prefix = 0, bad_trailing = 0;
  for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
    size_t n = unhex(valid[i], b);
    if (check_bytes(b, n) != 0 || !msgpack_agrees(b, n)) {
      bad_accept++;
      fprintf(stderr, "valid %s rejected: %s\n", valid[i], err);
    }
    for (size_t k = 0; k < n; k++)
      if (check_bytes(b, k) != -EPROTO) {
        bad_prefix++;
        fprintf(stderr, "prefix %zu of %s accepted\n", k, valid[i]);
      }
    b[n] = 0xc0;
    if (check_bytes(b, n + 1) != -EPROTO || strcmp(err, "1 trailing byte after the message") != 0)
      bad_trailing++;
  }
  CHECK(bad_accept == 0);
  CHECK(bad_prefix == 0);
  CHECK(bad_trailing == 0);

  size_t n = unhex("c1", b);
  CHECK(check_bytes(b, n) == -EPROTO && strstr(err, "0xc1") != NULL);
  n = unhex("92c0c1", b);
  CHECK(check_bytes(b, n) == -EPROTO && strstr(err, "0xc1 at byte 2") != NULL);
  n = unhex("aa616263", b); /* fixstr of 10 with 3 bytes */
  CHECK(check_bytes(b, n) == -EPROTO && strstr(err, "str at byte 0 needs 10 bytes") != NULL);
  n = unhex("da00", b);
  CHECK(check_bytes(b, n) == -EPROTO && strstr(err, "str header at byte 0 is truncated") != NULL);
  n = unhex("81a174db7fffffff61", b);
  CHECK(check_bytes(b, n) == -EPROTO && strstr(err, "str at byte 3") != NULL);
}

static void test_hostile_counts(void)
{
  uint8_t b[64];
  /* msgpack-c would allocate 4G * sizeof(msgpack_object) on seeing this header */
  size_t n = unhex("ddffffffffc0c0", b);
  CHECK(check_bytes(b, n) == -EPROTO && strstr(err, "claims 4294967295 elements") != NULL);
  n = unhex("8101ddffffffffc0c0", b);
  CHECK(check_bytes(b, n) == -EPROTO && strstr(err, "array at byte 2") != NULL);
  n = unhex("df80000000c0c0c0c0", b);
  CHECK(check_bytes(b, n) == -EPROTO && strstr(err, "map at byte 0 claims 2147483648") != NULL);
  /* a map needs two bytes per pair: 3 pairs in 5 bytes is a lie */
  n = unhex("83c0c0c0c0c0", b);
  CHECK(check_bytes(b, n) == -EPROTO && strstr(err, "claims 3 pairs") != NULL);
  /* each count fits on its own, but the elements run out */
  n = unhex("939f00", b);
  CHECK(check_bytes(b, n) == -EPROTO);
  n = unhex("929100", b);
  CHECK(check_bytes(b, n) == -EPROTO && strstr(err, "missing") != NULL);

  msgpack_sbuffer_clear(&sb);
  msgpack_sbuffer_write(&sb, "\xdd\xff\xff\xff\xff\xc0", 6);
  REJECT("claims 4294967295 elements");
}

/* {"t": "pause", "prompt": [[[...nil...]]]}: the map plus `arrays` levels. */
static void nested(size_t arrays, int empty_innermost)
{
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_map(&pk, 2);
  kv_str("t", "pause");
  key("prompt");
  for (size_t i = 0; i < arrays; i++) msgpack_pack_array(&pk, empty_innermost && i + 1 == arrays ? 0 : 1);
  if (!empty_innermost) msgpack_pack_nil(&pk);
}

static void test_depth(void)
{
  nested(AIRLOCK_MSG_DEPTH_MAX - 1, 0); /* 32 levels */
  CHECK(decode() == 0 && m.kind == AIRLOCK_MSG_PAUSE);
  nested(AIRLOCK_MSG_DEPTH_MAX, 0); /* 33 levels */
  REJECT("nests deeper than 32 levels");
  nested(AIRLOCK_MSG_DEPTH_MAX - 1, 1);
  CHECK(decode() == 0);
  nested(AIRLOCK_MSG_DEPTH_MAX, 1); /* an empty container still counts */
  REJECT("nests deeper than 32 levels");

  uint8_t b[128];
  memset(b, 0x91, sizeof b);
  b[AIRLOCK_MSG_DEPTH_MAX] = 0xc0;
  CHECK(check_bytes(b, AIRLOCK_MSG_DEPTH_MAX + 1) == 0);
  CHECK(msgpack_agrees(b, AIRLOCK_MSG_DEPTH_MAX + 1));
  b[AIRLOCK_MSG_DEPTH_MAX + 1] = 0xc0;
  CHECK(check_bytes(b, AIRLOCK_MSG_DEPTH_MAX + 2) == -EPROTO);
  memset(b, 0x91, sizeof b); /* deep nesting that never terminates */
  CHECK(check_bytes(b, sizeof b) == -EPROTO);
}

/* A call whose args are n one-byte elements: what decoding it costs. */
static void dense_call(size_t n)
{
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_map(&pk, 4);
  kv_str("t", "call");
  key("id");
  msgpack_pack_uint64(&pk, 1);
  kv_str("effect", "not.granted");
  key("args");
  msgpack_pack_array(&pk, (uint32_t)n);
  for (size_t i = 0; i < n; i++) msgpack_pack_fix_int8(&pk, 1); /* 2 bytes: d0 01 */
}

static void test_decode_cost(void)
{
  /* 16 MiB of positive fixints would cost 25 times that to decode: refused */
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 1u << 20);
  for (size_t i = 0; i < 1u << 20; i++) msgpack_pack_uint8(&pk, 1); /* one byte each (fixint) */
  CHECK(check_bytes(sb.data, sb.size) == -EPROTO && strstr(err, "more than four times the message") != NULL);
  /* small frames always pass, however dense (the allowance) */
  dense_call(1000);
  CHECK(decode() == 0 && m.kind == AIRLOCK_MSG_CALL);
  /* at 2 bytes an element, 24 bytes each is over three times: refused when big */
  dense_call(1u << 19);
  REJECT("more than four times the message");
  /* at 8 bytes an element (float64, 9 bytes), well within */
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 1u << 17);
  for (size_t i = 0; i < 1u << 17; i++) msgpack_pack_double(&pk, 0.5);
  CHECK(check_bytes(sb.data, sb.size) == 0);
}

static void test_frame_builder(void)
{
  msgpack_sbuffer fb;
  msgpack_sbuffer_init(&fb);
  msgpack_packer fp;
  msgpack_packer_init(&fp, &fb, msgpack_sbuffer_write);

  CHECK(airlock_frame_end(&fb, 0) == -EINVAL); /* begin never called */
  msgpack_sbuffer_write(&fb, "junk", 4);
  CHECK(airlock_frame_begin(&fb) == 0 && fb.size == 4);
  CHECK(airlock_frame_end(&fb, 0) == -EMSGSIZE); /* empty body */
  msgpack_pack_map(&fp, 3);
  airlock_pack_cstr(&fp, "t");
  airlock_pack_cstr(&fp, "call");
  airlock_pack_cstr(&fp, "id");
  msgpack_pack_uint64(&fp, 7);
  airlock_pack_cstr(&fp, "effect");
  airlock_pack_cstr(&fp, "fs.read");
  CHECK(airlock_frame_end(&fb, 3) == -EMSGSIZE); /* over max */
  CHECK(airlock_frame_end(&fb, 0) == 0);
  const uint8_t *h = (const uint8_t *)fb.data;
  CHECK(((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3]) == fb.size - 4);

  struct feed f = {.data = h, .avail = fb.size, .eof = 1};
  airlock_frame_reader r;
  airlock_frame_reader_init(&r, 0);
  CHECK(airlock_frame_reader_pull(&r, feed_read, &f) == AIRLOCK_FRAME_READY);
  CHECK(airlock_msg_decode(r.body, r.len, &u, &m, err, sizeof err) == 0);
  CHECK(m.kind == AIRLOCK_MSG_CALL && m.id == 7 && m.effect_len == 7);
  airlock_frame_reader_free(&r);
  msgpack_sbuffer_destroy(&fb);
}

/* Every encoder's frame decodes as the kind it says, with its fields. */
static void test_encoders(void)
{
  msgpack_sbuffer fb;
  msgpack_packer fp;
  msgpack_sbuffer_init(&fb);
  msgpack_packer_init(&fp, &fb, msgpack_sbuffer_write);

  msgpack_sbuffer_clear(&fb);
  airlock_pack_call(&fp, 9, "fs.read", 7);
  msgpack_pack_nil(&fp);
  CHECK(airlock_msg_decode(fb.data, fb.size, &u, &m, err, sizeof err) == 0);
  CHECK(m.kind == AIRLOCK_MSG_CALL && m.id == 9 && m.effect_len == 7 && memcmp(m.effect, "fs.read", 7) == 0);

  msgpack_sbuffer_clear(&fb);
  airlock_pack_reply_ok(&fp, 9, 0);
  msgpack_pack_uint64(&fp, 42);
  CHECK(airlock_msg_decode(fb.data, fb.size, &u, &m, err, sizeof err) == 0);
  CHECK(m.kind == AIRLOCK_MSG_REPLY && m.id == 9 && m.err == NULL && m.value != NULL &&
        m.value->via.u64 == 42);

  msgpack_sbuffer_clear(&fb);
  airlock_pack_reply_err(&fp, 9, "no such file", 12, "denied", 0);
  CHECK(airlock_msg_decode(fb.data, fb.size, &u, &m, err, sizeof err) == 0);
  CHECK(m.kind == AIRLOCK_MSG_REPLY && m.err != NULL && m.code != NULL && m.code->via.str.size == 6 &&
        memcmp(m.code->via.str.ptr, "denied", 6) == 0);
  msgpack_sbuffer_clear(&fb);
  airlock_pack_reply_err(&fp, 9, "x", 1, NULL, 0); /* no code: three fields */
  CHECK(airlock_msg_decode(fb.data, fb.size, &u, &m, err, sizeof err) == 0 && m.code == NULL);
  CHECK(m.turn == 0);

  /* A deferred answer ends the guest's turn: turn = true, with ok or err. */
  msgpack_sbuffer_clear(&fb);
  airlock_pack_reply_ok(&fp, 9, 1);
  msgpack_pack_uint64(&fp, 42);
  CHECK(airlock_msg_decode(fb.data, fb.size, &u, &m, err, sizeof err) == 0);
  CHECK(m.kind == AIRLOCK_MSG_REPLY && m.turn == 1 && m.value != NULL && m.value->via.u64 == 42);
  msgpack_sbuffer_clear(&fb);
  airlock_pack_reply_err(&fp, 9, "no", 2, "denied", 1);
  CHECK(airlock_msg_decode(fb.data, fb.size, &u, &m, err, sizeof err) == 0);
  CHECK(m.turn == 1 && m.err != NULL && m.code != NULL);
  /* turn must be a boolean */
  msgpack_sbuffer_clear(&fb);
  airlock_pack_head(&fp, AIRLOCK_MSG_REPLY, 4);
  airlock_pack_cstr(&fp, "id");
  msgpack_pack_uint64(&fp, 9);
  airlock_pack_cstr(&fp, "turn");
  msgpack_pack_uint64(&fp, 1);
  airlock_pack_cstr(&fp, "ok");
  msgpack_pack_nil(&fp);
  CHECK(airlock_msg_decode(fb.data, fb.size, &u, &m, err, sizeof err) == -EPROTO);
  CHECK(strstr(err, "'turn' must be a boolean") != NULL);

  /* A C host's init frame: header included, decodes as init of this version. */
  static const char *const fx[] = {"add", "log", NULL};
  airlock_init in = {.source = "return 1",
                     .source_len = 8,
                     .memory = 1 << 20,
                     .effects = fx,
                     .confine_seccomp = 1,
                     .require_seccomp = 1};
  CHECK(airlock_init_frame(&fb, &in, 0, err, sizeof err) == 0);
  const uint8_t *h = (const uint8_t *)fb.data;
  CHECK(((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3]) == fb.size - 4);
  CHECK(airlock_msg_decode(fb.data + 4, fb.size - 4, &u, &m, err, sizeof err) == 0);
  CHECK(m.kind == AIRLOCK_MSG_INIT && m.version == AIRLOCK_PROTOCOL_VERSION);
  const msgpack_object *g = airlock_msg_field(m.value, "guest");
  const msgpack_object *src = airlock_msg_field(g, "source"), *name = airlock_msg_field(g, "name");
  CHECK(src && src->type == MSGPACK_OBJECT_STR && src->via.str.size == 8);
  CHECK(name && name->via.str.size == 5 && memcmp(name->via.str.ptr, "guest", 5) == 0);
  const msgpack_object *lim = airlock_msg_field(m.value, "limits");
  CHECK(lim && lim->via.map.size == 1 && airlock_msg_field(lim, "memory")->via.u64 == 1 << 20);
  const msgpack_object *e = airlock_msg_field(m.value, "effects");
  CHECK(e && e->type == MSGPACK_OBJECT_ARRAY && e->via.array.size == 2);
  const msgpack_object *c = airlock_msg_field(m.value, "confine");
  CHECK(c && airlock_msg_field(c, "landlock")->type == MSGPACK_OBJECT_BOOLEAN &&
        !airlock_msg_field(c, "landlock")->via.boolean && airlock_msg_field(c, "seccomp")->via.boolean);
  const msgpack_object *req = airlock_msg_field(c, "require");
  CHECK(req && req->via.array.size == 1 && req->via.array.ptr[0].via.str.size == 7);
  CHECK(airlock_init_frame(&fb, &in, 16, err, sizeof err) == -EMSGSIZE); /* over the limit it is given */
  CHECK(strstr(err, "more than its limit of 16 bytes") != NULL);
  msgpack_sbuffer_destroy(&fb);
}

/* The init frame's body decoded into m (the frame header checked). */
static int decode_frame(const msgpack_sbuffer *fb)
{
  const uint8_t *h = (const uint8_t *)fb->data;
  if (fb->size < 4 ||
      ((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3]) != fb->size - 4)
    return -1;
  return airlock_msg_decode(fb->data + 4, fb->size - 4, &u, &m, err, sizeof err);
}

static uint64_t uint_field(const msgpack_object *map, const char *key)
{
  const msgpack_object *o = airlock_msg_field(map, key);
  return o != NULL && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : UINT64_MAX;
}

static int has_word(const msgpack_object *list, const char *word)
{
  for (uint32_t i = 0; list != NULL && list->type == MSGPACK_OBJECT_ARRAY && i < list->via.array.size; i++) {
    const msgpack_object *o = &list->via.array.ptr[i];
    if (o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(word) &&
        memcmp(o->via.str.ptr, word, o->via.str.size) == 0)
      return 1;
  }
  return 0;
}

/* Every field of airlock_init reaches the frame under the key the worker
** reads (worker/init.c, worker/confine.c); the input is checked before it is
** copied; the start frame of a prepared worker carries the guest and input. */
static void test_init_fields(void)
{
  msgpack_sbuffer fb, ib;
  msgpack_packer ip;
  msgpack_sbuffer_init(&fb);
  msgpack_sbuffer_init(&ib);
  msgpack_packer_init(&ip, &ib, msgpack_sbuffer_write);
  /* the input {a = 2, list = {1, "x"}} */
  msgpack_pack_map(&ip, 2);
  airlock_pack_cstr(&ip, "a");
  msgpack_pack_int(&ip, 2);
  airlock_pack_cstr(&ip, "list");
  msgpack_pack_array(&ip, 2);
  msgpack_pack_int(&ip, 1);
  airlock_pack_cstr(&ip, "x");
  static const char *const fx[] = {"add", "tick", NULL}, *const notes[] = {"tick", NULL};
  static const unsigned char prog[16] = {1, 2, 3};
  airlock_init in = {.guest_name = "g",
                     .source = "return ...",
                     .source_len = 10,
                     .instructions = 7,
                     .memory = 8,
                     .output = 9,
                     .turn_instructions = 10,
                     .cpu_ms = 11,
                     .turn_cpu_ms = 12,
                     .seed = -5,
                     .effects = fx,
                     .notify = notes,
                     .input = ib.data,
                     .input_len = ib.size,
                     .confine_landlock = 1,
                     .confine_seccomp = 1,
                     .confine_mdwe = 1,
                     .require_landlock = 1,
                     .require_mdwe = 1,
                     .seccomp_program = prog,
                     .seccomp_program_len = sizeof prog};
  CHECK(airlock_init_frame(&fb, &in, 0, err, sizeof err) == 0);
  CHECK(decode_frame(&fb) == 0 && m.kind == AIRLOCK_MSG_INIT);
  const msgpack_object *lim = airlock_msg_field(m.value, "limits");
  CHECK(lim != NULL && lim->via.map.size == 6);
  CHECK(uint_field(lim, "instructions") == 7 && uint_field(lim, "memory") == 8);
  CHECK(uint_field(lim, "output") == 9 && uint_field(lim, "turn_instructions") == 10);
  CHECK(uint_field(lim, "cpu") == 11 && uint_field(lim, "turn_cpu") == 12);
  const msgpack_object *seed = airlock_msg_field(m.value, "seed");
  CHECK(seed != NULL && seed->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && seed->via.i64 == -5);
  const msgpack_object *input = airlock_msg_field(m.value, "input");
  CHECK(input != NULL && input->type == MSGPACK_OBJECT_MAP && uint_field(input, "a") == 2);
  const msgpack_object *list = airlock_msg_field(input, "list");
  CHECK(list != NULL && list->type == MSGPACK_OBJECT_ARRAY && list->via.array.size == 2);
  CHECK(has_word(airlock_msg_field(m.value, "effects"), "add") &&
        has_word(airlock_msg_field(m.value, "effects"), "tick"));
  const msgpack_object *nt = airlock_msg_field(m.value, "notify");
  CHECK(nt != NULL && nt->via.array.size == 1 && has_word(nt, "tick"));
  const msgpack_object *c = airlock_msg_field(m.value, "confine");
  CHECK(airlock_msg_field(c, "mdwe") != NULL && airlock_msg_field(c, "mdwe")->via.boolean);
  const msgpack_object *req = airlock_msg_field(c, "require");
  CHECK(req != NULL && req->via.array.size == 2 && has_word(req, "landlock") && has_word(req, "mdwe"));
  const msgpack_object *bpf = airlock_msg_field(c, "seccomp_program");
  CHECK(bpf != NULL && bpf->type == MSGPACK_OBJECT_BIN && bpf->via.bin.size == sizeof prog &&
        memcmp(bpf->via.bin.ptr, prog, sizeof prog) == 0);
  CHECK(airlock_msg_field(m.value, "prepare") == NULL);

  /* zeroed: nothing but the guest, no limit, no input, seed or notify */
  airlock_init bare = {.source = "return 1", .source_len = 8};
  CHECK(airlock_init_frame(&fb, &bare, 0, err, sizeof err) == 0 && decode_frame(&fb) == 0);
  CHECK(airlock_msg_field(m.value, "limits")->via.map.size == 0);
  CHECK(airlock_msg_field(m.value, "input") == NULL && airlock_msg_field(m.value, "seed") == NULL);
  CHECK(airlock_msg_field(m.value, "notify") == NULL);
  CHECK(airlock_msg_field(airlock_msg_field(m.value, "confine"), "require") == NULL);

  /* a prepared worker: no guest, no input in init; both in its start frame */
  in.prepare = 1;
  CHECK(airlock_init_frame(&fb, &in, 0, err, sizeof err) == 0 && decode_frame(&fb) == 0);
  CHECK(airlock_msg_field(m.value, "prepare") != NULL && airlock_msg_field(m.value, "prepare")->via.boolean);
  CHECK(airlock_msg_field(m.value, "guest") == NULL && airlock_msg_field(m.value, "input") == NULL);
  CHECK(uint_field(airlock_msg_field(m.value, "limits"), "turn_cpu") == 12);
  CHECK(airlock_start_frame(&fb, &in, 42, 0, err, sizeof err) == 0 && decode_frame(&fb) == 0);
  CHECK(m.kind == AIRLOCK_MSG_START && uint_field(m.value, "run") == 42);
  const msgpack_object *g = airlock_msg_field(m.value, "guest");
  CHECK(g != NULL && airlock_msg_field(g, "source")->via.str.size == 10);
  CHECK(airlock_msg_field(m.value, "input") != NULL &&
        uint_field(airlock_msg_field(m.value, "input"), "a") == 2);
  CHECK(airlock_msg_field(m.value, "limits") == NULL);
  in.prepare = 0;

  /* inputs refused, each with a message saying what is wrong */
  static const struct {
    const char *bytes;
    size_t len;
    const char *why;
  } bad[] = {
      {"\xc1", 1, "is not a msgpack type"},
      {"\x92\x01", 2, "claims 2 elements but only 1 bytes remain"},
      {"\x92\x92\x01\x02", 4, "message ends at byte 4 but an element is missing"},
      {"\x01\x02", 2, "1 trailing byte after the message"},
      {"\xd4\x01\x00", 3, "a Lua value cannot be an ext type"},
      {"\x91\xc7\x01\x05\x00", 5, "a Lua value cannot be an ext type"},
      {"\x81\xc0\x01", 3, "map key at byte 1 is nil"},
      {"\x81\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00\x01", 11, "map key at byte 1 is NaN"},
      {"\x81\xca\x7f\xc0\x00\x00\x01", 7, "map key at byte 1 is NaN"},
      {"\xdd\xff\xff\xff\xff", 5, "claims 4294967295 elements"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    airlock_init b = {.source = "return 1", .source_len = 8, .input = bad[i].bytes, .input_len = bad[i].len};
    err[0] = '\0';
    CHECK_MSG(airlock_init_frame(&fb, &b, 0, err, sizeof err) == -EPROTO, bad[i].why);
    CHECK_MSG(strncmp(err, "init: input: ", 13) == 0 && strstr(err, bad[i].why) != NULL, err);
    CHECK(airlock_start_frame(&fb, &b, 1, 0, err, sizeof err) == -EPROTO);
  }
  /* a NaN or nil is fine as a value, not as a key */
  airlock_init okv = {.source = "return 1",
                      .source_len = 8,
                      .input = "\x82\x01\xc0\x02\xcb\x7f\xf8\0\0\0\0\0\x01",
                      .input_len = 13};
  CHECK(airlock_init_frame(&fb, &okv, 0, err, sizeof err) == 0);
  /* nesting: 31 levels inside the frame's own map are the most the worker takes */
  char deep[40];
  memset(deep, 0x91, sizeof deep);
  okv.input = deep;
  deep[31] = (char)0xc0;
  okv.input_len = 32; /* 31 arrays around a nil */
  CHECK(airlock_init_frame(&fb, &okv, 0, err, sizeof err) == 0);
  deep[31] = (char)0x91;
  deep[32] = (char)0xc0;
  okv.input_len = 33; /* 32 arrays: 33 levels with the frame's map */
  CHECK(airlock_init_frame(&fb, &okv, 0, err, sizeof err) == -EPROTO);
  CHECK(strstr(err, "init: the worker would refuse the frame: ") == err &&
        strstr(err, "nests deeper") != NULL);
  /* sizes: checked before anything is copied, against the frame's limit */
  okv.input_len = 64;
  CHECK(airlock_init_frame(&fb, &okv, 32, err, sizeof err) == -EMSGSIZE);
  CHECK(strstr(err, "input (64)") != NULL && strstr(err, "limit of 32 bytes") != NULL);
  okv.input = NULL;
  CHECK(airlock_init_frame(&fb, &okv, 0, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "NULL") != NULL);
  /* names the worker would refuse */
  static const char *const empty_name[] = {"ok", "", NULL};
  airlock_init nm = {.source = "return 1", .source_len = 8, .notify = empty_name};
  CHECK(airlock_init_frame(&fb, &nm, 0, err, sizeof err) == -EINVAL);
  CHECK(strstr(err, "notify[2] is 0 bytes") != NULL);
  char longname[AIRLOCK_EFFECT_NAME_MAX + 2];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  const char *const long_list[] = {longname, NULL};
  nm.notify = NULL;
  nm.effects = long_list;
  CHECK(airlock_init_frame(&fb, &nm, 0, err, sizeof err) == -EINVAL && strstr(err, "effects[1]") != NULL);
  msgpack_sbuffer_destroy(&ib);
  msgpack_sbuffer_destroy(&fb);
}

/* ------------------------------------------------------------------ fuzz */

static void test_fuzz(void)
{
  /* random bytes, biased toward small headers so that some of them parse */
  static const uint8_t common[] = {0x00, 0x01, 0x7f, 0x80, 0x81, 0x82, 0x90, 0x91, 0x92, 0xa0, 0xa1, 0xa2,
                                   0xc0, 0xc1, 0xc3, 0xdc, 0xdd, 0xde, 0xdf, 0xd9, 0xc7, 0xd4, 0xff};
  uint8_t b[64];
  int disagree = 0, accepted = 0;
  for (int i = 0; i < 100000; i++) {
    size_t n = (size_t)(rnd() % (sizeof b + 1));
    for (size_t k = 0; k < n; k++) b[k] = rnd() % 2 ? common[rnd() % sizeof common] : (uint8_t)rnd();
    if (check_bytes(b, n) == 0) {
      accepted++;
      disagree += !msgpack_agrees(b, n);
    }
    int rc = airlock_msg_decode(b, n, &u, &m, err, sizeof err);
    disagree += rc != 0 && rc != -EPROTO;
  }
  CHECK(disagree == 0);
  CHECK(accepted > 0);

  /* mutations of a valid call: decode never crashes and never returns nonsense */
  start(4);
  kv_str("t", "call");
  kv_int("id", 300);
  kv_str("effect", "fs.read");
  key("args");
  msgpack_pack_array(&pk, 3);
  msgpack_pack_map(&pk, 1);
  kv_str("k", "v");
  msgpack_pack_double(&pk, 1.5);
  airlock_pack_cstr(&pk, "xyz");
  uint8_t base[128], mut[128];
  size_t blen = sb.size;
  memcpy(base, sb.data, blen);
  int nonsense = 0;
  for (int i = 0; i < 100000; i++) {
    memcpy(mut, base, blen);
    size_t n = blen - (size_t)(rnd() % 4 == 0 ? rnd() % blen : 0);
    for (int k = 1 + (int)(rnd() % 4); k > 0; k--) mut[rnd() % blen] = (uint8_t)rnd();
    int rc = airlock_msg_decode(mut, n, &u, &m, err, sizeof err);
    if (rc == 0 && m.kind == AIRLOCK_MSG_CALL)
      nonsense += m.id == 0 || m.effect_len == 0 || m.effect_len > AIRLOCK_EFFECT_NAME_MAX || m.value == NULL;
    else if (rc == 0)
      nonsense += m.kind < AIRLOCK_MSG_INIT || m.kind > AIRLOCK_MSG_LAST;
    else
      nonsense += rc != -EPROTO || err[0] == '\0';
  }
  CHECK(nonsense == 0);
}

int main(void)
{
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_unpacked_init(&u);

  test_causes();
  test_chunkings();
  test_again_and_eof();
  test_read_ahead();
  test_lengths();
  test_reset_releases();
  test_write_fd();
  test_kinds();
  test_violations();
  test_every_type();
  test_hostile_counts();
  test_depth();
  test_decode_cost();
  test_frame_builder();
  test_encoders();
  test_init_fields();
  test_fuzz();

  msgpack_unpacked_destroy(&u);
  msgpack_sbuffer_destroy(&sb);
  return check_summary();
}
