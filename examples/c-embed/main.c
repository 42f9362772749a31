/*
** c-embed -- a C-only airlock host, no Lua in this process: spawn a confined
** airlock-worker through the broker, hand it a guest in the init frame, answer
** the one effect it asks for, print the result.
**   c-embed [WORKER]   (default: $AIRLOCK_WORKER, else airlock-worker beside c-embed)
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "airlock.h"

static const char GUEST[] = "local sum = host.add({ a = 2, b = 3 })\nreturn { sum = sum, twice = sum * 2 }";

int main(int argc, char **argv) {
  char self[4096];
  const char *worker = argc > 1 ? argv[1] : getenv("AIRLOCK_WORKER");
  ssize_t n = worker ? 0 : readlink("/proc/self/exe", self, sizeof self - 32);
  if (!worker && n > 0) { self[n] = 0; strcpy(strrchr(self, '/') + 1, "airlock-worker"); worker = self; }
  if (!worker) { fputs("c-embed: cannot find airlock-worker\n", stderr); return 2; }

  /* The init frame: the guest, its limits, the effects it may ask for, and the layers
  ** the worker applies to itself (the spawner applies the rest, below). */
  static const char *const effects[] = { "add", NULL };
  airlock_init in = { .guest_name = "adder", .source = GUEST, .source_len = sizeof GUEST - 1,
                      .instructions = 1000000, .memory = 16 << 20, .effects = effects,
                      .confine_landlock = 1, .confine_seccomp = 1,
                      .require_landlock = 1, .require_seccomp = 1 };
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  char err[256];
  if (airlock_init_frame(&sb, &in, 0, err, sizeof err) < 0) { fprintf(stderr, "c-embed: %s\n", err); return 2; }

  unsigned long ns = 0;   /* every namespace: user, pid, net, ipc, uts, mount, cgroup */
  for (const airlock_namespace *x = airlock_namespaces; x->name; x++) ns |= x->flag;
  const char *args[] = { worker, NULL };
  airlock_run_opts o = { .spawn = { .argv = args, .namespaces = ns, .no_new_privs = 1, .drop_caps = 1 },
                         .init = sb.data, .init_len = sb.size, .deadline_ms = 2000,
                         .expect_ready = 1, .verify_seccomp = 1 };
  airlock_broker *b = NULL;
  airlock_run *run;
  if (airlock_broker_new(&b) < 0 || airlock_broker_start(b, &o, &run) < 0) {
    fprintf(stderr, "c-embed: %s\n", b ? airlock_broker_error(b) : "cannot create a broker");
    return 1;
  }
  msgpack_sbuffer_destroy(&sb);   /* start queued its own copy */
  int code = -1;
  while (code < 0 && airlock_broker_step(b, -1) >= 0) {
    airlock_event ev;
    while (airlock_broker_next(b, &ev)) {
      if (ev.kind == AIRLOCK_EV_CALL) {   /* the only granted effect: add {a, b} */
        const msgpack_object *x = airlock_msg_field(ev.args, "a"), *y = airlock_msg_field(ev.args, "b");
        if (!x || !y || x->type != MSGPACK_OBJECT_POSITIVE_INTEGER || y->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
          airlock_run_fail(ev.run, ev.id, "add: a and b must be whole numbers", 34, NULL);
          continue;
        }
        printf("effect %.*s {a = %llu, b = %llu} -> %llu\n", (int)ev.effect_len, ev.effect,
               (unsigned long long)x->via.u64, (unsigned long long)y->via.u64,
               (unsigned long long)(x->via.u64 + y->via.u64));   /* ev.effect lives until the reply */
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_uint64(&pk, x->via.u64 + y->via.u64);   /* the answer, any msgpack value */
        airlock_run_reply(ev.run, ev.id, sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
      } else {                            /* done: the run's result */
        const airlock_result *r = airlock_run_result(ev.run);
        printf("cause %s, value ", airlock_cause_name(r->cause));
        if (r->value) msgpack_object_print(stdout, *r->value); else fputs("none", stdout);
        printf("%s%s\nwall %.2f ms, %llu effect(s)\n", *r->message ? ", " : "", r->message,
               r->usage.wall_ms, (unsigned long long)r->usage.effects);
        code = r->ok ? 0 : 1;
        airlock_run_release(ev.run);
      }
    }
  }
  airlock_broker_free(b);
  return code < 0 ? 1 : code;
}
