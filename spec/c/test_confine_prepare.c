/*
** test_confine_prepare.c -- tests for the policy-driven confinement
** (core/confine_prepare.c, core/confine_promises.c): the promise table, errors
** that name what is wrong, and prepared specs applied in forked children that
** then make real calls; the parent checks how each child ended.
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
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/seccomp.h>
#include <seccomp.h>

#include "confine.h"
#include "check.h"
#include "child.h"
#include "arch_guard.h"

#define CHECK_ST(cond, what, st)     \
  do {                               \
    CHECK_MSG(cond, what);           \
    if (!(cond)) describe(what, st); \
  } while (0)
/* The child died by SIGSYS at the call meant to kill it, not before. */
#define CHECK_KILLED_AT(what, st) CHECK_ST(killed_by(st, SIGSYS) && reached == 1, what, st)

/* Prepares s or fails the test loudly. */
static int prepare_ok(const airlock_confine_spec *s, airlock_confine_prepared *p)
{
  char err[256];
  int rc = airlock_confine_prepare(s, p, err, sizeof err);
  CHECK_MSG(rc == 0, err);
  if (rc != 0) fprintf(stderr, "  prepare: %s\n", err);
  return rc;
}

static int read_ok(const char *path)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char c;
  ssize_t n = read(fd, &c, 1);
  close(fd);
  return n >= 0;
}

/* ------------------------------------------------------------------ table */

