/*
** broker.c -- one epoll loop multiplexing many runs: frames in, replies out,
** capture, deadlines and exits (pidfd). The outside checks, the seccomp
** listener and the cause a run ends with are in broker_verify.c,
** broker_seccomp.c and broker_end.c (broker_int.h holds what they share).
*/
#define _GNU_SOURCE
#include "broker_int.h"

#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const msgpack_object nil_object = {.type = MSGPACK_OBJECT_NIL};

/* ------------------------------------------------------------ helpers */

static void set_error(airlock_broker *b, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->error, sizeof b->error, fmt, ap);
  va_end(ap);
}

static void held_drop(struct held *h)
{
  if (!h->live) return;
  msgpack_unpacked_destroy(&h->u);
  memset(h, 0, sizeof *h);
}

/* The same, keeping its zone as the run's spare for the next frame. */
static void held_recycle(airlock_run *r, struct held *h)
{
  if (!h->live) return;
  if (r->spare == NULL && h->u.zone != NULL) {
    msgpack_zone_clear(h->u.zone);
    r->spare = h->u.zone;
    h->u.zone = NULL;
  }
  held_drop(h);
}

static int queue_push(airlock_broker *b, airlock_run *r)
{
  if (b->qhead + b->qlen == b->qcap) {
    if (b->qhead > 0) {
      memmove(b->queue, b->queue + b->qhead, b->qlen * sizeof *b->queue);
      b->qhead = 0;
    } else {
      size_t ncap = b->qcap ? b->qcap * 2 : 16;
      airlock_run **nq = realloc(b->queue, ncap * sizeof *nq);
      if (!nq) return -ENOMEM;
      b->queue = nq;
      b->qcap = ncap;
    }
  }
  b->queue[b->qhead + b->qlen++] = r;
  return 0;
}

static void queue_forget(airlock_broker *b, airlock_run *r)
{
  size_t j = 0;
  for (size_t i = 0; i < b->qlen; i++)
    if (b->queue[b->qhead + i] != r) b->queue[b->qhead + j++] = b->queue[b->qhead + i];
  b->qlen = j;
}

void broker_watch_del(airlock_run *r, int which, int fd)
{
  if (fd >= 0) epoll_ctl(r->b->epfd, EPOLL_CTL_DEL, fd, NULL);
  (void)which;
}

static int watch_add(airlock_run *r, int which, int fd, uint32_t events)
{
  struct epoll_event ev = {.events = events, .data.ptr = &r->w[which]};
  r->w[which].run = r;
  r->w[which].which = which;
  if (fd < 0) return 0;
  return epoll_ctl(r->b->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

void broker_kill_group(airlock_run *r)
{
  if (r->exited || r->c.pid <= 0) return;
  /* The leader is not reaped yet, so its pid (and process group id) cannot be
  ** reused: signalling the group is safe and takes any forked children too. */
  kill(-r->c.pid, SIGKILL);
  kill(r->c.pid, SIGKILL);
  r->killed = 1;
}

/* The parent decides how the run ends (first decision wins) and kills it. */
void broker_end_with(airlock_run *r, airlock_cause cause, const char *fmt, ...)
{
  if (r->pending == AIRLOCK_CAUSE_OK && !r->final.live) {
    va_list ap;
    r->pending = cause;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
  }
  broker_kill_group(r);
}

/* ------------------------------------------------------------ channel output */

static int flush_out(airlock_run *r)
{
  while (r->woff < r->wlen) {
    ssize_t n = send(r->c.chan, r->wbuf + r->woff, r->wlen - r->woff, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      return -errno; /* EPIPE: the child is gone; its exit tells why */
    }
    r->woff += (size_t)n;
    r->res.usage.bytes_out += (uint64_t)n;
  }
  int want_out = r->woff < r->wlen;
  if (want_out != r->want_out) { /* only touch epoll when interest changes */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0u),
                             .data.ptr = &r->w[W_CHAN]};
    epoll_ctl(r->b->epfd, EPOLL_CTL_MOD, r->c.chan, &ev);
    r->want_out = want_out;
  }
  if (!want_out) r->woff = r->wlen = 0;
  return 0;
}

static int queue_out(airlock_run *r, const void *p, size_t n)
{
  const uint8_t *src = p;
  if (r->c.chan < 0 || r->eof) return -EPIPE;
  while (r->wlen == 0 && n > 0) { /* common case: nothing queued, send directly */
    ssize_t k = send(r->c.chan, src, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno == EAGAIN) break;
    if (k < 0) return -errno;
    r->res.usage.bytes_out += (uint64_t)k;
    src += k;
    n -= (size_t)k;
  }
  if (n == 0) return 0;
  uint8_t *nb = realloc(r->wbuf, r->wlen + n);
  if (!nb) return -ENOMEM;
  r->wbuf = nb;
  memcpy(r->wbuf + r->wlen, src, n);
  r->wlen += n;
  return flush_out(r);
}

