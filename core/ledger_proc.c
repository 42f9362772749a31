/*
** ledger_proc.c -- the client side of a session's ledger process
** (core/ledger_proc.h): starting airlock-ledgerd with a fresh grant, producers'
** appends (waited for, or queued in batches), commits, and readers, verify and
** branch through read-only ledger processes. Everything the process sends is
** untrusted: lengths are bounded before allocation, messages checked before
** they are decoded, seqs must follow one another.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "airlock.h"
#include "ledger_proc.h"
#include "ledger_int.h"
#include "ledger_proto.h"

#define WINDOW     4096        /* queued appends in flight at most */
#define SEND_BYTES (16u << 10) /* queued bytes sent at once, without waiting */
#define CLOSE_MS   30000       /* the final commit may take a slow disk's while */
#define READ_MS    60000       /* a reader's next record */

/* ------------------------------------------------------------------ the process */

struct child {
  pid_t pid;
  int pidfd, fd;
  int reaped, status;
  airlock_frame_reader rd;
  msgpack_unpacked u;
};

static double mono_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int draw_grant(char out[LEDGER_PROTO_GRANT_HEX + 1])
{
  uint8_t b[LEDGER_PROTO_GRANT_HEX / 2];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? -errno : -EIO;
    got += (size_t)n;
  }
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < sizeof b; i++) {
    out[2 * i] = digits[b[i] >> 4];
    out[2 * i + 1] = digits[b[i] & 15];
  }
  out[LEDGER_PROTO_GRANT_HEX] = '\0';
  return 0;
}

/* Starts program with argv. The spawner gives it an empty environment, stdin,
** stdout and stderr on /dev/null, the socketpair on fd 3 and nothing else,
** a net, ipc and uts namespace of its own (and a user namespace when we are
** not root), no capability, no_new_privs, no core dumps; it keeps our uid,
** since it must own the session directory (as root: uid 0 with no
** capability, inside Landlock and the allowlist it applies itself). */
static int child_start(struct child *c, const char *const *argv, char *err, size_t errlen)
{
  memset(c, 0, sizeof *c);
  c->pid = -1;
  c->pidfd = c->fd = -1;
  airlock_frame_reader_init(&c->rd, LEDGER_PROTO_FRAME_MAX);
  msgpack_unpacked_init(&c->u);
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return -errno;
  char cwd[PATH_MAX];
  airlock_rlimits rl = {.core = 0, .nofile = 64, .set_mask = AIRLOCK_RL_CORE | AIRLOCK_RL_NOFILE};
  airlock_spawn_opts o;
  memset(&o, 0, sizeof o);
  o.argv = argv;
  o.path = argv[0];
  o.workdir = getcwd(cwd, sizeof cwd); /* a relative session path means what it meant here */
  o.channel = 1;
  o.stdin_fd = devnull;
  o.stdout_fd = devnull;
  o.stderr_fd = devnull;
  o.namespaces = CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | (geteuid() == 0 ? 0 : CLONE_NEWUSER);
  o.no_new_privs = 1;
  o.drop_caps = 1;
  o.keep_identity = 1;
  o.rlimits = &rl;
  airlock_child ch;
  char why[256];
  int rc = airlock_spawn(&o, &ch, why, sizeof why);
  close(devnull);
  if (rc < 0)
    return ledger_fail(err, errlen, rc, "ledger: cannot start the ledger process %s: %s", argv[0], why);
  c->pid = ch.pid;
  c->pidfd = ch.pidfd;
  c->fd = ch.chan;
  if (ch.out >= 0) close(ch.out);
  if (ch.err >= 0) close(ch.err);
  if (ch.notify >= 0) close(ch.notify);
  if (ch.status >= 0) close(ch.status);
  return 0;
}

/* Reaps the child, waiting at most ms (then SIGKILL). */
static void child_reap(struct child *c, int ms)
{
  if (c->pid <= 0 || c->reaped) return;
  double end = mono_ms() + ms;
  for (;;) {
    int st;
    pid_t w = waitpid(c->pid, &st, WNOHANG);
    if (w == c->pid || (w < 0 && errno != EINTR)) {
      c->reaped = 1;
      c->status = w == c->pid ? st : 0;
      return;
    }
    double left = end - mono_ms();
    if (left <= 0) {
      kill(c->pid, SIGKILL);
      end = mono_ms() + 5000;
      ms = 0;
      if (waitpid(c->pid, &st, 0) == c->pid) c->status = st;
      c->reaped = 1;
      return;
    }
    if (c->pidfd >= 0) {
      struct pollfd p = {.fd = c->pidfd, .events = POLLIN};
      poll(&p, 1, (int)left + 1);
    } else {
      usleep(1000);
    }
  }
}

static void child_free(struct child *c)
{
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  child_reap(c, 0);
  if (c->pidfd >= 0) close(c->pidfd);
  c->pidfd = -1;
  airlock_frame_reader_free(&c->rd);
  msgpack_unpacked_destroy(&c->u);
}

/* "exited with status 1", "killed by signal 9 (Killed)" */
static const char *status_text(int st, char *buf, size_t len)
{
  if (WIFSIGNALED(st))
    snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  else if (WIFEXITED(st))
    snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
  else
    snprintf(buf, len, "ended");
  return buf;
}

