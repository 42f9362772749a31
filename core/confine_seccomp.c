/*
** confine_seccomp.c -- the worker's seccomp allowlist (libseccomp), default kill-process.
** Measured with strace on a Lua 5.4 workload after startup plus glibc's abort path;
** every entry below says why it is there, and what was left out says why not.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <unistd.h>

#include <seccomp.h>

#include "confine.h"

/*
** The allowlist. Once the worker is confined it only reads and writes fd 3 (the
** channel) and fd 2 (stderr), allocates memory, reads a clock, and exits.
**
**   read            the channel (fd 3): init and reply frames.
**   write           the channel and stderr (worker_die messages, stdio flush at exit).
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
**   rt_sigreturn,   the worker installs no signal handler (SIG_IGN needs none),
**   rt_sigaction    and restart_syscall is only for interrupted sleeps/polls,
**   restart_syscall none of which are allowed.
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

#define ALLOW(nr) { (nr), 0, { { 0, 0, 0, 0 }, { 0, 0, 0, 0 } } }
/* libseccomp's SCMP_An macros leave datum_b implicit, which clang's
** -Wmissing-field-initializers rejects; spell the comparison out. 64-bit
** comparisons: a masked one ignores the upper half (which the kernel ignores for
** these int arguments too), an equality demands it be zero, as glibc passes it. */
#define CMP(i, o, a, b) { .arg = (i), .op = (o), .datum_a = (a), .datum_b = (b) }

/* One rule: a syscall and up to two argument comparisons, all of which must hold. */
struct rule {
  int nr;
  unsigned ncmp;
  struct scmp_arg_cmp cmp[2];
};

int airlock_confine_seccomp_worker(airlock_layer *out)
{
  const char *name = "seccomp";
  int rc;

  /* READ_IMPLIES_EXEC turns every PROT_READ mmap (and brk) into an executable
  ** mapping in the kernel, after the filter saw a prot without PROT_EXEC.
  ** x86_64 binaries no longer get it since 5.8, but an inherited personality
  ** would still carry it: clear it before the filter removes personality(). */
  int persona = personality(0xffffffff);
  if (persona != -1 && (persona & READ_IMPLIES_EXEC) != 0 &&
      personality((unsigned long)persona & ~(unsigned long)READ_IMPLIES_EXEC) == -1) {
    int e = errno;
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, e,
                       "cannot clear READ_IMPLIES_EXEC: %s", strerror(e));
    return -e;
  }

  const struct rule rules[] = {
    ALLOW(SCMP_SYS(read)),
    ALLOW(SCMP_SYS(write)),
    ALLOW(SCMP_SYS(writev)),
    { SCMP_SYS(mmap), 2, {
        CMP(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0),               /* prot: no PROT_EXEC */
        CMP(3, SCMP_CMP_MASKED_EQ, MAP_ANONYMOUS, MAP_ANONYMOUS) } },  /* flags */
    ALLOW(SCMP_SYS(munmap)),
    ALLOW(SCMP_SYS(mremap)),
    ALLOW(SCMP_SYS(brk)),
    ALLOW(SCMP_SYS(clock_gettime)),
    ALLOW(SCMP_SYS(exit_group)),
    ALLOW(SCMP_SYS(rt_sigprocmask)),
    ALLOW(SCMP_SYS(getpid)),
    ALLOW(SCMP_SYS(gettid)),
    { SCMP_SYS(tgkill), 2, {
        CMP(0, SCMP_CMP_EQ, (scmp_datum_t)getpid(), 0),          /* tgid: ourselves */
        CMP(2, SCMP_CMP_EQ, SIGABRT, 0) } },                     /* sig */
  };
  const size_t nrules = sizeof rules / sizeof rules[0];

  /* KILL_PROCESS (4.14) ends every thread at once; KILL_THREAD would leave the
  ** others running. libseccomp refuses it at init on a kernel without it, and
  ** then the thread kill is the best there is: single-threaded, same effect. */
  const char *kill_word = "kill-process";
  uint32_t kill = SCMP_ACT_KILL_PROCESS;
  scmp_filter_ctx ctx = seccomp_init(kill);
  if (ctx == NULL) {
    kill = SCMP_ACT_KILL_THREAD;
    kill_word = "kill-thread (kernel lacks kill-process)";
    ctx = seccomp_init(kill);
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
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, -rc,
                       "seccomp_attr_set: %s", strerror(-rc));
    return rc;
  }

  for (size_t i = 0; i < nrules; i++) {
    rc = seccomp_rule_add_exact_array(ctx, SCMP_ACT_ALLOW, rules[i].nr, rules[i].ncmp,
                                      rules[i].cmp);
    if (rc != 0) {
      char *sys = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, rules[i].nr);
      airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, -rc, "rule for %s: %s",
                         sys != NULL ? sys : "?", strerror(-rc));
      free(sys);
      seccomp_release(ctx);
      return rc;
    }
  }

  /* The report is written before the load: after it, only allowed syscalls may
  ** run, and vsnprintf into a fixed buffer needs none, but nothing is gained by
  ** finding out. seccomp_release after the load only frees (brk/munmap). */
  airlock_layer_set_(out, name, AIRLOCK_LAYER_APPLIED, 0,
                     "allowlist of %zu syscalls, default %s; native arch only, x32 killed, "
                     "mmap anonymous non-exec, no mprotect, tgkill self SIGABRT only",
                     nrules, kill_word);
  rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) {
    airlock_layer_set_(out, name, AIRLOCK_LAYER_FAILED, -rc, "seccomp_load: %s", strerror(-rc));
    return rc;
  }
  return 0;
}