/* ------------------------------------------------------------ frames in */

static void accept_final(airlock_run *r, struct held *h)
{
  r->final = *h;
  r->t_final = airlock_now_ms();
  memset(h, 0, sizeof *h);
  broker_kill_group(r); /* done or pause: the disposable child has nothing more to say */
}

/* Handles one complete frame. Returns 0 to keep reading, 1 to stop. */
static int on_frame(airlock_run *r)
{
  struct held h;
  char why[256];

  memset(&h, 0, sizeof h);
  msgpack_unpacked_init(&h.u);
  h.u.zone = r->spare; /* NULL: the decoder makes one */
  r->spare = NULL;
  h.live = 1;
  /* The decoded message lives in its own zone, so the reader can move on. */
  int rc = airlock_msg_decode(r->rd.body, r->rd.len, &h.u, &h.m, why, sizeof why);
  airlock_frame_reader_reset(&r->rd);
  if (rc < 0) {
    held_drop(&h);
    broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "protocol: %s", why);
    return 1;
  }
  const char *kind = airlock_msg_kind_name(h.m.kind);
  if (r->call.live) {
    held_drop(&h);
    broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL,
                    "protocol: '%s' frame sent while call %llu was still unanswered (one call at a time)",
                    kind, (unsigned long long)r->call.m.id);
    return 1;
  }
  if (r->expect_ready && !r->ready_seen && h.m.kind != AIRLOCK_MSG_READY) {
    held_drop(&h);
    broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "protocol: first frame must be 'ready', got '%s'", kind);
    return 1;
  }
  /* A parked worker is nobody's run yet: it owes ready and nothing else
  ** until it is given its run; anything more is a worker acting on its own. */
  if (r->phase == RUN_PARKED && (h.m.kind != AIRLOCK_MSG_READY || r->ready_seen)) {
    held_drop(&h);
    broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL,
                    "protocol: a parked worker sent '%s' before it was given a run", kind);
    return 1;
  }
  if (r->program && h.m.kind != AIRLOCK_MSG_CALL) {
    held_drop(&h);
    broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL,
                    "protocol: a program may only send 'call' frames on fd 3, got '%s'", kind);
    return 1;
  }
  switch (h.m.kind) {
    case AIRLOCK_MSG_READY:
      if (r->ready_seen || !r->expect_ready) break;
      if (h.m.version != AIRLOCK_PROTOCOL_VERSION) {
        held_drop(&h);
        broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "protocol: child speaks version %llu, parent speaks %d",
                        (unsigned long long)h.m.version, AIRLOCK_PROTOCOL_VERSION);
        return 1;
      }
      r->ready_seen = 1;
      r->ready = h;
      if ((r->verify_seccomp || r->drop_caps) && broker_verify_ready(r, why, sizeof why) < 0) {
        r->verify_failed = 1;
        broker_end_with(r, AIRLOCK_CAUSE_CONFINEMENT, "confinement: %s", why);
        return 1;
      }
      return 0;
    case AIRLOCK_MSG_NOTE:
    case AIRLOCK_MSG_CALL:
      /* A program's processes share one channel, each counting from 1. */
      if (h.m.id <= r->last_id && !r->program) {
        unsigned long long got = (unsigned long long)h.m.id;
        held_drop(&h);
        broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "protocol: call id %llu does not increase (last was %llu)",
                        got, (unsigned long long)r->last_id);
        return 1;
      }
      r->last_id = h.m.id;
      r->res.usage.effects++;
      if (h.m.kind == AIRLOCK_MSG_NOTE) r->res.usage.notes++;
      int note = h.m.kind == AIRLOCK_MSG_NOTE;
      r->call = h;
      if (queue_push(r->b, r) < 0) {
        broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "out of memory queueing a call");
        return 1;
      }
      /* After a note, the next frame waits until the host has taken it
      ** (airlock_run_note_done): held frames stay one at a time. */
      return note;
    case AIRLOCK_MSG_PAUSE:
    case AIRLOCK_MSG_DONE: accept_final(r, &h); return 1;
    default: break;
  }
  held_drop(&h);
  broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "protocol: unexpected '%s' frame from the child", kind);
  return 1;
}

/* A source that has nothing: the reader then gives only what it holds. */
static ssize_t nothing_more(void *ctx, void *buf, size_t n)
{
  (void)ctx;
  (void)buf;
  (void)n;
  return -EAGAIN;
}

/* Reads and handles the run's frames; with buffered_only, only those the
** reader already holds (after a note: the rest waits for the next wake-up,
** so a run that floods notes takes its turn with the others). */
/* A note the host has not taken yet (airlock_run_note_done). */
static int note_held(const airlock_run *r)
{
  return r->call.live && r->call.m.kind == AIRLOCK_MSG_NOTE;
}

