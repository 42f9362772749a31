/*
** baseline.c -- airlock-baseline: the reference numbers that `airlock bench` divides by.
** A raw socketpair ping-pong carrying protocol-shaped msgpack frames, and a plain
** fork+execve+waitpid loop, so airlock's own costs are judged against ones from the same run.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <msgpack.h>

#define FRAME_MAX  (16u << 20) /* the protocol's default max_frame */
#define N_MAX      10000000ULL /* bounds the per-sample array to 80 MB */
#define WARMUP_MAX 100         /* untimed rounds: page faults and caches settle first */

/* ------------------------------------------------------------------ small utilities */

static void die(const char *what)
{
  fprintf(stderr, "airlock-baseline: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Waits for one child, retrying on EINTR; its status is of no interest here. */
static void reap(pid_t pid)
{
  while (waitpid(pid, NULL, 0) < 0)
    if (errno != EINTR) die("waitpid");
}

/* CPU time, user and system, of this process or of its reaped children, in us. */
static double cpu_us(int who)
{
  struct rusage ru;
  if (getrusage(who, &ru) < 0) die("getrusage");
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Parses a decimal count in [lo, hi]; anything else is a usage error. */
static uint64_t parse_count(const char *s, uint64_t lo, uint64_t hi, const char *what)
{
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < lo || v > hi) {
    fprintf(stderr, "airlock-baseline: %s must be an integer in [%" PRIu64 ", %" PRIu64 "], got '%s'\n", what,
            lo, hi, s);
    exit(2);
  }
  return v;
}

static int write_all(int fd, const void *buf, size_t len)
{
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Reads exactly len bytes. Returns 1, 0 at a clean EOF before the first byte
** (the peer is finished), or -1 on error or EOF midway (errno EPROTO). */
static int read_full(int fd, void *buf, size_t len)
{
  uint8_t *p = buf;
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, p + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) {
      errno = EPROTO;
      return got == 0 ? 0 : -1;
    }
    got += (size_t)n;
  }
  return 1;
}

/* ------------------------------------------------------------------ statistics */

typedef struct stats {
  double median_us, p99_us, per_sec;
} stats;

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile (pct in 1..100) of a sorted sample: always a value
** that was observed, and integer arithmetic so no libm is needed. */
static double percentile(const double *sorted, size_t n, unsigned pct)
{
  size_t rank = (n * pct + 99) / 100;
  if (rank < 1) rank = 1;
  return sorted[rank - 1];
}

/* Sorts the samples in place; per_sec comes from the whole timed span so that
** work between samples (bookkeeping) is charged too. */
static stats summarise(double *us, size_t n, double span_us)
{
  stats s;
  qsort(us, n, sizeof us[0], cmp_double);
  s.median_us = percentile(us, n, 50);
  s.p99_us = percentile(us, n, 99);
  s.per_sec = span_us > 0 ? (double)n * 1e6 / span_us : 0;
  return s;
}

/* One JSON line; bytes < 0 leaves the field out (fork-exec has no frame size);
** extra, when not NULL, is more fields, already written as ",\"k\":v...". */
static void print_json(const char *bench, uint64_t n, long bytes, stats s, const char *extra)
{
  printf("{\"bench\":\"%s\",\"n\":%" PRIu64 ",", bench, n);
  if (bytes >= 0) printf("\"bytes\":%ld,", bytes);
  printf("\"median_us\":%.2f,\"p99_us\":%.2f,\"per_sec\":%.0f%s}\n", s.median_us, s.p99_us, s.per_sec,
         extra ? extra : "");
}

/* ------------------------------------------------------------------ protocol-shaped frames */

/* The frame sizes must not drift with the id, or the benchmark would measure
** different bytes at different rounds: ids are packed as fixed-width uint32. */
typedef enum shape { SHAPE_CALL, SHAPE_REPLY } shape;

/* Packs one whole frame into sb (cleared first): 4 reserved header bytes, the
** map, then the length patched in so the frame leaves in one write (the way
** airlock_frame_begin/end build theirs). call: {t, id, effect="ping", args={}, pad=<bin>};
** reply: {t, id, ok=<bin>} -- the padding is the reply's value. */
static void pack_frame(msgpack_sbuffer *sb, shape sh, uint32_t id, const char *pad, size_t padlen)
{
  static const char reserved[4] = {0, 0, 0, 0};
  msgpack_packer pk;
  msgpack_sbuffer_clear(sb);
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  msgpack_sbuffer_write(sb, reserved, sizeof reserved);
  msgpack_pack_map(&pk, sh == SHAPE_CALL ? 5 : 3);
  msgpack_pack_str_with_body(&pk, "t", 1);
  if (sh == SHAPE_CALL)
    msgpack_pack_str_with_body(&pk, "call", 4);
  else
    msgpack_pack_str_with_body(&pk, "reply", 5);
  msgpack_pack_str_with_body(&pk, "id", 2);
  msgpack_pack_fix_uint32(&pk, id);
  if (sh == SHAPE_CALL) {
    msgpack_pack_str_with_body(&pk, "effect", 6);
    msgpack_pack_str_with_body(&pk, "ping", 4);
    msgpack_pack_str_with_body(&pk, "args", 4);
    msgpack_pack_map(&pk, 0);
    msgpack_pack_str_with_body(&pk, "pad", 3);
  } else {
    msgpack_pack_str_with_body(&pk, "ok", 2);
  }
  msgpack_pack_bin_with_body(&pk, pad, padlen);
  uint32_t body = (uint32_t)(sb->size - 4);
  uint8_t *h = (uint8_t *)sb->data;
  h[0] = (uint8_t)(body >> 24);
  h[1] = (uint8_t)(body >> 16);
  h[2] = (uint8_t)(body >> 8);
  h[3] = (uint8_t)body;
}

/* Bytes msgpack spends on a bin header for a payload of len bytes. */
static size_t bin_header(size_t len)
{
  return len <= 0xff ? 2 : len <= 0xffff ? 3 : 5;
}

/* The largest padding whose frame fits in target bytes. Some totals cannot be
** hit exactly (the bin header grows by one or two bytes at 256 and 65536), so
** the frame may come out a byte or two short; the JSON reports the real size. */
static size_t pad_for(shape sh, size_t target)
{
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  pack_frame(&sb, sh, 0, "", 0);
  size_t base = sb.size - bin_header(0); /* everything but the bin */
  msgpack_sbuffer_destroy(&sb);
  if (target <= base + bin_header(0)) return 0;
  size_t pad = target - base - bin_header(0);
  while (pad > 0 && base + bin_header(pad) + pad > target) pad--;
  return pad;
}

/* Decodes a frame body the way the real parent does and returns its id, or 0
** if the body is not a map with an unsigned id. */
static uint64_t frame_id(const uint8_t *body, size_t len)
{
  msgpack_unpacked u;
  uint64_t id = 0;
  size_t off = 0;
  msgpack_unpacked_init(&u);
  if (msgpack_unpack_next(&u, (const char *)body, len, &off) == MSGPACK_UNPACK_SUCCESS &&
      u.data.type == MSGPACK_OBJECT_MAP) {
    for (uint32_t i = 0; i < u.data.via.map.size; i++) {
      const msgpack_object_kv *kv = &u.data.via.map.ptr[i];
      if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == 2 &&
          memcmp(kv->key.via.str.ptr, "id", 2) == 0 && kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        id = kv->val.via.u64;
    }
  }
  msgpack_unpacked_destroy(&u);
  return id;
}

/* Blocking read of one frame into buf (cap bytes): header, then body, as a
** simple synchronous peer would. Returns the body length, 0 at a clean EOF,
** or -1 (errno EMSGSIZE when the header is out of range). */
static long read_frame(int fd, uint8_t *buf, size_t cap)
{
  uint8_t h[4];
  int rc = read_full(fd, h, sizeof h);
  if (rc <= 0) return rc;
  uint32_t len = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
  if (len == 0 || len > cap) {
    errno = EMSGSIZE;
    return -1;
  }
  if (read_full(fd, buf, len) != 1) return -1;
  return (long)len;
}

/* ------------------------------------------------------------------ pingpong */

/* A ping-pong peer's buffers: one outgoing frame, one incoming body, the padding. */
typedef struct peer {
  int fd;
  msgpack_sbuffer out;
  uint8_t *in;
  char *pad;
  size_t padlen;
} peer;

static void peer_init(peer *p, int fd, shape sh, size_t target)
{
  p->fd = fd;
  msgpack_sbuffer_init(&p->out);
  p->padlen = pad_for(sh, target);
  p->pad = malloc(p->padlen + 1);
  p->in = malloc(FRAME_MAX);
  if (p->pad == NULL || p->in == NULL) die("malloc");
  memset(p->pad, 'x', p->padlen);
}

static void peer_free(peer *p)
{
  msgpack_sbuffer_destroy(&p->out);
  free(p->in);
  free(p->pad);
}

/* The child: answer every call with a reply of the same id and size until the
** parent closes its end. */
static void echo_loop(int fd, size_t target)
{
  peer p;
  peer_init(&p, fd, SHAPE_REPLY, target);
  for (;;) {
    long len = read_frame(fd, p.in, FRAME_MAX);
    if (len == 0) _exit(0);
    if (len < 0) _exit(1);
    pack_frame(&p.out, SHAPE_REPLY, (uint32_t)frame_id(p.in, (size_t)len), p.pad, p.padlen);
    if (write_all(fd, p.out.data, p.out.size) < 0) _exit(1);
  }
}

/* One timed-or-not round trip from the parent; dies if the echo is wrong, so a
** broken baseline can never pass for a fast one. */
static void round_trip(peer *p, uint32_t id)
{
  pack_frame(&p->out, SHAPE_CALL, id, p->pad, p->padlen);
  if (write_all(p->fd, p->out.data, p->out.size) < 0) die("write call");
  long len = read_frame(p->fd, p->in, FRAME_MAX);
  if (len <= 0) die("read reply");
  if (frame_id(p->in, (size_t)len) != id) {
    fprintf(stderr, "airlock-baseline: reply id mismatch at round %" PRIu32 "\n", id);
    exit(1);
  }
}

static int cmd_pingpong(uint64_t n, size_t target)
{
  /* A dead peer must surface as a write error with a message, not a silent
  ** SIGPIPE. Only here: forkexec's children would inherit the ignored signal. */
  signal(SIGPIPE, SIG_IGN);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) die("socketpair");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(sv[0]);
    echo_loop(sv[1], target);
  }
  close(sv[1]);

  peer p;
  peer_init(&p, sv[0], SHAPE_CALL, target);
  double *us = malloc(n * sizeof *us);
  if (us == NULL) die("malloc");
  uint32_t id = 1;
  for (uint64_t i = 0; i < n && i < WARMUP_MAX; i++) round_trip(&p, id++);
  double cpu0 = cpu_us(RUSAGE_SELF);
  double start = now_us();
  for (uint64_t i = 0; i < n; i++) {
    double t0 = now_us();
    round_trip(&p, id++);
    us[i] = now_us() - t0;
  }
  double span = now_us() - start;
  double cpu_parent = (cpu_us(RUSAGE_SELF) - cpu0) / (double)n;
  long bytes = (long)p.out.size;
  uint64_t rounds = id - 1; /* the warm-up's too: the child's time is counted whole */
  peer_free(&p);

  close(sv[0]); /* EOF tells the echo child to finish */
  reap(pid);
  double cpu_child = cpu_us(RUSAGE_CHILDREN) / (double)rounds;
  /* CPU time (user + system) per round trip, each side: what the process
  ** boundary costs the two processes, beside what it costs in wall time */
  char cpu[96];
  snprintf(cpu, sizeof cpu, ",\"cpu_parent_us\":%.2f,\"cpu_child_us\":%.2f", cpu_parent, cpu_child);
  print_json("raw-pingpong", n, bytes, summarise(us, n, span), cpu);
  free(us);
  return 0;
}

