/*
** lpty.c -- a terminal of its own for a program (airlock exec on a terminal).
**
**   local t = core.pty_open()   -- a new pseudo-terminal, sized like fd 0's
**   t:slave() -> fd, path       -- the program's end (its stdin, stdout, stderr)
**   t:close_slave()             -- once the program holds it
**   t:relay()                   -- fd 0 raw; a thread copies fd 0 -> terminal
**                                  -> fd 1 and passes window size changes on
**   t:wait(ms)                  -- after the run: drains, stops, restores fd 0
**
** The program gets a controlling terminal that is not the caller's: it may
** take its foreground, change its modes, read /dev/tty, and none of that
** reaches the caller's terminal, which only ever sees bytes written to fd 1.
** Closed (or collected), the relay stops and fd 0's modes come back.
*/
#define _GNU_SOURCE
#include "lbinding.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#define PTY_MT "airlock.pty"

typedef struct lpty {
  int master, slave, stop[2];
  char path[64];
  int raw; /* fd 0's modes were changed; saved holds them */
  struct termios saved;
  int running;
  pthread_t thread;
} lpty;

static int write_all(int fd, const char *p, size_t n)
{
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* The relay: fd 0 -> master (buffered, so a program that does not read
** cannot block the other direction), master -> fd 1, SIGWINCH -> the
** terminal's size. Ends when the terminal has no holder left (EIO), or when
** told to stop. */
static void *relay_main(void *arg)
{
  lpty *t = arg;
  char in[4096], out[16384];
  size_t in_len = 0;
  int in_open = 1;
  sigset_t winch;
  sigemptyset(&winch);
  sigaddset(&winch, SIGWINCH);
  int sfd = signalfd(-1, &winch, SFD_CLOEXEC | SFD_NONBLOCK);
  for (;;) {
    struct pollfd p[4] = {
        {in_open && in_len < sizeof in ? 0 : -1, POLLIN, 0},
        {t->master, (short)(POLLIN | (in_len ? POLLOUT : 0)), 0},
        {t->stop[0], POLLIN, 0},
        {sfd, POLLIN, 0},
    };
    if (poll(p, 4, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(0, in + in_len, sizeof in - in_len);
      if (n > 0)
        in_len += (size_t)n;
      else if (n == 0 || (errno != EINTR && errno != EAGAIN))
        in_open = 0;
    }
    if (in_len && (p[1].revents & POLLOUT)) {
      ssize_t n = write(t->master, in, in_len);
      if (n > 0) {
        memmove(in, in + n, in_len - (size_t)n);
        in_len -= (size_t)n;
      }
    }
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(t->master, out, sizeof out);
      if (n > 0) {
        if (write_all(1, out, (size_t)n) < 0) break;
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN))
        break; /* EIO: nobody holds it */
    }
    if (p[3].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
      }
      struct winsize ws;
      if (ioctl(0, TIOCGWINSZ, &ws) == 0) ioctl(t->master, TIOCSWINSZ, &ws);
    }
    if (p[2].revents & POLLIN) { /* stop: what the terminal still holds first */
      ssize_t n;
      while ((n = read(t->master, out, sizeof out)) > 0 && write_all(1, out, (size_t)n) == 0) {
      }
      break;
    }
  }
  if (sfd >= 0) close(sfd);
  return NULL;
}

static void restore(lpty *t)
{
  if (t->raw) {
    tcsetattr(0, TCSADRAIN, &t->saved);
    t->raw = 0;
  }
}

static void stop_relay(lpty *t)
{
  if (t->running) {
    if (write(t->stop[1], "x", 1) < 0) { /* the thread ends at EIO anyway */
    }
    pthread_join(t->thread, NULL);
    t->running = 0;
  }
  restore(t);
}

static void close_all(lpty *t)
{
  stop_relay(t);
  for (int *fd = &t->master; fd <= &t->stop[1]; fd++)
    if (*fd >= 0) {
      close(*fd);
      *fd = -1;
    }
}