static void read_frames(airlock_run *r, int buffered_only)
{
  /* While a note is held, what follows it stays where it is (in the reader or
  ** the socket): one frame at a time, in order. */
  while (!r->eof && !r->final.live && r->pending == AIRLOCK_CAUSE_OK && !note_held(r)) {
    int rc = buffered_only ? airlock_frame_reader_pull(&r->rd, nothing_more, NULL)
                           : airlock_frame_read_fd(&r->rd, r->c.chan);
    if (rc == AIRLOCK_FRAME_READY) {
      r->res.usage.bytes_in += 4u + r->rd.len;
      if (on_frame(r)) return;
      /* The channel was empty at the last read and epoll is level-triggered:
      ** whatever comes next wakes the loop, so no read just to see EAGAIN. */
      if (airlock_frame_reader_drained(&r->rd)) return;
      continue;
    }
    if (rc == AIRLOCK_FRAME_AGAIN) return;
    if (rc == AIRLOCK_FRAME_EOF) {
      r->eof = 1;
      return;
    }
    r->eof = 1;
    if (rc == -EMSGSIZE)
      broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL,
                      "protocol: frame of %u bytes exceeds the limit of %u bytes (max_frame)", r->rd.len,
                      r->rd.max);
    else if (rc == -EPROTO && r->rd.hdr_have == 4 && r->rd.len == 0)
      broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "protocol: empty frame (length 0)");
    else if (rc == -EPROTO)
      broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "protocol: channel closed in the middle of a frame");
    else if (rc == -ECONNRESET)
      return; /* the child died; its exit status says why */
    else
      broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "protocol: reading the channel failed: %s",
                      airlock_strerror(-rc));
    return;
  }
}

static void read_channel(airlock_run *r)
{
  read_frames(r, 0);
}

/* ------------------------------------------------------------ capture */

static void drain_capture(airlock_run *r, int which)
{
  int *fd = which == W_OUT ? &r->c.out : &r->c.err;
  struct capture_buf *cb = &r->cap[which == W_OUT ? 0 : 1];
  char scratch[16384];

  while (*fd >= 0) {
    char *dst = scratch;
    size_t room = sizeof scratch;
    if (cb->len < r->capture_max) {
      if (cb->cap == cb->len) {
        size_t ncap = cb->cap ? cb->cap * 2 : 4096;
        if (ncap > r->capture_max) ncap = r->capture_max;
        char *nd = realloc(cb->data, ncap + 1);
        if (nd) {
          cb->data = nd;
          cb->cap = ncap;
        }
      }
      if (cb->cap > cb->len) {
        dst = cb->data + cb->len;
        room = cb->cap - cb->len;
      }
    }
    ssize_t n = read(*fd, dst, room);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) { /* EOF or error: stop watching */
      broker_watch_del(r, which, *fd);
      close(*fd);
      *fd = -1;
      return;
    }
    if (dst == scratch)
      cb->truncated = 1; /* over the cap: drained and dropped */
    else
      cb->len += (size_t)n;
  }
}

/* ------------------------------------------------------------ finishing */

/* The run's cgroups, once its processes are gone: what they counted, then away. */
static void cgroup_done(airlock_run *r)
{
  uint64_t v;
  airlock_usage *u = &r->res.usage;
  airlock_cgroup_kill(&r->cgroup);
  if (airlock_cgroup_pids_peak(&r->cgroup, &v) == 0) u->pids_peak = v;
  if (airlock_cgroup_pids_refused(&r->cgroup, &v) == 0) u->pids_refused = v;
  if (airlock_cgroup_memory_peak(&r->cgroup, &v) == 0) u->memory_peak = v;
  if (airlock_cgroup_oom_kills(&r->cgroup, &v) == 0) u->oom_kills = v;
  if (airlock_cgroup_cpu_usec(&r->cgroup, &v) == 0) u->cpu_usec = v;
  airlock_cgroup_remove(&r->cgroup);
}

static void close_child(airlock_run *r)
{
  broker_watch_del(r, W_CHAN, r->c.chan);
  broker_watch_del(r, W_OUT, r->c.out);
  broker_watch_del(r, W_ERR, r->c.err);
  broker_watch_del(r, W_PID, r->c.pidfd);
  broker_watch_del(r, W_NOTIFY, r->c.notify);
  airlock_child_close(&r->c);
  free(r->wbuf);
  r->wbuf = NULL;
  r->wlen = r->woff = 0;
  airlock_frame_reader_free(&r->rd);
}

static void run_free(airlock_run *r);

