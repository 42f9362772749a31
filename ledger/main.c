/*
** main.c -- airlock-ledgerd: one session's ledger in a process of its own. It
** turns untrusted bytes (effect args and results) into journal writes, so it
** holds nothing but that one directory: the host starts it with its grant on
** argv (core/ledger_proto.h), it loads its libraries, confines itself
** (Landlock beneath the session directory, a seccomp allowlist without exec,
** sockets or signals to others; the spawner gave it an empty environment, a
** net namespace of its own and no descriptor but 0-3), and only then reads
** its first byte from a client. Confinement that fails ends it before that.
** A disposable process: on a client's protocol error it says why and exits.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "airlock.h"
#include "confine.h"
#include "journal.h"
#include "journal_int.h"
#include "ledger_proc.h"
#include "ledger_proto.h"
#include "ledger_zstd.h"
#include "inbox.h"

#define CHAN 3

/* What the process may call once confined, measured (strace -f on each mode,
** the specs' workloads) rather than guessed: descriptors it holds, the journal
** and lock beneath its directory (Landlock decides which paths), memory, time,
** polling its one socket. No execve, no socket(), no kill, no ptrace. */
static const char *const allowed[] = {
    "read", "write", "readv", "writev", "pread64", "pwrite64", "lseek", "close", "fstat", "newfstatat",
    "fcntl", "openat", "ftruncate", "fdatasync", "fsync", "flock", "fadvise64", "unlink", "unlinkat", "mkdir",
    "rename", "renameat", "renameat2", "sendmsg", "recvfrom", "poll", "ppoll", "mmap", "munmap", "mremap",
    "brk", "madvise", "futex", "clock_gettime", "getrandom", "getpid", "gettid", "geteuid", "rt_sigprocmask",
    "exit", "exit_group",
#if defined(__SANITIZE_ADDRESS__)
    "sigaltstack", "prctl", "prlimit64", "getrlimit", "sched_yield", "readlink", "mprotect", "rt_sigaction",
#endif
#ifdef AIRLOCK_CRASH_POINTS
    /* the test build (airlock-ledgerd-crashpoints) alone: raise(SIGSTOP) at a
    ** crash point (ledger/journal_int.h); the production allowlist has no tgkill */
    "tgkill",
#endif
    NULL};

static msgpack_sbuffer out;
static msgpack_packer pk;
static char grant[LEDGER_PROTO_GRANT_HEX + 1];

/* ------------------------------------------------------------------ sending */

static void begin(const char *t, uint32_t nfields)
{
  airlock_frame_begin(&out);
  msgpack_pack_map(&pk, nfields);
  airlock_pack_cstr(&pk, "t");
  airlock_pack_cstr(&pk, t);
}

/* Sends the frame in out; a client that is gone ends the process quietly. */
static void send_frame(void)
{
  if (airlock_frame_end(&out, LEDGER_PROTO_FRAME_MAX) < 0 ||
      airlock_frame_write_fd(CHAN, out.data + 4, out.size - 4) < 0)
    _exit(LEDGER_EXIT_OK);
}

static void kv_str(const char *k, const char *v)
{
  airlock_pack_cstr(&pk, k);
  airlock_pack_cstr(&pk, v);
}

static void kv_u64(const char *k, uint64_t v)
{
  airlock_pack_cstr(&pk, k);
  msgpack_pack_uint64(&pk, v);
}

static void kv_bin(const char *k, const void *p, size_t n)
{
  airlock_pack_cstr(&pk, k);
  msgpack_pack_bin(&pk, n);
  msgpack_pack_bin_body(&pk, p, n);
}

/* refuse {errno, message, fatal} */
/* Acknowledgements waiting to be sent: appends accepted since the last ack.
** One ack covers every append read in one go (the producer's queue arrives
** as one batch), and is sent before the process would wait for more input,
** before any other message, and at ACK_MAX: a producer waiting for its
** append is answered as soon as nothing more is there to read. */
#define ACK_MAX 1024
static struct {
  airlock_ledger *l;      /* the open session, once there is one */
  uint64_t n, bytes, seq; /* appends accepted, their bytes, the last one's seq */
} acks;

static void kv_bin(const char *k, const void *p, size_t n);
static void kv_u64(const char *k, uint64_t v);

static void refuse(int e, const char *message, int fatal);

static void send_acks(void)
{
  if (acks.n == 0 || acks.l == NULL) return;
  /* accepted means in the journal: the records kept in memory are written first */
  int rc = airlock_ledger_write_out(acks.l);
  if (rc < 0) {
    acks.n = acks.bytes = 0; /* none of them was accepted */
    refuse(rc, airlock_ledger_error(acks.l), 0);
    return;
  }
  uint8_t h[AIRLOCK_LEDGER_HASH_LEN];
  airlock_ledger_head(acks.l, NULL, h);
  begin("ack", 7);
  kv_u64("seq", acks.seq);
  kv_u64("n", acks.n);
  kv_u64("bytes", acks.bytes);
  kv_bin("hash", h, sizeof h);
  kv_u64("durable", airlock_ledger_durable_seq(acks.l));
  airlock_pack_cstr(&pk, "due"); /* ms until this process commits on its own; -1: none due */
  msgpack_pack_int64(&pk, airlock_ledger_sync_due_ms(acks.l));
  acks.n = acks.bytes = 0;
  send_frame();
  /* the group commit comes after the answer: an ack never waits for an
  ** fdatasync of older records (a failure is sticky: the next append is refused) */
  airlock_ledger_tick(acks.l);
}

