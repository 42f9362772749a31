/*
** spawn.c -- start a disposable child: channel on fd 3, capture pipes, nothing else.
** Uses clone(CLONE_VM|CLONE_VFORK) like posix_spawn, so the cost does not grow with
** the parent's memory; the child only makes raw system calls before exec. A
** child that sets mdwe (a property of the address space it would share) gets a
** copy instead, as the sanitizer build's children do.
*/
#define _GNU_SOURCE
#include "airlock.h"

#include "ns_holder.h"
#include "spawn_protect.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
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
#define MAX_TREES 5   /* the workspace and up to four kept directories */
#define MAX_VIEW 64   /* paths of a view (airlock_spawn_opts.view_ro, view_rw, rootfs entries) */
#define PATH_BUF 4200 /* a path (under 4096) below VIEW_STAGE */
#define VIEW_STAGE "/tmp"   /* where the view's root is built before pivot_root: a
                               directory every system has, covered by then */
#define HIGH_FD 64   /* sources are moved above the targets before dup2 */

/* Shared with the child through CLONE_VM: it reports where it failed. */
struct spawn_ctx {
  const airlock_spawn_opts *o;
  const char *path;      /* argv[0], made absolute */
  pid_t parent;
  uid_t uid;
  gid_t gid;
  int src[4];            /* stdin, stdout, stderr, channel (-1: none) */
  int ruleset;           /* the confinement's Landlock ruleset, or -1 */
  int notify;            /* the child's end of the listener hand-over socket, or -1 */
  char tmpfs_data[64];   /* the tmpfs mount options */
  struct tree {          /* a directory put back at its path after the mounts; the
                            child clones it itself (a mount source must be in its
                            own mount namespace) */
    const char *at;
    long under;          /* the tmpfs entry it lies beneath, or -1 */
    int rw;              /* the workspace; the others are read-only */
  } trees[MAX_TREES];
  int ntrees;
  struct view_path {     /* a path of the view, as the parent found it */
    const char *path;    /* where it appears */
    char *source;        /* with a root file system: what appears there (owned), else NULL */
    char kind;           /* 'd' directory, 'f' other file, 'l' symbolic link */
    int rw;
    char target[256];    /* a link's target */
  } view[MAX_VIEW];
  int nview;
  int root;              /* the parent is root: the child becomes AIRLOCK_RUN_UID */
  int userns_fd;         /* with root and CLONE_NEWUSER: the run user namespace */
  int idmap_fd;          /* with root and o->workspace: the idmapping namespace */
  int exec_fd;           /* with root: the program, opened by the parent, or -1 */
  int init_fd;           /* with o->init: airlock-init, opened by the parent, or -1 */
  int status_w;          /* with o->init: the write end of the status pipe, or -1 */
  const char **init_argv;/* with o->init: "airlock-init", PATH or "", the program's argv */
  int egress_w;          /* with o->egress_port: the child's end of the listener's
                            hand-over socket, or -1 */
  struct airlock_protect *protect; /* with o->protect: what the parent held and made */
  struct spawn_report *rep;
};

/* Where the child says how it failed. It sits at the low end of the child's
** stack mapping, which is MAP_SHARED so the report reaches the parent whether
** or not the child shares its memory (see SPAWN_FLAGS); the stack grows down
** from the other end. */
struct spawn_report {
  const char *step;      /* a string literal: same address in a copy */
  int err;
};

/* ASan cannot follow instrumented code into a CLONE_VM child on a private
** stack; the sanitizer build uses a copy of the address space instead. */
#if defined(__SANITIZE_ADDRESS__)
#define SPAWN_FLAGS (CLONE_VFORK | SIGCHLD)
#else
#define SPAWN_FLAGS (CLONE_VM | CLONE_VFORK | SIGCHLD)
#endif

static const char *const empty_env[] = { NULL };

const airlock_namespace airlock_namespaces[] = {
  { "user", "user", CLONE_NEWUSER }, { "pid", "pid", CLONE_NEWPID },
  { "net", "net", CLONE_NEWNET }, { "ipc", "ipc", CLONE_NEWIPC },
  { "uts", "uts", CLONE_NEWUTS }, { "mount", "mnt", CLONE_NEWNS },
  { "cgroup", "cgroup", CLONE_NEWCGROUP }, { NULL, NULL, 0 } };

/* v in decimal at dst (room for 10 digits); returns the length. By hand,
** since stdio is off limits in the child. */
static size_t put_uint(char *dst, unsigned v) {
  char digits[12];
  size_t n = 0, k = 0;
  do { digits[k++] = (char)('0' + v % 10); v /= 10; } while (v);
  while (k) dst[n++] = digits[--k];
  return n;
}

/* "65534 ID 1" */
static size_t id_map_line(char buf[32], unsigned id) {
  memcpy(buf, "65534 ", 6);
  size_t n = 6 + put_uint(buf + 6, id);
  memcpy(buf + n, " 1", 2);
  return n + 2;
}

/* Writes a short string to a /proc file with raw calls (no stdio in here). */
static int write_proc(const char *path, const char *text, size_t len) {
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
static int drop_capabilities(void) {
  struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) < 0) return -1;
  for (unsigned long cap = 0; cap < 64; cap++)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
      if (errno == EINVAL) break;   /* past the kernel's last capability */
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

#define INIT_FD 59          /* where the child keeps airlock-init, opened by the parent */
#define INIT_STATUS_FD 60   /* airlock-init's end of the status pipe (init/main.c) */
#define EXEC_FD 61          /* where the child keeps the program opened by the parent */
#define NKEEP 5

