/*
** airlock-egress -- one run's egress proxy (airlock exec, tool.network).
**
** Started by the parent as a confined program of its own (no file it may
** write, the system read-only, seccomp promises stdio rpath inet dns exec,
** Landlock TCP connect to the ports the policy names): fd 0 is the listening
** socket the spawner made on 127.0.0.1 inside the program's own net namespace
** (the program's HTTP_PROXY), fd 3 the effects channel to the parent. It holds
** no authority of its own: for every connection it asks the parent, whose
** policy decides, in three calls:
**
**   egress.open     {conn, kind = "connect" | "http", host, port, method}, or
**                   {conn, error} for a request it could not read: the name
**                   check (nothing is resolved for a name the policy refuses)
**   egress.resolved {conn, addrs = {text...}} | {conn, error}: the addresses
**                   check; the answer names the one address to connect to
**                   (so a name cannot resolve twice, to another address) and
**                   the headers to add (credentials, plain HTTP only)
**   egress.close    {conn, up, down, ms, error}: bytes each way, duration
**
** An err answer is a refusal: the client gets 403 with the reason (a SOCKS5
** client: reply 0x02, not allowed by ruleset). HTTP CONNECT and SOCKS5 CONNECT
** (no authentication; told apart by the first byte, 0x05) make a tunnel; an absolute-URI request
*(http://host/path) is
** forwarded with the request line in origin form, Proxy-* headers dropped,
** the policy's headers added and "Connection: close". Everything the client
** sends is bounded before it is stored: a request head over HEAD_MAX is 431,
** a head not complete in HEAD_MS is 408, past MAX_CONN connections at once a
** new one gets 503. Calls are synchronous (the parent answers from policy
** tables at once); name resolution is getaddrinfo, synchronous too.
*/
#define _GNU_SOURCE
#include "airlock.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LISTEN_FD  0
#define CHANNEL_FD 3
#define MAX_CONN   64    /* connections served at once */
#define MAX_SLOTS  256   /* and answered ones draining (a refusal, 503) */
#define DRAIN_MS   2000  /* an answered client's last bytes are read this long */
#define HEAD_MAX   16384 /* a request head (request line and headers) */
#define BUF_MAX    32768 /* each direction's buffer; holds a rewritten head */
#define HEAD_MS    10000 /* a head must be complete this soon */
#define CONNECT_MS 10000 /* an upstream connect must succeed this soon */
#define MAX_ADDRS  8
#define REPLY_MAX  (64 * 1024)

/* C_DRAIN: answered (a refusal); what the client still sends is read and
** dropped until it closes, so the answer is not lost to a reset. */
enum { C_FREE, C_HEAD, C_CONNECTING, C_RELAY, C_DRAIN };

struct buf {
  char *data;
  size_t len, off;
};

struct conn {
  int state;
  uint64_t id;
  int cfd, ufd; /* client (the program), upstream */
  char *head;   /* HEAD_MAX bytes while reading the head */
  size_t hlen;
  struct buf up, down; /* client -> upstream, upstream -> client */
  int c_eof, u_eof, c_shut, u_shut;
  uint64_t bytes_up, bytes_down;
  double t0, due;           /* ms; due: the head or connect timeout */
  int tunnel, opened;       /* CONNECT; the parent knows of it (close is reported) */
  int socks, socks_greeted; /* a SOCKS5 client; its greeting is answered */
  char host[256];
  unsigned port;
};

static struct conn conns[MAX_SLOTS];
static uint64_t next_conn = 1, next_call = 1;
static airlock_frame_reader rd;

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs("airlock-egress: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(3);
}

/* ------------------------------------------------------------ calls to the parent */

/* The answer of a call: ok (a map, or NULL for a non-map) or err (a message). */
struct answer {
  msgpack_unpacked u;
  const msgpack_object *ok;
  char err[512];
  int refused;
};

/* Sends call effect with the args the packer callback adds (a map of n
** fields), waits for its reply. Any channel failure ends the proxy: without
** the parent nothing can be decided (fail closed). */
typedef void (*pack_args_fn)(msgpack_packer *pk, void *ctx);