/* Writes n bytes before deadline. 0, -ETIMEDOUT, -EPIPE (gone) or -errno. */
static int send_all(struct child *c, const void *p, size_t n, double deadline)
{
  const char *s = p;
  while (n > 0) {
    ssize_t k = send(c->fd, s, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      s += k;
      n -= (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno == ECONNRESET ? -EPIPE : -errno;
    double left = deadline - mono_ms();
    if (left <= 0) return -ETIMEDOUT;
    struct pollfd pf = {.fd = c->fd, .events = POLLOUT};
    poll(&pf, 1, (int)left + 1);
  }
  return 0;
}

/* The next message from the process, checked and decoded into c->u, before
** deadline. Returns 1 with *m, 0 at EOF, -ETIMEDOUT, -EPROTO (bad bytes: an
** untrusted peer), or -errno. */
static int recv_msg(struct child *c, double deadline, const msgpack_object **m, char *why, size_t whylen)
{
  airlock_frame_reader_reset(&c->rd);
  for (;;) {
    int rc = airlock_frame_read_fd(&c->rd, c->fd);
    if (rc == AIRLOCK_FRAME_READY) break;
    if (rc == AIRLOCK_FRAME_EOF) return 0;
    if (rc == -ECONNRESET) return 0;
    if (rc != AIRLOCK_FRAME_AGAIN) {
      /* SECURITY: the frame reader bounds the length before it allocates */
      snprintf(why, whylen, "%s", rc == -EMSGSIZE ? "a frame over the limit" : airlock_strerror(-rc));
      return rc == -EMSGSIZE ? -EPROTO : rc;
    }
    double left = deadline - mono_ms();
    if (left <= 0) return -ETIMEDOUT;
    struct pollfd pf = {.fd = c->fd, .events = POLLIN};
    poll(&pf, 1, (int)left + 1);
  }
  if (airlock_msg_check(c->rd.body, c->rd.len, why, whylen) < 0) return -EPROTO;
  msgpack_unpacked_destroy(&c->u);
  msgpack_unpacked_init(&c->u);
  size_t off = 0;
  if (msgpack_unpack_next(&c->u, (const char *)c->rd.body, c->rd.len, &off) != MSGPACK_UNPACK_SUCCESS ||
      c->u.data.type != MSGPACK_OBJECT_MAP) {
    snprintf(why, whylen, "a message that is not a map");
    return -EPROTO;
  }
  *m = &c->u.data;
  return 1;
}

static void msg_text(const msgpack_object *m, const char *key, char *buf, size_t len)
{
  const char *s;
  uint32_t n;
  buf[0] = '\0';
  if (ledger_proto_str(m, key, &s, &n)) {
    if (n >= len) n = (uint32_t)len - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
  }
}

/* A refusal's errno, bounded to a plausible errno. */
static int msg_errno(const msgpack_object *m)
{
  uint64_t e = 0;
  if (!ledger_proto_u64(m, "errno", &e) || e == 0 || e > 4095) e = EIO;
  return -(int)e;
}

/* ------------------------------------------------------------------ writer */

struct airlock_ledger_proc {
  struct child c;
  char *dir;
  char grant[LEDGER_PROTO_GRANT_HEX + 1];
  char id_hex[2 * AIRLOCK_LEDGER_ID_LEN + 1];
  int durability;
  unsigned admit_ms;
  uint64_t seq, durable, queued;
  uint64_t acked_bytes; /* bytes of the records acknowledged and not yet reported */
  double due_at;        /* monotonic ms when the process commits the last ack's record; 0: unknown */
  uint8_t head[AIRLOCK_LEDGER_HASH_LEN];
  int sticky;
  msgpack_sbuffer q; /* framed requests not yet sent */
  char err[1024];
};

__attribute__((format(printf, 3, 4))) static int set_sticky(airlock_ledger_proc *p, int rc, const char *fmt,
                                                            ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err, sizeof p->err, fmt, ap);
  va_end(ap);
  p->sticky = rc;
  return rc;
}

/* The process is gone or must be: it is killed and reaped, and every later
** call fails with rc and a message saying what happened. */
static int lost(airlock_ledger_proc *p, int rc, const char *why)
{
  if (p->sticky) return p->sticky;
  char st[96] = "";
  if (rc == -EPIPE || rc == 0) {
    /* a process that ended on purpose said why before it did: read that */
    const msgpack_object *m;
    char why2[200];
    while (recv_msg(&p->c, mono_ms() + 100, &m, why2, sizeof why2) == 1) {
      if (ledger_proto_is(m, "refuse")) {
        char text[900];
        msg_text(m, "message", text, sizeof text);
        child_reap(&p->c, 200);
        return set_sticky(p, msg_errno(m), "%s", text);
      }
    }
  }
  if (rc == -ETIMEDOUT || rc == -EPROTO) kill(p->c.pid, SIGKILL);
  child_reap(&p->c, 200);
  if (p->c.reaped && p->c.status) status_text(p->c.status, st, sizeof st);
  if (rc == -ETIMEDOUT)
    return set_sticky(p, rc,
                      "ledger: the ledger process (pid %d) of %s did not answer within %u ms, "
                      "the admission deadline; it was killed, nothing more is recorded, so nothing "
                      "more is performed",
                      (int)p->c.pid, p->dir, p->admit_ms);
  if (rc == -EPROTO)
    return set_sticky(p, rc,
                      "ledger: the ledger process (pid %d) of %s sent %s; it was killed, "
                      "nothing more is recorded, so nothing more is performed",
                      (int)p->c.pid, p->dir, why);
  return set_sticky(p, -EPIPE,
                    "ledger: the ledger process (pid %d) of %s is gone (%s); nothing more "
                    "is recorded, so nothing more is performed; records it acknowledged are in the "
                    "journal, and opening the session again starts a new ledger process",
                    (int)p->c.pid, p->dir, st[0] ? st : "its socket closed");
}

/* Sends the queue, then reads answers until at most target appends are in
** flight (nowait: only the answers already there). A refusal of a queued
** append (one its producer was not waiting for) makes p sticky; one of the
** last append, when target is 0 and it was waited for, is returned as it is
** (the ledger says whether it stays usable). */
static int pump(airlock_ledger_proc *p, uint64_t target, int waited, int nowait)
{
  double deadline = mono_ms() + p->admit_ms;
  if (p->q.size > 0) {
    int rc = send_all(&p->c, p->q.data, p->q.size, deadline);
    msgpack_sbuffer_clear(&p->q);
    if (p->q.alloc > (1u << 20)) {
      msgpack_sbuffer_destroy(&p->q);
      msgpack_sbuffer_init(&p->q);
    }
    if (rc < 0) return lost(p, rc, "");
  }
  int result = 0;
  while (p->queued > target) {
    if (nowait && airlock_frame_reader_buffered(&p->c.rd) == 0) {
      struct pollfd pf = {.fd = p->c.fd, .events = POLLIN};
      if (poll(&pf, 1, 0) == 0) break;
    }
    const msgpack_object *m;
    char why[200];
    int rc = recv_msg(&p->c, deadline, &m, why, sizeof why);
    if (rc <= 0) return lost(p, rc, why);
    deadline = mono_ms() + p->admit_ms;
    if (ledger_proto_is(m, "ack")) {
      uint64_t seq = 0, n = 0, bytes = 0, durable = 0;
      const char *h;
      uint32_t hn;
      /* SECURITY: an ack answers appends that were sent, the next ones in order */
      if (!ledger_proto_u64(m, "n", &n) || n == 0 || n > p->queued || !ledger_proto_u64(m, "seq", &seq) ||
          seq != p->seq + n || !ledger_proto_u64(m, "bytes", &bytes) ||
          !ledger_proto_bin(m, "hash", &h, &hn) || hn != AIRLOCK_LEDGER_HASH_LEN ||
          !ledger_proto_u64(m, "durable", &durable) || durable > seq)
        return lost(p, -EPROTO, "an acknowledgement that does not follow the last one");
      int64_t due = -1;
      ledger_proto_i64(m, "due", &due);
      p->due_at = due >= 0 && due < 3600000 ? mono_ms() + (double)due : 0;
      p->seq = seq;
      p->acked_bytes += bytes;
      memcpy(p->head, h, hn);
      if (durable > p->durable) p->durable = durable;
      p->queued -= n;
    } else if (ledger_proto_is(m, "refuse")) {
      char text[900];
      msg_text(m, "message", text, sizeof text);
      int e = msg_errno(m);
      const msgpack_object *fatal = airlock_msg_field(m, "fatal");
      p->queued--;
      if ((fatal && fatal->type == MSGPACK_OBJECT_BOOLEAN && fatal->via.boolean) ||
          !(waited && p->queued == 0 && target == 0)) {
        set_sticky(p, e, "%s", text);
        child_reap(&p->c, 200);
        return e;
      }
      snprintf(p->err, sizeof p->err, "%s", text);
      result = e;
    } else {
      return lost(p, -EPROTO, "a message other than ack or refuse");
    }
  }
  return result;
}

static void pack_bin_field(msgpack_packer *pk, const char *key, const void *p, size_t n)
{
  airlock_pack_cstr(pk, key);
  msgpack_pack_bin(pk, n);
  msgpack_pack_bin_body(pk, p, n);
}

/* Appends one framed request {t, ...} to the queue; nfields counts t. */
static int queue_begin(airlock_ledger_proc *p, msgpack_packer *pk, const char *t, uint32_t nfields,
                       size_t *start)
{
  static const char zero[4];
  *start = p->q.size;
  msgpack_packer_init(pk, &p->q, msgpack_sbuffer_write);
  if (msgpack_sbuffer_write(&p->q, zero, sizeof zero) != 0) return -ENOMEM;
  msgpack_pack_map(pk, nfields);
  airlock_pack_cstr(pk, "t");
  airlock_pack_cstr(pk, t);
  return 0;
}

static int queue_end(airlock_ledger_proc *p, size_t start)
{
  size_t len = p->q.size - start - 4;
  if (len > LEDGER_PROTO_FRAME_MAX) {
    p->q.size = start;
    return -EMSGSIZE;
  }
  uint8_t *h = (uint8_t *)p->q.data + start;
  h[0] = (uint8_t)(len >> 24);
  h[1] = (uint8_t)(len >> 16);
  h[2] = (uint8_t)(len >> 8);
  h[3] = (uint8_t)len;
  return 0;
}

int airlock_ledger_proc_open(const char *dir, const airlock_ledger_proc_opts *o, airlock_ledger_proc **out,
                             airlock_ledger_report *rep, char *err, size_t errlen)
{
  airlock_ledger_report local;
  if (rep == NULL) rep = &local;
  memset(rep, 0, sizeof *rep);
  *out = NULL;
  if (dir == NULL || *dir == '\0') return ledger_fail(err, errlen, -EINVAL, "ledger: no directory given");
  if (o == NULL || o->program == NULL)
    return ledger_fail(err, errlen, -EINVAL, "ledger: no ledger process program given");
  if (o->durability < AIRLOCK_DURABLE_NONE || o->durability > AIRLOCK_DURABLE_ALWAYS)
    return ledger_fail(err, errlen, -EINVAL, "ledger: unknown durability %d", o->durability);
  /* The ledger process owns nothing but what this process owns (as root it
  ** holds no capability): a directory someone else owns is refused here, by
  ** its owner's uid, which the process (in a user namespace) cannot tell. */
  struct stat st;
  if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid != geteuid())
    return ledger_fail(err, errlen, -EPERM,
                       "ledger: %s is owned by uid %u, not by this process's "
                       "uid %u; a session directory must be the writer's own",
                       dir, (unsigned)st.st_uid, (unsigned)geteuid());
  airlock_ledger_proc *p = calloc(1, sizeof *p);
  if (p == NULL || (p->dir = strdup(dir)) == NULL) {
    free(p);
    return ledger_fail(err, errlen, -ENOMEM, "ledger: out of memory");
  }
  msgpack_sbuffer_init(&p->q);
  p->durability = o->durability;
  p->admit_ms = o->admit_ms ? o->admit_ms : AIRLOCK_LEDGER_ADMIT_MS_DEFAULT;
  int rc = draw_grant(p->grant);
  if (rc < 0) {
    ledger_fail(err, errlen, rc, "ledger: getrandom for the grant failed");
    goto fail_early;
  }
  char batch[24], maxb[24], seal[24];
  snprintf(batch, sizeof batch, "%u", o->batch_ms);
  snprintf(maxb, sizeof maxb, "%" PRIu64, o->max_bytes);
  snprintf(seal, sizeof seal, "%" PRIu64, o->seal_bytes);
  const char *argv[] = {o->program,
                        "write",
                        dir,
                        p->grant,
                        airlock_ledger_durability_name(o->durability),
                        batch,
                        o->create ? "1" : "0",
                        maxb,
                        seal,
                        NULL};
  if ((rc = child_start(&p->c, argv, err, errlen)) < 0) goto fail_early;

  /* open {session}: the only thing a producer says about the session */
  msgpack_packer pk;
  size_t start;
  if ((rc = queue_begin(p, &pk, "open", o->session ? 2 : 1, &start)) < 0) goto fail_nomem;
  if (o->session) pack_bin_field(&pk, "session", o->session, o->session_len);
  if ((rc = queue_end(p, start)) < 0) goto fail_nomem;
  double deadline = mono_ms() + p->admit_ms;
  rc = send_all(&p->c, p->q.data, p->q.size, deadline);
  msgpack_sbuffer_clear(&p->q);
  const msgpack_object *m = NULL;
  char why[200] = "";
  if (rc == 0 || rc == -EPIPE) rc = recv_msg(&p->c, deadline, &m, why, sizeof why);
  if (rc <= 0) {
    kill(p->c.pid, SIGKILL);
    child_reap(&p->c, 1000);
    char st[96];
    if (rc == -ETIMEDOUT)
      ledger_fail(err, errlen, rc,
                  "ledger: the ledger process for %s did not start within "
                  "%u ms",
                  dir, p->admit_ms);
    else
      ledger_fail(err, errlen, rc = rc == 0 ? -EPIPE : rc,
                  "ledger: the ledger process for "
                  "%s ended before it opened the session (%s%s%s)",
                  dir, status_text(p->c.status, st, sizeof st), why[0] ? ": " : "", why);
    goto fail;
  }
  if (ledger_proto_is(m, "refuse")) {
    char text[900];
    msg_text(m, "message", text, sizeof text);
    rc = msg_errno(m);
    ledger_proto_read_report(airlock_msg_field(m, "report"), rep);
    ledger_fail(err, errlen, rc, "%s", text);
    goto fail;
  }
  const char *g, *id, *h;
  uint32_t gn, idn, hn;
  uint64_t v = 0, seq = 0, durable = 0;
  if (!ledger_proto_is(m, "hello") || !ledger_proto_u64(m, "v", &v) || v != LEDGER_PROTO_VERSION ||
      !ledger_proto_str(m, "grant", &g, &gn) || gn != LEDGER_PROTO_GRANT_HEX ||
      memcmp(g, p->grant, gn) != 0 || !ledger_proto_str(m, "session_id", &id, &idn) ||
      idn != 2 * AIRLOCK_LEDGER_ID_LEN || !ledger_proto_u64(m, "seq", &seq) || seq == 0 ||
      !ledger_proto_bin(m, "head", &h, &hn) || hn != AIRLOCK_LEDGER_HASH_LEN ||
      !ledger_proto_u64(m, "durable", &durable) || durable > seq) {
    rc = ledger_fail(err, errlen, -EPROTO,
                     "ledger: the ledger process for %s sent a "
                     "greeting that is not its grant's",
                     dir);
    goto fail;
  }
  memcpy(p->id_hex, id, idn);
  p->id_hex[idn] = '\0';
  memcpy(p->head, h, hn);
  p->seq = seq;
  p->durable = durable;
  ledger_proto_read_report(airlock_msg_field(m, "report"), rep);
  *out = p;
  return 0;

fail_nomem:
  ledger_fail(err, errlen, rc, "ledger: the session fields are too large or memory ran out");
fail:
  kill(p->c.pid, SIGKILL);
  child_free(&p->c);
fail_early:
  msgpack_sbuffer_destroy(&p->q);
  free(p->dir);
  free(p);
  return rc;
}