/* Closes every fd from lo up, except those in keep (ascending, -1 = unused). */
__attribute__((no_sanitize("address", "undefined"))) static int close_fds_from(int lo, const int keep[NKEEP]) {
  unsigned from = (unsigned)lo;
  for (int k = 0; k < NKEEP; k++) {
    if (keep[k] < lo) continue;
    if ((unsigned)keep[k] > from && syscall(SYS_close_range, from, (unsigned)keep[k] - 1, 0) < 0) goto slow;
    from = (unsigned)keep[k] + 1;
  }
  if (syscall(SYS_close_range, from, ~0u, 0) == 0) return 0;
slow: {   /* before Linux 5.9 */
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
__attribute__((noreturn, no_sanitize("address", "undefined"))) static void fail(struct spawn_ctx *x, const char *step) {
  x->rep->err = errno;
  x->rep->step = step;
  for (;;) syscall(SYS_exit_group, 127);   /* not _exit: ASan intercepts it */
}

/* mkdir -p of dir below the directory top (which it lies beneath); with own,
** the new directories are the run's when the parent is root (they are on its
** private /tmp). */
__attribute__((no_sanitize("address", "undefined"))) static void mkdir_below(struct spawn_ctx *x, const char *top,
                                                                               const char *at, int own) {
  char dir[PATH_BUF];
  size_t dl = strlen(at);
  memcpy(dir, at, dl + 1);
  for (size_t j = strlen(top) + 1; j <= dl; j++) {
    if (dir[j] != '/' && dir[j] != 0) continue;
    dir[j] = 0;
    if (mkdir(dir, 0755) == 0) {
      if (own && x->root && chown(dir, AIRLOCK_RUN_UID, AIRLOCK_RUN_GID) < 0) fail(x, "chown(mount point)");
    } else if (errno != EEXIST) {
      fail(x, "mkdir(mount point)");
    }
    if (j < dl) dir[j] = '/';
  }
}

/* pre followed by path, into buf (the parent bounded both). */
__attribute__((no_sanitize("address", "undefined"))) static const char *under(char buf[PATH_BUF], const char *pre,
                                                                               const char *path) {
  size_t pl = strlen(pre), n = strlen(path);
  memcpy(buf, pre, pl);
  memcpy(buf + pl, path, n + 1);
  return buf;
}

/* Clones the tree at path (before anything hides it) and sets attr on it. */
__attribute__((no_sanitize("address", "undefined"))) static int clone_tree(struct spawn_ctx *x, const char *path,
                                                                             struct mount_attr *a, const char *what) {
  int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (fd < 0) fail(x, what);
  if (a->attr_set && syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, a, sizeof *a) < 0) fail(x, what);
  return fd;
}

/* The mounts of the child's own mount namespace, made while it still has the
** privilege. The root is made rprivate (nothing reaches the host). The
** workspace (o->workspace), the kept directories and, with a view, each of its
** paths are cloned before anything hides them: the workspace nosuid and nodev
** (idmapped to the caller when root), the kept ones and the view's read-only
** ones read-only. With a view the child's root becomes a new, empty tmpfs
** holding those clones alone at their paths (pivot_root), so what the policy
** does not name is not there at all: not for reading, nor for stat, inotify
** or locks; without one, with a workspace, the whole tree is made read-only
** instead. Each of o->tmpfs is covered by a private tmpfs and granted read and
** write in the Landlock ruleset (the parent could only have named the
** directory underneath); a pid namespace gets a /proc of its own. Returns, or
** fails. */
__attribute__((no_sanitize("address", "undefined"))) static void mount_all(struct spawn_ctx *x) {
  const airlock_spawn_opts *o = x->o;
  int fds[MAX_TREES], vfds[MAX_VIEW];
  char a_buf[PATH_BUF], b_buf[PATH_BUF];
  const char *pre = x->nview ? VIEW_STAGE : "";
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) fail(x, "mount(/, MS_REC|MS_PRIVATE)");
  for (int i = 0; i < x->ntrees; i++) {
    const struct tree *t = &x->trees[i];
    struct mount_attr a = { .attr_set = t->rw ? MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                                              : MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
    if (t->rw && x->idmap_fd >= 0) {
      a.attr_set |= MOUNT_ATTR_IDMAP;
      a.userns_fd = (unsigned)x->idmap_fd;
    }
    fds[i] = clone_tree(x, t->at, &a, !t->rw ? "clone the kept directory (open_tree, mount_setattr)"
                                     : x->idmap_fd >= 0 ? "idmap the workspace (mount_setattr MOUNT_ATTR_IDMAP)"
                                                        : "clone the workspace (open_tree, mount_setattr)");
  }
  for (int i = 0; i < x->nview; i++) {
    const struct view_path *v = &x->view[i];
    /* A root file system's entries are nodev too: an image may hold device nodes. */
    struct mount_attr a = { .attr_set = MOUNT_ATTR_NOSUID | (v->rw ? 0 : MOUNT_ATTR_RDONLY) |
                                        (v->source ? MOUNT_ATTR_NODEV : 0) };
    vfds[i] = v->kind == 'l' ? -1 : clone_tree(x, v->source ? v->source : v->path, &a,
                                               "clone a path of the view (open_tree)");
  }
  if (x->nview) {
    if (mount("tmpfs", VIEW_STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096") < 0)
      fail(x, "mount(the view's root tmpfs)");
    for (int i = 0; i < x->nview; i++) {   /* shortest first: a nested path lands on its parent */
      const struct view_path *v = &x->view[i];
      under(a_buf, pre, v->path);
      mkdir_below(x, pre, a_buf, 0);   /* the path itself too; a file's is replaced below */
      if (v->kind == 'l') {
        if (rmdir(a_buf) < 0 || symlink(v->target, a_buf) < 0) fail(x, "symlink(a path of the view)");
        continue;
      }
      if (v->kind == 'f') {
        int fd;
        if (rmdir(a_buf) < 0 || (fd = open(a_buf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) < 0)
          fail(x, "create a file's mount point in the view");
        close(fd);
      }
      if (syscall(SYS_move_mount, vfds[i], "", AT_FDCWD, a_buf, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        fail(x, "move_mount(a path of the view)");
      close(vfds[i]);
    }
  } else if (o->workspace) {
    /* Everything else read-only: Landlock does not cover chmod, chown, utimes
    ** or xattrs, and a caller who is not root stays the owner of its own
    ** files; a read-only mount refuses all of them (EROFS). The clones above
    ** are not attached, so the workspace stays writable. */
    struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID };   /* devices stay: /dev/null */
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof ro) < 0)
      fail(x, "mount_setattr(/, read-only)");
  }
  /* A /proc of the run's own pid namespace: the host's shows every host pid
  ** (stat answers even where Landlock forbids reading). */
  if ((x->nview || o->workspace) && (o->namespaces & CLONE_NEWPID)) {
    under(a_buf, pre, "/proc");
    if (x->nview) mkdir_below(x, pre, a_buf, 0);
    if (mount("proc", a_buf, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
      fail(x, "mount(/proc of the run's pid namespace)");
    /* Readable, as bubblewrap's --proc is: it shows the run's own processes
    ** alone (ps, a runtime reading /proc/self); the parent could not name it. */
    if (x->ruleset >= 0) {
      int fd = open(a_buf, O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) fail(x, "open(/proc)");
      int e = airlock_confine_prepared_grant_read(o->confine, x->ruleset, fd);
      close(fd);
      if (e < 0) { errno = -e; fail(x, "landlock_add_rule(/proc)"); }
    }
  }
  for (size_t i = 0; o->tmpfs && o->tmpfs[i]; i++) {
    under(a_buf, pre, o->tmpfs[i]);
    if (x->nview) mkdir_below(x, pre, a_buf, 0);
    if (mount("tmpfs", a_buf, "tmpfs", MS_NOSUID | MS_NODEV, x->tmpfs_data) < 0) fail(x, "mount(tmpfs)");
    for (int k = 0; k < x->ntrees; k++)
      if (x->trees[k].under == (long)i) mkdir_below(x, a_buf, under(b_buf, pre, x->trees[k].at), 1);
    if (x->ruleset >= 0) {
      int fd = open(a_buf, O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) fail(x, "open(tmpfs)");
      int e = airlock_confine_prepared_grant_rw(o->confine, x->ruleset, fd);
      close(fd);
      if (e < 0) { errno = -e; fail(x, "landlock_add_rule(tmpfs)"); }
    }
  }
  for (int i = 0; i < x->ntrees; i++) {
    under(a_buf, pre, x->trees[i].at);
    if (x->nview && x->trees[i].under < 0) mkdir_below(x, pre, a_buf, 0);
    if (syscall(SYS_move_mount, fds[i], "", AT_FDCWD, a_buf, MOVE_MOUNT_F_EMPTY_PATH) < 0)
      fail(x, x->trees[i].rw ? "move_mount(workspace)" : "move_mount(kept directory)");
    close(fds[i]);
  }
  /* Protected paths inside the workspace, now it is in place (spawn_protect.c):
  ** each a read-only bind of itself, the directories above it binds of
  ** themselves, so the program can neither change them nor add to them,
  ** remove or rename them (a mount point is busy). */
  if (x->protect) {
    const char *pstep = NULL;
    int wfd = open(under(a_buf, pre, o->workdir), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (wfd < 0) fail(x, "tool.protect: open the workspace");
    int e = airlock_protect_mask(x->protect, wfd, &pstep);
    close(wfd);
    if (e < 0) { errno = -e; fail(x, pstep); }
  }
  if (x->nview) {
    /* The view becomes the root; the old one is let go, then the new root's
    ** own tmpfs made read-only (the program makes nothing at the top). */
    if (chdir(VIEW_STAGE) < 0 || syscall(SYS_pivot_root, ".", ".") < 0) fail(x, "pivot_root(the view)");
    if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0) fail(x, "umount2(the old root)");
    struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, &ro, sizeof ro) < 0) fail(x, "mount_setattr(the view's root, read-only)");
  }
}

/* With egress_port: in the child's own net namespace, while it still holds
** CAP_NET_ADMIN there, brings the loopback up and listens on
** 127.0.0.1:egress_port, then hands the listener to the parent (SCM_RIGHTS)
** and closes its own copy. The run's egress proxy accepts on it from outside:
** the program reaches the proxy at that address and nothing else (its net
** namespace has no other device). Returns, or fails. */
__attribute__((no_sanitize("address", "undefined"))) static void egress_listen(struct spawn_ctx *x) {
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
  union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } cm;
  memset(&cm, 0, sizeof cm);
  char byte = 'L';
  struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &l, sizeof l);
  if (sendmsg(x->egress_w, &mh, MSG_NOSIGNAL) != 1) fail(x, "egress: hand the listener to the parent");
  close(l);
  close(x->egress_w);
}

/* Becomes host uid/gid AIRLOCK_RUN_UID/GID with no supplementary groups, in the
** run namespace when one is given: the parent is root, and a child must not be
** the owner of the host's files. The bounding set goes first, while the
** capabilities to drop it are still held. Returns, or fails. */
__attribute__((no_sanitize("address", "undefined"))) static void become_run_identity(struct spawn_ctx *x) {
  if (syscall(SYS_setgroups, 0, NULL) < 0) fail(x, "setgroups(none)");
  if (x->userns_fd >= 0 && setns(x->userns_fd, CLONE_NEWUSER) < 0) fail(x, "setns(run user namespace)");
  if (x->o->drop_caps && drop_capabilities() < 0) fail(x, "drop capabilities");
  /* Raw calls: glibc's set*id wrappers signal every thread, and this child
  ** shares the parent's memory but not its threads. */
  if (syscall(SYS_setresgid, AIRLOCK_RUN_GID, AIRLOCK_RUN_GID, AIRLOCK_RUN_GID) < 0) fail(x, "setresgid(65534)");
  if (syscall(SYS_setresuid, AIRLOCK_RUN_UID, AIRLOCK_RUN_UID, AIRLOCK_RUN_UID) < 0) fail(x, "setresuid(65534)");
}

/* Runs in the child, on a private stack, sharing the parent's memory until exec:
** only system calls, no allocation, no locks. */
__attribute__((no_sanitize("address", "undefined"))) static int child_main(void *arg) {
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
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, NULL) < 0) fail(x, "sigprocmask");
  /* Into the run's pids cgroup before anything else, so nothing escapes it. */
  for (int i = 0; i < o->ncgroup_fds; i++)
    if (o->cgroup_fds[i] >= 0 && write(o->cgroup_fds[i], "0", 1) != 1) fail(x, "join the run's cgroup");

  /* Joining a shared net namespace takes CAP_SYS_ADMIN over its owner (the
  ** initial user namespace), so it comes first. */
  if (o->netns_fd > 0 && setns(o->netns_fd, CLONE_NEWNET) < 0) fail(x, "setns(shared net namespace)");
  if (x->root && o->keep_identity) {
    /* The ledger process: root's uid, no groups; drop_caps empties its sets below. */
    if (syscall(SYS_setgroups, 0, NULL) < 0) fail(x, "setgroups(none)");
  } else if (x->root) {
    /* Born without a user namespace (see clone_flags), so every namespace it
    ** was born in is owned by the initial one: mount while we still hold its
    ** privilege, then become the run's identity, which holds none there. */
    if (o->tmpfs || x->ntrees) mount_all(x);
    if (x->egress_w >= 0) egress_listen(x);
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
    if (x->egress_w >= 0) egress_listen(x);
    if (o->tmpfs || x->ntrees) mount_all(x);
  }
  /* A session of its own (so a process group too, for the kill at the end): a
  ** program handed the caller's terminal cannot make itself the terminal's
  ** foreground (TIOCSPGRP) or type into it (TIOCSTI), which need the
  ** terminal to be its controlling one (bubblewrap's --new-session). */
  if (setsid() < 0) fail(x, "setsid");
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) fail(x, "prctl(PDEATHSIG)");
  /* The parent may have died before PDEATHSIG was armed (in a new pid
  ** namespace getppid() is 0: the parent is outside it, and it is blocked in vfork). */
  if (!(o->namespaces & CLONE_NEWPID) && getppid() != x->parent) { errno = ESRCH; fail(x, "parent gone"); }
  if (o->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail(x, "prctl(NO_NEW_PRIVS)");

  /* Move every source above the targets first, so dup2 into 0..3 cannot
  ** clobber a source that happens to sit at a low number. The confinement's
  ** ruleset and hand-over socket go to their fixed numbers below HIGH_FD
  ** (the hand-over's is named in the seccomp program), close-on-exec. */
  int hi[9] = { -1, -1, -1, -1, -1, -1, -1, -1, -1 };
  const int extra[5] = { x->ruleset, x->notify, x->exec_fd, x->init_fd, x->status_w };
  for (int i = 0; i < nfd; i++) {
    hi[i] = fcntl(x->src[i], F_DUPFD, HIGH_FD + i);
    if (hi[i] < 0) fail(x, "fcntl(F_DUPFD)");
  }
  for (int i = 0; i < 5; i++)
    if (extra[i] >= 0 && (hi[4 + i] = fcntl(extra[i], F_DUPFD_CLOEXEC, HIGH_FD)) < 0) fail(x, "fcntl(F_DUPFD)");
  for (int i = 0; i < nfd; i++)
    if (dup2(hi[i], i) < 0) fail(x, "dup2");
  int keep[NKEEP] = { -1, -1, -1, -1, -1 };   /* ascending */
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
  if (o->mdwe && prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) < 0) fail(x, "prctl(PR_SET_MDWE)");   /* not CLONE_VM: see airlock_spawn */
  if (chdir(o->workdir ? o->workdir : "/") < 0) fail(x, "chdir");
  if (o->drop_caps && drop_capabilities() < 0) fail(x, "drop capabilities");
  /* Last: RLIMIT_NOFILE may be below the fd numbers used above. */
  if (o->rlimits) {
    int e = airlock_apply_rlimits(o->rlimits);
    if (e < 0) { errno = -e; fail(x, "setrlimit"); }
  }
  /* The confinement, prepared by the parent: system calls only. After it,
  ** only exit_group (fail) and execve must pass the filter. */
  if (o->confine) {
    const char *step = NULL;
    int e = airlock_confine_apply_prepared_fds(o->confine, x->ruleset >= 0 ? AIRLOCK_CONFINE_RULESET_FD : -1,
                                               x->notify >= 0 ? AIRLOCK_CONFINE_NOTIFY_FD : -1, &step);
    if (e < 0) { errno = -e; fail(x, step ? step : "confine"); }
  }
  if (x->init_fd >= 0) {   /* PID 1, which runs the program as PID 2 */
    syscall(SYS_execveat, INIT_FD, "", x->init_argv, o->envp ? o->envp : empty_env, AT_EMPTY_PATH);
    fail(x, "exec airlock-init");
  }
  if (x->exec_fd >= 0)   /* opened by the parent: no path walk as uid 65534 */
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
static unsigned long clone_flags(const airlock_spawn_opts *o, int root) {
  unsigned long f = o->namespaces;
  if (o->netns_fd > 0) f &= ~(unsigned long)CLONE_NEWNET;
  if (root) f &= ~(unsigned long)CLONE_NEWUSER;
  return f;
}