/* The child has exited (reaped): collect what is left and deliver DONE. */
static void finish(airlock_run *r)
{
  if (run_finished(r)) return;
  broker_read_init_status(r);
  if (r->c.chan >= 0) read_channel(r);
  drain_capture(r, W_OUT);
  drain_capture(r, W_ERR);
  if (r->phase != RUN_PARKED) r->b->live--;
  r->phase = RUN_FINISHED;
  held_drop(&r->call); /* an unanswered call dies with its run */
  close_child(r);
  cgroup_done(r);
  broker_classify(r);
  queue_forget(r->b, r);
  if (r->released) return;                               /* freed by the sweep at the end of the step */
  if (queue_push(r->b, r) < 0) r->phase = RUN_DELIVERED; /* cannot queue: leave it pollable */
}

static void on_exit_ready(airlock_run *r)
{
  siginfo_t si;
  memset(&si, 0, sizeof si);
  /* Peek without reaping so the group can still be signalled safely. */
  if (waitid(P_PID, (id_t)r->c.pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0) return;
  if (r->c.chan >= 0) read_channel(r);
  kill(-r->c.pid, SIGKILL); /* anything it forked dies with it */
  if (wait4(r->c.pid, &r->status, 0, &r->ru) < 0) return;
  r->exited = 1;
  /* The notes it sent before it died are still handled, in order; the run
  ** finishes once the host has taken the last (airlock_run_note_done).
  ** A run the parent ended drops them. */
  if (note_held(r) && r->pending == AIRLOCK_CAUSE_OK) return;
  finish(r);
}

static void check_deadline(airlock_run *r, double now)
{
  if (run_finished(r) || r->deadline_at == 0 || now < r->deadline_at) return;
  r->deadline_at = 0;
  broker_end_with(r, AIRLOCK_CAUSE_DEADLINE, "deadline of %llu ms passed",
                  (unsigned long long)r->deadline_ms);
}

/* ------------------------------------------------------------ public */

int airlock_broker_new(airlock_broker **out)
{
  airlock_broker *b = calloc(1, sizeof *b);
  if (!b) return -ENOMEM;
  b->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (b->epfd < 0) {
    int e = errno;
    free(b);
    return -e;
  }
  b->extra_fd = -1;
  *out = b;
  return 0;
}

const char *airlock_broker_error(const airlock_broker *b)
{
  return b->error;
}
airlock_spawn_step airlock_broker_error_step(const airlock_broker *b)
{
  return b->error_step;
}
size_t airlock_broker_live(const airlock_broker *b)
{
  return b->live;
}
uint64_t airlock_broker_next_serial(const airlock_broker *b)
{
  return b->serial + 1;
}

int airlock_broker_start(airlock_broker *b, const airlock_run_opts *o, airlock_run **out)
{
  airlock_spawn_opts so;
  airlock_run *r = calloc(1, sizeof *r);
  b->error_step = AIRLOCK_STEP_PREPARE;
  if (!r) {
    set_error(b, "out of memory");
    return -ENOMEM;
  }
  r->b = b;
  r->udata = o->udata;
  r->capture_max = o->capture_max ? o->capture_max : AIRLOCK_CAPTURE_DEFAULT;
  r->program = o->program;
  r->program_channel = o->program && o->program_channel;
  for (int i = 0; i < AIRLOCK_CGROUP_MAX; i++) r->cgroup.procs_fd[i] = -1;
  r->expect_ready = o->program ? 0 : o->expect_ready;
  r->verify_seccomp = o->verify_seccomp;
  r->drop_caps = o->spawn.drop_caps;
  r->namespaces = o->spawn.namespaces;
  r->deadline_ms = o->deadline_ms;
  r->memory_max = o->memory_max;
  r->refuse_chosen = o->spawn.confine && o->spawn.confine->refuse_chosen;
  r->observe = o->spawn.confine && o->spawn.confine->observe;
  if (r->observe) r->res.observed = ""; /* nothing observed yet */
  r->observe_connect = o->spawn.confine ? o->spawn.confine->observe_connect : 0;
  r->res.connects = r->connects;
  r->res.exit_code = -1;
  r->res.refused = r->refused;
  airlock_frame_reader_init(&r->rd, o->max_frame ? o->max_frame : AIRLOCK_FRAME_MAX_DEFAULT);

  so = o->spawn;
  so.channel = !o->program || r->program_channel;
  so.stdin_fd = o->spawn.stdin_fd > 0 ? o->spawn.stdin_fd : -1;
  so.cgroup_fds = NULL;
  so.ncgroup_fds = 0;
  if (so.rlimits) {
    r->rlimits = *so.rlimits;
    so.rlimits = &r->rlimits;
  }
  int rc;
  if (o->pids_max || o->memory_max || o->cpu_millis) {
    airlock_cgroup_limits lim = {o->pids_max, o->memory_max, o->cpu_millis};
    rc = airlock_cgroup_new(&r->cgroup, &lim, b->serial + 1, b->error, sizeof b->error);
    if (rc < 0) b->error_step = AIRLOCK_STEP_CGROUP;
    if (rc < 0) {
      airlock_frame_reader_free(&r->rd);
      free(r);
      return rc;
    }
    so.cgroup_fds = r->cgroup.procs_fd;
    so.ncgroup_fds = AIRLOCK_CGROUP_MAX;
  }
  r->t_start = airlock_now_ms();
  rc = airlock_spawn(&so, &r->c, b->error, sizeof b->error);
  b->error_step = rc < 0 ? r->c.step : AIRLOCK_STEP_WATCH;
  for (int i = 0; i < AIRLOCK_CGROUP_MAX; i++)
    if (r->cgroup.procs_fd[i] >= 0) {
      close(r->cgroup.procs_fd[i]);
      r->cgroup.procs_fd[i] = -1;
    }
  if (rc < 0) {
    airlock_cgroup_remove(&r->cgroup);
    airlock_frame_reader_free(&r->rd);
    free(r);
    return rc;
  }
  if (r->c.pidfd < 0) {
    rc = -ENOSYS;
    set_error(b, "spawn: this kernel has no pidfd_open (Linux 5.3 or later is required)");
    goto undo;
  }
  if ((rc = watch_add(r, W_CHAN, r->c.chan, EPOLLIN | EPOLLRDHUP)) < 0 ||
      (rc = watch_add(r, W_OUT, r->c.out, EPOLLIN)) < 0 ||
      (rc = watch_add(r, W_ERR, r->c.err, EPOLLIN)) < 0 ||
      (rc = watch_add(r, W_PID, r->c.pidfd, EPOLLIN)) < 0 ||
      (rc = watch_add(r, W_NOTIFY, r->c.notify, EPOLLIN)) < 0) {
    set_error(b, "epoll_ctl: %s", airlock_strerror(-rc));
    goto undo;
  }
  r->phase = o->parked && !o->program ? RUN_PARKED : RUN_LIVE;
  if (o->deadline_ms && r->phase == RUN_LIVE) r->deadline_at = r->t_start + (double)o->deadline_ms;
  char why[256];
  int ns_ok = !r->namespaces || broker_verify_namespaces(r, why, sizeof why) == 0;
  if (ns_ok && o->spawn.confine && o->spawn.confine->prog.filter &&
      broker_verify_program_filter(r, why, sizeof why) < 0)
    ns_ok = 0;
  r->serial = ++b->serial;
  r->next = b->runs;
  if (b->runs) b->runs->prev = r;
  b->runs = r;
  if (r->phase == RUN_LIVE) b->live++;
  if (!ns_ok) {
    broker_end_with(r, AIRLOCK_CAUSE_CONFINEMENT, "confinement: %s", why);
  } else if (o->init && o->init_len && !r->program) { /* parked: a prepared worker's init */
    rc = queue_out(r, o->init, o->init_len);
    if (rc == -ENOMEM) broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "out of memory sending init");
    /* -EPIPE: the child already died; its exit explains why. */
  }
  b->error_step = AIRLOCK_STEP_NONE;
  *out = r;
  return 0;

undo:
  kill(r->c.pid, SIGKILL);
  waitpid(r->c.pid, NULL, 0);
  close_child(r);
  airlock_cgroup_remove(&r->cgroup);
  free(r);
  return rc;
}

