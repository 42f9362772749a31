/*
** spawn.c -- start a disposable child: channel on fd 3, capture pipes, nothing else.
** Uses clone(CLONE_VM|CLONE_VFORK) like posix_spawn, so the cost does not grow with
** the parent's memory; the child only makes raw system calls before exec. A
** child that sets a layer of the address space it would share (mdwe, in the
** layer table) gets a copy instead, as the sanitizer build's children do.
*/
#define _GNU_SOURCE
#include "airlock.h"
#include "fd_send.h"

#include "ns_holder.h"
#include "spawn_mount.h"
#include "spawn_protect.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <unistd.h>

#define CHILD_STACK_SIZE (64 * 1024)
#define HIGH_FD          64 /* sources are moved above the targets before dup2 */

/* One spawn: what the parent made for the child, and what the child reads.
** Shared with the child through CLONE_VM: it reports where it failed. */
struct spawn_ctx {
  const airlock_spawn_opts *o;
  const char *path; /* argv[0], made absolute */
  pid_t parent;
  uid_t uid;
  gid_t gid;
  int src[4];                      /* stdin, stdout, stderr, channel (-1: none) */
  int ruleset;                     /* the confinement's Landlock ruleset, or -1 */
  int notify;                      /* the child's end of the listener hand-over socket, or -1 */
  struct spawn_mount_plan mounts;  /* the mount list, planned (spawn_mount.c) */
  int root;                        /* the parent is root: the child becomes AIRLOCK_RUN_UID */
  int userns_fd;                   /* with root and CLONE_NEWUSER: the run user namespace */
  int idmap_fd;                    /* with root and a workspace: the idmapping namespace */
  int exec_fd;                     /* with root: the program, opened by the parent, or -1 */
  int init_fd;                     /* with o->init: airlock-init, opened by the parent, or -1 */
  int status_w;                    /* with o->init: the write end of the status pipe, or -1 */
  const char **init_argv;          /* with o->init: "airlock-init", PATH or "", the program's argv */
  int egress_w;                    /* with o->egress_port: the child's end of the listener's
                                      hand-over socket, or -1 */
  struct airlock_protect *protect; /* with PROTECT mounts: what the parent held and made */
  airlock_spawn_step phase;        /* the child's step now, for its report */
  struct spawn_report *rep;
  /* The parent's: each pair's [0] is the parent's end. */
  int sv[2], po[2], pe[2], nt[2], eg[2], st[2], ov[2]; /* channel, stdout, stderr, listener,
                                                   egress, airlock-init's status, overlay layer */
  int devnull;
  void *stack;
  char abs_path[4096];
};

/* Where the child says how it failed. It sits at the low end of the child's
** stack mapping, which is MAP_SHARED so the report reaches the parent whether
** or not the child shares its memory (see SPAWN_FLAGS); the stack grows down
** from the other end. */
struct spawn_report {
  const char *step; /* a string literal: same address in a copy */
  int err;
  airlock_spawn_step code;
};

/* ASan cannot follow instrumented code into a CLONE_VM child on a private
** stack; the sanitizer build uses a copy of the address space instead. */
#if defined(__SANITIZE_ADDRESS__)
#define SPAWN_FLAGS (CLONE_VFORK | SIGCHLD)
#else
#define SPAWN_FLAGS (CLONE_VM | CLONE_VFORK | SIGCHLD)
#endif

static const char *const empty_env[] = {NULL};

const airlock_namespace airlock_namespaces[] = {
    {"user", "user", CLONE_NEWUSER},       {"pid", "pid", CLONE_NEWPID},
    {"net", "net", CLONE_NEWNET},          {"ipc", "ipc", CLONE_NEWIPC},
    {"uts", "uts", CLONE_NEWUTS},          {"mount", "mnt", CLONE_NEWNS},
    {"cgroup", "cgroup", CLONE_NEWCGROUP}, {NULL, NULL, 0}};

static const char *const step_names[AIRLOCK_STEP_COUNT_] = {
    "none",  "options", "cgroup",   "prepare", "protect", "clone",   "cgroup_join", "namespace",
    "mount", "egress",  "identity", "process", "rlimits", "confine", "exec",        "watch",
};

const char *airlock_spawn_step_name(airlock_spawn_step s)
{
  return (unsigned)s < AIRLOCK_STEP_COUNT_ ? step_names[s] : "unknown";
}