int airlock_ledger_proc_append(airlock_ledger_proc *p, const char *kind, uint64_t run, const void *fields,
                               size_t fields_len, int wait, uint64_t *seq, uint64_t *bytes)
{
  if (p->sticky) return p->sticky;
  msgpack_packer pk;
  size_t start;
  if (queue_begin(p, &pk, "append", fields ? 4 : 3, &start) < 0) return -ENOMEM;
  airlock_pack_cstr(&pk, "kind");
  airlock_pack_cstr(&pk, kind ? kind : "");
  airlock_pack_cstr(&pk, "run");
  msgpack_pack_uint64(&pk, run);
  if (fields) pack_bin_field(&pk, "fields", fields, fields_len);
  if (p->q.size - start - 4 > LEDGER_PROTO_FRAME_MAX) {
    p->q.size = start;
    snprintf(p->err, sizeof p->err,
             "ledger: record seq %" PRIu64 " is %zu bytes, over the limit "
             "of %u",
             p->seq + p->queued + 1, fields_len, AIRLOCK_LEDGER_BODY_MAX);
    return -EMSGSIZE;
  }
  queue_end(p, start);
  p->queued++;
  /* Queued appends go out in batches of SEND_BYTES without waiting, so the
  ** process works on one while the next is made; only a full window waits. */
  int rc = 0;
  if (wait || p->queued >= WINDOW)
    rc = pump(p, wait ? 0 : WINDOW / 2, wait, 0);
  else if (p->q.size >= SEND_BYTES)
    rc = pump(p, 0, 0, 1);
  else {
    if (seq) *seq = p->seq + p->queued;
    if (bytes) *bytes = 0;
    return 0;
  }
  if (rc < 0) return rc;
  if (seq) *seq = wait ? p->seq : p->seq + p->queued;
  if (bytes) *bytes = wait ? p->acked_bytes : 0;
  if (wait) p->acked_bytes = 0;
  return 0;
}