/* ------------------------------------------------------------------ frames */

/* The floor under `airlock bench scale`: n children, each waiting for its
** tick (a call the parent answers only when the frame starts), then making k
** calls the parent answers at once, then asking for the next tick; the parent
** answers every child through one epoll loop. Frames are protocol-shaped
** (a call of 64 bytes, a reply of 128), read and written whole, never decoded:
** the cost of the system calls and the scheduling, nothing else. */
typedef struct frame_child {
  int fd;
  unsigned calls; /* calls made this frame (the (k+1)th asks for the next tick) */
} frame_child;

static void frames_child(int fd, size_t call_len, size_t reply_len, const char *call, unsigned k)
{
  char *buf = malloc(reply_len);
  if (buf == NULL) _exit(1);
  for (;;) {
    if (write_all(fd, call, call_len) < 0) /* the tick */
      _exit(1);
    if (read_full(fd, buf, reply_len) != 1) /* EOF: the parent is done */
      _exit(0);
    for (unsigned i = 0; i < k; i++)
      if (write_all(fd, call, call_len) < 0 || read_full(fd, buf, reply_len) != 1) _exit(1);
  }
}

static int cmd_frames(uint64_t n, uint64_t k, uint64_t frames)
{
  signal(SIGPIPE, SIG_IGN);
  msgpack_sbuffer call, reply;
  msgpack_sbuffer_init(&call);
  msgpack_sbuffer_init(&reply);
  size_t cpad = pad_for(SHAPE_CALL, 64), rpad = pad_for(SHAPE_REPLY, 128);
  char *zeros = calloc(1, rpad + cpad + 1);
  if (zeros == NULL) die("calloc");
  pack_frame(&call, SHAPE_CALL, 1, zeros, cpad);
  pack_frame(&reply, SHAPE_REPLY, 1, zeros, rpad);
  frame_child *cs = calloc(n, sizeof *cs);
  pid_t *pids = calloc(n, sizeof *pids);
  double *us = malloc(frames * sizeof *us);
  char *in = malloc(call.size);
  if (cs == NULL || pids == NULL || us == NULL || in == NULL) die("malloc");
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) die("epoll_create1");
  for (uint64_t i = 0; i < n; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) die("socketpair");
    pids[i] = fork();
    if (pids[i] < 0) die("fork");
    if (pids[i] == 0) {
      close(sv[0]);
      frames_child(sv[1], call.size, reply.size, call.data, (unsigned)k);
    }
    close(sv[1]);
    cs[i].fd = sv[0];
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev) < 0) die("epoll_ctl");
    if (read_full(sv[0], in, call.size) != 1) /* its first tick request */
      die("read");
  }
  struct epoll_event evs[64];
  double start = 0, cpu0 = 0;
  for (uint64_t f = 0; f < frames + WARMUP_MAX / 10; f++) {
    int timed = f >= WARMUP_MAX / 10;
    double t0 = now_us();
    if (timed && start == 0) {
      start = t0;
      cpu0 = cpu_us(RUSAGE_SELF);
    }
    for (uint64_t i = 0; i < n; i++) {
      cs[i].calls = 0;
      if (write_all(cs[i].fd, reply.data, reply.size) < 0) die("write");
    }
    uint64_t waiting = n; /* children that have not asked for the next tick */
    while (waiting > 0) {
      int m = epoll_wait(ep, evs, 64, -1);
      if (m < 0 && errno == EINTR) continue;
      if (m < 0) die("epoll_wait");
      for (int e = 0; e < m; e++) {
        frame_child *c = evs[e].data.ptr;
        if (read_full(c->fd, in, call.size) != 1) die("read");
        if (++c->calls > k)
          waiting--; /* the next tick: answered when the next frame starts */
        else if (write_all(c->fd, reply.data, reply.size) < 0)
          die("write");
      }
    }
    if (timed) us[f - WARMUP_MAX / 10] = now_us() - t0;
  }
  double span = now_us() - start;
  /* the parent's CPU time (user + system) per effect: the serial part of the loop */
  double cpu_parent = (cpu_us(RUSAGE_SELF) - cpu0) / (double)(n * k * frames);
  for (uint64_t i = 0; i < n; i++) close(cs[i].fd);
  for (uint64_t i = 0; i < n; i++) reap(pids[i]);
  close(ep);
  stats st = summarise(us, frames, span);
  printf("{\"bench\":\"raw-frames\",\"guests\":%" PRIu64 ",\"k\":%" PRIu64 ",\"n\":%" PRIu64
         ",\"median_us\":%.2f,\"p99_us\":%.2f,\"effects_per_sec\":%.0f,\"cpu_parent_us\":%.2f}\n",
         n, k, frames, st.median_us, st.p99_us, span > 0 ? (double)(n * k * frames) * 1e6 / span : 0,
         cpu_parent);
  free(us);
  free(cs);
  free(pids);
  free(in);
  free(zeros);
  msgpack_sbuffer_destroy(&call);
  msgpack_sbuffer_destroy(&reply);
  return 0;
}

