/*
** confine_prepare.c -- a policy-driven confinement (airlock_confine_spec): a
** Landlock ruleset with path and port rules, and a seccomp filter built from
** promise words (confine_promises.c) or a denylist. Everything that allocates,
** opens paths or compiles happens in airlock_confine_prepare, in the parent; the
** apply step makes only system calls, so the spawner's child can run it between
** clone(CLONE_VM|CLONE_VFORK) and exec.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/fs.h> /* FICLONE, FICLONERANGE, FIDEDUPERANGE */
#include <linux/seccomp.h>
#include <seccomp.h>

#include "airlock.h"
#include "fd_send.h"
#include "confine.h"
#include "landlock_compat.h"

#ifndef SECCOMP_FILTER_FLAG_NEW_LISTENER
#define SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
#endif
#ifndef __O_TMPFILE
#define __O_TMPFILE 020000000
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

static size_t list_len(const char *const *l)
{
  size_t n = 0;
  while (l != NULL && l[n] != NULL) n++;
  return n;
}

/* ------------------------------------------------------------------ landlock */

/* The spec's ruleset (confine_landlock.c), kept open for the apply step. */
static int prepare_landlock(const airlock_confine_spec *s, airlock_confine_prepared *p, char *err,
                            size_t errlen)
{
  airlock_landlock_rules r = {
      .read = s->fs_read,
      .write = s->fs_write,
      .exec = s->fs_exec,
      .bind = s->tcp_bind,
      .n_bind = s->n_tcp_bind,
      .connect = s->tcp_connect,
      .n_connect = s->n_tcp_connect,
      .no_scope = s->no_scope,
  };
  int fd = airlock_landlock_ruleset(&r, &p->handled_fs, &p->landlock);
  if (fd < 0) {
    snprintf(err, errlen, "landlock: %s", p->landlock.detail);
    return fd;
  }
  p->ruleset_fd = fd;
  return 0;
}

/* ------------------------------------------------------------------ seccomp rules */

/* One argument comparison: (arg[i] & mask) == datum. */
struct cond {
  unsigned arg;
  uint64_t mask, datum;
};

#define MAX_CONDS 24
#define MAX_SOFT  4
enum { OPEN_RDONLY = 1, OPEN_WRITE = 2, OPEN_CREATE = 4 };

/* What the spec says about one system call. "all": the mode's action (allow in an
** allowlist, refuse in a denylist) for every call; else for calls matching one
** of conds. soft: refused with an errno in either mode. */
struct entry {
  const char *name;
  int nr;
  int all;
  struct cond conds[MAX_CONDS];
  int nconds;
  struct {
    struct cond c;
    int uncond, err;
  } soft[MAX_SOFT];
  int nsoft;
  int open_modes;
};

struct ruleset {
  struct entry *e;
  size_t n, cap;
};

static struct entry *entry_for(struct ruleset *rs, const char *name, size_t len)
{
  for (size_t i = 0; i < rs->n; i++)
    if (strlen(rs->e[i].name) == len && memcmp(rs->e[i].name, name, len) == 0) return &rs->e[i];
  if (rs->n == rs->cap) {
    size_t ncap = rs->cap ? rs->cap * 2 : 256;
    struct entry *ne = realloc(rs->e, ncap * sizeof *ne);
    if (ne == NULL) return NULL;
    rs->e = ne;
    rs->cap = ncap;
  }
  struct entry *e = &rs->e[rs->n];
  char *copy = strndup(name, len);
  if (copy == NULL) return NULL;
  memset(e, 0, sizeof *e);
  e->name = copy;
  e->nr = seccomp_syscall_resolve_name(copy);
  rs->n++;
  return e;
}

static void ruleset_free(struct ruleset *rs)
{
  for (size_t i = 0; i < rs->n; i++) free((char *)rs->e[i].name);
  free(rs->e);
  memset(rs, 0, sizeof *rs);
}

static const struct {
  const char *name;
  unsigned long value;
} symbols[] = {
    {"AF_UNIX", AF_UNIX},
    {"AF_INET", AF_INET},
    {"AF_INET6", AF_INET6},
    {"AF_NETLINK", AF_NETLINK},
    {"TCGETS", TCGETS},
    {"TCSETS", TCSETS},
    {"TCSETSW", TCSETSW},
    {"TCSETSF", TCSETSF},
    {"TIOCGWINSZ", TIOCGWINSZ},
    {"TIOCSWINSZ", TIOCSWINSZ},
    {"TIOCGPGRP", TIOCGPGRP},
    {"TIOCSPGRP", TIOCSPGRP},
    {"TCFLSH", TCFLSH},
    {"TCXONC", TCXONC},
    {"TIOCGSID", TIOCGSID},
    {"TIOCSCTTY", TIOCSCTTY},
    {"TIOCSTI", TIOCSTI},
    {"TIOCLINUX", TIOCLINUX},
    {"FIONREAD", FIONREAD},
    {"FIONBIO", FIONBIO},
    {"FIOCLEX", FIOCLEX},
    {"FIONCLEX", FIONCLEX},
    {"FICLONE", FICLONE},
    {"FICLONERANGE", FICLONERANGE},
    {"FIDEDUPERANGE", FIDEDUPERANGE},
    {"PR_SET_NAME", PR_SET_NAME},
    {"PR_GET_NAME", PR_GET_NAME},
    {"EACCES", EACCES},
    {"ENOSYS", ENOSYS},
    {"EPERM", EPERM},
};

static int symbol(const char *s, size_t len, unsigned long *out)
{
  for (size_t i = 0; i < sizeof symbols / sizeof *symbols; i++)
    if (strlen(symbols[i].name) == len && memcmp(symbols[i].name, s, len) == 0) {
      *out = symbols[i].value;
      return 0;
    }
  return -1;
}

/* The namespace flags clone(2) takes (CLONE_NEWTIME is clone3/unshare only:
** in clone's flags its bit is part of the exit signal). */
static const unsigned long clone_ns_flags[] = {
    CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
};

static int add_cond(struct entry *e, unsigned arg, uint64_t mask, uint64_t datum)
{
  for (int i = 0; i < e->nconds; i++)
    if (e->conds[i].arg == arg && e->conds[i].mask == mask && e->conds[i].datum == datum) return 0;
  if (e->nconds == MAX_CONDS) return -1;
  e->conds[e->nconds++] = (struct cond){arg, mask, datum};
  return 0;
}