int airlock_ledger_proc_sync(airlock_ledger_proc *p)
{
  if (p->sticky) return p->sticky;
  return pump(p, 0, 0, 0);
}

int airlock_ledger_proc_send(airlock_ledger_proc *p)
{
  if (p->sticky) return p->sticky;
  return pump(p, p->queued, 0, 0); /* sends the queue; waits for no answer */
}

uint64_t airlock_ledger_proc_take_bytes(airlock_ledger_proc *p)
{
  uint64_t n = p->acked_bytes;
  p->acked_bytes = 0;
  return n;
}

int airlock_ledger_proc_flush(airlock_ledger_proc *p)
{
  int rc = airlock_ledger_proc_sync(p);
  if (rc < 0) return rc;
  msgpack_packer pk;
  size_t start;
  if (queue_begin(p, &pk, "flush", 1, &start) < 0) return -ENOMEM;
  queue_end(p, start);
  double deadline = mono_ms() + (p->admit_ms > CLOSE_MS ? p->admit_ms : CLOSE_MS);
  rc = send_all(&p->c, p->q.data, p->q.size, deadline);
  msgpack_sbuffer_clear(&p->q);
  if (rc < 0) return lost(p, rc, "");
  const msgpack_object *m;
  char why[200];
  rc = recv_msg(&p->c, deadline, &m, why, sizeof why);
  if (rc <= 0) return lost(p, rc, why);
  uint64_t durable;
  if (ledger_proto_is(m, "synced") && ledger_proto_u64(m, "durable", &durable) && durable <= p->seq) {
    p->durable = durable;
    return 0;
  }
  if (ledger_proto_is(m, "refuse")) {
    char text[900];
    msg_text(m, "message", text, sizeof text);
    return set_sticky(p, msg_errno(m), "%s", text);
  }
  return lost(p, -EPROTO, "a message other than synced or refuse");
}