static lpty *check(lua_State *L)
{
  return luaL_checkudata(L, 1, PTY_MT);
}

static int l_pty_open(lua_State *L)
{
  lpty *t = lua_newuserdatauv(L, sizeof *t, 0);
  memset(t, 0, sizeof *t);
  t->master = t->slave = t->stop[0] = t->stop[1] = -1;
  luaL_setmetatable(L, PTY_MT);
  t->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (t->master < 0 || grantpt(t->master) < 0 || unlockpt(t->master) < 0 ||
      ptsname_r(t->master, t->path, sizeof t->path) != 0)
    return airlock_l_fail(L, "pty", "cannot make a pseudo-terminal", errno);
  t->slave = open(t->path, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (t->slave < 0 || pipe2(t->stop, O_CLOEXEC) < 0 || fcntl(t->master, F_SETFL, O_NONBLOCK) < 0)
    return airlock_l_fail(L, "pty", "cannot open the pseudo-terminal", errno);
  struct winsize ws;
  if (ioctl(0, TIOCGWINSZ, &ws) == 0) ioctl(t->master, TIOCSWINSZ, &ws);
  /* The caller's modes, so the program starts with what the user has set. */
  struct termios tio;
  if (tcgetattr(0, &tio) == 0) tcsetattr(t->slave, TCSANOW, &tio);
  return 1;
}

static int l_pty_slave(lua_State *L)
{
  lpty *t = check(L);
  if (t->slave < 0) return luaL_error(L, "pty: the program's end is closed");
  lua_pushinteger(L, t->slave);
  lua_pushstring(L, t->path);
  return 2;
}

static int l_pty_close_slave(lua_State *L)
{
  lpty *t = check(L);
  if (t->slave >= 0) {
    close(t->slave);
    t->slave = -1;
  }
  return 0;
}

static int l_pty_relay(lua_State *L)
{
  lpty *t = check(L);
  if (t->running) return luaL_error(L, "pty: the relay is already running");
  if (tcgetattr(0, &t->saved) == 0) {
    struct termios raw = t->saved;
    cfmakeraw(&raw);
    if (tcsetattr(0, TCSADRAIN, &raw) == 0) t->raw = 1;
  }
  /* SIGWINCH goes to the relay's signalfd: blocked here, the thread inherits it. */
  sigset_t winch;
  sigemptyset(&winch);
  sigaddset(&winch, SIGWINCH);
  pthread_sigmask(SIG_BLOCK, &winch, NULL);
  int e = pthread_create(&t->thread, NULL, relay_main, t);
  if (e != 0) {
    restore(t);
    return airlock_l_fail(L, "pty", "cannot start the terminal relay", e);
  }
  t->running = 1;
  return 0;
}

/* t:wait(ms): the run is over; the relay ends by itself when the terminal
** has no holder left, else it is stopped after ms (what it holds is copied). */
static int l_pty_wait(lua_State *L)
{
  lpty *t = check(L);
  lua_Integer ms = luaL_optinteger(L, 2, 500);
  if (t->running) {
    struct pollfd p = {t->master, POLLHUP, 0};
    if (poll(&p, 1, (int)(ms < 0 ? 0 : ms > 60000 ? 60000 : ms)) >= 0) stop_relay(t);
  }
  restore(t);
  return 0;
}

static int l_pty_gc(lua_State *L)
{
  close_all(check(L));
  return 0;
}

void airlock_l_open_pty(lua_State *L)
{
  static const luaL_Reg methods[] = {
      {"slave", l_pty_slave}, {"close_slave", l_pty_close_slave},
      {"relay", l_pty_relay}, {"wait", l_pty_wait},
      {"close", l_pty_gc},    {NULL, NULL},
  };
  static const luaL_Reg meta[] = {{"__gc", l_pty_gc}, {"__close", l_pty_gc}, {NULL, NULL}};
  airlock_l_class(L, PTY_MT, methods, meta);
  lua_pushcfunction(L, l_pty_open);
  lua_setfield(L, -2, "pty_open");
}