/* The condition named by value v of call e (see the grammar in confine_promises.c). */
static int value_cond(struct entry *e, const char *v, size_t len, struct cond *c, int *multi)
{
  unsigned long val;
  *multi = 0;
#define IS(lit) (len == sizeof(lit) - 1 && memcmp(v, (lit), len) == 0)
  if (IS("no-namespaces")) {
    unsigned long all = 0;
    for (size_t i = 0; i < sizeof clone_ns_flags / sizeof *clone_ns_flags; i++) all |= clone_ns_flags[i];
    *c = (struct cond){0, all, 0};
    return 0;
  }
  if (IS("namespaces")) { /* one condition per flag: any of them matches */
    *multi = 1;
    return 0;
  }
  if (IS("self")) {
    *c = (struct cond){0, 0xffffffffu, 0};
    return 0;
  }
  if (IS("AT_EMPTY_PATH")) {
    unsigned arg = strcmp(e->name, "statx") == 0 ? 2 : 3; /* newfstatat: arg 3 */
    *c = (struct cond){arg, AT_EMPTY_PATH, AT_EMPTY_PATH};
    return 0;
  }
#undef IS
  if (symbol(v, len, &val) != 0) return -1;
  /* The key argument: the request for ioctl, the first one otherwise. The
  ** kernel reads these as int, so only the low 32 bits are compared. */
  unsigned arg = strcmp(e->name, "ioctl") == 0 ? 1 : 0;
  *c = (struct cond){arg, 0xffffffffu, val};
  return 0;
}

/* Adds every token of a table string (or one raw name when raw) to rs.
** Returns 0, or -EINVAL with err naming what could not be read. */
static int add_list(struct ruleset *rs, const char *list, char *err, size_t errlen)
{
  const char *p = list;
  while (*p != '\0') {
    while (*p == ' ') p++;
    if (*p == '\0') break;
    size_t nlen = strcspn(p, " (");
    struct entry *e = entry_for(rs, p, nlen);
    if (e == NULL) {
      snprintf(err, errlen, "seccomp: out of memory");
      return -ENOMEM;
    }
    p += nlen;
    if (*p != '(') {
      e->all = 1;
      continue;
    }
    const char *close = strchr(p, ')');
    if (close == NULL) goto bad;
    p++;
    while (p < close) {
      size_t alen = strcspn(p, "|)");
      const char *eq = memchr(p, '=', alen);
      size_t vlen = eq ? (size_t)(eq - p) : alen;
      if (eq != NULL) { /* a soft refusal: V=ERRNO or =ERRNO */
        unsigned long en;
        if (symbol(eq + 1, alen - vlen - 1, &en) != 0 || e->nsoft == MAX_SOFT) goto bad;
        int multi;
        e->soft[e->nsoft].uncond = vlen == 0;
        e->soft[e->nsoft].err = (int)en;
        if (vlen > 0 && (value_cond(e, p, vlen, &e->soft[e->nsoft].c, &multi) != 0 || multi)) goto bad;
        e->nsoft++;
      } else if (strcmp(e->name, "open") == 0 || strcmp(e->name, "openat") == 0 ||
                 strcmp(e->name, "creat") == 0) {
        if (vlen == 6 && memcmp(p, "rdonly", 6) == 0)
          e->open_modes |= OPEN_RDONLY;
        else if (vlen == 5 && memcmp(p, "write", 5) == 0)
          e->open_modes |= OPEN_WRITE;
        else if (vlen == 6 && memcmp(p, "create", 6) == 0)
          e->open_modes |= OPEN_CREATE;
        else
          goto bad;
      } else {
        struct cond c;
        int multi;
        if (value_cond(e, p, vlen, &c, &multi) != 0) goto bad;
        if (multi) {
          for (size_t i = 0; i < sizeof clone_ns_flags / sizeof *clone_ns_flags; i++)
            if (add_cond(e, 0, clone_ns_flags[i], clone_ns_flags[i]) != 0) goto bad;
        } else if (add_cond(e, c.arg, c.mask, c.datum) != 0) {
          goto bad;
        }
      }
      p += alen;
      if (*p == '|') p++;
    }
    p = close + 1;
    continue;
  bad:
    snprintf(err, errlen, "seccomp: cannot read the rule for '%s' in the built-in table", e->name);
    return -EINVAL;
  }
  return 0;
}

/* The open family's conditions from the union of the promised modes (the
** modes were collected on "open"; openat and creat follow them). */
static void resolve_open_modes(struct ruleset *rs)
{
  int modes = 0;
  for (size_t i = 0; i < rs->n; i++) {
    struct entry *e = &rs->e[i];
    if (strcmp(e->name, "open") == 0 || strcmp(e->name, "openat") == 0 || strcmp(e->name, "creat") == 0)
      modes |= e->open_modes;
  }
  if (modes == 0) return;
  uint64_t mask = 0;
  if (!(modes & OPEN_WRITE)) mask |= O_ACCMODE | O_TRUNC;
  if (!(modes & OPEN_CREATE)) mask |= O_CREAT | __O_TMPFILE;
  for (size_t i = 0; i < rs->n; i++) {
    struct entry *e = &rs->e[i];
    if (e->open_modes == 0 || e->all) continue;
    if (strcmp(e->name, "creat") == 0) {
      e->all = (modes & (OPEN_WRITE | OPEN_CREATE)) == (OPEN_WRITE | OPEN_CREATE);
      e->open_modes = 0;
      continue;
    }
    unsigned arg = strcmp(e->name, "open") == 0 ? 1 : 2;
    if (mask == 0)
      e->all = 1;
    else
      add_cond(e, arg, mask, 0);
  }
}

static struct entry *find(struct ruleset *rs, const char *name)
{
  for (size_t i = 0; i < rs->n; i++)
    if (strcmp(rs->e[i].name, name) == 0) return &rs->e[i];
  return NULL;
}

/* ------------------------------------------------------------------ seccomp build */