int airlock_ledger_proc_poll(airlock_ledger_proc *p)
{
  if (p->sticky) return p->sticky;
  if (p->queued > 0) return 0;
  struct pollfd pf = {.fd = p->c.fd, .events = POLLIN};
  if (poll(&pf, 1, 0) <= 0) return 0;
  /* nothing was asked: anything readable is the end of the stream */
  const msgpack_object *m;
  char why[200] = "";
  int rc = recv_msg(&p->c, mono_ms(), &m, why, sizeof why);
  if (rc == -ETIMEDOUT) return 0; /* a partial frame: not ours to judge yet */
  return lost(p, rc == 1 ? -EPROTO : rc, rc == 1 ? "a message nobody asked for" : why);
}

int airlock_ledger_proc_sync_due_ms(const airlock_ledger_proc *p)
{
  if (p->sticky || p->durability != AIRLOCK_DURABLE_BATCH || p->durable >= p->seq || p->due_at == 0)
    return -1;
  double left = p->due_at - mono_ms();
  return left <= 0 ? 0 : (int)left + 1;
}

int airlock_ledger_proc_tick(airlock_ledger_proc *p)
{
  int rc = airlock_ledger_proc_poll(p);
  if (rc < 0 || airlock_ledger_proc_sync_due_ms(p) != 0) return rc;
  /* the process has committed the window by now: ask, so durable_seq is exact */
  return airlock_ledger_proc_flush(p);
}

int airlock_ledger_proc_raw_send(airlock_ledger_proc *p, const void *bytes, size_t len)
{
  if (p->sticky) return p->sticky;
  int rc = send_all(&p->c, bytes, len, mono_ms() + p->admit_ms);
  return rc == -ETIMEDOUT ? rc : rc < 0 ? lost(p, rc, "") : 0;
}

void airlock_ledger_proc_head(const airlock_ledger_proc *p, uint64_t *seq,
                              uint8_t hash[AIRLOCK_LEDGER_HASH_LEN])
{
  if (seq) *seq = p->seq;
  if (hash) memcpy(hash, p->head, AIRLOCK_LEDGER_HASH_LEN);
}

uint64_t airlock_ledger_proc_durable_seq(const airlock_ledger_proc *p)
{
  return p->durable;
}
int airlock_ledger_proc_durability(const airlock_ledger_proc *p)
{
  return p->durability;
}
const char *airlock_ledger_proc_session_id(const airlock_ledger_proc *p)
{
  return p->id_hex;
}
const char *airlock_ledger_proc_grant(const airlock_ledger_proc *p)
{
  return p->grant;
}
pid_t airlock_ledger_proc_pid(const airlock_ledger_proc *p)
{
  return p->c.pid;
}
const char *airlock_ledger_proc_error(const airlock_ledger_proc *p)
{
  return p->err;
}

