/*
** broker_int.h -- what the broker's files share: a run's state and the few
** functions one part calls in another. broker.c is the event loop (channel,
** capture, deadlines, exits); broker_verify.c checks from outside that a child
** is confined as asked; broker_seccomp.c answers a program's refused calls
** (the seccomp listener); broker_end.c decides how a run ended. Not installed.
*/
#ifndef AIRLOCK_BROKER_INT_H
#define AIRLOCK_BROKER_INT_H

#include "airlock.h"
#include "confine.h"

#include <stdint.h>
#include <sys/resource.h>

/* W_EXTRA: the broker's one watched descriptor of the host's own (no run). */
enum { W_CHAN, W_OUT, W_ERR, W_PID, W_NOTIFY, W_COUNT, W_EXTRA = W_COUNT };

struct watch {
  airlock_run *run;
  int which;
};

/* A decoded frame kept alive (the objects live in u's zone). */
struct held {
  msgpack_unpacked u;
  airlock_msg m;
  int live;
};

struct capture_buf {
  char *data;
  size_t len, cap;
  int truncated;
};

/* A run's life, in order: parked (a warm worker, spawned and confined, not yet
** given a run: airlock_run_unpark), live (its events are delivered), finished
** (the child is gone and the result made; DONE is queued), delivered (DONE was
** handed out: airlock_run_result answers). A run only moves forward; a parked
** worker that dies goes straight to finished. */
enum run_phase { RUN_PARKED, RUN_LIVE, RUN_FINISHED, RUN_DELIVERED };

struct airlock_run {
  airlock_broker *b;
  airlock_run *prev, *next; /* the broker's list of all runs */
  uint64_t serial;
  void *udata;
  airlock_child c;
  struct watch w[W_COUNT];
  airlock_frame_reader rd;
  uint8_t *wbuf; /* queued channel output */
  size_t wlen, woff;
  struct capture_buf cap[2];
  size_t capture_max;
  double t_start, deadline_at; /* ms, monotonic; deadline_at 0 = none */
  double t_final;              /* ms, monotonic: when the done or pause frame arrived */
  uint64_t deadline_ms;
  enum run_phase phase; /* where the run is in its life (above) */
  /* Facts of the run, independent of its phase. */
  int expect_ready, ready_seen; /* a guest's worker owes a ready frame; it has sent it */
  int eof;                      /* the channel is closed */
  int exited;                   /* the child is reaped (status, ru hold its end) */
  int killed;                   /* the parent signalled its process group */
  int released;                 /* the caller gave up its handle: freed once finished */
  int want_out;                 /* queued output is waiting for EPOLLOUT */
  int denied_noted, verify_seccomp, drop_caps, verify_failed, program, program_channel;
  airlock_cgroup cgroup; /* with pids_max, memory_max or cpu_millis; paths "" otherwise */
  uint64_t memory_max;
  airlock_rlimits rlimits;
  unsigned long namespaces;
  struct held call, ready, final;
  uint64_t turn_id;    /* the call whose answer ends the guest's turn (0: none) */
  msgpack_zone *spare; /* a cleared zone for the next frame (no malloc per call) */
  uint64_t last_id;
  int refuse_chosen;          /* refused calls are answered with an errno */
  int init_status, init_seen; /* airlock-init's report of the program's wait status */
  int exec_errno;             /* airlock-init could not run the program: why */
  airlock_refusal refused[AIRLOCK_REFUSALS_MAX];
  int observe;    /* learn mode: observed calls are recorded, then continue */
  char *observed; /* the records (res.observed), malloc'd, grown to AIRLOCK_OBSERVED_MAX */
  size_t observed_len, observed_cap;
  uint32_t observed_recent[64]; /* hashes of the latest records, to skip repeats */
  unsigned observed_at;
  /* With a proxy (its port): connects elsewhere are recorded (res.connects), then continue. */
  int observe_connect;
  char connects[AIRLOCK_CONNECTS_MAX][AIRLOCK_CONNECT_LEN];
  airlock_cause pending; /* set when the parent decided the cause */
  int status;            /* wait status */
  struct rusage ru;
  char message[1024];
  airlock_result res;
};

struct airlock_broker {
  int epfd;
  airlock_run *runs;
  size_t live;
  uint64_t serial;
  msgpack_sbuffer out; /* scratch for frames out (a reply), kept between them */
  airlock_run **queue; /* runs with an event to deliver (FIFO) */
  size_t qhead, qlen, qcap;
  struct watch extra_w; /* airlock_broker_watch_extra: run NULL, which W_EXTRA */
  int extra_fd, extra_ready;
  char error[512];
  airlock_spawn_step error_step; /* the spawn step of the last failed start */
};

/* The parent decides how the run ends (first decision wins) and kills its
** process group. */
static inline int run_finished(const airlock_run *r)
{
  return r->phase >= RUN_FINISHED;
}

void broker_end_with(airlock_run *r, airlock_cause cause, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void broker_kill_group(airlock_run *r);
void broker_watch_del(airlock_run *r, int which, int fd);

/* broker_verify.c: each returns 0, or -1 with a message in why. */
int broker_verify_namespaces(airlock_run *r, char *why, size_t len);
int broker_verify_ready(airlock_run *r, char *why, size_t len);
int broker_verify_program_filter(airlock_run *r, char *why, size_t len);

/* broker_seccomp.c: the listener became readable (or hung up). */
void broker_on_notify(airlock_run *r, uint32_t events);
struct seccomp_notif;
/* broker_connect.c: records a direct connect (a run with a proxy) and lets it continue. */
void broker_observe_connect(airlock_run *r, const struct seccomp_notif *n);
/* broker_observe.c: records an observed call (learn mode) and lets it continue. */
void broker_observe(airlock_run *r, const struct seccomp_notif *n);

/* broker_end.c: airlock-init's records, then the result and its cause. */
void broker_read_init_status(airlock_run *r);
void broker_classify(airlock_run *r);

#endif
