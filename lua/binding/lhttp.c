/*
** lhttp.c -- core.http_request(opts): one HTTP(S) request performed in the
** parent with libcurl, for airlock.handlers.http. The URL is parsed once with
** curl's own URL parser (curl_url); its scheme, host and port are checked
** against the allowlist, and that same parsed handle is what curl connects to
** (CURLOPT_CURLU), so the check and the use cannot disagree. Redirects are not
** followed here: the Lua layer follows each one through this function again.
**
**   core.http_request{url =, method =, headers = {"Name: value", ...}, body =,
**                     allow = {"host", "host:port", ...}, max_bytes =,
**                     max_header_bytes =, timeout_ms =}
**     -> {status, headers = raw header block, body, location = redirect URL or nil}
**     or nil, code, detail with code one of bad_url, scheme, not_allowed,
**     too_large, timeout, connect, unsupported, io.
**
** An allow entry "host:port" admits that host and port; "host" admits the
** scheme's default port only (80 for http, 443 for https). Hosts are compared
** after curl's parsing (lower case; IPv4 in its dotted form; IPv6 in brackets).
** Proxies from the environment are not used; only http and https are spoken;
** no cookies, netrc or content decoding.
**
** The same request without blocking, for a broker's loop (libcurl's multi
** interface, driven by the descriptors curl asks for):
**
**   core.http_engine() -> engine, or nil, "unsupported", why
**   engine:fd()          an epoll set of curl's sockets and its timer: readable
**                        when the engine has work (a broker watches it)
**   engine:start(opts)   -> id (the transfer runs on), or nil, code, detail as
**                        above; code busy past ENGINE_MAX transfers at once
**   engine:pump()        -> the transfers that ended: {{id =, res =} or
**                        {id =, code =, detail =}, ...}; never blocks
**   engine:cancel(id), engine:pending(), engine:close()
*/
#include "lbinding.h"

#include <ctype.h>
#include <errno.h>
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

/* libcurl is loaded on the first request (dlopen), not linked: it and the
** thirty libraries it pulls in cost every airlock process about 7 ms of
** dynamic linking at start-up, `airlock call` inside a sandbox included,
** where nothing speaks HTTP. The table has the headers' own prototypes. */
static struct {
  __typeof__(&curl_global_init) global_init;
  __typeof__(&curl_easy_init) easy_init;
  __typeof__(&curl_easy_setopt) easy_setopt;
  __typeof__(&curl_easy_perform) easy_perform;
  __typeof__(&curl_easy_getinfo) easy_getinfo;
  __typeof__(&curl_easy_cleanup) easy_cleanup;
  __typeof__(&curl_easy_strerror) easy_strerror;
  __typeof__(&curl_free) free_;
  __typeof__(&curl_slist_append) slist_append;
  __typeof__(&curl_slist_free_all) slist_free_all;
  __typeof__(&curl_url) url;
  __typeof__(&curl_url_cleanup) url_cleanup;
  __typeof__(&curl_url_get) url_get;
  __typeof__(&curl_url_set) url_set;
  __typeof__(&curl_url_strerror) url_strerror;
  __typeof__(&curl_multi_init) multi_init;
  __typeof__(&curl_multi_cleanup) multi_cleanup;
  __typeof__(&curl_multi_setopt) multi_setopt;
  __typeof__(&curl_multi_add_handle) multi_add_handle;
  __typeof__(&curl_multi_remove_handle) multi_remove_handle;
  __typeof__(&curl_multi_socket_action) multi_socket_action;
  __typeof__(&curl_multi_info_read) multi_info_read;
  __typeof__(&curl_multi_strerror) multi_strerror;
} CURLFN;
static char curl_load_err[300];
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_load(void)
{
  void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(curl_load_err, sizeof curl_load_err, "libcurl cannot be loaded (install libcurl4): %s",
             dlerror());
    return;
  }
  struct {
    void **slot;
    const char *name;
  } syms[] = {{(void **)&CURLFN.global_init, "curl_global_init"},
              {(void **)&CURLFN.easy_init, "curl_easy_init"},
              {(void **)&CURLFN.easy_setopt, "curl_easy_setopt"},
              {(void **)&CURLFN.easy_perform, "curl_easy_perform"},
              {(void **)&CURLFN.easy_getinfo, "curl_easy_getinfo"},
              {(void **)&CURLFN.easy_cleanup, "curl_easy_cleanup"},
              {(void **)&CURLFN.easy_strerror, "curl_easy_strerror"},
              {(void **)&CURLFN.free_, "curl_free"},
              {(void **)&CURLFN.slist_append, "curl_slist_append"},
              {(void **)&CURLFN.slist_free_all, "curl_slist_free_all"},
              {(void **)&CURLFN.url, "curl_url"},
              {(void **)&CURLFN.url_cleanup, "curl_url_cleanup"},
              {(void **)&CURLFN.url_get, "curl_url_get"},
              {(void **)&CURLFN.url_set, "curl_url_set"},
              {(void **)&CURLFN.url_strerror, "curl_url_strerror"},
              {(void **)&CURLFN.multi_init, "curl_multi_init"},
              {(void **)&CURLFN.multi_cleanup, "curl_multi_cleanup"},
              {(void **)&CURLFN.multi_setopt, "curl_multi_setopt"},
              {(void **)&CURLFN.multi_add_handle, "curl_multi_add_handle"},
              {(void **)&CURLFN.multi_remove_handle, "curl_multi_remove_handle"},
              {(void **)&CURLFN.multi_socket_action, "curl_multi_socket_action"},
              {(void **)&CURLFN.multi_info_read, "curl_multi_info_read"},
              {(void **)&CURLFN.multi_strerror, "curl_multi_strerror"}};
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    *syms[i].slot = dlsym(h, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(curl_load_err, sizeof curl_load_err, "libcurl.so.4 has no %s (it is older than 7.80)",
               syms[i].name);
      return;
    }
  }
  if (CURLFN.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    snprintf(curl_load_err, sizeof curl_load_err, "curl_global_init failed");
}