static int contains_word(const char *list, const char *word)
{
  size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0' || p[n] == '(')) return 1;
  return 0;
}

static void test_promises(void)
{
  const char *stdio = airlock_promise_syscalls("stdio");
  CHECK(stdio != NULL);
  CHECK(stdio && contains_word(stdio, "read") && contains_word(stdio, "mmap") &&
        contains_word(stdio, "exit_group") == 0); /* exit_group is in the always set */
  CHECK(contains_word(airlock_promise_always.syscalls, "exit_group"));
  CHECK(airlock_promise_syscalls("rpath") && contains_word(airlock_promise_syscalls("rpath"), "openat"));
  CHECK(airlock_promise_syscalls("exec") && contains_word(airlock_promise_syscalls("exec"), "execve"));
  CHECK(airlock_promise_syscalls("inet") &&
        strstr(airlock_promise_syscalls("inet"), "socket(AF_INET|AF_INET6)"));
  CHECK(airlock_promise_syscalls("proc") && strstr(airlock_promise_syscalls("proc"), "clone(no-namespaces)"));
  CHECK(airlock_promise_syscalls("rpth") == NULL);
  CHECK(airlock_promise_syscalls(NULL) == NULL);

  /* The calls every build must know by name (a table typo would silently
  ** drop a rule: names this architecture lacks are skipped). */
  static const char *const must[] = {"read",        "write",
                                     "openat",      "socket",
                                     "connect",     "execve",
                                     "clone",       "clone3",
                                     "ptrace",      "mount",
                                     "unshare",     "setns",
                                     "bpf",         "io_uring_setup",
                                     "keyctl",      "perf_event_open",
                                     "userfaultfd", "open_by_handle_at",
                                     "personality", NULL};
  for (size_t i = 0; must[i]; i++) CHECK_MSG(seccomp_syscall_resolve_name(must[i]) >= 0, must[i]);

  /* Every word prepares alone (the table's grammar parses), all of them
  ** together, and the denylist. */
  airlock_confine_prepared p;
  const char *all[64] = {NULL};
  size_t nall = 0;
  for (const airlock_promise *w = airlock_promises; w->word; w++) {
    const char *one[] = {w->word, NULL};
    airlock_confine_spec s = {.seccomp = 1, .promises = one};
    if (prepare_ok(&s, &p) == 0) {
      CHECK(p.prog.filter != NULL && p.prog.len > 0);
      CHECK(p.notify_prog.filter != NULL);                            /* kill mode: the spawner's variant */
      CHECK(p.allows_exec == (strcmp(w->word, "exec") == 0 ? 3 : 0)); /* execve and execveat */
    }
    airlock_confine_prepared_free(&p);
    if (nall + 1 < sizeof all / sizeof *all) all[nall++] = w->word;
  }
  airlock_confine_spec s = {.seccomp = 1, .promises = all};
  if (prepare_ok(&s, &p) == 0) CHECK(strncmp(p.seccomp.detail, "allowlist: promises", 19) == 0);
  airlock_confine_prepared_free(&p);
  airlock_confine_prepared_free(&p); /* idempotent */
  CHECK(p.ruleset_fd == -1 && p.prog.filter == NULL);

  airlock_confine_spec d = {.seccomp = 1, .seccomp_deny = 1};
  if (prepare_ok(&d, &p) == 0) {
    CHECK(p.allows_exec == 3);
    CHECK(strncmp(p.seccomp.detail, "denylist", 8) == 0);
  }
  airlock_confine_prepared_free(&p);
  const char *noexec[] = {"execve", NULL};
  d.syscalls = noexec;
  if (prepare_ok(&d, &p) == 0) CHECK(p.allows_exec == 2); /* execveat is still allowed, execve not */
  airlock_confine_prepared_free(&p);
  /* errno mode has no notify variant: nothing to name, nothing is killed. */
  airlock_confine_spec e = {
      .seccomp = 1, .promises = (const char *const[]){"stdio", NULL}, .refuse_errno = EPERM};
  if (prepare_ok(&e, &p) == 0)
    CHECK(p.notify_prog.filter == NULL && strstr(p.seccomp.detail, "fail with EPERM"));
  airlock_confine_prepared_free(&p);
}

static void test_errors(void)
{
  airlock_confine_prepared p;
  char err[256];

  /* A word or a call name holding the cache key's separators is refused,
  ** even right after the spec it would spell the same key as was compiled. */
  const char *two[] = {"getpid", "getppid", NULL}, *joined[] = {"getpid,getppid", NULL};
  airlock_confine_spec ok2 = {
      .seccomp = 1, .promises = (const char *const[]){"stdio", "rpath", NULL}, .syscalls = two};
  CHECK_MSG(airlock_confine_prepare(&ok2, &p, err, sizeof err) == 0, err); /* the control: compiled, cached */
  airlock_confine_prepared_free(&p);
  airlock_confine_spec bad2 = {
      .seccomp = 1, .promises = (const char *const[]){"stdio rpath", NULL}, .syscalls = two};
  CHECK(airlock_confine_prepare(&bad2, &p, err, sizeof err) == -EINVAL);
  CHECK_MSG(strstr(err, "unknown promise 'stdio rpath'") != NULL, err);
  airlock_confine_spec bad3 = {
      .seccomp = 1, .promises = (const char *const[]){"stdio", "rpath", NULL}, .syscalls = joined};
  CHECK(airlock_confine_prepare(&bad3, &p, err, sizeof err) == -EINVAL);
  CHECK_MSG(strstr(err, "unknown system call 'getpid,getppid'") != NULL, err);

  airlock_confine_spec s = {.seccomp = 1, .promises = (const char *const[]){"stdio", "rpth", NULL}};
  CHECK(airlock_confine_prepare(&s, &p, err, sizeof err) == -EINVAL);
  CHECK_MSG(strstr(err, "unknown promise 'rpth'") != NULL, err);
  CHECK_MSG(strstr(err, "valid: stdio rpath wpath cpath fattr inet unix dns proc exec id tty") != NULL, err);
  CHECK(p.prog.filter == NULL && p.ruleset_fd == -1);
  CHECK(p.seccomp.status == AIRLOCK_LAYER_FAILED);

  const char *bad[] = {"getpid", "no_such_call", NULL};
  airlock_confine_spec r = {.seccomp = 1, .promises = (const char *const[]){"stdio", NULL}, .syscalls = bad};
  CHECK(airlock_confine_prepare(&r, &p, err, sizeof err) == -EINVAL);
  CHECK_MSG(strstr(err, "unknown system call 'no_such_call'") != NULL, err);

  airlock_confine_spec q = {
      .seccomp = 1, .promises = (const char *const[]){"stdio", NULL}, .refuse_errno = 5000};
  CHECK(airlock_confine_prepare(&q, &p, err, sizeof err) == -EINVAL);
  CHECK_MSG(strstr(err, "refuse_errno 5000") != NULL, err);

  if (airlock_landlock_abi() >= 1) {
    const char *paths[] = {"/usr", "/nonexistent/airlock", NULL};
    airlock_confine_spec l = {.landlock = 1, .fs_read = paths};
    CHECK(airlock_confine_prepare(&l, &p, err, sizeof err) == -ENOENT);
    CHECK_MSG(strstr(err, "landlock: /nonexistent/airlock: No such file or directory") != NULL, err);
    CHECK(p.landlock.status == AIRLOCK_LAYER_FAILED && p.ruleset_fd == -1);
  }
  CHECK(airlock_confine_prepare(NULL, &p, err, sizeof err) == -EINVAL);
}

/* ------------------------------------------------------------------ allowlist */

static airlock_confine_prepared shared; /* prepared in the parent, applied in a child */

static void child_allow_kill(void *arg)
{
  (void)arg;
  CCHECK(airlock_confine_apply_prepared(&shared) == 0);
  CCHECK(read_ok("/etc/hostname"));
  struct stat st;
  CCHECK(stat("/etc/hostname", &st) == 0);
  /* The soft refusals: libc's fallbacks keep working, nobody dies. */
  errno = 0;
  CCHECK(syscall(SYS_clone3, NULL, 0) == -1 && errno == ENOSYS);
  errno = 0;
  CCHECK(syscall(SYS_openat2, AT_FDCWD, "/etc/hostname", NULL, 0) == -1 && errno == ENOSYS);
  errno = 0; /* getpwuid()'s nscd probe: refused softly under rpath */
  CCHECK(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0) == -1 && errno == EACCES);
  REACHED();
  socket(AF_INET, SOCK_STREAM, 0); /* not promised: death by SIGSYS */
  _exit(3);
}

