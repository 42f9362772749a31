/*
** confine_landlock.c -- Landlock, in one place: the running ABI, the rights a
** ruleset handles, a ruleset with its rules (paths and TCP ports, or none at
** all), the one report of what it enforces, and the restriction itself.
** A guest's worker is a ruleset with no rule (airlock_confine_landlock_deny_all,
** applied by the worker to itself); a program's ruleset is built in the parent
** from its spec (confine_prepare.c) and enforced by the spawner's child.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "airlock.h"
#include "confine.h"
#include "landlock_compat.h"

#define LL_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
/* Everything that changes the tree or a file's content. Not make_char and
** make_block: device nodes are never a tool's business (and need CAP_MKNOD). */
#define LL_WRITE                                                                                    \
  (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE | \
   LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK |       \
   LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_SYM | LANDLOCK_ACCESS_FS_REFER |          \
   LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV)
#define LL_EXEC (LANDLOCK_ACCESS_FS_EXECUTE | LL_READ)
/* The rights Landlock accepts on a rule for a file (the others are directory rights). */
#define LL_FILE_RIGHTS                                                                         \
  (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE | \
   LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV)

int airlock_landlock_abi(void)
{
  long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 0) return -errno; /* ENOSYS: not built; EOPNOTSUPP: built but disabled at boot */
  return (int)abi;
}

const char *ll_missing(int abi)
{
  return abi == -EOPNOTSUPP
             ? "Landlock is built in but disabled: add landlock to the kernel's lsm= boot option"
             : "this kernel has no Landlock: it needs Linux 5.13+ with CONFIG_SECURITY_LANDLOCK";
}

/* Every right the running ABI knows (filesystem; TCP bind and connect from
** ABI 4; signal and abstract-socket scoping from ABI 6 unless no_scope), and
** the struct size that ABI expects: an older kernel would accept trailing
** zeroes too, but saying exactly what we mean costs nothing. */
static size_t handled_rights(int abi, int no_scope, struct ll_ruleset_attr *attr)
{
  memset(attr, 0, sizeof *attr);
  size_t attr_size = offsetof(struct ll_ruleset_attr, handled_access_net);
  /* Every right of ABI 1 is a contiguous bit run. */
  attr->handled_access_fs = (1ULL << 13) - 1;
  if (abi >= 2) attr->handled_access_fs |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) attr->handled_access_fs |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) attr->handled_access_fs |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
  if (abi >= 4) {
    attr->handled_access_net = LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
    attr_size = offsetof(struct ll_ruleset_attr, scoped);
  }
  if (abi >= 6 && !no_scope) {
    attr->scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
    attr_size = sizeof *attr;
  }
  return attr_size;
}

static size_t list_len(const char *const *l)
{
  size_t n = 0;
  while (l != NULL && l[n] != NULL) n++;
  return n;
}

/* Adds one path rule per entry of paths. Returns 0 or -errno with err set. */
static int add_paths(int rfd, const char *const *paths, uint64_t rights, uint64_t handled, char *err,
                     size_t errlen)
{
  for (size_t i = 0; paths != NULL && paths[i] != NULL; i++) {
    int fd = open(paths[i], O_PATH | O_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      snprintf(err, errlen, "%s: %s", paths[i], airlock_strerror(e));
      return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int e = errno;
      close(fd);
      snprintf(err, errlen, "fstat %s: %s", paths[i], airlock_strerror(e));
      return -e;
    }
    struct ll_path_beneath_attr a = {.allowed_access = rights & handled, .parent_fd = fd};
    if (!S_ISDIR(st.st_mode)) a.allowed_access &= LL_FILE_RIGHTS;
    if (a.allowed_access != 0 && syscall(__NR_landlock_add_rule, rfd, LL_RULE_PATH_BENEATH, &a, 0) != 0) {
      int e = errno;
      close(fd);
      snprintf(err, errlen, "landlock_add_rule %s: %s", paths[i], airlock_strerror(e));
      return -e;
    }
    close(fd);
  }
  return 0;
}

static int add_ports(int rfd, const uint16_t *ports, size_t n, uint64_t right, char *err, size_t errlen)
{
  for (size_t i = 0; i < n; i++) {
    struct ll_net_port_attr a = {.allowed_access = right, .port = ports[i]};
    if (syscall(__NR_landlock_add_rule, rfd, LL_RULE_NET_PORT, &a, 0) != 0) {
      int e = errno;
      snprintf(err, errlen, "landlock_add_rule port %u: %s", (unsigned)ports[i], airlock_strerror(e));
      return -e;
    }
  }
  return 0;
}

/* "none" or "80,443" into buf. */
static const char *ports_text(char *buf, size_t len, const uint16_t *ports, size_t n)
{
  if (n == 0) return "none";
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && used + 8 < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%u", i ? "," : "", (unsigned)ports[i]);
  return buf;
}

