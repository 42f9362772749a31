/*
** confine_seccomp.c -- the worker's seccomp allowlist (libseccomp).
**
** Measured, not guessed: `strace -f` over the spec suite (99 confined workers
** in spec/worker, spec/lua/run_spec.lua, spec/core/confine_spec.lua and
** spawn_spec.lua, 2026-11-30) saw exactly these calls after a successful
** filter load: brk 631, sendmsg 109, exit_group 44, clock_gettime 43, read 38,
** mremap 10, mmap 6, write 3, munmap 1 (plus the hostile fixture's socket,
** refused). The abort path below adds four that a healthy run never makes.
** Every entry says why it is there, and what was left out says why not.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <seccomp.h>

#include "airlock.h"
#include "confine.h"

/*
** The allowlist. Once the worker is confined it only reads and writes fd 3 (the
** channel) and fd 2 (stderr), allocates memory, reads a clock, and exits.
**
**   read            the channel (fd 3): init and reply frames.
**   poll            waits for the channel to be readable before the read: a
**                   reader blocked in read(2) on a unix socket is also woken
**                   when the parent consumes its own last frame (write space),
**                   for nothing; poll(POLLIN) sleeps through that. It only
**                   reports readiness of fds the worker already holds, with
**                   a timeout of its own choosing (the worker passes -1).
**   sendmsg         the channel: frames are sent with sendmsg(MSG_NOSIGNAL) so a
**                   closed parent end is EPIPE, not a SIGPIPE death.
**   write           stderr (worker_die messages, the SIGSYS report below).
**   writev          glibc's fatal-error reporter (__libc_message: "free(): double
**                   free detected", stack-protector, assert) writes with writev
**                   before abort(); without it the message is lost.
**   mmap            malloc for blocks over the mmap threshold, and the arena's
**                   fallback when brk cannot grow. Argument filter: only with
**                   MAP_ANONYMOUS (no file can be mapped) and never PROT_EXEC.
**   munmap          free() of mmapped blocks.
**   mremap          realloc() of mmapped blocks (Lua grows strings and tables
**                   by realloc: 12 calls in the measured workload).
**   brk             the main arena grows and trims with brk.
**   clock_gettime   os.clock() reads CLOCK_PROCESS_CPUTIME_ID, which the vDSO
**                   never serves; CLOCK_REALTIME/MONOTONIC also fall back to the
**                   syscall when the clocksource is not vDSO-capable (some VMs).
**   exit_group      the way glibc's _exit/exit end the process.
**   rt_sigreturn    the return from the CPU budgets' timer signal (SIGVTALRM,
**                   worker/limits.c), whose handler only sets a Lua hook. The
**                   handler and the timer are installed before confining; no
**                   other handler returns (SIGSYS's ends the process). It
**                   restores a context the kernel saved for this thread: a
**                   guest that cannot run native code cannot forge one.
**   rt_sigprocmask  abort() unblocks SIGABRT first.
**   getpid, gettid  raise(SIGABRT) asks both for tgkill's arguments (glibc no
**                   longer caches the pid).
**   tgkill          raise(SIGABRT) only: argument filter tgid == our pid (taken
**                   at load; fork is not allowed so it cannot change) and
**                   sig == SIGABRT. With these four, a glibc abort ends as
**                   SIGABRT (cause "crash") instead of SIGSYS (cause "seccomp"),
**                   so a heap corruption is not mistaken for an escape attempt.
**
** Left out, measured as not needed by a single-threaded Lua worker:
**   close, open*, socket*, dup*, pipe*  no fd is created or dropped after
**                   startup, so the reachable fds are fixed at load time.
**   readv           nothing reads vectored.
**   mprotect        glibc uses it only for non-main arenas (threads) and
**                   dlopen/RELRO (startup); leaving it out also means no page
**                   can become executable, so it needs no PROT_EXEC filter.
**   madvise         only malloc_trim() and the hugepage tunable use it.
**   futex           uncontended locks of a single thread never reach the kernel.
**   exit            ends one thread; glibc calls it only if exit_group returned.
**   rt_sigaction    the handlers are installed before confining, and
**   restart_syscall restart_syscall is only for interrupted sleeps and polls
**                   with a timeout: nothing sleeps, and the one poll waits
**                   forever (interrupted by the timer's signal it answers
**                   EINTR, and the worker polls again).
**   getrandom       Lua 5.4 seeds from time and addresses; the worker seeds
**                   explicitly from the init frame.
**   time, gettimeofday  served by the vDSO on x86_64 (the vDSO time() never
**                   falls back to the syscall).
**   clock_nanosleep nothing sleeps.
**
** No fd filter on read/write/writev: the only fds that exist are 0 (/dev/null),
** 1 and 2 (capture pipes) and 3 (the channel), and no allowed syscall can make
** another one, so a filter would only forbid stdout and tie this list to fd
** numbers the spawner chooses, for no protection gained.
**
** Worker caveats (not enforceable here): tzset() reopens /etc/localtime on every
** localtime()/strftime()/mktime() while TZ is unset, so the worker needs TZ set
** in its environment and one tzset() before confining; the first use of a
** buffered stdio stream calls fstat and ioctl(TCGETS), so stdout must not be
** used for the first time after confining.
*/