static void child_allow_errno(void *arg)
{
  (void)arg;
  CCHECK(airlock_confine_apply_prepared(&shared) == 0);
  errno = 0; /* prctl beyond PR_SET_NAME/PR_GET_NAME is not stdio */
  CCHECK(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == -1 && errno == EPERM);
  char status[4096];
  int sfd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  ssize_t sn = sfd >= 0 ? read(sfd, status, sizeof status - 1) : -1;
  if (sfd >= 0) close(sfd);
  status[sn > 0 ? sn : 0] = 0;
  CCHECK(strstr(status, "\nNoNewPrivs:\t1\n") && strstr(status, "\nSeccomp:\t2\n"));
  errno = 0;
  CCHECK(socket(AF_INET, SOCK_STREAM, 0) == -1 && errno == EPERM);
  errno = 0; /* rpath's soft refusal of glibc's nscd probe */
  CCHECK(socket(AF_UNIX, SOCK_STREAM, 0) == -1 && errno == EACCES);
  errno = 0;
  CCHECK(socket(AF_NETLINK, SOCK_RAW, 0) == -1 && errno == EPERM);
  CCHECK(read_ok("/etc/hostname"));
  /* rpath opens read-only: write access, O_CREAT and O_TRUNC are refused. */
  errno = 0;
  CCHECK(open("/tmp/airlock-spec-never", O_WRONLY | O_CREAT, 0600) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(open("/etc/hostname", O_RDWR) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(open("/etc/hostname", O_RDONLY | O_TRUNC) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(mkdir("/tmp/airlock-spec-never", 0700) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(fork() == -1 && errno == EPERM); /* no proc */
  /* isatty() stays possible, TIOCSTI never. */
  errno = 0;
  CCHECK(ioctl(report_fd, TCGETS, &(char[64]){0}) == -1 && errno == ENOTTY);
  errno = 0;
  CCHECK(ioctl(0, TIOCSTI, "x") == -1 && errno == EPERM);
  CCHECK(getpid() > 0);
}

/* "dns" refuses the resolver's nscd and netlink probes softly even in kill mode. */
static void child_dns(void *arg)
{
  (void)arg;
  CCHECK(airlock_confine_apply_prepared(&shared) == 0);
  errno = 0;
  CCHECK(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) == -1 && errno == EACCES);
  errno = 0;
  CCHECK(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0) == -1 && errno == EACCES);
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  CCHECK(s >= 0);
  close(s);
  REACHED();
  bind(-1, NULL, 0); /* bind is not part of dns: death */
  _exit(3);
}

static void child_proc(void *arg)
{
  (void)arg;
  CCHECK(airlock_confine_apply_prepared(&shared) == 0);
  pid_t pid = fork(); /* glibc: clone without namespace flags */
  if (pid == 0) _exit(7);
  int st = 0;
  CCHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 7);
  errno = 0;
  CCHECK(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(unshare(CLONE_NEWUSER) == -1 && errno == EPERM);
}

/* Calls of another ABI take the bad-arch action, death, in every mode: the
** x32 getpid, and on x86_64 the i386 getpid through int $0x80 (when arg). */
static void child_x32(void *arg)
{
  if (airlock_confine_apply_prepared(&shared) != 0) _exit(4);
  REACHED();
#if defined(__x86_64__)
  if (arg != NULL) {
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
    (void)ret;
    _exit(3);
  }
#endif
  syscall(0x40000000 | 39);
  _exit(3);
}

/* The i386 case where the machine runs i386 calls (the control); where it does
** not, the attack cannot be tried, and the prepared program's architecture
** guard is what is checked. */
static void int32_case(const char *mode, const airlock_confine_prepared *p)
{
  char what[96];
  snprintf(what, sizeof what, "%s: i386 call (int $0x80) kills", mode);
#if defined(__x86_64__)
  if (ia32_syscalls_work()) {
    int st = run_child(child_x32, "int80");
    CHECK_KILLED_AT(what, st);
  } else {
    SKIP("i386 calls (int $0x80) fault even unconfined on this kernel (IA32 emulation off), "
         "so the attack cannot be tried; the filter's architecture guard is checked instead");
  }
#endif
  snprintf(what, sizeof what, "%s: the filter kills every foreign architecture", mode);
  CHECK_MSG(bpf_kills_foreign_arch(p->prog.filter, p->prog.len), what);
}

static void test_allowlist(void)
{
  airlock_confine_spec s = {.seccomp = 1, .promises = (const char *const[]){"stdio", "rpath", NULL}};
  if (prepare_ok(&s, &shared) == 0) {
    int st = run_child(child_allow_kill, NULL);
    CHECK_KILLED_AT("stdio rpath: socket() ends the child by SIGSYS", st);
    st = run_child(child_x32, NULL);
    CHECK_KILLED_AT("allowlist: x32 call kills", st);
    int32_case("allowlist", &shared);
  }
  airlock_confine_prepared_free(&shared);

  s.refuse_errno = EPERM;
  if (prepare_ok(&s, &shared) == 0) {
    int st = run_child(child_allow_errno, NULL);
    CHECK_ST(exited_ok(st), "refuse EPERM: refused calls fail and the child lives", st);
    st = run_child(child_x32, NULL);
    CHECK_KILLED_AT("allowlist, errno mode: x32 still kills", st);
  }
  airlock_confine_prepared_free(&shared);

  airlock_confine_spec dns = {.seccomp = 1, .promises = (const char *const[]){"stdio", "dns", NULL}};
  if (prepare_ok(&dns, &shared) == 0) {
    int st = run_child(child_dns, NULL);
    CHECK_KILLED_AT("dns: soft probes, then bind kills", st);
  }
  airlock_confine_prepared_free(&shared);

  airlock_confine_spec proc = {
      .seccomp = 1, .promises = (const char *const[]){"stdio", "proc", NULL}, .refuse_errno = EPERM};
  if (prepare_ok(&proc, &shared) == 0) {
    int st = run_child(child_proc, NULL);
    CHECK_ST(exited_ok(st), "proc: fork yes, namespaces no", st);
  }
  airlock_confine_prepared_free(&shared);
}

/* ------------------------------------------------------------------ observe (learn mode) */

/* Under "stdio" alone, open and stat are refused (EPERM); with observe they
** pass: the plain program (no listener here) lets every observed call
** through, what the notify program sends to the broker's listener instead. */
static void child_observe(void *arg)
{
  int observed = *(const int *)arg;
  CCHECK(airlock_confine_apply_prepared(&shared) == 0);
  struct stat st;
  errno = 0;
  int fd = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
  CCHECK(observed ? fd >= 0 : (fd == -1 && errno == EPERM));
  errno = 0;
  int sr = stat("/etc/hostname", &st);
  CCHECK(observed ? sr == 0 : (sr == -1 && errno == EPERM));
  errno = 0; /* not an observed call: refused either way */
  CCHECK(syscall(SYS_chdir, "/") == -1 && errno == EPERM);
  /* A setid mode stays refused when observed: no run makes a setuid file. */
  char path[64];
  snprintf(path, sizeof path, "/tmp/airlock-observe-%d", (int)getpid());
  errno = 0;
  CCHECK(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 04755) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 02755) == -1 && errno == EPERM);
  if (observed) { /* the same without the bit is observed, and made */
    int made = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    CCHECK(made >= 0 && fstat(made, &st) == 0 && (st.st_mode & 06000) == 0);
    CCHECK(unlink(path) == 0);
  }
}

