/*
** ledger_bench.c -- airlock-ledger-bench: records per second appended to a
** ledger in each durability mode (call records with 100-byte args), SQLite's
** durable single-row inserts (WAL, synchronous=FULL, one row per transaction)
** measured in the same run and directory, and verify throughput in MB/s.
**   airlock-ledger-bench [--seconds S] [--verify-mb N] [--dir PARENT] [--json]
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <sqlite3.h>

#include "airlock.h"
#include "journal.h"
#include "ledger_zstd.h"
#include "ledger_proc.h"

#define ARG_BYTES                100
#define BATCH_MS                 AIRLOCK_LEDGER_BATCH_MS_DEFAULT
#define TARGET_BATCH_OVER_SQLITE 50.0
#define TARGET_VERIFY_MBPS       300.0
#define TARGET_PROC_OVER_BATCH   0.8   /* queued through the ledger process / in-process batch */
#define TARGET_ALWAYS_OVER_SYNC  1.2   /* always through the process: time per record / one fdatasync */
#define STALL_APPENDS            12000 /* 2 KB records: two seals of 8 MiB */

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *detail)
{
  fprintf(stderr, "airlock-ledger-bench: %s: %s\n", what, detail);
  exit(1);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
  (void)st;
  (void)flag;
  (void)f;
  return remove(path);
}

/* The fields of every record: {effect = "fs.read", args = {path = <ARG_BYTES>}}. */
struct fields {
  msgpack_sbuffer sb;
  msgpack_unpacked u;
  char args[ARG_BYTES];
};

static void fields_init(struct fields *f)
{
  for (int i = 0; i < ARG_BYTES; i++) f->args[i] = (char)('a' + i % 26);
  msgpack_sbuffer_init(&f->sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &f->sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 2);
  airlock_pack_cstr(&pk, "effect");
  airlock_pack_cstr(&pk, "fs.read");
  airlock_pack_cstr(&pk, "args");
  msgpack_pack_map(&pk, 1);
  airlock_pack_cstr(&pk, "path");
  airlock_pack_str(&pk, f->args, ARG_BYTES - 8); /* map 1 + key 5 + str8 2: args packs to 100 bytes */
  msgpack_unpacked_init(&f->u);
  msgpack_unpack_next(&f->u, f->sb.data, f->sb.size, NULL);
}

struct result {
  double per_s;
  uint64_t count, syncs;
};

/* Appends for `seconds` (the closing flush included in the time). */
static struct result run_mode(const char *dir, int mode, double seconds, const struct fields *f)
{
  airlock_ledger *l;
  char err[512];
  airlock_ledger_opts o = {.create = 1, .durability = mode, .batch_ms = BATCH_MS};
  if (airlock_ledger_open(dir, &o, &l, NULL, err, sizeof err) < 0) die("open", err);
  struct result r = {0, 0, 0};
  uint64_t durable = airlock_ledger_durable_seq(l);
  double t0 = now_s(), end = t0 + seconds;
  do {
    for (int i = 0; i < 16; i++) {
      if (airlock_ledger_append(l, "call", 1, &f->u.data, NULL) < 0) die("append", airlock_ledger_error(l));
      uint64_t d = airlock_ledger_durable_seq(l);
      r.syncs += d != durable;
      durable = d;
      r.count++;
    }
  } while (now_s() < end);
  if (airlock_ledger_close(l) < 0) die("close", "the final flush failed");
  r.syncs += durable != r.count + 1; /* the flush in close */
  r.per_s = (double)r.count / (now_s() - t0);
  return r;
}