/* v in decimal at dst (room for 10 digits); returns the length. By hand,
** since stdio is off limits in the child. */
static size_t put_uint(char *dst, unsigned v)
{
  char digits[12];
  size_t n = 0, k = 0;
  do {
    digits[k++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (k) dst[n++] = digits[--k];
  return n;
}

/* "65534 ID 1" */
static size_t id_map_line(char buf[32], unsigned id)
{
  memcpy(buf, "65534 ", 6);
  size_t n = 6 + put_uint(buf + 6, id);
  memcpy(buf + n, " 1", 2);
  return n + 2;
}

/* Writes a short string to a /proc file with raw calls (no stdio in here). */
static int write_proc(const char *path, const char *text, size_t len)
{
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, len);
  int saved = errno;
  close(fd);
  errno = saved;
  return n == (ssize_t)len ? 0 : -1;
}

/* Empties the bounding set (every capability a later exec could grant), the
** ambient set and the inheritable set. Needs CAP_SETPCAP, which a child in a
** new user namespace has there, and root has outside. */
static int drop_capabilities(void)
{
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) < 0) return -1;
  for (unsigned long cap = 0; cap < 64; cap++)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
      if (errno == EINVAL) break; /* past the kernel's last capability */
      /* Without CAP_SETPCAP (not root, no user namespace) the bounding set
      ** stays, but a process that permits itself nothing has nothing to drop:
      ** exec can only add capabilities through file capabilities, which
      ** no_new_privs voids. Anything else is an error. */
      if (errno == EPERM && d[0].permitted == 0 && d[1].permitted == 0) break;
      return -1;
    }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) return -1;
  d[0].inheritable = d[1].inheritable = 0;
  return (int)syscall(SYS_capset, &h, d);
}

#define INIT_FD        AIRLOCK_SPAWN_INIT_FD /* where the child keeps airlock-init, opened by the parent */
#define INIT_STATUS_FD 60                    /* airlock-init's end of the status pipe (init/main.c) */
#define EXEC_FD        AIRLOCK_SPAWN_EXEC_FD /* where the child keeps the program opened by the parent */
#define NKEEP          5

/* Closes every fd from lo up, except those in keep (ascending, -1 = unused). */
__attribute__((no_sanitize("address", "undefined"))) static int close_fds_from(int lo, const int keep[NKEEP])
{
  unsigned from = (unsigned)lo;
  for (int k = 0; k < NKEEP; k++) {
    if (keep[k] < lo) continue;
    if ((unsigned)keep[k] > from && syscall(SYS_close_range, from, (unsigned)keep[k] - 1, 0) < 0) goto slow;
    from = (unsigned)keep[k] + 1;
  }
  if (syscall(SYS_close_range, from, ~0u, 0) == 0) return 0;
slow : { /* before Linux 5.9 */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return -1;
  for (rlim_t fd = (rlim_t)lo; fd < rl.rlim_cur && fd < 65536; fd++) {
    int kept = 0;
    for (int k = 0; k < NKEEP && !kept; k++) kept = (int)fd == keep[k];
    if (!kept) close((int)fd);
  }
  return 0;
}
}

/* Not instrumented: in the sanitizer build the child runs ASan's copy of the
** parent on a small private stack, possibly under the policy's RLIMIT_AS, where
** ASan's bookkeeping before a noreturn call would need memory it cannot map. */
__attribute__((noreturn, no_sanitize("address", "undefined"))) static void fail(struct spawn_ctx *x,
                                                                                const char *step)
{
  x->rep->err = errno;
  x->rep->code = x->phase;
  x->rep->step = step;
  for (;;) syscall(SYS_exit_group, 127); /* not _exit: ASan intercepts it */
}

/* The mount list's plan, carried out (spawn_mount.c). Returns, or fails. */
__attribute__((no_sanitize("address", "undefined"))) static void mount_child(struct spawn_ctx *x)
{
  const char *step = NULL;
  int e = spawn_mount_run(&x->mounts, &step, &x->phase);
  if (e < 0) {
    errno = -e;
    fail(x, step);
  }
}

/* With egress_port: in the child's own net namespace, while it still holds
** CAP_NET_ADMIN there, brings the loopback up and listens on
** 127.0.0.1:egress_port, then hands the listener to the parent (SCM_RIGHTS)
** and closes its own copy. The run's egress proxy accepts on it from outside:
** the program reaches the proxy at that address and nothing else (its net
** namespace has no other device). Returns, or fails. */
__attribute__((no_sanitize("address", "undefined"))) static void egress_listen(struct spawn_ctx *x)
{
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  memcpy(ifr.ifr_name, "lo", 3);
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0) fail(x, "egress: SIOCGIFFLAGS(lo)");
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) fail(x, "egress: bring the loopback up (SIOCSIFFLAGS)");
  close(s);
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)x->o->egress_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 128) < 0)
    fail(x, "egress: listen on 127.0.0.1 in the run's net namespace");
  if (airlock_fd_send(x->egress_w, l, 'L', MSG_NOSIGNAL) < 0)
    fail(x, "egress: hand the listener to the parent");
  close(l);
  close(x->egress_w);
}