static void refuse(int e, const char *message, int fatal)
{
  send_acks(); /* what was accepted before this is answered first, in order */
  begin("refuse", 4);
  kv_u64("errno", (uint64_t)(e < 0 ? -e : e));
  kv_str("message", message);
  airlock_pack_cstr(&pk, "fatal");
  if (fatal)
    msgpack_pack_true(&pk);
  else
    msgpack_pack_false(&pk);
  send_frame();
}

__attribute__((noreturn, format(printf, 3, 4))) static void die(int status, int e, const char *fmt, ...)
{
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  refuse(e, msg, 1);
  _exit(status);
}

/* ------------------------------------------------------------------ start */

static int hex_word(const char *s, size_t n)
{
  if (strlen(s) != n) return 0;
  return strspn(s, "0123456789abcdef") == n;
}

static int parse_u64(const char *s, uint64_t *v)
{
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-') return -1;
  *v = x;
  return 0;
}

/* mkdir -p dir (each new one 0700), before confinement: the host's grant names it. */
static int make_dirs(const char *dir)
{
  char *p = strdup(dir);
  if (p == NULL) return -ENOMEM;
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s != '\0') continue;
    char c = *s;
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
      int e = -errno;
      free(p);
      return e;
    }
    *s = c;
    if (c == '\0') break;
  }
  free(p);
  return 0;
}

static struct {
  const char *read[3], *write[2];
  airlock_layer layers[2];
} conf;

/* Confines the process: read (and, with rw, write) beneath the directories
** given, nothing else; the allowlist. Dies (status LEDGER_EXIT_CONFINE) when a
** layer cannot be applied: the ledger never runs half-confined. */
static void confine(const char *rd, const char *rd2, const char *rw)
{
  size_t n = 0;
  if (rd) conf.read[n++] = rd;
  if (rd2) conf.read[n++] = rd2;
  if (rw) conf.write[0] = rw;
  airlock_confine_spec s = {
      .landlock = 1,
      .fs_read = conf.read,
      .fs_write = rw ? conf.write : NULL,
      .seccomp = 1,
      .syscalls = allowed,
      .no_new_privs = 1,
  };
  if (airlock_confine_apply(&s, conf.layers) < 0) {
    const airlock_layer *l =
        conf.layers[0].status == AIRLOCK_LAYER_FAILED ? &conf.layers[0] : &conf.layers[1];
    die(LEDGER_EXIT_CONFINE, -EPERM,
        "confinement: the ledger process could not apply %s (%s); "
        "it read nothing and recorded nothing",
        l->name ? l->name : "a layer", l->detail);
  }
  for (int i = 0; i < 2; i++)
    if (conf.layers[i].status != AIRLOCK_LAYER_APPLIED)
      die(LEDGER_EXIT_CONFINE, -EPERM,
          "confinement: the ledger process requires %s, which was "
          "%s (%s); it read nothing and recorded nothing",
          conf.layers[i].name, airlock_layer_status_name(conf.layers[i].status), conf.layers[i].detail);
}

static void pack_confined(void)
{
  airlock_pack_cstr(&pk, "confined");
  msgpack_pack_map(&pk, 2);
  for (int i = 0; i < 2; i++)
    kv_str(conf.layers[i].name ? conf.layers[i].name : "?", airlock_layer_status_name(conf.layers[i].status));
}

/* Everything before the first byte from a client: a socket on fd 3, no other
** descriptor above it, no environment, SIGPIPE and SIGXFSZ ignored (a gone
** client is EPIPE, RLIMIT_FSIZE is -EFBIG), the libraries loaded. */
static void prepare(void)
{
  struct stat st;
  if (fstat(CHAN, &st) < 0 || !S_ISSOCK(st.st_mode)) _exit(LEDGER_EXIT_USAGE);
  syscall(SYS_close_range, CHAN + 1, ~0u, 0);
  clearenv();
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);
  msgpack_sbuffer_init(&out);
  msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
  char err[256];
  if (ledger_crypto_init(err, sizeof err) < 0) die(LEDGER_EXIT_CONFINE, -EIO, "%s", err);
  airlock_ledger_set_codec(ledger_zstd_codec());
}

/* ------------------------------------------------------------------ frames in */

static ledger_inbox in;
static msgpack_zone msg_zone; /* the last frame's decoded objects; cleared for the next */
static msgpack_object msg;

/* Work for the time no client message waits: a step of the seal in progress,
** one at a time, as long as the socket stays empty. */
static void idle_work(void)
{
  if (acks.l == NULL) return;
  while (airlock_ledger_seal_pending(acks.l)) {
    struct pollfd p = {.fd = CHAN, .events = POLLIN};
    if (poll(&p, 1, 0) != 0) return;
    airlock_ledger_seal_step(acks.l); /* a failure is the ledger's: sticky, or retried later */
  }
}