/* The same through a ledger process (airlock-ledgerd): each append waited
** for (accepted before the next is sent: what a producer does before it
** performs an effect), or queued (sent in batches over the socket). */
static struct result run_proc(const char *program, const char *dir, int mode, int wait, double seconds,
                              const struct fields *f)
{
  airlock_ledger_proc *l;
  char err[512];
  airlock_ledger_proc_opts o = {.program = program, .create = 1, .durability = mode, .batch_ms = BATCH_MS};
  if (airlock_ledger_proc_open(dir, &o, &l, NULL, err, sizeof err) < 0) die("open (ledger process)", err);
  struct result r = {0, 0, 0};
  double t0 = now_s(), end = t0 + seconds;
  do {
    for (int i = 0; i < 16; i++) {
      if (airlock_ledger_proc_append(l, "call", 1, f->sb.data, f->sb.size, wait, NULL, NULL) < 0)
        die("append (ledger process)", airlock_ledger_proc_error(l));
      r.count++;
    }
  } while (now_s() < end);
  if (airlock_ledger_proc_close(l) < 0) die("close (ledger process)", "the final commit failed");
  r.per_s = (double)r.count / (now_s() - t0);
  return r;
}

/* The worst waits across seals: n appends of 2 KB records through a ledger
** process (batch, each waited for, as a run's calls are), the journal sealed
** every seal_bytes (8 MiB by default: n = 12000 crosses two seals). Each
** append's time is kept; p50, p99 and max of them. */
struct stall {
  uint64_t appends;
  unsigned seals;
  double p50_ms, p99_ms, max_ms;
};

static int cmp_double(const void *a, const void *b);

static struct stall run_seal_stall(const char *program, const char *dir, unsigned n, uint64_t seal_bytes)
{
  char pad[2000];
  memset(pad, 's', sizeof pad);
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 2);
  airlock_pack_cstr(&pk, "effect");
  airlock_pack_cstr(&pk, "fs.read");
  airlock_pack_cstr(&pk, "value");
  airlock_pack_str(&pk, pad, sizeof pad);
  airlock_ledger_proc *l;
  char err[512];
  airlock_ledger_proc_opts o = {.program = program,
                                .create = 1,
                                .durability = AIRLOCK_DURABLE_BATCH,
                                .batch_ms = BATCH_MS,
                                .seal_bytes = seal_bytes};
  if (airlock_ledger_proc_open(dir, &o, &l, NULL, err, sizeof err) < 0) die("open (ledger process)", err);
  double *t = malloc(n * sizeof *t);
  if (t == NULL) die("seal stall", "out of memory");
  for (unsigned i = 0; i < n; i++) {
    double t0 = now_s();
    if (airlock_ledger_proc_append(l, "reply", 1, sb.data, sb.size, 1, NULL, NULL) < 0)
      die("append (ledger process)", airlock_ledger_proc_error(l));
    t[i] = (now_s() - t0) * 1e3;
  }
  if (airlock_ledger_proc_close(l) < 0) die("close (ledger process)", "the final commit failed");
  msgpack_sbuffer_destroy(&sb);
  struct stall r = {.appends = n};
  for (unsigned s = 1;; s++) {
    char seg[700];
    snprintf(seg, sizeof seg, "%s/segment.%06u", dir, s);
    if (access(seg, F_OK) != 0) break;
    r.seals = s;
  }
  qsort(t, n, sizeof *t, cmp_double);
  r.p50_ms = t[n / 2];
  r.p99_ms = t[(size_t)((double)n * 0.99)];
  r.max_ms = t[n - 1];
  free(t);
  return r;
}

/* The floor of durability always: one write(2) of a record's size and one
** fdatasync, in a loop, in the same directory. */
static struct result run_fdatasync(const char *path, double seconds)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) die("open (fdatasync baseline)", strerror(errno));
  char rec[ARG_BYTES + 80];
  memset(rec, 'r', sizeof rec);
  struct result r = {0, 0, 0};
  double t0 = now_s(), end = t0 + seconds;
  do {
    if (write(fd, rec, sizeof rec) != (ssize_t)sizeof rec || fdatasync(fd) < 0)
      die("write+fdatasync (baseline)", strerror(errno));
    r.count++;
  } while (now_s() < end);
  close(fd);
  r.syncs = r.count;
  r.per_s = (double)r.count / (now_s() - t0);
  return r;
}