/* Whether path is dir or lies beneath it. */
static int beneath(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == 0 || (n == 1 && dir[0] == '/'));
}

/* Adds a path of the view as it is now: at, where it appears, and source,
** what appears there (NULL: at itself; else owned by the entry). Returns 0
** when added, 1 when there is nothing to add (missing, or a link whose target
** does not fit), -E2BIG when the view is full. */
static int add_view_path(struct spawn_ctx *x, const char *at, char *source, int rw) {
  const char *what = source ? source : at;
  struct stat st;
  if (lstat(what, &st) < 0) return 1;
  if (x->nview == MAX_VIEW) return -E2BIG;
  struct view_path *v = &x->view[x->nview];
  memset(v, 0, sizeof *v);
  v->kind = S_ISLNK(st.st_mode) ? 'l' : S_ISDIR(st.st_mode) ? 'd' : 'f';
  if (v->kind == 'l') {
    ssize_t n = readlink(what, v->target, sizeof v->target - 1);
    if (n < 0 || (size_t)n >= sizeof v->target - 1) return 1;
    v->target[n] = 0;
  }
  v->path = at;
  v->source = source;
  v->rw = rw;
  x->nview++;
  return 0;
}

/* Whether /name (a top-level entry) is a directory above one of the paths
** the child makes or binds itself. */
static int above_own(const struct spawn_ctx *x, const airlock_spawn_opts *o, const char *name) {
  char top[300];
  snprintf(top, sizeof top, "/%s", name);
  for (int k = 0; k < x->ntrees; k++)
    if (beneath(x->trees[k].at, top)) return 1;
  for (size_t k = 0; o->tmpfs && o->tmpfs[k]; k++)
    if (beneath(o->tmpfs[k], top)) return 1;
  for (int k = 0; k < x->nview; k++)
    if (!x->view[k].source && beneath(x->view[k].path, top)) return 1;
  return 0;
}