static void call(const char *effect, pack_args_fn pack, void *ctx, struct answer *a)
{
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  uint64_t id = next_call++;
  if (airlock_frame_begin(&sb) < 0) die("out of memory");
  airlock_pack_call(&pk, id, effect, strlen(effect));
  pack(&pk, ctx);
  if (airlock_frame_end(&sb, REPLY_MAX) < 0) die("a call of %zu bytes is too large", sb.size);
  int rc = airlock_frame_write_fd(CHANNEL_FD, sb.data + 4, sb.size - 4);
  msgpack_sbuffer_destroy(&sb);
  if (rc < 0) die("the channel to the parent broke: %s", strerror(-rc));
  for (;;) {
    rc = airlock_frame_read_fd(&rd, CHANNEL_FD);
    if (rc == AIRLOCK_FRAME_READY) break;
    if (rc == AIRLOCK_FRAME_EOF) exit(0); /* the run is over */
    if (rc != AIRLOCK_FRAME_AGAIN) die("the channel to the parent broke (%d)", rc);
  }
  airlock_msg m;
  char why[256];
  msgpack_unpacked_init(&a->u);
  if (airlock_msg_decode(rd.body, rd.len, &a->u, &m, why, sizeof why) < 0 || m.kind != AIRLOCK_MSG_REPLY ||
      m.id != id)
    die("the parent's answer is not the reply to call %llu: %s", (unsigned long long)id, why);
  airlock_frame_reader_reset(&rd);
  a->ok = NULL;
  a->err[0] = 0;
  a->refused = m.err != NULL;
  if (m.err) {
    uint32_t n = m.err->type == MSGPACK_OBJECT_STR ? m.err->via.str.size : 0;
    const char *src = n ? m.err->via.str.ptr : "";
    /* The policy's refusal comes with code "denied", its message "denied: why"
    ** as the broker writes it: the proxy's answer gives the why. */
    int denied = m.code && m.code->type == MSGPACK_OBJECT_STR && m.code->via.str.size == 6 &&
                 memcmp(m.code->via.str.ptr, "denied", 6) == 0;
    if (denied && n >= 8 && memcmp(src, "denied: ", 8) == 0) {
      src += 8;
      n -= 8;
    }
    if (n > sizeof a->err - 1) n = sizeof a->err - 1;
    if (n) memcpy(a->err, src, n);
    a->err[n] = 0;
    for (char *p = a->err; *p; p++)
      if (*p == '\r' || *p == '\n') *p = ' ';
  } else if (m.value && m.value->type == MSGPACK_OBJECT_MAP) {
    a->ok = m.value;
  }
}

static void answer_done(struct answer *a)
{
  msgpack_unpacked_destroy(&a->u);
}

/* The string field key of map o, copied into out (at most n-1 bytes), or 0. */
static int str_field(const msgpack_object *o, const char *key, char *out, size_t n)
{
  const msgpack_object *v = o ? airlock_msg_field(o, key) : NULL;
  if (!v || v->type != MSGPACK_OBJECT_STR || v->via.str.size >= n) return 0;
  memcpy(out, v->via.str.ptr, v->via.str.size);
  out[v->via.str.size] = 0;
  return 1;
}

struct open_args {
  struct conn *c;
  const char *kind, *method, *error;
};

static void pack_open(msgpack_packer *pk, void *ctx)
{
  struct open_args *o = ctx;
  int n = o->error ? 2 : 5;
  msgpack_pack_map(pk, (size_t)n);
  airlock_pack_cstr(pk, "conn");
  msgpack_pack_uint64(pk, o->c->id);
  if (o->error) {
    airlock_pack_cstr(pk, "error");
    airlock_pack_cstr(pk, o->error);
    return;
  }
  airlock_pack_cstr(pk, "kind");
  airlock_pack_cstr(pk, o->kind);
  airlock_pack_cstr(pk, "host");
  airlock_pack_cstr(pk, o->c->host);
  airlock_pack_cstr(pk, "port");
  msgpack_pack_unsigned_int(pk, o->c->port);
  airlock_pack_cstr(pk, "method");
  airlock_pack_cstr(pk, o->method);
}

struct resolved_args {
  struct conn *c;
  char (*addrs)[INET6_ADDRSTRLEN];
  int n;
  const char *error;
};

static void pack_resolved(msgpack_packer *pk, void *ctx)
{
  struct resolved_args *r = ctx;
  msgpack_pack_map(pk, 2);
  airlock_pack_cstr(pk, "conn");
  msgpack_pack_uint64(pk, r->c->id);
  if (r->error) {
    airlock_pack_cstr(pk, "error");
    airlock_pack_cstr(pk, r->error);
    return;
  }
  airlock_pack_cstr(pk, "addrs");
  msgpack_pack_array(pk, (size_t)r->n);
  for (int i = 0; i < r->n; i++) airlock_pack_cstr(pk, r->addrs[i]);
}