/*
** What happens to a call outside the list. The kernel's kill-process action
** ends the process with SIGSYS but says nothing about which call it was. So the
** filter traps instead (SECCOMP_RET_TRAP: the call is NOT executed), and the
** SIGSYS handler installed here writes one line naming the call's number to
** stderr, then calls afs_syscall, which no kernel implements and which the
** filter answers with kill-process: the process dies by SIGSYS, as it would
** under kill-process, and the kernel does the killing, so it works the same
** under a tracer. A blocked call never runs, and a compromised process cannot
** escape the death: it cannot replace the handler (rt_sigaction is refused),
** and if it blocks SIGSYS, the kernel's forced SIGSYS resets the handler and
** kills it at the first trap. The parent turns the number into a name
** (airlock_syscall_name). Calls from another architecture or with the x32 bit
** never reach the handler: kill-process.
*/
static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
  (void)sig;
  (void)uc;
  char line[80] = AIRLOCK_SECCOMP_REPORT;
  size_t n = sizeof AIRLOCK_SECCOMP_REPORT - 1;
  char digits[12];
  size_t k = 0;
  unsigned nr = si->si_syscall >= 0 ? (unsigned)si->si_syscall : 0;
  do {
    digits[k++] = (char)('0' + nr % 10);
    nr /= 10;
  } while (nr != 0 && k < sizeof digits);
  while (k > 0) line[n++] = digits[--k];
  line[n++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, n);
  (void)ignored;
  for (;;) syscall(SYS_afs_syscall); /* kill-process (see the rules) */
}

#define ALLOW(nr)   \
  {                 \
    (nr), 0,        \
    {               \
      {0, 0, 0, 0}, \
      {             \
        0, 0, 0, 0  \
      }             \
    }               \
  }
/* libseccomp's SCMP_An macros leave datum_b implicit, which clang's
** -Wmissing-field-initializers rejects; spell the comparison out. 64-bit
** comparisons: a masked one ignores the upper half (which the kernel ignores for
** these int arguments too), an equality demands it be zero, as glibc passes it. */
#define CMP(i, o, a, b)                                   \
  {                                                       \
    .arg = (i), .op = (o), .datum_a = (a), .datum_b = (b) \
  }

/* One rule: a syscall and up to two argument comparisons, all of which must hold. */
struct rule {
  int nr;
  unsigned ncmp;
  struct scmp_arg_cmp cmp[2];
};

