/*
** confine.h -- the confinement layers a child applies to itself (Landlock,
** seccomp, no_new_privs, rlimits) and the probe of what this kernel enforces.
** Same conventions as airlock.h: 0 or -errno, messages into caller buffers, no I/O.
*/
#ifndef AIRLOCK_CONFINE_H
#define AIRLOCK_CONFINE_H

#include <stddef.h>
#include <stdint.h>
#include <linux/filter.h>

/* One layer's outcome, for the ready frame and results. */
typedef struct airlock_layer {
  const char *name; /* "seccomp", "landlock", "no_new_privs", "rlimits", ... */
  int status;       /* AIRLOCK_LAYER_APPLIED, _SKIPPED, _FAILED */
  int err;          /* errno when failed or skipped for an errno reason */
  char detail[256]; /* e.g. "ABI 7: fs rights 0x..., net, scope signal+abstract" or why skipped */
} airlock_layer;
enum { AIRLOCK_LAYER_APPLIED = 1, AIRLOCK_LAYER_SKIPPED, AIRLOCK_LAYER_FAILED };
/* "applied", "skipped", "failed"; "unknown" for any other value. */
const char *airlock_layer_status_name(int status);

/* Landlock ABI of the running kernel (>= 1), or -errno (-ENOSYS, -EOPNOTSUPP when disabled). */
int airlock_landlock_abi(void);

/* The rules of a Landlock ruleset. Lists are NULL-terminated and may be NULL;
** zeroed = no rule at all (nothing may be opened, no TCP). */
typedef struct airlock_landlock_rules {
  const char *const *read;  /* read_file + read_dir beneath each path */
  const char *const *write; /* write_file, remove_*, make_{reg,dir,sock,fifo,sym},
                               refer (ABI 2), truncate (ABI 3), ioctl_dev (ABI 5) */
  const char *const *exec;  /* execute + read_file + read_dir */
  const uint16_t *bind;     /* ABI >= 4: TCP ports that may be bound */
  size_t n_bind;
  const uint16_t *connect; /* ABI >= 4: TCP ports that may be connected to */
  size_t n_connect;
  int no_scope; /* 1: signals and abstract unix sockets not scoped (ABI >= 6) */
} airlock_landlock_rules;

/* A ruleset handling every right the running ABI knows, with rules r (NULL:
** none), each listed path opened O_PATH (a missing one is an error naming it).
** Fills *out with what it will enforce (APPLIED), or why not (SKIPPED: no
** Landlock here; FAILED). Returns the ruleset fd (O_CLOEXEC) or -errno;
** *handled_fs (may be NULL) gets the filesystem rights handled. */
int airlock_landlock_ruleset(const airlock_landlock_rules *r, uint64_t *handled_fs, airlock_layer *out);
/* Sets no_new_privs and restricts the calling thread (and its future children)
** with the ruleset. Only the calling thread: call it before any other thread
** exists. Returns 0, or -errno with *out set FAILED. */
int airlock_landlock_enforce(int ruleset_fd, airlock_layer *out);

/* Restricts the calling thread (and its future children) with a ruleset that
** handles every filesystem right the ABI knows, TCP bind/connect on ABI >= 4, and
** scopes signals + abstract unix sockets on ABI >= 6, with NO rules: no file can
** be opened, no TCP, no signals or abstract sockets outside the domain. Sets
** PR_SET_NO_NEW_PRIVS first (idempotent). Only the calling thread is restricted:
** call it before any other thread exists. Fills *out (may be NULL).
** Returns 0, or -errno (the layer is then skipped when the kernel lacks
** Landlock, failed otherwise). */
int airlock_confine_landlock_deny_all(airlock_layer *out);

/* ------------------------------------------------------------------ the layer table */