/* ------------------------------------------------------------------ httpd */

/* The upstream of `airlock bench net`: a plain HTTP/1.1 server on 127.0.0.1
** (a port the kernel picks, written to portfile), one connection at a time,
** every request answered "hello" and closed, until it is killed or has
** answered max requests (0: no end). Only the loopback address, ever. */
static int cmd_httpd(const char *portfile, uint64_t max)
{
  signal(SIGPIPE, SIG_IGN);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) die("socket");
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 64) < 0 ||
      getsockname(s, (struct sockaddr *)&a, &al) < 0)
    die("bind 127.0.0.1");
  char tmp[4096];
  int n = snprintf(tmp, sizeof tmp, "%s.tmp", portfile);
  FILE *f = n > 0 && (size_t)n < sizeof tmp ? fopen(tmp, "w") : NULL;
  if (f == NULL || fprintf(f, "%u\n", (unsigned)ntohs(a.sin_port)) < 0 || fclose(f) != 0 ||
      rename(tmp, portfile) != 0)
    die(portfile);
  static const char reply[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n"
                              "Connection: close\r\n\r\nhello\n";
  for (uint64_t done = 0; max == 0 || done < max; done++) {
    int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR) continue;
      die("accept");
    }
    char buf[8192];
    size_t have = 0;
    while (have < sizeof buf) { /* the head, at most 8 KiB: then the answer regardless */
      ssize_t k = read(c, buf + have, sizeof buf - have);
      if (k <= 0) break;
      have += (size_t)k;
      if (memmem(buf, have, "\r\n\r\n", 4) != NULL) break;
    }
    if (write_all(c, reply, sizeof reply - 1) < 0) {
      /* the client went away: the next one */
    }
    close(c);
  }
  close(s);
  return 0;
}

