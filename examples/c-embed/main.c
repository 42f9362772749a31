/*
** c-embed -- a C-only airlock host, no Lua in this process: spawn a confined
** airlock-worker through the broker with the stock untrusted policy's
** confinement and limits (airlock_untrusted_defaults) and a per-turn budget,
** hand it a guest and its input in the init frame, answer the effect it asks
** for, print the result.
**   c-embed [--add A B] [--guest FILE] [--inspect] [--bare] [WORKER]
**     --add A B     the guest's input is {a = A, b = B} (default 2 and 3)
**     --guest FILE  run the Lua in FILE instead of the adder
**     --inspect     print what the worker is held to, from /proc while it
**                   waits for an answer, and the layers its ready frame reports
**     --bare        none of the defaults: a host that sets nothing, the
**                   specs' control (LESS confinement than untrusted)
**   WORKER: default $AIRLOCK_WORKER, else airlock-worker beside c-embed
*/
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "airlock.h"

static const char ADDER[] = "local sum = host.add(...)\nreturn { sum = sum, twice = sum * 2 }";
#define GUEST_MAX (1u << 20) /* bytes of a guest read from a file */

/* What the worker is held to, as the kernel shows it: its namespaces against
** ours, its no_new_privs, seccomp, identity and capabilities, and its rlimits. */
static void inspect(pid_t pid)
{
  char path[64], mine[128], theirs[128], line[256];
  for (const airlock_namespace *x = airlock_namespaces; x->name; x++) {
    snprintf(path, sizeof path, "/proc/self/ns/%s", x->proc);
    ssize_t n = readlink(path, mine, sizeof mine);
    snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)pid, x->proc);
    ssize_t m = readlink(path, theirs, sizeof theirs);
    printf("inspect ns %s %s\n", x->name,
           m <= 0                                           ? "unreadable"
           : n == m && memcmp(mine, theirs, (size_t)n) == 0 ? "shared with the host"
                                                            : "its own");
  }
  static const char *const keep[] = {"Uid:",
                                     "Gid:",
                                     "NoNewPrivs:",
                                     "Seccomp:",
                                     "Cap",
                                     "Max cpu time",
                                     "Max file size",
                                     "Max stack size",
                                     "Max core file size",
                                     "Max processes",
                                     "Max open files",
                                     "Max address space",
                                     NULL};
  for (int f = 0; f < 2; f++) {
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, f == 0 ? "status" : "limits");
    FILE *in = fopen(path, "r");
    while (in && fgets(line, sizeof line, in))
      for (const char *const *k = keep; *k; k++)
        if (strncmp(line, *k, strlen(*k)) == 0) {
          printf("inspect %s %s", f == 0 ? "status" : "limits", line);
          break;
        }
    if (in) fclose(in);
  }
}

static int usage(const char *why)
{
  fprintf(stderr, "c-embed: %s\nusage: c-embed [--add A B] [--guest FILE] [--inspect] [--bare] [WORKER]\n",
          why);
  return 2;
}

/* The command line. */
struct options {
  const char *worker, *guest_file;
  int inspect, bare;
  uint64_t a, b;
};

/* Reads argv into o. Returns 0, or the exit status of a usage error. */
static int parse_options(int argc, char **argv, struct options *o)
{
  *o = (struct options){.worker = getenv("AIRLOCK_WORKER"), .a = 2, .b = 3};
  for (int i = 1; i < argc; i++) {
    char *end;
    if (strcmp(argv[i], "--add") == 0 && i + 2 < argc) {
      o->a = strtoull(argv[i + 1], &end, 10);
      if (*end || !*argv[i + 1] || *argv[i + 1] == '-') return usage("--add takes two whole numbers");
      o->b = strtoull(argv[i + 2], &end, 10);
      if (*end || !*argv[i + 2] || *argv[i + 2] == '-') return usage("--add takes two whole numbers");
      i += 2;
    } else if (strcmp(argv[i], "--guest") == 0 && i + 1 < argc)
      o->guest_file = argv[++i];
    else if (strcmp(argv[i], "--inspect") == 0)
      o->inspect = 1;
    else if (strcmp(argv[i], "--bare") == 0)
      o->bare = 1;
    else if (argv[i][0] == '-')
      return usage("unknown option");
    else
      o->worker = argv[i];
  }
  return 0;
}

/* The worker: given, else airlock-worker beside this program (self holds it). */
static const char *find_worker(const char *given, char self[4096])
{
  if (given) return given;
  ssize_t n = readlink("/proc/self/exe", self, 4096 - 32);
  if (n <= 0) return NULL;
  self[n] = 0;
  strcpy(strrchr(self, '/') + 1, "airlock-worker");
  return self;
}

/* The guest's source: the file's, else the adder. Its length, or -1 (said). */
static long read_guest(const char *file, char source[GUEST_MAX + 1])
{
  if (!file) {
    memcpy(source, ADDER, sizeof ADDER - 1);
    return (long)sizeof ADDER - 1;
  }
  FILE *f = fopen(file, "rb");
  if (!f) {
    perror(file);
    return -1;
  }
  size_t n = fread(source, 1, GUEST_MAX + 1, f);
  fclose(f);
  if (n > GUEST_MAX) {
    fprintf(stderr, "c-embed: %s is over %u bytes\n", file, GUEST_MAX);
    return -1;
  }
  return (long)n;
}

