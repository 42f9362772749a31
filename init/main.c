/*
** airlock-init -- PID 1 of a program's pid namespace (airlock exec).
**
** A process that is PID 1 gets no default signal action: `kill -TERM $$` in a
** shell that is PID 1 does nothing, and orphans it never waits for stay
** zombies. So the spawner runs this first, as PID 1, and it runs the program
** as PID 2:
**
**   airlock-init PATH ARGV0 ARGS...   (PATH empty: the program is fd 61,
**                                      opened by the parent, run with execveat)
**
** It reaps every process that ends in the namespace, forwards to the program
** the signals sent to it, and when the program ends it writes the program's
** wait status to fd 60 (the spawner's status pipe) and exits with the
** program's status (128 + N for signal N, as shells and bubblewrap do). Its
** exit ends the namespace: the kernel kills whatever the program left.
**
** It runs under the program's own confinement (seccomp, Landlock, identity),
** so it holds nothing the program does not; it is linked statically, so it
** needs no file of the program's tree. If it cannot fork (a policy without
** the "proc" promise), it becomes the program instead.
**
** Status record on fd 60: 8 bytes, two native-endian uint32: kind, value.
**   kind 1: value is the program's wait status.
**   kind 2: the program could not be executed; value is the errno.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define STATUS_FD  60
#define PROGRAM_FD 61

extern char **environ;

static void report(uint32_t kind, uint32_t value)
{
  uint32_t rec[2] = {kind, value};
  ssize_t n;
  do n = write(STATUS_FD, rec, sizeof rec);
  while (n < 0 && errno == EINTR);
}

/* Runs the program in this process; returns only on failure, with errno. */
static void run_program(const char *path, char **argv)
{
  if (path[0] == 0)
    syscall(SYS_execveat, PROGRAM_FD, "", argv, environ, AT_EMPTY_PATH);
  else
    execve(path, argv, environ);
}

static void say(const char *a, const char *b, const char *c)
{
  const char *parts[] = {"airlock-init: ", a, b, c, "\n"};
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
    if (write(2, parts[i], strlen(parts[i])) < 0) return;
}

int main(int argc, char **argv)
{
  if (argc < 3) {
    say("usage: airlock-init PATH ARGV0 [ARGS...] (started by airlock's spawner only)", "", "");
    return 125;
  }
  const char *path = argv[1];
  char **prog_argv = argv + 2;
  /* Neither descriptor may reach the program. */
  fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC);
  fcntl(PROGRAM_FD, F_SETFD, FD_CLOEXEC);

  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t child = fork();
  if (child < 0) {
    /* No fork (the policy does not promise "proc"): be the program. */
    sigprocmask(SIG_SETMASK, &old, NULL);
    run_program(path, prog_argv);
    int e = errno;
    report(2, (uint32_t)e);
    say("cannot run ", prog_argv[0], e == ENOENT ? ": not found" : ": not executable or not permitted");
    return e == ENOENT ? 127 : 126;
  }
  if (child == 0) {
    /* A session of its own, as the spawner gave before there was an init: a
    ** program handed a terminal leads its session. A terminal that is no
    ** session's yet (the pseudo-terminal airlock made for it) becomes its
    ** controlling terminal; the caller's own, which is its session's, never. */
    setsid();
    pid_t sid;
    if (isatty(0) && ioctl(0, TIOCGSID, &sid) < 0) ioctl(0, TIOCSCTTY, 0);
    sigprocmask(SIG_SETMASK, &old, NULL);
    run_program(path, prog_argv);
    int e = errno;
    report(2, (uint32_t)e);
    _exit(e == ENOENT ? 127 : 126);
  }
  for (;;) {
    siginfo_t si;
    int sig = sigwaitinfo(&all, &si);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      /* From the host (the broker, a terminal) or from the program itself:
      ** the program is the one meant. */
      kill(child, sig);
      continue;
    }
    int status;
    pid_t p;
    while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
      if (p != child) continue; /* an orphan, reaped */
      report(1, (uint32_t)status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return WEXITSTATUS(status);
    }
  }
}