/* Becomes host uid/gid AIRLOCK_RUN_UID/GID with no supplementary groups, in the
** run namespace when one is given: the parent is root, and a child must not be
** the owner of the host's files. The bounding set goes first, while the
** capabilities to drop it are still held. Returns, or fails. */
__attribute__((no_sanitize("address", "undefined"))) static void become_run_identity(struct spawn_ctx *x)
{
  if (syscall(SYS_setgroups, 0, NULL) < 0) fail(x, "setgroups(none)");
  if (x->userns_fd >= 0 && setns(x->userns_fd, CLONE_NEWUSER) < 0) fail(x, "setns(run user namespace)");
  if (x->o->drop_caps && drop_capabilities() < 0) fail(x, "drop capabilities");
  /* Raw calls: glibc's set*id wrappers signal every thread, and this child
  ** shares the parent's memory but not its threads. */
  if (syscall(SYS_setresgid, AIRLOCK_RUN_GID, AIRLOCK_RUN_GID, AIRLOCK_RUN_GID) < 0)
    fail(x, "setresgid(65534)");
  if (syscall(SYS_setresuid, AIRLOCK_RUN_UID, AIRLOCK_RUN_UID, AIRLOCK_RUN_UID) < 0)
    fail(x, "setresuid(65534)");
}