/* The next frame's body from the client (1), or 0 at EOF. Once nothing more
** is there to read, the acks go out (before this process would wait), then a
** pending seal gets the idle time; it waits at most until the open session's
** next commit is due (wait: 0, or -1 forever before there is one); *timed_out
** says that time came. */
static int next_body(const uint8_t **body, uint32_t *len, int *timed_out)
{
  *timed_out = 0;
  for (;;) {
    int rc = ledger_inbox_next(&in, body, len);
    if (rc == 1) return 1;
    /* SECURITY: a length over the limit is refused before any allocation. */
    if (rc == -EMSGSIZE)
      die(LEDGER_EXIT_PROTOCOL, rc,
          "ledger: protocol: the producer sent a frame of %" PRIu32
          " bytes, over the limit of %u; the ledger process refuses it and ends",
          *len, LEDGER_PROTO_FRAME_MAX);
    if (rc < 0) die(LEDGER_EXIT_PROTOCOL, rc, "ledger: protocol: the producer sent a frame of length 0");
    /* always: the socket was empty at the last read, and the producer waits
    ** for its answer (each append synced alone): it goes now, without first
    ** asking the socket again */
    if (in.drained && acks.l && airlock_ledger_durability(acks.l) == AIRLOCK_DURABLE_ALWAYS) {
      in.drained = 0;
      send_acks();
    }
    ssize_t n = ledger_inbox_fill(&in, CHAN);
    if (n > 0) continue;
    if (n == 0) {
      if (ledger_inbox_partial(&in))
        die(LEDGER_EXIT_PROTOCOL, -EPROTO,
            "ledger: protocol: the producer closed the connection "
            "inside a frame");
      return 0;
    }
    if (n != -EAGAIN)
      die(LEDGER_EXIT_PROTOCOL, (int)n, "ledger: protocol: reading a frame failed: %s",
          airlock_strerror((int)-n));
    send_acks(); /* nothing more to read now: answer what was */
    idle_work();
    int due = acks.l ? airlock_ledger_sync_due_ms(acks.l) : -1;
    struct pollfd p = {.fd = CHAN, .events = POLLIN};
    if (poll(&p, 1, due) == 0) {
      *timed_out = 1;
      return 0;
    }
  }
}

/* A frame's body decoded (checked first as untrusted bytes): a map. */
static const msgpack_object *decode(const uint8_t *body, uint32_t len)
{
  char why[200];
  if (airlock_msg_check(body, len, why, sizeof why) < 0)
    die(LEDGER_EXIT_PROTOCOL, -EPROTO,
        "ledger: protocol: the producer sent bytes that are not "
        "one message (%s)",
        why);
  msgpack_zone_clear(&msg_zone);
  if (len > (64u << 10)) { /* a big frame's chunk is not kept for the next ones */
    msgpack_zone_destroy(&msg_zone);
    msgpack_zone_init(&msg_zone, 4096);
  }
  size_t off = 0;
  if (msgpack_unpack((const char *)body, len, &off, &msg_zone, &msg) != MSGPACK_UNPACK_SUCCESS ||
      off != len || msg.type != MSGPACK_OBJECT_MAP)
    die(LEDGER_EXIT_PROTOCOL, -EPROTO, "ledger: protocol: a message must be a map");
  return &msg;
}

/* A packed map carried as bin (fields, session), checked as untrusted bytes
** and decoded into zone. NULL when absent. */
static const msgpack_object *blob_map(const msgpack_object *m, const char *key, msgpack_zone *zone,
                                      msgpack_object *obj)
{
  const char *p;
  uint32_t n;
  if (airlock_msg_field(m, key) == NULL) return NULL;
  if (!ledger_proto_bin(m, key, &p, &n))
    die(LEDGER_EXIT_PROTOCOL, -EPROTO, "ledger: protocol: field '%s' must be a packed map (bin)", key);
  char why[200];
  if (airlock_msg_check(p, n, why, sizeof why) < 0)
    die(LEDGER_EXIT_PROTOCOL, -EPROTO, "ledger: protocol: field '%s' is not one message (%s)", key, why);
  size_t off = 0;
  if (msgpack_unpack(p, n, &off, zone, obj) != MSGPACK_UNPACK_SUCCESS)
    die(LEDGER_EXIT_PROTOCOL, -ENOMEM, "ledger: out of memory decoding field '%s'", key);
  return obj;
}

/* A request's fields, found in one pass over its map. A producer never names
** the session, a seq or a grant: what it is writing to is this process's
** grant. A message that tries is a lie, and ends it. */
struct request {
  const msgpack_object *t, *kind, *run, *fields, *session;
};

static int key_is(const msgpack_object *k, const char *w, size_t n)
{
  return k->via.str.size == n && memcmp(k->via.str.ptr, w, n) == 0;
}

