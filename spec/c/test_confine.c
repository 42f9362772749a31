/*
** test_confine.c -- tests for core/confine*.c: each test forks a child that applies
** layers and then attempts real attacks; the parent checks how the child ended.
** Run as root on x86_64 for full coverage (uid switches, int $0x80 attacks).
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "airlock.h"
#include "confine.h"
#include "check.h"
#include "child.h"
#include "arch_guard.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* Where the confined run must fail with errno e, the control run must succeed. */
#define CCHECK_GATED(confined, succeeded, e) \
  do {                                       \
    if (confined)                            \
      CCHECK(!(succeeded) && errno == (e));  \
    else                                     \
      CCHECK(succeeded);                     \
  } while (0)

/* ------------------------------------------------------------------ landlock */

struct ll_targets {
  int apply; /* 0: control run, the same attempts must succeed */
  int abi;
  uint16_t tcp_port;
  struct sockaddr_un un;
  socklen_t un_len;
};

static void child_landlock(void *arg)
{
  struct ll_targets *t = arg;
  if (t->apply) {
    airlock_layer l;
    int rc = airlock_confine_landlock_deny_all(&l);
    CCHECK(rc == 0);
    CCHECK(l.status == AIRLOCK_LAYER_APPLIED);
    CCHECK(strncmp(l.detail, "ABI ", 4) == 0);
    CCHECK(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1);
  }

  errno = 0;
  int fd = open("/etc/passwd", O_RDONLY);
  CCHECK_GATED(t->apply, fd >= 0, EACCES);
  if (fd >= 0) close(fd);

  char path[64];
  snprintf(path, sizeof path, "/tmp/airlock_confine_%d", (int)getpid());
  errno = 0;
  fd = creat(path, 0600);
  CCHECK_GATED(t->apply, fd >= 0, EACCES);
  if (fd >= 0) {
    close(fd);
    unlink(path);
  }

  /* A directory listing needs READ_DIR. */
  errno = 0;
  fd = open("/", O_RDONLY | O_DIRECTORY);
  CCHECK_GATED(t->apply, fd >= 0, EACCES);
  if (fd >= 0) close(fd);

  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CCHECK(s >= 0); /* Landlock restricts connect/bind, not socket creation */
  struct sockaddr_in in = {
      .sin_family = AF_INET, .sin_port = htons(t->tcp_port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  errno = 0;
  int rc = connect(s, (struct sockaddr *)&in, sizeof in);
  CCHECK_GATED(t->apply && t->abi >= 4, rc == 0, EACCES);
  close(s);

  /* bind to a TCP port is handled too. */
  s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in any = {
      .sin_family = AF_INET, .sin_port = htons(0), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  errno = 0;
  rc = bind(s, (struct sockaddr *)&any, sizeof any);
  CCHECK_GATED(t->apply && t->abi >= 4, rc == 0, EACCES);
  close(s);

  errno = 0;
  rc = kill(getppid(), 0);
  CCHECK_GATED(t->apply && t->abi >= 6, rc == 0, EPERM);
  CCHECK(kill(getpid(), 0) == 0); /* inside the domain: allowed */

  s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  errno = 0;
  rc = connect(s, (struct sockaddr *)&t->un, t->un_len);
  CCHECK_GATED(t->apply && t->abi >= 6, rc == 0, EPERM);
  close(s);

  /* The domain is inherited: a grandchild is just as confined. */
  pid_t g = fork();
  if (g == 0) {
    int f = open("/etc/passwd", O_RDONLY);
    _exit(t->apply ? (f < 0 ? 0 : 1) : (f >= 0 ? 0 : 1));
  }
  int st = 1;
  waitpid(g, &st, 0);
  CCHECK(exited_ok(st));
}

static void test_landlock(void)
{
  int abi = airlock_landlock_abi();
  if (abi < 1) {
    SKIP("this kernel has no Landlock (landlock_create_ruleset answers an error): "
         "the Landlock layer cannot be tried");
    return;
  }
  /* Rights a kernel's ABI lacks are checked as not enforced (the child's gated
  ** checks), and the case that needed them is counted as skipped. */
  if (abi < 4) SKIP("Landlock ABI < 4 on this kernel: TCP connect and bind rules cannot be tried");
  if (abi < 6) SKIP("Landlock ABI < 6 on this kernel: signal and abstract-socket scopes cannot be tried");

  struct ll_targets t = {.abi = abi};
  int lt = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t il = sizeof in;
  CHECK(bind(lt, (struct sockaddr *)&in, sizeof in) == 0);
  CHECK(listen(lt, 8) == 0);
  CHECK(getsockname(lt, (struct sockaddr *)&in, &il) == 0);
  t.tcp_port = ntohs(in.sin_port);

  int lu = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  t.un.sun_family = AF_UNIX;
  int n = snprintf(t.un.sun_path + 1, sizeof t.un.sun_path - 1, "airlock-test-%d", (int)getpid());
  t.un_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
  CHECK(bind(lu, (struct sockaddr *)&t.un, t.un_len) == 0);
  CHECK(listen(lu, 8) == 0);

  t.apply = 0;
  int st = run_child(child_landlock, &t);
  CHECK(exited_ok(st));
  t.apply = 1;
  st = run_child(child_landlock, &t);
  CHECK(exited_ok(st));
  if (!exited_ok(st)) describe("landlock child", st);
  close(lt);
  close(lu);
}

/* ------------------------------------------------------------------ seccomp */

/* 0: the filter is built in the confined process itself; 1: it is compiled as
** a BPF program first (as the parent does for pid 1 of a pid namespace) and
** that program is loaded. Both must stop the same attacks. */
static int use_program;

static int confine_worker(airlock_layer *l)
{
  if (!use_program) return airlock_confine_seccomp_worker(l);
  void *prog;
  size_t len;
  char err[256];
  if (airlock_seccomp_worker_program((long)getpid(), &prog, &len, err, sizeof err) != 0) return -1;
  int rc = airlock_confine_seccomp_program(prog, len, l);
  free(prog);
  return rc;
}

static void must_confine(void)
{
  if (confine_worker(NULL) != 0) _exit(99);
}

static void atk_socket(void)
{
  socket(AF_INET, SOCK_STREAM, 0);
}
static void atk_socketpair(void)
{
  int sv[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
}
static void atk_fork(void)
{
  fork();
}
static void atk_vfork(void)
{
  syscall(SYS_vfork);
}
static void atk_clone(void)
{
  syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
}
static void atk_clone3(void)
{
  uint64_t args[11] = {0}; /* struct clone_args, 88 bytes */
  args[4] = SIGCHLD;       /* exit_signal */
  syscall(SYS_clone3, args, sizeof args);
}
static void atk_execve(void)
{
  char *argv[] = {"/bin/true", NULL};
  execve("/bin/true", argv, NULL);
}
static void atk_open(void)
{
  syscall(SYS_open, "/etc/passwd", O_RDONLY);
}
static void atk_openat(void)
{
  syscall(SYS_openat, AT_FDCWD, "/etc/passwd", O_RDONLY);
}
static void atk_ptrace(void)
{
  ptrace(PTRACE_TRACEME, 0, NULL, NULL);
}
static void atk_mmap_exec(void)
{
  mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}
static void atk_mmap_exec_only(void)
{
  mmap(NULL, 4096, PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}
static void atk_mmap_file(void)
{
  mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, 0, 0);
}
static void atk_mprotect_exec(void)
{
  void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) _exit(97);
  mprotect(p, 4096, PROT_READ | PROT_EXEC);
}
static void atk_x32_getpid(void)
{
  syscall(0x40000000 | 39);
}
static void atk_x32_write(void)
{
  syscall(0x40000000 | 1, 2, "x32!\n", 5);
}
#if defined(__x86_64__)
static void atk_int80_getpid(void)
{
  long ret;
  __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
  (void)ret;
}
static void atk_int80_write(void)
{
  /* i386 write is number 4 (x86_64's 4 is stat). */
  static const char msg[] = "int80!\n";
  long ret;
  __asm__ volatile("int $0x80"
                   : "=a"(ret)
                   : "a"(4L), "b"(2L), "c"(msg), "d"(7L)
                   : "memory", "r8", "r9", "r10", "r11");
  (void)ret;
}
#endif
/* getppid is not allowed either: the parent's pid is taken before confining. */
static pid_t parent_pid;
static void atk_kill_parent(void)
{
  kill(parent_pid, SIGKILL);
}
static void atk_tgkill_parent(void)
{
  syscall(SYS_tgkill, parent_pid, parent_pid, SIGABRT);
}
static void atk_getppid(void)
{
  getppid();
}
static void atk_tgkill_self_other_sig(void)
{
  syscall(SYS_tgkill, getpid(), gettid(), SIGUSR1);
}
static void atk_prctl(void)
{
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}
static void atk_personality(void)
{
  personality(READ_IMPLIES_EXEC);
}
static void atk_close(void)
{
  close(0);
}
static void atk_dup(void)
{
  dup(2);
}
static void atk_io_uring(void)
{
  syscall(SYS_io_uring_setup, 8, calloc(1, 120));
}
static void atk_seccomp_again(void)
{
  syscall(SYS_seccomp, 1 /* SET_MODE_FILTER */, 0, NULL);
}
static void atk_madvise(void)
{
  madvise(NULL, 0, MADV_DONTNEED);
}
static void atk_futex(void)
{
  int w = 0;
  syscall(SYS_futex, &w, 1 /* WAKE */, 1, NULL, NULL, 0);
}
static void atk_setuid(void)
{
  syscall(SYS_setuid, 0);
}
static void atk_unshare(void)
{
  unshare(CLONE_NEWUSER);
}
static void atk_kill_self_sigkill(void)
{
  kill(getpid(), SIGKILL);
}

struct attack {
  const char *name;
  void (*fn)(void);
};

/* An i386 call through int $0x80: tried only where the machine runs them. */
static int is_ia32(const struct attack *a)
{
#if defined(__x86_64__)
  return a->fn == atk_int80_getpid || a->fn == atk_int80_write;
#else
  (void)a;
  return 0;
#endif
}

static void child_attack(void *arg)
{
  const struct attack *a = arg;
  must_confine();
  a->fn();
  _exit(0); /* survived: the parent sees exit 0 instead of SIGSYS */
}

static void test_seccomp_attacks(void)
{
  static const struct attack attacks[] = {
    {"socket(AF_INET)", atk_socket},
    {"socketpair", atk_socketpair},
    {"fork", atk_fork},
    {"vfork", atk_vfork},
    {"clone", atk_clone},
    {"clone3", atk_clone3},
    {"execve", atk_execve},
    {"open", atk_open},
    {"openat", atk_openat},
    {"ptrace", atk_ptrace},
    {"mmap rwx", atk_mmap_exec},
    {"mmap exec", atk_mmap_exec_only},
    {"mmap of a file", atk_mmap_file},
    {"mprotect exec", atk_mprotect_exec},
    {"x32 getpid", atk_x32_getpid},
    {"x32 write", atk_x32_write},
#if defined(__x86_64__)
    {"int 0x80 getpid", atk_int80_getpid},
    {"int 0x80 write", atk_int80_write},
#endif
    {"kill(parent)", atk_kill_parent},
    {"tgkill(parent, SIGABRT)", atk_tgkill_parent},
    {"getppid", atk_getppid},
    {"tgkill(self, SIGUSR1)", atk_tgkill_self_other_sig},
    {"prctl", atk_prctl},
    {"personality", atk_personality},
    {"close", atk_close},
    {"dup", atk_dup},
    {"io_uring_setup", atk_io_uring},
    {"seccomp", atk_seccomp_again},
    {"madvise", atk_madvise},
    {"futex", atk_futex},
    {"setuid", atk_setuid},
    {"unshare", atk_unshare},
    {"kill(self, SIGKILL)", atk_kill_self_sigkill},
  };
#if defined(__x86_64__)
  int ia32 = ia32_syscalls_work();
#else
  int ia32 = 0;
#endif
  for (use_program = 0; use_program < 2; use_program++) {
    for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++) {
      if (is_ia32(&attacks[i]) && !ia32) {
        SKIP("i386 calls (int $0x80) fault even unconfined on this kernel (IA32 emulation off), "
             "so the attack cannot be tried; the filter's architecture guard is checked instead");
        continue;
      }
      int st = run_child(child_attack, (void *)&attacks[i]);
      int ok = killed_by(st, SIGSYS);
      CHECK(ok);
      if (!ok) describe(attacks[i].name, st);
    }
  }
  use_program = 0;

  /* Whether or not the machine runs i386 calls, the compiled program must kill
  ** every call of a foreign architecture before looking at its number. */
  void *prog;
  size_t len;
  char err[256];
  CHECK(airlock_seccomp_worker_program(1, &prog, &len, err, sizeof err) == 0);
  CHECK_MSG(bpf_kills_foreign_arch(prog, len / sizeof(struct sock_filter)),
            "the worker's filter starts with an architecture guard that kills");
  free(prog);
}

/* A blocked call is named on stderr before the SIGSYS death. */
static void child_named(void *arg)
{
  dup2(*(int *)arg, 2);
  must_confine();
  syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
  _exit(0);
}

/* A program compiled for another pid: tgkill(self, SIGABRT) is then refused. */
static void child_wrong_pid(void *arg)
{
  (void)arg;
  void *prog;
  size_t len;
  char err[256];
  if (airlock_seccomp_worker_program((long)getpid() + 1, &prog, &len, err, sizeof err) != 0 ||
      airlock_confine_seccomp_program(prog, len, NULL) != 0)
    _exit(99);
  syscall(SYS_tgkill, getpid(), gettid(), SIGABRT);
  _exit(0);
}

static void test_seccomp_program(void)
{
  airlock_layer l;
  char one[8] = {0};
  CHECK(airlock_confine_seccomp_program(one, 7, &l) == -EINVAL);
  CHECK(l.status == AIRLOCK_LAYER_FAILED);
  CHECK(airlock_confine_seccomp_program(NULL, 0, &l) == -EINVAL);
  void *prog;
  size_t len;
  char err[256];
  CHECK(airlock_seccomp_worker_program(1, &prog, &len, err, sizeof err) == 0);
  CHECK(len > 0 && len % 8 == 0);
  free(prog);

  for (use_program = 0; use_program < 2; use_program++) {
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    int st = run_child(child_named, &p[1]);
    close(p[1]);
    char buf[256] = {0};
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    CHECK(killed_by(st, SIGSYS));
    char want[64];
    snprintf(want, sizeof want, AIRLOCK_SECCOMP_REPORT "%d\n", (int)SYS_socket);
    CHECK(n > 0 && strcmp(buf, want) == 0);
    char name[32];
    CHECK(strcmp(airlock_syscall_name(SYS_socket, name, sizeof name), "socket") == 0);
  }
  use_program = 0;
  CHECK(killed_by(run_child(child_wrong_pid, NULL), SIGSYS));
}

/* What the worker does after confining: allocate, grow, free, talk on fd 3,
** write stderr, read clocks, exit. Everything must keep working. */
struct positive {
  int sv[2];    /* socketpair standing in for the channel */
  int err_w;    /* stderr is redirected here */
  int how_exit; /* 0 _exit, 1 exit (atexit + stdio), 2 return from main-like path */
};

static void child_positive(void *arg)
{
  struct positive *p = arg;
  dup2(p->err_w, 2);
  airlock_layer l;
  int rc = confine_worker(&l);
  CCHECK(rc == 0);
  CCHECK(l.status == AIRLOCK_LAYER_APPLIED);
  CCHECK(strncmp(l.detail, "allowlist of 16 syscalls", 24) == 0);
  CCHECK(strcmp(l.name, "seccomp") == 0);

  char *big = malloc(10u << 20);
  CCHECK(big != NULL);
  memset(big, 0x5a, 10u << 20);
  CCHECK(big[(10u << 20) - 1] == 0x5a);
  free(big);

  /* realloc growth through the mmap threshold (mremap), many small blocks (brk). */
  size_t cap = 1024;
  char *buf = malloc(cap);
  for (int i = 0; i < 16; i++) {
    cap *= 2;
    char *nb = realloc(buf, cap);
    CCHECK(nb != NULL);
    if (nb == NULL) break;
    buf = nb;
    memset(buf, i, cap);
  }
  free(buf);
  void *blocks[4096];
  for (int i = 0; i < 4096; i++) blocks[i] = malloc(64 + (size_t)i % 500);
  for (int i = 0; i < 4096; i++) free(blocks[i]);

  static const char line[] = "positive: stderr works\n";
  CCHECK(write(2, line, sizeof line - 1) == (ssize_t)(sizeof line - 1));
  CCHECK(fprintf(stderr, "positive: fprintf %d\n", 42) > 0);

  CCHECK(write(p->sv[0], "ping", 4) == 4);
  char in[8];
  CCHECK(read(p->sv[1], in, sizeof in) == 4 && memcmp(in, "ping", 4) == 0);

  struct timespec ts;
  CCHECK(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0);
  CCHECK(clock_gettime(CLOCK_MONOTONIC, &ts) == 0);
  CCHECK(clock_gettime(CLOCK_REALTIME, &ts) == 0);
  CCHECK(clock() != (clock_t)-1);
  CCHECK(time(NULL) > 0);

  if (p->how_exit == 1) exit(0);
  _exit(0);
}

static void child_abort(void *arg)
{
  int err_w = *(int *)arg;
  dup2(err_w, 2);
  must_confine();
  abort();
}

static void child_double_free(void *arg)
{
  int err_w = *(int *)arg;
  dup2(err_w, 2);
  must_confine();
  char *volatile p = malloc(64);
  free(p);
  free(p);
}

/* READ_IMPLIES_EXEC inherited from the parent must not make heap executable. */
static void child_read_implies_exec(void *arg)
{
  (void)arg;
  CCHECK(personality(READ_IMPLIES_EXEC) != -1);
  must_confine();
  unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CCHECK(p != MAP_FAILED);
#if defined(__x86_64__)
  p[0] = 0xc3; /* ret */
  void (*fn)(void) = (void (*)(void))(void *)p;
  fn(); /* must fault: the page is not executable */
  _exit(0);
#else
  _exit(139);
#endif
}

static void test_seccomp_positive(void)
{
  if (UNDER_ASAN) {
    /* ASan's allocator madvise()s every new shadow/allocator region, and its
    ** reports and LeakSanitizer need many more syscalls: a confined child
    ** cannot run under ASan. The attacks above still run. */
    SKIP("the seccomp positive tests cannot run under ASan (its runtime needs madvise and more); "
         "the release build runs them");
    return;
  }
  for (int how = 0; how < 2; how++) {
    struct positive p;
    int ep[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.sv) == 0);
    CHECK(pipe2(ep, O_CLOEXEC) == 0);
    p.err_w = ep[1];
    p.how_exit = how;
    int st = run_child(child_positive, &p);
    CHECK(exited_ok(st));
    if (!exited_ok(st)) describe("positive workload", st);
    close(ep[1]);
    char out[512] = "";
    ssize_t n = read(ep[0], out, sizeof out - 1);
    if (n > 0) out[n] = '\0';
    CHECK(strstr(out, "positive: stderr works\n") != NULL);
    CHECK(strstr(out, "positive: fprintf 42\n") != NULL);
    close(ep[0]);
    close(p.sv[0]);
    close(p.sv[1]);
  }

  /* glibc's abort path is allowed, so a crash is a crash, not "seccomp". */
  int ep[2];
  CHECK(pipe2(ep, O_CLOEXEC) == 0);
  int st = run_child(child_abort, &ep[1]);
  CHECK(killed_by(st, SIGABRT));
  if (!killed_by(st, SIGABRT)) describe("abort", st);
  if (!UNDER_ASAN) { /* ASan reports a double free its own way */
    st = run_child(child_double_free, &ep[1]);
    CHECK(killed_by(st, SIGABRT));
    if (!killed_by(st, SIGABRT)) describe("double free", st);
    close(ep[1]);
    char out[512] = "";
    ssize_t n = read(ep[0], out, sizeof out - 1);
    if (n > 0) out[n] = '\0';
    CHECK(strstr(out, "double free") != NULL); /* the writev message got out */
  } else {
    SKIP("glibc's double-free abort cannot be tried under ASan (it reports double frees itself); "
         "the release build tries it");
    close(ep[1]);
  }
  close(ep[0]);

  st = run_child(child_read_implies_exec, NULL);
  CHECK(killed_by(st, SIGSEGV));
  if (!killed_by(st, SIGSEGV)) describe("READ_IMPLIES_EXEC heap", st);
}

/* The worker's order: Landlock first (its syscalls are not on the allowlist),
** then seccomp; both reports say applied. */
static void child_both(void *arg)
{
  (void)arg;
  airlock_layer a, b, c;
  CCHECK(airlock_confine_no_new_privs(&a) == 0);
  CCHECK(a.status == AIRLOCK_LAYER_APPLIED && strcmp(a.name, "no_new_privs") == 0);
  CCHECK(airlock_confine_landlock_deny_all(&b) == 0);
  CCHECK(airlock_confine_seccomp_worker(&c) == 0);
  CCHECK(b.status == AIRLOCK_LAYER_APPLIED && c.status == AIRLOCK_LAYER_APPLIED);
  fprintf(stderr, "  %s: %s\n  %s: %s\n  %s: %s\n", a.name, a.detail, b.name, b.detail, c.name, c.detail);
  char *m = malloc(1 << 20);
  CCHECK(m != NULL);
  free(m);
  syscall(SYS_openat, AT_FDCWD, "/etc/passwd", O_RDONLY);
  _exit(0);
}

static void child_nnp(void *arg)
{
  (void)arg;
  airlock_layer l;
  CCHECK(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 0);
  CCHECK(airlock_confine_no_new_privs(&l) == 0);
  CCHECK(strcmp(l.detail, "set") == 0);
  CCHECK(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1);
  CCHECK(airlock_confine_no_new_privs(&l) == 0);
  CCHECK(strcmp(l.detail, "already set") == 0);
  CCHECK(airlock_confine_no_new_privs(NULL) == 0);
}

static void test_layers(void)
{
  int st = run_child(child_both, NULL);
  CHECK(killed_by(st, SIGSYS));
  if (!killed_by(st, SIGSYS)) describe("landlock + seccomp", st);
  st = run_child(child_nnp, NULL);
  CHECK(exited_ok(st));

  CHECK(strcmp(airlock_layer_status_name(AIRLOCK_LAYER_APPLIED), "applied") == 0);
  CHECK(strcmp(airlock_layer_status_name(AIRLOCK_LAYER_SKIPPED), "skipped") == 0);
  CHECK(strcmp(airlock_layer_status_name(AIRLOCK_LAYER_FAILED), "failed") == 0);
  CHECK(strcmp(airlock_layer_status_name(0), "unknown") == 0);
}

/* The layer table (confine_layers.c): found by name, a bit per row, and a
** spawn that asks for a bit past it is refused before anything is made;
** the control, the same spawn asking for none, starts. */
static void test_layer_table(void)
{
  const airlock_confine_layer *mdwe = airlock_confine_layer_named("mdwe");
  CHECK(mdwe != NULL && mdwe->apply != NULL && (mdwe->flags & AIRLOCK_CL_OWN_MM));
  CHECK(airlock_confine_layer_named("no_such_layer") == NULL && airlock_confine_layer_named(NULL) == NULL);
  CHECK(airlock_confine_layer_bit("mdwe") == 1u << (unsigned)(mdwe - airlock_confine_layers));
  CHECK(airlock_confine_layer_bit("no_such_layer") == 0);

  static const char *const true_argv[] = {"/bin/true", NULL};
  airlock_spawn_opts o;
  airlock_child c;
  char err[512];
  memset(&o, 0, sizeof o);
  o.argv = true_argv;
  o.stdin_fd = -1;
  o.layers = 1u << AIRLOCK_CL_MAX;
  int rc = airlock_spawn(&o, &c, err, sizeof err);
  CHECK_MSG(rc == -EINVAL && c.step == AIRLOCK_STEP_OPTIONS && strstr(err, "past the table"), err);
  o.layers = 0;
  rc = airlock_spawn(&o, &c, err, sizeof err);
  CHECK_MSG(rc == 0, err);
  if (rc == 0) {
    int st = -1;
    waitpid(c.pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    airlock_child_close(&c);
  }
}

/* ------------------------------------------------------------------ rlimits */

static void child_nproc(void *arg)
{
  int as_nobody = *(int *)arg;
  airlock_rlimits rl = {.nproc = 1, .set_mask = AIRLOCK_RL_NPROC};
  CCHECK(airlock_apply_rlimits(&rl) == 0);
  if (as_nobody) CCHECK(setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0);
  errno = 0;
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (as_nobody) {
    CCHECK(pid < 0 && errno == EAGAIN);
  } else {
    /* Kernel quirk: the initial user's root is exempt from RLIMIT_NPROC. */
    CCHECK(pid > 0);
  }
  if (pid > 0) waitpid(pid, NULL, 0);
}

static void child_fsize(void *arg)
{
  int ignore = *(int *)arg;
  int fd = open("/tmp", O_TMPFILE | O_RDWR, 0600);
  CCHECK(fd >= 0);
  airlock_rlimits rl = {.fsize = 1000, .set_mask = AIRLOCK_RL_FSIZE};
  CCHECK(airlock_apply_rlimits(&rl) == 0);
  if (ignore) signal(SIGXFSZ, SIG_IGN);
  static char buf[4096];
  ssize_t n = write(fd, buf, sizeof buf);
  CCHECK(n == 1000); /* short write up to the limit */
  errno = 0;
  n = write(fd, buf, sizeof buf); /* SIGXFSZ, or EFBIG when ignored */
  CCHECK(n < 0 && errno == EFBIG);
}

static void child_nofile(void *arg)
{
  (void)arg;
  airlock_rlimits rl = {.nofile = 8, .set_mask = AIRLOCK_RL_NOFILE};
  CCHECK(airlock_apply_rlimits(&rl) == 0);
  int last = -1;
  errno = 0;
  for (int i = 0; i < 16; i++) {
    int fd = dup(2);
    if (fd < 0) break;
    last = fd;
  }
  CCHECK(errno == EMFILE && last == 7);
}

static void child_as(void *arg)
{
  (void)arg;
  airlock_rlimits rl = {.as = 256u << 20, .set_mask = AIRLOCK_RL_AS};
  CCHECK(airlock_apply_rlimits(&rl) == 0);
  void *volatile p = malloc(512u << 20); /* volatile: clang elides unused mallocs */
  CCHECK(p == NULL);
  p = malloc(16u << 20);
  CCHECK(p != NULL);
  free(p);
}

static void child_misc(void *arg)
{
  (void)arg;
  airlock_rlimits rl = {.core = 0,
                        .stack = 8u << 20,
                        .cpu = UINT64_MAX,
                        .set_mask = AIRLOCK_RL_CORE | AIRLOCK_RL_STACK | AIRLOCK_RL_CPU};
  CCHECK(airlock_apply_rlimits(&rl) == 0);
  struct rlimit r;
  CCHECK(getrlimit(RLIMIT_CORE, &r) == 0 && r.rlim_cur == 0 && r.rlim_max == 0);
  CCHECK(getrlimit(RLIMIT_STACK, &r) == 0 && r.rlim_cur == (8u << 20) && r.rlim_max == (8u << 20));
  CCHECK(getrlimit(RLIMIT_CPU, &r) == 0 && r.rlim_cur == RLIM_INFINITY && r.rlim_max == RLIM_INFINITY);
  rl = (airlock_rlimits){.cpu = 30, .set_mask = AIRLOCK_RL_CPU};
  CCHECK(airlock_apply_rlimits(&rl) == 0);
  CCHECK(getrlimit(RLIMIT_CPU, &r) == 0 && r.rlim_cur == 30 && r.rlim_max == 31);
  /* soft = hard: the guest cannot raise it again, even as root it only lowers. */
  rl = (airlock_rlimits){.core = 0, .set_mask = AIRLOCK_RL_CORE};
  CCHECK(airlock_apply_rlimits(&rl) == 0);
  CCHECK(airlock_apply_rlimits(NULL) == -EINVAL);
  rl.set_mask = 0x80;
  CCHECK(airlock_apply_rlimits(&rl) == -EINVAL);
  /* Drop root's CAP_SYS_RESOURCE: raising a hard limit must then fail. */
  CCHECK(setresuid(65534, 65534, 65534) == 0);
  rl = (airlock_rlimits){.core = 1 << 20, .set_mask = AIRLOCK_RL_CORE};
  CCHECK(airlock_apply_rlimits(&rl) == -EPERM);
}

static void child_cpu(void *arg)
{
  (void)arg;
  airlock_rlimits rl = {.cpu = 1, .set_mask = AIRLOCK_RL_CPU};
  CCHECK(airlock_apply_rlimits(&rl) == 0);
  for (volatile unsigned long i = 0;; i++) {
  }
}

static void test_rlimits(void)
{
  int as_nobody = 1;
  int st = run_child(child_nproc, &as_nobody);
  CHECK(exited_ok(st));
  if (geteuid() == 0) {
    as_nobody = 0;
    st = run_child(child_nproc, &as_nobody);
    CHECK(exited_ok(st));
  }
  int ignore = 1;
  st = run_child(child_fsize, &ignore);
  CHECK(exited_ok(st));
  ignore = 0;
  st = run_child(child_fsize, &ignore);
  CHECK(killed_by(st, SIGXFSZ));
  st = run_child(child_nofile, NULL);
  CHECK(exited_ok(st));
  if (!UNDER_ASAN) { /* ASan reserves terabytes of shadow: RLIMIT_AS breaks it */
    st = run_child(child_as, NULL);
    CHECK(exited_ok(st));
  } else {
    SKIP("RLIMIT_AS cannot be tried under ASan (its shadow memory reserves terabytes); "
         "the release build tries it");
  }
  st = run_child(child_misc, NULL);
  CHECK(exited_ok(st));
  st = run_child(child_cpu, NULL);
  /* hard = soft + 1 s, so the soft limit's SIGXCPU arrives first. */
  CHECK(killed_by(st, SIGXCPU));
}

/* ------------------------------------------------------------------ probe */

static void test_probe(void)
{
  airlock_probe_report r;
  CHECK(airlock_probe(NULL) == -EINVAL);
  CHECK(airlock_probe(&r) == 0);
  fprintf(stderr,
          "  probe: landlock_abi=%d seccomp=%d kill_process=%d user_ns=%d net_ns=%d pid_ns=%d "
          "mount_ns=%d ipc_ns=%d uts_ns=%d cgroup_ns=%d pidfd=%d cgroup2_delegated=%d "
          "unprivileged_userns_clone=%d apparmor_restrict_userns=%d is_root=%d\n",
          r.landlock_abi, r.seccomp, r.seccomp_kill_process, r.user_ns, r.net_ns, r.pid_ns, r.mount_ns,
          r.ipc_ns, r.uts_ns, r.cgroup_ns, r.pidfd, r.cgroup2_delegated, r.unprivileged_userns_clone,
          r.apparmor_restrict_userns, r.is_root);
  CHECK(r.landlock_abi >= 1);
  CHECK(r.landlock_abi == airlock_landlock_abi());
  CHECK(r.seccomp == 1);
  CHECK(r.seccomp_kill_process == 1);
  CHECK(r.pidfd == 1);
  CHECK(r.is_root == (geteuid() == 0));
  CHECK(r.cgroup2_delegated == 0 || r.cgroup2_delegated == 1);
  CHECK(r.unprivileged_userns_clone >= -1);
  CHECK(r.apparmor_restrict_userns >= -1);
  if (geteuid() == 0) {
    CHECK(r.is_root == 1);
    CHECK(r.user_ns == 1 && r.net_ns == 1 && r.pid_ns == 1 && r.mount_ns == 1);
    CHECK(r.ipc_ns == 1 && r.uts_ns == 1 && r.cgroup_ns == 1);
  }
  /* The probe leaves the caller untouched. */
  CHECK(prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 0);
  CHECK(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 0);
}

int main(void)
{
  /* A SIGSYS'd child dumping core would litter and slow the run. */
  struct rlimit nocore = {0, 0};
  setrlimit(RLIMIT_CORE, &nocore);
  parent_pid = getpid();

  test_probe();
  test_landlock();
  test_seccomp_attacks();
  test_seccomp_positive();
  use_program = 1;
  test_seccomp_positive();
  use_program = 0;
  test_seccomp_program();
  test_layers();
  test_layer_table();
  test_rlimits();
  return check_summary();
}
