/*
** os_shim.c -- the guest's os table: time, clock, date and difftime only.
** The current time is the clock.now effect and the CPU clock the clock.cpu
** effect, so replay sees the same clocks; calendar math is done here in UTC,
** because libc's would read zone files.
*/
#include <limits.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>

#include "worker.h"

#define SECS_PER_DAY 86400

/* ---------------------------------------------------------------- clock.now */

/* Calls clock.now and returns the number in field key of its reply. */
static lua_Number clock_now(lua_State *L, const char *key)
{
  worker *w = worker_of(L);
  msgpack_packer *pk = worker_call_begin(w, "clock.now", 9);
  msgpack_pack_nil(pk);
  worker_call_finish(L, w);
  if (lua_type(L, -1) != LUA_TTABLE || lua_getfield(L, -1, key) != LUA_TNUMBER)
    luaL_error(L, "clock.now: the reply has no number '%s'", key);
  lua_Number v = lua_tonumber(L, -1);
  lua_pop(L, 2);
  return v;
}

static lua_Integer now_seconds(lua_State *L)
{
  lua_Number t = clock_now(L, "time");
  lua_Integer s = 0;
  if (!lua_numbertointeger(l_mathop(floor)(t), &s))
    luaL_error(L, "clock.now: time %f is out of range", (double)t);
  return s;
}

/* ---------------------------------------------------------------- calendar */

