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

/* The command line. */
struct options {
  long ticks, fps, nbots, work, hog;
  const char *ledgers, *replay;
  int plain, fast, noledgers;
};

/* Reads argv into o. Returns -1 to go on, else the exit status (--help: 0). */
static int parse_options(int argc, char **argv, struct options *o)
{
  *o = (struct options){.ticks = 100, .fps = 20, .plain = !isatty(STDOUT_FILENO)};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--ticks"))
      o->ticks = number(a, i + 1 < argc ? argv[++i] : NULL, 1, 1000000);
    else if (!strcmp(a, "--fps"))
      o->fps = number(a, i + 1 < argc ? argv[++i] : NULL, 1, 1000);
    else if (!strcmp(a, "--bots"))
      o->nbots = number(a, i + 1 < argc ? argv[++i] : NULL, 1, 1000);
    else if (!strcmp(a, "--ledgers") && i + 1 < argc)
      o->ledgers = argv[++i];
    else if (!strcmp(a, "--replay") && i + 1 < argc)
      o->replay = argv[++i];
    else if (!strcmp(a, "--plain"))
      o->plain = 1;
    else if (!strcmp(a, "--fast"))
      o->fast = 1;
    else if (!strcmp(a, "--work"))
      o->work = number(a, i + 1 < argc ? argv[++i] : NULL, 0, 1000);
    else if (!strcmp(a, "--no-ledgers"))
      o->noledgers = 1;
    else if (!strcmp(a, "--hog"))
      o->hog = number(a, i + 1 < argc ? argv[++i] : NULL, 1, 1000000);
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "plugin-host: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (o->noledgers && (o->replay || o->ledgers)) {
    fputs("plugin-host: --no-ledgers records nothing: it takes neither --ledgers nor --replay\n", stderr);
    return 2;
  }
  return -1;
}

/* Where the ledgers are: --ledgers, or with --replay alone the last run's,
** else a new temporary directory, remembered for a later --replay (dirbuf
** holds a path chosen here). Returns 0, or 2 with the reason printed. */
static int choose_ledgers(struct options *o, char dirbuf[PATH_MAX])
{
  char last[PATH_MAX];
  snprintf(last, sizeof last, "%s/plugin-host.last", tmpdir());
  if (o->noledgers) return 0; /* nothing recorded, nothing remembered */
  if (o->replay && !o->ledgers) {
    ssize_t n = readlink(last, dirbuf, PATH_MAX - 1);
    if (n <= 0) {
      fprintf(stderr, "plugin-host: no previous run in %s; give --ledgers DIR\n", last);
      return 2;
    }
    dirbuf[n] = 0;
    o->ledgers = dirbuf;
    return 0;
  }
  if (!o->replay && !o->ledgers) {
    snprintf(dirbuf, PATH_MAX, "%s/plugin-host-XXXXXX", tmpdir());
    if (!mkdtemp(dirbuf)) {
      fprintf(stderr, "plugin-host: mkdtemp %s: %s\n", dirbuf, strerror(errno));
      return 2;
    }
    o->ledgers = dirbuf;
  } else if (!o->replay && mkdir(o->ledgers, 0700) < 0 && errno != EEXIST) {
    fprintf(stderr, "plugin-host: mkdir %s: %s\n", o->ledgers, strerror(errno));
    return 2;
  }
  if (!o->replay) { /* remember it for a later --replay without --ledgers */
    char abs[PATH_MAX];
    if (realpath(o->ledgers, abs)) {
      unlink(last);
      if (symlink(abs, last) < 0) { /* only a convenience */
      }
    }
  }
  return 0;
}

static void set_int(lua_State *L, const char *k, lua_Integer v)
{
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}
static void set_num(lua_State *L, const char *k, double v)
{
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}
static void set_bool(lua_State *L, const char *k, int v)
{
  lua_pushboolean(L, v);
  lua_setfield(L, -2, k);
}

/* A Lua state with the airlock module registered, and host.lua loaded and
** run with what it gets from C: its module table is left on top. NULL (the
** reason printed) on failure. */
static lua_State *open_host(const struct options *o, const char *program)
{
  lua_State *L = luaL_newstate();
  if (!L) {
    fputs("plugin-host: cannot create a Lua state\n", stderr);
    return NULL;
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
    lua_close(L);
    return NULL;
  }
  lua_createtable(L, 0, 12); /* what host.lua gets from C */
  lua_pushstring(L, dir);
  lua_setfield(L, -2, "dir");
  if (o->ledgers) {
    lua_pushstring(L, o->ledgers);
    lua_setfield(L, -2, "ledgers");
  }
  lua_pushstring(L, program);
  lua_setfield(L, -2, "program");
  set_int(L, "ticks", o->ticks);
  set_int(L, "fps", o->fps);
  set_int(L, "bots", o->nbots);
  set_bool(L, "plain", o->plain);
  set_bool(L, "fast", o->fast);
  set_int(L, "work", o->work);
  set_int(L, "hog", o->hog);
  lua_pushcfunction(L, l_listdir);
  lua_setfield(L, -2, "listdir");
  lua_pushcfunction(L, l_now_ms);
  lua_setfield(L, -2, "now_ms");
  if (lua_pcall(L, 1, 1, -3) != LUA_OK) {
    fprintf(stderr, "plugin-host: %s\n", lua_tostring(L, -1));
    lua_close(L);
    return NULL;
  }
  lua_remove(L, -2); /* the traceback */
  return L;
}

