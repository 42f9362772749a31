/*
** test_helpers.c -- the helper processes that share our memory.
**
** airlock_close_later (core/release.c): the descriptor is closed (its reader
** sees the end), by a helper a host's waitpid(-1) never sees and no signal
** of ours reaches, with at most a bounded number of helpers left behind
** however many closes are asked for. A helper lives for microseconds, so the
** signal case gives it a close that takes seconds: a TCP socket with
** SO_LINGER whose unsent data the peer will not read, whose close waits out
** the linger time.
**
** A namespace holder (core/ns_holder.c) waits with our signals blocked too.
*/
#define _GNU_SOURCE
#include "airlock.h"
#include "check.h"
#include "ns_holder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t sigchld_seen, sigusr1_seen;
static void on_sigchld(int s)
{
  (void)s;
  sigchld_seen++;
}
static void on_sigusr1(int s)
{
  (void)s;
  sigusr1_seen++;
}

/* Our children's pids, from /proc/self/task/.../children (helpers and all). */
static int children(pid_t *out, int max)
{
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[320];
    snprintf(path, sizeof path, "/proc/self/task/%s/children", e->d_name);
    FILE *f = fopen(path, "r");
    int pid;
    while (f && fscanf(f, "%d", &pid) == 1)
      if (n < max) out[n++] = pid;
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return n;
}

/* Whether fd's other end is closed, waiting for it at most ms. */
static int sees_end(int fd, int ms)
{
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, ms) != 1) return 0;
  char c;
  return read(fd, &c, 1) == 0;
}

static void test_closes(void)
{
  airlock_close_later(-1); /* nothing to close: nothing happens */
  int p[2];
  CHECK(pipe2(p, O_CLOEXEC) == 0);
  CHECK_MSG(!sees_end(p[0], 0), "control: the write end is open before");
  airlock_close_later(p[1]);
  CHECK_MSG(sees_end(p[0], 10000), "the reader sees the end once the helper has closed it");
  close(p[0]);
}

static void test_unseen_by_waitpid(void)
{
  struct sigaction sa = {.sa_handler = on_sigchld};
  sigaction(SIGCHLD, &sa, NULL);
  sigchld_seen = 0;
  int p[2];
  CHECK(pipe2(p, O_CLOEXEC) == 0);
  airlock_close_later(p[1]);
  CHECK(sees_end(p[0], 10000));
  close(p[0]);
  /* The helper has closed; whether or not it has exited yet, waitpid(-1)
  ** without __WALL has nothing to see and no SIGCHLD comes. */
  errno = 0;
  CHECK_MSG(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD, "waitpid(-1) does not see the helper");
  usleep(50 * 1000);
  CHECK_MSG(sigchld_seen == 0, "no SIGCHLD for the helper");
  /* Control: an ordinary child is seen by both. */
  pid_t c = fork();
  if (c == 0) _exit(0);
  CHECK_MSG(waitpid(-1, NULL, 0) == c, "control: waitpid(-1) sees an ordinary child");
  CHECK_MSG(sigchld_seen == 1, "control: its SIGCHLD comes");
  signal(SIGCHLD, SIG_DFL);
}

static void test_bounded(void)
{
  int ends = 0;
  for (int i = 0; i < 200; i++) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) break;
    airlock_close_later(p[1]);
    ends += sees_end(p[0], 10000);
    close(p[0]);
  }
  CHECK_MSG(ends == 200, "each of 200 closes arrives");
  pid_t pids[512];
  int n = children(pids, 512);
  char msg[96];
  snprintf(msg, sizeof msg, "at most 32 helpers are left unreaped after 200 closes (%d children)", n);
  CHECK_MSG(n <= 32, msg);
}

