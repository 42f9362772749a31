/*
** ns_holder.c -- a helper process that makes new namespaces and holds them
** while the parent opens or maps them: the shared empty net namespace
** (spawn.c) and the two user namespaces of a root parent (identity.c).
*/
#define _GNU_SOURCE
#include "ns_holder.h"
#include "airlock.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

pid_t airlock_ns_holder_start_(int flags, const char *what, char *err, size_t errlen)
{
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) < 0) {
    int e = errno;
    snprintf(err, errlen, "%s: pipe2: %s", what, airlock_strerror(e));
    return -e;
  }
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(ready[0]);
    close(ready[1]);
    snprintf(err, errlen, "%s: fork: %s", what, airlock_strerror(e));
    return -e;
  }
  if (pid == 0) { /* holds the namespaces until the parent is done with them */
    int e = unshare(flags) == 0 ? 0 : errno;
    if (write(ready[1], &e, sizeof e) != sizeof e) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  int e = EPIPE;
  ssize_t n;
  do n = read(ready[0], &e, sizeof e);
  while (n < 0 && errno == EINTR);
  close(ready[0]);
  if (n != sizeof e || e != 0) {
    if (n != sizeof e) e = EPIPE;
    airlock_ns_holder_end_(pid);
    snprintf(err, errlen, "%s: unshare: %s", what, airlock_strerror(e));
    return -e;
  }
  return pid;
}

void airlock_ns_holder_end_(pid_t pid)
{
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}