/* The calls below go through the table. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_easy_init      CURLFN.easy_init
#define curl_easy_setopt    CURLFN.easy_setopt
#define curl_easy_perform   CURLFN.easy_perform
#define curl_easy_getinfo   CURLFN.easy_getinfo
#define curl_easy_cleanup   CURLFN.easy_cleanup
#define curl_easy_strerror  CURLFN.easy_strerror
#define curl_free           CURLFN.free_
#define curl_slist_append   CURLFN.slist_append
#define curl_slist_free_all CURLFN.slist_free_all
#define curl_url            CURLFN.url
#define curl_url_cleanup    CURLFN.url_cleanup
#define curl_url_get        CURLFN.url_get
#define curl_url_set        CURLFN.url_set
#define curl_url_strerror   CURLFN.url_strerror
#ifdef curl_multi_setopt
#undef curl_multi_setopt
#endif
#define curl_multi_init          CURLFN.multi_init
#define curl_multi_cleanup       CURLFN.multi_cleanup
#define curl_multi_setopt        CURLFN.multi_setopt
#define curl_multi_add_handle    CURLFN.multi_add_handle
#define curl_multi_remove_handle CURLFN.multi_remove_handle
#define curl_multi_socket_action CURLFN.multi_socket_action
#define curl_multi_info_read     CURLFN.multi_info_read
#define curl_multi_strerror      CURLFN.multi_strerror

typedef struct {
  char *data;
  size_t len, cap, max;
  int over;
} sbuf;

static int sbuf_add(sbuf *b, const char *p, size_t n)
{
  if (n > b->max - b->len) {
    b->over = 1;
    return -1;
  }
  if (b->len + n > b->cap) {
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap < b->len + n) ncap *= 2;
    if (ncap > b->max) ncap = b->max;
    char *nd = realloc(b->data, ncap);
    if (!nd) return -1;
    b->data = nd;
    b->cap = ncap;
  }
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
  size_t len = size * n;
  return sbuf_add(ud, p, len) < 0 ? 0 : len; /* 0 aborts the transfer */
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
  sbuf *b = ud;
  size_t len = size * n;
  /* A status line starts a response (again after a 1xx): keep the last one. */
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) b->len = 0;
  return sbuf_add(b, p, len) < 0 ? 0 : len;
}