/* ------------------------------------------------------------------ forkexec */

/* The child side: stdio to /dev/null so whatever the program prints cannot
** mix with the JSON line, an empty environment, then exec. When exec fails,
** its errno goes to errfd (if >= 0) for the parent to report. */
static void exec_child(int devnull, char *const *argv, int errfd)
{
  char *const envp[] = {NULL};
  dup2(devnull, 0);
  dup2(devnull, 1);
  dup2(devnull, 2);
  execve(argv[0], argv, envp);
  int e = errno;
  if (errfd >= 0 && write(errfd, &e, sizeof e) < 0) _exit(126);
  _exit(127);
}

/* fork + execve + waitpid once: the unit being timed. */
static void fork_exec_once(int devnull, char *const *argv)
{
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) exec_child(devnull, argv, -1);
  reap(pid);
}

/* One untimed run that reports exactly why exec failed: inside the timed loop
** a failure would only show as exit 127, which the program might also return.
** The errno travels over a CLOEXEC pipe that a successful exec simply closes. */
static void probe_exec(int devnull, char *const *argv)
{
  int pp[2];
  if (pipe2(pp, O_CLOEXEC) < 0) die("pipe");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) exec_child(devnull, argv, pp[1]);
  close(pp[1]);
  int e = 0;
  ssize_t got;
  while ((got = read(pp[0], &e, sizeof e)) < 0 && errno == EINTR)
    ;
  close(pp[0]);
  reap(pid);
  if (got == (ssize_t)sizeof e) {
    errno = e;
    die(argv[0]);
  }
}