static void test_observe(void)
{
  for (int observed = 0; observed < 2; observed++) {
    airlock_confine_spec s = {.seccomp = 1,
                              .promises = (const char *const[]){"stdio", NULL},
                              .refuse_errno = AIRLOCK_REFUSE_CHOSEN,
                              .observe = observed};
    if (prepare_ok(&s, &shared) == 0) {
      CHECK(shared.observe == observed);
      CHECK(shared.notify_prog.filter != NULL);
      int st = run_child(child_observe, &observed);
      CHECK_ST(exited_ok(st), observed ? "observe: open and stat pass" : "no observe: open and stat refused",
               st);
    }
    airlock_confine_prepared_free(&shared);
  }
  /* the calls observed are calls of this architecture, execveat too (but
  ** from the spawner's own fds: see child_observe_exec) */
  CHECK(airlock_observed_call_find(SYS_openat) != NULL);
  CHECK(airlock_observed_call_find(SYS_execve) != NULL &&
        airlock_observed_call_find(SYS_execve)->kind == 'x');
  CHECK(airlock_observed_call_find(SYS_execveat) != NULL &&
        airlock_observed_call_find(SYS_execveat)->kind == 'x');
  CHECK(airlock_observed_call_find(SYS_read) == NULL);
}

/* ------------------------------------------------------------------ denylist */