#define ARG_CMP(c)                                                                   \
  ((struct scmp_arg_cmp){.arg = (c).arg,                                             \
                         .op = (c).mask == ~0ULL ? SCMP_CMP_EQ : SCMP_CMP_MASKED_EQ, \
                         .datum_a = (c).mask == ~0ULL ? (c).datum : (c).mask,        \
                         .datum_b = (c).mask == ~0ULL ? 0 : (c).datum})

static int rule(scmp_filter_ctx ctx, uint32_t def, uint32_t action, int nr, const struct cond *c)
{
  if (action == def) return 0; /* libseccomp refuses a rule that repeats the default */
  int rc = c ? seccomp_rule_add_exact(ctx, action, nr, 1, ARG_CMP(*c))
             : seccomp_rule_add_exact(ctx, action, nr, 0);
  return rc == -EEXIST ? 0 : rc;
}

/* The calls that set a file's mode, and which argument holds it. No run may
** make a setuid or setgid file: one left in a workspace would keep its bits on
** the host after the run (nosuid holds only inside the run's own mounts), so
** these calls are refused with EPERM when the mode has S_ISUID or S_ISGID, in
** either mode of filter, whatever the promises. */
static const struct {
  const char *name;
  unsigned arg;
} setid_calls[] = {
    {"chmod", 1},  {"fchmod", 1}, {"fchmodat", 2}, {"fchmodat2", 2}, {"open", 2},
    {"openat", 3}, {"creat", 1},  {"mknod", 1},    {"mknodat", 2},
};
#define SETID_BITS 06000

static int setid_arg(const char *name)
{
  for (size_t i = 0; i < sizeof setid_calls / sizeof *setid_calls; i++)
    if (strcmp(setid_calls[i].name, name) == 0) return (int)setid_calls[i].arg;
  return -1;
}

/* The action of learn mode's observed calls while compiling: a value no other
** rule returns (SECCOMP_RET_TRACE with our own data), replaced afterwards: the
** listener's in the notify program, allowed in the plain one. */
#define OBSERVE_MARK SCMP_ACT_TRACE(0x7a2)

/* rule() for a call that sets a mode: each allowing (or observing) rule also
** needs the mode to have no setid bit (mode_arg < 0: a call without one,
** rule() as it is). */
static int mode_rule(scmp_filter_ctx ctx, uint32_t def, uint32_t action, int nr, const struct cond *c,
                     int mode_arg)
{
  if (mode_arg < 0 || (action != SCMP_ACT_ALLOW && action != OBSERVE_MARK))
    return rule(ctx, def, action, nr, c);
  struct scmp_arg_cmp m = SCMP_CMP((unsigned)mode_arg, SCMP_CMP_MASKED_EQ, SETID_BITS, 0);
  if (c && c->arg == (unsigned)mode_arg) return -EINVAL; /* no promise filters a mode argument itself */
  int rc = c ? seccomp_rule_add_exact(ctx, action, nr, 2, ARG_CMP(*c), m)
             : seccomp_rule_add_exact(ctx, action, nr, 1, m);
  return rc == -EEXIST ? 0 : rc;
}

/* The EPERM rules for a setid mode on every call of setid_calls the filter does
** not refuse outright (a denylist's full refusal wins). */
static int setid_refusals(scmp_filter_ctx ctx, const struct ruleset *rs, int deny, uint32_t def)
{
  for (size_t i = 0; i < sizeof setid_calls / sizeof *setid_calls; i++) {
    int nr = seccomp_syscall_resolve_name(setid_calls[i].name);
    if (nr < 0) continue;
    const struct entry *e = find((struct ruleset *)rs, setid_calls[i].name);
    if (deny && e && e->all) continue;
    for (uint64_t bit = 04000; bit >= 02000; bit >>= 1) {
      struct cond c = {setid_calls[i].arg, bit, bit};
      int rc = rule(ctx, def, SCMP_ACT_ERRNO(EPERM), nr, &c);
      if (rc != 0) return rc;
    }
  }
  return 0;
}

/* fcntl's F_SETLEASE and F_NOTIFY are refused with EPERM in either mode: a lease
** stalls whoever opens the file next (a root writer, for up to lease-break-time),
** and dnotify reports what the host does in any directory the run can read.
** In an allowlist that grants fcntl, the allowing rules are all values but these. */
static int fcntl_rules(scmp_filter_ctx ctx, const struct entry *e, int deny, uint32_t def,
                       uint32_t mode_action)
{
  int rc = 0;
  if (!deny && e && e->all) {
    /* The kernel reads cmd as 32 bits, and libseccomp cannot put two tests on one
    ** argument, so "neither value" is spelled bit by bit: cmd is allowed when
    ** any bit of its low word other than bit 1 (the one in which F_SETLEASE and
    ** F_NOTIFY differ) differs from F_SETLEASE's. */
    for (unsigned bit = 0; bit < 32 && rc == 0; bit++) {
      uint64_t m = (uint64_t)1 << bit;
      if (m == (F_SETLEASE ^ F_NOTIFY)) continue;
      rc = seccomp_rule_add_exact(ctx, mode_action, e->nr, 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, m, (F_SETLEASE & m) ^ m));
    }
  }
  if (rc != 0 || (deny && e && e->all) || (!deny && !(e && e->all)))
    return rc; /* refused whole, or not allowed at all: the default covers it */
  int nr = seccomp_syscall_resolve_name("fcntl");
  for (int k = 0; k < 2 && rc == 0; k++) {
    struct cond c = {1, 0xffffffffu, k ? F_NOTIFY : F_SETLEASE};
    rc = rule(ctx, def, SCMP_ACT_ERRNO(EPERM), nr, &c);
  }
  return rc;
}

/* The action of the listener hand-over rule while compiling: a value no other
** rule returns (SECCOMP_RET_TRACE with our own data), replaced afterwards. */
#define HANDOVER_MARK SCMP_ACT_TRACE(0x7a1)
/* The same for learn mode's observed calls: the listener's in the notify
** program, allowed in the plain one. */
#define OBSERVE_MARK  SCMP_ACT_TRACE(0x7a2)