struct close_args {
  struct conn *c;
  const char *error;
};

static void pack_close(msgpack_packer *pk, void *ctx)
{
  struct close_args *a = ctx;
  msgpack_pack_map(pk, a->error ? 5 : 4);
  airlock_pack_cstr(pk, "conn");
  msgpack_pack_uint64(pk, a->c->id);
  airlock_pack_cstr(pk, "up");
  msgpack_pack_uint64(pk, a->c->bytes_up);
  airlock_pack_cstr(pk, "down");
  msgpack_pack_uint64(pk, a->c->bytes_down);
  airlock_pack_cstr(pk, "ms");
  msgpack_pack_double(pk, now_ms() - a->c->t0);
  if (a->error) {
    airlock_pack_cstr(pk, "error");
    airlock_pack_cstr(pk, a->error);
  }
}

/* ------------------------------------------------------------ connections */

static void conn_free(struct conn *c, const char *error)
{
  if (c->opened) {
    struct answer a;
    struct close_args ca = {c, error};
    call("egress.close", pack_close, &ca, &a);
    answer_done(&a);
  }
  if (c->cfd >= 0) close(c->cfd);
  if (c->ufd >= 0) close(c->ufd);
  free(c->head);
  free(c->up.data);
  free(c->down.data);
  memset(c, 0, sizeof *c);
  c->state = C_FREE;
  c->cfd = c->ufd = -1;
}

/* SOCKS5 replies (RFC 1928): success, then the failures the proxy gives. */
enum { S5_OK = 0, S5_FAIL = 1, S5_RULESET = 2, S5_HOST = 4, S5_CMD = 7, S5_ATYP = 8 };

static void socks_reply(struct conn *c, int code)
{
  const unsigned char r[10] = {5, (unsigned char)code, 0, 1, 0, 0, 0, 0, 0, 0};
  ssize_t w = send(c->cfd, r, sizeof r, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)w;
}

/* Best effort: a short answer to the client, then the connection is closed. */
static void respond(struct conn *c, int status, const char *reason, const char *text)
{
  if (c->socks) { /* a SOCKS5 client gets the code; the reason goes to the parent */
    if (c->socks_greeted) socks_reply(c, status == 403 ? S5_RULESET : status == 502 ? S5_HOST : S5_FAIL);
    return;
  }
  char msg[1024];
  int n = snprintf(msg, sizeof msg,
                   "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                   "X-Airlock-Refused: %s\r\nContent-Length: %zu\r\n\r\n%s\n",
                   status, reason, status == 403 ? "policy" : "proxy", strlen(text) + 1, text);
  if (n > 0) {
    ssize_t w =
        send(c->cfd, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
  }
}

static void refuse(struct conn *c, int status, const char *reason, const char *text)
{
  respond(c, status, reason, text);
  int fd = c->cfd;
  c->cfd = -1;
  conn_free(c, text);
  if (fd < 0) return;
  shutdown(fd, SHUT_WR);
  c->state = C_DRAIN;
  c->cfd = fd;
  c->due = now_ms() + DRAIN_MS;
}

static void on_drain(struct conn *c)
{
  char sink[4096];
  for (int i = 0; i < 16; i++) {
    ssize_t n = recv(c->cfd, sink, sizeof sink, 0);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    conn_free(c, NULL);
    return;
  }
}

/* A host as a request names it: a DNS name (letters, digits, '-', '.'), an
** IPv4 literal, or an IPv6 literal in brackets (kept without them).
** Lower-cased into c->host. Returns 0, or -1 for anything else. */
static int set_host(struct conn *c, const char *s, size_t n)
{
  if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
    s++;
    n -= 2;
    if (n == 0 || n >= INET6_ADDRSTRLEN) return -1;
    for (size_t i = 0; i < n; i++)
      if (!isxdigit((unsigned char)s[i]) && s[i] != ':' && s[i] != '.') return -1;
  } else {
    if (n == 0 || n > 253) return -1;
    for (size_t i = 0; i < n; i++)
      if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '.') return -1;
  }
  for (size_t i = 0; i < n; i++) c->host[i] = (char)tolower((unsigned char)s[i]);
  c->host[n] = 0;
  return 0;
}

