/*
** release.c -- airlock_close_later: the last close of an overlay mount, off
** the caller's path.
**
** When the last reference to an overlay mount goes, the kernel frees every
** inode and dentry the program's lookups made in it, in the task that let
** go: for a git repository of a few thousand files that is several
** milliseconds, which used to land in airlock-init's exit, before the parent
** learned that the run had ended. The spawner now holds a reference of its
** own (airlock_child.overlay_mount), which goes with the run's writable
** layer once its change set has been read and applied (or with the child,
** when nobody took the layer): a helper closes it and so does the teardown,
** on another CPU, while the caller returns. (Closed any earlier, the
** teardown slows the reading of the change set beside it.)
**
** The helper shares our memory (CLONE_VM, on a small stack of its own, as in
** ns_holder.c; the sanitizer build gives it a copy) and our descriptor table
** (CLONE_FILES: it holds no copies of our other descriptors, which would
** delay an end of file elsewhere). It is
** born with every signal blocked, so no handler of ours ever runs on its
** stack, and with no exit signal, so a host's waitpid(-1) neither sees nor
** reaps it (only __WALL does). It calls close and exit, nothing else.
*/
#define _GNU_SOURCE
#include "airlock.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define RELEASE_STACK_SIZE (16 * 1024)
#define RELEASE_MAX        32 /* helpers at work at once; a further close waits for the oldest */

/* ASan cannot follow instrumented code into a CLONE_VM child on a private
** stack; the sanitizer build gives the helper a copy of our memory (the
** descriptor table is shared in both). */
#if defined(__SANITIZE_ADDRESS__)
#define RELEASE_FLAGS CLONE_FILES
#else
#define RELEASE_FLAGS (CLONE_VM | CLONE_FILES)
#endif

static struct {
  pid_t pid;
  void *stack;
} helpers[RELEASE_MAX];
static int nhelpers;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* exit(2) as a plain system call: _exit is noreturn, and ASan's hook for
** that warns on a stack it did not make. */
static int release_main(void *arg)
{
  close((int)(intptr_t)arg);
  syscall(SYS_exit, 0);
  return 0;
}

/* Reaps helper i if it is done (or waits for it when block), frees its
** stack and drops it from the list. Returns 1 when it was dropped. */
static int reap(int i, int block)
{
  pid_t r;
  do r = waitpid(helpers[i].pid, NULL, __WALL | (block ? 0 : WNOHANG));
  while (r < 0 && errno == EINTR);
  if (r == 0) return 0; /* still at work */
  /* Gone (or, ECHILD, reaped by someone else with __WALL): its stack is free. */
  munmap(helpers[i].stack, RELEASE_STACK_SIZE);
  helpers[i] = helpers[--nhelpers];
  return 1;
}

static void reap_done(void)
{
  for (int i = 0; i < nhelpers;)
    if (!reap(i, 0)) i++;
}

void airlock_close_later(int f)
{
  if (f < 0) return;
  pthread_mutex_lock(&lock);
  reap_done();
  if (nhelpers == RELEASE_MAX) reap(0, 1);
  void *stack =
      mmap(NULL, RELEASE_STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  pid_t pid = -1;
  if (stack != MAP_FAILED) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = clone(release_main, (char *)stack + RELEASE_STACK_SIZE - 64, RELEASE_FLAGS, (void *)(intptr_t)f);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) munmap(stack, RELEASE_STACK_SIZE);
  }
  if (pid > 0) {
    helpers[nhelpers].pid = pid;
    helpers[nhelpers].stack = stack;
    nhelpers++;
  }
  pthread_mutex_unlock(&lock);
  if (pid < 0) close(f); /* no helper: the close is ours */
}