/* The observe rule of execveat: OBSERVE_MARK but from the fds the spawner's
** child and airlock-init start airlock-init and the program from, which are
** let through (confine.h says why). */
static int observe_execveat(scmp_filter_ctx ctx, uint32_t def)
{
  _Static_assert(AIRLOCK_SPAWN_EXEC_FD == AIRLOCK_SPAWN_INIT_FD + 2, "the fds between are observed");
  int nr = SCMP_SYS(execveat), rc = 0;
  const struct scmp_arg_cmp observed[] = {
      {.arg = 0, .op = SCMP_CMP_LT, .datum_a = AIRLOCK_SPAWN_INIT_FD, .datum_b = 0},
      {.arg = 0, .op = SCMP_CMP_EQ, .datum_a = AIRLOCK_SPAWN_INIT_FD + 1, .datum_b = 0},
      {.arg = 0, .op = SCMP_CMP_GT, .datum_a = AIRLOCK_SPAWN_EXEC_FD, .datum_b = 0}};
  for (size_t i = 0; i < sizeof observed / sizeof *observed && rc == 0; i++) {
    rc = seccomp_rule_add_exact(ctx, OBSERVE_MARK, nr, 1, observed[i]);
    if (rc == -EEXIST) rc = 0;
  }
  const int spawn_fds[] = {AIRLOCK_SPAWN_INIT_FD, AIRLOCK_SPAWN_EXEC_FD};
  for (size_t i = 0; i < sizeof spawn_fds / sizeof *spawn_fds && rc == 0; i++)
    rc = rule(ctx, def, SCMP_ACT_ALLOW, nr, &(struct cond){0, 0xffffffffu, (uint64_t)spawn_fds[i]});
  return rc;
}

/* Compiles rs into a classic BPF program. refuse: the action for refused calls;
** notify_fd >= 0 adds "sendmsg on that fd gets HANDOVER_MARK"; observe makes
** every observed call (airlock_observed_calls) OBSERVE_MARK, whatever rs says
** (execveat but from the spawner's fds: observe_execveat);
** observe_connect makes connect OBSERVE_MARK only where rs lets it through
** whole (never a refused connect let through: the listener continues it). */
static int compile(const struct ruleset *rs, int deny, uint32_t refuse, int notify_fd, int observe,
                   int observe_connect, struct sock_fprog *out, int *nrules, char *err, size_t errlen)
{
  int rc;
  uint32_t def = deny ? SCMP_ACT_ALLOW : refuse;
  scmp_filter_ctx ctx = seccomp_init(def);
  if (ctx == NULL) {
    snprintf(err, errlen, "seccomp: seccomp_init failed");
    return -ENOMEM;
  }
  /* The context holds only the native architecture: a call from another ABI
  ** (int $0x80 on x86_64) and, on x86_64, a number with the x32 bit take the
  ** bad-arch action, which is death in both modes. */
  if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0 &&
      (rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_THREAD)) != 0) {
    snprintf(err, errlen, "seccomp: seccomp_attr_set(BADARCH): %s", airlock_strerror(-rc));
    seccomp_release(ctx);
    return rc;
  }
  (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2); /* binary tree, when supported */
  uint32_t mode_action = deny ? refuse : SCMP_ACT_ALLOW;
  int count = 0;
  for (size_t i = 0; i < rs->n; i++) {
    const struct entry *e = &rs->e[i];
    if (e->nr < 0) continue;                                    /* not a call of this architecture */
    if (observe && airlock_observed_call_find(e->nr)) continue; /* below */
    rc = 0;
    int marg = setid_arg(e->name);
    if (strcmp(e->name, "fcntl") == 0) {
      rc = fcntl_rules(ctx, e, deny, def, mode_action);
      count += 33;
    } else if (e->all) {
      int watched = observe_connect && !deny && e->nr == SCMP_SYS(connect);
      rc = mode_rule(ctx, def, watched ? OBSERVE_MARK : mode_action, e->nr, NULL, marg);
      count++;
    } else {
      for (int k = 0; k < e->nconds && rc == 0; k++, count++)
        rc = mode_rule(ctx, def, mode_action, e->nr, &e->conds[k], marg);
      for (int k = 0; k < e->nsoft && rc == 0; k++) {
        int shadowed = 0; /* the same value is granted: the grant wins */
        for (int j = 0; j < e->nconds && !deny; j++)
          shadowed |= !e->soft[k].uncond && e->conds[j].arg == e->soft[k].c.arg &&
                      e->conds[j].mask == e->soft[k].c.mask && e->conds[j].datum == e->soft[k].c.datum;
        if (shadowed || (e->soft[k].uncond && e->nconds > 0)) continue;
        rc = rule(ctx, def, SCMP_ACT_ERRNO((uint32_t)e->soft[k].err), e->nr,
                  e->soft[k].uncond ? NULL : &e->soft[k].c);
        count++;
      }
    }
    if (rc != 0) {
      snprintf(err, errlen, "seccomp: rule for %s: %s", e->name, airlock_strerror(-rc));
      seccomp_release(ctx);
      return rc;
    }
  }
  if (deny && find((struct ruleset *)rs, "fcntl") == NULL &&
      (rc = fcntl_rules(ctx, NULL, deny, def, mode_action)) != 0) {
    snprintf(err, errlen, "seccomp: the fcntl refusals: %s", airlock_strerror(-rc));
    seccomp_release(ctx);
    return rc;
  }
  if ((rc = setid_refusals(ctx, rs, deny, def)) != 0) {
    snprintf(err, errlen, "seccomp: the setid refusals: %s", airlock_strerror(-rc));
    seccomp_release(ctx);
    return rc;
  }
  count += 2 * (int)(sizeof setid_calls / sizeof *setid_calls);
  /* An observed call that sets a mode is observed only without a setid bit:
  ** with one it stays refused (setid_refusals, above), as in every filter. */
  for (const airlock_observed_call *c = airlock_observed_calls; observe && c->nr >= 0; c++, count++) {
    if (c->nr == SCMP_SYS(execveat)) {
      if ((rc = observe_execveat(ctx, def)) != 0) {
        snprintf(err, errlen, "seccomp: rule for an observed execveat: %s", airlock_strerror(-rc));
        seccomp_release(ctx);
        return rc;
      }
      count += 2;
      continue;
    }
    int marg = -1;
    for (size_t k = 0; k < sizeof setid_calls / sizeof *setid_calls; k++)
      if (seccomp_syscall_resolve_name(setid_calls[k].name) == c->nr) marg = (int)setid_calls[k].arg;
    if ((rc = mode_rule(ctx, def, OBSERVE_MARK, c->nr, NULL, marg)) != 0) {
      snprintf(err, errlen, "seccomp: rule for an observed call: %s", airlock_strerror(-rc));
      seccomp_release(ctx);
      return rc;
    }
  }
  if (observe_connect && deny && find((struct ruleset *)rs, "connect") == NULL) {
    if ((rc = rule(ctx, def, OBSERVE_MARK, SCMP_SYS(connect), NULL)) != 0) {
      snprintf(err, errlen, "seccomp: rule for an observed connect: %s", airlock_strerror(-rc));
      seccomp_release(ctx);
      return rc;
    }
    count++;
  }
  if (notify_fd >= 0) {
    struct cond c = {0, 0xffffffffu, (uint64_t)notify_fd};
    rc = rule(ctx, def, HANDOVER_MARK, SCMP_SYS(sendmsg), &c);
    if (rc != 0) {
      snprintf(err, errlen, "seccomp: rule for the listener hand-over: %s", airlock_strerror(-rc));
      seccomp_release(ctx);
      return rc;
    }
  }

  rc = airlock_seccomp_export_(ctx, out, err, errlen);
  if (rc != 0) return rc;
  *nrules = count;
  return 0;
}