/* A connected TCP pair on loopback: *a (with SO_LINGER 2 s and more unsent
** data than the peer's buffers take) and *b (never read). 0 or -1. */
static int lingering_pair(int *a, int *b)
{
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  int small = 4096;
  setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 1) < 0 ||
      getsockname(l, (struct sockaddr *)&sa, &len) < 0)
    return -1;
  *a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  setsockopt(*a, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  if (*a < 0 || connect(*a, (struct sockaddr *)&sa, sizeof sa) < 0) return -1;
  *b = accept4(l, NULL, NULL, SOCK_CLOEXEC);
  close(l);
  if (*b < 0) return -1;
  struct linger lg = {.l_onoff = 1, .l_linger = 2};
  setsockopt(*a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  fcntl(*a, F_SETFL, O_NONBLOCK);
  static char junk[65536];
  while (send(*a, junk, sizeof junk, MSG_NOSIGNAL) > 0) {
  }
  fcntl(*a, F_SETFL, 0);
  return 0;
}

/* Whether pid's blocked signal mask (/proc/PID/status SigBlk) holds SIGUSR1. */
static int blocks_usr1(pid_t pid)
{
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  int yes = 0;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "SigBlk:", 7) == 0) yes = (strtoull(line + 7, NULL, 16) >> (SIGUSR1 - 1)) & 1;
  if (f) fclose(f);
  return yes;
}

static void test_signals_blocked(void)
{
  int a, b;
  if (lingering_pair(&a, &b) < 0) {
    SKIP("no TCP on loopback here: the lingering close the signal case needs cannot be made");
    return;
  }
  struct sigaction sa = {.sa_handler = on_sigusr1};
  sigaction(SIGUSR1, &sa, NULL);
  sigusr1_seen = 0;
  pid_t before[512];
  int nb = children(before, 512);
  airlock_close_later(a); /* the helper lingers in close for up to 2 s */
  pid_t after[512], helper = -1;
  for (int tries = 0; tries < 100 && helper < 0; tries++) {
    int na = children(after, 512);
    for (int i = 0; i < na && helper < 0; i++) {
      int old = 0;
      for (int k = 0; k < nb; k++) old |= after[i] == before[k];
      if (!old) helper = after[i];
    }
    if (helper < 0) usleep(1000);
  }
  CHECK_MSG(helper > 0, "the helper is found while it lingers in close");
  if (helper > 0) {
    CHECK_MSG(blocks_usr1(helper), "the helper is born with our signals blocked");
    CHECK_MSG(!blocks_usr1(getpid()), "control: ours are not");
    kill(helper, SIGUSR1);
    usleep(20 * 1000);
    CHECK_MSG(sigusr1_seen == 0, "a signal sent to the helper runs no handler of ours");
    kill(getpid(), SIGUSR1);
    CHECK_MSG(sigusr1_seen == 1, "control: one sent to us runs it");
  }
  close(b);
  signal(SIGUSR1, SIG_DFL);
}

static void test_holder_signals(void)
{
  struct sigaction sa = {.sa_handler = on_sigusr1}; /* before the clone, which copies handlers */
  sigaction(SIGUSR1, &sa, NULL);
  sigusr1_seen = 0;
  airlock_ns_holder h;
  char err[256];
  CHECK(airlock_ns_holder_begin_(&h, 0, "holder", err, sizeof err) == 0);
  CHECK(airlock_ns_holder_ready_(&h, "holder", err, sizeof err) == 0);
  CHECK_MSG(h.pid > 0 && blocks_usr1(h.pid), "a namespace holder waits with our signals blocked");
  kill(h.pid, SIGUSR1);
  usleep(20 * 1000);
  CHECK_MSG(sigusr1_seen == 0, "a signal sent to the holder runs no handler of ours");
  kill(getpid(), SIGUSR1);
  CHECK_MSG(sigusr1_seen == 1, "control: one sent to us runs it");
  airlock_ns_holder_end_(&h);
  signal(SIGUSR1, SIG_DFL);
}

int main(void)
{
  test_closes();
  test_unseen_by_waitpid();
  test_bounded();
  test_signals_blocked();
  test_holder_signals();
  return check_summary();
}
