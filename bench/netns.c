/*
** netns.c -- airlock-netns: what a network namespace costs a child process.
** Times clone+exit+waitpid of a child that
**   clone                   is born in no new namespace (the baseline)
**   clone-newnet            is born in a fresh net namespace (clone(CLONE_NEWNET))
**   unshare-newnet          makes one after birth (unshare(CLONE_NEWNET))
**   setns-shared            joins one pre-made empty net namespace held open by fd
**   clone-newuser           is born in a new user namespace (the unprivileged baseline)
**   clone-newuser-newnet    is born in new user and net namespaces (the unprivileged way)
** The modes are interleaved round by round, so that whatever else the machine
** does lands on all of them alike. One JSON line per mode; a mode this process
** may not use (no root) gets {"bench":..., "error":"..."} instead.
**
** Not counted: the kernel frees a dead net namespace later, in a work queue
** (cleanup_net), so part of a fresh namespace's cost is paid outside the child's
** lifetime, by a kernel thread; per_sec is taken over the timed samples only.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_MAX  1000000ULL
#define WARMUP 20

typedef struct mode {
  const char *name;
  unsigned long clone_flags;   /* CLONE_NEW* given to clone */
  unsigned long unshare_flags; /* unshare()d by the child after birth */
  int join;                    /* 1: the child setns()es into the shared namespace */
  const char *error;           /* set when the probe failed: the mode is skipped */
  char why[160];
  double *us;
} mode;

static mode modes[] = {
    {"clone", 0, 0, 0, NULL, "", NULL},
    {"clone-newnet", CLONE_NEWNET, 0, 0, NULL, "", NULL},
    {"unshare-newnet", 0, CLONE_NEWNET, 0, NULL, "", NULL},
    {"setns-shared", 0, 0, 1, NULL, "", NULL},
    {"clone-newuser", CLONE_NEWUSER, 0, 0, NULL, "", NULL},
    {"clone-newuser-newnet", CLONE_NEWUSER | CLONE_NEWNET, 0, 0, NULL, "", NULL},
};
#define NMODES (sizeof modes / sizeof modes[0])

static int shared_fd = -1;

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Exit codes of the child: 0 ok, else which step failed (its errno is lost,
** the probe below re-runs the step in this process to name it). */
enum { STEP_OK = 0, STEP_SETNS = 10, STEP_UNSHARE = 11 };

/* One child: clone (fork-like, on a copy of this stack), the mode's step,
** _exit. Returns the wait status, or -1 with errno when clone failed. */
static int run_once(const mode *m)
{
  pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)SIGCHLD | m->clone_flags, NULL, NULL, NULL, NULL);
  if (pid < 0) return -1;
  if (pid == 0) {
    if (m->join && setns(shared_fd, CLONE_NEWNET) < 0) _exit(STEP_SETNS);
    if (m->unshare_flags && unshare((int)m->unshare_flags) < 0) _exit(STEP_UNSHARE);
    _exit(STEP_OK);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return st;
}

/* The pre-made namespace: made by unshare here, kept by an fd, and this
** process steps back into its own. Needs CAP_SYS_ADMIN (root). */
static const char *make_shared(char *why, size_t len)
{
  int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (self < 0) {
    snprintf(why, len, "open /proc/self/ns/net: %s", strerror(errno));
    return why;
  }
  if (unshare(CLONE_NEWNET) < 0) {
    snprintf(why, len, "unshare(CLONE_NEWNET): %s (joining a pre-made namespace needs root)",
             strerror(errno));
    close(self);
    return why;
  }
  shared_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  int e = errno;
  if (setns(self, CLONE_NEWNET) < 0) {
    fprintf(stderr, "airlock-netns: cannot return to the original net namespace: %s\n", strerror(errno));
    exit(1);
  }
  close(self);
  if (shared_fd < 0) {
    snprintf(why, len, "open the new namespace: %s", strerror(e));
    return why;
  }
  return NULL;
}

/* Runs each mode once, untimed: a mode that fails is reported, not timed. */
static void probe(mode *m)
{
  if (m->join && shared_fd < 0) return; /* make_shared already said why */
  int st = run_once(m);
  if (st < 0)
    snprintf(m->why, sizeof m->why, "clone: %s", strerror(errno));
  else if (WIFEXITED(st) && WEXITSTATUS(st) == STEP_SETNS)
    snprintf(m->why, sizeof m->why, "setns(CLONE_NEWNET) refused in the child (needs root)");
  else if (WIFEXITED(st) && WEXITSTATUS(st) == STEP_UNSHARE)
    snprintf(m->why, sizeof m->why, "unshare(CLONE_NEWNET) refused in the child (needs root)");
  else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    snprintf(m->why, sizeof m->why, "child ended with status 0x%x", st);
  else
    return;
  m->error = m->why;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted sample, as airlock-baseline takes it. */
static double percentile(const double *sorted, size_t n, unsigned pct)
{
  size_t rank = (n * pct + 99) / 100;
  return sorted[rank < 1 ? 0 : rank - 1];
}

static void json_string(const char *s)
{
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') putchar('\\');
    if ((unsigned char)*s >= 0x20) putchar(*s);
  }
  putchar('"');
}

int main(int argc, char **argv)
{
  char *end = NULL;
  unsigned long long n = argc == 2 ? strtoull(argv[1], &end, 10) : 0;
  if (argc != 2 || end == argv[1] || *end != '\0' || n < 1 || n > N_MAX) {
    fputs("usage: airlock-netns N   (1 <= N <= 1000000: timed children per mode)\n", stderr);
    return 2;
  }
  char why[160];
  const char *serr = make_shared(why, sizeof why);
  for (size_t i = 0; i < NMODES; i++) {
    if (modes[i].join && serr) modes[i].error = serr;
    probe(&modes[i]);
    if (!modes[i].error && (modes[i].us = malloc(n * sizeof(double))) == NULL) {
      fputs("airlock-netns: out of memory\n", stderr);
      return 1;
    }
  }
  for (unsigned r = 0; r < WARMUP; r++)
    for (size_t i = 0; i < NMODES; i++)
      if (!modes[i].error) run_once(&modes[i]);
  for (uint64_t k = 0; k < n; k++) {
    for (size_t i = 0; i < NMODES; i++) {
      mode *m = &modes[i];
      if (m->error) continue;
      double t0 = now_us();
      int st = run_once(m);
      m->us[k] = now_us() - t0;
      if (st != 0) {
        fprintf(stderr, "airlock-netns: %s: child failed (status 0x%x) after a good probe\n", m->name, st);
        return 1;
      }
    }
  }
  for (size_t i = 0; i < NMODES; i++) {
    mode *m = &modes[i];
    printf("{\"bench\":\"%s\",", m->name);
    if (m->error) {
      printf("\"error\":");
      json_string(m->error);
      printf("}\n");
      continue;
    }
    double total = 0;
    for (uint64_t k = 0; k < n; k++) total += m->us[k];
    qsort(m->us, n, sizeof(double), cmp_double);
    printf("\"n\":%llu,\"median_us\":%.2f,\"p99_us\":%.2f,\"per_sec\":%.0f}\n", n, percentile(m->us, n, 50),
           percentile(m->us, n, 99), total > 0 ? (double)n * 1e6 / total : 0);
    free(m->us);
  }
  if (shared_fd >= 0) close(shared_fd);
  return 0;
}