const airlock_errno_word airlock_refuse_errnos[] = {
    {"EPERM", EPERM},   {"EACCES", EACCES},   {"ENOSYS", ENOSYS},
    {"EINVAL", EINVAL}, {"ENOTSUP", ENOTSUP}, {"EOPNOTSUPP", EOPNOTSUPP},
    {"EROFS", EROFS},   {"ENOENT", ENOENT},   {NULL, 0},
};

/* "kill-process", or "EPERM" etc. into buf. */
static const char *refusal_text(int e, char *buf, size_t len)
{
  for (const airlock_errno_word *w = airlock_refuse_errnos; w->name != NULL; w++)
    if (w->err == e) {
      snprintf(buf, len, "fail with %s", w->name);
      return buf;
    }
  snprintf(buf, len, "fail with errno %d", e);
  return buf;
}

/* What a refused call does, for the layer's report. */
/* The promise words for the layer's line, joined by spaces into buf (cut to fit). */
static const char *promise_words(const char *const *words, char *buf, size_t len)
{
  size_t n = 0;
  buf[0] = '\0';
  for (size_t i = 0; words != NULL && words[i] != NULL && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? " " : "", words[i]);
  return buf;
}

static const char *refusal(int refuse_errno, char *buf, size_t len)
{
  if (refuse_errno == AIRLOCK_REFUSE_CHOSEN) return "fail with a fitting errno, each named";
  return refuse_errno ? refusal_text(refuse_errno, buf, len) : "kill the process (SIGSYS)";
}

static int prepare_seccomp(const airlock_confine_spec *s, airlock_confine_prepared *p, int want_notify,
                           char *err, size_t errlen)
{
  struct ruleset rs = {0};
  int rc = 0;
  int deny = s->seccomp_deny != 0;
  size_t nraw = list_len(s->syscalls);

  int chosen = s->refuse_errno == AIRLOCK_REFUSE_CHOSEN;
  if ((s->refuse_errno < 0 && !chosen) || s->refuse_errno > 4095) {
    snprintf(err, errlen,
             "seccomp: refuse_errno %d is not an errno (1 to 4095, 0 to kill, or "
             "AIRLOCK_REFUSE_CHOSEN)",
             s->refuse_errno);
    return -EINVAL;
  }
  if (deny) {
    for (const airlock_promise *d = airlock_confine_dangerous; d->word && rc == 0; d++)
      rc = add_list(&rs, d->syscalls, err, errlen);
  } else {
    rc = add_list(&rs, airlock_promise_always.syscalls, err, errlen);
    /* The words, each checked against the table. */
    for (size_t i = 0; rc == 0 && s->promises != NULL && s->promises[i] != NULL; i++) {
      const char *w = s->promises[i];
      const airlock_promise *pr = airlock_promises;
      while (pr->word && strcmp(pr->word, w) != 0) pr++;
      if (pr->word == NULL) {
        char valid[160];
        size_t used = 0;
        valid[0] = '\0';
        for (const airlock_promise *q = airlock_promises; q->word && used < sizeof valid; q++)
          used += (size_t)snprintf(valid + used, sizeof valid - used, "%s%s", used ? " " : "", q->word);
        snprintf(err, errlen, "seccomp: unknown promise '%.40s' (valid: %s)", w, valid);
        rc = -EINVAL;
        break;
      }
      rc = add_list(&rs, pr->syscalls, err, errlen);
    }
  }
  /* Raw names: each must be a call of this architecture. */
  for (size_t i = 0; rc == 0 && i < nraw; i++) {
    const char *name = s->syscalls[i];
    if (name[0] == '\0' || strcspn(name, " ()|=") != strlen(name) || seccomp_syscall_resolve_name(name) < 0) {
      snprintf(err, errlen, "seccomp: unknown system call '%s' on this architecture", name);
      rc = -EINVAL;
      break;
    }
    struct entry *e = entry_for(&rs, name, strlen(name));
    if (e == NULL) {
      snprintf(err, errlen, "seccomp: out of memory");
      rc = -ENOMEM;
      break;
    }
    e->all = 1;
  }
  if (rc != 0) {
    ruleset_free(&rs);
    return rc;
  }
  resolve_open_modes(&rs);

  struct entry *ex = find(&rs, "execve"), *exat = find(&rs, "execveat");
  p->allows_exec = (deny ? !(ex && ex->all) : (ex != NULL && ex->all)) |
                   (deny ? !(exat && exat->all) : (exat != NULL && exat->all)) << 1;

  int nrules = 0;
  /* Without a listener, a chosen errno is EPERM for every call. */
  uint32_t refuse = s->refuse_errno > 0 ? SCMP_ACT_ERRNO((uint32_t)s->refuse_errno)
                    : chosen            ? SCMP_ACT_ERRNO(EPERM)
                                        : SCMP_ACT_KILL_PROCESS;
  struct entry *sm = find(&rs, "sendmsg");
  int sendmsg_allowed = deny ? !(sm && sm->all) : (sm != NULL && sm->all);
  char ignored[160];
  int can_hand_over = deny ? sendmsg_allowed : 1; /* an allowlist adds the rule it needs */
  if (want_notify && s->refuse_errno <= 0 && can_hand_over &&
      compile(&rs, deny, SCMP_ACT_NOTIFY, sendmsg_allowed ? -1 : AIRLOCK_CONFINE_NOTIFY_FD, s->observe != 0,
              s->observe_connect > 0, &p->notify_prog, &nrules, ignored, sizeof ignored) == 0) {
    /* The spawner's variant: refused calls wait for the broker, which names
    ** them and kills the run (or answers them with an errno). Compiled once;
    ** the plain program is the same code with every notify return made the
    ** refusal and the hand-over refused like any sendmsg; the notify program
    ** lets the hand-over through. */
    size_t bytes = p->notify_prog.len * sizeof(struct sock_filter);
    p->prog.filter = malloc(bytes);
    if (p->prog.filter == NULL) {
      rc = -ENOMEM;
      snprintf(err, errlen, "seccomp: out of memory");
    } else {
      memcpy(p->prog.filter, p->notify_prog.filter, bytes);
      p->prog.len = p->notify_prog.len;
      for (unsigned short i = 0; i < p->prog.len; i++) {
        struct sock_filter *a = &p->prog.filter[i], *b = &p->notify_prog.filter[i];
        if (a->code != (BPF_RET | BPF_K)) continue;
        if (a->k == SCMP_ACT_NOTIFY || a->k == HANDOVER_MARK) a->k = refuse;
        if (a->k == OBSERVE_MARK) a->k = SCMP_ACT_ALLOW;
        if (b->k == HANDOVER_MARK) b->k = SCMP_ACT_ALLOW;
        if (b->k == OBSERVE_MARK) b->k = SCMP_ACT_NOTIFY;
      }
      /* 1 here, the port in prepare(): connect is sent to the listener only
      ** where the filter lets it through whole (compile) */
      struct entry *ce = find(&rs, "connect");
      p->observe_connect = s->observe_connect > 0 && (deny ? ce == NULL : ce != NULL && ce->all);
    }
  } else {
    /* fixed errno mode, self-application, or no notify support: one plain program
    ** (a denylist that refuses sendmsg itself cannot hand a listener over). */
    free(p->notify_prog.filter);
    p->notify_prog.filter = NULL;
    p->notify_prog.len = 0;
    rc = compile(&rs, deny, refuse, -1, 0, 0, &p->prog, &nrules, err, errlen);
  }
  ruleset_free(&rs);
  if (rc != 0) return rc;

  char how[120], words[96];
  if (deny)
    airlock_layer_set_(&p->seccomp, "seccomp", AIRLOCK_LAYER_APPLIED, 0,
                       "denylist: %zu syscalls + the dangerous set, %d rules (%u insns); refused "
                       "calls %s; other arch and x32: kill-process",
                       nraw, nrules, (unsigned)p->prog.len, refusal(s->refuse_errno, how, sizeof how));
  else
    airlock_layer_set_(&p->seccomp, "seccomp", AIRLOCK_LAYER_APPLIED, 0,
                       "allowlist: promises '%.80s' + %zu syscalls, %d rules (%u insns); refused "
                       "calls %s; other arch and x32: kill-process",
                       promise_words(s->promises, words, sizeof words), nraw, nrules, (unsigned)p->prog.len,
                       refusal(s->refuse_errno, how, sizeof how));
  return 0;
}