/* Runs in the child, on a private stack, sharing the parent's memory until exec:
** only system calls, no allocation, no locks. */
__attribute__((no_sanitize("address", "undefined"))) static int child_main(void *arg)
{
  struct spawn_ctx *x = arg;
  const airlock_spawn_opts *o = x->o;
  struct sigaction dfl;
  sigset_t none;
  int nfd = x->src[3] >= 0 ? 4 : 3;

  /* Handlers are per-process after clone without CLONE_SIGHAND; reset them so
  ** nothing the parent installed (or ignored, like SIGPIPE) leaks into the child. */
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, NULL);
  x->phase = AIRLOCK_STEP_PROCESS;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, NULL) < 0) fail(x, "sigprocmask");
  /* Into the run's pids cgroup before anything else, so nothing escapes it. */
  x->phase = AIRLOCK_STEP_CGROUP_JOIN;
  for (int i = 0; i < o->ncgroup_fds; i++)
    if (o->cgroup_fds[i] >= 0 && write(o->cgroup_fds[i], "0", 1) != 1) fail(x, "join the run's cgroup");

  /* Joining a shared net namespace takes CAP_SYS_ADMIN over its owner (the
  ** initial user namespace), so it comes first. */
  x->phase = AIRLOCK_STEP_NAMESPACE;
  if (o->netns_fd > 0 && setns(o->netns_fd, CLONE_NEWNET) < 0) fail(x, "setns(shared net namespace)");
  if (x->root && o->keep_identity) {
    /* The ledger process: root's uid, no groups; drop_caps empties its sets below. */
    x->phase = AIRLOCK_STEP_IDENTITY;
    if (syscall(SYS_setgroups, 0, NULL) < 0) fail(x, "setgroups(none)");
  } else if (x->root) {
    /* Born without a user namespace (see clone_flags), so every namespace it
    ** was born in is owned by the initial one: mount while we still hold its
    ** privilege, then become the run's identity, which holds none there. */
    if (spawn_mount_any(&x->mounts)) mount_child(x);
    x->phase = AIRLOCK_STEP_EGRESS;
    if (x->egress_w >= 0) egress_listen(x);
    x->phase = AIRLOCK_STEP_IDENTITY;
    become_run_identity(x);
  } else {
    if (o->namespaces & CLONE_NEWUSER) {
      /* Map our (outside) uid and gid to 65534 inside: a process may map its own
      ** ids without privilege. Being non-zero inside, exec drops every capability,
      ** while files still see the outside owner, so the worker binary stays readable. */
      if (write_proc("/proc/self/setgroups", "deny", 4) < 0) fail(x, "write /proc/self/setgroups");
      char map[32];
      size_t n = id_map_line(map, x->uid);
      if (write_proc("/proc/self/uid_map", map, n) < 0) fail(x, "write /proc/self/uid_map");
      n = id_map_line(map, x->gid);
      if (write_proc("/proc/self/gid_map", map, n) < 0) fail(x, "write /proc/self/gid_map");
    }
    x->phase = AIRLOCK_STEP_EGRESS;
    if (x->egress_w >= 0) egress_listen(x);
    if (spawn_mount_any(&x->mounts)) mount_child(x);
  }
  x->phase = AIRLOCK_STEP_PROCESS;
  /* A session of its own (so a process group too, for the kill at the end): a
  ** program handed the caller's terminal cannot make itself the terminal's
  ** foreground (TIOCSPGRP) or type into it (TIOCSTI), which need the
  ** terminal to be its controlling one (bubblewrap's --new-session). */
  if (setsid() < 0) fail(x, "setsid");
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) fail(x, "prctl(PDEATHSIG)");
  /* The parent may have died before PDEATHSIG was armed (in a new pid
  ** namespace getppid() is 0: the parent is outside it, and it is blocked in vfork). */
  if (!(o->namespaces & CLONE_NEWPID) && getppid() != x->parent) {
    errno = ESRCH;
    fail(x, "parent gone");
  }
  if (o->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail(x, "prctl(NO_NEW_PRIVS)");

  /* Move every source above the targets first, so dup2 into 0..3 cannot
  ** clobber a source that happens to sit at a low number. The confinement's
  ** ruleset and hand-over socket go to their fixed numbers below HIGH_FD
  ** (the hand-over's is named in the seccomp program), close-on-exec. */
  int hi[9] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
  const int extra[5] = {x->ruleset, x->notify, x->exec_fd, x->init_fd, x->status_w};
  for (int i = 0; i < nfd; i++) {
    hi[i] = fcntl(x->src[i], F_DUPFD, HIGH_FD + i);
    if (hi[i] < 0) fail(x, "fcntl(F_DUPFD)");
  }
  for (int i = 0; i < 5; i++)
    if (extra[i] >= 0 && (hi[4 + i] = fcntl(extra[i], F_DUPFD_CLOEXEC, HIGH_FD)) < 0)
      fail(x, "fcntl(F_DUPFD)");
  for (int i = 0; i < nfd; i++)
    if (dup2(hi[i], i) < 0) fail(x, "dup2");
  int keep[NKEEP] = {-1, -1, -1, -1, -1}; /* ascending */
  /* airlock-init inherits the program and the status pipe (it marks both
  ** close-on-exec before the program runs); without it the program's fd
  ** closes on exec. */
  int inherit = x->init_fd >= 0 ? 0 : O_CLOEXEC;
  if (x->init_fd >= 0) {
    if (dup3(hi[7], INIT_FD, O_CLOEXEC) < 0 || dup3(hi[8], INIT_STATUS_FD, 0) < 0) fail(x, "dup3");
    keep[0] = INIT_FD;
    keep[1] = INIT_STATUS_FD;
  }
  if (x->exec_fd >= 0) {
    if (dup3(hi[6], EXEC_FD, inherit) < 0) fail(x, "dup3");
    keep[2] = EXEC_FD;
  }
  if (x->ruleset >= 0) {
    if (dup3(hi[4], AIRLOCK_CONFINE_RULESET_FD, O_CLOEXEC) < 0) fail(x, "dup3");
    keep[3] = AIRLOCK_CONFINE_RULESET_FD;
  }
  if (x->notify >= 0) {
    if (dup3(hi[5], AIRLOCK_CONFINE_NOTIFY_FD, O_CLOEXEC) < 0) fail(x, "dup3");
    keep[4] = AIRLOCK_CONFINE_NOTIFY_FD;
  }
  if (close_fds_from(nfd, keep) < 0) fail(x, "getrlimit");

  if (o->no_aslr) {
    long persona = syscall(SYS_personality, 0xffffffffUL);
    if (persona < 0 || syscall(SYS_personality, (unsigned long)persona | ADDR_NO_RANDOMIZE) < 0)
      fail(x, "personality(ADDR_NO_RANDOMIZE)");
  }
  /* The layers set with one call (the table in confine_layers.c); one of the
  ** address space has a copy of it here, not the caller's (start_child). */
  for (unsigned i = 0; o->layers != 0 && airlock_confine_layers[i].name != NULL; i++) {
    int e = (o->layers >> i) & 1u ? airlock_confine_layers[i].apply(NULL) : 0;
    if (e < 0) {
      errno = -e;
      fail(x, airlock_confine_layers[i].name);
    }
  }
  if (chdir(o->workdir ? o->workdir : "/") < 0) fail(x, "chdir");
  x->phase = AIRLOCK_STEP_IDENTITY;
  if (o->drop_caps && drop_capabilities() < 0) fail(x, "drop capabilities");
  x->phase = AIRLOCK_STEP_RLIMITS;
  /* Last: RLIMIT_NOFILE may be below the fd numbers used above. */
  if (o->rlimits) {
    int e = airlock_apply_rlimits(o->rlimits);
    if (e < 0) {
      errno = -e;
      fail(x, "setrlimit");
    }
  }
  /* The confinement, prepared by the parent: system calls only. After it,
  ** only exit_group (fail) and execve must pass the filter. */
  x->phase = AIRLOCK_STEP_CONFINE;
  if (o->confine) {
    const char *step = NULL;
    int e = airlock_confine_apply_prepared_fds(o->confine, x->ruleset >= 0 ? AIRLOCK_CONFINE_RULESET_FD : -1,
                                               x->notify >= 0 ? AIRLOCK_CONFINE_NOTIFY_FD : -1, &step);
    if (e < 0) {
      errno = -e;
      fail(x, step ? step : "confine");
    }
  }
  x->phase = AIRLOCK_STEP_EXEC;
  if (x->init_fd >= 0) { /* PID 1, which runs the program as PID 2 */
    syscall(SYS_execveat, INIT_FD, "", x->init_argv, o->envp ? o->envp : empty_env, AT_EMPTY_PATH);
    fail(x, "exec airlock-init");
  }
  if (x->exec_fd >= 0) /* opened by the parent: no path walk as uid 65534 */
    syscall(SYS_execveat, EXEC_FD, "", o->argv, o->envp ? o->envp : empty_env, AT_EMPTY_PATH);
  else
    execve(x->path, (char *const *)o->argv, (char *const *)(o->envp ? o->envp : empty_env));
  fail(x, "exec");
  return 127;
}