/* Clears READ_IMPLIES_EXEC and installs the SIGSYS reporter: what the calling
** process needs before any worker filter is loaded. Returns 0 or -errno. */
static int prepare_process(airlock_layer *out)
{
  const char *name = "seccomp";
  /* READ_IMPLIES_EXEC turns every PROT_READ mmap (and brk) into an executable
  ** mapping in the kernel, after the filter saw a prot without PROT_EXEC.
  ** x86_64 binaries no longer get it since 5.8, but an inherited personality
  ** would still carry it: clear it before the filter removes personality(). */
  int persona = personality(0xffffffff);
  if (persona != -1 && (persona & READ_IMPLIES_EXEC) != 0 &&
      personality((unsigned long)persona & ~(unsigned long)READ_IMPLIES_EXEC) == -1) {
    int e = errno;
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, e, "cannot clear READ_IMPLIES_EXEC: %s",
                       airlock_strerror(e));
    return -e;
  }

  /* The reporting handler (see on_sigsys). */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigfillset(&sa.sa_mask);
  if (sigaction(SIGSYS, &sa, NULL) != 0) {
    int e = errno;
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, e, "sigaction(SIGSYS): %s", airlock_strerror(e));
    return -e;
  }
  sigset_t sys;
  sigemptyset(&sys);
  sigaddset(&sys, SIGSYS);
  sigprocmask(SIG_UNBLOCK, &sys, NULL);
  return 0;
}

#define WORKER_FILTER_DETAIL                                                             \
  "allowlist of %d syscalls%s; others trap, are named on stderr and end the process by " \
  "SIGSYS; other arch and x32: %s; mmap anonymous non-exec, no mprotect, tgkill self SIGABRT only"
#define WORKER_FILTER_RULES 16

/* Builds the worker's filter for a process whose pid is tgid into *pctx. */
static int build_worker_filter(long tgid, scmp_filter_ctx *pctx, const char **kill_word, airlock_layer *out)
{
  const char *name = "seccomp";
  int rc;
  const struct rule rules[] = {
      ALLOW(SCMP_SYS(read)),
      ALLOW(SCMP_SYS(poll)),
      ALLOW(SCMP_SYS(sendmsg)),
      ALLOW(SCMP_SYS(write)),
      ALLOW(SCMP_SYS(writev)),
      {SCMP_SYS(mmap),
       2,
       {CMP(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0),                   /* prot: no PROT_EXEC */
        CMP(3, SCMP_CMP_MASKED_EQ, MAP_ANONYMOUS, MAP_ANONYMOUS)}}, /* flags */
      ALLOW(SCMP_SYS(munmap)),
      ALLOW(SCMP_SYS(mremap)),
      ALLOW(SCMP_SYS(brk)),
      ALLOW(SCMP_SYS(clock_gettime)),
      ALLOW(SCMP_SYS(exit_group)),
      ALLOW(SCMP_SYS(rt_sigreturn)),
      ALLOW(SCMP_SYS(rt_sigprocmask)),
      ALLOW(SCMP_SYS(getpid)),
      ALLOW(SCMP_SYS(gettid)),
      {SCMP_SYS(tgkill),
       2,
       {CMP(0, SCMP_CMP_EQ, (scmp_datum_t)tgid, 0), /* tgid: ourselves */
        CMP(2, SCMP_CMP_EQ, SIGABRT, 0)}},          /* sig */
  };
  const size_t nrules = sizeof rules / sizeof rules[0];
  _Static_assert(sizeof rules / sizeof rules[0] == WORKER_FILTER_RULES, "update WORKER_FILTER_RULES");
  const int die_nr = SCMP_SYS(afs_syscall); /* the SIGSYS handler's way out */

  /* KILL_PROCESS (4.14) ends every thread at once; KILL_THREAD would leave the
  ** others running. libseccomp refuses it on a kernel without it, and then the
  ** thread kill is the best there is: single-threaded, same effect. It is the
  ** action for foreign architectures and x32; the default is the trap above. */
  *kill_word = "kill-process";
  uint32_t kill = SCMP_ACT_KILL_PROCESS;
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_TRAP);
  if (ctx != NULL && seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, kill) != 0) {
    kill = SCMP_ACT_KILL_THREAD;
    *kill_word = "kill-thread (kernel lacks kill-process)";
  }
  if (ctx == NULL) {
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, ENOMEM, "seccomp_init failed");
    return -ENOMEM;
  }

  /* The context holds only the native architecture. A syscall from any other
  ** ABI (int $0x80 on x86_64 is AUDIT_ARCH_I386) takes the bad-arch action,
  ** which defaults to KILL_THREAD: make it the process. libseccomp's x86_64
  ** filter also sends numbers with __X32_SYSCALL_BIT to bad-arch (x32 shares
  ** AUDIT_ARCH_X86_64, so the arch check alone would not catch it); the tests
  ** verify both. SYSRAWRC makes seccomp_load return the kernel's errno instead
  ** of -ECANCELED. no_new_privs is set by seccomp_load (CTL_NNP defaults to 1). */
  if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, kill)) != 0 ||
      (rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1)) != 0 ||
      (rc = seccomp_attr_set(ctx, SCMP_FLTATR_API_SYSRAWRC, 1)) != 0) {
    seccomp_release(ctx);
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, -rc, "seccomp_attr_set: %s", airlock_strerror(-rc));
    return rc;
  }

  for (size_t i = 0; i < nrules; i++) {
    rc = seccomp_rule_add_exact_array(ctx, SCMP_ACT_ALLOW, rules[i].nr, rules[i].ncmp, rules[i].cmp);
    if (rc != 0) {
      char *sys = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, rules[i].nr);
      airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, -rc, "rule for %s: %s", sys != NULL ? sys : "?",
                         airlock_strerror(-rc));
      free(sys);
      seccomp_release(ctx);
      return rc;
    }
  }

  rc = seccomp_rule_add_exact(ctx, kill, die_nr, 0);
  if (rc != 0) {
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, -rc, "rule for afs_syscall: %s",
                       airlock_strerror(-rc));
    seccomp_release(ctx);
    return rc;
  }
  *pctx = ctx;
  return 0;
}