/* The confinement layers a process sets on itself with one call, as one table
** (confine_layers.c): the spawner's child sets each one a start asks for
** (airlock_spawn_opts.layers, bit i for row i; b:_start's option of the row's
** name), a guest's worker each one its init frame asks for (confine.NAME,
** before Landlock and seccomp), the probe asks each whether this kernel has
** it, and each reports under its name, the word the policy schema's LAYERS
** spells. Such a layer is added as one row here. */
typedef struct airlock_confine_layer {
  const char *name;                 /* the report word; b:_start's option; the init field */
  int (*apply)(airlock_layer *out); /* sets it on the calling process: 0 or -errno. With out
                                       NULL it makes system calls only (it runs in the
                                       spawner's child, which may share the caller's memory) */
  int (*available)(void);           /* 1: this kernel has it, 0: not; NULL: every kernel */
  const char *has, *lacks;          /* the probe's line, either way */
  unsigned flags;                   /* AIRLOCK_CL_* */
} airlock_confine_layer;
#define AIRLOCK_CL_WORKER 1u /* a guest's worker sets it on itself */
#define AIRLOCK_CL_OWN_MM                                                              \
  2u                      /* a property of the address space: the spawner's child gets \
                             a copy of the caller's (no CLONE_VM), which it would mark */
#define AIRLOCK_CL_MAX 16 /* rows at most (bits of airlock_spawn_opts.layers) */
extern const airlock_confine_layer airlock_confine_layers[]; /* ends with a NULL name */
/* The row named name, or NULL; its bit in airlock_spawn_opts.layers, or 0. */
const airlock_confine_layer *airlock_confine_layer_named(const char *name);
unsigned airlock_confine_layer_bit(const char *name);

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65 /* newer than Debian 12's headers */
#define PR_GET_MDWE 66
#endif
#ifndef PR_MDWE_REFUSE_EXEC_GAIN
#define PR_MDWE_REFUSE_EXEC_GAIN (1UL << 0)
#endif

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
/* The one table of rlimits: the name policies and the Lua API use ("nofile"),
** its set_mask bit, the RLIMIT_* resource and the field of airlock_rlimits.
** Ends with a NULL name. */
typedef struct airlock_rlimit_kind {
  const char *name;
  int bit, resource;
  size_t off;
} airlock_rlimit_kind;
extern const airlock_rlimit_kind airlock_rlimit_kinds[];
/* Applies rl in field order and stops at the first failure. Safe in a vfork
** child: no allocation, no locks, only setrlimit(2) (whose errno write lands in
** the parent's errno there; rely on the return value). Returns 0, -EINVAL for
** NULL or unknown bits, or setrlimit's -errno. Note: the kernel does not
** enforce RLIMIT_NPROC on the initial user's root nor on CAP_SYS_RESOURCE /
** CAP_SYS_ADMIN holders. */
int airlock_apply_rlimits(const airlock_rlimits *rl);

/* The cgroups made for one child (confine_cgroup.c): on cgroup v1 one per
** hierarchy a limit needs (pids, memory, cpu with cpuacct), at the caller's own
** cgroup in each; on cgroup v2 one, at the caller's cgroup when the controllers
** are delegated to its children. */
#define AIRLOCK_CGROUP_MAX 4
enum { AIRLOCK_CGROUP_PIDS, AIRLOCK_CGROUP_MEMORY, AIRLOCK_CGROUP_CPU, AIRLOCK_CGROUP_CPUACCT };
typedef struct airlock_cgroup {
  int procs_fd[AIRLOCK_CGROUP_MAX];   /* each one's cgroup.procs, open for writing, or -1; the
                                    spawner's child writes "0" into each first
                                    (airlock_spawn_opts.cgroup_fds) */
  char path[AIRLOCK_CGROUP_MAX][512]; /* v1: by controller; v2: path[0]; "" when none */
  int v2;
} airlock_cgroup;
typedef struct airlock_cgroup_limits {
  uint64_t pids_max;   /* pids.max; 0: no pids cgroup */
  uint64_t memory_max; /* bytes, memory.max / memory.limit_in_bytes (and swap: none
                          beyond it); 0: no memory cgroup */
  uint32_t cpu_millis; /* CPU rate in thousandths of a core (1000: one core), as
                          cpu.max / cfs_quota_us over 100 ms; 0: no cpu cgroup */
} airlock_cgroup_limits;
/* Makes .../airlock/<pid>-<serial>-<n> in each hierarchy lim needs, with its
** limits (n counts the process's cgroups, so brokers that number their runs
** alike never collide); leftovers of a parent that died are removed first.
** Returns 0 or -errno with a message saying what to change (root, or a
** delegated cgroup); nothing is left behind on failure. */
int airlock_cgroup_new(airlock_cgroup *cg, const airlock_cgroup_limits *lim, uint64_t serial, char *err,
                       size_t errlen);