/* The namespaces the child is born in: all it asks for, except that joining a
** shared net namespace replaces a new one, and that a child of root joins the
** run user namespace after its mounts instead of making one (a child born in a
** new user namespace has no capability over the initial one, which owns the
** shared net namespace, and could map only kuid 0, the owner of host files). */
static unsigned long clone_flags(const airlock_spawn_opts *o, int root)
{
  unsigned long f = o->namespaces;
  if (o->netns_fd > 0) f &= ~(unsigned long)CLONE_NEWNET;
  if (root) f &= ~(unsigned long)CLONE_NEWUSER;
  return f;
}

static void close_fd(int *fd)
{
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* The program as an fd for execveat, so the child (uid 65534) needs no search
** right on the directories above it (a build tree in a 0700 home). -1 for a
** script: its interpreter would be handed /dev/fd/N, closed by then, so a
** script is run by path. */
static int open_program(const char *rootfs, const char *path)
{
  int fd;
  if (rootfs) { /* the path as the program sees it: resolved inside the root file system */
    int rfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct open_how how = {.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    fd = rfd < 0 ? -1 : (int)syscall(SYS_openat2, rfd, path, &how, sizeof how);
    if (rfd >= 0) close(rfd);
  } else {
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  }
  if (fd < 0) return -1;
  struct stat st;
  char head[2];
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
      (pread(fd, head, 2, 0) == 2 && head[0] == '#' && head[1] == '!')) {
    close(fd);
    return -1;
  }
  return fd;
}

void airlock_child_close(airlock_child *c)
{
  airlock_protect_release(c->protect, airlock_protect_child_gone(c->pidfd));
  c->protect = NULL;
  close_fd(&c->egress);
  close_fd(&c->overlay);
  airlock_close_later(c->overlay_mount); /* the overlay's teardown, off our path */
  c->overlay_mount = -1;
  close_fd(&c->pidfd);
  close_fd(&c->status);
  close_fd(&c->notify);
  close_fd(&c->chan);
  close_fd(&c->out);
  close_fd(&c->err);
}

static int set_nonblock(int fd)
{
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
  return 0;
}

/* The seccomp listener the child sent before exec (SCM_RIGHTS), or -1 when it
** sent none (no filter, or the kernel gave it no listener). */
static int receive_listener(int sock)
{
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } cm;
  char byte;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
  if (recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) != 1) return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
    return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

/* "spawn: STEP: text (NAME)" for errno, with its code in c->step; returns -errno. */
static int step_failed(airlock_child *c, airlock_spawn_step code, const char *step, char *err, size_t errlen)
{
  int e = errno;
  char ename[24];
  c->step = code;
  snprintf(err, errlen, "spawn: %s: %s (%s)", step, strerror(e), airlock_errno_name(e, ename, sizeof ename));
  return -e;
}

/* What the options ask for that can never work, before anything is made.
** Returns 0, or -EINVAL with a message. */
static int check_options(const airlock_spawn_opts *o, char *err, size_t errlen)
{
  if (o && o->egress_port && (o->egress_port > 65535 || !(o->namespaces & CLONE_NEWNET) || o->netns_fd > 0)) {
    snprintf(err, errlen,
             "spawn: an egress listener needs a port (1-65535) and a net namespace of the "
             "child's own (not the shared one)");
    return -EINVAL;
  }
  if (o && o->netns_fd > 0 && !(o->namespaces & CLONE_NEWNET)) {
    snprintf(err, errlen, "spawn: netns_fd is set but the net namespace is not asked for");
    return -EINVAL;
  }
  if (!o || !o->argv || !o->argv[0]) {
    snprintf(err, errlen, "spawn: no program given");
    return -EINVAL;
  }
  unsigned rows = 0;
  while (airlock_confine_layers[rows].name != NULL) rows++;
  if (o->layers >> rows != 0) {
    snprintf(err, errlen, "spawn: layers 0x%x names a layer past the table's %u (airlock_confine_layers)",
             o->layers, rows);
    return -EINVAL;
  }
  const char *prog = o->path ? o->path : o->argv[0];
  if (o->confine && o->confine->prog.filter && !(o->confine->allows_exec & 1)) {
    snprintf(err, errlen,
             "confinement: the seccomp filter does not allow execve, so %s could "
             "never start (promise 'exec')",
             prog);
    return -EINVAL;
  }
  if (o->init && (o->namespaces & CLONE_NEWPID) && o->confine && o->confine->prog.filter &&
      !(o->confine->allows_exec & 2)) {
    snprintf(err, errlen,
             "confinement: the seccomp filter does not allow execveat, which starts "
             "airlock-init, the program's PID 1 (promise 'exec')");
    return -EINVAL;
  }
  return 0;
}