/* A root file system's top-level entries as view paths (read-only, each at
** /NAME), except what the view makes itself (dev, proc, sys, tmp) and any
** directory above the workspace, a kept directory, a tmpfs or one of the
** view's own paths (those come from the host, so the view's root holds them). */
static int plan_rootfs(struct spawn_ctx *x, const airlock_spawn_opts *o, char *err, size_t errlen) {
  static const char *const own[] = { ".", "..", "dev", "proc", "sys", "tmp", NULL };
  size_t rl = strlen(o->rootfs);
  if (o->rootfs[0] != '/' || rl >= 3800 || rl < 2) {
    snprintf(err, errlen, "spawn: a root file system must be an absolute directory other than / (got '%s')", o->rootfs);
    return -EINVAL;
  }
  DIR *d = opendir(o->rootfs);
  if (!d) {
    int e = errno;
    snprintf(err, errlen, "rootfs: %s: %s", o->rootfs, airlock_strerror(e));
    return -e;
  }
  struct dirent *de;
  int rc = 0;
  while (rc == 0 && (de = readdir(d))) {
    int skip = strlen(de->d_name) > 250 || above_own(x, o, de->d_name);
    for (size_t i = 0; own[i] && !skip; i++) skip = strcmp(de->d_name, own[i]) == 0;
    if (skip) continue;
    char *src = malloc(rl + strlen(de->d_name) + 2), *at = malloc(strlen(de->d_name) + 2);
    if (!src || !at) { free(src); free(at); rc = -ENOMEM; snprintf(err, errlen, "rootfs: out of memory"); break; }
    sprintf(src, "%s/%s", o->rootfs, de->d_name);
    sprintf(at, "/%s", de->d_name);
    int added = add_view_path(x, at, src, 0);
    if (added != 0) { free(src); free(at); }   /* only an entry in the view owns them */
    if (added == -E2BIG) {
      snprintf(err, errlen, "rootfs: %s has more than %d entries at its top", o->rootfs, MAX_VIEW);
      rc = -E2BIG;
    }
  }
  closedir(d);
  return rc;
}