int airlock_run_unpark(airlock_run *r, const airlock_run_opts *o)
{
  if (r->phase != RUN_PARKED) return run_finished(r) ? -EPIPE : -EINVAL;
  if (r->pending != AIRLOCK_CAUSE_OK) return -EPIPE;
  r->phase = RUN_LIVE;
  r->b->live++;
  r->udata = o->udata;
  r->capture_max = o->capture_max ? o->capture_max : AIRLOCK_CAPTURE_DEFAULT;
  r->rd.max = o->max_frame ? o->max_frame : AIRLOCK_FRAME_MAX_DEFAULT;
  r->t_start = airlock_now_ms();
  r->deadline_ms = o->deadline_ms;
  if (o->deadline_ms) r->deadline_at = r->t_start + (double)o->deadline_ms;
  if (o->init && o->init_len) {
    int rc = queue_out(r, o->init, o->init_len);
    if (rc == -ENOMEM) broker_end_with(r, AIRLOCK_CAUSE_PROTOCOL, "out of memory sending init");
    /* -EPIPE: it died just now; its exit explains why. */
  }
  return 0;
}

double airlock_run_t_start(const airlock_run *r)
{
  return r->t_start;
}

int airlock_run_joined(const airlock_run *r)
{
  return r->phase == RUN_PARKED && r->ready_seen && r->pending == AIRLOCK_CAUSE_OK && !r->eof;
}

