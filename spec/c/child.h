/*
** child.h -- the forked-child harness of the C confinement tests: a child
** confines itself and reports each check as one byte on a pipe (write(2) is
** allowed under every filter the tests load); the parent counts the bytes into
** check.h's totals and gets the child's raw wait status to judge how it ended.
*/
#ifndef AIRLOCK_CHILD_H
#define AIRLOCK_CHILD_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static int report_fd = -1; /* the child's end of the report pipe */
static int reached;        /* 'R' bytes from the last child (REACHED) */

/* In a child: one 'P' or 'F' byte per check, the failure also on stderr. */
#define CCHECK(cond)                                                                                   \
  do {                                                                                                 \
    int ok_ = (cond) ? 1 : 0;                                                                          \
    if (!ok_)                                                                                          \
      fprintf(stderr, "%s:%d: child CHECK failed: %s (errno %d)\n", __FILE__, __LINE__, #cond, errno); \
    if (write(report_fd, ok_ ? "P" : "F", 1) != 1) _exit(98);                                          \
  } while (0)

/* In a child, just before the call that must kill it, so a child killed
** earlier (by a call the test did not mean to refuse) is caught. */
#define REACHED()                                 \
  do {                                            \
    if (write(report_fd, "R", 1) != 1) _exit(98); \
  } while (0)

typedef void (*child_fn)(void *arg);

/* Forks, runs fn(arg) in the child (which _exits 0 if fn returns), counts the
** child's report bytes, and returns the raw wait status. */
static inline int run_child(child_fn fn, void *arg)
{
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    perror("pipe2");
    exit(2);
  }
  fflush(NULL); /* a child calling exit() must not flush our buffers twice */
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(2);
  }
  if (pid == 0) {
    close(p[0]);
    report_fd = p[1];
    fn(arg);
    _exit(0);
  }
  close(p[1]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  char buf[256];
  ssize_t n;
  reached = 0;
  while ((n = read(p[0], buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] == 'P')
        passed++;
      else if (buf[i] == 'R')
        reached++;
      else
        failed++;
    }
  close(p[0]);
  return st;
}

static inline int killed_by(int st, int sig)
{
  return WIFSIGNALED(st) && WTERMSIG(st) == sig;
}
static inline int exited_ok(int st)
{
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static inline void describe(const char *what, int st)
{
  if (WIFSIGNALED(st))
    fprintf(stderr, "  %s: killed by signal %d (%s)\n", what, WTERMSIG(st), strsignal(WTERMSIG(st)));
  else
    fprintf(stderr, "  %s: exited %d\n", what, WEXITSTATUS(st));
}

#endif
