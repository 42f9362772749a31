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
*/
#include "lbinding.h"

#include <ctype.h>
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
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
} CURLFN;
static char curl_load_err[300];
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_load(void) {
  void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(curl_load_err, sizeof curl_load_err, "libcurl cannot be loaded (install libcurl4): %s", dlerror());
    return;
  }
  struct { void **slot; const char *name; } syms[] = {
    { (void **)&CURLFN.global_init, "curl_global_init" }, { (void **)&CURLFN.easy_init, "curl_easy_init" },
    { (void **)&CURLFN.easy_setopt, "curl_easy_setopt" }, { (void **)&CURLFN.easy_perform, "curl_easy_perform" },
    { (void **)&CURLFN.easy_getinfo, "curl_easy_getinfo" }, { (void **)&CURLFN.easy_cleanup, "curl_easy_cleanup" },
    { (void **)&CURLFN.easy_strerror, "curl_easy_strerror" }, { (void **)&CURLFN.free_, "curl_free" },
    { (void **)&CURLFN.slist_append, "curl_slist_append" }, { (void **)&CURLFN.slist_free_all, "curl_slist_free_all" },
    { (void **)&CURLFN.url, "curl_url" }, { (void **)&CURLFN.url_cleanup, "curl_url_cleanup" },
    { (void **)&CURLFN.url_get, "curl_url_get" }, { (void **)&CURLFN.url_set, "curl_url_set" },
    { (void **)&CURLFN.url_strerror, "curl_url_strerror" } };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    *syms[i].slot = dlsym(h, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(curl_load_err, sizeof curl_load_err, "libcurl.so.4 has no %s (it is older than 7.80)", syms[i].name);
      return;
    }
  }
  if (CURLFN.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    snprintf(curl_load_err, sizeof curl_load_err, "curl_global_init failed");
}

/* The calls below go through the table. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_easy_init CURLFN.easy_init
#define curl_easy_setopt CURLFN.easy_setopt
#define curl_easy_perform CURLFN.easy_perform
#define curl_easy_getinfo CURLFN.easy_getinfo
#define curl_easy_cleanup CURLFN.easy_cleanup
#define curl_easy_strerror CURLFN.easy_strerror
#define curl_free CURLFN.free_
#define curl_slist_append CURLFN.slist_append
#define curl_slist_free_all CURLFN.slist_free_all
#define curl_url CURLFN.url
#define curl_url_cleanup CURLFN.url_cleanup
#define curl_url_get CURLFN.url_get
#define curl_url_set CURLFN.url_set
#define curl_url_strerror CURLFN.url_strerror

typedef struct { char *data; size_t len, cap, max; int over; } sbuf;

static int sbuf_add(sbuf *b, const char *p, size_t n) {
  if (n > b->max - b->len) { b->over = 1; return -1; }
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

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
  size_t len = size * n;
  return sbuf_add(ud, p, len) < 0 ? 0 : len;   /* 0 aborts the transfer */
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
  sbuf *b = ud;
  size_t len = size * n;
  /* A status line starts a response (again after a 1xx): keep the last one. */
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) b->len = 0;
  return sbuf_add(b, p, len) < 0 ? 0 : len;
}

static int http_fail(lua_State *L, const char *code, const char *detail) {
  lua_pushnil(L);
  lua_pushstring(L, code);
  lua_pushstring(L, detail ? detail : "");
  return 3;
}

static const char *opt_string(lua_State *L, const char *key, size_t *len, int required) {
  int t = lua_getfield(L, 1, key);
  const char *s = NULL;
  if (t == LUA_TSTRING) s = lua_tolstring(L, -1, len);
  else if (t != LUA_TNIL || required) luaL_error(L, "http_request: '%s' must be a string", key);
  lua_pop(L, 1);   /* the string stays alive in opts */
  return s;
}