int airlock_run_await_ready(airlock_run *r, int timeout_ms, const char **why)
{
  if (r->phase != RUN_PARKED) return -EINVAL;
  double until = airlock_now_ms() + timeout_ms;
  while (!r->ready_seen && r->pending == AIRLOCK_CAUSE_OK && !r->eof && r->c.chan >= 0) {
    double left = until - airlock_now_ms();
    if (left <= 0) return -ETIMEDOUT;
    struct pollfd pfd = {.fd = r->c.chan, .events = POLLIN};
    int n = poll(&pfd, 1, (int)ceil(left));
    if (n < 0 && errno != EINTR) return -errno;
    if (n > 0) read_channel(r);
  }
  if (airlock_run_joined(r)) return 1;
  if (why) *why = r->pending != AIRLOCK_CAUSE_OK ? r->message : "the worker closed its channel before ready";
  return 0;
}

static double nearest_deadline(airlock_broker *b)
{
  double best = 0;
  for (airlock_run *r = b->runs; r; r = r->next)
    if (!run_finished(r) && r->deadline_at > 0 && (best == 0 || r->deadline_at < best)) best = r->deadline_at;
  return best;
}

int airlock_broker_step(airlock_broker *b, int timeout_ms)
{
  struct epoll_event evs[64];
  double now = airlock_now_ms();
  double dl = nearest_deadline(b);
  int wait = timeout_ms;

  if (b->qlen > 0) wait = 0;
  if (dl > 0) {
    double until = dl - now;
    int ms = until <= 0 ? 0 : (int)ceil(until);
    if (wait < 0 || ms < wait) wait = ms;
  }
  if (wait < 0 && b->live == 0) wait = 0; /* nothing could ever wake us */
  int n = epoll_wait(b->epfd, evs, 64, wait);
  if (n < 0) {
    if (errno != EINTR) {
      set_error(b, "epoll_wait: %s", airlock_strerror(errno));
      return -errno;
    }
    n = 0;
  }
  for (int i = 0; i < n; i++) {
    struct watch *w = evs[i].data.ptr;
    if (w->which == W_EXTRA) {
      b->extra_ready = 1;
      continue;
    }
    airlock_run *r = w->run;
    if (run_finished(r)) continue;
    switch (w->which) {
      case W_CHAN:
        if (evs[i].events & EPOLLOUT) flush_out(r);
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) read_channel(r);
        /* Stop hearing about a channel that is closed, or that has nothing more
        ** to say: after the final frame, or once the run is being ended, reads
        ** stop, and a level-triggered hang-up would wake every step until the
        ** child's exit is reaped. */
        if ((r->eof || r->final.live || r->pending != AIRLOCK_CAUSE_OK) && r->c.chan >= 0) {
          broker_watch_del(r, W_CHAN, r->c.chan);
          close(r->c.chan);
          r->c.chan = -1;
        }
        break;
      case W_OUT: drain_capture(r, W_OUT); break;
      case W_ERR: drain_capture(r, W_ERR); break;
      case W_PID: on_exit_ready(r); break;
      case W_NOTIFY: broker_on_notify(r, evs[i].events); break;
    }
  }
  now = airlock_now_ms();
  for (airlock_run *r = b->runs, *next; r; r = next) {
    next = r->next;
    check_deadline(r, now);
    if (run_finished(r) && r->released) run_free(r); /* no event of this batch can name it now */
  }
  return (int)b->qlen;
}

int airlock_broker_next(airlock_broker *b, airlock_event *ev)
{
  while (b->qlen > 0) {
    airlock_run *r = b->queue[b->qhead++];
    b->qlen--;
    if (b->qlen == 0) b->qhead = 0;
    memset(ev, 0, sizeof *ev);
    ev->run = r;
    if (run_finished(r)) {
      if (r->phase == RUN_DELIVERED) continue;
      r->phase = RUN_DELIVERED;
      ev->kind = AIRLOCK_EV_DONE;
      return 1;
    }
    if (!r->call.live) continue;
    ev->kind = r->call.m.kind == AIRLOCK_MSG_NOTE ? AIRLOCK_EV_NOTE : AIRLOCK_EV_CALL;
    ev->id = r->call.m.id;
    ev->effect = r->call.m.effect;
    ev->effect_len = r->call.m.effect_len;
    ev->args = r->call.m.value ? r->call.m.value : &nil_object;
    return 1;
  }
  return 0;
}

int airlock_broker_watch_extra(airlock_broker *b, int fd)
{
  if (fd >= 0 && b->extra_fd >= 0) return -EBUSY;
  if (fd < 0) {
    if (b->extra_fd >= 0) epoll_ctl(b->epfd, EPOLL_CTL_DEL, b->extra_fd, NULL);
    b->extra_fd = -1;
    b->extra_ready = 0;
    return 0;
  }
  b->extra_w.run = NULL;
  b->extra_w.which = W_EXTRA;
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &b->extra_w};
  if (epoll_ctl(b->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) return -errno;
  b->extra_fd = fd;
  return 0;
}