static int cmd_forkexec(uint64_t n, char *const *argv)
{
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) die("/dev/null");
  probe_exec(devnull, argv);
  double *us = malloc(n * sizeof *us);
  if (us == NULL) die("malloc");
  double start = now_us();
  for (uint64_t i = 0; i < n; i++) {
    double t0 = now_us();
    fork_exec_once(devnull, argv);
    us[i] = now_us() - t0;
  }
  double span = now_us() - start;
  close(devnull);
  print_json("fork-exec", n, -1, summarise(us, n, span), NULL);
  free(us);
  return 0;
}

/* ------------------------------------------------------------------ prefork */

/* The floor of a warm start: a child forked beforehand and parked, blocked
** in read on a socketpair (as a pooled worker waits for its run), is woken by
** one frame of BYTES after it has slept IDLE_US. It stamps the moment its
** read returns (CLOCK_MONOTONIC is one clock for both processes) and answers
** with it at once. wake: send -> the child's first instruction after read;
** round: send -> the parent has the answer (wake plus one message back). */
static int cmd_prefork(uint64_t n, size_t bytes, uint64_t idle_us)
{
  uint8_t *frame = calloc(1, bytes + 4);
  double *wake = malloc(n * sizeof *wake), *round = malloc(n * sizeof *round);
  if (frame == NULL || wake == NULL || round == NULL) die("malloc");
  frame[0] = (uint8_t)(bytes >> 24); /* the 4-byte big-endian length header */
  frame[1] = (uint8_t)(bytes >> 16);
  frame[2] = (uint8_t)(bytes >> 8);
  frame[3] = (uint8_t)bytes;
  double start = now_us();
  for (uint64_t i = 0; i < n + WARMUP_MAX / 10; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) die("socketpair");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      close(sv[0]);
      uint8_t *in = malloc(bytes + 4);
      if (in == NULL || read_full(sv[1], in, bytes + 4) < 0) _exit(1);
      double t = now_us();
      _exit(write_all(sv[1], &t, sizeof t) < 0 ? 1 : 0);
    }
    close(sv[1]);
    struct timespec idle = {(time_t)(idle_us / 1000000), (long)(idle_us % 1000000) * 1000};
    nanosleep(&idle, NULL);
    double t0 = now_us(), tc = 0;
    if (write_all(sv[0], frame, bytes + 4) < 0 || read_full(sv[0], &tc, sizeof tc) < 0) die("prefork round");
    double t1 = now_us();
    close(sv[0]);
    reap(pid);
    if (i >= WARMUP_MAX / 10) {
      wake[i - WARMUP_MAX / 10] = tc - t0;
      round[i - WARMUP_MAX / 10] = t1 - t0;
    }
  }
  double span = now_us() - start;
  print_json("prefork-wake", n, (long)bytes, summarise(wake, n, span), NULL);
  print_json("prefork-round", n, (long)bytes, summarise(round, n, span), NULL);
  free(frame);
  free(wake);
  free(round);
  return 0;
}