int airlock_confine_seccomp_worker(airlock_layer *out)
{
  const char *name = "seccomp", *kill_word;
  scmp_filter_ctx ctx;
  int rc = prepare_process(out);
  if (rc == 0) rc = build_worker_filter((long)getpid(), &ctx, &kill_word, out);
  if (rc != 0) return rc;

  /* The report is written before the load: after it, only allowed syscalls may
  ** run, and vsnprintf into a fixed buffer needs none, but nothing is gained by
  ** finding out. seccomp_release after the load only frees (brk/munmap). */
  airlock_layer_set_(out, name, AIRLOCK_LAYER_APPLIED, 0, WORKER_FILTER_DETAIL, WORKER_FILTER_RULES, "",
                     kill_word);
  rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) {
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, -rc, "seccomp_load: %s", airlock_strerror(-rc));
    return rc;
  }
  return 0;
}

int airlock_seccomp_worker_program(long tgid, void **prog, size_t *len, char *err, size_t errlen)
{
  airlock_layer l;
  const char *kill_word;
  scmp_filter_ctx ctx;
  *prog = NULL;
  *len = 0;
  memset(&l, 0, sizeof l);
  int rc = build_worker_filter(tgid, &ctx, &kill_word, &l);
  if (rc != 0) {
    snprintf(err, errlen, "%s", l.detail);
    return rc;
  }
  struct sock_fprog fp;
  rc = airlock_seccomp_export_(ctx, &fp, err, errlen);
  if (rc != 0) return rc;
  *prog = fp.filter;
  *len = fp.len * sizeof(struct sock_filter);
  return 0;
}