static void child_deny_errno(void *arg)
{
  (void)arg;
  CCHECK(airlock_confine_apply_prepared(&shared) == 0);
  errno = 0;
  CCHECK(ptrace(PTRACE_TRACEME, 0, NULL, NULL) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(unshare(CLONE_NEWUSER) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(mount("none", "/tmp", "tmpfs", 0, NULL) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(syscall(SYS_clone3, NULL, 0) == -1 && errno == ENOSYS);
  errno = 0;
  CCHECK(syscall(SYS_io_uring_setup, 8, NULL) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(syscall(SYS_bpf, 0, NULL, 0) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(syscall(SYS_keyctl, 0, 0, 0, 0, 0) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(syscall(SYS_personality, 0x0400000 /* READ_IMPLIES_EXEC */) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0) == -1 && errno == EPERM);
  errno = 0;
  CCHECK(ioctl(0, TIOCSTI, "x") == -1 && errno == EPERM);
  errno = 0;
  CCHECK(getcwd((char[64]){0}, 64) == NULL && errno == EPERM); /* listed by the spec */
  /* Ordinary calls pass: files, sockets, fork. */
  CCHECK(read_ok("/etc/hostname"));
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CCHECK(s >= 0);
  close(s);
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  int st = 1;
  CCHECK(pid > 0 && waitpid(pid, &st, 0) == pid && exited_ok(st));
}

static void child_deny_kill(void *arg)
{
  (void)arg;
  CCHECK(airlock_confine_apply_prepared(&shared) == 0);
  CCHECK(read_ok("/etc/hostname"));
  REACHED();
  unshare(CLONE_NEWUSER);
  _exit(3);
}

static void test_denylist(void)
{
  const char *more[] = {"getcwd", NULL};
  airlock_confine_spec s = {.seccomp = 1, .seccomp_deny = 1, .syscalls = more, .refuse_errno = EPERM};
  if (prepare_ok(&s, &shared) == 0) {
    int st = run_child(child_deny_errno, NULL);
    CHECK_ST(exited_ok(st), "denylist EPERM: the dangerous set fails, the rest works", st);
    st = run_child(child_x32, NULL);
    CHECK_KILLED_AT("denylist: x32 call kills", st);
    int32_case("denylist", &shared);
  }
  airlock_confine_prepared_free(&shared);

  airlock_confine_spec k = {.seccomp = 1, .seccomp_deny = 1};
  if (prepare_ok(&k, &shared) == 0) {
    int st = run_child(child_deny_kill, NULL);
    CHECK_KILLED_AT("denylist kill: unshare ends the child by SIGSYS", st);
  }
  airlock_confine_prepared_free(&shared);
}

/* ------------------------------------------------------------------ the spawner's hand-over */

/* Loads the notify variant as the spawner's child would, with the hand-over
** socket at AIRLOCK_CONFINE_NOTIFY_FD; then makes a refused call (getpid:
** "rpath" has no stdio) and waits there until the parent kills it. */
static int handover_sock;

static void child_handover(void *arg)
{
  (void)arg;
  if (dup3(handover_sock, AIRLOCK_CONFINE_NOTIFY_FD, O_CLOEXEC) < 0) _exit(5);
  const char *step = NULL;
  int rc = airlock_confine_apply_prepared_fds(&shared, -1, AIRLOCK_CONFINE_NOTIFY_FD, &step);
  if (rc != 0) _exit(6);
  syscall(SYS_getpid);
  _exit(3); /* never: the call waits for the parent */
}

static void test_handover(void)
{
  airlock_confine_spec s = {.seccomp = 1, .promises = (const char *const[]){"rpath", NULL}};
  if (prepare_ok(&s, &shared) != 0) return;
  CHECK(shared.notify_prog.filter != NULL);
  int sp[2];
  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0);
  handover_sock = sp[1];
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(sp[0]);
    child_handover(NULL);
  }
  close(sp[1]);
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } cm;
  char byte = 0;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
  int listener = -1;
  if (recvmsg(sp[0], &mh, MSG_CMSG_CLOEXEC) == 1) {
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (c && c->cmsg_type == SCM_RIGHTS) memcpy(&listener, CMSG_DATA(c), sizeof listener);
  }
  CHECK_MSG(listener >= 0, "the child handed its seccomp listener over");
  if (listener >= 0) {
    struct seccomp_notif n;
    memset(&n, 0, sizeof n);
    CHECK(ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &n) == 0);
    CHECK_MSG(n.data.nr == SYS_getpid, "the refused call is named: getpid");
    CHECK(n.pid == (uint32_t)pid);
    close(listener);
  }
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK_ST(killed_by(st, SIGKILL), "hand-over child waited in its refused call", st);
  close(sp[0]);
  airlock_confine_prepared_free(&shared);
}

/* ------------------------------------------------------------------ observe_connect (a run with a proxy) */

/* Loads the notify variant with the hand-over, as the spawner's child would;
** connects to the parent's listening socket on 127.0.0.1:connect_port; then
** makes a refused call (getpid: "inet" has no stdio) and waits there. */
static int connect_port;

static void child_connect(void *arg)
{
  (void)arg;
  if (dup3(handover_sock, AIRLOCK_CONFINE_NOTIFY_FD, O_CLOEXEC) < 0) _exit(5);
  const char *step = NULL;
  if (airlock_confine_apply_prepared_fds(&shared, -1, AIRLOCK_CONFINE_NOTIFY_FD, &step) != 0) _exit(6);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)connect_port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) _exit(7);
  syscall(SYS_getpid);
  _exit(3); /* never: the call waits for the parent */
}