static void scan(const msgpack_object *m, struct request *r)
{
  static const char *const own[] = {"session_id", "grant", "dir", "seq", "id", NULL};
  memset(r, 0, sizeof *r);
  for (uint32_t i = 0; i < m->via.map.size; i++) {
    const msgpack_object *k = &m->via.map.ptr[i].key, *v = &m->via.map.ptr[i].val;
    if (k->type != MSGPACK_OBJECT_STR) continue;
    if (key_is(k, "t", 1))
      r->t = v;
    else if (key_is(k, "kind", 4))
      r->kind = v;
    else if (key_is(k, "run", 3))
      r->run = v;
    else if (key_is(k, "fields", 6))
      r->fields = v;
    else if (key_is(k, "session", 7))
      r->session = v;
    else
      for (const char *const *o = own; *o; o++)
        if (key_is(k, *o, strlen(*o)))
          die(LEDGER_EXIT_PROTOCOL, -EPERM,
              "ledger: protocol: the producer named '%s' in its "
              "message; the session, its seqs and the grant are the ledger process's own, never a "
              "producer's; the ledger process ends the connection",
              *o);
  }
}

/* The big-endian unsigned integer in b[0..n), n at most 8. */
static uint64_t be_uint(const uint8_t *b, unsigned n)
{
  uint64_t v = 0;
  for (unsigned j = 0; j < n; j++) v = v << 8 | b[j];
  return v;
}

/* An append as producers send it: a map of t = "append", kind (a string),
** run (an unsigned integer) and fields (bin) or not, nothing else, each once.
** Read in place, every length bounded by the frame's; 1 when the frame is
** exactly that. Anything else is 0, and the general path decodes it and says
** what is wrong with it (or what it is). */
struct quick {
  const char *kind, *fields;
  uint32_t kn, fn;
  uint64_t run;
};

static int quick_append(const uint8_t *b, uint32_t len, struct quick *q)
{
  if (len < 1 || (b[0] != 0x83 && b[0] != 0x84)) return 0;
  unsigned pairs = b[0] & 0x0f, seen = 0;
  size_t p = 1;
  q->fields = NULL;
  q->fn = 0;
  for (unsigned i = 0; i < pairs; i++) {
    if (p >= len || b[p] < 0xa1 || b[p] > 0xa6) return 0;
    size_t kl = b[p] & 0x1f;
    if (len - p - 1 < kl + 1) return 0;
    const char *k = (const char *)b + p + 1;
    p += 1 + kl;
    uint8_t tag = b[p++];
    uint64_t n = 0;
    unsigned lb = 0;
    if (kl == 1 && k[0] == 't' && !(seen & 1)) {
      if (tag != 0xa6 || len - p < 6 || memcmp(b + p, "append", 6) != 0) return 0;
      p += 6;
      seen |= 1;
      continue;
    }
    if (kl == 4 && memcmp(k, "kind", 4) == 0 && !(seen & 2)) {
      if (tag >= 0xa0 && tag <= 0xbf)
        n = tag & 0x1f;
      else if (tag == 0xd9 && p < len)
        n = b[p++];
      else
        return 0;
      if (len - p < n) return 0;
      q->kind = (const char *)b + p;
      q->kn = (uint32_t)n;
      p += n;
      seen |= 2;
      continue;
    }
    if (kl == 3 && memcmp(k, "run", 3) == 0 && !(seen & 4)) {
      if (tag <= 0x7f)
        n = tag;
      else if (tag >= 0xcc && tag <= 0xcf)
        lb = 1u << (tag - 0xcc);
      else
        return 0;
      if (len - p < lb) return 0;
      if (lb > 0) /* else a positive fixint: the tag is the value */
        n = be_uint(b + p, lb);
      p += lb;
      q->run = n;
      seen |= 4;
      continue;
    }
    if (kl == 6 && memcmp(k, "fields", 6) == 0 && !(seen & 8)) {
      if (tag < 0xc4 || tag > 0xc6) return 0;
      lb = 1u << (tag - 0xc4);
      if (len - p < lb) return 0;
      n = be_uint(b + p, lb);
      p += lb;
      if (len - p < n) return 0;
      q->fields = (const char *)b + p;
      q->fn = (uint32_t)n;
      p += n;
      seen |= 8;
      continue;
    }
    return 0;
  }
  return p == len && (seen & 7) == 7 && pairs == (seen & 8 ? 4u : 3u);
}

static int request_is(const struct request *r, const char *w)
{
  size_t n = strlen(w);
  return r->t != NULL && r->t->type == MSGPACK_OBJECT_STR && r->t->via.str.size == n &&
         memcmp(r->t->via.str.ptr, w, n) == 0;
}

/* ------------------------------------------------------------------ write mode */

static void hello(airlock_ledger *l, const airlock_ledger_report *rep)
{
  uint64_t seq;
  uint8_t h[AIRLOCK_LEDGER_HASH_LEN];
  airlock_ledger_head(l, &seq, h);
  begin("hello", 13);
  kv_u64("v", LEDGER_PROTO_VERSION);
  kv_str("grant", grant);
  kv_u64("pid", (uint64_t)getpid());
  kv_str("session_id", airlock_ledger_session_id(l));
  kv_u64("seq", seq);
  kv_bin("head", h, sizeof h);
  kv_u64("durable", airlock_ledger_durable_seq(l));
  kv_u64("bytes", airlock_ledger_size(l));
  airlock_pack_cstr(&pk, "report");
  ledger_proto_pack_report(&pk, rep);
  pack_confined();
  kv_u64("records", rep->records);
  kv_u64("torn_bytes", rep->torn_bytes);
  send_frame();
}