/* The view's paths, shortest first, as they are now (a missing one is left
** out: nothing is there to see). Returns 0, or -errno with a message. */
static int plan_view(struct spawn_ctx *x, const airlock_spawn_opts *o, char *err, size_t errlen) {
  const char *const *lists[2] = { o->view_ro, o->view_rw };
  int rc;
  for (int rw = 0; rw < 2; rw++)
    for (size_t i = 0; lists[rw] && lists[rw][i]; i++) {
      const char *p = lists[rw][i];
      if (p[0] != '/' || strlen(p) >= 4000 || (p[1] == 0)) {
        snprintf(err, errlen, "spawn: a view path must be an absolute path other than / (got '%s')", p);
        return -EINVAL;
      }
      int skip = 0;   /* the workspace and kept directories come in whole, as trees */
      for (int k = 0; k < x->ntrees && !skip; k++) skip = beneath(p, x->trees[k].at);
      for (int k = 0; k < x->nview && !skip; k++) {
        if (strcmp(x->view[k].path, p) == 0) { x->view[k].rw |= rw; skip = 1; }
      }
      if (!skip && add_view_path(x, p, NULL, rw) == -E2BIG) {
        snprintf(err, errlen, "spawn: a view holds at most %d paths", MAX_VIEW);
        return -E2BIG;
      }
    }
  if (o->rootfs && (rc = plan_rootfs(x, o, err, errlen)) < 0) return rc;
  for (int i = 1; i < x->nview; i++)   /* insertion sort by length: parents first */
    for (int j = i; j > 0 && strlen(x->view[j].path) < strlen(x->view[j - 1].path); j--) {
      struct view_path t = x->view[j];
      x->view[j] = x->view[j - 1];
      x->view[j - 1] = t;
    }
  if (x->nview == 0) {
    snprintf(err, errlen, "spawn: none of the view's paths exists");
    return -ENOENT;
  }
  if (!(o->namespaces & CLONE_NEWNS)) {
    snprintf(err, errlen, "spawn: a view needs the mount namespace");
    return -EINVAL;
  }
  return 0;
}