/* The program's path, made absolute (the child changes directory before
** exec), into x->path. Returns 0, or -ENAMETOOLONG with a message. */
static int program_path(struct spawn_ctx *x, const char *prog, char *err, size_t errlen)
{
  x->path = prog;
  if (prog[0] == '/') return 0;
  if (!getcwd(x->abs_path, sizeof x->abs_path - 1) ||
      strlen(x->abs_path) + 1 + strlen(prog) >= sizeof x->abs_path) {
    snprintf(err, errlen, "spawn: cannot make '%s' an absolute path", prog);
    return -ENAMETOOLONG;
  }
  strcat(x->abs_path, "/");
  strcat(x->abs_path, prog);
  x->path = x->abs_path;
  return 0;
}

/* The descriptors the child is handed and its stack, with the report at the
** stack's low end. Returns 0, or -1 with errno and *step. */
static int open_channels(struct spawn_ctx *x, const airlock_spawn_opts *o, const char **step)
{
  if (o->channel && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x->sv) < 0) {
    *step = "socketpair";
    return -1;
  }
  /* Capture pipes, unless the caller hands the child its own descriptors. */
  if ((o->stdout_fd <= 0 && pipe2(x->po, O_CLOEXEC) < 0) ||
      (o->stderr_fd <= 0 && pipe2(x->pe, O_CLOEXEC) < 0)) {
    *step = "pipe2";
    return -1;
  }
  if (o->stdin_fd < 0 && (x->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
    *step = "open /dev/null";
    return -1;
  }
  if (o->confine && o->confine->notify_prog.filter &&
      socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, x->nt) < 0) {
    *step = "socketpair";
    return -1;
  }
  if (o->egress_port && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, x->eg) < 0) {
    *step = "socketpair";
    return -1;
  }
  if (x->mounts.overlay && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, x->ov) < 0) {
    *step = "socketpair";
    return -1;
  }
  x->stack =
      mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (x->stack == MAP_FAILED) {
    *step = "mmap(stack)";
    return -1;
  }
  x->rep = x->stack;
  x->rep->step = NULL;
  x->rep->err = 0;
  x->rep->code = AIRLOCK_STEP_NONE;
  x->src[0] = o->stdin_fd >= 0 ? o->stdin_fd : x->devnull;
  x->src[1] = o->stdout_fd > 0 ? o->stdout_fd : x->po[1];
  x->src[2] = o->stderr_fd > 0 ? o->stderr_fd : x->pe[1];
  x->src[3] = o->channel ? x->sv[1] : -1;
  x->notify = x->nt[1];
  x->egress_w = x->eg[1];
  x->mounts.overlay_w = x->ov[1];
  return 0;
}

/* As root: the identity namespaces the child joins or idmaps with, and the
** program opened here. Returns 0, or -errno with a message. */
static int prepare_identity(struct spawn_ctx *x, const airlock_spawn_opts *o, char *err, size_t errlen)
{
  if (!x->root) return 0;
  if ((o->namespaces & CLONE_NEWUSER) && x->mounts.workspace) airlock_identity_prepare_(); /* both at once */
  if ((o->namespaces & CLONE_NEWUSER) &&
      (x->userns_fd = airlock_identity_userns(AIRLOCK_RUN_USERNS, err, errlen)) < 0)
    return x->userns_fd;
  if (x->mounts.workspace && (x->idmap_fd = airlock_identity_userns(AIRLOCK_IDMAP_USERNS, err, errlen)) < 0)
    return x->idmap_fd;
  if (!o->confine || !o->confine->prog.filter || (o->confine->allows_exec & 2))
    x->exec_fd = open_program(x->mounts.rootfs, x->path);
  return 0;
}

/* With o->init and a pid namespace: airlock-init's argv, the program opened,
** the status pipe. Returns 0, or -1 with errno and *step. */
static int prepare_init(struct spawn_ctx *x, const airlock_spawn_opts *o, const char **step)
{
  if (!o->init || !(o->namespaces & CLONE_NEWPID)) return 0;
  size_t argc = 0;
  while (o->argv[argc]) argc++;
  x->init_argv = calloc(argc + 3, sizeof *x->init_argv);
  if (!x->init_argv) {
    errno = ENOMEM;
    *step = "calloc";
    return -1;
  }
  x->init_argv[0] = "airlock-init";
  x->init_argv[1] = x->exec_fd >= 0 ? "" : x->path;
  for (size_t i = 0; i < argc; i++) x->init_argv[2 + i] = o->argv[i];
  if ((x->init_fd = open(o->init, O_RDONLY | O_CLOEXEC)) < 0) {
    *step = "open airlock-init";
    return -1;
  }
  if (pipe2(x->st, O_CLOEXEC) < 0) {
    *step = "pipe2";
    return -1;
  }
  x->status_w = x->st[1];
  return 0;
}