/* write's arguments: DIR GRANT DURABILITY BATCH_MS CREATE MAX_BYTES SEAL_BYTES. */
struct write_args {
  const char *dir;
  int durability;
  uint64_t batch_ms, create, max_bytes, seal_bytes;
};

static void parse_write_args(int argc, char **argv, struct write_args *a)
{
  if (argc != 9) _exit(LEDGER_EXIT_USAGE);
  a->dir = argv[2];
  a->durability = airlock_ledger_durability_from_name(argv[4]);
  if (a->durability < 0 || parse_u64(argv[5], &a->batch_ms) < 0 || a->batch_ms > 3600000 ||
      parse_u64(argv[6], &a->create) < 0 || a->create > 1 || parse_u64(argv[7], &a->max_bytes) < 0 ||
      parse_u64(argv[8], &a->seal_bytes) < 0)
    _exit(LEDGER_EXIT_USAGE);
}

/* The session's directory, made when asked, then this process confined to it. */
static void enter_dir(const struct write_args *a)
{
  if (a->create) {
    int rc = make_dirs(a->dir);
    if (rc < 0) die(LEDGER_EXIT_OPEN, rc, "ledger: cannot create %s: %s", a->dir, airlock_strerror(-rc));
  } else if (access(a->dir, F_OK) != 0) {
    die(LEDGER_EXIT_OPEN, -ENOENT, "ledger: %s does not exist (open with create to start a session)", a->dir);
  }
  confine(a->dir, NULL, a->dir);
}

/* The first message, 'open' (the new session's fields, if any), and the
** journal opened: *l, or NULL when the peer left first (0) or the journal
** was refused (LEDGER_EXIT_OPEN, the refusal sent with its report). */
static int open_session(const struct write_args *a, airlock_ledger **l)
{
  int timed_out;
  const uint8_t *body;
  uint32_t blen;
  *l = NULL;
  if (!next_body(&body, &blen, &timed_out)) return LEDGER_EXIT_OK;
  const msgpack_object *m = decode(body, blen);
  struct request req;
  scan(m, &req);
  if (!request_is(&req, "open"))
    die(LEDGER_EXIT_PROTOCOL, -EPROTO, "ledger: protocol: the first message must be 'open'");
  msgpack_zone zone;
  msgpack_zone_init(&zone, 4096);
  msgpack_object sfields;
  airlock_ledger_opts o = {.create = (int)a->create,
                           .durability = a->durability,
                           .batch_ms = (unsigned)a->batch_ms,
                           .seal_bytes = a->seal_bytes,
                           .coalesce = 1,      /* written once per batch of requests, before its ack */
                           .seal_stepped = 1}; /* compressed in idle time: idle_work */
  o.session_fields = blob_map(m, "session", &zone, &sfields);
  airlock_ledger_report rep;
  char err[1024];
  int rc = airlock_ledger_open(a->dir, &o, l, &rep, err, sizeof err);
  msgpack_zone_destroy(&zone);
  if (rc < 0) {
    /* the report tells a damaged journal's first bad seq */
    begin("refuse", 5);
    kv_u64("errno", (uint64_t)-rc);
    kv_str("message", err);
    airlock_pack_cstr(&pk, "fatal");
    msgpack_pack_true(&pk);
    airlock_pack_cstr(&pk, "report");
    ledger_proto_pack_report(&pk, &rep);
    send_frame();
    *l = NULL;
    return LEDGER_EXIT_OPEN;
  }
  hello(*l, &rep);
  return LEDGER_EXIT_OK;
}