int airlock_broker_extra_ready(airlock_broker *b)
{
  int r = b->extra_ready;
  b->extra_ready = 0;
  return r;
}

size_t airlock_broker_peek_calls(const airlock_broker *b, airlock_event *out, size_t max)
{
  size_t n = 0;
  for (size_t i = 0; i < b->qlen && n < max; i++) {
    airlock_run *r = b->queue[b->qhead + i];
    if (run_finished(r) || !r->call.live || r->call.m.kind != AIRLOCK_MSG_CALL) continue;
    airlock_event *ev = &out[n++];
    memset(ev, 0, sizeof *ev);
    ev->run = r;
    ev->kind = AIRLOCK_EV_CALL;
    ev->id = r->call.m.id;
    ev->effect = r->call.m.effect;
    ev->effect_len = r->call.m.effect_len;
    ev->args = r->call.m.value ? r->call.m.value : &nil_object;
  }
  return n;
}

/* A reply frame goes no larger than the frames the run may send (its
** max_frame), and never past what a worker reads: calls and answers are
** bounded alike. */
static uint32_t reply_frame_max(const airlock_run *r)
{
  return r->rd.max < AIRLOCK_FRAME_MAX_DEFAULT ? r->rd.max : AIRLOCK_FRAME_MAX_DEFAULT;
}

static int count_bytes(void *data, const char *buf, size_t len)
{
  (void)buf;
  *(size_t *)data += len;
  return 0;
}

size_t airlock_run_answer_max(const airlock_run *r)
{
  size_t head = 0; /* the reply's own fields, at their largest */
  msgpack_packer pk;
  msgpack_packer_init(&pk, &head, count_bytes);
  airlock_pack_reply_ok(&pk, UINT64_MAX, 1);
  uint32_t max = reply_frame_max(r);
  return max > head ? max - head : 0;
}

static void size_text(char *buf, size_t n, uint32_t v)
{
  if (v >= (1u << 20) && v % (1u << 20) == 0)
    snprintf(buf, n, "%u MiB", v >> 20);
  else if (v >= (1u << 10) && v % (1u << 10) == 0)
    snprintf(buf, n, "%u KiB", v >> 10);
  else
    snprintf(buf, n, "%u bytes", v);
}

int airlock_run_answer_too_large(const airlock_run *r, size_t len, char *msg, size_t n)
{
  if (len <= airlock_run_answer_max(r)) return 0;
  char lim[32];
  uint32_t max = reply_frame_max(r);
  size_text(lim, sizeof lim, max);
  if (max < AIRLOCK_FRAME_MAX_DEFAULT)
    snprintf(msg, n,
             "answer too large to send (%zu bytes; this run's frames are limited to %s by its "
             "max_frame)",
             len, lim);
  else
    snprintf(msg, n, "answer too large to send (%zu bytes; frames are limited to %s)", len, lim);
  return 1;
}

/* The reply to the pending call: ok = raw (msgpack, already encoded) when raw
** is set, else err = msg and code. */
static int reply_frame(airlock_run *r, uint64_t id, const void *raw, size_t rawlen, const char *msg,
                       size_t msglen, const char *code)
{
  msgpack_sbuffer *sbp = &r->b->out;
  msgpack_packer pk;
  if (run_finished(r) || !r->call.live) return run_finished(r) ? -EPIPE : -EINVAL;
  if (r->call.m.id != id || r->call.m.kind != AIRLOCK_MSG_CALL) return -EINVAL;
  msgpack_sbuffer_clear(sbp);
  msgpack_packer_init(&pk, sbp, msgpack_sbuffer_write);
  int rc = airlock_frame_begin(sbp);
  int turn = r->turn_id == id;
  r->turn_id = 0;
  if (raw) {
    airlock_pack_reply_ok(&pk, id, turn);
    if (msgpack_sbuffer_write(sbp, raw, rawlen) != 0) rc = -ENOMEM;
  } else {
    airlock_pack_reply_err(&pk, id, msg, msglen, code, turn);
  }
  if (rc == 0) rc = airlock_frame_end(sbp, reply_frame_max(r));
  if (rc == 0) {
    held_recycle(r, &r->call);
    rc = queue_out(r, sbp->data, sbp->size);
    if (rc == -EPIPE) rc = 0; /* the child died meanwhile: its exit is the story */
  }
  /* A large reply's buffer is not kept: the scratch stays small. */
  if (sbp->alloc > 65536) {
    msgpack_sbuffer_destroy(sbp);
    msgpack_sbuffer_init(sbp);
  }
  return rc;
}