/* The floor of any ledger that runs in a process of its own: a raw child
** that reads a record over a socketpair, writes it, fdatasyncs it and answers
** with an ack of a ledger ack's size, while the producer waits, in a loop.
** Nothing is parsed or hashed: what this costs over run_fdatasync is the
** process boundary alone (a round trip, and each side's wake-up). */
#define BOUNDARY_ACK_BYTES 84
static int read_all(int fd, char *buf, size_t n)
{
  for (size_t got = 0; got < n;) {
    /* poll first, as both ends of the ledger's channel wait: a reader blocked
    ** in read(2) on a unix socket is also woken when its own last write is
    ** consumed, a wake-up for nothing */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
    ssize_t k = read(fd, buf + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    got += (size_t)k;
  }
  return 0;
}

static struct result run_boundary(const char *path, double seconds)
{
  char rec[ARG_BYTES + 80], ack[BOUNDARY_ACK_BYTES];
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    die("socketpair (boundary baseline)", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) die("fork (boundary baseline)", strerror(errno));
  if (pid == 0) {
    close(sv[0]);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) _exit(2);
    memset(ack, 'k', sizeof ack);
    while (read_all(sv[1], rec, sizeof rec) == 0)
      if (write(fd, rec, sizeof rec) != (ssize_t)sizeof rec || fdatasync(fd) < 0 ||
          write(sv[1], ack, sizeof ack) != (ssize_t)sizeof ack)
        _exit(3);
    _exit(0);
  }
  close(sv[1]);
  memset(rec, 'r', sizeof rec);
  struct result r = {0, 0, 0};
  double t0 = now_s(), end = t0 + seconds;
  do {
    if (write(sv[0], rec, sizeof rec) != (ssize_t)sizeof rec || read_all(sv[0], ack, sizeof ack) < 0)
      die("boundary baseline", "the child stopped answering");
    r.count++;
  } while (now_s() < end);
  r.per_s = (double)r.count / (now_s() - t0);
  close(sv[0]);
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    die("boundary baseline", "the child failed");
  r.syncs = r.count;
  return r;
}

static int by_rate(const void *a, const void *b)
{
  double x = ((const struct result *)a)->per_s, y = ((const struct result *)b)->per_s;
  return (x > y) - (x < y);
}