static lua_Integer opt_int(lua_State *L, const char *key, lua_Integer dflt, lua_Integer lo, lua_Integer hi) {
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
static int opt_list(lua_State *L, const char *key) {
  int t = lua_getfield(L, 1, key);
  if (t == LUA_TNIL) return 0;
  if (t != LUA_TTABLE) luaL_error(L, "http_request: '%s' must be a list of strings", key);
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_rawgeti(L, -1, i) != LUA_TSTRING) luaL_error(L, "http_request: '%s' must be a list of strings", key);
    lua_pop(L, 1);
  }
  return (int)n;
}


static int l_http_request(lua_State *L) {
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
  if (strlen(url) != url_len) return http_fail(L, "bad_url", "contains a NUL byte");
  for (const char *m = method; *m; m++)
    if (!isupper((unsigned char)*m)) return http_fail(L, "bad_method", method);
  int nallow = opt_list(L, "allow");      /* stack: 2 = allow (or nil) */
  int nhdr = opt_list(L, "headers");      /* stack: 3 = headers (or nil) */
  if (!body && (!strcmp(method, "POST") || !strcmp(method, "PUT") || !strcmp(method, "PATCH")))
    body = "";                            /* sent with Content-Length: 0 */
  for (int i = 1; i <= nhdr; i++) {
    size_t hl;
    lua_rawgeti(L, 3, i);
    const char *h = lua_tolstring(L, -1, &hl);
    if (strlen(h) != hl || strpbrk(h, "\r\n")) luaL_error(L, "http_request: header %d has a control character", i);
    lua_pop(L, 1);
  }

  /* From here on no Lua error may be raised until everything is freed. */
  pthread_once(&curl_once, curl_load);
  if (curl_load_err[0]) return http_fail(L, "unsupported", curl_load_err);
  char detail[CURL_ERROR_SIZE + 160];
  const char *code = NULL;
  char *scheme = NULL, *host = NULL, *port = NULL, *location = NULL;
  struct curl_slist *hdrs = NULL;
  CURL *c = NULL;
  sbuf bodybuf = { NULL, 0, 0, (size_t)max_bytes, 0 }, hdrbuf = { NULL, 0, 0, (size_t)max_hdr, 0 };
  long status = 0;
  detail[0] = 0;

  CURLU *u = curl_url();
  CURLUcode uc = u ? curl_url_set(u, CURLUPART_URL, url, 0) : CURLUE_OUT_OF_MEMORY;
  if (uc == CURLUE_OK) uc = curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
  if (uc != CURLUE_OK) {
    code = "bad_url";
    snprintf(detail, sizeof detail, "%s", curl_url_strerror(uc));
    goto done;
  }
  for (char *p = scheme; *p; p++) *p = (char)tolower((unsigned char)*p);
  int https = strcmp(scheme, "https") == 0;
  if (!https && strcmp(scheme, "http") != 0) {
    code = "scheme";
    snprintf(detail, sizeof detail, "%.64s", scheme);
    goto done;
  }
  uc = curl_url_get(u, CURLUPART_HOST, &host, 0);
  if (uc == CURLUE_OK) uc = curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
  if (uc != CURLUE_OK) {
    code = "bad_url";
    snprintf(detail, sizeof detail, "%s", curl_url_strerror(uc));
    goto done;
  }
  for (char *p = host; *p; p++) *p = (char)tolower((unsigned char)*p);
  {
    char hostport[512];
    snprintf(hostport, sizeof hostport, "%s:%s", host, port);
    int dflt = strcmp(port, https ? "443" : "80") == 0, allowed = 0;
    for (int i = 1; i <= nallow && !allowed; i++) {
      lua_rawgeti(L, 2, i);
      const char *a = lua_tostring(L, -1);
      allowed = strcmp(a, hostport) == 0 || (dflt && strcmp(a, host) == 0);
      lua_pop(L, 1);
    }
    if (!allowed) {
      code = "not_allowed";
      snprintf(detail, sizeof detail, "%.300s", hostport);
      goto done;
    }
  }
  for (int i = 1; i <= nhdr; i++) {
    lua_rawgeti(L, 3, i);
    struct curl_slist *n = curl_slist_append(hdrs, lua_tostring(L, -1));
    lua_pop(L, 1);
    if (!n) { code = "io"; snprintf(detail, sizeof detail, "out of memory"); goto done; }
    hdrs = n;
  }
  {
    struct curl_slist *n = curl_slist_append(hdrs, "Expect:");   /* no 100-continue wait */
    if (!n) { code = "io"; snprintf(detail, sizeof detail, "out of memory"); goto done; }
    hdrs = n;
  }

  c = curl_easy_init();
  if (!c) { code = "io"; snprintf(detail, sizeof detail, "curl_easy_init failed"); goto done; }
  char errbuf[CURL_ERROR_SIZE];
  errbuf[0] = 0;
  CURLcode rc = CURLE_OK;
#define SET(opt, val) do { if (rc == CURLE_OK) rc = curl_easy_setopt(c, opt, val); } while (0)
  SET(CURLOPT_ERRORBUFFER, errbuf);
  SET(CURLOPT_CURLU, u);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_FOLLOWLOCATION, 0L);
  SET(CURLOPT_PROXY, "");                 /* never a proxy from the environment */
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_TIMEOUT_MS, (long)timeout);
  SET(CURLOPT_CONNECTTIMEOUT_MS, (long)timeout);
  SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max_bytes);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, &bodybuf);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, &hdrbuf);
  SET(CURLOPT_HTTPHEADER, hdrs);
  if (strcmp(method, "HEAD") == 0) SET(CURLOPT_NOBODY, 1L);
  else if (strcmp(method, "GET") == 0 && !body) SET(CURLOPT_HTTPGET, 1L);
  else SET(CURLOPT_CUSTOMREQUEST, method);
  if (body) {
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    SET(CURLOPT_POSTFIELDS, body);        /* opts keeps the string alive */
  }