/* Where runs' pids cgroups go (made if missing), for the probe: 0 with the
** directory in where, or -errno with what to change in err. */
int airlock_cgroup_probe(char *where, size_t len, char *err, size_t errlen);
/* The same for controller AIRLOCK_CGROUP_*. */
int airlock_cgroup_probe_controller(int controller, char *where, size_t len, char *err, size_t errlen);
/* The most processes it held at once (pids.peak, Linux 6.1+), or -errno. */
int airlock_cgroup_pids_peak(const airlock_cgroup *cg, uint64_t *out);
/* How many forks the limit refused (pids.events "max"), or -errno. */
int airlock_cgroup_pids_refused(const airlock_cgroup *cg, uint64_t *out);
/* The most memory it used at once, in bytes, or -errno. */
int airlock_cgroup_memory_peak(const airlock_cgroup *cg, uint64_t *out);
/* How many of its processes the memory limit's OOM killer ended, or -errno. */
int airlock_cgroup_oom_kills(const airlock_cgroup *cg, uint64_t *out);
/* CPU time all of its processes used, in microseconds, or -errno. */
int airlock_cgroup_cpu_usec(const airlock_cgroup *cg, uint64_t *out);
/* SIGKILLs every process still in it (cgroup.kill on v2; v1: each member). */
void airlock_cgroup_kill(const airlock_cgroup *cg);
/* Closes the fds and removes the (empty) cgroups; idempotent. */
void airlock_cgroup_remove(airlock_cgroup *cg);

/* What this kernel and privilege level can enforce, for `airlock probe`.
** "works" fields are 1, or -errno saying why not (0 only where noted). */
typedef struct airlock_probe_report {
  int landlock_abi;         /* ABI >= 1, or -errno */
  int seccomp;              /* 1 if seccomp filter mode works */
  int seccomp_kill_process; /* 1 if SECCOMP_RET_KILL_PROCESS is available */
  int user_ns;              /* 1 if unshare(CLONE_NEWUSER) works in a forked child */
  int net_ns, pid_ns, mount_ns, ipc_ns, uts_ns, cgroup_ns; /* same; unprivileged:
                                  together with CLONE_NEWUSER, as the spawner would */
  int pidfd;                                               /* 1 if pidfd_open works */
  int cgroup2_delegated; /* 1 if /sys/fs/cgroup is cgroup2 and the current cgroup is writable, else 0 */
  int unprivileged_userns_clone; /* /proc/sys/kernel/unprivileged_userns_clone or -1 if absent */
  int apparmor_restrict_userns;  /* /proc/sys/kernel/apparmor_restrict_unprivileged_userns or -1 */
  int is_root;                   /* effective uid 0 */
} airlock_probe_report;
/* Fills *r; forks short-lived children for the namespace checks. Returns 0 or
** -EINVAL for NULL (every other failure is a field value). */
int airlock_probe(airlock_probe_report *r);

/* ------------------------------------------------------------------ spec */