int airlock_seccomp_export_(void *ctx, struct sock_fprog *out, char *err, size_t errlen)
{
  int rc;
  out->filter = NULL;
  out->len = 0;
  /* libseccomp 2.5 exports only to an fd: a memfd, read back whole. */
  int fd = memfd_create("airlock-seccomp", MFD_CLOEXEC);
  if (fd < 0) {
    rc = -errno;
    snprintf(err, errlen, "seccomp: memfd_create: %s", airlock_strerror(-rc));
    seccomp_release(ctx);
    return rc;
  }
  rc = seccomp_export_bpf(ctx, fd);
  seccomp_release(ctx);
  off_t size = rc == 0 ? lseek(fd, 0, SEEK_END) : -1;
  if (rc != 0 || size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
      size > (off_t)(BPF_MAXINSNS * sizeof(struct sock_filter))) {
    snprintf(err, errlen, "seccomp: seccomp_export_bpf: %s",
             rc != 0 ? airlock_strerror(-rc) : "the program is empty or too long");
    close(fd);
    return rc != 0 ? rc : -E2BIG;
  }
  struct sock_filter *insns = malloc((size_t)size);
  if (insns == NULL || pread(fd, insns, (size_t)size, 0) != (ssize_t)size) {
    rc = insns == NULL ? -ENOMEM : -EIO;
    snprintf(err, errlen, "seccomp: reading the exported program: %s", airlock_strerror(-rc));
    free(insns);
    close(fd);
    return rc;
  }
  close(fd);
  out->len = (unsigned short)((size_t)size / sizeof(struct sock_filter));
  out->filter = insns;
  return 0;
}

int airlock_confine_seccomp_program(const void *prog, size_t len, airlock_layer *out)
{
  const char *name = "seccomp";
  if (prog == NULL || len == 0 || len % sizeof(struct sock_filter) != 0 ||
      len > BPF_MAXINSNS * sizeof(struct sock_filter)) {
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, EINVAL,
                       "the precompiled program has a bad size (%zu bytes)", len);
    return -EINVAL;
  }
  /* The kernel copies the program at load; an aligned copy for sock_fprog. */
  struct sock_filter insns[BPF_MAXINSNS];
  memcpy(insns, prog, len);
  struct sock_fprog fprog = {.len = (unsigned short)(len / sizeof(struct sock_filter)), .filter = insns};
  int rc = prepare_process(out);
  if (rc != 0) return rc;
  airlock_layer_set_(out, name, AIRLOCK_LAYER_APPLIED, 0, WORKER_FILTER_DETAIL, WORKER_FILTER_RULES,
                     " (compiled once by the parent)", "kill-process");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) != 0) {
    int e = errno;
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, e, "loading the precompiled program: %s",
                       airlock_strerror(e));
    return -e;
  }
  return 0;
}

const char *airlock_syscall_name(long nr, char *buf, size_t len)
{
  char *name = nr >= 0 && nr < 100000 ? seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, (int)nr) : NULL;
  snprintf(buf, len, "%s", name != NULL ? name : "unknown");
  free(name);
  return buf;
}

int airlock_refusal_errno(long nr)
{
  char name[64];
  airlock_syscall_name(nr, name, sizeof name);
  /* Sockets of a kind the policy does not promise: as if the family did not
  ** exist (programs then report "address family not supported", or fall back). */
  static const char *const sockets[] = {"socket", "socketpair", NULL};
  /* Features a program probes for and does without when the kernel lacks them. */
  static const char *const probes[] = {
      "io_uring_setup", "io_uring_enter",          "io_uring_register", "memfd_secret",
      "pkey_alloc",     "landlock_create_ruleset", "unknown",           NULL};
  for (size_t i = 0; sockets[i]; i++)
    if (strcmp(name, sockets[i]) == 0) return EAFNOSUPPORT;
  for (size_t i = 0; probes[i]; i++)
    if (strcmp(name, probes[i]) == 0) return ENOSYS;
  return EPERM; /* everything else asks for a privilege the run does not have */
}