static int http_fail(lua_State *L, const char *code, const char *detail)
{
  lua_pushnil(L);
  lua_pushstring(L, code);
  lua_pushstring(L, detail ? detail : "");
  return 3;
}

static const char *opt_string(lua_State *L, const char *key, size_t *len, int required)
{
  int t = lua_getfield(L, 1, key);
  const char *s = NULL;
  if (t == LUA_TSTRING)
    s = lua_tolstring(L, -1, len);
  else if (t != LUA_TNIL || required)
    luaL_error(L, "http_request: '%s' must be a string", key);
  lua_pop(L, 1); /* the string stays alive in opts */
  return s;
}

static lua_Integer opt_int(lua_State *L, const char *key, lua_Integer dflt, lua_Integer lo, lua_Integer hi)
{
  lua_getfield(L, 1, key);
  lua_Integer v = dflt;
  if (!lua_isnil(L, -1)) {
    int ok;
    v = lua_tointegerx(L, -1, &ok);
    if (!ok || v < lo || v > hi) luaL_error(L, "http_request: '%s' out of range", key);
  }
  lua_pop(L, 1);
  return v;
}

/* Checks opts[key] is a list of strings; leaves it on the stack (or nil). */
static int opt_list(lua_State *L, const char *key)
{
  int t = lua_getfield(L, 1, key);
  if (t == LUA_TNIL) return 0;
  if (t != LUA_TTABLE) luaL_error(L, "http_request: '%s' must be a list of strings", key);
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_rawgeti(L, -1, i) != LUA_TSTRING)
      luaL_error(L, "http_request: '%s' must be a list of strings", key);
    lua_pop(L, 1);
  }
  return (int)n;
}

/* One request: everything curl holds for it, and what it has received. */
typedef struct request {
  CURL *c;
  CURLU *u;
  struct curl_slist *hdrs;
  char *scheme, *host, *port;
  sbuf body, hdr;
  char errbuf[CURL_ERROR_SIZE];
  const char *code; /* set: refused or failed before the transfer */
  char detail[CURL_ERROR_SIZE + 160];
  lua_Integer id;       /* an engine's transfer id */
  struct request *next; /* an engine's list of live transfers */
} request;

/* Each curl object is there only if libcurl was loaded to make it. */
static void req_free(request *r)
{
  if (r->c) curl_easy_cleanup(r->c);
  if (r->hdrs) curl_slist_free_all(r->hdrs);
  if (r->scheme) curl_free(r->scheme);
  if (r->host) curl_free(r->host);
  if (r->port) curl_free(r->port);
  if (r->u) curl_url_cleanup(r->u);
  free(r->body.data);
  free(r->hdr.data);
  free(r);
}

#define REQ_FAIL(r, cd, ...)                               \
  do {                                                     \
    (r)->code = (cd);                                      \
    snprintf((r)->detail, sizeof(r)->detail, __VA_ARGS__); \
    return (r);                                            \
  } while (0)