int airlock_run_note_done(airlock_run *r, uint64_t id)
{
  if (run_finished(r)) return 0;
  if (!r->call.live || r->call.m.kind != AIRLOCK_MSG_NOTE || r->call.m.id != id) return -EINVAL;
  held_recycle(r, &r->call);
  /* What came after the note may sit in the reader's buffer already: no
  ** wake-up would come for it. What is still in the socket waits for one,
  ** unless the child is gone: then the rest is read now (no more than its
  ** socket buffer held), and the run finishes after its last note. */
  if (r->c.chan >= 0) read_frames(r, !r->exited);
  if (r->exited && !note_held(r)) finish(r);
  return 0;
}

int airlock_run_reply(airlock_run *r, uint64_t id, const void *value, size_t len)
{
  if (!value || len == 0) return -EINVAL;
  char msg[192];
  if (airlock_run_answer_too_large(r, len, msg, sizeof msg)) {
    /* Refused here, before it is sent: the worker would not read it, and
    ** the guest would wait for its answer forever. The call fails at once. */
    int rc = reply_frame(r, id, NULL, 0, msg, strlen(msg), NULL);
    return rc < 0 ? rc : -EMSGSIZE;
  }
  return reply_frame(r, id, value, len, NULL, 0, NULL);
}

int airlock_run_fail(airlock_run *r, uint64_t id, const char *msg, size_t len, const char *code)
{
  return reply_frame(r, id, NULL, 0, msg, len, code);
}

int airlock_run_turn(airlock_run *r, uint64_t id)
{
  if (run_finished(r)) return -EPIPE;
  if (!r->call.live || r->call.m.kind != AIRLOCK_MSG_CALL || r->call.m.id != id) return -EINVAL;
  r->turn_id = id;
  return 0;
}

void airlock_run_note_denied(airlock_run *r)
{
  r->denied_noted = 1;
}

int airlock_run_cancel(airlock_run *r)
{
  return airlock_run_abort(r, AIRLOCK_CAUSE_CANCELLED, "cancelled by the host");
}

int airlock_run_abort(airlock_run *r, airlock_cause cause, const char *message)
{
  if (run_finished(r)) return 0;
  broker_end_with(r, cause, "%s", message);
  return 0;
}

const airlock_result *airlock_run_result(const airlock_run *r)
{
  return r->phase == RUN_DELIVERED ? &r->res : NULL;
}

pid_t airlock_run_pid(const airlock_run *r)
{
  return r->c.pid;
}

/* The kernel keeps the CPU clock of every process; clock_gettime on its
** clockid reads it without any permission on the process. The broker reaps the
** child itself (on_exit_ready), so until r->exited the pid cannot name
** another process. */
int airlock_run_cpu_ns(const airlock_run *r, uint64_t *ns)
{
  if (r->exited || r->c.pid <= 0) return -ESRCH;
  clockid_t id;
  int rc = clock_getcpuclockid(r->c.pid, &id);
  if (rc != 0) return -rc;
  struct timespec ts;
  if (clock_gettime(id, &ts) != 0) return -errno;
  *ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  return 0;
}
uint64_t airlock_run_serial(const airlock_run *r)
{
  return r->serial;
}
void *airlock_run_udata(const airlock_run *r)
{
  return r->udata;
}
int airlock_run_live(const airlock_run *r)
{
  return !run_finished(r);
}

size_t airlock_run_output(const airlock_run *r, int which, const char **data)
{
  const struct capture_buf *cb = &r->cap[which == 2 ? 1 : 0];
  *data = cb->data ? cb->data : "";
  return cb->len;
}

static void run_free(airlock_run *r)
{
  airlock_broker *b = r->b;
  queue_forget(b, r);
  if (r->prev)
    r->prev->next = r->next;
  else
    b->runs = r->next;
  if (r->next) r->next->prev = r->prev;
  held_drop(&r->call);
  held_drop(&r->ready);
  held_drop(&r->final);
  if (r->spare) msgpack_zone_free(r->spare);
  free(r->observed);
  free(r->cap[0].data);
  free(r->cap[1].data);
  free(r);
}

void airlock_run_release(airlock_run *r)
{
  if (!r) return;
  if (run_finished(r)) {
    run_free(r);
    return;
  }
  r->released = 1;
  queue_forget(r->b, r);
  airlock_run_cancel(r);
}

void airlock_broker_free(airlock_broker *b)
{
  if (!b) return;
  while (b->runs) {
    airlock_run *r = b->runs;
    if (!run_finished(r)) {
      broker_kill_group(r);
      if (!r->exited && wait4(r->c.pid, &r->status, 0, &r->ru) >= 0) r->exited = 1;
      r->released = 1;
      finish(r);
    }
    run_free(r);
  }
  close(b->epfd);
  msgpack_sbuffer_destroy(&b->out);
  free(b->queue);
  free(b);
}