#undef SET
  if (rc != CURLE_OK) {
    code = "unsupported";
    snprintf(detail, sizeof detail, "curl_easy_setopt: %s", curl_easy_strerror(rc));
    goto done;
  }
  rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    if (bodybuf.over || rc == CURLE_FILESIZE_EXCEEDED) code = "too_large", snprintf(detail, sizeof detail, "body");
    else if (hdrbuf.over) code = "too_large", snprintf(detail, sizeof detail, "headers");
    else {
      code = rc == CURLE_OPERATION_TIMEDOUT ? "timeout"
           : (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) ? "connect"
           : rc == CURLE_UNSUPPORTED_PROTOCOL ? "scheme" : "io";
      snprintf(detail, sizeof detail, "%s%s%s", curl_easy_strerror(rc), errbuf[0] ? ": " : "", errbuf);
    }
    goto done;
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  char *redirect = NULL;
  if (curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &redirect) == CURLE_OK && redirect)
    location = strdup(redirect);

done:
  if (c) curl_easy_cleanup(c);
  curl_slist_free_all(hdrs);
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  if (code) {
    free(bodybuf.data);
    free(hdrbuf.data);
    free(location);
    return http_fail(L, code, detail);
  }
  /* Pushing may raise (memory): copy into Lua strings first, then free. */
  lua_settop(L, 1);
  lua_pushlstring(L, bodybuf.data ? bodybuf.data : "", bodybuf.len);
  free(bodybuf.data);
  lua_pushlstring(L, hdrbuf.data ? hdrbuf.data : "", hdrbuf.len);
  free(hdrbuf.data);
  if (location) lua_pushstring(L, location); else lua_pushnil(L);
  free(location);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, status); lua_setfield(L, -2, "status");
  lua_pushvalue(L, 2); lua_setfield(L, -2, "body");
  lua_pushvalue(L, 3); lua_setfield(L, -2, "headers");
  lua_pushvalue(L, 4); lua_setfield(L, -2, "location");
  return 1;
}

void airlock_l_open_http(lua_State *L) {
  lua_pushcfunction(L, l_http_request);
  lua_setfield(L, -2, "http_request");
}