/* A policy-driven confinement, for the calling process (airlock_confine_apply)
** or for a program the spawner starts (prepared in the parent, applied in the
** child between fork and exec: airlock_spawn_opts.confine). Lists are
** NULL-terminated and may be NULL. Zeroed = nothing applied. */
typedef struct airlock_confine_spec {
  int landlock;                /* 1: apply Landlock. Every filesystem right the running
                                  ABI knows is handled; only the paths below get any */
  const char *const *fs_read;  /* read_file + read_dir beneath each path */
  const char *const *fs_write; /* write_file, remove_*, make_{reg,dir,sock,fifo,sym},
                                  refer (ABI 2), truncate (ABI 3), ioctl_dev (ABI 5) */
  const char *const *fs_exec;  /* execute + read_file + read_dir */
  const uint16_t *tcp_bind;    /* ABI >= 4: TCP ports that may be bound; none = all denied */
  size_t n_tcp_bind;
  const uint16_t *tcp_connect; /* ABI >= 4: TCP ports that may be connected to */
  size_t n_tcp_connect;
  int no_scope;                /* 0: on ABI >= 6, signals and abstract unix sockets stay
                                  inside the domain; 1: not scoped */
  int seccomp;                 /* 1: apply a seccomp filter */
  int seccomp_deny;            /* 0: allowlist (promises + syscalls pass, the rest is
                                  refused); 1: denylist (syscalls and the built-in
                                  dangerous set, AIRLOCK_CONFINE_DANGEROUS, are refused,
                                  the rest passes) */
  const char *const *promises; /* allowlist mode: the promise words, one per entry,
                                  {"stdio", "rpath", NULL} (see confine_promises.c) */
  const char *const *syscalls; /* raw system call names, added to the list */
  int refuse_errno;            /* 0: a refused call kills the process (SIGSYS; a program
                                  the broker runs ends its run with cause seccomp, the call
                                  named); > 0: the call fails with this errno instead;
                                  AIRLOCK_REFUSE_CHOSEN: the call fails with the errno
                                  airlock_refusal_errno() picks for it, and a program the
                                  broker runs has each refused call named in its result
                                  (the listener answers it), its run going on.
                                  Either way: calls of another ABI (i386 int $0x80, x32)
                                  kill the process; an allowlist always lets exit,
                                  exit_group, rt_sigreturn and restart_syscall through;
                                  clone3 and openat2 answer ENOSYS (struct arguments
                                  seccomp cannot read: libc falls back to clone/openat) */
  int no_new_privs;            /* 1: PR_SET_NO_NEW_PRIVS (implied by landlock and seccomp) */
  int observe;                 /* learn mode (with seccomp): the file system calls of
                                  airlock_observed_calls are let through whatever the
                                  promises say, each first shown to the listener, which
                                  records its path and lets it continue. Only a program
                                  the broker runs with a listener is observed */
  int observe_connect;         /* the port of the run's egress proxy on 127.0.0.1 (1 to
                                  65535), 0 for none: with seccomp and a listener, connect
                                  (when the promises let it through) is first shown to the
                                  listener, which records an IPv4 or IPv6 destination
                                  other than the proxy and lets the call continue; the
                                  kernel (Landlock, the namespace) decides it as before */
} airlock_confine_spec;

/* refuse_errno: each refused call fails with an errno fitting it (EPERM for
** privilege, EAFNOSUPPORT for sockets of a kind not promised, ENOSYS for
** feature probes), named in the run's result: what programs expect of a
** sandbox (bubblewrap and firejail leave them errnos they handle). */
#define AIRLOCK_REFUSE_CHOSEN (-1)
/* The errno a refused call nr answers with under AIRLOCK_REFUSE_CHOSEN. */
int airlock_refusal_errno(long nr);

/* A spec made ready to apply with no allocation and no file system access:
** what the spawner's child needs between clone(CLONE_VM|CLONE_VFORK) and exec.
** All fields are owned by the structure (airlock_confine_prepared_free). */
typedef struct airlock_confine_prepared {
  int ruleset_fd;                  /* Landlock ruleset (O_CLOEXEC), or -1 */
  struct sock_fprog prog;          /* the filter; .filter NULL: no seccomp */
  struct sock_fprog notify_prog;   /* kill and chosen-errno modes, for the spawner: the same
                                      filter with refused calls sent to a listener (USER_NOTIF)
                                      that names them, plus sendmsg on AIRLOCK_CONFINE_NOTIFY_FD
                                      to hand the listener over before exec; .filter NULL if none */
  int refuse_chosen;               /* the spec's refuse_errno is AIRLOCK_REFUSE_CHOSEN: the
                                      listener answers each refused call with an errno */
  int observe;                     /* the notify program sends the observed calls to the
                                      listener (the spec's observe, with a notify program) */
  int observe_connect;             /* the notify program sends connect to the listener: the
                                      proxy's port (the spec's observe_connect), or 0 */
  int no_new_privs;                /* set before the layers */
  int allows_exec;                 /* bit 1: the filter lets execve through (a spawned program
                                      needs it); bit 2: execveat too */
  uint64_t handled_fs;             /* the Landlock filesystem rights the ruleset handles */
  airlock_layer landlock, seccomp; /* what applying will do (status APPLIED) or why not
                                      (SKIPPED: not asked for) */
} airlock_confine_prepared;

