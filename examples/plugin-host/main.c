/*
** plugin-host -- a game-style host embedding Lua 5.4 and airlock.
**
** Several untrusted bot scripts (examples/plugin-host/bots/NAME.lua) each drive an
** entity in a grid world. Each bot is one long-lived guest in its own confined
** airlock-worker, recorded in its own ledger. This file does the embedding and
** owns time: the command line, the Lua state with the airlock module registered
** (luaL_requiref), and the main loop, which never blocks on a bot. The world,
** the effects and the rendering are in host.lua beside this file.
**
**   plugin-host [--ticks N] [--fps N] [--bots N] [--ledgers DIR] [--plain]
**               [--fast] [--work MS] [--hog T] [--no-ledgers]
**   plugin-host --replay BOT [--ledgers DIR]
**
** The main loop, per tick: host.frame(tick) ends the previous tick (moves of
** the bots that ended their turn are applied; the others skip it), renders,
** and answers every bot waiting in world.tick. Then, until the frame's end,
** host.pump() every POLL_MS: one broker:step(0) (poll: effects are answered,
** finished bots collected), then a short sleep. A bot's budget for a turn is
** one frame, and limits.turn_instructions of its policy (mods.lua).
** The host's work per tick (frame and pumps, not the sleeps) is kept for each
** tick: the summary gives its median and 99th percentile, and the late frames.
** With --fast there is no clock: a tick ends as soon as every bot has ended
** its turn (or stopped), so a long game plays as fast as the machine allows;
** a bot's turn is then bounded by its policy's CPU budget for a turn alone.
*/
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "airlock.h"

int luaopen_airlock(lua_State *L);

#ifndef PLUGIN_HOST_DIR /* set by premake5.lua to the absolute examples/plugin-host */
#define PLUGIN_HOST_DIR "examples/plugin-host"
#endif

#define POLL_MS      1.0    /* the loop polls the broker this often within a frame */
#define JOIN_MS      5000.0 /* bots have this long to start and ask for their first tick */
#define GRACE_MS     2000.0 /* after the last tick, bots have this long to return */
#define FAST_POLL_MS 50.0   /* --fast: the longest a step waits for the bots */

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig)
{
  (void)sig;
  interrupted = 1;
}

static void sleep_ms(double ms)
{
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000.0), (long)((ms - (double)(time_t)(ms / 1000.0) * 1000.0) * 1e6)};
  nanosleep(&ts, NULL); /* EINTR (Ctrl-C) just ends the nap early */
}

static int traceback(lua_State *L)
{
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : luaL_tolstring(L, 1, NULL), 1);
  return 1;
}

/* Calls host[method](args...) with the nargs values on top of the stack and
** leaves nres results. A Lua error is a bug in the host: print it and exit 2. */
static void call(lua_State *L, int host, const char *method, int nargs, int nres)
{
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, traceback);
  lua_getfield(L, host, method);
  lua_rotate(L, base + 1, 2);
  if (lua_pcall(L, nargs, nres, base + 1) != LUA_OK) {
    fprintf(stderr, "plugin-host: %s\n", lua_tostring(L, -1));
    lua_close(L);
    exit(2);
  }
  lua_remove(L, base + 1);
}

/* host.pump([timeout_ms]) -> all_joined, all_done, all_waiting */
static void pump_for(lua_State *L, int host, double timeout_ms, int *joined, int *done, int *waiting)
{
  lua_pushnumber(L, timeout_ms);
  call(L, host, "pump", 1, 3);
  *joined = lua_toboolean(L, -3);
  *done = lua_toboolean(L, -2);
  if (waiting) *waiting = lua_toboolean(L, -1);
  lua_pop(L, 3);
}
static void pump(lua_State *L, int host, int *joined, int *done)
{
  pump_for(L, host, 0, joined, done, NULL);
}