/* ------------------------------------------------------------------ compiled filters, cached */

/* Compiling a filter with libseccomp costs about a millisecond, more than
** spawning the program it confines; the same spec always compiles to the same
** programs, so the last few are kept, keyed by everything that shapes them. */
#define SECCOMP_CACHE_SLOTS   8
#define SECCOMP_CACHE_KEY_MAX 2048

struct seccomp_cached {
  char key[SECCOMP_CACHE_KEY_MAX];
  struct sock_fprog prog, notify_prog;
  int allows_exec, observe_connect;
  airlock_layer layer;
  unsigned long used;
};
static struct seccomp_cached seccomp_cache[SECCOMP_CACHE_SLOTS];
static unsigned long seccomp_cache_clock;
static pthread_mutex_t seccomp_cache_lock = PTHREAD_MUTEX_INITIALIZER;

/* The key, or 0 when the spec is too big to cache. */
static int seccomp_key(const airlock_confine_spec *s, int want_notify, char *key, size_t len)
{
  size_t n = (size_t)snprintf(key, len, "%d|%d|%d|%d%s|", s->seccomp_deny != 0, s->refuse_errno, want_notify,
                              s->observe != 0, s->observe_connect > 0 ? "c" : "");
  for (size_t i = 0; n < len && s->promises != NULL && s->promises[i] != NULL; i++) {
    /* a word holding the separators could stand for two: not cached (and refused when compiled) */
    if (strpbrk(s->promises[i], " |") != NULL) return 0;
    n += (size_t)snprintf(key + n, len - n, "%s ", s->promises[i]);
  }
  if (n < len) n += (size_t)snprintf(key + n, len - n, "|");
  for (size_t i = 0; n < len && s->syscalls != NULL && s->syscalls[i] != NULL; i++) {
    if (strchr(s->syscalls[i], ',') != NULL) return 0; /* as above: "a,b" is not a and b */
    n += (size_t)snprintf(key + n, len - n, "%s,", s->syscalls[i]);
  }
  return n < len;
}

static int fprog_copy(struct sock_fprog *dst, const struct sock_fprog *src)
{
  dst->len = src->len;
  dst->filter = NULL;
  if (src->filter == NULL) return 0;
  dst->filter = malloc(src->len * sizeof *src->filter);
  if (dst->filter == NULL) return -ENOMEM;
  memcpy(dst->filter, src->filter, src->len * sizeof *src->filter);
  return 0;
}

static int seccomp_cache_get(const char *key, airlock_confine_prepared *p)
{
  int hit = 0;
  pthread_mutex_lock(&seccomp_cache_lock);
  for (int i = 0; i < SECCOMP_CACHE_SLOTS && !hit; i++) {
    struct seccomp_cached *c = &seccomp_cache[i];
    if (c->used == 0 || strcmp(c->key, key) != 0) continue;
    if (fprog_copy(&p->prog, &c->prog) == 0 && fprog_copy(&p->notify_prog, &c->notify_prog) == 0) {
      p->allows_exec = c->allows_exec;
      p->observe_connect = c->observe_connect;
      p->seccomp = c->layer;
      c->used = ++seccomp_cache_clock;
      hit = 1;
    } else {
      free(p->prog.filter);
      free(p->notify_prog.filter);
      p->prog.filter = p->notify_prog.filter = NULL;
      break;
    }
  }
  pthread_mutex_unlock(&seccomp_cache_lock);
  return hit;
}

