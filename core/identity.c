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

/* Makes a user namespace whose uid_map and gid_map are the given lines. */
static int userns_new(const char *uid_map, const char *gid_map, char *err, size_t errlen)
{
  airlock_ns_holder h;
  int rc = airlock_ns_holder_start_(&h, CLONE_NEWUSER, "identity", err, errlen);
  if (rc < 0) return rc;
  pid_t pid = h.pid;
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
  airlock_ns_holder_end_(&h);
  if (fd < 0) {
    snprintf(err, errlen,
             "identity: cannot make the user namespace that maps runs to uid %d "
             "(%s: %s)",
             AIRLOCK_RUN_UID, step, airlock_strerror(e));
    return -e;
  }
  return fd;
}

int airlock_identity_userns(airlock_identity_ns which, char *err, size_t errlen)
{
  int i = which == AIRLOCK_IDMAP_USERNS;
  if (cached[i] == 0) {
    char um[48], gm[48];
    if (i) { /* the caller's ids on disk are the run's ids through the mount */
      snprintf(um, sizeof um, "%u %d 1", (unsigned)geteuid(), AIRLOCK_RUN_UID);
      snprintf(gm, sizeof gm, "%u %d 1", (unsigned)getegid(), AIRLOCK_RUN_GID);
    } else { /* the run's ids are the same number inside and out */
      snprintf(um, sizeof um, "%d %d 1", AIRLOCK_RUN_UID, AIRLOCK_RUN_UID);
      snprintf(gm, sizeof gm, "%d %d 1", AIRLOCK_RUN_GID, AIRLOCK_RUN_GID);
    }
    int fd = userns_new(um, gm, cached_err[i], sizeof cached_err[i]);
    cached[i] = fd > 0 ? fd : (fd < 0 ? fd : -EBADF);
  }
  if (cached[i] < 0) snprintf(err, errlen, "%s", cached_err[i]);
  return cached[i];
}