int airlock_landlock_ruleset(const airlock_landlock_rules *r, uint64_t *handled_fs, airlock_layer *out)
{
  static const airlock_landlock_rules none;
  if (r == NULL) r = &none;
  int abi = airlock_landlock_abi();
  if (abi < 0) {
    airlock_layer_set_(out, "landlock", AIRLOCK_LAYER_SKIPPED, -abi, "%s (%s)", ll_missing(abi),
                       airlock_strerror(-abi));
    return abi;
  }
  struct ll_ruleset_attr attr;
  size_t attr_size = handled_rights(abi, r->no_scope, &attr);
  long fd = syscall(__NR_landlock_create_ruleset, &attr, attr_size, 0);
  if (fd < 0) {
    int e = errno;
    airlock_layer_set_(out, "landlock", AIRLOCK_LAYER_FAILED, e, "landlock_create_ruleset (ABI %d): %s", abi,
                       airlock_strerror(e));
    return -e;
  }
  int rfd = (int)fd;
  uint64_t fs = attr.handled_access_fs;
  char err[192] = "";
  int rc;
  if ((rc = add_paths(rfd, r->read, LL_READ, fs, err, sizeof err)) != 0 ||
      (rc = add_paths(rfd, r->write, LL_WRITE, fs, err, sizeof err)) != 0 ||
      (rc = add_paths(rfd, r->exec, LL_EXEC, fs, err, sizeof err)) != 0 ||
      (abi >= 4 &&
       ((rc = add_ports(rfd, r->bind, r->n_bind, LANDLOCK_ACCESS_NET_BIND_TCP, err, sizeof err)) != 0 ||
        (rc = add_ports(rfd, r->connect, r->n_connect, LANDLOCK_ACCESS_NET_CONNECT_TCP, err, sizeof err)) !=
            0))) {
    close(rfd);
    airlock_layer_set_(out, "landlock", AIRLOCK_LAYER_FAILED, -rc, "%s", err);
    return rc;
  }
  if (handled_fs != NULL) *handled_fs = fs;

  /* Errata are queried only to report them; kernels before ABI 7 answer EINVAL. */
  long errata = syscall(__NR_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_ERRATA);
  char errbuf[32] = "", newer[64] = "", bind[48], conn[48];
  if (errata >= 0) snprintf(errbuf, sizeof errbuf, ", errata 0x%lx", (unsigned long)errata);
  if (abi > LL_ABI_KNOWN)
    snprintf(newer, sizeof newer, " (kernel ABI %d, rights of ABI %d handled)", abi, LL_ABI_KNOWN);
  airlock_layer_set_(
      out, "landlock", AIRLOCK_LAYER_APPLIED, 0,
      "ABI %d: fs rights 0x%llx handled; paths: %zu read, %zu write, %zu exec; "
      "tcp %s%s%s%s; scope %s%s%s",
      abi < LL_ABI_KNOWN ? abi : LL_ABI_KNOWN, (unsigned long long)attr.handled_access_fs, list_len(r->read),
      list_len(r->write), list_len(r->exec), abi >= 4 ? "bind " : "NOT restricted (ABI < 4)",
      abi >= 4 ? ports_text(bind, sizeof bind, r->bind, r->n_bind) : "", abi >= 4 ? ", connect " : "",
      abi >= 4 ? ports_text(conn, sizeof conn, r->connect, r->n_connect) : "",
      r->no_scope ? "off (asked)"
      : abi >= 6  ? "signal+abstract-unix"
                  : "NOT restricted (ABI < 6)",
      errbuf, newer);
  return rfd;
}

int airlock_landlock_enforce(int ruleset_fd, airlock_layer *out)
{
  /* Landlock refuses restrict_self without no_new_privs (or CAP_SYS_ADMIN);
  ** setting it here keeps the layer independent of call order. */
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    int e = errno;
    airlock_layer_set_(out, "landlock", AIRLOCK_LAYER_FAILED, e, "prctl(PR_SET_NO_NEW_PRIVS): %s",
                       airlock_strerror(e));
    return -e;
  }
  /* Only the calling thread is restricted (ABI 7 has no thread sync flag):
  ** the caller must still be single-threaded. Children inherit the domain. */
  if (syscall(__NR_landlock_restrict_self, ruleset_fd, 0) != 0) {
    int e = errno;
    airlock_layer_set_(out, "landlock", AIRLOCK_LAYER_FAILED, e, "landlock_restrict_self: %s",
                       airlock_strerror(e));
    return -e;
  }
  return 0;
}

int airlock_confine_landlock_deny_all(airlock_layer *out)
{
  int fd = airlock_landlock_ruleset(NULL, NULL, out); /* the report is ready before */
  if (fd < 0) return fd;
  int rc = airlock_landlock_enforce(fd, out);
  close(fd);
  return rc;
}

/* The grants the spawner's child adds to a prepared ruleset for a directory it
** opened itself (the workspace, a view's directory). */
/* Runs in the spawner's child: system calls only, no allocation, no stdio.
** Not instrumented, like the rest of that child (see spawn.c). */
__attribute__((no_sanitize("address", "undefined"))) int
airlock_confine_prepared_grant_rw(const airlock_confine_prepared *p, int ruleset_fd, int dirfd)
{
  struct ll_path_beneath_attr a = {.allowed_access = (LL_READ | LL_WRITE) & p->handled_fs,
                                   .parent_fd = dirfd};
  if (ruleset_fd < 0 || a.allowed_access == 0) return 0;
  if (syscall(__NR_landlock_add_rule, ruleset_fd, LL_RULE_PATH_BENEATH, &a, 0) != 0) return -errno;
  return 0;
}

__attribute__((no_sanitize("address", "undefined"))) int
airlock_confine_prepared_grant_read(const airlock_confine_prepared *p, int ruleset_fd, int dirfd)
{
  struct ll_path_beneath_attr a = {.allowed_access = LL_READ & p->handled_fs, .parent_fd = dirfd};
  if (ruleset_fd < 0 || a.allowed_access == 0) return 0;
  if (syscall(__NR_landlock_add_rule, ruleset_fd, LL_RULE_PATH_BENEATH, &a, 0) != 0) return -errno;
  return 0;
}