/* The child, started with signals blocked so no parent handler runs in it on
** shared memory; it has exec'd or failed when this returns (CLONE_VFORK).
** Returns its pid, or -1 with errno. */
static pid_t start_child(struct spawn_ctx *x, const airlock_spawn_opts *o)
{
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  /* A layer of the address space (mdwe) set in a CLONE_VM child would mark
  ** the caller's. That child gets a copy. */
  int own_mm = 0;
  for (unsigned i = 0; airlock_confine_layers[i].name != NULL; i++)
    if ((o->layers >> i) & 1u) own_mm |= (airlock_confine_layers[i].flags & AIRLOCK_CL_OWN_MM) != 0;
  int flags = own_mm ? (SPAWN_FLAGS & ~CLONE_VM) : SPAWN_FLAGS;
  pid_t pid = clone(child_main, (char *)x->stack + CHILD_STACK_SIZE, flags | (int)clone_flags(o, x->root), x);
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = clone_errno;
  return pid;
}

/* Kills and reaps a child that cannot be handed over. */
static void discard_child(airlock_child *c)
{
  kill(c->pid, SIGKILL);
  waitpid(c->pid, NULL, 0);
  c->pid = -1;
}

/* After the clone: the child's report, the descriptors it handed over, then
** the parent's ends into c, non-blocking. Returns 0, or -errno with a message. */
static int take_child(struct spawn_ctx *x, const airlock_spawn_opts *o, airlock_child *c, char *err,
                      size_t errlen)
{
  char ename[24];
  if (x->nt[0] >= 0) c->notify = receive_listener(x->nt[0]);
  if (x->eg[0] >= 0) c->egress = receive_listener(x->eg[0]);
  if (x->ov[0] >= 0) c->overlay = receive_listener(x->ov[0]);
  if (c->overlay >= 0) c->overlay_mount = receive_listener(x->ov[0]);
  if (x->rep->step) { /* the child failed before exec and has exited */
    close_fd(&c->notify);
    close_fd(&c->egress);
    close_fd(&c->overlay);
    close_fd(&c->overlay_mount);
    waitpid(c->pid, NULL, 0);
    c->pid = -1;
    errno = x->rep->err;
    if (x->rep->code == AIRLOCK_STEP_EXEC && strcmp(x->rep->step, "exec") == 0) {
      c->step = AIRLOCK_STEP_EXEC;
      snprintf(err, errlen, "exec %s: %s (%s)", o->path ? o->path : o->argv[0], strerror(errno),
               airlock_errno_name(errno, ename, sizeof ename));
      return -x->rep->err;
    }
    return step_failed(c, x->rep->code, x->rep->step, err, errlen);
  }
  if (x->eg[0] >= 0 && c->egress < 0) { /* the child said nothing failed: it cannot be */
    discard_child(c);
    close_fd(&c->notify);
    errno = EPROTO;
    return step_failed(c, AIRLOCK_STEP_EGRESS, "egress: the listener did not arrive from the child", err,
                       errlen);
  }
  if (x->ov[0] >= 0 &&
      (c->overlay < 0 || c->overlay_mount < 0)) { /* the same: no run without its bound layer in hand */
    discard_child(c);
    close_fd(&c->overlay);
    close_fd(&c->overlay_mount);
    close_fd(&c->notify);
    close_fd(&c->egress);
    errno = EPROTO;
    return step_failed(c, AIRLOCK_STEP_MOUNT, "overlay: the writable layer did not arrive from the child",
                       err, errlen);
  }
  c->pidfd = (int)syscall(SYS_pidfd_open, c->pid, 0); /* CLOEXEC by definition */
  c->protect = x->protect; /* released by airlock_child_close, once the child is gone */
  x->protect = NULL;
  c->chan = o->channel ? x->sv[0] : -1;
  c->out = x->po[0];
  c->err = x->pe[0];
  c->status = x->st[0];
  x->sv[0] = x->po[0] = x->pe[0] = x->st[0] = -1;
  if ((c->chan >= 0 && set_nonblock(c->chan) < 0) || (c->out >= 0 && set_nonblock(c->out) < 0) ||
      (c->status >= 0 && set_nonblock(c->status) < 0) || (c->err >= 0 && set_nonblock(c->err) < 0) ||
      (c->notify >= 0 && set_nonblock(c->notify) < 0)) {
    int saved = errno;
    discard_child(c);
    airlock_child_close(c);
    errno = saved;
    return step_failed(c, AIRLOCK_STEP_PREPARE, "fcntl(O_NONBLOCK)", err, errlen);
  }
  return 0;
}

