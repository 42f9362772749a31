/*
** identity.c -- who a child is on the host: when the parent is root, never root.
** Two user namespaces made once per process and joined by every child: one that
** runs the child as host uid/gid 65534, one that idmaps a workspace so what the
** child makes there is owned by the caller on disk.
*/
#define _GNU_SOURCE
#include "airlock.h"
#include "ns_holder.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Why a kernel user namespace at all, and why made by the parent: a process may
** map only its own ids into a namespace it makes, so a child of root would stay
** kuid 0, owner of every root-owned file, whatever it is called inside. Writing
** a map that names another host id takes CAP_SETUID in the parent namespace,
** which the parent has and the child (blocked parent, vfork) cannot borrow. So
** the parent makes each namespace once with a helper process that only unshares
** and waits (ns_holder.c), writes its maps, keeps an fd to it, and lets the helper go. */

static int cached[2] = {0, 0}; /* 0: not made yet; > 0: fd; < 0: -errno */
static char cached_err[2][200];

/* Writes the maps of a helper that has unshared a user namespace, opens it
** and lets the helper go (killed; airlock_identity_end_ reaps it). Returns
** the fd, or -errno with a message. */
static int userns_finish(airlock_ns_holder *h, const char *uid_map, const char *gid_map, char *err,
                         size_t errlen)
{
  pid_t pid = h->pid;
  char path[64];
  const struct {
    const char *file, *text;
  } w[] = {{"setgroups", "deny"}, {"uid_map", uid_map}, {"gid_map", gid_map}};
  const char *step = NULL;
  int fd = -1, e = 0;
  for (size_t i = 0; i < 3 && e == 0; i++) {
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, w[i].file);
    int wfd = open(path, O_WRONLY | O_CLOEXEC);
    size_t len = strlen(w[i].text);
    if (wfd < 0 || write(wfd, w[i].text, len) != (ssize_t)len) {
      e = errno;
      step = w[i].file;
    }
    if (wfd >= 0) close(wfd);
  }
  if (e == 0) {
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
      e = errno;
      step = "open ns/user";
    }
  }
  airlock_ns_holder_kill_(h); /* reaped by airlock_identity_end_ */
  if (fd < 0) {
    snprintf(err, errlen,
             "identity: cannot make the user namespace that maps runs to uid %d "
             "(%s: %s)",
             AIRLOCK_RUN_UID, step, airlock_strerror(e));
    return -e;
  }
  return fd;
}

/* The maps of namespace i (0: the run's, 1: the idmap's). */
static void maps_of(int i, char um[48], char gm[48])
{
  if (i) { /* the caller's ids on disk are the run's ids through the mount */
    snprintf(um, 48, "%u %d 1", (unsigned)geteuid(), AIRLOCK_RUN_UID);
    snprintf(gm, 48, "%u %d 1", (unsigned)getegid(), AIRLOCK_RUN_GID);
  } else { /* the run's ids are the same number inside and out */
    snprintf(um, 48, "%d %d 1", AIRLOCK_RUN_UID, AIRLOCK_RUN_UID);
    snprintf(gm, 48, "%d %d 1", AIRLOCK_RUN_GID, AIRLOCK_RUN_GID);
  }
}

void airlock_identity_begin_(airlock_identity_batch_ *b, int run, int idmap)
{
  const int want[2] = {run, idmap};
  for (int i = 0; i < 2; i++) {
    b->begun[i] = 0;
    if (!want[i] || cached[i] != 0) continue;
    int rc =
        airlock_ns_holder_begin_(&b->h[i], CLONE_NEWUSER, "identity", cached_err[i], sizeof cached_err[i]);
    if (rc < 0)
      cached[i] = rc;
    else
      b->begun[i] = 1;
  }
}

void airlock_identity_take_(airlock_identity_batch_ *b)
{
  for (int i = 0; i < 2; i++) {
    if (!b->begun[i]) continue;
    int rc = airlock_ns_holder_ready_(&b->h[i], "identity", cached_err[i], sizeof cached_err[i]);
    if (rc < 0) {
      b->begun[i] = 0; /* ended by ready */
    } else {
      char um[48], gm[48];
      maps_of(i, um, gm);
      rc = userns_finish(&b->h[i], um, gm, cached_err[i], sizeof cached_err[i]);
    }
    cached[i] = rc > 0 ? rc : (rc < 0 ? rc : -EBADF);
  }
}

void airlock_identity_end_(airlock_identity_batch_ *b)
{
  for (int i = 0; i < 2; i++) {
    if (b->begun[i]) airlock_ns_holder_end_(&b->h[i]);
    b->begun[i] = 0;
  }
}

void airlock_identity_prepare_(void)
{
  if (geteuid() != 0) return;
  airlock_identity_batch_ b;
  airlock_identity_begin_(&b, 1, 1);
  airlock_identity_take_(&b);
  airlock_identity_end_(&b);
}

int airlock_identity_userns(airlock_identity_ns which, char *err, size_t errlen)
{
  int i = which == AIRLOCK_IDMAP_USERNS;
  airlock_identity_batch_ b;
  airlock_identity_begin_(&b, i == 0, i == 1);
  airlock_identity_take_(&b);
  airlock_identity_end_(&b);
  if (cached[i] < 0) snprintf(err, errlen, "%s", cached_err[i]);
  return cached[i];
}
