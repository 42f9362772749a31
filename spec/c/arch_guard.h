/*
** arch_guard.h -- for the C confinement tests: whether this machine runs i386
** system calls through int $0x80 at all (a control, unconfined), and whether a
** compiled seccomp program kills every call of a foreign architecture (what
** airlock controls, checked in the program itself where the attack cannot be
** tried). Some kernels build IA32 emulation in but turn it off (ia32_emulation=0,
** or a VM's own choice): there int $0x80 faults with SIGSEGV before any filter
** sees it.
*/
#ifndef AIRLOCK_ARCH_GUARD_H
#define AIRLOCK_ARCH_GUARD_H

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__)
/* The control: an unconfined child makes the i386 getpid (20) through int
** $0x80 and exits 0 if the answer is its pid. Returns 1 when that worked. */
static inline int ia32_syscalls_work(void)
{
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
    _exit(ret == (long)getpid() ? 0 : 1);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}
#endif

/* 1 when the program starts by loading seccomp_data.arch and sends every
** architecture but the native one to a kill (process or thread): the guard
** that stops i386 and any other foreign ABI before a rule is looked at. */
static inline int bpf_kills_foreign_arch(const struct sock_filter *f, size_t n)
{
#if defined(__x86_64__)
  const unsigned native = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  const unsigned native = AUDIT_ARCH_AARCH64;
#else
  const unsigned native = 0;
#endif
  if (native == 0 || n < 3) return 0;
  if (f[0].code != (BPF_LD | BPF_W | BPF_ABS) || f[0].k != offsetof(struct seccomp_data, arch)) return 0;
  if (f[1].code != (BPF_JMP | BPF_JEQ | BPF_K) || f[1].k != native || f[1].jt != 0) return 0;
  size_t miss = 2 + (size_t)f[1].jf;
  if (miss >= n || BPF_CLASS(f[miss].code) != BPF_RET) return 0;
  unsigned action = f[miss].k & SECCOMP_RET_ACTION_FULL;
  return action == SECCOMP_RET_KILL_PROCESS || action == SECCOMP_RET_KILL_THREAD;
}

#endif
