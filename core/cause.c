/*
** cause.c -- the stable words for how a run ended, signal names, the clock.
** These words appear in results and logs, so they never change once shipped.
*/
#define _GNU_SOURCE /* sigabbrev_np, strerrorname_np */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "airlock.h"

static const char *const cause_names[] = {
    [AIRLOCK_CAUSE_OK] = "ok",
    [AIRLOCK_CAUSE_ERROR] = "error",
    [AIRLOCK_CAUSE_INSTRUCTIONS] = "instructions",
    [AIRLOCK_CAUSE_MEMORY] = "memory",
    [AIRLOCK_CAUSE_DEADLINE] = "deadline",
    [AIRLOCK_CAUSE_CPU] = "cpu",
    [AIRLOCK_CAUSE_SECCOMP] = "seccomp",
    [AIRLOCK_CAUSE_CRASH] = "crash",
    [AIRLOCK_CAUSE_EXIT] = "exit",
    [AIRLOCK_CAUSE_PROTOCOL] = "protocol",
    [AIRLOCK_CAUSE_DENIED] = "denied",
    [AIRLOCK_CAUSE_CONFINEMENT] = "confinement",
    [AIRLOCK_CAUSE_LEDGER] = "ledger",
    [AIRLOCK_CAUSE_DIVERGED] = "diverged",
    [AIRLOCK_CAUSE_PAUSED] = "paused",
    [AIRLOCK_CAUSE_CANCELLED] = "cancelled",
};

/* A cause added to the enum without a word would otherwise read as NULL. */
_Static_assert(sizeof cause_names / sizeof cause_names[0] == AIRLOCK_CAUSE_COUNT_,
               "every cause needs a word");

const char *airlock_cause_name(airlock_cause c)
{
  /* The enum may arrive from a cast integer, so range-check it as unsigned. */
  if ((unsigned)c >= AIRLOCK_CAUSE_COUNT_) return "unknown";
  return cause_names[c];
}

int airlock_cause_from_name(const char *word)
{
  if (word == NULL) return -1;
  for (int c = 0; c < AIRLOCK_CAUSE_COUNT_; c++)
    if (strcmp(word, cause_names[c]) == 0) return c;
  return -1;
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
static const char *signal_abbrev(int sig)
{
  return sigabbrev_np(sig);
}
#else
/* Without sigabbrev_np, name the signals a sandboxed child is likely to die of. */
static const char *signal_abbrev(int sig)
{
  static const struct {
    int sig;
    const char *name;
  } known[] = {
      {SIGHUP, "HUP"},   {SIGINT, "INT"},   {SIGQUIT, "QUIT"}, {SIGILL, "ILL"},   {SIGTRAP, "TRAP"},
      {SIGABRT, "ABRT"}, {SIGBUS, "BUS"},   {SIGFPE, "FPE"},   {SIGKILL, "KILL"}, {SIGUSR1, "USR1"},
      {SIGSEGV, "SEGV"}, {SIGUSR2, "USR2"}, {SIGPIPE, "PIPE"}, {SIGALRM, "ALRM"}, {SIGTERM, "TERM"},
      {SIGCHLD, "CHLD"}, {SIGCONT, "CONT"}, {SIGSTOP, "STOP"}, {SIGTSTP, "TSTP"}, {SIGTTIN, "TTIN"},
      {SIGTTOU, "TTOU"}, {SIGURG, "URG"},   {SIGXCPU, "XCPU"}, {SIGXFSZ, "XFSZ"}, {SIGVTALRM, "VTALRM"},
      {SIGPROF, "PROF"}, {SIGSYS, "SYS"},
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (known[i].sig == sig) return known[i].name;
  return NULL;
}
#endif

const char *airlock_signal_name(int sig, char *buf, size_t len)
{
  const char *name = signal_abbrev(sig);
  if (name != NULL) return name;
  if (buf == NULL || len == 0) return "signal ?";
  snprintf(buf, len, "signal %d", sig);
  return buf;
}

const char *airlock_errno_name(int err, char *buf, size_t len)
{
  const char *name = strerrorname_np(err);
  if (name != NULL) return name;
  if (buf == NULL || len == 0) return "errno ?";
  snprintf(buf, len, "errno %d", err);
  return buf;
}

const char *airlock_strerror(int err)
{
  static __thread char text[160];
  char nbuf[24];
  snprintf(text, sizeof text, "%s (%s)", strerror(err), airlock_errno_name(err, nbuf, sizeof nbuf));
  return text;
}

double airlock_now_ms(void)
{
  struct timespec ts;
  /* CLOCK_MONOTONIC always exists on Linux and ts is writable: this cannot fail. */
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}