/* ------------------------------------------------------------------ main */

/* ------------------------------------------------------------------ stat calls */

/* N stat() calls of path, timed together: the cost of one file system call
** as the program sees it, for `airlock bench exec` to compare with and
** without learn mode's observation (each observed call is a round trip to the
** broker's listener). One JSON line: calls, total_us, per_call_us. */
static int cmd_stat(uint64_t n, const char *path)
{
  struct stat st;
  double t0 = now_us();
  for (uint64_t i = 0; i < n; i++) (void)stat(path, &st);
  double total = now_us() - t0;
  printf("{\"calls\":%" PRIu64 ",\"total_us\":%.1f,\"per_call_us\":%.3f}\n", n, total, total / (double)n);
  return 0;
}

/* N connect() calls of one TCP socket to 127.0.0.1:PORT, timed by the
** program itself: what a direct connect costs it (each fails, refused, in a
** confined run; the errno of the last is reported). */
static int cmd_connect(uint64_t n, uint64_t port)
{
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    fprintf(stderr, "airlock-baseline: socket: %s\n", strerror(errno));
    return 1;
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int last = 0;
  double t0 = now_us();
  for (uint64_t i = 0; i < n; i++) last = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
  double total = now_us() - t0;
  close(fd);
  printf("{\"calls\":%" PRIu64 ",\"total_us\":%.1f,\"per_call_us\":%.3f,\"errno\":%d}\n", n, total,
         total / (double)n, last);
  return 0;
}

