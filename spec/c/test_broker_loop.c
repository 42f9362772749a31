/*
** test_broker_loop.c -- the C broker through 1,000 real worker runs, each
** making one effect call, while a timer interrupts the parent every 100 us (an
** EINTR storm: the handler is installed without SA_RESTART). Every run must
** end ok with the right value, and afterwards the parent must hold no extra fd
** and no child. Built with ASan, LeakSanitizer then checks at exit that the
** parent side leaked nothing.
**   usage: test-broker-loop [WORKER]   (default build/bin/airlock-worker)
*/
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "airlock.h"
#include "check.h"

#define RUNS 1000

static volatile sig_atomic_t ticks;
static void on_alarm(int sig)
{
  (void)sig;
  ticks++;
}

static int fd_count(void)
{
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *e;
  while (d != NULL && (e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  if (d != NULL) closedir(d);
  return n - 1; /* the DIR's own fd */
}

/* The init frame: a guest that asks for "add" once and returns its answer. */
static void init_frame(msgpack_sbuffer *sb, uint64_t run)
{
  static const char src[] = "return host.call('add', { a = 40, b = 2 }) + 0";
  msgpack_packer pk;
  msgpack_sbuffer_init(sb);
  airlock_frame_begin(sb);
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 7);
  airlock_pack_cstr(&pk, "t");
  airlock_pack_cstr(&pk, "init");
  airlock_pack_cstr(&pk, "v");
  msgpack_pack_uint32(&pk, AIRLOCK_PROTOCOL_VERSION);
  airlock_pack_cstr(&pk, "run");
  msgpack_pack_uint64(&pk, run);
  airlock_pack_cstr(&pk, "guest");
  msgpack_pack_map(&pk, 2);
  airlock_pack_cstr(&pk, "name");
  airlock_pack_cstr(&pk, "loop");
  airlock_pack_cstr(&pk, "source");
  airlock_pack_str(&pk, src, sizeof src - 1);
  airlock_pack_cstr(&pk, "seed");
  msgpack_pack_uint32(&pk, 7);
  airlock_pack_cstr(&pk, "limits");
  msgpack_pack_map(&pk, 1);
  airlock_pack_cstr(&pk, "memory");
  msgpack_pack_uint32(&pk, 16u << 20);
  airlock_pack_cstr(&pk, "effects");
  msgpack_pack_array(&pk, 1);
  airlock_pack_cstr(&pk, "add");
  airlock_frame_end(sb, 0);
}

/* Answers "add" with a + b; returns 1 when the run has finished ok with 42. */
static int drive(airlock_broker *b, airlock_run *r)
{
  for (;;) {
    int n = airlock_broker_step(b, 1000);
    if (n < 0 && n != -EINTR) return 0;
    airlock_event ev;
    while (airlock_broker_next(b, &ev)) {
      if (ev.kind == AIRLOCK_EV_CALL) {
        const msgpack_object *a = airlock_msg_field(ev.args, "a"), *bb = airlock_msg_field(ev.args, "b");
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_int64(&pk, (a ? a->via.i64 : 0) + (bb ? bb->via.i64 : 0));
        airlock_run_reply(ev.run, ev.id, sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
      } else {
        const airlock_result *res = airlock_run_result(ev.run);
        int ok = res != NULL && res->ok && res->value != NULL &&
                 res->value->type == MSGPACK_OBJECT_POSITIVE_INTEGER && res->value->via.u64 == 42;
        if (!ok && res != NULL)
          fprintf(stderr, "run ended %s: %s\n", airlock_cause_name(res->cause), res->message);
        airlock_run_release(ev.run);
        return ok && ev.run == r;
      }
    }
  }
}

/* The host's own descriptor (airlock_broker_watch_extra): a step wakes for
** it even with nothing else to wait for, and says so once per readiness. */
static void test_watch_extra(void)
{
  airlock_broker *b;
  int p[2];
  CHECK(airlock_broker_new(&b) == 0);
  CHECK(pipe(p) == 0);
  CHECK(airlock_broker_watch_extra(b, p[0]) == 0);
  CHECK_MSG(airlock_broker_watch_extra(b, p[1]) == -EBUSY, "one watched descriptor per broker");
  CHECK(airlock_broker_step(b, 0) == 0);
  CHECK_MSG(airlock_broker_extra_ready(b) == 0, "control: nothing written, nothing ready");
  CHECK(write(p[1], "x", 1) == 1);
  CHECK(airlock_broker_step(b, 0) == 0);
  CHECK_MSG(airlock_broker_extra_ready(b) == 1, "readable: the step says so");
  CHECK_MSG(airlock_broker_extra_ready(b) == 0, "once");
  char c;
  CHECK(read(p[0], &c, 1) == 1);
  CHECK(airlock_broker_step(b, 0) == 0);
  CHECK_MSG(airlock_broker_extra_ready(b) == 0, "drained: not ready again");
  CHECK(airlock_broker_watch_extra(b, -1) == 0);
  CHECK(write(p[1], "y", 1) == 1);
  CHECK(airlock_broker_step(b, 0) == 0);
  CHECK_MSG(airlock_broker_extra_ready(b) == 0, "no longer watched");
  airlock_broker_free(b);
  close(p[0]);
  close(p[1]);
}

/* Runs one worker to its end (answering add as drive does); returns its
** result's cause and copies its message. */
static airlock_cause run_to_end(airlock_broker *b, char *msg, size_t len)
{
  for (;;) {
    int n = airlock_broker_step(b, 1000);
    if (n < 0 && n != -EINTR) return AIRLOCK_CAUSE_COUNT_;
    airlock_event ev;
    while (airlock_broker_next(b, &ev)) {
      if (ev.kind == AIRLOCK_EV_CALL) {
        const msgpack_object *a = airlock_msg_field(ev.args, "a"), *bb = airlock_msg_field(ev.args, "b");
        char answer[9] = {(char)0xcf}; /* uint64, big-endian */
        uint64_t sum = (a ? a->via.u64 : 0) + (bb ? bb->via.u64 : 0);
        for (int i = 0; i < 8; i++) answer[1 + i] = (char)(sum >> (56 - 8 * i));
        airlock_run_reply(ev.run, ev.id, answer, sizeof answer);
      } else if (ev.kind == AIRLOCK_EV_DONE) {
        const airlock_result *res = airlock_run_result(ev.run);
        airlock_cause c = res->cause;
        snprintf(msg, len, "%s", res->message);
        if (c == AIRLOCK_CAUSE_OK &&
            !(res->value && res->value->type == MSGPACK_OBJECT_POSITIVE_INTEGER && res->value->via.u64 == 42))
          snprintf(msg, len, "the value is not 42");
        airlock_run_release(ev.run);
        return c;
      }
    }
  }
}

/* airlock_init_frame and airlock_start_frame with a real worker: the guest
** gets its input, a prepared (parked) worker gets its guest and input from
** the start frame, and a per-turn budget ends a runaway naming its field. */
static void test_init_api(const char *worker)
{
  const char *const wargv[] = {worker, NULL};
  static const char *const fx[] = {"add", NULL};
  static const char input[] = "\x82\xa1"
                              "a\x28\xa1"
                              "b\x02"; /* {a = 40, b = 2} */
  static const char src[] = "local t = ... return host.call('add', { a = t.a, b = t.b }) + 0";
  char err[256], msg[256];
  airlock_broker *b;
  airlock_run *r;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  CHECK(airlock_broker_new(&b) == 0);

  airlock_init in = {.source = src,
                     .source_len = sizeof src - 1,
                     .effects = fx,
                     .input = input,
                     .input_len = sizeof input - 1,
                     .memory = 16u << 20,
                     .seed = 7};
  airlock_run_opts o = {.spawn = {.argv = wargv}, .deadline_ms = 10000, .expect_ready = 1};
  CHECK(airlock_init_frame(&sb, &in, 0, err, sizeof err) == 0);
  o.init = sb.data;
  o.init_len = sb.size;
  CHECK(airlock_broker_start(b, &o, &r) == 0);
  CHECK_MSG(run_to_end(b, msg, sizeof msg) == AIRLOCK_CAUSE_OK, msg);

  /* prepared: the init has no guest; the start frame brings it and the input */
  in.prepare = 1;
  CHECK(airlock_init_frame(&sb, &in, 0, err, sizeof err) == 0);
  o.init = sb.data;
  o.init_len = sb.size;
  o.parked = 1;
  CHECK(airlock_broker_start(b, &o, &r) == 0);
  const char *why = NULL;
  CHECK_MSG(airlock_run_await_ready(r, 10000, &why) == 1, why ? why : "the parked worker did not join");
  CHECK(airlock_start_frame(&sb, &in, airlock_run_serial(r), 0, err, sizeof err) == 0);
  airlock_run_opts go = {.init = sb.data, .init_len = sb.size, .deadline_ms = 10000};
  CHECK(airlock_run_unpark(r, &go) == 0);
  CHECK_MSG(run_to_end(b, msg, sizeof msg) == AIRLOCK_CAUSE_OK, msg);

  /* a per-turn budget: the runaway ends with cause instructions, the field named */
  static const char spin[] = "while true do end";
  airlock_init sp = {.source = spin, .source_len = sizeof spin - 1, .turn_instructions = 100000};
  CHECK(airlock_init_frame(&sb, &sp, 0, err, sizeof err) == 0);
  o.init = sb.data;
  o.init_len = sb.size;
  o.parked = 0;
  CHECK(airlock_broker_start(b, &o, &r) == 0);
  CHECK(run_to_end(b, msg, sizeof msg) == AIRLOCK_CAUSE_INSTRUCTIONS);
  CHECK_MSG(strstr(msg, "turn instruction budget of 100000 exhausted (limits.turn_instructions") != NULL,
            msg);
  msgpack_sbuffer_destroy(&sb);
  airlock_broker_free(b);
}

int main(int argc, char **argv)
{
  const char *worker = argc > 1 ? argv[1] : "build/bin/airlock-worker";
  const char *const wargv[] = {worker, NULL};
  if (access(worker, X_OK) != 0) {
    fprintf(stderr, "test-broker-loop: no worker at %s (run from the repository root after make build)\n",
            worker);
    printf("0 passed, 1 failed\n");
    return 1;
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm; /* no SA_RESTART: every slow call may see EINTR */
  sigaction(SIGALRM, &sa, NULL);

  airlock_broker *b;
  CHECK(airlock_broker_new(&b) == 0);
  int fds_before = fd_count();
  struct itimerval every = {{0, 100}, {0, 100}};
  setitimer(ITIMER_REAL, &every, NULL);

  int good = 0;
  for (uint64_t i = 1; i <= RUNS; i++) {
    msgpack_sbuffer sb;
    init_frame(&sb, i);
    airlock_run_opts o;
    memset(&o, 0, sizeof o);
    o.spawn.argv = wargv;
    o.init = sb.data;
    o.init_len = sb.size;
    o.deadline_ms = 10000;
    o.expect_ready = 1;
    airlock_run *r;
    int rc;
    do rc = airlock_broker_start(b, &o, &r);
    while (rc == -EINTR);
    msgpack_sbuffer_destroy(&sb);
    if (rc != 0) {
      fprintf(stderr, "start %llu: %s\n", (unsigned long long)i, airlock_broker_error(b));
      continue;
    }
    good += drive(b, r);
  }

  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  CHECK_MSG(good == RUNS, "every run under the EINTR storm ended ok with 42");
  CHECK_MSG(ticks > 1000, "the timer really interrupted the parent (over 1,000 SIGALRMs)");
  CHECK_MSG(airlock_broker_live(b) == 0, "no live run left");
  CHECK_MSG(fd_count() == fds_before, "the parent holds no extra fd");
  CHECK_MSG(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "no child left, not even a zombie");
  airlock_broker_free(b);
  printf("%d of %d runs ok, %d timer interrupts\n", good, RUNS, (int)ticks);
  test_watch_extra();
  test_init_api(worker);
  return check_summary();
}