/* Reads and checks the options at index 1 (a bad one raises, before anything
** is allocated) and makes the request ready to perform. -> the request, with
** code set when it is refused (not allowed, a bad URL, no libcurl). The stack
** keeps opts at 1, allow at 2 and headers at 3 while it runs. */
static request *prepare(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  size_t url_len, method_len = 0, body_len = 0;
  const char *url = opt_string(L, "url", &url_len, 1);
  const char *method = opt_string(L, "method", &method_len, 0);
  const char *body = opt_string(L, "body", &body_len, 0);
  lua_Integer max_bytes = opt_int(L, "max_bytes", 1 << 20, 0, (lua_Integer)1 << 40);
  lua_Integer max_hdr = opt_int(L, "max_header_bytes", 64 << 10, 256, 16 << 20);
  lua_Integer timeout = opt_int(L, "timeout_ms", 5000, 1, (lua_Integer)1 << 31);
  if (!method) method = "GET";
  int nallow = opt_list(L, "allow"); /* stack: 2 = allow (or nil) */
  int nhdr = opt_list(L, "headers"); /* stack: 3 = headers (or nil) */
  for (int i = 1; i <= nhdr; i++) {
    size_t hl;
    lua_rawgeti(L, 3, i);
    const char *h = lua_tolstring(L, -1, &hl);
    if (strlen(h) != hl || strpbrk(h, "\r\n"))
      luaL_error(L, "http_request: header %d has a control character", i);
    lua_pop(L, 1);
  }
  request *r = calloc(1, sizeof *r);
  if (!r) {
    luaL_error(L, "http_request: out of memory");
    return NULL;
  }
  /* From here on no Lua error may be raised: the caller frees r. */
  r->body.max = (size_t)max_bytes;
  r->hdr.max = (size_t)max_hdr;
  if (strlen(url) != url_len) REQ_FAIL(r, "bad_url", "contains a NUL byte");
  for (const char *m = method; *m; m++)
    if (!isupper((unsigned char)*m)) REQ_FAIL(r, "bad_method", "%.64s", method);
  if (!body && (!strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH")))
    body = ""; /* sent with Content-Length: 0 */
  pthread_once(&curl_once, curl_load);
  if (curl_load_err[0]) REQ_FAIL(r, "unsupported", "%s", curl_load_err);

  r->u = curl_url();
  CURLUcode uc = r->u ? curl_url_set(r->u, CURLUPART_URL, url, 0) : CURLUE_OUT_OF_MEMORY;
  if (uc == CURLUE_OK) uc = curl_url_get(r->u, CURLUPART_SCHEME, &r->scheme, 0);
  if (uc != CURLUE_OK) REQ_FAIL(r, "bad_url", "%s", curl_url_strerror(uc));
  for (char *p = r->scheme; *p; p++) *p = (char)tolower((unsigned char)*p);
  int https = strcmp(r->scheme, "https") == 0;
  if (!https && strcmp(r->scheme, "http") != 0) REQ_FAIL(r, "scheme", "%.64s", r->scheme);
  uc = curl_url_get(r->u, CURLUPART_HOST, &r->host, 0);
  if (uc == CURLUE_OK) uc = curl_url_get(r->u, CURLUPART_PORT, &r->port, CURLU_DEFAULT_PORT);
  if (uc != CURLUE_OK) REQ_FAIL(r, "bad_url", "%s", curl_url_strerror(uc));
  for (char *p = r->host; *p; p++) *p = (char)tolower((unsigned char)*p);
  {
    char hostport[512];
    snprintf(hostport, sizeof hostport, "%s:%s", r->host, r->port);
    int dflt = strcmp(r->port, https ? "443" : "80") == 0, allowed = 0;
    for (int i = 1; i <= nallow && !allowed; i++) {
      lua_rawgeti(L, 2, i);
      const char *a = lua_tostring(L, -1);
      allowed = strcmp(a, hostport) == 0 || (dflt && strcmp(a, r->host) == 0);
      lua_pop(L, 1);
    }
    if (!allowed) REQ_FAIL(r, "not_allowed", "%.300s", hostport);
  }
  for (int i = 1; i <= nhdr; i++) {
    lua_rawgeti(L, 3, i);
    struct curl_slist *n = curl_slist_append(r->hdrs, lua_tostring(L, -1));
    lua_pop(L, 1);
    if (!n) REQ_FAIL(r, "io", "out of memory");
    r->hdrs = n;
  }
  {
    struct curl_slist *n = curl_slist_append(r->hdrs, "Expect:"); /* no 100-continue wait */
    if (!n) REQ_FAIL(r, "io", "out of memory");
    r->hdrs = n;
  }

  r->c = curl_easy_init();
  if (!r->c) REQ_FAIL(r, "io", "curl_easy_init failed");
  CURL *c = r->c;
  CURLcode rc = CURLE_OK;
#define SET(opt, val)                                       \
  do {                                                      \
    if (rc == CURLE_OK) rc = curl_easy_setopt(c, opt, val); \
  } while (0)
  SET(CURLOPT_ERRORBUFFER, r->errbuf);
  SET(CURLOPT_CURLU, r->u);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_FOLLOWLOCATION, 0L);
  SET(CURLOPT_PROXY, ""); /* never a proxy from the environment */
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_TIMEOUT_MS, (long)timeout);
  SET(CURLOPT_CONNECTTIMEOUT_MS, (long)timeout);
  SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max_bytes);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, &r->body);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, &r->hdr);
  SET(CURLOPT_HTTPHEADER, r->hdrs);
  SET(CURLOPT_PRIVATE, r);
  if (strcmp(method, "HEAD") == 0)
    SET(CURLOPT_NOBODY, 1L);
  else if (strcmp(method, "GET") == 0 && !body)
    SET(CURLOPT_HTTPGET, 1L);
  else
    SET(CURLOPT_CUSTOMREQUEST, method);
  if (body) {
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    SET(CURLOPT_COPYPOSTFIELDS, body); /* curl's own copy: an engine's transfer outlives opts */
  }