int airlock_ledger_proc_close(airlock_ledger_proc *p)
{
  if (p == NULL) return 0;
  int rc = p->sticky;
  if (rc == 0) rc = airlock_ledger_proc_sync(p);
  if (rc == 0) {
    msgpack_packer pk;
    size_t start;
    double deadline = mono_ms() + (p->admit_ms > CLOSE_MS ? p->admit_ms : CLOSE_MS);
    if (queue_begin(p, &pk, "close", 1, &start) == 0 && queue_end(p, start) == 0 &&
        send_all(&p->c, p->q.data, p->q.size, deadline) == 0) {
      const msgpack_object *m;
      char why[200];
      if (recv_msg(&p->c, deadline, &m, why, sizeof why) == 1 && ledger_proto_is(m, "closed")) {
        int e = msg_errno(m);
        uint64_t raw = 0;
        ledger_proto_u64(m, "errno", &raw);
        if (raw != 0) {
          char text[900];
          msg_text(m, "message", text, sizeof text);
          snprintf(p->err, sizeof p->err, "%s", text);
          rc = e;
        }
      } else {
        rc = -EPIPE;
      }
    } else {
      rc = -EPIPE;
    }
  }
  close(p->c.fd);
  p->c.fd = -1;
  child_reap(&p->c, CLOSE_MS);
  child_free(&p->c);
  msgpack_sbuffer_destroy(&p->q);
  free(p->dir);
  free(p);
  return rc;
}

/* ------------------------------------------------------------------ readers */

struct airlock_ledger_proc_reader {
  struct child c;
  int state; /* 0 reading, 1 at the end, < 0 failed */
  uint64_t expect;
  msgpack_zone zone;
  msgpack_object body;
  airlock_ledger_report rep;
  airlock_ledger_record held; /* the record open read, for the first next() */
  char err[512];
};

/* Starts a read-only process in mode with args, for dir. */
static int start_ro(struct child *c, const char *program, const char *mode, const char *dir,
                    const char *extra, char *err, size_t errlen)
{
  char grant[LEDGER_PROTO_GRANT_HEX + 1];
  int rc = draw_grant(grant);
  if (rc < 0) return ledger_fail(err, errlen, rc, "ledger: getrandom for the grant failed");
  const char *argv[] = {program, mode, dir, grant, extra, NULL};
  return child_start(c, argv, err, errlen);
}

int airlock_ledger_proc_reader_open(const char *program, const char *dir, airlock_ledger_proc_reader **out,
                                    char *err, size_t errlen)
{
  *out = NULL;
  airlock_ledger_proc_reader *r = calloc(1, sizeof *r);
  if (r == NULL || !msgpack_zone_init(&r->zone, MSGPACK_ZONE_CHUNK_SIZE)) {
    free(r);
    return ledger_fail(err, errlen, -ENOMEM, "ledger: out of memory");
  }
  int rc = start_ro(&r->c, program, "read", dir, NULL, err, errlen);
  if (rc < 0) {
    msgpack_zone_destroy(&r->zone);
    free(r);
    return rc;
  }
  r->expect = 1;
  /* The first frame tells whether the journal could be opened at all. */
  rc = airlock_ledger_proc_reader_next(r, &r->held);
  if (rc < 0 && r->rep.records == 0 && r->rep.first_bad_seq == 0) {
    ledger_fail(err, errlen, rc, "%s", r->err);
    airlock_ledger_proc_reader_close(r);
    return rc;
  }
  r->state = rc == 1 ? 2 : r->state; /* 2: rec is held for the first next() */
  *out = r;
  return 0;
}

static int reader_fail(airlock_ledger_proc_reader *r, int rc, const char *fmt, const char *detail)
{
  snprintf(r->err, sizeof r->err, fmt, detail);
  snprintf(r->rep.reason, sizeof r->rep.reason, "io: %.240s", r->err);
  kill(r->c.pid, SIGKILL);
  r->state = rc;
  return rc;
}