/* A seccomp program compiled when airlock was built (tools/seccomp_stock.c),
** for one stock spec: an allowlist of promises, no raw syscalls. */
typedef struct airlock_seccomp_stock {
  const char *key;                /* the spec as the compiled-filter cache keys it */
  int deny, refuse_errno, notify; /* the spec: seccomp_deny, refuse_errno, want_notify */
  const char *const *promises;    /* and its promise words, NULL-terminated */
  unsigned version[3], api;       /* libseccomp's version and API level that compiled it */
  const struct sock_filter *prog; /* the programs, as airlock_confine_prepare makes them */
  unsigned short prog_len;
  const struct sock_filter *notify_prog;
  unsigned short notify_len;
  int allows_exec;
  const char *detail; /* the seccomp layer's report */
} airlock_seccomp_stock;

/* For tools/seccomp_stock.c: the cache key of a spec (0, or -E2BIG), and a
** fresh compile of its seccomp part, bypassing every cache (0 or -errno). */
int airlock_seccomp_stock_key(const airlock_confine_spec *s, int want_notify, char *key, size_t len);
int airlock_seccomp_stock_compile(const airlock_confine_spec *s, int want_notify, airlock_confine_prepared *p,
                                  char *err, size_t errlen);
/* Compiles every build-time program this process may use afresh and checks
** it is the same, byte for byte: 0 with how many (*usable) and how many
** prepares took one so far (*hits), or -errno with why in err. */
int airlock_seccomp_stock_check(unsigned long *usable, unsigned long *hits, char *err, size_t errlen);

/* The fd number the spawner gives the socket that carries a seccomp listener
** to the parent; the notify program allows sendmsg on it and nothing else new.
** It is O_CLOEXEC, gone once the program runs. */
#define AIRLOCK_CONFINE_NOTIFY_FD  63
#define AIRLOCK_CONFINE_RULESET_FD 62 /* where the spawner's child keeps the ruleset */
/* The fds the spawner's child (airlock-init, or the program itself) and then
** airlock-init (the program; init/main.c's PROGRAM_FD) are started from with
** execveat. Learn mode observes every execveat but from these: the parent,
** which answers the listener, waits for the child's own exec (CLONE_VFORK),
** and the program named is known already. */
#define AIRLOCK_SPAWN_INIT_FD      59
#define AIRLOCK_SPAWN_EXEC_FD      61

/* Builds the Landlock ruleset (opening every listed path O_PATH; a missing one is
** an error naming it) and compiles the filter. *p is always initialised (safe to
** free). Returns 0 or -errno with a message in err ("landlock: /nope: No such
** file or directory", "seccomp: unknown promise 'rpth' (valid: stdio rpath ...)").
** Landlock asked for on a kernel without it is an error (-ENOSYS/-EOPNOTSUPP):
** confinement asked for is never silently dropped. */
int airlock_confine_prepare(const airlock_confine_spec *s, airlock_confine_prepared *p, char *err,
                            size_t errlen);
/* Applies a prepared spec to the calling thread (call it single-threaded; the
** children inherit it): no_new_privs, landlock_restrict_self, seccomp. System
** calls only, no allocation (safe in a vfork child). Uses p->prog, never the
** notify program. Returns 0 or -errno; *step (may be NULL) names the failed call
** ("prctl(PR_SET_NO_NEW_PRIVS)", "landlock_restrict_self", "seccomp"). */
int airlock_confine_apply_prepared_step(const airlock_confine_prepared *p, const char **step);
int airlock_confine_apply_prepared(const airlock_confine_prepared *p);
/* For the spawner's child: the same, with the ruleset at ruleset_fd; when
** notify_fd >= 0 and p has a notify program, loads that one with a new listener
** and sends the listener over notify_fd (SCM_RIGHTS), falling back to p->prog
** when the kernel refuses a listener (e.g. no fd left under RLIMIT_NOFILE).
** Returns 0 or -errno with *step set. */
int airlock_confine_apply_prepared_fds(const airlock_confine_prepared *p, int ruleset_fd, int notify_fd,
                                       const char **step);