#undef SET
  if (rc != CURLE_OK) REQ_FAIL(r, "unsupported", "curl_easy_setopt: %s", curl_easy_strerror(rc));
  return r;
}

/* Pushes the outcome of request r, performed with result rc (or refused
** before: r->code), and frees r. -> 1 (the response table) or 3 (nil, code,
** detail). */
static int req_finish(lua_State *L, request *r, CURLcode rc)
{
  long status = 0;
  char *location = NULL;
  if (!r->code && rc != CURLE_OK) {
    if (r->body.over || rc == CURLE_FILESIZE_EXCEEDED)
      r->code = "too_large", snprintf(r->detail, sizeof r->detail, "body");
    else if (r->hdr.over)
      r->code = "too_large", snprintf(r->detail, sizeof r->detail, "headers");
    else {
      r->code = rc == CURLE_OPERATION_TIMEDOUT                                      ? "timeout"
                : (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) ? "connect"
                : rc == CURLE_UNSUPPORTED_PROTOCOL                                  ? "scheme"
                                                                                    : "io";
      snprintf(r->detail, sizeof r->detail, "%s%s%s", curl_easy_strerror(rc), r->errbuf[0] ? ": " : "",
               r->errbuf);
    }
  }
  if (!r->code) {
    curl_easy_getinfo(r->c, CURLINFO_RESPONSE_CODE, &status);
    char *redirect = NULL;
    if (curl_easy_getinfo(r->c, CURLINFO_REDIRECT_URL, &redirect) == CURLE_OK && redirect) {
      location = strdup(redirect);
      if (!location) r->code = "io", snprintf(r->detail, sizeof r->detail, "out of memory");
    }
  }
  if (r->code) {
    char code[32], detail[sizeof r->detail];
    snprintf(code, sizeof code, "%s", r->code);
    memcpy(detail, r->detail, sizeof detail);
    req_free(r);
    return http_fail(L, code, detail);
  }
  /* Pushing may raise (memory): everything is copied out and freed first. */
  size_t blen = r->body.len, hlen = r->hdr.len;
  char *bdata = r->body.data, *hdata = r->hdr.data;
  r->body.data = r->hdr.data = NULL;
  req_free(r);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, status);
  lua_setfield(L, -2, "status");
  lua_pushlstring(L, bdata ? bdata : "", blen);
  free(bdata);
  lua_setfield(L, -2, "body");
  lua_pushlstring(L, hdata ? hdata : "", hlen);
  free(hdata);
  lua_setfield(L, -2, "headers");
  if (location) {
    lua_pushstring(L, location);
    free(location);
    lua_setfield(L, -2, "location");
  }
  return 1;
}

/* core.http_request(opts): one request, performed now (it blocks). */
static int l_http_request(lua_State *L)
{
  request *r = prepare(L);
  if (r->code) return req_finish(L, r, CURLE_OK);
  return req_finish(L, r, curl_easy_perform(r->c));
}