/* sys.listdir(path) -> sorted list of names, or nil, message (for host.lua: bots/) */
static int l_listdir(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  DIR *d = opendir(path);
  if (!d) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", path, strerror(errno));
    return 2;
  }
  lua_newtable(L);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    lua_pushstring(L, e->d_name);
    lua_rawseti(L, -2, ++n);
  }
  closedir(d);
  lua_getglobal(L, "table");
  lua_getfield(L, -1, "sort");
  lua_pushvalue(L, -3);
  lua_call(L, 1, 0);
  lua_pop(L, 1);
  return 1;
}

static int l_now_ms(lua_State *L)
{
  lua_pushnumber(L, airlock_now_ms());
  return 1;
}

static void usage(FILE *f)
{
  fputs("usage: plugin-host [--ticks N] [--fps N] [--bots N] [--ledgers DIR] [--plain]\n"
        "                   [--fast] [--work MS] [--hog T] [--no-ledgers]\n"
        "       plugin-host --replay BOT [--ledgers DIR]\n"
        "  --ticks N      ticks to simulate (default 100)\n"
        "  --fps N        ticks per second (default 20); a bot's budget for a turn is one tick\n"
        "  --bots N       N generated bots (six effects a tick each) instead of bots/*.lua\n"
        "  --ledgers DIR  one ledger per bot in DIR/BOT (default: a new temporary directory)\n"
        "  --plain        print the tick log line by line even on a terminal\n"
        "  --fast         no clock: a tick ends when every bot has ended its turn, so the game\n"
        "                 runs as fast as the machine allows; a turn is bounded by the policy's\n"
        "                 limits.turn_cpu alone (--fps still sizes the policy's budgets)\n"
        "  --work MS      generated bots do about MS ms of CPU work a turn (arithmetic, its size\n"
        "                 measured on this machine when the game starts)\n"
        "  --hog T        the last generated bot never ends its turn at tick T\n"
        "  --no-ledgers   record nothing (no ledger per bot, no replay)\n"
        "  --replay BOT   replay BOT's recorded session from its ledger; exit 0 when it matches\n"
        "                 (default DIR: the last run's, remembered in $TMPDIR/plugin-host.last)\n",
        f);
}

