/*
** broker_verify.c -- a child's confinement checked from outside, in
** /proc/PID: its namespaces right after spawn, and on ready (a worker) or
** right after spawn (a program) the seccomp filter, no_new_privs and an empty
** capability set. What a child claims about itself is never taken on trust.
*/
#define _GNU_SOURCE
#include "broker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Right after spawn (the child is alive: its namespaces still exist), check
** from outside that it is in every namespace asked for. A child that already
** died cannot be checked and does not need to be. Returns 0, or -1 with why. */
int broker_verify_namespaces(airlock_run *r, char *why, size_t len)
{
  char path[64], mine[64], theirs[64];
  for (const airlock_namespace *ns = airlock_namespaces; ns->name; ns++) {
    if (!(r->namespaces & ns->flag)) continue;
    ssize_t a, b;
    snprintf(path, sizeof path, "/proc/self/ns/%s", ns->proc);
    a = readlink(path, mine, sizeof mine - 1);
    snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)r->c.pid, ns->proc);
    b = readlink(path, theirs, sizeof theirs - 1);
    if (b <= 0 && errno == ENOENT) return 0; /* already exited */
    if (a <= 0 || b <= 0 || (a == b && memcmp(mine, theirs, (size_t)a) == 0)) {
      snprintf(why, len, "the worker is not in its own %s namespace (%s)", ns->name, path);
      return -1;
    }
  }
  return 0;
}

/* /proc/PID/status of the child into buf (NUL-terminated), its path into
** path. Returns the length, or <= 0 when it cannot be read (gone). */
static ssize_t read_status(const airlock_run *r, char *path, size_t plen, char *buf, size_t blen)
{
  snprintf(path, plen, "/proc/%d/status", (int)r->c.pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf, blen - 1) : -1;
  if (fd >= 0) close(fd);
  buf[n > 0 ? n : 0] = 0;
  return n;
}

/* The seccomp filter and no_new_privs, as status shows them; who is "the
** worker reported ready" or "the program was started confined". */
static int check_filter(const char *buf, const char *path, const char *who, char *why, size_t len)
{
  if (!strstr(buf, "\nSeccomp:\t2\n")) {
    snprintf(why, len, "%s but %s does not show a seccomp filter (Seccomp: 2)", who, path);
    return -1;
  }
  if (!strstr(buf, "\nNoNewPrivs:\t1\n")) {
    snprintf(why, len, "%s but %s does not show NoNewPrivs: 1", who, path);
    return -1;
  }
  return 0;
}

/* The child's claims in ready are not trusted: /proc/PID/status must show the
** seccomp filter and no_new_privs, and with drop_caps no capability. A child
** that already exited cannot be checked, so fails the check (the real worker
** stays alive until the parent hangs up, see worker_end). Returns 0, or -1
** with a message in why. */
int broker_verify_ready(airlock_run *r, char *why, size_t len)
{
  static const char *const caps[] = {"\nCapInh:\t", "\nCapPrm:\t", "\nCapEff:\t", "\nCapBnd:\t",
                                     "\nCapAmb:\t"};
  char path[64], buf[4096];
  if (read_status(r, path, sizeof path, buf, sizeof buf) <= 0) {
    snprintf(why, len, "cannot read %s to verify confinement", path);
    return -1;
  }
  /* A bounding set left full is harmless when nothing is permitted and
  ** no_new_privs voids file capabilities: what the spawner leaves when it runs
  ** without root and without a user namespace (see drop_capabilities). */
  int nnp = strstr(buf, "\nNoNewPrivs:\t1\n") != NULL;
  for (size_t i = 0; r->drop_caps && i < sizeof caps / sizeof *caps; i++) {
    const char *at = strstr(buf, caps[i]);
    if (i == 3 && nnp && at) continue; /* CapBnd */
    if (!at || strspn(at + strlen(caps[i]), "0") != 16) {
      snprintf(why, len, "the worker reported ready but %s shows capabilities left (%.6s not zero)", path,
               caps[i] + 1);
      return -1;
    }
  }
  return r->verify_seccomp ? check_filter(buf, path, "the worker reported ready", why, len) : 0;
}

/* Right after spawn: a program the spawner confined with seccomp must show
** the filter and no_new_privs in /proc/PID/status (unless it has already
** exited). Returns 0, or -1 with why. */
int broker_verify_program_filter(airlock_run *r, char *why, size_t len)
{
  char path[64], buf[4096];
  if (read_status(r, path, sizeof path, buf, sizeof buf) <= 0 || strstr(buf, "\nState:\tZ"))
    return 0; /* already gone */
  return check_filter(buf, path, "the program was started confined", why, len);
}