/* An append (q from the fast path, else read from req), refused with its
** reason past max_bytes; acked in batches (send_acks). */
static void serve_append(airlock_ledger *l, const struct request *req, struct quick *q, int quick,
                         uint64_t max_bytes)
{
  char kbuf[AIRLOCK_LEDGER_KIND_MAX + 2], err[512];
  if (!quick) {
    if (req->kind == NULL || req->kind->type != MSGPACK_OBJECT_STR || req->run == NULL ||
        req->run->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
      die(LEDGER_EXIT_PROTOCOL, -EPROTO,
          "ledger: protocol: append needs kind (a string) and run (an unsigned integer)");
    if (req->fields != NULL && req->fields->type != MSGPACK_OBJECT_BIN)
      die(LEDGER_EXIT_PROTOCOL, -EPROTO, "ledger: protocol: field 'fields' must be a packed map (bin)");
    q->kind = req->kind->via.str.ptr;
    q->kn = req->kind->via.str.size;
    q->run = req->run->via.u64;
    q->fields = req->fields ? req->fields->via.bin.ptr : NULL;
    q->fn = req->fields ? req->fields->via.bin.size : 0;
  }
  /* a kind too long for a word is the ledger's own refusal, with its message */
  uint32_t kn = q->kn;
  if (kn > AIRLOCK_LEDGER_KIND_MAX) kn = AIRLOCK_LEDGER_KIND_MAX + 1;
  memcpy(kbuf, q->kind, kn);
  kbuf[kn] = '\0';
  if (memchr(q->kind, '\0', kn) != NULL) kbuf[0] = '\0';
  uint64_t before = airlock_ledger_size(l), seq = 0;
  if (max_bytes > 0 && before >= max_bytes) {
    snprintf(err, sizeof err,
             "ledger: the session's journal has reached %" PRIu64 " bytes, its bound of %" PRIu64
             " (the open's max_bytes); nothing more is recorded, so nothing more is performed",
             before, max_bytes);
    refuse(-EDQUOT, err, 0);
    return;
  }
  /* the fields' pairs go into the record as they came, checked, not re-encoded */
  int rc = airlock_ledger_append_packed(l, kbuf, q->run, q->fields, q->fn, &seq);
  if (rc == -EPROTO)
    die(LEDGER_EXIT_PROTOCOL, rc, "ledger: protocol: field 'fields' is not one packed map (%s)",
        airlock_ledger_error(l));
  if (rc < 0) {
    refuse(rc, airlock_ledger_error(l), 0);
    return;
  }
  acks.n++;
  acks.bytes += airlock_ledger_size(l) - before;
  acks.seq = seq;
  if (acks.n >= ACK_MAX) send_acks();
}

/* A flush: the acks due, then the journal synced, answered with how far. */
static void serve_flush(airlock_ledger *l)
{
  send_acks();
  int rc = airlock_ledger_flush(l);
  if (rc < 0) {
    refuse(rc, airlock_ledger_error(l), 0);
    return;
  }
  begin("synced", 2);
  kv_u64("durable", airlock_ledger_durable_seq(l));
  send_frame();
}

/* The end: the last acks, the journal synced (durability none promised no
** sync, and gets none at the end either) and closed, answered 'closed'. */
static void close_session(airlock_ledger *l, int durability)
{
  char err[1024];
  send_acks();
  acks.l = NULL;
  int rc = durability == AIRLOCK_DURABLE_NONE ? 0 : airlock_ledger_flush(l);
  snprintf(err, sizeof err, "%s", rc < 0 ? airlock_ledger_error(l) : "");
  uint64_t durable = airlock_ledger_durable_seq(l);
  airlock_ledger_close(l);
  begin("closed", 4);
  kv_u64("durable", durable);
  kv_u64("errno", (uint64_t)(rc < 0 ? -rc : 0));
  kv_str("message", rc < 0 ? err : "");
  send_frame();
}

static int serve_write(int argc, char **argv)
{
  struct write_args a;
  parse_write_args(argc, argv, &a);
  enter_dir(&a);
  airlock_ledger *l;
  int code = open_session(&a, &l);
  if (!l) return code;
  acks.l = l;
  for (;;) {
    int timed_out;
    const uint8_t *body;
    uint32_t blen;
    int got = next_body(&body, &blen, &timed_out);
    if (timed_out) {
      airlock_ledger_tick(l); /* a failure is sticky: the next append is refused */
      continue;
    }
    if (!got) break;
    if (acks.n == 0) /* with acks to send, the commit follows them (send_acks) */
      airlock_ledger_tick(l);
    struct quick q = {0};
    struct request req = {0};
    const msgpack_object *m = NULL;
    int quick = quick_append(body, blen, &q);
    if (!quick) {
      m = decode(body, blen);
      scan(m, &req);
    }
    if (quick || request_is(&req, "append")) {
      serve_append(l, &req, &q, quick, a.max_bytes);
    } else if (request_is(&req, "flush")) {
      serve_flush(l);
    } else if (request_is(&req, "close")) {
      break;
    } else {
      const char *t = "?";
      uint32_t tn = 1;
      ledger_proto_str(m, "t", &t, &tn);
      die(LEDGER_EXIT_PROTOCOL, -EPROTO,
          "ledger: protocol: unexpected message '%.*s' (append, flush or close)", (int)(tn > 32 ? 32 : tn),
          t);
    }
  }
  close_session(l, a.durability);
  return LEDGER_EXIT_OK;
}

/* ------------------------------------------------------------------ read-only modes */

static void end_frame(int rc, const airlock_ledger_report *rep, const char *message)
{
  begin("end", 4);
  airlock_pack_cstr(&pk, "rc");
  msgpack_pack_int64(&pk, rc);
  airlock_pack_cstr(&pk, "report");
  ledger_proto_pack_report(&pk, rep);
  kv_str("message", message ? message : "");
  send_frame();
}

static int serve_read(int argc, char **argv)
{
  if (argc != 4) _exit(LEDGER_EXIT_USAGE);
  const char *dir = argv[2];
  airlock_ledger_report rep;
  memset(&rep, 0, sizeof rep);
  char err[512];
  if (access(dir, F_OK) != 0) {
    int e = errno;
    char *j = ledger_join(dir, "journal");
    snprintf(err, sizeof err, "ledger: cannot open %s: %s", j ? j : dir, airlock_strerror(e));
    free(j);
    end_frame(-e, &rep, err);
    return LEDGER_EXIT_OPEN;
  }
  confine(dir, NULL, NULL);
  airlock_ledger_reader *r;
  int rc = ledger_reader_open_dir(dir, 0, &r, err, sizeof err);
  if (rc < 0) {
    end_frame(rc, &rep, err);
    return LEDGER_EXIT_OPEN;
  }
  airlock_ledger_record rec;
  while ((rc = airlock_ledger_reader_next(r, &rec)) == 1) {
    begin("rec", 5);
    kv_u64("seq", rec.seq);
    kv_u64("offset", rec.offset);
    kv_bin("hash", rec.hash, sizeof rec.hash);
    kv_bin("body", rec.raw, rec.raw_len);
    send_frame();
    if (out.alloc > (1u << 20)) { /* one big record does not pin its buffer */
      msgpack_sbuffer_destroy(&out);
      msgpack_sbuffer_init(&out);
    }
  }
  airlock_ledger_reader_report(r, &rep);
  end_frame(rc, &rep, rc < 0 ? airlock_ledger_reader_error(r) : "");
  airlock_ledger_reader_close(r);
  return LEDGER_EXIT_OK;
}

/* "SEQ,SEQ,...": strictly increasing seqs >= 1, at most max of them. */
static int parse_seqs(const char *s, uint64_t *seqs, size_t max, size_t *n)
{
  *n = 0;
  while (*s) {
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9' || *n == max) return -1;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || x == 0 || (*n > 0 && x <= seqs[*n - 1]) || (*end != ',' && *end != '\0')) return -1;
    seqs[(*n)++] = x;
    s = *end == ',' ? end + 1 : end;
  }
  return *n > 0 ? 0 : -1;
}

/* verify DIR GRANT --at SEQS: one walk that verifies the whole journal, as
** verify does, and reports the chain hash at each seq asked for (those the
** journal reaches, before any damage) in the end frame: at = [[seq, hash]...]. */
static int serve_verify_at(const char *dir, const char *list)
{
  static uint64_t seqs[AIRLOCK_LEDGER_PROC_AT_MAX], at[AIRLOCK_LEDGER_PROC_AT_MAX];
  static uint8_t hashes[AIRLOCK_LEDGER_PROC_AT_MAX][AIRLOCK_LEDGER_HASH_LEN];
  size_t n, k = 0, found = 0;
  if (parse_seqs(list, seqs, AIRLOCK_LEDGER_PROC_AT_MAX, &n) < 0) _exit(LEDGER_EXIT_USAGE);
  airlock_ledger_report rep;
  memset(&rep, 0, sizeof rep);
  confine(dir, NULL, NULL);
  airlock_ledger_reader *r;
  int rc = ledger_reader_open_dir(dir, 0, &r, rep.reason + 4, sizeof rep.reason - 4);
  if (rc < 0) {
    memcpy(rep.reason, "io: ", 4);
    end_frame(rc, &rep, "");
    return LEDGER_EXIT_OPEN;
  }
  airlock_ledger_record rec;
  while ((rc = airlock_ledger_reader_next(r, &rec)) == 1) {
    while (k < n && seqs[k] < rec.seq) k++;
    if (k < n && seqs[k] == rec.seq) {
      at[found] = rec.seq;
      memcpy(hashes[found++], rec.hash, AIRLOCK_LEDGER_HASH_LEN);
      k++;
    }
  }
  airlock_ledger_reader_report(r, &rep);
  airlock_ledger_reader_close(r);
  begin("end", 5);
  airlock_pack_cstr(&pk, "rc");
  msgpack_pack_int64(&pk, rc);
  airlock_pack_cstr(&pk, "report");
  ledger_proto_pack_report(&pk, &rep);
  kv_str("message", "");
  airlock_pack_cstr(&pk, "at");
  msgpack_pack_array(&pk, (uint32_t)found);
  for (size_t i = 0; i < found; i++) {
    msgpack_pack_array(&pk, 2);
    msgpack_pack_uint64(&pk, at[i]);
    msgpack_pack_bin(&pk, AIRLOCK_LEDGER_HASH_LEN);
    msgpack_pack_bin_body(&pk, hashes[i], AIRLOCK_LEDGER_HASH_LEN);
  }
  send_frame();
  return LEDGER_EXIT_OK;
}

static int serve_verify(int argc, char **argv)
{
  if (argc != 4 && argc != 5 && !(argc == 6 && strcmp(argv[4], "--at") == 0)) _exit(LEDGER_EXIT_USAGE);
  const char *dir = argv[2];
  uint64_t cseq = 0;
  uint8_t chash[AIRLOCK_LEDGER_HASH_LEN];
  if (argc == 5 && airlock_ledger_parse_checkpoint(argv[4], &cseq, chash) < 0) _exit(LEDGER_EXIT_USAGE);
  airlock_ledger_report rep;
  memset(&rep, 0, sizeof rep);
  if (access(dir, F_OK) != 0) {
    int e = errno;
    char *j = ledger_join(dir, "journal");
    snprintf(rep.reason, sizeof rep.reason, "io: ledger: cannot open %s: %s", j ? j : dir,
             airlock_strerror(e));
    free(j);
    end_frame(-e, &rep, "");
    return LEDGER_EXIT_OPEN;
  }
  if (argc == 6) return serve_verify_at(dir, argv[5]);
  confine(dir, NULL, NULL);
  int rc = airlock_ledger_verify(dir, argc == 5 ? &cseq : NULL, argc == 5 ? chash : NULL, &rep);
  end_frame(rc, &rep, "");
  return LEDGER_EXIT_OK;
}

static int serve_branch(int argc, char **argv)
{
  /* branch SRC AT DST GRANT */
  if (argc != 6) _exit(LEDGER_EXIT_USAGE);
  const char *src = argv[2], *dst = argv[4];
  uint64_t at;
  airlock_ledger_report rep;
  memset(&rep, 0, sizeof rep);
  char err[1024];
  if (parse_u64(argv[3], &at) < 0) _exit(LEDGER_EXIT_USAGE);
  if (access(src, F_OK) != 0) {
    int e = errno;
    char *j = ledger_join(src, "journal");
    snprintf(err, sizeof err, "ledger: cannot open %s: %s", j ? j : src, airlock_strerror(e));
    free(j);
    end_frame(-e, &rep, err);
    return LEDGER_EXIT_OPEN;
  }
  int rc = make_dirs(dst);
  if (rc < 0) {
    snprintf(err, sizeof err, "ledger: cannot create %s: %s", dst, airlock_strerror(-rc));
    end_frame(rc, &rep, err);
    return LEDGER_EXIT_OPEN;
  }
  confine(src, dst, dst);
  rc = airlock_ledger_branch(src, at, dst, err, sizeof err);
  end_frame(rc, &rep, rc < 0 ? err : "");
  return LEDGER_EXIT_OK;
}

/* probe DIR GRANT: confined as a writer of DIR, it tries to leave. Each
** attempt is a real one; the last, execve, is expected to end the process. */
static void probe_result(const char *name, int64_t rc)
{
  begin("probe", 3);
  kv_str("name", name);
  airlock_pack_cstr(&pk, "rc");
  msgpack_pack_int64(&pk, rc);
  send_frame();
}

static int serve_probe(int argc, char **argv)
{
  if (argc != 4) _exit(LEDGER_EXIT_USAGE);
  const char *dir = argv[2];
  char inside[4096];
  snprintf(inside, sizeof inside, "%s/probe-inside", dir);
  confine(dir, NULL, dir);
  int fd = open(inside, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600); /* the control */
  probe_result("write inside", fd < 0 ? -errno : 0);
  if (fd >= 0) close(fd);
  unlink(inside);
  fd = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
  probe_result("read /etc/passwd", fd < 0 ? -errno : 0);
  if (fd >= 0) close(fd);
  fd = open("/tmp/airlock-ledgerd-escape", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  probe_result("write /tmp", fd < 0 ? -errno : 0);
  if (fd >= 0) close(fd);
  /* the parent of the session directory: beneath is all Landlock grants */
  char parent[4096];
  snprintf(parent, sizeof parent, "%s/../probe-outside", dir);
  fd = open(parent, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  probe_result("write beside the session", fd < 0 ? -errno : 0);
  if (fd >= 0) close(fd);
  probe_result("environment", environ != NULL && environ[0] != NULL ? 1 : 0);
  /* socket() and execve are not in the allowlist: the process dies by SIGSYS */
  static char *const args[] = {"/bin/true", NULL};
  probe_result("execve", 1);
  execve(args[0], args, environ);
  probe_result("execve returned", -errno);
  return LEDGER_EXIT_OK;
}

int main(int argc, char **argv)
{
#ifdef AIRLOCK_CRASH_POINTS
  /* The test build alone (ledger/journal_int.h): the phase of a seal to stop
  ** in, read before prepare() clears the environment; a name it does not
  ** know ends it before it serves anyone. */
  if (ledger_crash_arm(getenv("AIRLOCK_LEDGER_CRASH_AT")) < 0) _exit(LEDGER_EXIT_USAGE);
#endif
  prepare();
  if (argc < 4) _exit(LEDGER_EXIT_USAGE);
  const char *mode = argv[1];
  const char *g = strcmp(mode, "branch") == 0 ? (argc == 6 ? argv[5] : "") : argv[3];
  if (!hex_word(g, LEDGER_PROTO_GRANT_HEX)) _exit(LEDGER_EXIT_USAGE);
  memcpy(grant, g, sizeof grant);
  if (ledger_inbox_init(&in, LEDGER_PROTO_FRAME_MAX) < 0) _exit(LEDGER_EXIT_USAGE);
  msgpack_zone_init(&msg_zone, 4096);
  if (strcmp(mode, "write") == 0) return serve_write(argc, argv);
  if (strcmp(mode, "read") == 0) return serve_read(argc, argv);
  if (strcmp(mode, "verify") == 0) return serve_verify(argc, argv);
  if (strcmp(mode, "branch") == 0) return serve_branch(argc, argv);
  if (strcmp(mode, "probe") == 0) return serve_probe(argc, argv);
  return LEDGER_EXIT_USAGE;
}