/* Fills rec from the rec message m (bytes checked: the process is untrusted). */
static int take_rec(airlock_ledger_proc_reader *r, const msgpack_object *m, airlock_ledger_record *rec)
{
  uint64_t seq, offset;
  const char *h, *body;
  uint32_t hn, bn;
  char why[200];
  /* SECURITY: seqs follow one another; the body is checked before it is decoded */
  if (!ledger_proto_u64(m, "seq", &seq) || seq != r->expect || !ledger_proto_u64(m, "offset", &offset) ||
      !ledger_proto_bin(m, "hash", &h, &hn) || hn != AIRLOCK_LEDGER_HASH_LEN ||
      !ledger_proto_bin(m, "body", &body, &bn) || bn == 0 || bn > AIRLOCK_LEDGER_BODY_MAX)
    return reader_fail(r, -EPROTO, "ledger: the reading ledger process sent %s", "a record out of order");
  if (airlock_msg_check(body, bn, why, sizeof why) < 0)
    return reader_fail(r, -EPROTO, "ledger: the reading ledger process sent a body that is not msgpack (%s)",
                       why);
  msgpack_zone_clear(&r->zone);
  size_t off = 0;
  if (msgpack_unpack(body, bn, &off, &r->zone, &r->body) != MSGPACK_UNPACK_SUCCESS ||
      r->body.type != MSGPACK_OBJECT_MAP)
    return reader_fail(r, -EPROTO, "ledger: the reading ledger process sent %s", "a body that is not a map");
  memset(rec, 0, sizeof *rec);
  rec->seq = seq;
  ledger_proto_u64(&r->body, "run", &rec->run);
  const msgpack_object *t = airlock_msg_field(&r->body, "t");
  if (t && t->type == MSGPACK_OBJECT_FLOAT64)
    rec->t = t->via.f64;
  else if (t && t->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
    rec->t = (double)t->via.u64;
  const char *k;
  uint32_t kn;
  if (ledger_proto_str(&r->body, "kind", &k, &kn) && kn <= AIRLOCK_LEDGER_KIND_MAX) {
    memcpy(rec->kind, k, kn);
    rec->kind[kn] = '\0';
  }
  rec->body = &r->body;
  rec->raw = (const uint8_t *)body;
  rec->raw_len = bn;
  memcpy(rec->hash, h, hn);
  rec->offset = offset;
  r->expect = seq + 1;
  r->rep.records++;
  r->rep.last_seq = seq;
  memcpy(r->rep.head, h, hn);
  return 1;
}

int airlock_ledger_proc_reader_next(airlock_ledger_proc_reader *r, airlock_ledger_record *rec)
{
  if (r->state == 2) { /* the record read by open */
    r->state = 0;
    *rec = r->held;
    return 1;
  }
  if (r->state != 0) return r->state < 0 ? r->state : 0;
  const msgpack_object *m;
  char why[200] = "";
  int rc = recv_msg(&r->c, mono_ms() + READ_MS, &m, why, sizeof why);
  if (rc <= 0) {
    child_reap(&r->c, 200);
    char st[96];
    if (rc == 0) snprintf(why, sizeof why, "%s", status_text(r->c.status, st, sizeof st));
    return reader_fail(r, rc == 0 ? -EPIPE : rc, "ledger: the reading ledger process ended early (%s)", why);
  }
  if (ledger_proto_is(m, "rec")) return take_rec(r, m, rec);
  if (ledger_proto_is(m, "end")) {
    int64_t v = 0;
    uint64_t records = r->rep.records;
    ledger_proto_i64(m, "rc", &v);
    ledger_proto_read_report(airlock_msg_field(m, "report"), &r->rep);
    if (r->rep.records != records && v == 0)
      return reader_fail(r, -EPROTO, "ledger: the reading ledger process %s", "miscounted its records");
    msg_text(m, "message", r->err, sizeof r->err);
    r->state = v < 0 ? (v < -4095 ? -EIO : (int)v) : 1;
    child_reap(&r->c, 1000);
    return r->state < 0 ? r->state : 0;
  }
  return reader_fail(r, -EPROTO, "ledger: the reading ledger process sent %s", "an unexpected message");
}

void airlock_ledger_proc_reader_report(const airlock_ledger_proc_reader *r, airlock_ledger_report *rep)
{
  *rep = r->rep;
}

const char *airlock_ledger_proc_reader_error(const airlock_ledger_proc_reader *r)
{
  return r->err;
}

void airlock_ledger_proc_reader_close(airlock_ledger_proc_reader *r)
{
  if (r == NULL) return;
  if (!r->c.reaped && r->c.pid > 0) kill(r->c.pid, SIGKILL);
  child_free(&r->c);
  msgpack_zone_destroy(&r->zone);
  free(r);
}

/* Runs a one-answer mode (verify, branch) and reads its end message; on_end,
** when given, reads more of it (and may refuse it: -errno). */
static int one_shot(const char *program, const char *const *argv, airlock_ledger_report *rep, char *err,
                    size_t errlen, int (*on_end)(const msgpack_object *m, void *ctx), void *ctx)
{
  struct child c;
  int rc = child_start(&c, argv, err, errlen);
  if (rc < 0) return rc;
  const msgpack_object *m;
  char why[200] = "";
  rc = recv_msg(&c, mono_ms() + 10 * READ_MS, &m, why, sizeof why);
  if (rc == 1 && ledger_proto_is(m, "end")) {
    int64_t v = 0;
    ledger_proto_i64(m, "rc", &v);
    ledger_proto_read_report(airlock_msg_field(m, "report"), rep);
    msg_text(m, "message", err, errlen);
    rc = v < 0 ? (v < -4095 ? -EIO : (int)v) : 0;
    int erc = on_end && (rc == 0 || rc == -EBADMSG) ? on_end(m, ctx) : 0;
    if (erc < 0) {
      rc = ledger_fail(err, errlen, erc, "ledger: the ledger process %s sent a malformed answer", program);
      snprintf(rep->reason, sizeof rep->reason, "io: %.240s", err);
    }
  } else {
    kill(c.pid, SIGKILL);
    child_reap(&c, 1000);
    char st[96];
    rc = ledger_fail(err, errlen, rc < 0 && rc != -EPROTO ? rc : -EIO,
                     "ledger: the ledger "
                     "process %s ended without an answer (%s%s%s)",
                     program, status_text(c.status, st, sizeof st), why[0] ? ": " : "", why);
    snprintf(rep->reason, sizeof rep->reason, "io: %.240s", err);
  }
  child_free(&c);
  return rc;
}

int airlock_ledger_proc_verify(const char *program, const char *dir, const uint64_t *checkpoint_seq,
                               const uint8_t checkpoint_hash[AIRLOCK_LEDGER_HASH_LEN],
                               airlock_ledger_report *rep)
{
  memset(rep, 0, sizeof *rep);
  char grant[LEDGER_PROTO_GRANT_HEX + 1], cp[96], err[256];
  if (checkpoint_seq != NULL && (*checkpoint_seq == 0 || checkpoint_hash == NULL)) {
    snprintf(rep->reason, sizeof rep->reason, "io: a checkpoint needs a seq >= 1 and a hash");
    return -EINVAL;
  }
  if (draw_grant(grant) < 0) {
    snprintf(rep->reason, sizeof rep->reason, "io: getrandom for the grant failed");
    return -EIO;
  }
  if (checkpoint_seq) airlock_ledger_format_checkpoint(*checkpoint_seq, checkpoint_hash, cp, sizeof cp);
  const char *argv[] = {program, "verify", dir, grant, checkpoint_seq ? cp : NULL, NULL};
  int rc = one_shot(program, argv, rep, err, sizeof err, NULL, NULL);
  if (rc < 0 && rep->reason[0] == '\0') snprintf(rep->reason, sizeof rep->reason, "io: %.240s", err);
  return rc;
}

struct verify_at {
  const uint64_t *seqs;
  size_t n;
  uint8_t (*hashes)[AIRLOCK_LEDGER_HASH_LEN];
  uint8_t *found;
};

/* at = [[seq, hash], ...]: each a seq asked for, in order, with 32 bytes. */
static int read_at(const msgpack_object *m, void *ctx)
{
  struct verify_at *va = ctx;
  const msgpack_object *at = airlock_msg_field(m, "at");
  if (at == NULL || at->type != MSGPACK_OBJECT_ARRAY || at->via.array.size > va->n) return -EPROTO;
  size_t k = 0;
  for (uint32_t i = 0; i < at->via.array.size; i++) {
    const msgpack_object *e = &at->via.array.ptr[i];
    if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2 ||
        e->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        e->via.array.ptr[1].type != MSGPACK_OBJECT_BIN ||
        e->via.array.ptr[1].via.bin.size != AIRLOCK_LEDGER_HASH_LEN)
      return -EPROTO;
    uint64_t seq = e->via.array.ptr[0].via.u64;
    while (k < va->n && va->seqs[k] < seq) k++;
    if (k == va->n || va->seqs[k] != seq) return -EPROTO; /* a seq not asked for, or out of order */
    memcpy(va->hashes[k], e->via.array.ptr[1].via.bin.ptr, AIRLOCK_LEDGER_HASH_LEN);
    va->found[k++] = 1;
  }
  return 0;
}

