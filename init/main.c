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
** so it holds nothing the program does not; it is linked statically and
** without a C library (sys.h says why), so it needs no file of the program's
** tree. If it cannot fork (a policy without the "proc" promise), it becomes
** the program instead.
**
** Status record on fd 60: 8 bytes, two native-endian uint32: kind, value.
**   kind 1: value is the program's wait status.
**   kind 2: the program could not be executed; value is the errno.
*/
#include "sys.h"

#define STATUS_FD  60
#define PROGRAM_FD 61

void *memset(void *d, int c, unsigned long n)
{
  unsigned char *p = d;
  while (n--) *p++ = (unsigned char)c;
  return d;
}

void *memcpy(void *d, const void *s, unsigned long n)
{
  unsigned char *p = d;
  const unsigned char *q = s;
  while (n--) *p++ = *q++;
  return d;
}

static unsigned long length(const char *s)
{
  unsigned long n = 0;
  while (s[n]) n++;
  return n;
}

static void report(unsigned kind, unsigned value)
{
  unsigned rec[2] = {kind, value};
  long n;
  do n = sys_write(STATUS_FD, rec, sizeof rec);
  while (n == -EINTR);
}

/* Runs the program in this process; returns only on failure, with the errno. */
static int run_program(const char *path, char **argv, char **envp)
{
  long rc = path[0] == 0 ? sys_execveat(PROGRAM_FD, argv, envp) : sys_execve(path, argv, envp);
  return (int)-rc;
}

static void say(const char *a, const char *b, const char *c)
{
  const char *parts[] = {"airlock-init: ", a, b, c, "\n"};
  for (unsigned long i = 0; i < sizeof parts / sizeof *parts; i++)
    if (sys_write(2, parts[i], length(parts[i])) < 0) return;
}

/* A terminal on fd 0 that is no session's yet: made the controlling one. */
static void take_terminal(void)
{
  unsigned char termios[64]; /* TCGETS's struct termios, 60 bytes */
  int sid;
  if (sys_ioctl(0, TCGETS, termios) == 0 && sys_ioctl(0, TIOCGSID, &sid) < 0) sys_ioctl(0, TIOCSCTTY, 0);
}

static int init_main(int argc, char **argv, char **envp)
{
  if (argc < 3) {
    say("usage: airlock-init PATH ARGV0 [ARGS...] (started by airlock's spawner only)", "", "");
    return 125;
  }
  const char *path = argv[1];
  char **prog_argv = argv + 2;
  /* Neither descriptor may reach the program. */
  sys_fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC);
  sys_fcntl(PROGRAM_FD, F_SETFD, FD_CLOEXEC);

  kernel_sigset all = ~0UL, old = 0;
  sys_sigmask(&all, &old);
  long child = sys_fork();
  if (child < 0) {
    /* No fork (the policy does not promise "proc"): be the program. */
    sys_sigmask(&old, 0);
    int e = run_program(path, prog_argv, envp);
    report(2, (unsigned)e);
    say("cannot run ", prog_argv[0], e == ENOENT ? ": not found" : ": not executable or not permitted");
    return e == ENOENT ? 127 : 126;
  }
  if (child == 0) {
    /* A session of its own, as the spawner gave before there was an init: a
    ** program handed a terminal leads its session. A terminal that is no
    ** session's yet (the pseudo-terminal airlock made for it) becomes its
    ** controlling terminal; the caller's own, which is its session's, never. */
    sys_setsid();
    take_terminal();
    sys_sigmask(&old, 0);
    int e = run_program(path, prog_argv, envp);
    report(2, (unsigned)e);
    sys_exit(e == ENOENT ? 127 : 126);
  }
  for (;;) {
    long info[16]; /* siginfo_t: 128 bytes, unread */
    long sig = sys_sigwait(&all, info);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      /* From the host (the broker, a terminal) or from the program itself:
      ** the program is the one meant. */
      sys_kill((int)child, (int)sig);
      continue;
    }
    int status;
    long p;
    while ((p = sys_wait4(-1, &status, WNOHANG)) > 0) {
      if (p != child) continue; /* an orphan, reaped */
      report(1, (unsigned)status);
      if ((status & 0x7f) != 0 && (status & 0x7f) != 0x7f) return 128 + (status & 0x7f); /* WIFSIGNALED */
      return (status >> 8) & 0xff;                                                       /* WEXITSTATUS */
    }
  }
}

AIRLOCK_INIT_START
AIRLOCK_INIT_ENTRY
