/*
** journal_read.c -- reading a journal: a streaming reader that verifies the chain
** record by record in bounded memory, names the damage it finds (altered,
** substituted, deleted, reordered, ...), tells a torn tail from a bad record,
** and airlock_ledger_verify on top of it.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>

#include <openssl/evp.h>

#include "airlock.h"
#include "journal_int.h"

#define READ_CHUNK (256u << 10) /* read(2) size, and the buffer kept between records */

/* ------------------------------------------------------------------ shared helpers */

/* SHA-256 is OpenSSL's (libcrypto): it uses the CPU's SHA extensions, about
** three times the throughput of a portable implementation, and verify is bound
** by hashing. The digest is fetched once; each thread keeps one context. */
static EVP_MD *sha256;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static __thread EVP_MD_CTX *sha256_ctx;

static void fetch_sha256(void)
{
  sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

int ledger_crypto_init(char *err, size_t errlen)
{
  pthread_once(&sha256_once, fetch_sha256);
  if (sha256 == NULL)
    return ledger_fail(err, errlen, -EIO, "ledger: OpenSSL has no SHA-256 (EVP_MD_fetch failed)");
  if (sha256_ctx == NULL && (sha256_ctx = EVP_MD_CTX_new()) == NULL)
    return ledger_fail(err, errlen, -ENOMEM, "ledger: out of memory for a digest context");
  return 0;
}

/* out = SHA-256(a || b). ledger_crypto_init has succeeded on this thread, so
** none of these calls can fail short of memory corruption; if one does, the
** output is poisoned (all 0xff) so no chain can verify against it. */
static void sha256_two(const void *a, size_t alen, const void *b, size_t blen, uint8_t out[LEDGER_HASH])
{
  unsigned n = 0;
  if (sha256_ctx == NULL || EVP_DigestInit_ex(sha256_ctx, sha256, NULL) != 1 ||
      EVP_DigestUpdate(sha256_ctx, a, alen) != 1 || EVP_DigestUpdate(sha256_ctx, b, blen) != 1 ||
      EVP_DigestFinal_ex(sha256_ctx, out, &n) != 1 || n != LEDGER_HASH)
    memset(out, 0xff, LEDGER_HASH);
}

void ledger_h0(const uint8_t id[AIRLOCK_LEDGER_ID_LEN], uint8_t out[LEDGER_HASH])
{
  static const char domain[] = "airlock-ledger-v1"; /* hashed with its NUL */
  sha256_two(domain, sizeof domain, id, AIRLOCK_LEDGER_ID_LEN, out);
}

void ledger_chain(const uint8_t prev[LEDGER_HASH], const void *body, size_t len, uint8_t out[LEDGER_HASH])
{
  sha256_two(prev, LEDGER_HASH, body, len, out);
}

char *ledger_join(const char *dir, const char *name)
{
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (p != NULL) {
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
  }
  return p;
}

static uint32_t get_be32(const uint8_t *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ------------------------------------------------------------------ body fields */

/* The fields the ledger itself reads from a body. */
struct fields {
  int has_seq, has_kind, has_run, has_t, has_id, dup_id, has_created;
  uint64_t seq, run;
  double t;
  const char *kind, *id;
  uint32_t kind_len, id_len;
};

static uint64_t get_be(const uint8_t *p, unsigned n)
{
  uint64_t v = 0;
  while (n-- > 0) v = v << 8 | *p++;
  return v;
}

/* Steps over one object. The bytes have passed airlock_msg_check, so every
** length is inside the body; the bound checks only guard against misuse. */
static size_t skip(const uint8_t *b, size_t len, size_t pos)
{
  uint64_t todo = 1;
  while (todo > 0 && pos < len) {
    todo--;
    uint8_t tag = b[pos++];
    uint64_t n = 0;
    if (tag <= 0x7f || tag >= 0xe0 || tag == 0xc0 || tag == 0xc2 || tag == 0xc3) continue;
    if (tag <= 0x8f) {
      todo += 2u * (tag & 0x0f);
      continue;
    }
    if (tag <= 0x9f) {
      todo += tag & 0x0f;
      continue;
    }
    if (tag <= 0xbf) {
      pos += tag & 0x1f;
      continue;
    }
    switch (tag) {
      case 0xc4:
      case 0xc5:
      case 0xc6:
        n = 1u << (tag - 0xc4);
        pos += n + get_be(b + pos, (unsigned)n);
        break;
      case 0xd9:
      case 0xda:
      case 0xdb:
        n = 1u << (tag - 0xd9);
        pos += n + get_be(b + pos, (unsigned)n);
        break;
      case 0xc7:
      case 0xc8:
      case 0xc9:
        n = 1u << (tag - 0xc7);
        pos += n + 1 + get_be(b + pos, (unsigned)n);
        break;
      case 0xca: pos += 4; break;
      case 0xcb: pos += 8; break;
      case 0xcc:
      case 0xcd:
      case 0xce:
      case 0xcf: pos += 1u << (tag - 0xcc); break;
      case 0xd0:
      case 0xd1:
      case 0xd2:
      case 0xd3: pos += 1u << (tag - 0xd0); break;
      case 0xd4:
      case 0xd5:
      case 0xd6:
      case 0xd7:
      case 0xd8: pos += 1 + (1u << (tag - 0xd4)); break;
      case 0xdc:
      case 0xdd:
        n = 2u << (tag - 0xdc);
        todo += get_be(b + pos, (unsigned)n);
        pos += n;
        break;
      case 0xde:
      case 0xdf:
        n = 2u << (tag - 0xde);
        todo += 2 * get_be(b + pos, (unsigned)n);
        pos += n;
        break;
      default: return len;
    }
  }
  return pos;
}

/* A string at b[*pos]: 1 with ptr/len and *pos past it, or 0 (not a string). */
static int get_str(const uint8_t *b, size_t *pos, const char **s, uint32_t *n)
{
  uint8_t tag = b[*pos];
  size_t p = *pos + 1;
  uint64_t len;
  if (tag >= 0xa0 && tag <= 0xbf) {
    len = tag & 0x1f;
  } else if (tag >= 0xd9 && tag <= 0xdb) {
    unsigned k = 1u << (tag - 0xd9);
    len = get_be(b + p, k);
    p += k;
  } else {
    return 0;
  }
  *s = (const char *)b + p;
  *n = (uint32_t)len;
  *pos = p + len;
  return 1;
}

/* A non-negative integer: 1 with the value, or 0. */
static int get_uint(const uint8_t *b, size_t pos, uint64_t *v)
{
  uint8_t tag = b[pos];
  if (tag <= 0x7f) {
    *v = tag;
    return 1;
  }
  if (tag >= 0xcc && tag <= 0xcf) {
    *v = get_be(b + pos + 1, 1u << (tag - 0xcc));
    return 1;
  }
  if (tag >= 0xd0 && tag <= 0xd3) {
    unsigned k = 1u << (tag - 0xd0);
    uint64_t raw = get_be(b + pos + 1, k);
    if (raw >> (8 * k - 1)) return 0; /* negative */
    *v = raw;
    return 1;
  }
  return 0;
}

/* A number (float or non-negative integer): 1 with the value, or 0. */
static int get_num(const uint8_t *b, size_t pos, double *v)
{
  uint64_t u;
  if (b[pos] == 0xcb) {
    u = get_be(b + pos + 1, 8);
    memcpy(v, &u, sizeof *v);
    return 1;
  }
  if (b[pos] == 0xca) {
    uint32_t w = (uint32_t)get_be(b + pos + 1, 4);
    float f;
    memcpy(&f, &w, sizeof f);
    *v = f;
    return 1;
  }
  if (get_uint(b, pos, &u)) {
    *v = (double)u;
    return 1;
  }
  return 0;
}

static int key_is(const char *k, uint32_t n, const char *s)
{
  return strlen(s) == n && memcmp(k, s, n) == 0;
}

/* Reads seq, kind, run, t (and id, created for a session) from a checked body.
** Returns 0, or -1 with a clause for "seq N: the body ..." in why. */
static int body_fields(const uint8_t *b, size_t len, struct fields *f, char *why, size_t whylen)
{
  memset(f, 0, sizeof *f);
  size_t pos = 0;
  uint64_t count;
  uint8_t tag = b[0];
  if (tag >= 0x80 && tag <= 0x8f) {
    count = tag & 0x0f;
    pos = 1;
  } else if (tag == 0xde || tag == 0xdf) {
    unsigned k = 2u << (tag - 0xde);
    count = get_be(b + 1, k);
    pos = 1 + k;
  } else {
    return ledger_fail(why, whylen, -1, "is not a map");
  }
  for (uint64_t i = 0; i < count; i++) {
    const char *k;
    uint32_t kn;
    if (!get_str(b, &pos, &k, &kn))
      return ledger_fail(why, whylen, -1, "has a key that is not a string (pair %" PRIu64 ")", i + 1);
    int *has = NULL, ok = 1;
    const char *name = NULL;
    if (key_is(k, kn, "seq")) {
      has = &f->has_seq, name = "seq";
      ok = !*has && get_uint(b, pos, &f->seq) && f->seq > 0;
    } else if (key_is(k, kn, "kind")) {
      has = &f->has_kind, name = "kind";
      size_t p = pos;
      ok = !*has && get_str(b, &p, &f->kind, &f->kind_len) && f->kind_len > 0 &&
           f->kind_len <= AIRLOCK_LEDGER_KIND_MAX;
      for (uint32_t j = 0; ok && j < f->kind_len; j++) ok = f->kind[j] > 0x20 && f->kind[j] < 0x7f;
    } else if (key_is(k, kn, "run")) {
      has = &f->has_run, name = "run";
      ok = !*has && get_uint(b, pos, &f->run);
    } else if (key_is(k, kn, "t")) {
      has = &f->has_t, name = "t";
      ok = !*has && get_num(b, pos, &f->t);
    } else if (key_is(k, kn, "id")) {
      /* only the session's id is the ledger's; other kinds may use the name */
      size_t p = pos;
      f->dup_id |= f->has_id;
      if (!f->has_id && get_str(b, &p, &f->id, &f->id_len)) f->has_id = 1;
    } else if (key_is(k, kn, "created")) {
      double c;
      f->has_created = get_num(b, pos, &c);
    }
    if (!ok)
      return ledger_fail(why, whylen, -1, *has ? "has field '%s' twice" : "has a bad field '%s'", name);
    if (has != NULL) *has = 1;
    pos = skip(b, len, pos);
  }
  const char *missing = !f->has_seq    ? "seq"
                        : !f->has_kind ? "kind"
                        : !f->has_run  ? "run"
                        : !f->has_t    ? "t"
                                       : NULL;
  if (missing != NULL) return ledger_fail(why, whylen, -1, "lacks field '%s'", missing);
  return 0;
}

/* ------------------------------------------------------------------ reader */

struct airlock_ledger_reader {
  char *path; /* the journal, for messages */
  char *dir;
  ledger_stream src; /* the plain stream: segments in turn, then the journal */
  int decode;        /* unpack bodies with msgpack-c for rec->body */
  uint8_t *buf;      /* bytes [pos, len) are unread; buf[pos] is at file offset off */
  size_t cap, pos, len;
  uint64_t off;
  uint64_t expect; /* seq of the next record */
  uint8_t prev[LEDGER_HASH];
  int state; /* 0: reading; 1: at the end; < 0: failed with this -errno */
  msgpack_zone zone;
  int zone_ok;
  msgpack_object body;
  airlock_ledger_report rep;
  char err[384];
};

__attribute__((format(printf, 3, 4))) static int bad(airlock_ledger_reader *r, uint64_t seq, const char *fmt,
                                                     ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->rep.reason, sizeof r->rep.reason, fmt, ap);
  va_end(ap);
  r->rep.first_bad_seq = seq;
  snprintf(r->err, sizeof r->err, "ledger: %s: %s", r->path, r->rep.reason);
  r->state = -EBADMSG;
  return -EBADMSG;
}

static int io_error(airlock_ledger_reader *r, int e)
{
  if (e == -EBADMSG && r->state == -EBADMSG)
    return e; /* a sealed segment was damaged: bad() has said where */
  snprintf(r->rep.reason, sizeof r->rep.reason, "io: reading at offset %" PRIu64 ": %s", r->off,
           airlock_strerror(-e));
  snprintf(r->err, sizeof r->err, "ledger: %s: %s", r->path, r->rep.reason);
  r->state = e;
  return e;
}

/* The end, with bytes of a partial last record after the good ones. */
static int torn(airlock_ledger_reader *r, uint64_t bytes, const char *what)
{
  if (r->off < r->src.base) /* only the open journal can be torn: a seal is whole */
    return bad(r, r->expect,
               "truncated: the sealed segments end inside a record (seq %" PRIu64 " at offset %" PRIu64
               "): a segment was cut or removed",
               r->expect, r->off);
  r->rep.torn_bytes = bytes;
  snprintf(r->rep.reason, sizeof r->rep.reason,
           "torn: %" PRIu64 " byte%s at offset %" PRIu64 " after seq %" PRIu64
           " hold %s (an interrupted write)",
           bytes, bytes == 1 ? "" : "s", r->off, r->rep.last_seq, what);
  r->state = 1;
  return 0;
}

void ledger_reader_layout(const airlock_ledger_reader *r, uint64_t *base, unsigned *nseg, uint64_t *stale)
{
  *base = r->src.base;
  *nseg = r->src.seg > 0 ? r->src.seg - 1 : 0;
  *stale = r->src.stale ? r->src.seg_plain : 0;
}

/* Makes need bytes readable at buf + pos. Returns 0, 1 when the file ends first
** (what there is stays readable), or -errno. The buffer grows only while it is
** full of bytes actually read, so a lying length costs at most twice the bytes
** the file really holds. */
static int fill(airlock_ledger_reader *r, size_t need)
{
  if (r->len - r->pos >= need) return 0;
  if (r->pos > 0) {
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->len -= r->pos;
    r->pos = 0;
  }
  while (r->len < need) {
    if (r->len == r->cap) {
      size_t want = r->cap * 2;
      if (want > need) want = need;
      if (want < READ_CHUNK) want = READ_CHUNK;
      uint8_t *p = realloc(r->buf, want);
      if (p == NULL) return -ENOMEM;
      r->buf = p;
      r->cap = want;
    }
    ssize_t n = ledger_stream_read(&r->src, r->buf + r->len, r->cap - r->len);
    if (n == -EINTR) continue;
    if (n == -EBADMSG && r->src.damage[0])
      return bad(r, r->expect, "%s (seq %" PRIu64 " is in it)", r->src.damage, r->expect);
    if (n < 0) return (int)n;
    if (n == 0) return 1;
    r->len += (size_t)n;
  }
  return 0;
}

/* After a large record, gives the memory back. */
static void shrink(airlock_ledger_reader *r)
{
  if (r->cap <= READ_CHUNK || r->len - r->pos > READ_CHUNK) return;
  memmove(r->buf, r->buf + r->pos, r->len - r->pos);
  r->len -= r->pos;
  r->pos = 0;
  uint8_t *p = realloc(r->buf, READ_CHUNK);
  if (p != NULL) {
    r->buf = p;
    r->cap = READ_CHUNK;
  }
}

int ledger_reader_open_dir(const char *dir, int decode, airlock_ledger_reader **out, char *err, size_t errlen)
{
  *out = NULL;
  int rc = ledger_crypto_init(err, errlen);
  if (rc < 0) return rc;
  airlock_ledger_reader *r = calloc(1, sizeof *r);
  if (r == NULL || (r->path = ledger_join(dir, LEDGER_JOURNAL)) == NULL || (r->dir = strdup(dir)) == NULL) {
    if (r != NULL) free(r->path);
    free(r);
    return ledger_fail(err, errlen, -ENOMEM, "ledger: out of memory");
  }
  r->src.sfd = -1;
  r->src.dir = r->dir;
  r->src.fd = open(r->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW); /* never a planted link */
  if (r->src.fd < 0) {
    rc = -errno;
    ledger_fail(err, errlen, rc, "ledger: cannot open %s: %s", r->path, airlock_strerror(errno));
    free(r->path);
    free(r->dir);
    free(r);
    return rc;
  }
  posix_fadvise(r->src.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  r->decode = decode;
  r->expect = 1;
  if (decode) {
    if (!msgpack_zone_init(&r->zone, MSGPACK_ZONE_CHUNK_SIZE)) {
      airlock_ledger_reader_close(r);
      return ledger_fail(err, errlen, -ENOMEM, "ledger: out of memory");
    }
    r->zone_ok = 1;
  }
  *out = r;
  return 0;
}

int airlock_ledger_reader_open(const char *dir, airlock_ledger_reader **out, char *err, size_t errlen)
{
  return ledger_reader_open_dir(dir, 1, out, err, errlen);
}

void airlock_ledger_reader_close(airlock_ledger_reader *r)
{
  if (r == NULL) return;
  if (r->src.fd >= 0) close(r->src.fd);
  ledger_stream_free(&r->src);
  if (r->zone_ok) msgpack_zone_destroy(&r->zone);
  free(r->buf);
  free(r->path);
  free(r->dir);
  free(r);
}

void airlock_ledger_reader_report(const airlock_ledger_reader *r, airlock_ledger_report *rep)
{
  *rep = r->rep;
  memcpy(rep->head, r->prev, LEDGER_HASH);
}

const char *airlock_ledger_reader_error(const airlock_ledger_reader *r)
{
  return r->err;
}

/* What the record after the current one shows: its seq, and whether its
** stored hash follows from each candidate for the current record's hash
** (copies: the buffer may move). The bytes are read into the buffer after
** the current record, so this works the same in a journal and in a sealed
** segment. Returns 1 when there is a complete, well-formed next record, else
** 0. Only runs once damage has been found. */
static int peek(airlock_ledger_reader *r, uint64_t at, const uint8_t *const *cand, int ncand, uint64_t *seq,
                int *links)
{
  size_t rel = (size_t)(at - r->off);
  if (fill(r, rel + LEDGER_HDR) != 0) return 0;
  uint32_t n = get_be32(r->buf + r->pos + rel);
  if (n == 0 || n > AIRLOCK_LEDGER_BODY_MAX || fill(r, rel + LEDGER_HDR + n + LEDGER_HASH) != 0) return 0;
  const uint8_t *b = r->buf + r->pos + rel + LEDGER_HDR;
  struct fields f;
  if (airlock_msg_check(b, n, NULL, 0) != 0 || body_fields(b, n, &f, NULL, 0) != 0) return 0;
  *seq = f.seq;
  for (int i = 0; i < ncand; i++) {
    uint8_t h[LEDGER_HASH];
    ledger_chain(cand[i], b, n, h);
    links[i] = memcmp(h, b + n, LEDGER_HASH) == 0;
  }
  return 1;
}

/* A complete record whose seq is not the one expected: which damage explains
** it is told by the record after it. */
static int wrong_seq(airlock_ledger_reader *r, uint64_t s, const uint8_t *stored_in_buf, uint64_t next_at)
{
  uint64_t e = r->expect, ns = 0;
  int links = 0;
  uint8_t stored[LEDGER_HASH];
  memcpy(stored, stored_in_buf, LEDGER_HASH);
  const uint8_t *cand[1] = {stored};
  int more = peek(r, next_at, cand, 1, &ns, &links);
  if (more && ns == e + 1)
    return bad(r, e,
               "altered: seq %" PRIu64 ": the record in its place says seq %" PRIu64 ", yet seq %" PRIu64
               " follows it",
               e, s, e + 1);
  if (s > e && more && ns < s)
    return bad(r, e,
               "reordered: seq %" PRIu64 " stands where seq %" PRIu64 " belongs, and seq %" PRIu64
               " follows it",
               s, e, ns);
  if (s > e && e == 1)
    return bad(r, e,
               "deleted: the journal starts at seq %" PRIu64 ", without its session "
               "record (seq 1)",
               s);
  if (s > e) {
    if (s == e + 1)
      return bad(r, e, "deleted: seq %" PRIu64 " is missing (seq %" PRIu64 " follows seq %" PRIu64 ")", e, s,
                 e - 1);
    return bad(
        r, e, "deleted: seq %" PRIu64 " to %" PRIu64 " are missing (seq %" PRIu64 " follows seq %" PRIu64 ")",
        e, s - 1, s, e - 1);
  }
  return bad(r, e,
             "reordered: seq %" PRIu64 " stands where seq %" PRIu64
             " belongs (seq goes back: a record was moved or repeated)",
             s, e);
}

/* A record with the right seq whose chain hash does not follow: which part was
** replaced is told by whether the record after it links to the stored hash
** (only the body changed), to the recomputed one (only the stored hash
** changed), or to neither (the whole record was replaced). */
static int wrong_hash(airlock_ledger_reader *r, const uint8_t *computed, const uint8_t *stored_in_buf,
                      uint64_t next_at)
{
  uint64_t e = r->expect, ns = 0;
  int links[2] = {0, 0};
  uint8_t stored[LEDGER_HASH];
  memcpy(stored, stored_in_buf, LEDGER_HASH);
  const uint8_t *cand[2] = {stored, computed};
  if (!peek(r, next_at, cand, 2, &ns, links))
    return bad(r, e,
               "altered: seq %" PRIu64 ": its chain hash does not match its body (no "
               "record follows to tell whether it was altered or replaced)",
               e);
  if (links[0])
    return bad(r, e,
               "altered: seq %" PRIu64 ": its body does not match its chain hash, which "
               "seq %" PRIu64 " still follows (the body was changed%s)",
               e, ns, e > 1 ? ", or the record before it was replaced and re-hashed" : "");
  if (links[1])
    return bad(r, e,
               "altered: seq %" PRIu64 ": its stored chain hash was changed (the body "
               "and seq %" PRIu64 " agree with each other)",
               e, ns);
  return bad(r, e,
             "substituted: seq %" PRIu64 ": neither its body nor its stored hash belongs "
             "to this chain (the record was replaced)",
             e);
}

/* Damage in the fields of a record whose bytes are well-formed msgpack: if the
** chain hash still matches, its producer wrote it so (malformed); otherwise it
** was altered afterwards. */
static int bad_fields(airlock_ledger_reader *r, const uint8_t *body, uint32_t n, const uint8_t *stored,
                      const char *why)
{
  uint64_t e = r->expect;
  if (e == 1) return bad(r, e, "altered: seq 1: the session record %s", why);
  uint8_t h[LEDGER_HASH];
  ledger_chain(r->prev, body, n, h);
  if (memcmp(h, stored, LEDGER_HASH) == 0)
    return bad(r, e,
               "malformed: seq %" PRIu64 ": the body %s (its chain hash matches: its "
               "producer wrote it so)",
               e, why);
  return bad(r, e, "altered: seq %" PRIu64 ": the body %s", e, why);
}

/* Record 1 binds the chain to the session id: h_0 comes from its id field. */
static int session_start(const struct fields *f, uint8_t h0[LEDGER_HASH], char *why, size_t whylen)
{
  uint8_t id[AIRLOCK_LEDGER_ID_LEN];
  if (!key_is(f->kind, f->kind_len, "session"))
    return ledger_fail(why, whylen, -1, "is kind '%.*s', not 'session'", (int)f->kind_len, f->kind);
  if (!f->has_id || f->dup_id || f->id_len != 2 * AIRLOCK_LEDGER_ID_LEN ||
      ledger_unhex(f->id, AIRLOCK_LEDGER_ID_LEN, id) < 0)
    return ledger_fail(why, whylen, -1, "has no valid 'id' (32 hex digits)");
  if (!f->has_created) return ledger_fail(why, whylen, -1, "lacks field 'created'");
  ledger_h0(id, h0);
  return 0;
}

/* A complete record at buf + pos: check it, and on success hand it out. */
static int take(airlock_ledger_reader *r, uint32_t n, airlock_ledger_record *rec)
{
  const uint8_t *body = r->buf + r->pos + LEDGER_HDR;
  const uint8_t *stored = body + n;
  uint64_t e = r->expect, next_at = r->off + LEDGER_HDR + n + LEDGER_HASH;
  char why[200];
  struct fields f;

  if (airlock_msg_check(body, n, why, sizeof why) < 0)
    return bad(r, e, "altered: seq %" PRIu64 ": the body is not valid msgpack (%s)", e, why);
  if (body_fields(body, n, &f, why, sizeof why) < 0) return bad_fields(r, body, n, stored, why);
  if (f.seq != e) return wrong_seq(r, f.seq, stored, next_at);
  if (e == 1) {
    if (session_start(&f, r->prev, why, sizeof why) < 0) return bad_fields(r, body, n, stored, why);
    for (int i = 0; i < 2 * AIRLOCK_LEDGER_ID_LEN; i++)
      r->rep.session_id[i] = (char)(f.id[i] | 0x20); /* lower case; digits keep theirs */
    r->rep.session_id[2 * AIRLOCK_LEDGER_ID_LEN] = '\0';
  } else if (key_is(f.kind, f.kind_len, "session")) {
    return bad_fields(r, body, n, stored, "is of kind 'session', which only seq 1 may be");
  }
  uint8_t h[LEDGER_HASH];
  ledger_chain(r->prev, body, n, h);
  if (memcmp(h, stored, LEDGER_HASH) != 0) return wrong_hash(r, h, stored, next_at);

  if (r->decode) {
    size_t off = 0;
    msgpack_zone_clear(&r->zone);
    if (msgpack_unpack((const char *)body, n, &off, &r->zone, &r->body) != MSGPACK_UNPACK_SUCCESS) {
      snprintf(r->rep.reason, sizeof r->rep.reason, "io: out of memory decoding seq %" PRIu64, e);
      snprintf(r->err, sizeof r->err, "ledger: %s: %s", r->path, r->rep.reason);
      return r->state = -ENOMEM;
    }
  }
  memcpy(r->prev, stored, LEDGER_HASH);
  memset(rec, 0, sizeof *rec);
  rec->seq = e;
  rec->run = f.run;
  rec->t = f.t;
  memcpy(rec->kind, f.kind, f.kind_len);
  rec->kind[f.kind_len] = '\0';
  rec->body = r->decode ? &r->body : NULL;
  rec->raw = body;
  rec->raw_len = n;
  memcpy(rec->hash, stored, LEDGER_HASH);
  rec->offset = r->off;

  r->rep.records++;
  r->rep.last_seq = e;
  r->rep.bytes = next_at;
  r->expect = e + 1;
  r->pos += LEDGER_HDR + n + LEDGER_HASH;
  r->off = next_at;
  return 1;
}

/* A length header of 0: a file system can leave a zero-filled tail after a
** crash (the size was updated, the data never written). Only zeros up to the
** end make it torn; anything else is damage. */
static int zero_tail(airlock_ledger_reader *r)
{
  uint64_t at = r->off, count = 0;
  for (;;) {
    for (size_t i = r->pos; i < r->len; i++)
      if (r->buf[i] != 0)
        return bad(r, r->expect, "altered: seq %" PRIu64 ": the record at offset %" PRIu64 " has length 0",
                   r->expect, at);
    count += r->len - r->pos;
    r->pos = r->len;
    int rc = fill(r, 1);
    if (rc < 0) return io_error(r, rc);
    if (rc == 1) break;
  }
  return torn(r, count, "only zero bytes (a tail the file system extended but never wrote)");
}

/* The file ends inside a record. A torn write leaves a prefix of one record;
** a bad length in the middle of the journal would claim bytes that hold a
** complete body and more records, which no prefix can. */
static int partial(airlock_ledger_reader *r, uint32_t n)
{
  size_t avail = r->len - r->pos, have = avail - LEDGER_HDR;
  const uint8_t *body = r->buf + r->pos + LEDGER_HDR;
  uint64_t e = r->expect;
  char why[200];
  if (have < n) {
    if (airlock_msg_check_prefix(body, have, why, sizeof why) == 1) return torn(r, avail, "a partial body");
    return bad(r, e,
               "altered: seq %" PRIu64 ": the record at offset %" PRIu64 " claims %" PRIu32
               " bytes, but the %zu bytes left are not the start of one body (%s)",
               e, r->off, n, have, why);
  }
  /* the body is whole; the stored hash is cut short: what is there must be the
  ** start of the right hash */
  struct fields f;
  uint8_t prev[LEDGER_HASH], h[LEDGER_HASH];
  memcpy(prev, r->prev, LEDGER_HASH);
  if (airlock_msg_check(body, n, NULL, 0) == 0 && body_fields(body, n, &f, NULL, 0) == 0 && f.seq == e &&
      (e > 1 || session_start(&f, prev, NULL, 0) == 0)) {
    ledger_chain(prev, body, n, h);
    if (memcmp(h, body + n, have - n) == 0) return torn(r, avail, "a whole body and part of its chain hash");
  }
  return bad(r, e,
             "altered: seq %" PRIu64 ": the last record, at offset %" PRIu64
             ", is cut short and its bytes do not match what was written",
             e, r->off);
}

int airlock_ledger_reader_next(airlock_ledger_reader *r, airlock_ledger_record *rec)
{
  if (r->state != 0) return r->state < 0 ? r->state : 0;
  shrink(r);
  int rc = fill(r, LEDGER_HDR);
  if (rc < 0) return io_error(r, rc);
  size_t avail = r->len - r->pos;
  if (avail == 0) {
    r->state = 1;
    return 0;
  }
  if (rc == 1) return torn(r, avail, "part of a length header");
  uint32_t n = get_be32(r->buf + r->pos);
  if (n == 0) return zero_tail(r);
  /* SECURITY: the length is bounded before fill() grows the buffer for it. */
  if (n > AIRLOCK_LEDGER_BODY_MAX)
    return bad(r, r->expect,
               "altered: seq %" PRIu64 ": the record at offset %" PRIu64 " claims %" PRIu32
               " bytes, over the limit of %u",
               r->expect, r->off, n, AIRLOCK_LEDGER_BODY_MAX);
  rc = fill(r, LEDGER_HDR + (size_t)n + LEDGER_HASH);
  if (rc < 0) return io_error(r, rc);
  if (rc == 1) return partial(r, n);
  return take(r, n, rec);
}

/* ------------------------------------------------------------------ verify */

int airlock_ledger_verify(const char *dir, const uint64_t *checkpoint_seq,
                          const uint8_t checkpoint_hash[AIRLOCK_LEDGER_HASH_LEN], airlock_ledger_report *rep)
{
  memset(rep, 0, sizeof *rep);
  if (checkpoint_seq != NULL && (*checkpoint_seq == 0 || checkpoint_hash == NULL)) {
    snprintf(rep->reason, sizeof rep->reason, "io: a checkpoint needs a seq >= 1 and a hash");
    return -EINVAL;
  }
  airlock_ledger_reader *r;
  int rc = ledger_reader_open_dir(dir, 0, &r, rep->reason + 4, sizeof rep->reason - 4);
  if (rc < 0) {
    memcpy(rep->reason, "io: ", 4);
    return rc;
  }
  airlock_ledger_record rec;
  int seen = 0;
  while ((rc = airlock_ledger_reader_next(r, &rec)) == 1) {
    if (checkpoint_seq == NULL || rec.seq != *checkpoint_seq) continue;
    seen = 1;
    if (memcmp(rec.hash, checkpoint_hash, LEDGER_HASH) != 0) {
      char have[65], want[65];
      airlock_ledger_hex(rec.hash, have);
      airlock_ledger_hex(checkpoint_hash, want);
      rc = bad(r, rec.seq,
               "checkpoint: seq %" PRIu64 " has chain hash %s, the checkpoint says "
               "%s (rewritten up to there)",
               rec.seq, have, want);
      break;
    }
  }
  airlock_ledger_reader_report(r, rep);
  if (rc == 0 && checkpoint_seq != NULL && !seen) {
    rep->first_bad_seq = rep->last_seq + 1;
    snprintf(rep->reason, sizeof rep->reason,
             "truncated: the journal ends at seq %" PRIu64 ", before the checkpoint's seq %" PRIu64 "%s",
             rep->last_seq, *checkpoint_seq, rep->torn_bytes ? " (and a torn tail)" : "");
    rc = -EBADMSG;
  }
  airlock_ledger_reader_close(r);
  return rc;
}