/* The index of the entry of tmpfs that path lies beneath, or -1. */
static long under_tmpfs(const char *const *tmpfs, const char *path) {
  for (long i = 0; tmpfs && tmpfs[i]; i++)
    if (beneath(path, tmpfs[i])) return i;
  return -1;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* The program as an fd for execveat, so the child (uid 65534) needs no search
** right on the directories above it (a build tree in a 0700 home). -1 for a
** script: its interpreter would be handed /dev/fd/N, closed by then, so a
** script is run by path. */
static int open_program(const char *rootfs, const char *path) {
  int fd;
  if (rootfs) {   /* the path as the program sees it: resolved inside the root file system */
    int rfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct open_how how = { .flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                            .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
    fd = rfd < 0 ? -1 : (int)syscall(SYS_openat2, rfd, path, &how, sizeof how);
    if (rfd >= 0) close(rfd);
  } else {
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  }
  if (fd < 0) return -1;
  struct stat st;
  char head[2];
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (pread(fd, head, 2, 0) == 2 && head[0] == '#' && head[1] == '!')) {
    close(fd);
    return -1;
  }
  return fd;
}

void airlock_child_close(airlock_child *c) {
  airlock_protect_release(c->protect, airlock_protect_child_gone(c->pidfd));
  c->protect = NULL;
  close_fd(&c->egress);
  close_fd(&c->pidfd);
  close_fd(&c->status);
  close_fd(&c->notify);
  close_fd(&c->chan);
  close_fd(&c->out);
  close_fd(&c->err);
}

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
  return 0;
}

/* The seccomp listener the child sent before exec (SCM_RIGHTS), or -1 when it
** sent none (no filter, or the kernel gave it no listener). */
static int receive_listener(int sock) {
  union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } cm;
  char byte;
  struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                       .msg_controllen = sizeof cm.buf };
  if (recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) != 1) return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
    return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