/* For the spawner's child: grants read and write beneath dirfd (a directory it
** has just mounted, such as a private /tmp, which the parent could not name
** when it built the ruleset) in the ruleset at ruleset_fd. System calls only.
** Returns 0 or -errno. */
int airlock_confine_prepared_grant_rw(const airlock_confine_prepared *p, int ruleset_fd, int dirfd);
/* The same, read only (the /proc of a run's own pid namespace). */
int airlock_confine_prepared_grant_read(const airlock_confine_prepared *p, int ruleset_fd, int dirfd);
/* Closes the ruleset, frees the programs, leaves *p empty. Idempotent. */
void airlock_confine_prepared_free(airlock_confine_prepared *p);
/* Prepare + apply to the calling process. out[0] is the Landlock layer, out[1]
** seccomp (out may be NULL). Returns 0 or -errno (the failing layer says why;
** a preparation error is reported in the layer it concerns). */
int airlock_confine_apply(const airlock_confine_spec *s, airlock_layer out[2]);

/* Promise words (confine_promises.c), in the spirit of OpenBSD pledge(2). */
typedef struct airlock_promise {
  const char *word;     /* "stdio" */
  const char *summary;  /* one line: what it grants */
  const char *syscalls; /* space-separated names; "name(cond)" where an argument
                           filter applies, e.g. "socket(AF_INET|AF_INET6)" */
} airlock_promise;
extern const airlock_promise airlock_promises[]; /* ends with a NULL word */
/* What allowlist mode grants whatever the words (exit, rt_sigreturn, ...). */
extern const airlock_promise airlock_promise_always;
/* The promise's syscall list (as in the table), or NULL for an unknown word. */
const char *airlock_promise_syscalls(const char *word);
/* The errnos a policy may name for refused calls (refuse = "EPERM", ...), in
** the order messages list them; ends with a NULL name. ENOTSUP and EOPNOTSUPP
** are one number on Linux: a lookup by number finds ENOTSUP first. */
typedef struct airlock_errno_word {
  const char *name;
  int err;
} airlock_errno_word;
extern const airlock_errno_word airlock_refuse_errnos[];
/* The built-in set a denylist always refuses, with the reason per group. */
extern const airlock_promise airlock_confine_dangerous[]; /* ends with a NULL word */

/* Learn mode's observed calls (confine_observe.c): the file system calls whose
** path a learning run records. kind: 'r' read, 'w' write or create, 'x' run,
** 's' stat, access or readlink (existence only), 'd' change a directory's
** entries (mkdir, unlink, rename). path_arg is the argument holding the path;
** dirfd_arg the one holding the directory it is relative to (-1: the working
** directory); flags_arg the open flags (-1: none), which make 'r' a 'w' when
** they ask for writing or creating; path2_arg a second path (rename's new
** name, relative to dirfd2_arg), or -1. The table ends with nr -1; calls this
** architecture lacks (open, stat on aarch64) are left out. */
typedef struct airlock_observed_call {
  int nr;
  char kind;
  signed char path_arg, dirfd_arg, flags_arg, path2_arg, dirfd2_arg;
} airlock_observed_call;
extern const airlock_observed_call airlock_observed_calls[];
/* The entry for system call nr, or NULL when it is not observed. */
const airlock_observed_call *airlock_observed_call_find(long nr);

/* Internal to confine*.c: exports a libseccomp filter context (released here,
** whatever happens) as a malloc'd classic BPF program in *out. 0 or -errno. */
int airlock_seccomp_export_(void *ctx, struct sock_fprog *out, char *err, size_t errlen);

/* Internal to confine*.c: fills *out (when not NULL) with a formatted detail. */
void airlock_layer_set_(airlock_layer *out, const char *name, int status, int err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