/* The init frame into sb and the run's options into o: the stock untrusted
** policy (the worker's limits and the layers it applies to itself, in init;
** the process's namespaces, rlimits, capabilities and no_new_privs, the
** deadline and the checks from outside, in o), then the guest, what it may
** call, its input ({a = A, b = B}, its `...`: any msgpack value) and a budget
** per turn: each answer ends a turn, and a turn may take at most 5M VM
** instructions and 250 ms of the worker's CPU. Returns 0, or -1 (said). */
static int prepare(const struct options *opt, const char *source, size_t source_len, msgpack_sbuffer *sb,
                   airlock_run_opts *o)
{
  static const char *const effects[] = {"add", NULL};
  msgpack_sbuffer input;
  msgpack_packer pk;
  msgpack_sbuffer_init(&input);
  msgpack_packer_init(&pk, &input, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 2);
  airlock_pack_cstr(&pk, "a");
  msgpack_pack_uint64(&pk, opt->a);
  airlock_pack_cstr(&pk, "b");
  msgpack_pack_uint64(&pk, opt->b);
  airlock_init in = {0};
  *o = (airlock_run_opts){0};
  if (!opt->bare) {
    airlock_untrusted_defaults(&in, o);
    in.turn_instructions = 5000000;
    in.turn_cpu_ms = 250;
  } else {
    fputs("c-embed: --bare: running WITHOUT the untrusted defaults (no namespaces, rlimits, Landlock, "
          "seccomp or limits)\n",
          stderr);
    o->expect_ready = 1;
  }
  in.guest_name = opt->guest_file ? opt->guest_file : "adder";
  in.source = source;
  in.source_len = source_len;
  in.effects = effects;
  in.input = input.data;
  in.input_len = input.size;
  char err[256];
  int rc = airlock_init_frame(sb, &in, o->max_frame, err, sizeof err);
  msgpack_sbuffer_destroy(&input); /* the frame holds a copy */
  if (rc < 0) {
    fprintf(stderr, "c-embed: %s\n", err);
    return -1;
  }
  o->init = sb->data;
  o->init_len = sb->size;
  return 0;
}

/* The only granted effect: add {a, b} -> a + b. */
static void answer_add(const airlock_event *ev, int do_inspect)
{
  if (do_inspect) inspect(airlock_run_pid(ev->run)); /* it waits for this answer */
  airlock_run_turn(ev->run, ev->id);                 /* the answer ends the guest's turn */
  const msgpack_object *x = airlock_msg_field(ev->args, "a"), *y = airlock_msg_field(ev->args, "b");
  if (!x || !y || x->type != MSGPACK_OBJECT_POSITIVE_INTEGER || y->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
    airlock_run_fail(ev->run, ev->id, "add: a and b must be whole numbers", 34, NULL);
    return;
  }
  printf("effect %.*s {a = %" PRIu64 ", b = %" PRIu64 "} -> %" PRIu64 "\n", (int)ev->effect_len, ev->effect,
         x->via.u64, y->via.u64, x->via.u64 + y->via.u64); /* ev->effect lives until the reply */
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_uint64(&pk, x->via.u64 + y->via.u64); /* the answer, any msgpack value */
  airlock_run_reply(ev->run, ev->id, sb.data, sb.size);
  msgpack_sbuffer_destroy(&sb);
}

/* The run's result, printed. -> the exit status: 0 when it ended ok. */
static int print_result(const airlock_result *r, int do_inspect)
{
  const msgpack_object *c = r->confined;
  for (uint32_t i = 0; do_inspect && c && c->type == MSGPACK_OBJECT_MAP && i < c->via.map.size; i++) {
    const msgpack_object_kv *kv = &c->via.map.ptr[i];
    if (kv->key.type == MSGPACK_OBJECT_STR && kv->val.type == MSGPACK_OBJECT_STR)
      printf("inspect ready %.*s %.*s\n", (int)kv->key.via.str.size, kv->key.via.str.ptr,
             (int)kv->val.via.str.size, kv->val.via.str.ptr);
  }
  printf("cause %s, value ", airlock_cause_name(r->cause));
  if (r->value)
    msgpack_object_print(stdout, *r->value);
  else
    fputs("none", stdout);
  printf("%s%s\nwall %.2f ms, %llu effect(s)\n", *r->message ? ", " : "", r->message, r->usage.wall_ms,
         (unsigned long long)r->usage.effects);
  return r->ok ? 0 : 1;
}

int main(int argc, char **argv)
{
  struct options opt;
  int code = parse_options(argc, argv, &opt);
  if (code) return code;
  char self[4096];
  const char *worker = find_worker(opt.worker, self);
  if (!worker) {
    fputs("c-embed: cannot find airlock-worker\n", stderr);
    return 2;
  }
  static char source[GUEST_MAX + 1];
  long source_len = read_guest(opt.guest_file, source);
  if (source_len < 0) return 2;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  airlock_run_opts o;
  if (prepare(&opt, source, (size_t)source_len, &sb, &o) < 0) {
    msgpack_sbuffer_destroy(&sb);
    return 2;
  }
  const char *args[] = {worker, NULL};
  o.spawn.argv = args;

  airlock_broker *br = NULL;
  airlock_run *run;
  if (airlock_broker_new(&br) < 0 || airlock_broker_start(br, &o, &run) < 0) {
    fprintf(stderr, "c-embed: %s\n", br ? airlock_broker_error(br) : "cannot create a broker");
    msgpack_sbuffer_destroy(&sb);
    airlock_broker_free(br);
    return 1;
  }
  msgpack_sbuffer_destroy(&sb); /* start queued its own copy */
  code = -1;
  while (code < 0 && airlock_broker_step(br, -1) >= 0) {
    airlock_event ev;
    while (airlock_broker_next(br, &ev)) {
      if (ev.kind == AIRLOCK_EV_CALL) {
        answer_add(&ev, opt.inspect);
      } else if (ev.kind == AIRLOCK_EV_DONE) {
        code = print_result(airlock_run_result(ev.run), opt.inspect);
        airlock_run_release(ev.run);
      }
    }
  }
  airlock_broker_free(br);
  return code < 0 ? 1 : code;
}