int airlock_spawn(const airlock_spawn_opts *o, airlock_child *c, char *err, size_t errlen) {
  int sv[2] = { -1, -1 }, po[2] = { -1, -1 }, pe[2] = { -1, -1 }, nt[2] = { -1, -1 }, eg[2] = { -1, -1 };
  int devnull = -1;
  struct spawn_ctx x;
  sigset_t all, old;
  void *stack = MAP_FAILED;
  struct spawn_report *rep;
  const char *step = NULL;
  char abs_path[4096], ename[24];
  int rc = 0;

  int st[2] = { -1, -1 };
  c->pid = -1; c->pidfd = c->chan = c->out = c->err = c->notify = c->status = c->egress = -1;
  c->protect = NULL;
  memset(&x, 0, sizeof x);
  x.exec_fd = x.init_fd = x.status_w = x.egress_w = -1;
  if (o && o->egress_port && (o->egress_port > 65535 || !(o->namespaces & CLONE_NEWNET) || o->netns_fd > 0)) {
    snprintf(err, errlen, "spawn: an egress listener needs a port (1-65535) and a net namespace of the "
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
  const char *prog = o->path ? o->path : o->argv[0];
  if (o->confine && o->confine->prog.filter && !(o->confine->allows_exec & 1)) {
    snprintf(err, errlen, "confinement: the seccomp filter does not allow execve, so %s could "
             "never start (promise 'exec')", prog);
    return -EINVAL;
  }
  if (o->tmpfs && o->tmpfs[0] && !(o->namespaces & CLONE_NEWNS)) {
    snprintf(err, errlen, "spawn: a private tmpfs (%s) needs the mount namespace", o->tmpfs[0]);
    return -EINVAL;
  }
  for (size_t k = 0; o->keep && o->keep[k]; k++)
    if (o->keep[k][0] != '/' || strlen(o->keep[k]) >= 4096) {
      snprintf(err, errlen, "spawn: a kept directory must be an absolute path under 4096 bytes");
      return -EINVAL;
    }
  if (o->workspace && o->workdir && (o->workdir[0] != '/' || strlen(o->workdir) >= 4096 || !o->workdir[1])) {
    snprintf(err, errlen, "spawn: a workspace must be an absolute directory other than /, under 4096 bytes");
    return -EINVAL;
  }
  /* The child changes directory before exec: resolve a relative program now. */
  if (prog[0] != '/') {
    if (!getcwd(abs_path, sizeof abs_path - 1) ||
        strlen(abs_path) + 1 + strlen(prog) >= sizeof abs_path) {
      snprintf(err, errlen, "spawn: cannot make '%s' an absolute path", prog);
      return -ENAMETOOLONG;
    }
    strcat(abs_path, "/");
    strcat(abs_path, prog);
  }
  if (o->channel && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) { step = "socketpair"; goto fail; }
  /* Capture pipes, unless the caller hands the child its own descriptors. */
  if ((o->stdout_fd <= 0 && pipe2(po, O_CLOEXEC) < 0) || (o->stderr_fd <= 0 && pipe2(pe, O_CLOEXEC) < 0)) {
    step = "pipe2";
    goto fail;
  }
  if (o->stdin_fd < 0 && (devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) { step = "open /dev/null"; goto fail; }
  if (o->confine && o->confine->notify_prog.filter &&
      socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, nt) < 0) { step = "socketpair"; goto fail; }
  if (o->egress_port && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, eg) < 0) { step = "socketpair"; goto fail; }
  stack = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) { step = "mmap(stack)"; goto fail; }
  rep = stack;
  rep->step = NULL;
  rep->err = 0;

  x.o = o;
  x.rep = rep;
  x.path = prog[0] == '/' ? prog : abs_path;
  x.parent = getpid();
  x.uid = geteuid();
  x.gid = getegid();
  x.src[0] = o->stdin_fd >= 0 ? o->stdin_fd : devnull;
  x.src[1] = o->stdout_fd > 0 ? o->stdout_fd : po[1];
  x.src[2] = o->stderr_fd > 0 ? o->stderr_fd : pe[1];
  x.src[3] = o->channel ? sv[1] : -1;
  x.ruleset = o->confine && o->confine->ruleset_fd >= 0 ? o->confine->ruleset_fd : -1;
  x.notify = nt[1];
  x.egress_w = eg[1];
  x.userns_fd = x.idmap_fd = -1;
  x.root = x.uid == 0;
  size_t nprotect = 0;
  for (; o->protect && o->protect[nprotect]; nprotect++) {
    const char *p = o->protect[nprotect];
    size_t wl = o->workdir ? strlen(o->workdir) : 0;
    if (!o->workspace || p[0] != '/' || strlen(p) >= 4096 || strncmp(p, o->workdir, wl) != 0 || p[wl] != '/' ||
        nprotect >= AIRLOCK_PROTECT_MAX) {
      snprintf(err, errlen, "spawn: tool.protect: protected paths must be at most %d absolute paths beneath the "
               "workspace (%s)", AIRLOCK_PROTECT_MAX, p);
      rc = -EINVAL;
      goto cleanup;
    }
  }
  if (o->workspace && (!o->workdir || !(o->namespaces & CLONE_NEWNS))) {
    errno = EINVAL;
    step = "a workspace needs a workdir and the mount namespace";
    goto fail;
  }
  if (o->workspace) x.trees[x.ntrees++] = (struct tree){ o->workdir, -1, 1 };
  /* A kept directory matters below a tmpfs, or in a view (elsewhere it is
  ** visible anyway). */
  for (size_t k = 0; o->keep && o->keep[k]; k++) {
    if (x.ntrees == MAX_TREES) { errno = E2BIG; step = "more than four kept directories"; goto fail; }
    x.trees[x.ntrees] = (struct tree){ o->keep[k], -1, 0 };
    x.ntrees += o->view_ro || o->view_rw || o->rootfs || under_tmpfs(o->tmpfs, o->keep[k]) >= 0;
  }
  for (int k = 0; k < x.ntrees; k++) x.trees[k].under = under_tmpfs(o->tmpfs, x.trees[k].at);
  if ((o->view_ro || o->view_rw || o->rootfs) && (rc = plan_view(&x, o, err, errlen)) < 0) goto cleanup;
  if (x.root) {
    if ((o->namespaces & CLONE_NEWUSER) &&
        (x.userns_fd = airlock_identity_userns(AIRLOCK_RUN_USERNS, err, errlen)) < 0) {
      rc = x.userns_fd;
      goto cleanup;
    }
    if (o->workspace && (x.idmap_fd = airlock_identity_userns(AIRLOCK_IDMAP_USERNS, err, errlen)) < 0) {
      rc = x.idmap_fd;
      goto cleanup;
    }
    if (!o->confine || !o->confine->prog.filter || (o->confine->allows_exec & 2))
      x.exec_fd = open_program(o->rootfs, x.path);
  }
  if (o->init && (o->namespaces & CLONE_NEWPID)) {
    if (o->confine && o->confine->prog.filter && !(o->confine->allows_exec & 2)) {
      snprintf(err, errlen, "confinement: the seccomp filter does not allow execveat, which starts "
               "airlock-init, the program's PID 1 (promise 'exec')");
      rc = -EINVAL;
      goto cleanup;
    }
    size_t argc = 0;
    while (o->argv[argc]) argc++;
    x.init_argv = calloc(argc + 3, sizeof *x.init_argv);
    if (!x.init_argv) { errno = ENOMEM; step = "calloc"; goto fail; }
    x.init_argv[0] = "airlock-init";
    x.init_argv[1] = x.exec_fd >= 0 ? "" : x.path;
    for (size_t i = 0; i < argc; i++) x.init_argv[2 + i] = o->argv[i];
    if ((x.init_fd = open(o->init, O_RDONLY | O_CLOEXEC)) < 0) { step = "open airlock-init"; goto fail; }
    if (pipe2(st, O_CLOEXEC) < 0) { step = "pipe2"; goto fail; }
    x.status_w = st[1];
  }
  /* Last before the child: what tool.protect names is held (and what is
  ** missing made) only once nothing else can fail before the clone. */
  if (nprotect && (rc = airlock_protect_hold(o->workdir, o->protect, &x.protect, err, errlen)) < 0) goto cleanup;
  if (o->tmpfs) {
    /* What the child's mounts need, made here where stdio may be used. */
    char size[24];
    snprintf(size, sizeof size, "%lu", AIRLOCK_TMPFS_SIZE_DEFAULT);
    if ((size_t)snprintf(x.tmpfs_data, sizeof x.tmpfs_data, "mode=1777,size=%s,nr_inodes=%lu",
                         o->tmpfs_size ? o->tmpfs_size : size,
                         o->tmpfs_inodes ? o->tmpfs_inodes : AIRLOCK_TMPFS_INODES_DEFAULT) >= sizeof x.tmpfs_data) {
      errno = EINVAL;
      step = "tmpfs size";
      goto fail;
    }
  }

  /* Block signals so no parent handler runs in the child on shared memory. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  /* Memory-deny-write-execute is a property of the address space: set in a
  ** CLONE_VM child it would mark the caller's. That child gets a copy. */
  int flags = o->mdwe ? (SPAWN_FLAGS & ~CLONE_VM) : SPAWN_FLAGS;
  c->pid = clone(child_main, (char *)stack + CHILD_STACK_SIZE, flags | (int)clone_flags(o, x.root), &x);
  int clone_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (c->pid < 0) { errno = clone_errno; step = "clone"; goto fail; }

  if (nt[0] >= 0) c->notify = receive_listener(nt[0]);
  if (eg[0] >= 0) c->egress = receive_listener(eg[0]);
  if (rep->step) {   /* the child failed before exec and has exited */
    close_fd(&c->notify);
    close_fd(&c->egress);
    waitpid(c->pid, NULL, 0);
    c->pid = -1;
    errno = rep->err;
    if (strcmp(rep->step, "exec") == 0) {
      rc = -errno;
      snprintf(err, errlen, "exec %s: %s (%s)", prog, strerror(errno), airlock_errno_name(errno, ename, sizeof ename));
      goto cleanup;
    }
    step = rep->step;
    goto fail;
  }

  if (eg[0] >= 0 && c->egress < 0) {   /* the child said nothing failed: it cannot be */
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    close_fd(&c->notify);
    c->pid = -1;
    errno = EPROTO;
    step = "egress: the listener did not arrive from the child";
    goto fail;
  }
  c->pidfd = (int)syscall(SYS_pidfd_open, c->pid, 0);   /* CLOEXEC by definition */
  c->protect = x.protect;   /* released by airlock_child_close, once the child is gone */
  x.protect = NULL;
  c->chan = o->channel ? sv[0] : -1;
  c->out = po[0];
  c->err = pe[0];
  c->status = st[0];
  sv[0] = po[0] = pe[0] = st[0] = -1;
  if ((c->chan >= 0 && set_nonblock(c->chan) < 0) || (c->out >= 0 && set_nonblock(c->out) < 0) ||
      (c->status >= 0 && set_nonblock(c->status) < 0) ||
      (c->err >= 0 && set_nonblock(c->err) < 0) || (c->notify >= 0 && set_nonblock(c->notify) < 0)) {
    int saved = errno;
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    airlock_child_close(c);
    c->pid = -1;
    errno = saved;
    step = "fcntl(O_NONBLOCK)";
    goto fail;
  }
  goto cleanup;

fail:
  rc = -errno;
  snprintf(err, errlen, "spawn: %s: %s (%s)", step, strerror(-rc), airlock_errno_name(-rc, ename, sizeof ename));
cleanup:
  if (stack != MAP_FAILED) munmap(stack, CHILD_STACK_SIZE);
  close_fd(&sv[0]); close_fd(&sv[1]);
  close_fd(&po[0]); close_fd(&po[1]);
  close_fd(&pe[0]); close_fd(&pe[1]);
  close_fd(&nt[0]); close_fd(&nt[1]);
  close_fd(&eg[0]); close_fd(&eg[1]);
  close_fd(&devnull);
  close_fd(&x.exec_fd);
  close_fd(&x.init_fd);
  close_fd(&st[0]); close_fd(&st[1]);
  free(x.init_argv);
  airlock_protect_release(x.protect, 1);   /* the run did not start: its child, if any, is gone */
  for (int i = 0; i < x.nview; i++)
    if (x.view[i].source) { free(x.view[i].source); free((char *)x.view[i].path); }
  return rc;
}

int airlock_netns_new(char *err, size_t errlen) {
  pid_t pid = airlock_ns_holder_start_(CLONE_NEWNET, "netns", err, errlen);
  if (pid < 0) {
    snprintf(err, errlen, "netns: cannot make an empty net namespace: %s", airlock_strerror((int)-pid));
    return (int)pid;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/net", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC), e = errno;
  airlock_ns_holder_end_(pid);
  if (fd < 0) {
    snprintf(err, errlen, "netns: cannot make an empty net namespace: %s", airlock_strerror(e));
    return -e;
  }
  return fd;
}