static int usage(void)
{
  fputs("usage: airlock-baseline pingpong N BYTES\n"
        "       airlock-baseline frames GUESTS K FRAMES\n"
        "       airlock-baseline httpd PORTFILE [MAX]\n"
        "       airlock-baseline forkexec N PATH [ARGS...]\n"
        "       airlock-baseline prefork N BYTES IDLE_US\n"
        "       airlock-baseline stat N PATH\n"
        "       airlock-baseline connect N PORT\n",
        stderr);
  return 2;
}

int main(int argc, char **argv)
{
  if (argc == 4 && strcmp(argv[1], "pingpong") == 0)
    return cmd_pingpong(parse_count(argv[2], 1, N_MAX, "N"),
                        (size_t)parse_count(argv[3], 1, FRAME_MAX, "BYTES"));
  if (argc == 5 && strcmp(argv[1], "frames") == 0)
    return cmd_frames(parse_count(argv[2], 1, 4096, "GUESTS"), parse_count(argv[3], 0, 1000, "K"),
                      parse_count(argv[4], 1, 100000, "FRAMES"));
  if ((argc == 3 || argc == 4) && strcmp(argv[1], "httpd") == 0)
    return cmd_httpd(argv[2], argc == 4 ? parse_count(argv[3], 0, N_MAX, "MAX") : 0);
  if (argc == 5 && strcmp(argv[1], "prefork") == 0)
    return cmd_prefork(parse_count(argv[2], 1, 100000, "N"),
                       (size_t)parse_count(argv[3], 1, FRAME_MAX, "BYTES"),
                       parse_count(argv[4], 0, 1000000, "IDLE_US"));
  if (argc >= 4 && strcmp(argv[1], "forkexec") == 0)
    return cmd_forkexec(parse_count(argv[2], 1, N_MAX, "N"), argv + 3);
  if (argc == 4 && strcmp(argv[1], "stat") == 0)
    return cmd_stat(parse_count(argv[2], 1, N_MAX, "N"), argv[3]);
  if (argc == 4 && strcmp(argv[1], "connect") == 0)
    return cmd_connect(parse_count(argv[2], 1, N_MAX, "N"), parse_count(argv[3], 1, 65535, "PORT"));
  return usage();
}