static int parse_port(const char *s, size_t n, unsigned *out)
{
  if (n == 0 || n > 5) return -1;
  unsigned v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (unsigned)(s[i] - '0');
  }
  if (v == 0 || v > 65535) return -1;
  *out = v;
  return 0;
}

/* host[:port] (IPv6 in brackets) into c; def: the port when none is given. */
static int parse_authority(struct conn *c, const char *s, size_t n, unsigned def)
{
  const char *colon = NULL;
  if (n && s[0] == '[') {
    const char *close = memchr(s, ']', n);
    if (!close) return -1;
    if ((size_t)(close - s) + 1 < n) {
      if (close[1] != ':') return -1;
      colon = close + 1;
    }
  } else {
    colon = memchr(s, ':', n);
  }
  size_t hn = colon ? (size_t)(colon - s) : n;
  if (set_host(c, s, hn) < 0) return -1;
  if (!colon) {
    c->port = def;
    return def ? 0 : -1;
  }
  return parse_port(colon + 1, n - hn - 1, &c->port);
}

static int ieq_prefix(const char *line, size_t n, const char *name)
{
  size_t k = strlen(name);
  return n > k && line[k] == ':' && strncasecmp(line, name, k) == 0;
}

static int buf_put(struct buf *b, const void *p, size_t n)
{
  if (n > BUF_MAX - b->len) return -1;
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

static void open_upstream(struct conn *c, const char *method, const char *path, const char *hdrs,
                          size_t hdrs_len, const char *rest, size_t rest_len);

/* Reads an HTTP proxy request and opens its upstream.
** line: the request line (NUL-terminated, without CRLF); hdrs: the header
** lines after it, up to the blank line; rest: bytes after the head. */
static void decide(struct conn *c, char *line, const char *hdrs, size_t hdrs_len, const char *rest,
                   size_t rest_len)
{
  char *sp1 = strchr(line, ' ');
  char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
  if (!sp1 || !sp2 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0 || sp1 - line > 16) {
    refuse(c, 400, "Bad Request", "airlock egress: not an HTTP/1 proxy request");
    return;
  }
  *sp1 = *sp2 = 0;
  const char *method = line, *target = sp1 + 1, *path = "/";
  size_t tlen = strlen(target);
  if (strcmp(method, "CONNECT") == 0) {
    c->tunnel = 1;
    if (parse_authority(c, target, tlen, 0) < 0) {
      refuse(c, 400, "Bad Request", "airlock egress: CONNECT needs host:port");
      return;
    }
  } else if (strncasecmp(target, "http://", 7) == 0) {
    const char *auth = target + 7, *slash = strchr(auth, '/');
    size_t alen = slash ? (size_t)(slash - auth) : strlen(auth);
    if (memchr(auth, '@', alen) || parse_authority(c, auth, alen, 80) < 0) {
      refuse(c, 400, "Bad Request", "airlock egress: the URL's host is not a host name or address");
      return;
    }
    if (slash) path = slash;
  } else {
    refuse(c, 400, "Bad Request",
           strncasecmp(target, "https://", 8) == 0
               ? "airlock egress: https URLs go through CONNECT (set HTTPS_PROXY)"
               : "airlock egress: this is a proxy: send an absolute http:// URL or CONNECT");
    return;
  }
  for (const char *p = method; *p; p++)
    if (!isupper((unsigned char)*p)) {
      refuse(c, 400, "Bad Request", "airlock egress: bad method");
      return;
    }
  open_upstream(c, method, path, hdrs, hdrs_len, rest, rest_len);
}

/* The request is read (host, port, tunnel or not): asks the parent, resolves,
** asks again, and starts the upstream connect. */
static void open_upstream(struct conn *c, const char *method, const char *path, const char *hdrs,
                          size_t hdrs_len, const char *rest, size_t rest_len)
{
  c->bytes_up = c->hlen; /* the request as the client sent it */
  struct answer a;
  struct open_args oa = {c, c->tunnel ? "connect" : "http", method, NULL};
  call("egress.open", pack_open, &oa, &a);
  c->opened = 1; /* from here the parent hears how it ends */
  if (a.refused) {
    char text[600];
    snprintf(text, sizeof text, "airlock: refused: %s", a.err);
    answer_done(&a);
    refuse(c, 403, "Forbidden", text);
    return;
  }
  answer_done(&a);

  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(c->host, NULL, &hints, &res);
  char addrs[MAX_ADDRS][INET6_ADDRSTRLEN];
  int n = 0;
  for (struct addrinfo *ai = res; g == 0 && ai && n < MAX_ADDRS; ai = ai->ai_next) {
    const void *src = ai->ai_family == AF_INET ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                      : ai->ai_family == AF_INET6
                          ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                          : NULL;
    if (!src || !inet_ntop(ai->ai_family, src, addrs[n], sizeof addrs[n])) continue;
    int dup = 0;
    for (int k = 0; k < n; k++) dup |= strcmp(addrs[k], addrs[n]) == 0;
    if (!dup) n++;
  }
  if (res) freeaddrinfo(res);
  char gerr[300];
  snprintf(gerr, sizeof gerr, "cannot resolve %s: %s", c->host, g ? gai_strerror(g) : "no address");
  struct resolved_args ra = {c, addrs, n, n ? NULL : gerr};
  call("egress.resolved", pack_resolved, &ra, &a);
  if (a.refused || n == 0) {
    char text[600];
    snprintf(text, sizeof text, "airlock: %s%s", n ? "refused: " : "", n ? a.err : gerr);
    answer_done(&a);
    refuse(c, n ? 403 : 502, n ? "Forbidden" : "Bad Gateway", text);
    return;
  }
  char addr[INET6_ADDRSTRLEN];
  if (!str_field(a.ok, "addr", addr, sizeof addr)) {
    answer_done(&a);
    refuse(c, 502, "Bad Gateway", "airlock egress: the parent named no address");
    return;
  }
  c->up.data = malloc(BUF_MAX);
  c->down.data = malloc(BUF_MAX);
  if (!c->up.data || !c->down.data) {
    answer_done(&a);
    refuse(c, 503, "Service Unavailable", "out of memory");
    return;
  }
  if (c->tunnel && c->socks) {
    static const unsigned char ok[10] = {5, S5_OK, 0, 1, 0, 0, 0, 0, 0, 0};
    buf_put(&c->down, ok, sizeof ok);
  } else if (c->tunnel) {
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    buf_put(&c->down, ok, sizeof ok - 1);
  } else {
    /* The request again, in origin form, without what was the proxy's. */
    char first[HEAD_MAX + 64];
    int fl = snprintf(first, sizeof first, "%s %s HTTP/1.1\r\n", method, path);
    int bad = fl < 0 || (size_t)fl >= sizeof first || buf_put(&c->up, first, (size_t)fl) < 0;
    const msgpack_object *hs = airlock_msg_field(a.ok, "headers");
    const char *p = hdrs, *end = hdrs + hdrs_len;
    while (!bad && p < end) {
      const char *eol = memchr(p, '\n', (size_t)(end - p));
      size_t ln = eol ? (size_t)(eol - p) : (size_t)(end - p);
      size_t core = ln && p[ln - 1] == '\r' ? ln - 1 : ln;
      int drop = ieq_prefix(p, core, "proxy-connection") || ieq_prefix(p, core, "proxy-authorization") ||
                 ieq_prefix(p, core, "connection") || ieq_prefix(p, core, "keep-alive");
      /* A header the policy sets is the policy's alone. */
      for (uint32_t k = 0; !drop && hs && hs->type == MSGPACK_OBJECT_MAP && k < hs->via.map.size; k++) {
        const msgpack_object *key = &hs->via.map.ptr[k].key;
        if (key->type != MSGPACK_OBJECT_STR) continue;
        size_t kl = key->via.str.size;
        drop = core > kl && p[kl] == ':' && strncasecmp(p, key->via.str.ptr, kl) == 0;
      }
      if (!drop && core) bad = buf_put(&c->up, p, core) < 0 || buf_put(&c->up, "\r\n", 2) < 0;
      p += ln + (eol ? 1 : 0);
    }
    for (uint32_t k = 0; !bad && hs && hs->type == MSGPACK_OBJECT_MAP && k < hs->via.map.size; k++) {
      const msgpack_object *key = &hs->via.map.ptr[k].key, *val = &hs->via.map.ptr[k].val;
      if (key->type != MSGPACK_OBJECT_STR || val->type != MSGPACK_OBJECT_STR) continue;
      bad = buf_put(&c->up, key->via.str.ptr, key->via.str.size) < 0 || buf_put(&c->up, ": ", 2) < 0 ||
            buf_put(&c->up, val->via.str.ptr, val->via.str.size) < 0 || buf_put(&c->up, "\r\n", 2) < 0;
    }
    if (!bad) bad = buf_put(&c->up, "Connection: close\r\n\r\n", 21) < 0;
    if (bad) {
      answer_done(&a);
      refuse(c, 431, "Request Header Fields Too Large", "airlock egress: the request head is too large");
      return;
    }
  }
  answer_done(&a);
  if (rest_len && buf_put(&c->up, rest, rest_len) < 0) {
    refuse(c, 431, "Request Header Fields Too Large", "airlock egress: the request is too large");
    return;
  }
  free(c->head);
  c->head = NULL;

  struct sockaddr_storage ss;
  socklen_t sl;
  memset(&ss, 0, sizeof ss);
  if (inet_pton(AF_INET, addr, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
    ((struct sockaddr_in *)&ss)->sin_family = AF_INET;
    ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)c->port);
    sl = sizeof(struct sockaddr_in);
  } else if (inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
    ((struct sockaddr_in6 *)&ss)->sin6_family = AF_INET6;
    ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)c->port);
    sl = sizeof(struct sockaddr_in6);
  } else {
    refuse(c, 502, "Bad Gateway", "airlock egress: the parent named an address that is not one");
    return;
  }
  c->ufd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->ufd < 0 || (connect(c->ufd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS)) {
    char text[400];
    snprintf(text, sizeof text, "airlock egress: cannot connect to %s port %u: %s", addr, c->port,
             strerror(errno));
    refuse(c, 502, "Bad Gateway", text);
    return;
  }
  c->state = C_CONNECTING;
  c->due = now_ms() + CONNECT_MS;
}