/* ------------------------------------------------------------ the engine */

#define ENGINE_MT  "airlock.http_engine"
#define ENGINE_MAX 64 /* transfers at once on one engine */

typedef struct engine {
  CURLM *m;
  int ep, tfd; /* curl's sockets and its timer; tfd is in ep */
  request *live;
  int n_live;
  lua_Integer next_id;
} engine;

static engine *check_engine(lua_State *L)
{
  engine *e = luaL_checkudata(L, 1, ENGINE_MT);
  if (!e->m) luaL_error(L, "http engine: it is closed");
  return e;
}

/* curl's socket callback: the socket joins, changes or leaves the set. */
static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
  (void)easy;
  (void)socketp;
  engine *e = userp;
  if (what == CURL_POLL_REMOVE) {
    epoll_ctl(e->ep, EPOLL_CTL_DEL, s, NULL);
    return 0;
  }
  struct epoll_event ev = {
      .events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u), .data.fd = s};
  if (epoll_ctl(e->ep, EPOLL_CTL_MOD, s, &ev) < 0 && errno == ENOENT &&
      epoll_ctl(e->ep, EPOLL_CTL_ADD, s, &ev) < 0)
    return -1;
  return 0;
}

/* curl's timer callback: -1 stops it, 0 is now (the next pump), else ms. */
static int on_timer(CURLM *m, long ms, void *userp)
{
  (void)m;
  engine *e = userp;
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  if (ms == 0)
    its.it_value.tv_nsec = 1;
  else if (ms > 0) {
    its.it_value.tv_sec = ms / 1000;
    its.it_value.tv_nsec = (ms % 1000) * 1000000L;
  }
  return timerfd_settime(e->tfd, 0, &its, NULL) < 0 ? -1 : 0;
}

static void engine_close(engine *e)
{
  if (!e->m) return;
  for (request *r = e->live, *next; r; r = next) {
    next = r->next;
    curl_multi_remove_handle(e->m, r->c);
    req_free(r);
  }
  e->live = NULL;
  e->n_live = 0;
  curl_multi_cleanup(e->m);
  e->m = NULL;
  close(e->tfd);
  close(e->ep);
}

static int l_engine_gc(lua_State *L)
{
  engine_close(luaL_checkudata(L, 1, ENGINE_MT));
  return 0;
}