/* What the game loop measured. */
struct game {
  long tick, late;
  double elapsed, work_sum, work_max, prev_work;
  double *works; /* host ms of each tick */
};

/* One tick: host.frame ends the previous one and starts this one, then the
** bots are pumped until the frame's end (with --fast, until every bot has
** ended its turn). Returns the host's work in ms (not the sleeps). */
static double play_tick(lua_State *L, int host, const struct options *o, struct game *g, double frame_end,
                        int *joined, int *done)
{
  double w = airlock_now_ms();
  lua_pushinteger(L, g->tick);
  lua_pushnumber(L, g->prev_work);
  call(L, host, "frame", 2, 0); /* end tick-1, render, start tick */
  double work = airlock_now_ms() - w;
  if (o->fast) { /* no clock: the tick ends when every bot has ended its turn */
    int waiting = 0;
    while (!interrupted) {
      pump_for(L, host, FAST_POLL_MS, joined, done, &waiting);
      if (waiting || *done) break;
    }
    return airlock_now_ms() - w;
  }
  for (double now = airlock_now_ms(); now < frame_end && !interrupted; now = airlock_now_ms()) {
    pump(L, host, joined, done);
    double after = airlock_now_ms();
    work += after - now;
    sleep_ms(frame_end - after < POLL_MS ? frame_end - after : POLL_MS);
  }
  return work;
}

/* The game: the lobby (every bot started and waiting for tick 1), the ticks
** at o->fps (never catching up on a late one), then the last tick's end and
** the bots' grace to return. Returns 0, or 2 when out of memory. */
static int play(lua_State *L, int host, const struct options *o, struct game *g)
{
  call(L, host, "start", 0, 0);
  int joined = 0, done = 0;
  double t0 = airlock_now_ms();
  while (!interrupted) {
    pump(L, host, &joined, &done);
    if (joined || airlock_now_ms() - t0 > JOIN_MS) break;
    sleep_ms(POLL_MS);
  }
  const double period = 1000.0 / (double)o->fps;
  double start = airlock_now_ms(), next = start;
  g->works = malloc((size_t)o->ticks * sizeof *g->works);
  if (!g->works) {
    fputs("plugin-host: out of memory\n", stderr);
    return 2;
  }
  while (g->tick < o->ticks && !interrupted) {
    g->tick++;
    double frame_end = next + period;
    double work = play_tick(L, host, o, g, frame_end, &joined, &done);
    if (o->fast) frame_end = airlock_now_ms();
    g->works[g->tick - 1] = work;
    g->work_sum += work;
    if (work > g->work_max) g->work_max = work;
    g->prev_work = work;
    next = frame_end;
    if (airlock_now_ms() > next + period) {
      g->late++;
      next = airlock_now_ms();
    } /* never try to catch up */
  }
  g->elapsed = airlock_now_ms() - start;
  lua_pushinteger(L, g->tick);
  lua_pushnumber(L, g->prev_work);
  call(L, host, "finish", 2, 0); /* end the last tick; bots waiting in world.tick get false */
  t0 = airlock_now_ms();
  do {
    pump(L, host, &joined, &done);
    if (!done) sleep_ms(POLL_MS);
  } while (!done && airlock_now_ms() - t0 < GRACE_MS);
  return 0;
}

/* host.close(summary): stragglers cancelled, the summary printed. -> exit status */
static int close_game(lua_State *L, int host, struct game *g)
{
  lua_createtable(L, 0, 8);
  set_int(L, "ticks", g->tick);
  set_num(L, "elapsed_ms", g->elapsed);
  set_num(L, "work_avg_ms", g->tick ? g->work_sum / (double)g->tick : 0);
  set_num(L, "work_max_ms", g->work_max);
  qsort(g->works, (size_t)g->tick, sizeof *g->works, cmp_double);
  set_num(L, "work_med_ms", percentile(g->works, g->tick, 50));
  set_num(L, "work_p99_ms", percentile(g->works, g->tick, 99));
  set_int(L, "late", g->late);
  set_bool(L, "interrupted", interrupted);
  call(L, host, "close", 1, 1);
  return (int)lua_tointeger(L, -1);
}

int main(int argc, char **argv)
{
  struct options o;
  char dirbuf[PATH_MAX];
  int code = parse_options(argc, argv, &o);
  if (code >= 0) return code;
  if (choose_ledgers(&o, dirbuf)) return 2;

  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0};
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL); /* Ctrl-C ends the game early, with the summary */

  lua_State *L = open_host(&o, argv[0]);
  if (!L) return 2;
  int host = lua_gettop(L);
  if (o.replay) { /* host.replay(bot) -> exit status */
    lua_pushstring(L, o.replay);
    call(L, host, "replay", 1, 1);
    code = (int)lua_tointeger(L, -1);
  } else {
    struct game g = {0};
    code = play(L, host, &o, &g);
    if (code == 0) code = close_game(L, host, &g);
    free(g.works);
  }
  lua_close(L);
  return code;
}