/* A SOCKS5 client (RFC 1928): the greeting (no authentication is the one
** method offered back), then CONNECT to a name or an address, which the
** policy decides as an HTTP CONNECT. Every length is checked against what
** was read before it is used. */
static void on_socks(struct conn *c)
{
  const unsigned char *h = (const unsigned char *)c->head;
  c->socks = 1;
  if (!c->socks_greeted) {
    if (c->hlen < 2) return;
    size_t need = 2u + h[1];
    if (c->hlen < need) return;
    int noauth = 0;
    for (size_t i = 2; i < need; i++) noauth |= h[i] == 0;
    const unsigned char rep[2] = {5, noauth ? 0 : 0xFF};
    ssize_t w = send(c->cfd, rep, sizeof rep, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    if (!noauth) {
      refuse(c, 400, "Bad Request", "airlock egress: SOCKS5 without the no-authentication method");
      return;
    }
    memmove(c->head, c->head + need, c->hlen - need);
    c->hlen -= need;
    c->socks_greeted = 1;
  }
  if (c->hlen < 5) return;
  if (h[0] != 5 || h[2] != 0) {
    refuse(c, 400, "Bad Request", "airlock egress: not a SOCKS5 request");
    return;
  }
  if (h[1] != 1) {
    socks_reply(c, S5_CMD);
    refuse(c, 400, "Bad Request", "airlock egress: SOCKS5 commands other than CONNECT are refused");
    return;
  }
  char name[INET6_ADDRSTRLEN + 2];
  size_t alen;
  const unsigned char *a = h + 4;
  if (h[3] == 3) {
    alen = 1u + h[4];
  } else if (h[3] == 1 || h[3] == 4) {
    alen = h[3] == 1 ? 4 : 16;
  } else {
    socks_reply(c, S5_ATYP);
    refuse(c, 400, "Bad Request", "airlock egress: an unknown SOCKS5 address type");
    return;
  }
  if (c->hlen < 4 + alen + 2) return;
  int bad;
  if (h[3] == 3) {
    bad = set_host(c, (const char *)a + 1, a[0]);
  } else {
    char txt[INET6_ADDRSTRLEN];
    bad = !inet_ntop(h[3] == 1 ? AF_INET : AF_INET6, a, txt, sizeof txt);
    if (!bad) {
      int n = snprintf(name, sizeof name, h[3] == 1 ? "%s" : "[%s]", txt);
      bad = n < 0 || set_host(c, name, (size_t)n) < 0;
    }
  }
  c->port = (unsigned)a[alen] << 8 | a[alen + 1];
  if (bad || c->port == 0) {
    refuse(c, 400, "Bad Request", "airlock egress: the SOCKS5 request names no host or port");
    return;
  }
  c->tunnel = 1;
  size_t used = 4 + alen + 2;
  open_upstream(c, "CONNECT", "/", NULL, 0, c->head + used, c->hlen - used);
}

/* Reads more of the head; once it is complete, decides. */
static void on_head(struct conn *c)
{
  ssize_t n = recv(c->cfd, c->head + c->hlen, HEAD_MAX - c->hlen, 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    conn_free(c, NULL);
    return;
  }
  if (n < 0) return;
  if (c->socks || (c->hlen == 0 && (unsigned char)c->head[0] == 5)) {
    c->hlen += (size_t)n;
    on_socks(c);
    return;
  }
  size_t from = c->hlen > 3 ? c->hlen - 3 : 0;
  c->hlen += (size_t)n;
  char *end = memmem(c->head + from, c->hlen - from, "\r\n\r\n", 4);
  if (!end) {
    if (c->hlen == HEAD_MAX) { /* SECURITY: bounded before anything else is allocated */
      struct answer a;
      struct open_args oa = {c, NULL, NULL, "a request head over 16384 bytes"};
      call("egress.open", pack_open, &oa, &a);
      answer_done(&a);
      refuse(c, 431, "Request Header Fields Too Large",
             "airlock egress: the request head is over 16384 bytes");
    }
    return;
  }
  size_t head_len = (size_t)(end - c->head) + 4;
  char *eol = memmem(c->head, head_len, "\r\n", 2);
  *eol = 0;
  if (memchr(c->head, 0, (size_t)(eol - c->head))) {
    refuse(c, 400, "Bad Request", "airlock egress: a NUL in the request line");
    return;
  }
  const char *hdrs = eol + 2;
  decide(c, c->head, hdrs, (size_t)(end + 2 - hdrs), c->head + head_len, c->hlen - head_len);
}

static void on_connected(struct conn *c)
{
  int e = 0;
  socklen_t el = sizeof e;
  if (getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &e, &el) < 0) e = errno;
  if (e == EINPROGRESS || e == EALREADY) return;
  if (e) {
    char text[300];
    snprintf(text, sizeof text, "airlock egress: cannot connect to %s port %u: %s", c->host, c->port,
             strerror(e));
    refuse(c, 502, "Bad Gateway", text);
    return;
  }
  c->state = C_RELAY;
  c->due = 0;
}