/* core.http_engine() -> engine, or nil, "unsupported", why */
static int l_http_engine(lua_State *L)
{
  pthread_once(&curl_once, curl_load);
  if (curl_load_err[0]) return http_fail(L, "unsupported", curl_load_err);
  engine *e = lua_newuserdatauv(L, sizeof *e, 0);
  memset(e, 0, sizeof *e);
  e->ep = epoll_create1(EPOLL_CLOEXEC);
  e->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = e->tfd};
  if (e->ep < 0 || e->tfd < 0 || epoll_ctl(e->ep, EPOLL_CTL_ADD, e->tfd, &ev) < 0 ||
      !(e->m = curl_multi_init())) {
    int err = errno;
    if (e->ep >= 0) close(e->ep);
    if (e->tfd >= 0) close(e->tfd);
    return airlock_l_fail(L, "io", "cannot make the http engine", err ? err : ENOMEM);
  }
  luaL_setmetatable(L, ENGINE_MT);
  curl_multi_setopt(e->m, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(e->m, CURLMOPT_SOCKETDATA, e);
  curl_multi_setopt(e->m, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(e->m, CURLMOPT_TIMERDATA, e);
  return 1;
}

static int l_engine_fd(lua_State *L)
{
  lua_pushinteger(L, check_engine(L)->ep);
  return 1;
}

static int l_engine_pending(lua_State *L)
{
  lua_pushinteger(L, check_engine(L)->n_live);
  return 1;
}

/* engine:start(opts) -> id, or nil, code, detail */
static int l_engine_start(lua_State *L)
{
  engine *e = check_engine(L);
  lua_remove(L, 1); /* opts at 1, as prepare reads them; e stays referenced by the caller */
  if (e->n_live >= ENGINE_MAX) {
    char d[80];
    snprintf(d, sizeof d, "%d requests are in flight on this broker already", ENGINE_MAX);
    return http_fail(L, "busy", d);
  }
  request *r = prepare(L);
  if (r->code) return req_finish(L, r, CURLE_OK);
  CURLMcode mc = curl_multi_add_handle(e->m, r->c);
  if (mc != CURLM_OK) {
    r->code = "io";
    snprintf(r->detail, sizeof r->detail, "curl_multi_add_handle: %s", curl_multi_strerror(mc));
    return req_finish(L, r, CURLE_OK);
  }
  r->id = ++e->next_id;
  r->next = e->live;
  e->live = r;
  e->n_live++;
  lua_pushinteger(L, r->id);
  return 1;
}

static request *unlink_req(engine *e, request *r)
{
  for (request **p = &e->live; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      e->n_live--;
      r->next = NULL;
      return r;
    }
  return NULL;
}

/* engine:cancel(id) -> true when it was in flight */
static int l_engine_cancel(lua_State *L)
{
  engine *e = check_engine(L);
  lua_Integer id = luaL_checkinteger(L, 2);
  for (request *r = e->live; r; r = r->next) {
    if (r->id != id) continue;
    unlink_req(e, r);
    curl_multi_remove_handle(e->m, r->c);
    req_free(r);
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  return 1;
}

/* engine:pump() -> the transfers that ended since the last pump */
static int l_engine_pump(lua_State *L)
{
  engine *e = check_engine(L);
  struct epoll_event evs[64];
  int running = 0;
  int n = epoll_wait(e->ep, evs, 64, 0);
  for (int i = 0; i < n; i++) {
    int fd = evs[i].data.fd;
    if (fd == e->tfd) {
      uint64_t ticks;
      if (read(e->tfd, &ticks, sizeof ticks) < 0 && errno != EAGAIN)
        return luaL_error(L, "http engine: timer: %s", strerror(errno));
      curl_multi_socket_action(e->m, CURL_SOCKET_TIMEOUT, 0, &running);
    } else {
      int mask = (evs[i].events & EPOLLIN ? CURL_CSELECT_IN : 0) |
                 (evs[i].events & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
                 (evs[i].events & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
      curl_multi_socket_action(e->m, fd, mask, &running);
    }
  }
  lua_newtable(L);
  lua_Integer k = 0;
  CURLMsg *msg;
  int left;
  while ((msg = curl_multi_info_read(e->m, &left))) {
    if (msg->msg != CURLMSG_DONE) continue;
    request *r = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    CURLcode rc = msg->data.result;
    if (!r || !unlink_req(e, r)) continue; /* not one of ours (cannot happen) */
    curl_multi_remove_handle(e->m, r->c);  /* msg is invalid from here */
    lua_Integer id = r->id;
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, id);
    lua_setfield(L, -2, "id");
    if (req_finish(L, r, rc) == 1) {
      lua_setfield(L, -2, "res");
    } else { /* nil, code, detail */
      lua_setfield(L, -4, "detail");
      lua_setfield(L, -3, "code");
      lua_pop(L, 1);
    }
    lua_rawseti(L, -2, ++k);
  }
  return 1;
}

static int l_engine_close(lua_State *L)
{
  engine_close(luaL_checkudata(L, 1, ENGINE_MT));
  return 0;
}

void airlock_l_open_http(lua_State *L)
{
  lua_pushcfunction(L, l_http_request);
  lua_setfield(L, -2, "http_request");
  static const luaL_Reg methods[] = {{"fd", l_engine_fd},
                                     {"start", l_engine_start},
                                     {"pump", l_engine_pump},
                                     {"cancel", l_engine_cancel},
                                     {"pending", l_engine_pending},
                                     {"close", l_engine_close},
                                     {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_engine_gc}, {NULL, NULL}};
  airlock_l_class(L, ENGINE_MT, methods, meta);
  lua_pushcfunction(L, l_http_engine);
  lua_setfield(L, -2, "http_engine");
}
