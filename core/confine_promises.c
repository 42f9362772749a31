/*
** confine_promises.c -- the promise words of a seccomp allowlist, in the spirit
** of OpenBSD's pledge(2), and the dangerous set every denylist refuses.
**
** Each word is a documented list of system call names (x86_64 spelling; a
** name this architecture lacks, like "open" on arm64, is skipped). A name may
** carry an argument filter in parentheses, which confine_prepare.c turns into
** libseccomp comparisons:
**
**   name(A|B|...)    allowed only when the call's key argument is one of the
**                    values (socket: the domain; ioctl: the request; prlimit64:
**                    the pid, "self" = 0; newfstatat/statx: AT_EMPTY_PATH in the
**                    flags; clone: "no-namespaces" = none of the CLONE_NEW* flags)
**   name(V=ERRNO)    this value is refused softly, with ERRNO, whatever the
**                    refusal mode: libc probes it and falls back (getpwuid() and
**                    glibc's resolver ask nscd over AF_UNIX before they read
**                    /etc/passwd or send a query themselves)
**   name(=ERRNO)     the call is refused softly as a whole (clone3's flags sit in
**                    a struct seccomp cannot read, so it answers ENOSYS and glibc
**                    falls back to clone, whose flags it can read)
**   open/openat(rdonly|write|create)  the file-opening modes: the union of the
**                    promised modes decides which flags may be passed (rpath:
**                    O_RDONLY without O_TRUNC; wpath: any access mode and O_TRUNC;
**                    cpath: O_CREAT and O_TMPFILE); creat needs wpath and cpath.
**
** An allowed name wins over a soft refusal of the same value, and a plain name
** over any filtered form of it. What no word grants (mount, ptrace, bpf, ...)
** is refused, by death or by errno as the spec says.
**
** Limits, stated plainly: seccomp reads registers, never memory, so paths,
** socket addresses and struct arguments are beyond it: Landlock decides which
** files and TCP ports are reachable; seccomp only which kinds of call exist.
** "stdio" keeps mmap/mprotect with PROT_EXEC, because a program started by the
** spawner runs its dynamic loader under the filter.
*/
#include <stddef.h>
#include <string.h>

#include "confine.h"

/* Always allowed in allowlist mode, whatever the words: a process may end, a
** signal handler may return, and the two struct-argument calls answer ENOSYS so
** libc falls back to their filterable forms. */
const airlock_promise airlock_promise_always = {
    "(always)",
    "ending the process and returning from signal handlers; clone3 and openat2 answer ENOSYS",
    "exit exit_group rt_sigreturn restart_syscall clone3(=ENOSYS) openat2(=ENOSYS)",
};