/* Moves bytes from fd into b; returns -1 on a broken connection. */
static int pull(int fd, struct buf *b, int *eof, uint64_t *count)
{
  if (*eof || b->len == BUF_MAX) return 0;
  ssize_t n = recv(fd, b->data + b->len, BUF_MAX - b->len, 0);
  if (n == 0) {
    *eof = 1;
    return 0;
  }
  if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
  b->len += (size_t)n;
  *count += (uint64_t)n;
  return 0;
}

static int push(int fd, struct buf *b)
{
  while (b->off < b->len) {
    ssize_t n = send(fd, b->data + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
    b->off += (size_t)n;
  }
  b->off = b->len = 0;
  return 0;
}

static void relay(struct conn *c, short crev, short urev)
{
  int bad = 0;
  if (crev & (POLLIN | POLLHUP | POLLERR)) bad |= pull(c->cfd, &c->up, &c->c_eof, &c->bytes_up);
  if (urev & (POLLIN | POLLHUP | POLLERR)) bad |= pull(c->ufd, &c->down, &c->u_eof, &c->bytes_down);
  bad |= push(c->ufd, &c->up);
  bad |= push(c->cfd, &c->down);
  if (bad) {
    conn_free(c, "a side closed the connection abruptly");
    return;
  }
  /* A side that ended gets its half closed once its bytes are through. */
  if (c->c_eof && !c->u_shut && c->up.len == 0) {
    shutdown(c->ufd, SHUT_WR);
    c->u_shut = 1;
  }
  if (c->u_eof && !c->c_shut && c->down.len == 0) {
    shutdown(c->cfd, SHUT_WR);
    c->c_shut = 1;
  }
  if (c->u_shut && c->c_shut) conn_free(c, NULL);
}

static void on_accept(void)
{
  for (;;) {
    int fd = accept4(LISTEN_FD, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    struct conn *c = NULL;
    int active = 0;
    for (int i = 0; i < MAX_SLOTS; i++) {
      if (conns[i].state == C_FREE) {
        if (!c) c = &conns[i];
      } else if (conns[i].state != C_DRAIN)
        active++;
    }
    if (!c) {
      close(fd);
      continue;
    } /* every slot taken: a reset */
    c->cfd = fd;
    c->ufd = -1;
    c->t0 = now_ms();
    if (active >= MAX_CONN || !(c->head = malloc(HEAD_MAX))) {
      refuse(c, 503, "Service Unavailable", "airlock egress: too many connections at once (64)");
      continue;
    }
    c->state = C_HEAD;
    c->id = next_conn++;
    c->due = c->t0 + HEAD_MS;
  }
}

int main(void)
{
  signal(SIGPIPE, SIG_IGN);
  int fl = fcntl(LISTEN_FD, F_GETFL);
  int type = 0;
  socklen_t tl = sizeof type;
  if (fl < 0 || getsockopt(LISTEN_FD, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM)
    die("fd 0 is not a listening socket: airlock-egress is started by airlock exec");
  if (fcntl(LISTEN_FD, F_SETFL, fl | O_NONBLOCK) < 0) die("fcntl: %s", strerror(errno));
  fl = fcntl(CHANNEL_FD, F_GETFL);
  if (fl < 0) die("fd 3 is not open: airlock-egress is started by airlock exec");
  if ((fl & O_NONBLOCK) && fcntl(CHANNEL_FD, F_SETFL, fl & ~O_NONBLOCK) < 0)
    die("fcntl: %s", strerror(errno));
  airlock_frame_reader_init(&rd, REPLY_MAX);
  for (int i = 0; i < MAX_SLOTS; i++) {
    conns[i].cfd = conns[i].ufd = -1;
  }

  static struct pollfd pf[2 + 2 * MAX_SLOTS];
  static int who[2 + 2 * MAX_SLOTS]; /* index into conns, -1 listener, -2 channel */
  for (;;) {
    int n = 0;
    pf[n] = (struct pollfd){.fd = LISTEN_FD, .events = POLLIN};
    who[n++] = -1;
    pf[n] = (struct pollfd){.fd = CHANNEL_FD, .events = POLLIN};
    who[n++] = -2;
    double t = now_ms(), next_due = 0;
    for (int i = 0; i < MAX_SLOTS; i++) {
      struct conn *c = &conns[i];
      if (c->state == C_FREE) continue;
      if (c->due && t >= c->due) {
        if (c->state == C_DRAIN)
          conn_free(c, NULL);
        else if (c->state == C_HEAD)
          refuse(c, 408, "Request Timeout", "airlock egress: the request head did not arrive in 10 s");
        else
          refuse(c, 504, "Gateway Timeout",
                 "airlock egress: the upstream did not answer the connect in 10 s");
        continue;
      }
      if (c->due && (!next_due || c->due < next_due)) next_due = c->due;
      if (c->state == C_HEAD || c->state == C_DRAIN) {
        pf[n] = (struct pollfd){.fd = c->cfd, .events = POLLIN};
        who[n++] = i;
      } else if (c->state == C_CONNECTING) {
        pf[n] = (struct pollfd){.fd = c->ufd, .events = POLLOUT};
        who[n++] = i;
      } else {
        short ce = (short)((!c->c_eof && c->up.len < BUF_MAX ? POLLIN : 0) | (c->down.len ? POLLOUT : 0));
        short ue = (short)((!c->u_eof && c->down.len < BUF_MAX ? POLLIN : 0) | (c->up.len ? POLLOUT : 0));
        pf[n] = (struct pollfd){.fd = c->cfd, .events = ce};
        who[n++] = i;
        pf[n] = (struct pollfd){.fd = c->ufd, .events = ue};
        who[n++] = i;
      }
    }
    int timeout = next_due ? (int)(next_due - t) + 1 : -1;
    int r = poll(pf, (nfds_t)n, timeout);
    if (r < 0 && errno != EINTR) die("poll: %s", strerror(errno));
    if (r <= 0) continue;
    if (pf[1].revents) exit(0); /* the parent spoke out of turn or left: the run is over */
    for (int k = 2; k < n; k++) {
      int i = who[k];
      struct conn *c = &conns[i];
      if (c->state == C_FREE || (!pf[k].revents && c->state != C_RELAY)) continue;
      if (c->state == C_HEAD)
        on_head(c);
      else if (c->state == C_DRAIN)
        on_drain(c);
      else if (c->state == C_CONNECTING)
        on_connected(c);
      else if (c->state == C_RELAY && k + 1 < n && who[k + 1] == i) {
        relay(c, pf[k].revents, pf[k + 1].revents);
        k++;
      }
    }
    if (pf[0].revents & POLLIN) on_accept();
  }
}