int airlock_ledger_proc_verify_at(const char *program, const char *dir, const uint64_t *seqs, size_t n,
                                  uint8_t (*hashes)[AIRLOCK_LEDGER_HASH_LEN], uint8_t *found,
                                  airlock_ledger_report *rep)
{
  memset(rep, 0, sizeof *rep);
  if (n == 0 || n > AIRLOCK_LEDGER_PROC_AT_MAX) {
    snprintf(rep->reason, sizeof rep->reason, "io: between 1 and %d checkpoint seqs, not %zu",
             AIRLOCK_LEDGER_PROC_AT_MAX, n);
    return -E2BIG;
  }
  size_t cap = n * 21 + 1;
  char *list = malloc(cap);
  if (list == NULL) {
    snprintf(rep->reason, sizeof rep->reason, "io: out of memory");
    return -ENOMEM;
  }
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    if (seqs[i] == 0 || (i > 0 && seqs[i] <= seqs[i - 1])) {
      free(list);
      snprintf(rep->reason, sizeof rep->reason, "io: checkpoint seqs must be >= 1 and increasing");
      return -EINVAL;
    }
    len += (size_t)snprintf(list + len, cap - len, "%s%" PRIu64, i ? "," : "", seqs[i]);
    found[i] = 0;
  }
  char grant[LEDGER_PROTO_GRANT_HEX + 1], err[256];
  if (draw_grant(grant) < 0) {
    free(list);
    snprintf(rep->reason, sizeof rep->reason, "io: getrandom for the grant failed");
    return -EIO;
  }
  const char *argv[] = {program, "verify", dir, grant, "--at", list, NULL};
  struct verify_at va = {seqs, n, hashes, found};
  int rc = one_shot(program, argv, rep, err, sizeof err, read_at, &va);
  free(list);
  if (rc < 0 && rep->reason[0] == '\0') snprintf(rep->reason, sizeof rep->reason, "io: %.240s", err);
  return rc;
}

int airlock_ledger_proc_branch(const char *program, const char *src, uint64_t at_seq, const char *dst,
                               char *err, size_t errlen)
{
  if (at_seq == 0) return ledger_fail(err, errlen, -ERANGE, "ledger: a branch needs a seq of at least 1");
  char grant[LEDGER_PROTO_GRANT_HEX + 1], at[24];
  if (draw_grant(grant) < 0) return ledger_fail(err, errlen, -EIO, "ledger: getrandom for the grant failed");
  snprintf(at, sizeof at, "%" PRIu64, at_seq);
  const char *argv[] = {program, "branch", src, at, dst, grant, NULL};
  airlock_ledger_report rep;
  if (err && errlen) err[0] = '\0';
  return one_shot(program, argv, &rep, err, errlen, NULL, NULL);
}

int airlock_ledger_proc_probe(const char *program, const char *dir,
                              void (*cb)(void *ctx, const char *name, int64_t rc), void *ctx, int *status,
                              char *err, size_t errlen)
{
  struct child c;
  int rc = start_ro(&c, program, "probe", dir, NULL, err, errlen);
  if (rc < 0) return rc;
  const msgpack_object *m;
  char why[200];
  while (recv_msg(&c, mono_ms() + READ_MS, &m, why, sizeof why) == 1) {
    char name[64];
    int64_t v = 0;
    msg_text(m, ledger_proto_is(m, "probe") ? "name" : "message", name, sizeof name);
    ledger_proto_i64(m, "rc", &v);
    cb(ctx, name, v);
  }
  child_reap(&c, 5000);
  *status = c.status;
  child_free(&c);
  return 0;
}