/* The calls the listener is shown, in order, until the refused getpid: with
** observe, connect first (answered CONTINUE, as the broker does), else getpid
** alone: the flag adds the one rule and nothing else reaches the listener. */
static void connect_seen(int observe_connect)
{
  int srv = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  CHECK(srv >= 0 && bind(srv, (struct sockaddr *)&a, sizeof a) == 0 && listen(srv, 4) == 0 &&
        getsockname(srv, (struct sockaddr *)&a, &al) == 0);
  connect_port = ntohs(a.sin_port);
  int sp[2];
  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0);
  handover_sock = sp[1];
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(sp[0]);
    child_connect(NULL);
  }
  close(sp[1]);
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } cm;
  char byte = 0;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
  int listener = -1;
  if (recvmsg(sp[0], &mh, MSG_CMSG_CLOEXEC) == 1) {
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (c && c->cmsg_type == SCM_RIGHTS) memcpy(&listener, CMSG_DATA(c), sizeof listener);
  }
  CHECK_MSG(listener >= 0, "the child handed its seccomp listener over");
  if (listener >= 0) {
    struct seccomp_notif n;
    memset(&n, 0, sizeof n);
    CHECK(ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &n) == 0);
    if (observe_connect) {
      CHECK_MSG(n.data.nr == SYS_connect, "observe_connect: the listener is shown connect");
      struct seccomp_notif_resp resp = {.id = n.id, .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
      CHECK(ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp) == 0);
      memset(&n, 0, sizeof n);
      CHECK(ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &n) == 0);
    }
    CHECK_MSG(n.data.nr == SYS_getpid, observe_connect ? "the continued connect succeeded, then getpid"
                                                       : "without observe_connect, connect is not shown");
    close(listener);
  }
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK_ST(killed_by(st, SIGKILL), "observe_connect child waited in its refused call", st);
  close(sp[0]);
  close(srv);
}

static void test_observe_connect(void)
{
  const char *const inet[] = {"inet", NULL}, *const rpath[] = {"rpath", NULL};
  for (int on = 0; on < 2; on++) {
    airlock_confine_spec s = {.seccomp = 1, .promises = inet, .observe_connect = on ? 3128 : 0};
    if (prepare_ok(&s, &shared) == 0) {
      CHECK(shared.observe_connect == (on ? 3128 : 0));
      connect_seen(on);
    }
    airlock_confine_prepared_free(&shared);
  }
  /* A connect the promises refuse is never sent to be continued: no rule, no flag. */
  airlock_confine_spec r = {.seccomp = 1, .promises = rpath, .observe_connect = 3128};
  if (prepare_ok(&r, &shared) == 0)
    CHECK_MSG(shared.observe_connect == 0, "rpath: connect refused, not observed");
  airlock_confine_prepared_free(&shared);
  /* A denylist lets connect through: observed. A fixed errno has no listener: not. */
  airlock_confine_spec d = {
      .seccomp = 1, .seccomp_deny = 1, .refuse_errno = AIRLOCK_REFUSE_CHOSEN, .observe_connect = 3128};
  if (prepare_ok(&d, &shared) == 0) CHECK(shared.observe_connect == 3128);
  airlock_confine_prepared_free(&shared);
  airlock_confine_spec f = {.seccomp = 1, .promises = inet, .refuse_errno = EPERM, .observe_connect = 3128};
  if (prepare_ok(&f, &shared) == 0) CHECK(shared.observe_connect == 0);
  airlock_confine_prepared_free(&shared);
  /* Not a port: refused. */
  airlock_confine_spec bad = {.seccomp = 1, .promises = inet, .observe_connect = 70000};
  char err[256];
  CHECK(airlock_confine_prepare(&bad, &shared, err, sizeof err) == -EINVAL && strstr(err, "observe_connect"));
  airlock_confine_prepared_free(&shared);
}