static void seccomp_cache_put(const char *key, const airlock_confine_prepared *p)
{
  pthread_mutex_lock(&seccomp_cache_lock);
  struct seccomp_cached *slot = &seccomp_cache[0];
  for (int i = 1; i < SECCOMP_CACHE_SLOTS; i++)
    if (seccomp_cache[i].used < slot->used) slot = &seccomp_cache[i];
  free(slot->prog.filter);
  free(slot->notify_prog.filter);
  memset(slot, 0, sizeof *slot);
  if (fprog_copy(&slot->prog, &p->prog) == 0 && fprog_copy(&slot->notify_prog, &p->notify_prog) == 0) {
    snprintf(slot->key, sizeof slot->key, "%s", key);
    slot->allows_exec = p->allows_exec;
    slot->observe_connect = p->observe_connect;
    slot->layer = p->seccomp;
    slot->used = ++seccomp_cache_clock;
  } else {
    free(slot->prog.filter);
    free(slot->notify_prog.filter);
    memset(slot, 0, sizeof *slot);
  }
  pthread_mutex_unlock(&seccomp_cache_lock);
}

/* ------------------------------------------------------------------ compiled at build time */

/* Programs compiled when airlock was built, for the stock policies' specs
** (tools/seccomp_stock.c writes build/gen/seccomp_stock.c, linked into the
** command and the module; a program built on libairlock alone has none). A
** process that runs one program, as `airlock exec` does, would otherwise
** compile its filter every time: about 6.6 million instructions, more than
** the command's whole start. An entry is used only where libseccomp would
** make the same program here: the same key, the same libseccomp version and
** the same API level (which follows what the running kernel supports). */
extern const airlock_seccomp_stock airlock_seccomp_stock_programs[] __attribute__((weak));
static unsigned long seccomp_stock_hits;

static int seccomp_stock_usable(const airlock_seccomp_stock *e)
{
  const struct scmp_version *v = seccomp_version();
  return v != NULL && v->major == e->version[0] && v->minor == e->version[1] && v->micro == e->version[2] &&
         seccomp_api_get() == e->api;
}

static int seccomp_stock_get(const char *key, airlock_confine_prepared *p)
{
  if (airlock_seccomp_stock_programs == NULL) return 0;
  for (const airlock_seccomp_stock *e = airlock_seccomp_stock_programs; e->key != NULL; e++) {
    if (strcmp(e->key, key) != 0 || !seccomp_stock_usable(e)) continue;
    struct sock_fprog prog = {e->prog_len, (struct sock_filter *)e->prog};
    struct sock_fprog notify = {e->notify_len, (struct sock_filter *)e->notify_prog};
    if (fprog_copy(&p->prog, &prog) != 0 || fprog_copy(&p->notify_prog, &notify) != 0) {
      free(p->prog.filter);
      free(p->notify_prog.filter);
      p->prog.filter = p->notify_prog.filter = NULL;
      return 0; /* compiled instead */
    }
    p->allows_exec = e->allows_exec;
    airlock_layer_set_(&p->seccomp, "seccomp", AIRLOCK_LAYER_APPLIED, 0, "%s", e->detail);
    __atomic_add_fetch(&seccomp_stock_hits, 1, __ATOMIC_RELAXED);
    return 1;
  }
  return 0;
}

int airlock_seccomp_stock_key(const airlock_confine_spec *s, int want_notify, char *key, size_t len)
{
  return seccomp_key(s, want_notify, key, len) ? 0 : -E2BIG;
}

int airlock_seccomp_stock_compile(const airlock_confine_spec *s, int want_notify, airlock_confine_prepared *p,
                                  char *err, size_t errlen)
{
  memset(p, 0, sizeof *p);
  p->ruleset_fd = -1;
  return prepare_seccomp(s, p, want_notify, err, errlen);
}

int airlock_seccomp_stock_check(unsigned long *usable, unsigned long *hits, char *err, size_t errlen)
{
  *usable = 0;
  *hits = __atomic_load_n(&seccomp_stock_hits, __ATOMIC_RELAXED);
  if (airlock_seccomp_stock_programs == NULL) return 0;
  for (const airlock_seccomp_stock *e = airlock_seccomp_stock_programs; e->key != NULL; e++) {
    if (!seccomp_stock_usable(e)) continue;
    airlock_confine_spec s;
    memset(&s, 0, sizeof s);
    s.seccomp = 1;
    s.seccomp_deny = e->deny;
    s.promises = e->promises;
    s.refuse_errno = e->refuse_errno;
    airlock_confine_prepared p;
    int rc = airlock_seccomp_stock_compile(&s, e->notify, &p, err, errlen);
    char key[SECCOMP_CACHE_KEY_MAX];
    int same = rc == 0 && seccomp_key(&s, e->notify, key, sizeof key) && strcmp(key, e->key) == 0 &&
               p.prog.len == e->prog_len && p.notify_prog.len == e->notify_len &&
               p.allows_exec == e->allows_exec && strcmp(p.seccomp.detail, e->detail) == 0 &&
               memcmp(p.prog.filter, e->prog, e->prog_len * sizeof *e->prog) == 0 &&
               (e->notify_len == 0 ||
                memcmp(p.notify_prog.filter, e->notify_prog, e->notify_len * sizeof *e->notify_prog) == 0);
    airlock_confine_prepared_free(&p);
    if (!same) {
      if (rc == 0)
        snprintf(err, errlen,
                 "seccomp: the program compiled at build time for '%s' differs from "
                 "what libseccomp compiles here; rebuild airlock",
                 e->key);
      return rc < 0 ? rc : -EINVAL;
    }
    (*usable)++;
  }
  return 0;
}