static long number(const char *opt, const char *s, long lo, long hi)
{
  char *end;
  errno = 0;
  long v = strtol(s ? s : "", &end, 10);
  if (!s || *end || errno || v < lo || v > hi) {
    fprintf(stderr, "plugin-host: %s needs a whole number from %ld to %ld\n", opt, lo, hi);
    exit(2);
  }
  return v;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The p-th percentile of the n sorted values (nearest rank), 0 when n is 0. */
static double percentile(const double *v, long n, int p)
{
  if (n <= 0) return 0;
  long rank = (long)((p * n + 99) / 100); /* ceil(p/100 * n) */
  return v[(rank < 1 ? 1 : rank) - 1];
}

static const char *tmpdir(void)
{
  const char *t = getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

int main(int argc, char **argv)
{
  long ticks = 100, fps = 20, nbots = 0, work = 0, hog = 0;
  const char *ledgers = NULL, *replay = NULL;
  int plain = !isatty(STDOUT_FILENO), fast = 0, noledgers = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--ticks"))
      ticks = number(a, i + 1 < argc ? argv[++i] : NULL, 1, 1000000);
    else if (!strcmp(a, "--fps"))
      fps = number(a, i + 1 < argc ? argv[++i] : NULL, 1, 1000);
    else if (!strcmp(a, "--bots"))
      nbots = number(a, i + 1 < argc ? argv[++i] : NULL, 1, 1000);
    else if (!strcmp(a, "--ledgers") && i + 1 < argc)
      ledgers = argv[++i];
    else if (!strcmp(a, "--replay") && i + 1 < argc)
      replay = argv[++i];
    else if (!strcmp(a, "--plain"))
      plain = 1;
    else if (!strcmp(a, "--fast"))
      fast = 1;
    else if (!strcmp(a, "--work"))
      work = number(a, i + 1 < argc ? argv[++i] : NULL, 0, 1000);
    else if (!strcmp(a, "--no-ledgers"))
      noledgers = 1;
    else if (!strcmp(a, "--hog"))
      hog = number(a, i + 1 < argc ? argv[++i] : NULL, 1, 1000000);
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "plugin-host: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }

  char last[PATH_MAX], dirbuf[PATH_MAX];
  snprintf(last, sizeof last, "%s/plugin-host.last", tmpdir());
  if (noledgers && (replay || ledgers)) {
    fputs("plugin-host: --no-ledgers records nothing: it takes neither --ledgers nor --replay\n", stderr);
    return 2;
  }
  if (noledgers) {
    /* nothing recorded, nothing remembered */
  } else if (replay && !ledgers) { /* the last run's ledgers */
    ssize_t n = readlink(last, dirbuf, sizeof dirbuf - 1);
    if (n <= 0) {
      fprintf(stderr, "plugin-host: no previous run in %s; give --ledgers DIR\n", last);
      return 2;
    }
    dirbuf[n] = 0;
    ledgers = dirbuf;
  } else if (!replay && !ledgers) {
    snprintf(dirbuf, sizeof dirbuf, "%s/plugin-host-XXXXXX", tmpdir());
    if (!mkdtemp(dirbuf)) {
      fprintf(stderr, "plugin-host: mkdtemp %s: %s\n", dirbuf, strerror(errno));
      return 2;
    }
    ledgers = dirbuf;
  } else if (!replay && mkdir(ledgers, 0700) < 0 && errno != EEXIST) {
    fprintf(stderr, "plugin-host: mkdir %s: %s\n", ledgers, strerror(errno));
    return 2;
  }
  if (!replay && !noledgers) { /* remember it for a later --replay without --ledgers */
    char abs[PATH_MAX];
    if (realpath(ledgers, abs)) {
      unlink(last);
      if (symlink(abs, last) < 0) { /* only a convenience */
      }
    }
  }

  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0};
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL); /* Ctrl-C ends the game early, with the summary */

  lua_State *L = luaL_newstate();
  if (!L) {
    fputs("plugin-host: cannot create a Lua state\n", stderr);
    return 2;
  }
  luaL_openlibs(L);
  luaL_requiref(L, "airlock", luaopen_airlock, 0); /* require "airlock" now finds it */
  lua_pop(L, 1);

  const char *dir = getenv("PLUGIN_HOST_DIR");
  if (!dir || !*dir) dir = PLUGIN_HOST_DIR;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/host.lua", dir);
  lua_pushcfunction(L, traceback);
  if (luaL_loadfilex(L, path, "t") != LUA_OK) {
    fprintf(stderr, "plugin-host: %s (set PLUGIN_HOST_DIR to the examples/plugin-host directory)\n",
            lua_tostring(L, -1));
    return 2;
  }
  lua_createtable(L, 0, 8); /* what host.lua gets from C */
  lua_pushstring(L, dir);
  lua_setfield(L, -2, "dir");
  if (ledgers) {
    lua_pushstring(L, ledgers);
    lua_setfield(L, -2, "ledgers");
  }
  lua_pushstring(L, argv[0]);
  lua_setfield(L, -2, "program");
  lua_pushinteger(L, ticks);
  lua_setfield(L, -2, "ticks");
  lua_pushinteger(L, fps);
  lua_setfield(L, -2, "fps");
  lua_pushinteger(L, nbots);
  lua_setfield(L, -2, "bots");
  lua_pushboolean(L, plain);
  lua_setfield(L, -2, "plain");
  lua_pushboolean(L, fast);
  lua_setfield(L, -2, "fast");
  lua_pushinteger(L, work);
  lua_setfield(L, -2, "work");
  lua_pushinteger(L, hog);
  lua_setfield(L, -2, "hog");
  lua_pushcfunction(L, l_listdir);
  lua_setfield(L, -2, "listdir");
  lua_pushcfunction(L, l_now_ms);
  lua_setfield(L, -2, "now_ms");
  if (lua_pcall(L, 1, 1, -3) != LUA_OK) {
    fprintf(stderr, "plugin-host: %s\n", lua_tostring(L, -1));
    return 2;
  }
  int host = lua_gettop(L);

  if (replay) { /* host.replay(bot) -> exit status */
    lua_pushstring(L, replay);
    call(L, host, "replay", 1, 1);
    int code = (int)lua_tointeger(L, -1);
    lua_close(L);
    return code;
  }

  call(L, host, "start", 0, 0);
  int joined = 0, done = 0;
  double t0 = airlock_now_ms();
  while (!interrupted) { /* the lobby: every bot started and waiting for tick 1 */
    pump(L, host, &joined, &done);
    if (joined || airlock_now_ms() - t0 > JOIN_MS) break;
    sleep_ms(POLL_MS);
  }

  const double period = 1000.0 / (double)fps;
  double start = airlock_now_ms(), next = start, work_sum = 0, work_max = 0, prev_work = 0;
  long tick = 0, late = 0;
  double *works = malloc((size_t)ticks * sizeof *works); /* host ms of each tick */
  if (!works) {
    fputs("plugin-host: out of memory\n", stderr);
    return 2;
  }
  while (tick < ticks && !interrupted) {
    tick++;
    double w = airlock_now_ms();
    lua_pushinteger(L, tick);
    lua_pushnumber(L, prev_work);
    call(L, host, "frame", 2, 0); /* end tick-1, render, start tick */
    double work = airlock_now_ms() - w;
    double frame_end = next + period;
    if (fast) { /* no clock: the tick ends when every bot has ended its turn */
      int waiting = 0;
      while (!interrupted) {
        pump_for(L, host, FAST_POLL_MS, &joined, &done, &waiting);
        if (waiting || done) break;
      }
      work = airlock_now_ms() - w;
      frame_end = airlock_now_ms();
    }
    for (double now = airlock_now_ms(); now < frame_end && !interrupted; now = airlock_now_ms()) {
      pump(L, host, &joined, &done);
      double after = airlock_now_ms();
      work += after - now;
      sleep_ms(frame_end - after < POLL_MS ? frame_end - after : POLL_MS);
    }
    works[tick - 1] = work;
    work_sum += work;
    if (work > work_max) work_max = work;
    prev_work = work;
    next = frame_end;
    if (airlock_now_ms() > next + period) {
      late++;
      next = airlock_now_ms();
    } /* never try to catch up */
  }
  double elapsed = airlock_now_ms() - start;

  lua_pushinteger(L, tick);
  lua_pushnumber(L, prev_work);
  call(L, host, "finish", 2, 0); /* end the last tick; bots waiting in world.tick get false */
  t0 = airlock_now_ms();
  do {
    pump(L, host, &joined, &done);
    if (!done) sleep_ms(POLL_MS);
  } while (!done && airlock_now_ms() - t0 < GRACE_MS);

  lua_createtable(L, 0, 8);
  lua_pushinteger(L, tick);
  lua_setfield(L, -2, "ticks");
  lua_pushnumber(L, elapsed);
  lua_setfield(L, -2, "elapsed_ms");
  lua_pushnumber(L, tick ? work_sum / (double)tick : 0);
  lua_setfield(L, -2, "work_avg_ms");
  lua_pushnumber(L, work_max);
  lua_setfield(L, -2, "work_max_ms");
  qsort(works, (size_t)tick, sizeof *works, cmp_double);
  lua_pushnumber(L, percentile(works, tick, 50));
  lua_setfield(L, -2, "work_med_ms");
  lua_pushnumber(L, percentile(works, tick, 99));
  lua_setfield(L, -2, "work_p99_ms");
  free(works);
  lua_pushinteger(L, late);
  lua_setfield(L, -2, "late");
  lua_pushboolean(L, interrupted);
  lua_setfield(L, -2, "interrupted");
  call(L, host, "close", 1, 1); /* stragglers cancelled, the summary printed */
  int code = (int)lua_tointeger(L, -1);
  lua_close(L);
  return code;
}