/* No descriptor left for a listener (RLIMIT_NOFILE): the child falls back to
** the plain program, whose refusals still kill, unnamed. */
static void child_no_listener(void *arg)
{
  (void)arg;
  if (dup3(handover_sock, AIRLOCK_CONFINE_NOTIFY_FD, O_CLOEXEC) < 0) _exit(5);
  for (int fd = 3; fd < AIRLOCK_CONFINE_NOTIFY_FD; fd++)
    if (fd != report_fd) close(fd);
  struct rlimit rl = {3, 3}; /* 0..2 are open: no free number below the limit */
  CCHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
  const char *step = NULL;
  CCHECK(airlock_confine_apply_prepared_fds(&shared, -1, AIRLOCK_CONFINE_NOTIFY_FD, &step) == 0);
  CCHECK(read_ok("/proc/self/status") || errno == EMFILE);
  REACHED();
  socket(AF_INET, SOCK_STREAM, 0);
  _exit(3);
}

static void test_no_listener(void)
{
  airlock_confine_spec s = {.seccomp = 1, .promises = (const char *const[]){"stdio", "rpath", NULL}};
  if (prepare_ok(&s, &shared) != 0) return;
  int sp[2];
  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0);
  handover_sock = sp[1];
  int st = run_child(child_no_listener, NULL);
  CHECK_KILLED_AT("no listener possible: the plain filter kills", st);
  char byte;
  CHECK(recv(sp[0], &byte, 1, MSG_DONTWAIT) == -1 && errno == EAGAIN); /* nothing handed over */
  close(sp[0]);
  close(sp[1]);
  airlock_confine_prepared_free(&shared);
}

/* ------------------------------------------------------------------ landlock */

struct ll_case {
  char dir[64]; /* the writable temp dir */
  int abi;
  uint16_t open_port;  /* a listening port the child may connect to */
  uint16_t other_port; /* one it may not */
};

