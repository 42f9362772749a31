/*
** ns_holder.c -- a helper process that makes new namespaces and holds them
** while the parent opens or maps them: the shared empty net namespace
** (spawn.c) and the two user namespaces of a root parent (identity.c).
**
** The helper shares the parent's memory (clone with CLONE_VM, on a small
** stack of its own) instead of being a fork: a fork copies the parent's page
** tables and makes every page the parent writes afterwards a copy-on-write
** fault, which in a Lua host with a few megabytes of heap cost more than the
** namespace itself. The helper only calls unshare, write and pause, with
** every signal blocked.
*/
#define _GNU_SOURCE
#include "ns_holder.h"
#include "airlock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOLDER_STACK_SIZE (16 * 1024)

/* ASan cannot follow instrumented code into a CLONE_VM child on a private
** stack (as in spawn.c); the sanitizer build gives the helper a copy. */
#if defined(__SANITIZE_ADDRESS__)
#define HOLDER_FLAGS SIGCHLD
#else
#define HOLDER_FLAGS (CLONE_VM | SIGCHLD)
#endif

struct holder_args {
  int flags;
  int ready; /* the pipe's write end */
};

/* The helper: unshares, says how that went, and waits to be killed. It
** writes nothing of the parent's memory but its own stack (errno aside,
** which the parent does not read until the helper has written). */
static int holder_main(void *arg)
{
  const struct holder_args *a = arg;
  int e = unshare(a->flags) == 0 ? 0 : errno;
  if (write(a->ready, &e, sizeof e) != sizeof e) _exit(1);
  for (;;) pause();
  return 0;
}

int airlock_ns_holder_begin_(airlock_ns_holder *h, int flags, const char *what, char *err, size_t errlen)
{
  h->pid = -1;
  h->ready = -1;
  h->killed = 0;
  h->stack =
      mmap(NULL, HOLDER_STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (h->stack == MAP_FAILED) {
    int e = errno;
    h->stack = NULL;
    snprintf(err, errlen, "%s: mmap: %s", what, airlock_strerror(e));
    return -e;
  }
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) < 0) {
    int e = errno;
    airlock_ns_holder_end_(h);
    snprintf(err, errlen, "%s: pipe2: %s", what, airlock_strerror(e));
    return -e;
  }
  /* The arguments live at the top of the helper's stack, above where it
  ** starts (16-byte aligned), not on ours: it reads them after we return. */
  char *top = (char *)h->stack + HOLDER_STACK_SIZE;
  struct holder_args *args = (struct holder_args *)(top - 64);
  args->flags = flags;
  args->ready = ready[1];
  /* Born with every signal blocked: no handler of ours may run on its stack
  ** (a terminal's Ctrl-C reaches the whole process group); SIGKILL ends it. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = clone(holder_main, top - 128, HOLDER_FLAGS, args);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (pid < 0) {
    int e = errno;
    close(ready[0]);
    close(ready[1]);
    airlock_ns_holder_end_(h);
    snprintf(err, errlen, "%s: clone: %s", what, airlock_strerror(e));
    return -e;
  }
  h->pid = pid;
  h->ready = ready[0];
  close(ready[1]);
  return 0;
}

int airlock_ns_holder_ready_(airlock_ns_holder *h, const char *what, char *err, size_t errlen)
{
  int e = EPIPE;
  ssize_t n;
  do n = read(h->ready, &e, sizeof e);
  while (n < 0 && errno == EINTR);
  close(h->ready);
  h->ready = -1;
  if (n != sizeof e || e != 0) {
    if (n != sizeof e) e = EPIPE;
    airlock_ns_holder_end_(h);
    snprintf(err, errlen, "%s: unshare: %s", what, airlock_strerror(e));
    return -e;
  }
  return 0;
}

void airlock_ns_holder_kill_(airlock_ns_holder *h)
{
  if (h->pid > 0 && !h->killed) kill(h->pid, SIGKILL);
  h->killed = 1;
}

void airlock_ns_holder_end_(airlock_ns_holder *h)
{
  if (h->ready >= 0) close(h->ready);
  h->ready = -1;
  if (h->pid > 0) {
    airlock_ns_holder_kill_(h);
    while (waitpid(h->pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  /* Unmapped only once the helper is gone: it ran on this stack. */
  if (h->stack) munmap(h->stack, HOLDER_STACK_SIZE);
  h->pid = -1;
  h->stack = NULL;
  h->killed = 0;
}