static int prepare_seccomp_cached(const airlock_confine_spec *s, airlock_confine_prepared *p, int want_notify,
                                  char *err, size_t errlen)
{
  char key[SECCOMP_CACHE_KEY_MAX];
  int cacheable = seccomp_key(s, want_notify, key, sizeof key);
  if (cacheable && seccomp_cache_get(key, p)) return 0;
  if (cacheable && seccomp_stock_get(key, p)) {
    seccomp_cache_put(key, p);
    return 0;
  }
  int rc = prepare_seccomp(s, p, want_notify, err, errlen);
  if (rc == 0 && cacheable) seccomp_cache_put(key, p);
  return rc;
}

/* ------------------------------------------------------------------ prepare / apply */

static int prepare(const airlock_confine_spec *s, airlock_confine_prepared *p, int want_notify, char *err,
                   size_t errlen)
{
  memset(p, 0, sizeof *p);
  p->ruleset_fd = -1;
  if (errlen > 0) err[0] = '\0';
  airlock_layer_set_(&p->landlock, "landlock", AIRLOCK_LAYER_SKIPPED, 0, "the spec does not ask for it");
  airlock_layer_set_(&p->seccomp, "seccomp", AIRLOCK_LAYER_SKIPPED, 0, "the spec does not ask for it");
  if (s == NULL) {
    snprintf(err, errlen, "confine: no spec");
    return -EINVAL;
  }
  p->no_new_privs = s->no_new_privs || s->landlock || s->seccomp;
  p->refuse_chosen = s->seccomp && s->refuse_errno == AIRLOCK_REFUSE_CHOSEN;
  int rc = 0;
  if (s->landlock && (rc = prepare_landlock(s, p, err, errlen)) != 0) {
    airlock_layer_set_(&p->landlock, "landlock", AIRLOCK_LAYER_FAILED, -rc, "%s", err);
    return rc;
  }
  if (s->observe_connect < 0 || s->observe_connect > 65535) {
    snprintf(err, errlen, "seccomp: observe_connect %d is not a port (1 to 65535, 0 for none)",
             s->observe_connect);
    airlock_layer_set_(&p->seccomp, "seccomp", AIRLOCK_LAYER_FAILED, EINVAL, "%s", err);
    return -EINVAL;
  }
  if (s->seccomp && (rc = prepare_seccomp_cached(s, p, want_notify, err, errlen)) != 0) {
    airlock_layer_set_(&p->seccomp, "seccomp", AIRLOCK_LAYER_FAILED, -rc, "%s", err);
    return rc;
  }
  p->observe = s->seccomp && s->observe && p->notify_prog.filter != NULL;
  p->observe_connect =
      s->seccomp && p->observe_connect && p->notify_prog.filter != NULL ? s->observe_connect : 0;
  return 0;
}

int airlock_confine_prepare(const airlock_confine_spec *s, airlock_confine_prepared *p, char *err,
                            size_t errlen)
{
  int rc = prepare(s, p, 1, err, errlen);
  if (rc != 0) {
    airlock_layer l = p->landlock, sc = p->seccomp;
    airlock_confine_prepared_free(p);
    p->landlock = l; /* keep the reports for the caller */
    p->seccomp = sc;
  }
  return rc;
}

void airlock_confine_prepared_free(airlock_confine_prepared *p)
{
  if (p == NULL) return;
  if (p->ruleset_fd >= 0) close(p->ruleset_fd);
  free(p->prog.filter);
  free(p->notify_prog.filter);
  memset(p, 0, sizeof *p);
  p->ruleset_fd = -1;
}

int airlock_confine_apply_prepared_fds(const airlock_confine_prepared *p, int ruleset_fd, int notify_fd,
                                       const char **step)
{
  const char *dummy;
  if (step == NULL) step = &dummy;
  *step = NULL;
  if (p->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    *step = "prctl(PR_SET_NO_NEW_PRIVS)";
    return -errno;
  }
  if (ruleset_fd >= 0) {
    if (syscall(__NR_landlock_restrict_self, ruleset_fd, 0) != 0) {
      *step = "landlock_restrict_self";
      return -errno;
    }
    if (ruleset_fd != p->ruleset_fd)
      close(ruleset_fd); /* the spawner's copy; before seccomp, which may refuse close */
  }
  if (p->prog.filter == NULL) return 0;
  if (notify_fd >= 0 && p->notify_prog.filter != NULL) {
    long lfd =
        syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &p->notify_prog);
    if (lfd >= 0) {
      /* Only sendmsg on notify_fd and the refused-call path are new here. */
      if (airlock_fd_send(notify_fd, (int)lfd, 'L', MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        *step = "sendmsg(seccomp listener)";
        return -errno;
      }
      return 0; /* the listener (O_CLOEXEC) and notify_fd close at exec */
    }
    /* No listener here (another one up the filter chain, or no descriptor left
    ** under RLIMIT_NOFILE): the plain program, whose refusals kill unnamed. */
  }
  if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p->prog) != 0) {
    *step = "seccomp(SECCOMP_SET_MODE_FILTER)";
    return -errno;
  }
  return 0;
}

int airlock_confine_apply_prepared_step(const airlock_confine_prepared *p, const char **step)
{
  return airlock_confine_apply_prepared_fds(p, p->ruleset_fd, -1, step);
}

int airlock_confine_apply_prepared(const airlock_confine_prepared *p)
{
  return airlock_confine_apply_prepared_fds(p, p->ruleset_fd, -1, NULL);
}

int airlock_confine_apply(const airlock_confine_spec *s, airlock_layer out[2])
{
  airlock_confine_prepared p;
  char err[256];
  int rc = prepare(s, &p, 0, err, sizeof err);
  const char *step = NULL;
  if (rc == 0) {
    rc = airlock_confine_apply_prepared_step(&p, &step);
    if (rc != 0) {
      airlock_layer *l = strcmp(step, "landlock_restrict_self") == 0        ? &p.landlock
                         : strncmp(step, "seccomp", 7) == 0 || !s->landlock ? &p.seccomp
                                                                            : &p.landlock;
      airlock_layer_set_(l, l->name, AIRLOCK_LAYER_FAILED, -rc, "%s: %s", step, airlock_strerror(-rc));
    }
  }
  if (out != NULL) {
    out[0] = p.landlock;
    out[1] = p.seccomp;
  }
  airlock_confine_prepared_free(&p);
  return rc;
}