static void child_landlock(void *arg)
{
  struct ll_case *c = arg;
  CCHECK(airlock_confine_apply_prepared(&shared) == 0);
  /* read: under /usr yes, /etc/passwd no; a single file rule for /etc/hostname. */
  CCHECK(read_ok("/usr/bin/sh") || read_ok("/usr/bin/true"));
  int d = open("/usr", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CCHECK(d >= 0);
  if (d >= 0) close(d);
  errno = 0;
  CCHECK(open("/etc/passwd", O_RDONLY) == -1 && errno == EACCES);
  CCHECK(read_ok("/etc/hostname"));
  /* write only in the temp dir, and write is not read. */
  char path[128], path2[128];
  snprintf(path, sizeof path, "%s/file", c->dir);
  snprintf(path2, sizeof path2, "%s/renamed", c->dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  CCHECK(fd >= 0 && write(fd, "hi", 2) == 2);
  if (fd >= 0) close(fd);
  CCHECK(rename(path, path2) == 0);
  errno = 0;
  CCHECK(open(path2, O_RDONLY) == -1 && errno == EACCES);
  CCHECK(unlink(path2) == 0);
  char outside[96];
  snprintf(outside, sizeof outside, "/tmp/airlock-spec-outside-%d", (int)getpid());
  errno = 0;
  CCHECK(open(outside, O_WRONLY | O_CREAT, 0600) == -1 && errno == EACCES);
  /* exec needs the execute right: /usr is read-only here. */
  pid_t pid = fork();
  if (pid == 0) {
    char *argv[] = {"true", NULL};
    execve("/usr/bin/true", argv, NULL);
    _exit(errno == EACCES ? 0 : 1);
  }
  int st = 1;
  waitpid(pid, &st, 0);
  CCHECK(exited_ok(st));
  /* TCP: connect only to the allowed port; bind nowhere. */
  if (c->abi >= 4) {
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    in.sin_port = htons(c->open_port);
    CCHECK(connect(s, (struct sockaddr *)&in, sizeof in) == 0);
    close(s);
    s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    in.sin_port = htons(c->other_port);
    errno = 0;
    CCHECK(connect(s, (struct sockaddr *)&in, sizeof in) == -1 && errno == EACCES);
    close(s);
    s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    in.sin_port = htons(0);
    errno = 0;
    CCHECK(bind(s, (struct sockaddr *)&in, sizeof in) == -1 && errno == EACCES);
    close(s);
  }
  if (c->abi >= 6) { /* scoped: no signal out of the domain */
    errno = 0;
    CCHECK(kill(getppid(), 0) == -1 && errno == EPERM);
  }
}

static void child_landlock_exec(void *arg)
{
  (void)arg;
  CCHECK(airlock_confine_apply_prepared(&shared) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    char *argv[] = {"true", NULL};
    execve("/usr/bin/true", argv, NULL);
    _exit(100 + errno);
  }
  int st = 1;
  waitpid(pid, &st, 0);
  CCHECK(exited_ok(st));
  errno = 0;
  CCHECK(open("/etc/passwd", O_RDONLY) == -1 && errno == EACCES);
}

static void test_landlock(void)
{
  int abi = airlock_landlock_abi();
  if (abi < 1) {
    SKIP("this kernel has no Landlock: the prepared Landlock rulesets cannot be tried");
    return;
  }
  if (abi < 4) SKIP("Landlock ABI < 4 on this kernel: prepared TCP rules cannot be tried");
  if (abi < 6) SKIP("Landlock ABI < 6 on this kernel: prepared scopes cannot be tried");
  struct ll_case c = {.abi = abi};
  snprintf(c.dir, sizeof c.dir, "/tmp/airlock-spec-XXXXXX");
  CHECK(mkdtemp(c.dir) != NULL);

  int lt = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t il = sizeof in;
  CHECK(bind(lt, (struct sockaddr *)&in, sizeof in) == 0 && listen(lt, 8) == 0 &&
        getsockname(lt, (struct sockaddr *)&in, &il) == 0);
  c.open_port = ntohs(in.sin_port);
  c.other_port = (uint16_t)(c.open_port == 65535 ? 1024 : c.open_port + 1);

  const char *read[] = {"/usr", "/etc/hostname", NULL};
  const char *write_[] = {c.dir, NULL};
  uint16_t conn[] = {c.open_port};
  airlock_confine_spec s = {
      .landlock = 1, .fs_read = read, .fs_write = write_, .tcp_connect = conn, .n_tcp_connect = 1};
  if (prepare_ok(&s, &shared) == 0) {
    CHECK(shared.ruleset_fd >= 0);
    CHECK_MSG(strstr(shared.landlock.detail, "paths: 2 read, 1 write, 0 exec") != NULL,
              shared.landlock.detail);
    int st = run_child(child_landlock, &c);
    CHECK_ST(exited_ok(st), "landlock rules child", st);
  }
  airlock_confine_prepared_free(&shared);

  /* exec = execute + read: /usr/bin/true runs (its loader under /usr/lib* too). */
  const char *exec[] = {"/usr", "/lib", "/lib64", NULL};
  airlock_confine_spec e = {.landlock = 1, .fs_exec = exec};
  if (prepare_ok(&e, &shared) == 0) {
    int st = run_child(child_landlock_exec, NULL);
    CHECK_ST(exited_ok(st), "landlock exec child", st);
  }
  airlock_confine_prepared_free(&shared);
  close(lt);
  rmdir(c.dir);
}

/* airlock_confine_apply: prepare + apply on the calling process, with reports. */
static void child_apply(void *arg)
{
  (void)arg;
  const char *read[] = {"/usr", "/etc/hostname", NULL};
  airlock_confine_spec s = {.landlock = 1,
                            .fs_read = read,
                            .seccomp = 1,
                            .promises = (const char *const[]){"stdio", "rpath", NULL}};
  airlock_layer out[2];
  int rc = airlock_confine_apply(&s, out);
  CCHECK(rc == 0);
  CCHECK(out[0].status == AIRLOCK_LAYER_APPLIED && strncmp(out[0].detail, "ABI ", 4) == 0);
  CCHECK(out[1].status == AIRLOCK_LAYER_APPLIED &&
         strstr(out[1].detail, "allowlist: promises 'stdio rpath'") != NULL);
  CCHECK(read_ok("/etc/hostname"));
  errno = 0;
  CCHECK(open("/etc/passwd", O_RDONLY) == -1 && errno == EACCES);
  REACHED();
  syscall(SYS_mkdir, "/tmp/x", 0700); /* not promised: death */
  _exit(3);
}

static void child_apply_fails(void *arg)
{
  (void)arg;
  const char *read[] = {"/nonexistent/airlock", NULL};
  airlock_confine_spec s = {
      .landlock = 1, .fs_read = read, .seccomp = 1, .promises = (const char *const[]){"stdio", NULL}};
  airlock_layer out[2];
  CCHECK(airlock_confine_apply(&s, out) == -ENOENT);
  CCHECK(out[0].status == AIRLOCK_LAYER_FAILED && strstr(out[0].detail, "/nonexistent/airlock"));
  CCHECK(prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 0); /* nothing applied */
  CCHECK(read_ok("/etc/passwd"));
}

static void test_apply(void)
{
  if (airlock_landlock_abi() < 1) {
    SKIP("this kernel has no Landlock: airlock_confine_apply's two layers cannot be tried");
    return;
  }
  int st = run_child(child_apply, NULL);
  CHECK_KILLED_AT("airlock_confine_apply: both layers, then mkdir kills", st);
  st = run_child(child_apply_fails, NULL);
  CHECK_ST(exited_ok(st), "airlock_confine_apply: a failed preparation applies nothing", st);
}

int main(void)
{
  struct rlimit nocore = {0, 0};
  setrlimit(RLIMIT_CORE, &nocore);
  test_promises();
  test_errors();
  test_allowlist();
  test_observe();
  test_denylist();
  test_handover();
  test_observe_connect();
  test_no_listener();
  test_landlock();
  test_apply();
  return check_summary();
}