static struct result run_sqlite(const char *path, double seconds)
{
  sqlite3 *db;
  sqlite3_stmt *st;
  char *msg = NULL;
  if (sqlite3_open(path, &db) != SQLITE_OK) die("sqlite open", sqlite3_errmsg(db));
  const char *setup = "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                      "CREATE TABLE rec(seq INTEGER PRIMARY KEY, kind TEXT, run INTEGER,"
                      " t REAL, effect TEXT, args BLOB);";
  if (sqlite3_exec(db, setup, NULL, NULL, &msg) != SQLITE_OK) die("sqlite setup", msg);
  if (sqlite3_prepare_v2(db, "INSERT INTO rec(seq, kind, run, t, effect, args) VALUES(?,?,?,?,?,?)", -1, &st,
                         NULL) != SQLITE_OK)
    die("sqlite prepare", sqlite3_errmsg(db));
  char args[ARG_BYTES];
  memset(args, 'a', sizeof args);
  struct result r = {0, 0, 0};
  double t0 = now_s(), end = t0 + seconds;
  do {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    sqlite3_bind_int64(st, 1, (sqlite3_int64)r.count + 1);
    sqlite3_bind_text(st, 2, "call", 4, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, 1);
    sqlite3_bind_double(st, 4, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
    sqlite3_bind_text(st, 5, "fs.read", 7, SQLITE_STATIC);
    sqlite3_bind_blob(st, 6, args, sizeof args, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) /* autocommit: one transaction per row */
      die("sqlite insert", sqlite3_errmsg(db));
    sqlite3_reset(st);
    r.count++;
  } while (now_s() < end);
  r.per_s = (double)r.count / (now_s() - t0);
  r.syncs = r.count;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return r;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Writes a journal of about mb MiB of the same records, verifies it three
** times (warm page cache) and returns the median MB/s. */
static double run_verify(const char *dir, unsigned mb, const struct fields *f, airlock_ledger_report *rep)
{
  airlock_ledger *l;
  char err[512];
  if (airlock_ledger_open(dir, &(airlock_ledger_opts){.create = 1}, &l, NULL, err, sizeof err) < 0)
    die("open", err);
  uint64_t seq = 0;
  uint8_t h[AIRLOCK_LEDGER_HASH_LEN];
  for (;;) {
    for (int i = 0; i < 4096; i++)
      if (airlock_ledger_append(l, "call", 1, &f->u.data, NULL) < 0) die("append", airlock_ledger_error(l));
    if (airlock_ledger_size(l) >= (uint64_t)mb << 20) /* plain bytes: segments and journal */
      break;
  }
  airlock_ledger_head(l, &seq, h);
  if (airlock_ledger_close(l) < 0) die("close", "the final flush failed");
  double mbps[3];
  for (int i = 0; i < 3; i++) {
    double t0 = now_s();
    if (airlock_ledger_verify(dir, &seq, h, rep) != 0) die("verify", rep->reason);
    mbps[i] = (double)rep->bytes / 1e6 / (now_s() - t0);
  }
  qsort(mbps, 3, sizeof mbps[0], cmp_double);
  return mbps[1];
}

static void usage(void)
{
  fprintf(
      stderr,
      "usage: airlock-ledger-bench [--seconds S] [--verify-mb N] [--dir PARENT] [--json]\n"
      "       airlock-ledger-bench one none|batch|always|waited|queued|process-always|seal-stall [SECONDS]\n"
      "       airlock-ledger-bench seal DIR...\n");
  exit(2);
}

/* seal DIR...: seals each session's open journal into a segment (as the
** ledger process does, zstd) and prints each of its segments' plain and
** stored sizes. For measuring: run it on a copy. */
static int seal_sessions(int argc, char **argv)
{
  airlock_ledger_set_codec(ledger_zstd_codec());
  uint64_t all_plain = 0, all_stored = 0;
  for (int i = 2; i < argc; i++) {
    airlock_ledger *l;
    airlock_ledger_report rep;
    char err[1024];
    if (airlock_ledger_open(argv[i], NULL, &l, &rep, err, sizeof err) < 0) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    if (airlock_ledger_seal(l) < 0) {
      fprintf(stderr, "%s\n", airlock_ledger_error(l));
      return 1;
    }
    unsigned n = airlock_ledger_segments(l);
    airlock_ledger_close(l);
    for (unsigned s = 1; s <= n; s++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/segment.%06u", argv[i], s);
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      uint8_t h[16];
      struct stat st;
      if (fd < 0 || pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h || fstat(fd, &st) < 0) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
      }
      close(fd);
      uint64_t plain = 0;
      for (int k = 8; k < 16; k++) plain = plain << 8 | h[k];
      printf("%s/segment.%06u  %10" PRIu64 " plain  %10lld stored  %5.2fx\n", argv[i], s, plain,
             (long long)st.st_size, (double)plain / (double)st.st_size);
      all_plain += plain;
      all_stored += (uint64_t)st.st_size;
    }
  }
  if (all_stored > 0)
    printf("all  %" PRIu64 " plain  %" PRIu64 " stored  %.2fx\n", all_plain, all_stored,
           (double)all_plain / (double)all_stored);
  return 0;
}

static const char *program_beside(char *program, size_t len);

/* one WHAT [SECONDS]: one of the measurements alone (for perf record):
** none, batch, always (in-process), waited, queued, process-always. */
static int run_one(int argc, char **argv)
{
  if (argc < 3 || argc > 4) usage();
  double seconds = argc == 4 ? strtod(argv[3], NULL) : 2.0;
  if (!(seconds > 0 && seconds <= 600)) usage();
  char base[] = "/tmp/airlock-ledger-bench-XXXXXX", dir[600], program[PATH_MAX];
  if (mkdtemp(base) == NULL) die("mkdtemp", strerror(errno));
  snprintf(dir, sizeof dir, "%s/one", base);
  struct fields f;
  fields_init(&f);
  program_beside(program, sizeof program);
  const char *w = argv[2];
  struct result r;
  if (strcmp(w, "queued") == 0)
    r = run_proc(program, dir, AIRLOCK_DURABLE_BATCH, 0, seconds, &f);
  else if (strcmp(w, "waited") == 0)
    r = run_proc(program, dir, AIRLOCK_DURABLE_BATCH, 1, seconds, &f);
  else if (strcmp(w, "process-always") == 0)
    r = run_proc(program, dir, AIRLOCK_DURABLE_ALWAYS, 1, seconds, &f);
  else if (strcmp(w, "seal-stall") == 0) {
    for (int i = 0; i < 2; i++) {
      snprintf(dir, sizeof dir, "%s/%d", base, i);
      struct stall st = run_seal_stall(program, dir, STALL_APPENDS, i ? 1ull << 40 : 0);
      printf("%s %" PRIu64 " appends, %u seals: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
             i ? "no-seal" : "seal-stall", st.appends, st.seals, st.p50_ms, st.p99_ms, st.max_ms);
    }
    nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
  } else if (airlock_ledger_durability_from_name(w) >= 0)
    r = run_mode(dir, airlock_ledger_durability_from_name(w), seconds, &f);
  else
    usage();
  nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  printf("%s %.0f records/s (%" PRIu64 " records)\n", w, r.per_s, r.count);
  return 0;
}

/* airlock-ledgerd beside this program */
static const char *program_beside(char *program, size_t len)
{
  ssize_t pn = readlink("/proc/self/exe", program, len - 32);
  program[pn > 0 ? pn : 0] = '\0';
  char *slash = strrchr(program, '/');
  snprintf(slash ? slash + 1 : program, 32, "airlock-ledgerd");
  return program;
}

/* Everything one bench run measures. */
struct measures {
  double seconds;
  const char *parent;
  struct result res[3]; /* none, batch, always, in-process */
  struct result sq, pw, pq, pb, pa, fs, bd;
  struct stall ss, ns;
  airlock_ledger_report rep;
  double vmbps;
  double ratio, proc_batch, proc_sqlite;
  double always_sync;     /* time per record over one fdatasync's: the median round */
  double always_boundary; /* the same over the raw process boundary's */
  double boundary_sync;   /* the raw process boundary over one fdatasync */
};

static const int MODES[] = {AIRLOCK_DURABLE_NONE, AIRLOCK_DURABLE_BATCH, AIRLOCK_DURABLE_ALWAYS};

/* Queued through the process against in-process batch: three short runs of
** each, interleaved, and the median of each (a loaded machine's group
** commits vary a lot from one second to the next). */
static void measure_queued(struct measures *x, const char *program, const char *base, struct fields *f)
{
  char dir[600];
  struct result qs[3], bs[3];
  for (int i = 0; i < 3; i++) {
    snprintf(dir, sizeof dir, "%s/proc-queued-%d", base, i);
    qs[i] = run_proc(program, dir, AIRLOCK_DURABLE_BATCH, 0, x->seconds / 2, f);
    snprintf(dir, sizeof dir, "%s/batch-%d", base, i);
    bs[i] = run_mode(dir, AIRLOCK_DURABLE_BATCH, x->seconds / 2, f);
  }
  qsort(qs, 3, sizeof qs[0], by_rate);
  qsort(bs, 3, sizeof bs[0], by_rate);
  x->pq = qs[1];
  x->pb = bs[1];
}

/* Always through the process against its floor: three short runs of each,
** interleaved, after the earlier runs' dirty pages are written out (they
** would load the disk under whichever came first); the median of each, and
** of the three ratios. */
static void measure_always(struct measures *x, const char *program, const char *base, struct fields *f)
{
  char dir[600];
  sync();
  struct result as[3], fss[3], bds[3];
  double ar[3], br[3], bfr[3];
  for (int i = 0; i < 3; i++) {
    snprintf(dir, sizeof dir, "%s/proc-always-%d", base, i);
    as[i] = run_proc(program, dir, AIRLOCK_DURABLE_ALWAYS, 1, x->seconds / 2, f);
    snprintf(dir, sizeof dir, "%s/fdatasync-%d", base, i);
    fss[i] = run_fdatasync(dir, x->seconds / 2);
    snprintf(dir, sizeof dir, "%s/boundary-%d", base, i);
    bds[i] = run_boundary(dir, x->seconds / 2);
    ar[i] = fss[i].per_s / as[i].per_s;
    br[i] = bds[i].per_s / as[i].per_s;
    bfr[i] = fss[i].per_s / bds[i].per_s;
  }
  qsort(as, 3, sizeof as[0], by_rate);
  qsort(fss, 3, sizeof fss[0], by_rate);
  qsort(bds, 3, sizeof bds[0], by_rate);
  qsort(ar, 3, sizeof ar[0], cmp_double);
  qsort(br, 3, sizeof br[0], cmp_double);
  qsort(bfr, 3, sizeof bfr[0], cmp_double);
  x->pa = as[1];
  x->fs = fss[1];
  x->bd = bds[1];
  x->always_sync = ar[1];
  x->always_boundary = br[1];
  x->boundary_sync = bfr[1];
}

/* Every row, in a temporary directory under x->parent, removed after. */
static void measure(struct measures *x, unsigned verify_mb)
{
  char base[512], dir[600];
  snprintf(base, sizeof base, "%s/airlock-ledger-bench-XXXXXX", x->parent);
  if (mkdtemp(base) == NULL) die("mkdtemp", strerror(errno));
  struct fields f;
  fields_init(&f);
  for (int m = 0; m < 3; m++) {
    snprintf(dir, sizeof dir, "%s/%s", base, airlock_ledger_durability_name(MODES[m]));
    x->res[m] = run_mode(dir, MODES[m], x->seconds, &f);
  }
  char program[PATH_MAX];
  program_beside(program, sizeof program);
  snprintf(dir, sizeof dir, "%s/proc-wait", base);
  x->pw = run_proc(program, dir, AIRLOCK_DURABLE_BATCH, 1, x->seconds, &f);
  measure_queued(x, program, base, &f);
  measure_always(x, program, base, &f);
  /* the worst waits, across seals and without any (the same appends) */
  snprintf(dir, sizeof dir, "%s/seal-stall", base);
  x->ss = run_seal_stall(program, dir, STALL_APPENDS, 0);
  snprintf(dir, sizeof dir, "%s/no-seal", base);
  x->ns = run_seal_stall(program, dir, STALL_APPENDS, 1ull << 40);
  snprintf(dir, sizeof dir, "%s/sqlite.db", base);
  x->sq = run_sqlite(dir, x->seconds);
  snprintf(dir, sizeof dir, "%s/verify", base);
  x->vmbps = run_verify(dir, verify_mb, &f, &x->rep);
  nftw(base, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  x->ratio = x->res[1].per_s / x->sq.per_s;
  x->proc_batch = x->pq.per_s / x->pb.per_s;
  x->proc_sqlite = x->pq.per_s / x->sq.per_s;
}

static void print_json(const struct measures *x)
{
  printf("{\"seconds\":%g,\"args_bytes\":%d,\"batch_ms\":%d", x->seconds, ARG_BYTES, BATCH_MS);
  for (int m = 0; m < 3; m++)
    printf(",\"%s\":{\"records_per_s\":%.0f,\"records\":%" PRIu64 ",\"syncs\":%" PRIu64 "}",
           airlock_ledger_durability_name(MODES[m]), x->res[m].per_s, x->res[m].count, x->res[m].syncs);
  printf(",\"process_batch_waited\":{\"records_per_s\":%.0f,\"records\":%" PRIu64 "}", x->pw.per_s,
         x->pw.count);
  printf(",\"process_batch_queued\":{\"records_per_s\":%.0f,\"records\":%" PRIu64 "}", x->pq.per_s,
         x->pq.count);
  printf(",\"sqlite\":{\"inserts_per_s\":%.0f,\"inserts\":%" PRIu64 ",\"version\":\"%s\"}", x->sq.per_s,
         x->sq.count, sqlite3_libversion());
  printf(",\"verify\":{\"mb_per_s\":%.1f,\"bytes\":%" PRIu64 ",\"records\":%" PRIu64 "}", x->vmbps,
         x->rep.bytes, x->rep.records);
  printf(",\"process_always\":{\"records_per_s\":%.0f,\"records\":%" PRIu64 "}", x->pa.per_s, x->pa.count);
  printf(",\"fdatasync\":{\"per_s\":%.0f}", x->fs.per_s);
  printf(",\"boundary\":{\"per_s\":%.0f}", x->bd.per_s);
  printf(",\"batch_interleaved\":{\"records_per_s\":%.0f}", x->pb.per_s);
  for (int i = 0; i < 2; i++) {
    const struct stall *st = i ? &x->ns : &x->ss;
    printf(",\"%s\":{\"appends\":%" PRIu64 ",\"seals\":%u,\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
           "\"max_ms\":%.3f}",
           i ? "no_seal" : "seal_stall", st->appends, st->seals, st->p50_ms, st->p99_ms, st->max_ms);
  }
  printf(",\"ratios\":{\"batch_over_sqlite\":%.1f,\"always_over_sqlite\":%.2f,"
         "\"process_over_batch\":%.2f,\"process_over_sqlite\":%.1f,\"always_over_fdatasync\":%.2f,"
         "\"always_over_boundary\":%.2f,\"boundary_over_fdatasync\":%.2f}",
         x->ratio, x->res[2].per_s / x->sq.per_s, x->proc_batch, x->proc_sqlite, x->always_sync,
         x->always_boundary, x->boundary_sync);
  printf(",\"targets\":{\"batch_over_sqlite\":%.0f,\"verify_mb_per_s\":%.0f,\"process_over_batch\":%.1f,"
         "\"always_over_fdatasync\":%.1f}",
         TARGET_BATCH_OVER_SQLITE, TARGET_VERIFY_MBPS, TARGET_PROC_OVER_BATCH, TARGET_ALWAYS_OVER_SYNC);
  printf(",\"met\":{\"batch_over_sqlite\":%s,\"verify_mb_per_s\":%s,\"process_over_batch\":%s,"
         "\"process_over_sqlite\":%s,\"always_over_fdatasync\":%s}}\n",
         x->ratio >= TARGET_BATCH_OVER_SQLITE ? "true" : "false",
         x->vmbps > TARGET_VERIFY_MBPS ? "true" : "false",
         x->proc_batch >= TARGET_PROC_OVER_BATCH ? "true" : "false",
         x->proc_sqlite >= TARGET_BATCH_OVER_SQLITE ? "true" : "false",
         x->always_sync <= TARGET_ALWAYS_OVER_SYNC ? "true" : "false");
}

static void print_text(const struct measures *x)
{
  printf("ledger appends: call records with %d-byte args, %.1f s per mode, in %s\n", ARG_BYTES, x->seconds,
         x->parent);
  printf("%-26s %12s %9s  %s\n", "mode", "records/s", "syncs", "");
  static const char *const notes[] = {"write(2) only", "group commit", "fdatasync per record"};
  for (int m = 0; m < 3; m++) {
    char name[32];
    if (MODES[m] == AIRLOCK_DURABLE_BATCH)
      snprintf(name, sizeof name, "batch (%d ms)", BATCH_MS);
    else
      snprintf(name, sizeof name, "%s", airlock_ledger_durability_name(MODES[m]));
    printf("%-26s %12.0f %9" PRIu64 "  %s\n", name, x->res[m].per_s, x->res[m].syncs, notes[m]);
  }
  printf("%-26s %12.0f %9s  ledger process: each append accepted before the next\n", "batch, process, waited",
         x->pw.per_s, "");
  printf("%-26s %12.0f %9s  ledger process: appends queued, sent in batches (median of 3)\n",
         "batch, process, queued", x->pq.per_s, "");
  printf("%-26s %12.0f %9s  in-process, interleaved with the runs above (median of 3)\n", "batch, in-process",
         x->pb.per_s, "");
  printf("%-26s %12.0f %9s  ledger process: each append committed before the next (median of 3)\n",
         "always, process", x->pa.per_s, "");
  printf("%-26s %12.0f %9s  write(2) + fdatasync of a record's size, in a loop (interleaved, median of 3)\n",
         "fdatasync alone", x->fs.per_s, "");
  printf(
      "%-26s %12.0f %9s  a raw child writes, fdatasyncs and answers each record (interleaved, median of 3)\n",
      "fdatasync, other process", x->bd.per_s, "");
  printf("%-26s %9.2f ms %9.2f ms  waited 2 KB appends across %u seals: p99, max (p50 %.3f ms)\n",
         "seal stall", x->ss.p99_ms, x->ss.max_ms, x->ss.seals, x->ss.p50_ms);
  printf("%-26s %9.2f ms %9.2f ms  the same appends, never sealed: p99, max (p50 %.3f ms)\n", "no seal",
         x->ns.p99_ms, x->ns.max_ms, x->ns.p50_ms);
  printf("%-26s %12.0f %9" PRIu64 "  one row per transaction (SQLite %s)\n", "sqlite WAL sync=FULL",
         x->sq.per_s, x->sq.syncs, sqlite3_libversion());
  printf("%-26s %9.0f MB/s            %.0f MiB, %" PRIu64 " records (median of 3, warm cache)\n", "verify",
         x->vmbps, (double)x->rep.bytes / (1 << 20), x->rep.records);
  printf("\nbatch / sqlite   %7.0fx   target >= %.0fx   %s\n", x->ratio, TARGET_BATCH_OVER_SQLITE,
         x->ratio >= TARGET_BATCH_OVER_SQLITE ? "met" : "MISSED");
  printf("verify           %7.0f MB/s target > %.0f    %s\n", x->vmbps, TARGET_VERIFY_MBPS,
         x->vmbps > TARGET_VERIFY_MBPS ? "met" : "MISSED");
  printf(
      "process / batch  %7.2fx   target >= %.1fx   %s   (queued through the ledger process / in-process)\n",
      x->proc_batch, TARGET_PROC_OVER_BATCH, x->proc_batch >= TARGET_PROC_OVER_BATCH ? "met" : "MISSED");
  printf("process / sqlite %7.0fx   target >= %.0fx   %s\n", x->proc_sqlite, TARGET_BATCH_OVER_SQLITE,
         x->proc_sqlite >= TARGET_BATCH_OVER_SQLITE ? "met" : "MISSED");
  printf("always / fsync   %7.2fx   target <= %.1fx   %s   (time per record, through the process)\n",
         x->always_sync, TARGET_ALWAYS_OVER_SYNC,
         x->always_sync <= TARGET_ALWAYS_OVER_SYNC ? "met" : "MISSED");
  printf("  of which the process boundary: a raw child's fdatasync / fdatasync alone %.2fx, "
         "always / the raw child's %.2fx\n",
         x->boundary_sync, x->always_boundary);
}

int main(int argc, char **argv)
{
  if (argc >= 2 && strcmp(argv[1], "seal") == 0) return seal_sessions(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "one") == 0) return run_one(argc, argv);
  struct measures x = {.seconds = 2.0, .parent = "/tmp"};
  unsigned verify_mb = 256;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      x.seconds = strtod(argv[++i], NULL);
      if (!(x.seconds > 0 && x.seconds <= 600)) usage();
    } else if (strcmp(argv[i], "--verify-mb") == 0 && i + 1 < argc) {
      verify_mb = (unsigned)strtoul(argv[++i], NULL, 10);
      if (verify_mb == 0 || verify_mb > 65536) usage();
    } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      x.parent = argv[++i];
    } else {
      usage();
    }
  }
  measure(&x, verify_mb);
  if (json)
    print_json(&x);
  else
    print_text(&x);
  return 0;
}