/* Everything the parent made for the child that the child (or c) does not keep. */
static void spawn_cleanup(struct spawn_ctx *x)
{
  if (x->stack != MAP_FAILED) munmap(x->stack, CHILD_STACK_SIZE);
  int *fds[] = {&x->sv[0], &x->sv[1], &x->po[0],   &x->po[1],   &x->pe[0],  &x->pe[1],
                &x->nt[0], &x->nt[1], &x->eg[0],   &x->eg[1],   &x->st[0],  &x->st[1],
                &x->ov[0], &x->ov[1], &x->devnull, &x->exec_fd, &x->init_fd};
  for (size_t i = 0; i < sizeof fds / sizeof *fds; i++) close_fd(fds[i]);
  free(x->init_argv);
  airlock_protect_release(x->protect, 1); /* the run did not start: its child, if any, is gone */
  spawn_mount_plan_free(&x->mounts);
}

int airlock_spawn(const airlock_spawn_opts *o, airlock_child *c, char *err, size_t errlen)
{
  struct spawn_ctx x;
  const char *step = NULL;
  int rc;

  c->pid = -1;
  c->pidfd = c->chan = c->out = c->err = c->notify = c->status = c->egress = c->overlay = c->overlay_mount =
      -1;
  c->protect = NULL;
  c->step = AIRLOCK_STEP_OPTIONS;
  memset(&x, 0, sizeof x);
  x.stack = MAP_FAILED;
  x.sv[0] = x.sv[1] = x.po[0] = x.po[1] = x.pe[0] = x.pe[1] = -1;
  x.nt[0] = x.nt[1] = x.eg[0] = x.eg[1] = x.st[0] = x.st[1] = x.ov[0] = x.ov[1] = -1;
  x.devnull = x.exec_fd = x.init_fd = x.status_w = x.egress_w = x.userns_fd = x.idmap_fd = -1;
  if ((rc = check_options(o, err, errlen)) < 0) return rc;
  x.o = o;
  x.parent = getpid();
  x.uid = geteuid();
  x.gid = getegid();
  x.root = x.uid == 0;
  x.ruleset = o->confine && o->confine->ruleset_fd >= 0 ? o->confine->ruleset_fd : -1;
  airlock_spawn_step mount_code = AIRLOCK_STEP_MOUNT;
  if ((rc = spawn_mount_plan(&x.mounts, o, &mount_code, err, errlen)) < 0) {
    c->step = mount_code;
    goto done;
  }
  if ((rc = program_path(&x, o->path ? o->path : o->argv[0], err, errlen)) < 0) goto done;
  c->step = AIRLOCK_STEP_PREPARE;
  if (open_channels(&x, o, &step) < 0) {
    rc = step_failed(c, AIRLOCK_STEP_PREPARE, step, err, errlen);
    goto done;
  }
  if ((rc = prepare_identity(&x, o, err, errlen)) < 0) goto done;
  if (prepare_init(&x, o, &step) < 0) {
    rc = step_failed(c, AIRLOCK_STEP_PREPARE, step, err, errlen);
    goto done;
  }
  /* Last before the child: what tool.protect names is held (and what is
  ** missing made) only once nothing else can fail before the clone. */
  c->step = AIRLOCK_STEP_PROTECT;
  if (x.mounts.nprotect &&
      (rc = airlock_protect_hold(x.mounts.workspace, x.mounts.protect, &x.protect, err, errlen)) < 0)
    goto done;
  x.mounts.root = x.root;
  x.mounts.ruleset = x.ruleset;
  x.mounts.confine = o->confine;
  x.mounts.idmap_fd = x.idmap_fd;
  x.mounts.held = x.protect;
  if ((c->pid = start_child(&x, o)) < 0) {
    rc = step_failed(c, AIRLOCK_STEP_CLONE, "clone", err, errlen);
    goto done;
  }
  if ((rc = take_child(&x, o, c, err, errlen)) == 0) c->step = AIRLOCK_STEP_NONE;
done:
  spawn_cleanup(&x);
  return rc;
}

int airlock_netns_new(char *err, size_t errlen)
{
  /* A new net namespace is the kernel's slowest (half a millisecond): a
  ** root parent makes its two user namespaces (identity.c) meanwhile, and
  ** the three helpers are let go together, then reaped. */
  airlock_identity_batch_ ids;
  airlock_ns_holder h;
  int root = geteuid() == 0;
  int rc = airlock_ns_holder_begin_(&h, CLONE_NEWNET, "netns", err, errlen);
  airlock_identity_begin_(&ids, root, root);
  airlock_identity_take_(&ids);
  if (rc == 0) rc = airlock_ns_holder_ready_(&h, "netns", err, errlen);
  int fd = -1, e = 0;
  if (rc == 0) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)h.pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    e = errno;
    airlock_ns_holder_kill_(&h);
  }
  airlock_identity_end_(&ids);
  if (rc < 0) {
    snprintf(err, errlen, "netns: cannot make an empty net namespace: %s", airlock_strerror(-rc));
    return rc;
  }
  airlock_ns_holder_end_(&h);
  if (fd < 0) {
    snprintf(err, errlen, "netns: cannot make an empty net namespace: %s", airlock_strerror(e));
    return -e;
  }
  return fd;
}