const airlock_promise airlock_promises[] = {
    {"stdio",
     "I/O on descriptors already open, memory, time, signals to itself, pipes, polling, "
     "identity queries, send/recv and queries on sockets already open, terminal queries (TCGETS)",
     /* descriptors */
     "read readv pread64 preadv preadv2 write writev pwrite64 pwritev pwritev2 lseek "
     "close close_range dup dup2 dup3 fcntl fstat newfstatat(AT_EMPTY_PATH) statx(AT_EMPTY_PATH) "
     "fstatfs ftruncate fsync fdatasync fadvise64 sendfile splice tee copy_file_range "
     /* memory: mmap keeps PROT_EXEC, the dynamic loader of a spawned program needs it */
     "mmap munmap mremap mprotect madvise msync mincore brk membarrier "
     /* threads and the C runtime's start-up */
     "futex futex_waitv set_robust_list get_robust_list set_tid_address rseq arch_prctl "
     "prctl(PR_SET_NAME|PR_GET_NAME) "
     /* time */
     "clock_gettime clock_getres clock_nanosleep nanosleep gettimeofday time getitimer setitimer "
     "alarm timer_create timer_settime timer_gettime timer_getoverrun timer_delete "
     "timerfd_create timerfd_settime timerfd_gettime "
     /* signals (to itself: kill and tgkill are 'proc') */
     "rt_sigaction rt_sigprocmask rt_sigpending rt_sigsuspend rt_sigtimedwait sigaltstack pause "
     /* identity and limits, read-only (prlimit64 on itself may also lower its own limits) */
     "getpid gettid getppid getuid geteuid getgid getegid getresuid getresgid getgroups "
     "getpgrp getpgid getsid capget getrlimit prlimit64(self) getrusage sysinfo uname umask "
     "getrandom getcpu sched_yield sched_getaffinity sched_getparam sched_getscheduler "
     "sched_get_priority_max sched_get_priority_min "
     /* pipes and waiting */
     "pipe pipe2 poll ppoll select pselect6 epoll_create epoll_create1 epoll_ctl epoll_wait "
     "epoll_pwait epoll_pwait2 eventfd eventfd2 signalfd signalfd4 "
     /* sockets already open (OpenBSD's stdio has these too; making one is inet/unix) */
     "sendto recvfrom sendmsg recvmsg sendmmsg recvmmsg getsockname getpeername getsockopt "
     /* isatty(), window size, non-blocking and close-on-exec toggles */
     "ioctl(TCGETS|TIOCGWINSZ|FIONREAD|FIONBIO|FIOCLEX|FIONCLEX)"},
    {"rpath",
     "opening files read-only, stat, access, readlink, listing directories, the working directory; "
     "user and group lookups (glibc asks nscd over AF_UNIX first: that socket fails with EACCES, "
     "so it falls back to reading /etc/passwd)",
     "open(rdonly) openat(rdonly) socket(AF_UNIX=EACCES) stat lstat newfstatat statx access faccessat "
     "faccessat2 "
     "readlink readlinkat getdents getdents64 getcwd chdir fchdir statfs "
     "getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr "
     "inotify_init inotify_init1 inotify_add_watch inotify_rm_watch"},
    {"wpath",
     "opening files for writing (any access mode, O_TRUNC), truncate, fallocate; sharing "
     "extents between files already open (FICLONE, as cp does: the target must be open for "
     "writing)",
     "open(write) openat(write) truncate fallocate ioctl(FICLONE|FICLONERANGE|FIDEDUPERANGE)"},
    {"cpath", "creating, removing, renaming and linking files and directories (O_CREAT, O_TMPFILE)",
     "open(create) openat(create) creat(create) mkdir mkdirat rmdir unlink unlinkat "
     "rename renameat renameat2 link linkat symlink symlinkat"},
    {"fattr", "changing modes, owners, times and extended attributes",
     "chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat utime utimes utimensat "
     "futimesat setxattr lsetxattr fsetxattr removexattr lremovexattr fremovexattr"},
    {"inet",
     "IPv4 and IPv6 sockets: create, connect, bind, listen, accept (Landlock's TCP port "
     "rules decide which ports)",
     "socket(AF_INET|AF_INET6) connect bind listen accept accept4 getsockname getpeername "
     "getsockopt setsockopt shutdown sendto recvfrom sendmsg recvmsg sendmmsg recvmmsg"},
    {"unix", "unix-domain sockets: create, socketpair, connect, bind, listen, accept",
     "socket(AF_UNIX) socketpair(AF_UNIX) connect bind listen accept accept4 getsockname "
     "getpeername getsockopt setsockopt shutdown sendto recvfrom sendmsg recvmsg sendmmsg "
     "recvmmsg"},
    {"dns",
     "what the C library's resolver needs: IPv4/IPv6 sockets to connect and send queries, "
     "no bind/listen/accept; its nscd (AF_UNIX) and netlink probes fail with EACCES",
     "socket(AF_INET|AF_INET6) socket(AF_UNIX=EACCES) socket(AF_NETLINK=EACCES) connect "
     "getsockname getpeername getsockopt setsockopt sendto recvfrom sendmsg recvmsg sendmmsg "
     "recvmmsg"},
    {"proc",
     "fork, clone without new namespaces, wait, signals to other processes, process groups, "
     "priorities and limits",
     "fork vfork clone(no-namespaces) clone3(=ENOSYS) wait4 waitid kill tkill tgkill "
     "setpgid setsid getpriority setpriority prlimit64 setrlimit sched_setaffinity "
     "sched_setparam sched_setscheduler pidfd_open pidfd_send_signal"},
    {"exec",
     "executing programs (a program the spawner starts needs it: its own execve runs under "
     "the filter)",
     "execve execveat"},
    {"id",
     "changing user and group ids and capabilities (still bound by the kernel's permission "
     "checks)",
     "setuid setgid setreuid setregid setresuid setresgid setgroups setfsuid setfsgid capset"},
    {"tty",
     "terminal control: modes, window size, foreground process group, taking a terminal "
     "that is no session's as the controlling one (never TIOCSTI)",
     "ioctl(TCGETS|TCSETS|TCSETSW|TCSETSF|TIOCGWINSZ|TIOCSWINSZ|TIOCGPGRP|TIOCSPGRP|TCFLSH|"
     "TCXONC|TIOCGSID|TIOCSCTTY)"},
    {NULL, NULL, NULL},
};

/* The denylist's built-in refusals, by what they would give away. */
const airlock_promise airlock_confine_dangerous[] = {
    {"debug", "reading or writing another process's memory or descriptors",
     "ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd process_madvise"},
    {"mount", "reshaping the file tree (reachable without privilege inside a user namespace)",
     "mount umount2 pivot_root chroot fsopen fsconfig fsmount fspick move_mount open_tree "
     "mount_setattr"},
    {"namespaces",
     "new namespaces, the way unprivileged code reaches root-only kernel paths (clone3 "
     "answers ENOSYS so glibc falls back to clone, whose flags are checked)",
     "unshare setns clone(namespaces) clone3(=ENOSYS)"},
    {"kernel",
     "large kernel attack surface and exploit primitives; io_uring runs operations seccomp "
     "never sees",
     "bpf perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register"},
    {"keys", "the kernel keyring, which is not namespaced", "keyctl add_key request_key"},
    {"modules", "loading kernel code or a new kernel",
     "init_module finit_module delete_module kexec_load kexec_file_load"},
    {"system",
     "machine-wide state: reboot, swap, accounting, the kernel log, clocks, host names, I/O "
     "ports, quotas; personality (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE weaken exploit "
     "mitigations); obsolete calls",
     "reboot swapon swapoff acct syslog settimeofday clock_settime clock_adjtime adjtimex "
     "sethostname setdomainname iopl ioperm modify_ldt vhangup quotactl quotactl_fd "
     "lookup_dcookie nfsservctl uselib _sysctl personality"},
    {"handles", "opening files by handle, around every path check (the 'shocker' container escape)",
     "name_to_handle_at open_by_handle_at"},
    {"tty", "typing into the controlling terminal (TIOCSTI) or driving the console (TIOCLINUX)",
     "ioctl(TIOCSTI|TIOCLINUX)"},
    {NULL, NULL, NULL},
};

const char *airlock_promise_syscalls(const char *word)
{
  if (word == NULL) return NULL;
  for (const airlock_promise *p = airlock_promises; p->word != NULL; p++)
    if (strcmp(p->word, word) == 0) return p->syscalls;
  return NULL;
}
