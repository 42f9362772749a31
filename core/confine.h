/*
** confine.h -- the confinement layers a child applies to itself (Landlock,
** seccomp, no_new_privs, rlimits) and the probe of what this kernel enforces.
** Same conventions as airlock.h: 0 or -errno, messages into caller buffers, no I/O.
*/
#ifndef AIRLOCK_CONFINE_H
#define AIRLOCK_CONFINE_H

#include <stdint.h>

/* One layer's outcome, for the ready frame and results. */
typedef struct airlock_layer {
  const char *name;        /* "seccomp", "landlock", "no_new_privs", "rlimits", ... */
  int status;              /* AIRLOCK_LAYER_APPLIED, _SKIPPED, _FAILED */
  int err;                 /* errno when failed or skipped for an errno reason */
  char detail[256];        /* e.g. "ABI 7: fs rights 0x..., net, scope signal+abstract" or why skipped */
} airlock_layer;
enum { AIRLOCK_LAYER_APPLIED = 1, AIRLOCK_LAYER_SKIPPED, AIRLOCK_LAYER_FAILED };
/* "applied", "skipped", "failed"; "unknown" for any other value. */
const char *airlock_layer_status_name(int status);

/* Landlock ABI of the running kernel (>= 1), or -errno (-ENOSYS, -EOPNOTSUPP when disabled). */
int airlock_landlock_abi(void);

/* Restricts the calling thread (and its future children) with a ruleset that
** handles every filesystem right the ABI knows, TCP bind/connect on ABI >= 4, and
** scopes signals + abstract unix sockets on ABI >= 6, with NO rules: no file can
** be opened, no TCP, no signals or abstract sockets outside the domain. Sets
** PR_SET_NO_NEW_PRIVS first (idempotent). Only the calling thread is restricted:
** call it before any other thread exists. Fills *out (may be NULL).
** Returns 0, or -errno (the layer is then skipped when the kernel lacks
** Landlock, failed otherwise). */
int airlock_confine_landlock_deny_all(airlock_layer *out);

/* PR_SET_NO_NEW_PRIVS, checked with PR_GET_NO_NEW_PRIVS. Fills *out (may be NULL). */
int airlock_confine_no_new_privs(airlock_layer *out);

/* Loads the worker's seccomp allowlist (see confine_seccomp.c for every entry
** and why). Any other call is refused unexecuted and ends the process by SIGSYS
** after one line naming it on stderr (AIRLOCK_SECCOMP_REPORT; this installs a
** SIGSYS handler); foreign architectures and x32 numbers kill the process at
** once. mmap only anonymous and never executable, no mprotect at all. Sets
** no_new_privs. Nothing after the load needs a syscall outside the list. Fills
** *out. Returns 0 or -errno. */
int airlock_confine_seccomp_worker(airlock_layer *out);

/* The same filter, compiled in the parent for a worker whose pid will be tgid
** (1 in a new pid namespace), as classic BPF: *prog (malloc'd, the caller
** frees) of *len bytes. Building costs ~0.2 ms; loading a ready program ~0.02. */
int airlock_seccomp_worker_program(long tgid, void **prog, size_t *len, char *err, size_t errlen);
/* Loads such a program into the calling process, with the same SIGSYS reporter
** and personality fix as airlock_confine_seccomp_worker, and no_new_privs.
** The caller vouches that the program was made for its pid. Returns 0 or -errno. */
int airlock_confine_seccomp_program(const void *prog, size_t len, airlock_layer *out);

/* The native architecture's name for system call number nr ("socket"), or
** "unknown". Writes into buf and returns it. For explaining SIGSYS deaths:
** a confined process reports "airlock: seccomp: blocked system call N" on stderr. */
const char *airlock_syscall_name(long nr, char *buf, size_t len);
#define AIRLOCK_SECCOMP_REPORT "airlock: seccomp: blocked system call "

/* rlimits for the spawner. Each set bit of set_mask sets soft = hard = the
** field's value (UINT64_MAX means unlimited), except cpu (seconds), whose hard
** limit is one second above the soft one so that SIGXCPU comes before SIGKILL. */
typedef struct airlock_rlimits {
  uint64_t as, cpu, nofile, nproc, fsize, core, stack;
  int set_mask;
} airlock_rlimits;
#define AIRLOCK_RL_AS     0x01
#define AIRLOCK_RL_CPU    0x02
#define AIRLOCK_RL_NOFILE 0x04
#define AIRLOCK_RL_NPROC  0x08
#define AIRLOCK_RL_FSIZE  0x10
#define AIRLOCK_RL_CORE   0x20
#define AIRLOCK_RL_STACK  0x40
#define AIRLOCK_RL_ALL_   0x7f
/* Applies rl in field order and stops at the first failure. Safe in a vfork
** child: no allocation, no locks, only setrlimit(2) (whose errno write lands in
** the parent's errno there; rely on the return value). Returns 0, -EINVAL for
** NULL or unknown bits, or setrlimit's -errno. Note: the kernel does not
** enforce RLIMIT_NPROC on the initial user's root nor on CAP_SYS_RESOURCE /
** CAP_SYS_ADMIN holders. */
int airlock_apply_rlimits(const airlock_rlimits *rl);

/* What this kernel and privilege level can enforce, for `airlock probe`.
** "works" fields are 1, or -errno saying why not (0 only where noted). */
typedef struct airlock_probe_report {
  int landlock_abi;            /* ABI >= 1, or -errno */
  int seccomp;                 /* 1 if seccomp filter mode works */
  int seccomp_kill_process;    /* 1 if SECCOMP_RET_KILL_PROCESS is available */
  int user_ns;                 /* 1 if unshare(CLONE_NEWUSER) works in a forked child */
  int net_ns, pid_ns, mount_ns, ipc_ns, uts_ns, cgroup_ns; /* same; unprivileged:
                                  together with CLONE_NEWUSER, as the spawner would */
  int pidfd;                   /* 1 if pidfd_open works */
  int cgroup2_delegated;       /* 1 if /sys/fs/cgroup is cgroup2 and the current cgroup is writable, else 0 */
  int unprivileged_userns_clone; /* /proc/sys/kernel/unprivileged_userns_clone or -1 if absent */
  int apparmor_restrict_userns;  /* /proc/sys/kernel/apparmor_restrict_unprivileged_userns or -1 */
  int is_root;                 /* effective uid 0 */
} airlock_probe_report;
/* Fills *r; forks short-lived children for the namespace checks. Returns 0 or
** -EINVAL for NULL (every other failure is a field value). */
int airlock_probe(airlock_probe_report *r);

/* Internal to confine*.c: fills *out (when not NULL) with a formatted detail. */
void airlock_layer_set_(airlock_layer *out, const char *name, int status, int err,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