static int64_t floor_div(int64_t a, int64_t b)
{
  return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* Days from 1970-01-01 to y-m-d (m 1..12, d counted from 1 and free to run
** past the month). Counting years from March puts the leap day last, and
** 400-year eras (146097 days) repeat exactly, so one formula covers all. */
static int64_t days_from_date(int64_t y, int64_t m, int64_t d)
{
  if (m <= 2) y--;
  int64_t era = floor_div(y, 400);
  int64_t year_of_era = y - era * 400;     /* 0..399 */
  int64_t month_from_march = (m + 9) % 12; /* Mar = 0 */
  int64_t day_of_year = (153 * month_from_march + 2) / 5 + d - 1;
  int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
  return era * 146097 + day_of_era - 719468; /* 719468: 0000-03-01 */
}

/* The inverse of days_from_date. */
static void date_from_days(int64_t days, int64_t *y, int *m, int *d)
{
  int64_t z = days + 719468;
  int64_t era = floor_div(z, 146097);
  int64_t day_of_era = z - era * 146097; /* 0..146096 */
  int64_t year_of_era =
      (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365; /* 0..399 */
  int64_t day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
  int64_t mp = (5 * day_of_year + 2) / 153; /* Mar = 0 */
  *d = (int)(day_of_year - (153 * mp + 2) / 5 + 1);
  *m = (int)(mp < 10 ? mp + 3 : mp - 9);
  *y = year_of_era + era * 400 + (*m <= 2);
}

/* gmtime without libc: fails when the year does not fit struct tm. */
static int utc_tm(int64_t t, struct tm *tm)
{
  int64_t days = floor_div(t, SECS_PER_DAY), secs = t % SECS_PER_DAY, y;
  if (secs < 0) /* (not t - days * 86400, which overflows near INT64_MIN) */
    secs += SECS_PER_DAY;
  int m, d;
  date_from_days(days, &y, &m, &d);
  if (y - 1900 < INT_MIN || y - 1900 > INT_MAX) return -1;
  memset(tm, 0, sizeof *tm);
  tm->tm_year = (int)(y - 1900);
  tm->tm_mon = m - 1;
  tm->tm_mday = d;
  tm->tm_hour = (int)(secs / 3600);
  tm->tm_min = (int)(secs / 60 % 60);
  tm->tm_sec = (int)(secs % 60);
  tm->tm_wday = (int)((days % 7 + 11) % 7); /* 1970-01-01: Thursday */
  tm->tm_yday = (int)(days - days_from_date(y, 1, 1));
  tm->tm_gmtoff = 0;
  tm->tm_zone = "UTC"; /* set, so strftime's %Z never consults tzset */
  return 0;
}

/* A time argument: any integer, as time_t is 64 bits here. Calendar math
** takes them all (the day count of the largest is about 2^47); a date whose
** year does not fit struct tm is refused by utc_tm. */
static int64_t check_time(lua_State *L, int arg)
{
  return (int64_t)luaL_checkinteger(L, arg);
}

/* ---------------------------------------------------------------- os.time */

static void set_field(lua_State *L, const char *key, lua_Integer value)
{
  lua_pushinteger(L, value);
  lua_setfield(L, -2, key);
}

static void set_all_fields(lua_State *L, const struct tm *tm)
{
  set_field(L, "year", (lua_Integer)tm->tm_year + 1900); /* past INT_MAX near the end */
  set_field(L, "month", tm->tm_mon + 1);
  set_field(L, "day", tm->tm_mday);
  set_field(L, "hour", tm->tm_hour);
  set_field(L, "min", tm->tm_min);
  set_field(L, "sec", tm->tm_sec);
  set_field(L, "yday", tm->tm_yday + 1);
  set_field(L, "wday", tm->tm_wday + 1);
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "isdst");
}

/* Reads an int field of the date table at index 1; dflt < 0 means required.
** As in Lua's os.time, what struct tm would hold (the value less delta: the
** year counts from 1900, the month from 1) must fit an int, which also keeps
** the sums below far from overflow; the result still counts as given. */
static int64_t get_field(lua_State *L, const char *key, int dflt, int delta)
{
  int type = lua_getfield(L, 1, key);
  int isnum;
  lua_Integer v = lua_tointegerx(L, -1, &isnum);
  lua_pop(L, 1);
  if (!isnum) {
    if (type != LUA_TNIL) return luaL_error(L, "field '%s' is not an integer", key);
    if (dflt < 0) return luaL_error(L, "field '%s' missing in date table", key);
    return dflt;
  }
  if (v < (lua_Integer)INT_MIN + delta || v > (lua_Integer)INT_MAX + delta)
    return luaL_error(L, "field '%s' is out-of-bound", key);
  return v;
}

/* os.time(t): t's fields read as UTC, normalised like mktime, written back.
** UTC has no daylight time, but a table that says isdst = true is read as
** the daylight time of a zone one hour ahead, as mktime does under TZ=UTC
** (lua5.4 there gives one hour less); isdst absent or false is plain UTC. */
static int time_of_table(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  int64_t year = get_field(L, "year", -1, 1900), month = get_field(L, "month", -1, 1);
  int64_t day = get_field(L, "day", -1, 0), hour = get_field(L, "hour", 12, 0);
  int64_t min = get_field(L, "min", 0, 0), sec = get_field(L, "sec", 0, 0);
  lua_getfield(L, 1, "isdst");
  int dst = lua_toboolean(L, -1);
  lua_pop(L, 1);
  int64_t m0 = month - 1;
  int64_t days = days_from_date(year + floor_div(m0, 12), m0 - floor_div(m0, 12) * 12 + 1, 1);
  int64_t t = (days + day - 1) * SECS_PER_DAY + hour * 3600 + min * 60 + sec - (dst ? 3600 : 0);
  struct tm tm;
  if (utc_tm(t, &tm) != 0) return luaL_error(L, "time result cannot be represented in this installation");
  set_all_fields(L, &tm);
  lua_pushinteger(L, (lua_Integer)t);
  return 1;
}

static int os_time(lua_State *L)
{
  if (!lua_isnoneornil(L, 1)) return time_of_table(L);
  lua_pushinteger(L, now_seconds(L));
  return 1;
}

/* os.clock: the worker's CPU time, answered by the clock.cpu effect. The
** parent reads it from the kernel (clock_gettime on the worker's CPU clock),
** and the ledger records it, so a replay returns the same seconds. */
static int os_clock(lua_State *L)
{
  worker *w = worker_of(L);
  msgpack_packer *pk = worker_call_begin(w, "clock.cpu", 9);
  msgpack_pack_nil(pk);
  worker_call_finish(L, w);
  if (lua_type(L, -1) != LUA_TNUMBER) return luaL_error(L, "clock.cpu: the reply is not a number");
  lua_pushnumber(L, lua_tonumber(L, -1));
  return 1;
}

static int os_difftime(lua_State *L)
{
  int64_t a = check_time(L, 1), b = check_time(L, 2);
  lua_pushnumber(L, (lua_Number)a - (lua_Number)b); /* as difftime: no overflow */
  return 1;
}

/* ---------------------------------------------------------------- os.date */

/* Length of the conversion at spec (just after '%') that C99 strftime
** defines, or 0: handing strftime anything else is undefined behaviour. */
static size_t conversion_len(const char *spec)
{
  if (*spec != '\0' && strchr("aAbBcCdDeFgGhHIjmMnprRStTuUVwWxXyYzZ%", *spec)) return 1;
  if (spec[0] == 'E' && spec[1] != '\0' && strchr("cCxXyY", spec[1])) return 2;
  if (spec[0] == 'O' && spec[1] != '\0' && strchr("deHImMSuUVwWy", spec[1])) return 2;
  return 0;
}

/* strftime one conversion at a time, so each result is bounded. The format
** is len bytes: a '\0' in it is a character like any other, as in Lua's. */
static void format_date(lua_State *L, const char *fmt, size_t len, const struct tm *tm)
{
  const char *end = fmt + len;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  while (fmt < end) {
    if (*fmt != '%') {
      luaL_addchar(&b, *fmt++);
      continue;
    }
    size_t n = conversion_len(fmt + 1);
    if (n == 0) luaL_argerror(L, 1, lua_pushfstring(L, "invalid conversion specifier '%%%s'", fmt + 1));
    char conv[4] = {'%'};
    memcpy(conv + 1, fmt + 1, n);
    char out[256];
    size_t len = strftime(out, sizeof out, conv, tm);
    luaL_addlstring(&b, out, len);
    fmt += 1 + n;
  }
  luaL_pushresult(&b);
}

/* os.date([fmt [, t]]): always UTC, so "!" is accepted and changes nothing. */
static int os_date(lua_State *L)
{
  size_t len;
  const char *fmt = luaL_optlstring(L, 1, "%c", &len);
  int64_t t = lua_isnoneornil(L, 2) ? now_seconds(L) : check_time(L, 2);
  struct tm tm;
  if (utc_tm(t, &tm) != 0) return luaL_error(L, "date result cannot be represented in this installation");
  if (*fmt == '!') {
    fmt++;
    len--;
  }
  if (strcmp(fmt, "*t") == 0) {
    lua_createtable(L, 0, 9);
    set_all_fields(L, &tm);
  } else {
    format_date(L, fmt, len, &tm);
  }
  return 1;
}

void worker_os_open(lua_State *L)
{
  static const luaL_Reg fns[] = {
      {"time", os_time}, {"clock", os_clock}, {"date", os_date}, {"difftime", os_difftime}, {NULL, NULL},
  };
  luaL_newlib(L, fns);
  /* In the loaded table too, like the libraries luaL_requiref opened: so
  ** require "os" returns this table without asking the host. */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "os");
  lua_pop(L, 1);
  lua_setglobal(L, "os");
}
