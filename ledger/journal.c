/*
** journal.c -- writing a journal: the writer lock, recovery on open (verify,
** cut a torn tail), appends with the three durability modes and a sticky
** failure state, and branching a session from a prefix of another. Sealing
** the journal into segments is segment.c's.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#include "airlock.h"
#include "journal_int.h"

#define KEEP_MAX (1u << 20) /* a record buffer larger than this is freed after use */

#define WQ_MAX (1u << 20) /* records kept unwritten at most (bytes) */

static double mono_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double unix_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int ledger_set_err(airlock_ledger *l, int rc, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->err, sizeof l->err, fmt, ap);
  va_end(ap);
  return rc;
}

int ledger_write_all(int fd, const void *p, size_t n, size_t *done)
{
  const char *c = p;
  *done = 0;
  while (n > 0) {
    ssize_t k = write(fd, c, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    c += k;
    n -= (size_t)k;
    *done += (size_t)k;
  }
  return 0;
}

int ledger_fsync_path(const char *path)
{
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -errno;
  int rc = fsync(fd) < 0 ? -errno : 0;
  close(fd);
  return rc;
}

/* fsyncs the directory that holds path (so a new entry in it is durable). */
static int fsync_parent(const char *path)
{
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  while (n > 0 && path[n - 1] != '/') n--;
  while (n > 1 && path[n - 1] == '/') n--;
  if (n == 0) return ledger_fsync_path(".");
  char *parent = strndup(path, n);
  if (parent == NULL) return -ENOMEM;
  int rc = ledger_fsync_path(parent);
  free(parent);
  return rc;
}

/* ------------------------------------------------------------------ fields */

static int is_key(const msgpack_object *k, const char *s)
{
  size_t n = strlen(s);
  return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && memcmp(k->via.str.ptr, s, n) == 0;
}

/* Caller fields: a map with string keys, none of them one of reserved. */
static int check_fields(airlock_ledger *l, const msgpack_object *fields, const char *const *reserved)
{
  if (fields == NULL) return 0;
  if (fields->type != MSGPACK_OBJECT_MAP)
    return ledger_set_err(l, -EINVAL, "ledger: record fields must be a map");
  if (fields->via.map.size > UINT32_MAX - 8)
    return ledger_set_err(l, -EINVAL, "ledger: too many record fields");
  for (uint32_t i = 0; i < fields->via.map.size; i++) {
    const msgpack_object *k = &fields->via.map.ptr[i].key;
    if (k->type != MSGPACK_OBJECT_STR)
      return ledger_set_err(l, -EINVAL, "ledger: record field #%" PRIu32 " has a key that is not a string",
                            i + 1);
    for (const char *const *r = reserved; *r != NULL; r++)
      if (is_key(k, *r))
        return ledger_set_err(l, -EINVAL, "ledger: field '%s' is the ledger's own and cannot be given", *r);
  }
  return 0;
}

static const char *const reserved_record[] = {"seq", "kind", "run", "t", NULL};
static const char *const reserved_session[] = {"seq", "kind", "run", "t", "id", "created", NULL};

/* Starts a record in l->sb: header placeholder, the map header and the four
** fields every body begins with. extra counts the pairs the caller adds. */
static int begin_record(airlock_ledger *l, const char *kind, uint64_t run, double t, uint32_t extra)
{
  static const char zero[LEDGER_HDR];
  msgpack_sbuffer_clear(&l->sb);
  int bad = msgpack_sbuffer_write(&l->sb, zero, sizeof zero);
  bad |= msgpack_pack_map(&l->pk, 4 + extra);
  bad |= msgpack_sbuffer_write(&l->sb, "\xa3seq", 4);
  bad |= msgpack_pack_uint64(&l->pk, l->seq + 1);
  bad |= msgpack_sbuffer_write(&l->sb, "\xa4kind", 5);
  airlock_pack_cstr(&l->pk, kind);
  bad |= msgpack_sbuffer_write(&l->sb, "\xa3run", 4);
  bad |= msgpack_pack_uint64(&l->pk, run);
  bad |= msgpack_sbuffer_write(&l->sb, "\xa1t", 2);
  bad |= msgpack_pack_double(&l->pk, t);
  return bad ? -ENOMEM : 0;
}

static int pack_fields(airlock_ledger *l, const msgpack_object *fields)
{
  int bad = 0;
  for (uint32_t i = 0; fields != NULL && i < fields->via.map.size; i++) {
    bad |= msgpack_pack_object(&l->pk, fields->via.map.ptr[i].key);
    bad |= msgpack_pack_object(&l->pk, fields->via.map.ptr[i].val);
  }
  return bad ? -ENOMEM : 0;
}

static void release_big_buffer(airlock_ledger *l)
{
  if (l->sb.alloc > KEEP_MAX) {
    msgpack_sbuffer_destroy(&l->sb);
    msgpack_sbuffer_init(&l->sb);
  }
}

/* ------------------------------------------------------------------ commit */

/* A write or sync failed: no partial record may stay, and nothing more may be
** appended, since the state of the file is no longer known. */
static int broken(airlock_ledger *l, int e, const char *what, uint64_t seq, size_t written)
{
  l->sticky = e;
  char tail[160];
  if (written == 0 && strcmp(what, "write") == 0) {
    snprintf(tail, sizeof tail, "nothing of it was written: the journal still ends whole at seq %" PRIu64,
             l->seq);
  } else {
    int cut = ftruncate(l->fd, (off_t)(l->off - l->base)) == 0 ? 0 : -errno;
    if (cut == 0)
      snprintf(tail, sizeof tail, "the journal was cut back to seq %" PRIu64, l->seq);
    else
      snprintf(tail, sizeof tail,
               "cutting the partial record off failed too (%s): the next "
               "open truncates it",
               airlock_strerror(-cut));
  }
  const char *hint = e == -EROFS ? " (the file system holding the ledger is read-only now: the "
                                   "kernel remounts it so after an I/O error; see dmesg, check "
                                   "the disk, then move the ledger or remount it)"
                     : e == -ENOSPC || e == -EDQUOT ? " (the disk or quota is full: free space, "
                                                      "then open the ledger again)"
                     : e == -EIO                    ? " (an I/O error: see dmesg and check the disk)"
                                                    : "";
  return ledger_set_err(l, e,
                        "ledger: %s of seq %" PRIu64 " to %s failed: %s%s; %s; the ledger "
                        "refuses further appends",
                        what, seq, l->journal, airlock_strerror(-e), hint, tail);
}

int ledger_sync_now(airlock_ledger *l)
{
  int wr = ledger_write_out(l);
  if (wr < 0) return wr;
  if (l->durable_seq == l->seq) {
    l->pending_since = 0;
    return 0;
  }
  if (fdatasync(l->fd) < 0) {
    int e = -errno;
    l->sticky = e;
    return ledger_set_err(l, e,
                          "ledger: fdatasync of %s failed: %s; records after seq %" PRIu64
                          " may not be on disk; the ledger refuses further appends",
                          l->journal, airlock_strerror(-e), l->durable_seq);
  }
  l->durable_seq = l->seq;
  l->pending_since = 0;
  return 0;
}

static int window_passed(const airlock_ledger *l, double now)
{
  return l->durable_seq != l->seq && now - l->pending_since >= (double)l->batch_ms;
}

/* l->sb holds the header placeholder and a body for seq l->seq + 1: finish the
** record, write it whole, and make it as durable as the mode says. */
static int commit(airlock_ledger *l)
{
  uint64_t seq = l->seq + 1;
  size_t len = l->sb.size - LEDGER_HDR;
  if (len == 0 || len > AIRLOCK_LEDGER_BODY_MAX) {
    release_big_buffer(l);
    return ledger_set_err(l, -EMSGSIZE,
                          "ledger: record seq %" PRIu64 " is %zu bytes, over the limit "
                          "of %u",
                          seq, len, AIRLOCK_LEDGER_BODY_MAX);
  }
  uint8_t *p = (uint8_t *)l->sb.data;
  p[0] = (uint8_t)(len >> 24);
  p[1] = (uint8_t)(len >> 16);
  p[2] = (uint8_t)(len >> 8);
  p[3] = (uint8_t)len;
  uint8_t h[LEDGER_HASH];
  ledger_chain(l->head, p + LEDGER_HDR, len, h);
  if (msgpack_sbuffer_write(&l->sb, (const char *)h, sizeof h) != 0)
    return ledger_set_err(l, -ENOMEM, "ledger: out of memory for record seq %" PRIu64, seq);

  /* batch: a window that has passed is closed before this record opens the next
  ** (coalesce: by the caller's tick, after it has answered what it accepted) */
  /* the clock only when a window is to be checked or opened */
  double now =
      l->durability == AIRLOCK_DURABLE_BATCH && (!l->coalesce || l->durable_seq == l->seq) ? mono_ms() : 0;
  if (l->durability == AIRLOCK_DURABLE_BATCH && !l->coalesce && window_passed(l, now)) {
    int rc = ledger_sync_now(l);
    if (rc < 0) return rc;
  }

  size_t written = 0;
  if (l->coalesce) {
    if (l->wq.size == 0) { /* the journal's end on disk, should the write fail */
      l->w_seq = l->seq;
      l->w_off = l->off;
      memcpy(l->w_head, l->head, sizeof l->w_head);
    }
    if (msgpack_sbuffer_write(&l->wq, l->sb.data, l->sb.size) != 0) {
      release_big_buffer(l);
      return ledger_set_err(l, -ENOMEM, "ledger: out of memory for record seq %" PRIu64, seq);
    }
  } else {
    int rc = ledger_write_all(l->fd, l->sb.data, l->sb.size, &written);
    if (rc < 0) return broken(l, rc, "write", seq, written);
    if (l->durability == AIRLOCK_DURABLE_ALWAYS && fdatasync(l->fd) < 0)
      return broken(l, -errno, "fdatasync", seq, written);
  }

  uint64_t size = l->sb.size;
  release_big_buffer(l);
  l->seq = seq;
  l->off += size;
  memcpy(l->head, h, sizeof h);
  if (l->durability == AIRLOCK_DURABLE_ALWAYS)
    l->durable_seq = seq;
  else if (l->durable_seq + 1 == seq)
    l->pending_since = now;
  if (l->coalesce && l->wq.size >= WQ_MAX) {
    int rc = ledger_write_out(l);
    if (rc < 0) return rc;
  }
  ledger_maybe_seal(l);
  return 0;
}

/* Coalesce: writes the records kept in wq, in one write(2). On failure none
** of them counts: seq, off and head go back to the journal's end on disk, the
** file is cut there, and the ledger is sticky. */
int ledger_write_out(airlock_ledger *l)
{
  if (l->wq.size == 0) return 0;
  size_t written;
  int rc = ledger_write_all(l->fd, l->wq.data, l->wq.size, &written);
  msgpack_sbuffer_clear(&l->wq);
  if (l->wq.alloc > 2 * WQ_MAX) {
    msgpack_sbuffer_destroy(&l->wq);
    msgpack_sbuffer_init(&l->wq);
  }
  if (rc < 0) {
    uint64_t first = l->w_seq + 1;
    l->seq = l->w_seq;
    l->off = l->w_off;
    memcpy(l->head, l->w_head, sizeof l->head);
    return broken(l, rc, "write", first, written);
  }
  return 0;
}

int airlock_ledger_write_out(airlock_ledger *l)
{
  if (l->sticky) return l->sticky;
  return ledger_write_out(l);
}

/* The record packed in l->sb, checked as a reader will read it (a body a
** reader would refuse, nesting over the limit, is never written) and
** committed. -> 0 with its seq in *seq_out, or the error. */
static int check_and_commit(airlock_ledger *l, uint64_t *seq_out)
{
  char why[160];
  size_t len = l->sb.size - LEDGER_HDR;
  if (len <= AIRLOCK_LEDGER_BODY_MAX &&
      airlock_msg_check(l->sb.data + LEDGER_HDR, len, why, sizeof why) < 0) {
    release_big_buffer(l);
    return ledger_set_err(l, -EINVAL, "ledger: record seq %" PRIu64 " cannot be read back: %s", l->seq + 1,
                          why);
  }
  int rc = commit(l);
  if (rc < 0) return rc;
  if (seq_out != NULL) *seq_out = l->seq;
  return 0;
}

/* The journal is generic: what kinds of record there are is its users' (the
** Lua session layer writes init, call, reply, pause, resume, done). A kind
** is only held to be a short word, and "session" is the ledger's own. */
static int kind_word(const char *kind)
{
  if (kind == NULL || kind[0] < 'a' || kind[0] > 'z' || strcmp(kind, "session") == 0) return 0;
  size_t n = 0;
  for (char c = kind[0]; (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
       c = kind[++n])
    ;
  return n <= AIRLOCK_LEDGER_KIND_MAX && kind[n] == '\0';
}

/* 0 when l takes a record of this kind now, else the error: a sticky one,
** or a kind that is not a record kind. */
static int may_append(airlock_ledger *l, const char *kind)
{
  if (l->sticky) return l->sticky;
  if (!kind_word(kind))
    return ledger_set_err(l, -EINVAL,
                          "ledger: '%.32s' is not a record kind: a word of 1 to %d "
                          "lower-case letters, digits, '.', '_' or '-', other than 'session' (the "
                          "ledger's own)",
                          kind ? kind : "(null)", AIRLOCK_LEDGER_KIND_MAX);
  return 0;
}

int airlock_ledger_append(airlock_ledger *l, const char *kind, uint64_t run, const msgpack_object *fields,
                          uint64_t *seq_out)
{
  int rc = may_append(l, kind);
  if (rc < 0) return rc;
  rc = check_fields(l, fields, reserved_record);
  if (rc < 0) return rc;
  uint32_t extra = fields ? fields->via.map.size : 0;
  if (begin_record(l, kind, run, unix_now(), extra) < 0 || pack_fields(l, fields) < 0) {
    release_big_buffer(l);
    return ledger_set_err(l, -ENOMEM, "ledger: out of memory packing record seq %" PRIu64, l->seq + 1);
  }
  return check_and_commit(l, seq_out);
}

/* Skips one msgpack object at b[*pos, len): 0, or -1 when it does not fit.
** Iterative (a count of objects still owed, no recursion); each object takes
** at least a byte, so a count larger than the bytes left fails at once. The
** record built from it is walked again by airlock_msg_check (nesting, size). */
static int skip_object(const uint8_t *b, size_t len, size_t *pos)
{
  uint64_t owed = 1;
  size_t p = *pos;
  while (owed > 0) {
    if (p >= len || owed > len - p) return -1;
    owed--;
    uint8_t tag = b[p++];
    uint64_t skip = 0, items = 0;
    unsigned lb = 0;
    if (tag <= 0x7f || tag >= 0xe0 || tag == 0xc0 || tag == 0xc2 || tag == 0xc3) {
      /* fixint, nil, bool */
    } else if (tag <= 0x8f) {
      items = 2u * (tag & 0x0f);
    } else if (tag <= 0x9f) {
      items = tag & 0x0f;
    } else if (tag <= 0xbf) {
      skip = tag & 0x1f;
    } else {
      switch (tag) {
        case 0xc4:
        case 0xc5:
        case 0xc6: lb = 1u << (tag - 0xc4); break; /* bin */
        case 0xc7:
        case 0xc8:
        case 0xc9:
          lb = 1u << (tag - 0xc7);
          skip = 1;
          break; /* ext */
        case 0xca: skip = 4; break;
        case 0xcb: skip = 8; break;
        case 0xcc:
        case 0xcd:
        case 0xce:
        case 0xcf: skip = 1u << (tag - 0xcc); break;
        case 0xd0:
        case 0xd1:
        case 0xd2:
        case 0xd3: skip = 1u << (tag - 0xd0); break;
        case 0xd4:
        case 0xd5:
        case 0xd6:
        case 0xd7:
        case 0xd8: skip = 1 + (1u << (tag - 0xd4)); break;
        case 0xd9:
        case 0xda:
        case 0xdb: lb = 1u << (tag - 0xd9); break; /* str */
        case 0xdc:
        case 0xdd:
          lb = 2u << (tag - 0xdc);
          items = 1;
          break; /* array */
        case 0xde:
        case 0xdf:
          lb = 2u << (tag - 0xde);
          items = 2;
          break; /* map */
        default: return -1;
      }
    }
    if (lb > 0) {
      if (len - p < lb) return -1;
      uint64_t n = 0;
      for (unsigned i = 0; i < lb; i++) n = n << 8 | b[p + i];
      p += lb;
      if (items > 0)
        items *= n; /* array: n, map: 2n */
      else
        skip += n;
    }
    if (skip > len - p) return -1;
    p += (size_t)skip;
    owed += items;
  }
  *pos = p;
  return 0;
}

int airlock_ledger_append_packed(airlock_ledger *l, const char *kind, uint64_t run, const void *fields,
                                 size_t n, uint64_t *seq_out)
{
  int rc = may_append(l, kind);
  if (rc < 0) return rc;
  /* SECURITY: the fields are a producer's bytes: the top-level map's keys are
  ** read with every length bounded, and the body they go into is checked
  ** whole (airlock_msg_check) before it is hashed or written. */
  const uint8_t *b = fields;
  uint64_t count = 0;
  size_t pos = 0;
  if (n > 0) {
    if (b[0] >= 0x80 && b[0] <= 0x8f) {
      count = b[0] & 0x0f;
      pos = 1;
    } else if ((b[0] == 0xde && n >= 3) || (b[0] == 0xdf && n >= 5)) {
      unsigned lb = b[0] == 0xde ? 2 : 4;
      for (unsigned i = 0; i < lb; i++) count = count << 8 | b[1 + i];
      pos = 1 + lb;
    } else {
      return ledger_set_err(l, -EPROTO, "ledger: record fields must be a map");
    }
  }
  if (count > (n - pos) / 2 || count > UINT32_MAX - 8)
    return ledger_set_err(l, -EPROTO, "ledger: record fields claim %" PRIu64 " pairs in %zu bytes", count, n);
  size_t entries = pos;
  for (uint64_t i = 0; i < count; i++) {
    if (pos >= n)
      return ledger_set_err(l, -EPROTO, "ledger: record fields claim %" PRIu64 " pairs and hold %" PRIu64,
                            count, i);
    uint8_t tag = b[pos];
    uint64_t kn = 0;
    size_t at = pos + 1;
    if (tag >= 0xa0 && tag <= 0xbf) {
      kn = tag & 0x1f;
    } else if (tag >= 0xd9 && tag <= 0xdb) {
      unsigned lb = 1u << (tag - 0xd9);
      if (n - at < lb)
        return ledger_set_err(l, -EPROTO, "ledger: record field #%" PRIu64 " is cut short", i + 1);
      for (unsigned k = 0; k < lb; k++) kn = kn << 8 | b[at + k];
      at += lb;
    } else {
      return ledger_set_err(l, -EINVAL, "ledger: record field #%" PRIu64 " has a key that is not a string",
                            i + 1);
    }
    if (kn > n - at)
      return ledger_set_err(l, -EPROTO, "ledger: record field #%" PRIu64 " is cut short", i + 1);
    for (const char *const *r = reserved_record; *r != NULL; r++)
      if (strlen(*r) == kn && memcmp(b + at, *r, kn) == 0)
        return ledger_set_err(l, -EINVAL, "ledger: field '%s' is the ledger's own and cannot be given", *r);
    pos = at + (size_t)kn;
    if (skip_object(b, n, &pos) < 0)
      return ledger_set_err(l, -EPROTO, "ledger: record field #%" PRIu64 " is not a whole msgpack value",
                            i + 1);
  }
  if (pos != n) return ledger_set_err(l, -EPROTO, "ledger: %zu bytes follow the record fields' map", n - pos);
  if (begin_record(l, kind, run, unix_now(), (uint32_t)count) < 0 ||
      msgpack_sbuffer_write(&l->sb, (const char *)b + entries, n - entries) != 0) {
    release_big_buffer(l);
    return ledger_set_err(l, -ENOMEM, "ledger: out of memory packing record seq %" PRIu64, l->seq + 1);
  }
  return check_and_commit(l, seq_out);
}

/* Appends a body as it is (branch copies records); its seq must be the next. */
static int append_raw(airlock_ledger *l, const void *body, size_t len)
{
  static const char zero[LEDGER_HDR];
  if (l->sticky) return l->sticky;
  msgpack_sbuffer_clear(&l->sb);
  if (msgpack_sbuffer_write(&l->sb, zero, sizeof zero) != 0 ||
      msgpack_sbuffer_write(&l->sb, body, len) != 0) {
    release_big_buffer(l);
    return ledger_set_err(l, -ENOMEM, "ledger: out of memory copying record seq %" PRIu64, l->seq + 1);
  }
  return commit(l);
}

/* The first record of a new session. */
static int write_session(airlock_ledger *l, const msgpack_object *fields)
{
  uint8_t id[AIRLOCK_LEDGER_ID_LEN];
  size_t got = 0;
  while (got < sizeof id) { /* the kernel's CSPRNG; small reads never come short once seeded */
    ssize_t n = getrandom(id + got, sizeof id - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return ledger_set_err(l, n < 0 ? -errno : -EIO, "ledger: getrandom for the session id failed");
    got += (size_t)n;
  }
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < sizeof id; i++) {
    l->id_hex[2 * i] = digits[id[i] >> 4];
    l->id_hex[2 * i + 1] = digits[id[i] & 15];
  }
  l->id_hex[2 * sizeof id] = '\0';
  ledger_h0(id, l->head);

  double t = unix_now();
  uint32_t extra = 2 + (fields ? fields->via.map.size : 0);
  int bad = begin_record(l, "session", 0, t, extra);
  airlock_pack_cstr(&l->pk, "id");
  airlock_pack_cstr(&l->pk, l->id_hex);
  airlock_pack_cstr(&l->pk, "created");
  bad |= msgpack_pack_double(&l->pk, t);
  if (bad || pack_fields(l, fields) < 0)
    return ledger_set_err(l, -ENOMEM, "ledger: out of memory packing the session record");
  int rc = commit(l);
  if (rc == 0) rc = ledger_sync_now(l);
  return rc;
}

/* ------------------------------------------------------------------ open and close */

/* The session directory must be a real directory (not a link: one planted by a
** program would point the ledger's writes anywhere), owned by this process's
** user and writable by nobody else. */
static int check_dir(airlock_ledger *l)
{
  int fd = open(l->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int e = -errno;
    if (e == -ELOOP || e == -ENOTDIR) {
      struct stat lst;
      if (lstat(l->dir, &lst) == 0 && S_ISLNK(lst.st_mode))
        return ledger_set_err(l, -ELOOP,
                              "ledger: %s is a symbolic link; give the real directory (a link could "
                              "send the ledger's writes anywhere)",
                              l->dir);
      return ledger_set_err(l, e, "ledger: %s is not a directory", l->dir);
    }
    if (e == -ENOENT)
      return ledger_set_err(l, e, "ledger: %s does not exist (open with create to start a session)", l->dir);
    return ledger_set_err(l, e, "ledger: cannot open %s: %s", l->dir, airlock_strerror(-e));
  }
  struct stat st;
  int rc = fstat(fd, &st) < 0 ? -errno : 0;
  close(fd);
  if (rc < 0) return ledger_set_err(l, rc, "ledger: cannot stat %s: %s", l->dir, airlock_strerror(-rc));
  if (st.st_uid != geteuid())
    return ledger_set_err(l, -EPERM,
                          "ledger: %s is owned by uid %u, not by this process's uid %u; a session "
                          "directory must be the writer's own",
                          l->dir, (unsigned)st.st_uid, (unsigned)geteuid());
  if (st.st_mode & 022)
    return ledger_set_err(l, -EPERM,
                          "ledger: %s is writable by %s (mode %03o); a session directory must be "
                          "writable by its owner alone (chmod go-w %s)",
                          l->dir, (st.st_mode & 002) ? "others" : "its group", (unsigned)(st.st_mode & 0777),
                          l->dir);
  return 0;
}

/* The missing parents of dir, as mkdir -p makes them (each new one 0700):
** the caller named the path. The session directory itself is checked after
** (check_dir: no link, owner-only). 0 or -errno. */
static int make_parents(const char *dir)
{
  char *p = strdup(dir);
  if (p == NULL) return -ENOMEM;
  for (char *s = p + 1; *s != '\0'; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
      int e = -errno;
      free(p);
      return e;
    }
    *s = '/';
  }
  free(p);
  return 0;
}

static int take_lock(airlock_ledger *l)
{
  char *path = ledger_join(l->dir, LEDGER_LOCK);
  if (path == NULL) return ledger_set_err(l, -ENOMEM, "ledger: out of memory");
  l->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  int e = l->lock_fd < 0 ? -errno : 0;
  free(path);
  if (e == -ENOENT)
    return ledger_set_err(l, e, "ledger: %s does not exist (open with create to start a session)", l->dir);
  if (e < 0)
    return ledger_set_err(l, e, "ledger: cannot open %s/%s: %s", l->dir, LEDGER_LOCK, airlock_strerror(-e));
  while (flock(l->lock_fd, LOCK_EX | LOCK_NB) < 0) {
    if (errno == EINTR) continue;
    e = -errno;
    if (e != -EWOULDBLOCK)
      return ledger_set_err(l, e, "ledger: cannot lock %s/%s: %s", l->dir, LEDGER_LOCK, airlock_strerror(-e));
    char buf[32] = "";
    ssize_t n = pread(l->lock_fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    long pid = strtol(buf, NULL, 10);
    if (pid > 0) return ledger_set_err(l, e, "ledger: %s is in use by pid %ld", l->dir, pid);
    return ledger_set_err(l, e,
                          "ledger: %s is in use by another process (it has not written its pid "
                          "yet)",
                          l->dir);
  }
  l->locked = 1;
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
  if (ftruncate(l->lock_fd, 0) < 0 || pwrite(l->lock_fd, buf, (size_t)n, 0) != n) {
    e = -errno;
    return ledger_set_err(l, e, "ledger: cannot write the pid into %s/%s: %s", l->dir, LEDGER_LOCK,
                          airlock_strerror(-e));
  }
  return 0;
}

static void free_ledger(airlock_ledger *l)
{
  if (l == NULL) return;
  ledger_seal_drop(l);
  if (l->fd >= 0) close(l->fd);
  if (l->lock_fd >= 0) {
    if (l->locked && ftruncate(l->lock_fd, 0) < 0) {
      /* the pid stays; the lock itself goes with the descriptor */
    }
    close(l->lock_fd);
  }
  msgpack_sbuffer_destroy(&l->sb);
  msgpack_sbuffer_destroy(&l->wq);
  free(l->dir);
  free(l->journal);
  free(l);
}

/* Scans the journal; cuts a torn tail (unless the open is going to fail for
** want of records anyway). Fills rep and l's position. */
static int recover(airlock_ledger *l, airlock_ledger_report *rep, int create)
{
  airlock_ledger_reader *r;
  int rc = ledger_reader_open_dir(l->dir, 0, &r, l->err, sizeof l->err);
  if (rc < 0) return rc;
  airlock_ledger_record rec;
  while ((rc = airlock_ledger_reader_next(r, &rec)) == 1)
    ;
  airlock_ledger_reader_report(r, rep);
  uint64_t stale = 0;
  ledger_reader_layout(r, &l->base, &l->nseg, &stale);
  if (rc == -EBADMSG)
    ledger_set_err(l, rc, "%s; the journal is left as it is and cannot be written",
                   airlock_ledger_reader_error(r));
  else if (rc < 0)
    ledger_set_err(l, rc, "%s", airlock_ledger_reader_error(r));
  airlock_ledger_reader_close(r);
  if (rc < 0) return rc;
  if (rep->last_seq == 0 && !create)
    return ledger_set_err(l, -ENOENT,
                          "ledger: %s holds no records%s (open with create to start a "
                          "session)",
                          l->journal, rep->torn_bytes ? ", only a torn one" : "");
  /* an unfinished seal left .tmp files; one cut short after its segment was
  ** in place left a journal that repeats the segment (the reader skipped it) */
  char tmp[4096];
  ledger_seg_name(l->dir, l->nseg + 1, ".tmp", tmp, sizeof tmp);
  unlink(tmp);
  snprintf(tmp, sizeof tmp, "%s.tmp", l->journal);
  unlink(tmp);
  if (stale && (rc = ledger_drop_repeat(l, stale)) < 0)
    return ledger_set_err(l, rc,
                          "ledger: replacing %s, which repeats segment.%06u after an interrupted "
                          "seal, failed: %s",
                          l->journal, l->nseg, airlock_strerror(-rc));
  if (rep->torn_bytes > 0 && (ftruncate(l->fd, (off_t)(rep->bytes - l->base)) < 0 || fdatasync(l->fd) < 0)) {
    int e = -errno;
    return ledger_set_err(l, e, "ledger: cutting the torn tail of %s at offset %" PRIu64 " failed: %s",
                          l->journal, rep->bytes - l->base, airlock_strerror(-e));
  }
  l->seq = rep->last_seq;
  l->off = rep->bytes;
  memcpy(l->head, rep->head, LEDGER_HASH);
  memcpy(l->id_hex, rep->session_id, sizeof l->id_hex);
  return 0;
}

int airlock_ledger_open(const char *dir, const airlock_ledger_opts *o, airlock_ledger **out,
                        airlock_ledger_report *rep, char *err, size_t errlen)
{
  static const airlock_ledger_opts defaults = {0};
  airlock_ledger_report local;
  if (o == NULL) o = &defaults;
  if (rep == NULL) rep = &local;
  memset(rep, 0, sizeof *rep);
  *out = NULL;
  if (dir == NULL || *dir == '\0') return ledger_fail(err, errlen, -EINVAL, "ledger: no directory given");
  if (o->durability < AIRLOCK_DURABLE_NONE || o->durability > AIRLOCK_DURABLE_ALWAYS)
    return ledger_fail(err, errlen, -EINVAL, "ledger: unknown durability %d", o->durability);
  int rc = ledger_crypto_init(err, errlen);
  if (rc < 0) return rc;

  airlock_ledger *l = calloc(1, sizeof *l);
  if (l == NULL) return ledger_fail(err, errlen, -ENOMEM, "ledger: out of memory");
  l->fd = l->lock_fd = l->sj.rfd = l->sj.wfd = l->sj.old_fd = -1;
  l->seal_stepped = o->seal_stepped;
  msgpack_sbuffer_init(&l->sb);
  msgpack_sbuffer_init(&l->wq);
  msgpack_packer_init(&l->pk, &l->sb, msgpack_sbuffer_write);
  l->durability = o->durability;
  l->batch_ms = o->batch_ms ? o->batch_ms : AIRLOCK_LEDGER_BATCH_MS_DEFAULT;
  l->seal_bytes = l->seal_at = o->seal_bytes ? o->seal_bytes : AIRLOCK_LEDGER_SEAL_DEFAULT;
  l->dir = strdup(dir);
  l->journal = ledger_join(dir, LEDGER_JOURNAL);
  if (l->dir == NULL || l->journal == NULL) {
    rc = ledger_set_err(l, -ENOMEM, "ledger: out of memory");
    goto fail;
  }
  if ((rc = check_fields(l, o->session_fields, reserved_session)) < 0) goto fail;

  int made_dir = 0;
  if (o->create) {
    int mk = mkdir(dir, 0700) == 0 ? 0 : -errno;
    if (mk == -ENOENT && (mk = make_parents(dir)) == 0) mk = mkdir(dir, 0700) == 0 ? 0 : -errno;
    errno = -mk;
    if (mk == 0) {
      made_dir = 1;
    } else if (errno != EEXIST) {
      rc = ledger_set_err(l, -errno, "ledger: cannot create %s: %s", dir, airlock_strerror(errno));
      goto fail;
    }
  }
  if ((rc = check_dir(l)) < 0 || (rc = take_lock(l)) < 0) goto fail;
  l->fd = open(l->journal, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (l->fd < 0 && errno == ENOENT && o->create) {
    l->fd = open(l->journal, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_CREAT | O_EXCL, 0600);
  }
  if (l->fd < 0) {
    rc = -errno;
    if (rc == -ENOENT)
      ledger_set_err(l, rc, "ledger: %s does not exist (open with create to start a session)", l->journal);
    else
      ledger_set_err(l, rc, "ledger: cannot open %s: %s", l->journal, airlock_strerror(-rc));
    goto fail;
  }
  if ((rc = recover(l, rep, o->create)) < 0) goto fail;

  if (l->seq == 0) {
    if ((rc = write_session(l, o->session_fields)) < 0) goto fail;
    l->created = 1;
    /* the names must survive a power cut as well as the record */
    if ((rc = ledger_fsync_path(dir)) < 0 || (made_dir && (rc = fsync_parent(dir)) < 0)) {
      ledger_set_err(l, rc, "ledger: fsync of the directory of %s failed: %s", l->journal,
                     airlock_strerror(-rc));
      goto fail;
    }
    rep->records = rep->last_seq = 1;
    rep->bytes = l->off;
    memcpy(rep->head, l->head, LEDGER_HASH);
    memcpy(rep->session_id, l->id_hex, sizeof rep->session_id);
  } else if (fdatasync(l->fd) < 0) {
    rc = ledger_set_err(l, -errno, "ledger: fdatasync of %s failed: %s", l->journal, airlock_strerror(errno));
    goto fail;
  }
  l->durable_seq = l->seq;
  l->coalesce = o->coalesce && l->durability != AIRLOCK_DURABLE_ALWAYS;
  *out = l;
  return 0;

fail:
  ledger_fail(err, errlen, rc, "%s", l->err);
  free_ledger(l);
  return rc;
}

int airlock_ledger_tick(airlock_ledger *l)
{
  if (l->sticky) return l->sticky;
  if (l->durability == AIRLOCK_DURABLE_BATCH && window_passed(l, mono_ms())) return ledger_sync_now(l);
  return 0;
}

int airlock_ledger_sync_due_ms(const airlock_ledger *l)
{
  if (l->sticky || l->durability != AIRLOCK_DURABLE_BATCH || l->durable_seq == l->seq) return -1;
  double left = l->pending_since + (double)l->batch_ms - mono_ms();
  if (left <= 0) return 0;
  return (int)left + 1;
}

int airlock_ledger_flush(airlock_ledger *l)
{
  if (l->sticky) return l->sticky;
  return ledger_sync_now(l);
}

int airlock_ledger_durability(const airlock_ledger *l)
{
  return l->durability;
}

uint64_t airlock_ledger_durable_seq(const airlock_ledger *l)
{
  return l->durable_seq;
}

uint64_t airlock_ledger_size(const airlock_ledger *l)
{
  return l->off;
}

void airlock_ledger_head(const airlock_ledger *l, uint64_t *seq, uint8_t hash[AIRLOCK_LEDGER_HASH_LEN])
{
  if (seq != NULL) *seq = l->seq;
  if (hash != NULL) memcpy(hash, l->head, LEDGER_HASH);
}

const char *airlock_ledger_session_id(const airlock_ledger *l)
{
  return l->id_hex;
}

const char *airlock_ledger_error(const airlock_ledger *l)
{
  return l->err;
}

int airlock_ledger_close(airlock_ledger *l)
{
  if (l == NULL) return 0;
  /* Durability none promised no sync, and a host closing many sessions on its
  ** event loop should not pay one each. */
  int rc = ledger_seal_finish(l); /* a seal in progress is finished: nobody waits now */
  if (rc == 0) rc = l->durability == AIRLOCK_DURABLE_NONE ? ledger_write_out(l) : ledger_sync_now(l);
  free_ledger(l);
  return rc;
}

/* ------------------------------------------------------------------ branch */

static msgpack_object str_object(const char *s, size_t n)
{
  msgpack_object o = {.type = MSGPACK_OBJECT_STR};
  o.via.str.ptr = s;
  o.via.str.size = (uint32_t)n;
  return o;
}

/* Reads src up to at_seq; fills the chain hash there. */
static int prefix_head(const char *src, uint64_t at_seq, uint8_t hash[LEDGER_HASH], char *err, size_t errlen)
{
  airlock_ledger_reader *r;
  int rc = airlock_ledger_reader_open(src, &r, err, errlen);
  if (rc < 0) return rc;
  airlock_ledger_record rec;
  while ((rc = airlock_ledger_reader_next(r, &rec)) == 1 && rec.seq < at_seq)
    ;
  if (rc == 1) {
    memcpy(hash, rec.hash, LEDGER_HASH);
    rc = 0;
  } else if (rc == 0) {
    airlock_ledger_report rep;
    airlock_ledger_reader_report(r, &rep);
    rc = ledger_fail(err, errlen, -ERANGE, "ledger: %s ends at seq %" PRIu64 ", before seq %" PRIu64, src,
                     rep.last_seq, at_seq);
  } else {
    ledger_fail(err, errlen, rc, "ledger: cannot branch: %s", airlock_ledger_reader_error(r));
  }
  airlock_ledger_reader_close(r);
  return rc;
}

/* Copies the prefix: reads src again (verifying as it goes), writes dst. */
static int copy_prefix(const char *src, uint64_t at_seq, const uint8_t want[LEDGER_HASH], const char *dst,
                       char *err, size_t errlen)
{
  airlock_ledger_reader *r;
  int rc = airlock_ledger_reader_open(src, &r, err, errlen);
  if (rc < 0) return rc;
  airlock_ledger_record rec;
  airlock_ledger *l = NULL;
  msgpack_object_kv *kv = NULL;
  if ((rc = airlock_ledger_reader_next(r, &rec)) != 1) {
    rc = ledger_fail(err, errlen, rc < 0 ? rc : -EBADMSG, "ledger: cannot branch: %s",
                     airlock_ledger_reader_error(r));
    goto out;
  }

  /* the new session: src's own fields, and where it came from */
  char head[96];
  airlock_ledger_format_checkpoint(at_seq, want, head, sizeof head);
  const msgpack_object *body = rec.body;
  kv = calloc(body->via.map.size + 1, sizeof *kv);
  if (kv == NULL) {
    rc = ledger_fail(err, errlen, -ENOMEM, "ledger: out of memory");
    goto out;
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < body->via.map.size; i++) {
    const msgpack_object *k = &body->via.map.ptr[i].key;
    int own = is_key(k, "branch");
    for (const char *const *p = reserved_session; *p != NULL && !own; p++) own = is_key(k, *p);
    if (!own) kv[n++] = body->via.map.ptr[i];
  }
  char src_id[sizeof((airlock_ledger_report *)0)->session_id];
  airlock_ledger_report rep;
  airlock_ledger_reader_report(r, &rep);
  memcpy(src_id, rep.session_id, sizeof src_id);
  msgpack_object_kv from[3] = {
      {.key = str_object("from", 4), .val = str_object(src_id, strlen(src_id))},
      {.key = str_object("at", 2), .val = {.type = MSGPACK_OBJECT_POSITIVE_INTEGER}},
      {.key = str_object("head", 4), .val = str_object(head, strlen(head))},
  };
  from[1].val.via.u64 = at_seq;
  kv[n].key = str_object("branch", 6);
  kv[n].val.type = MSGPACK_OBJECT_MAP;
  kv[n].val.via.map.ptr = from;
  kv[n].val.via.map.size = 3;
  n++;
  msgpack_object fields = {.type = MSGPACK_OBJECT_MAP};
  fields.via.map.ptr = kv;
  fields.via.map.size = n;
  airlock_ledger_opts o = {.create = 1, .durability = AIRLOCK_DURABLE_NONE, .session_fields = &fields};
  if ((rc = airlock_ledger_open(dst, &o, &l, NULL, err, errlen)) < 0) goto out;
  if (!l->created) {
    rc = ledger_fail(err, errlen, -EEXIST, "ledger: %s already holds records", dst);
    goto out;
  }

  while (rec.seq < at_seq) {
    if ((rc = airlock_ledger_reader_next(r, &rec)) != 1) {
      rc = ledger_fail(err, errlen, rc < 0 ? rc : -EAGAIN, "ledger: cannot branch: %s",
                       rc < 0 ? airlock_ledger_reader_error(r) : "the source got shorter");
      goto out;
    }
    if ((rc = append_raw(l, rec.raw, rec.raw_len)) < 0) {
      ledger_fail(err, errlen, rc, "%s", airlock_ledger_error(l));
      goto out;
    }
  }
  if (memcmp(rec.hash, want, LEDGER_HASH) != 0) {
    rc = ledger_fail(err, errlen, -EAGAIN, "ledger: cannot branch: %s changed while it was read", src);
    goto out;
  }
  if ((rc = airlock_ledger_flush(l)) < 0) ledger_fail(err, errlen, rc, "%s", airlock_ledger_error(l));

out:
  if (l != NULL && rc < 0 && l->created) {
    /* leave no half-made session behind (the lock is still held) */
    char *j = ledger_join(dst, LEDGER_JOURNAL);
    if (j != NULL) unlink(j);
    free(j);
    char seg[4096];
    for (unsigned i = 1; i <= l->nseg; i++) {
      ledger_seg_name(dst, i, NULL, seg, sizeof seg);
      unlink(seg);
    }
  }
  int crc = airlock_ledger_close(l);
  if (rc == 0 && crc < 0)
    rc = ledger_fail(err, errlen, crc, "ledger: closing %s failed: %s", dst, airlock_strerror(-crc));
  free(kv);
  airlock_ledger_reader_close(r);
  return rc;
}

int airlock_ledger_branch(const char *src, uint64_t at_seq, const char *dst, char *err, size_t errlen)
{
  if (at_seq == 0) return ledger_fail(err, errlen, -ERANGE, "ledger: a branch needs a seq of at least 1");
  int rc = ledger_crypto_init(err, errlen);
  if (rc < 0) return rc;
  char *j = ledger_join(dst, LEDGER_JOURNAL);
  if (j == NULL) return ledger_fail(err, errlen, -ENOMEM, "ledger: out of memory");
  struct stat st;
  int exists = stat(j, &st) == 0 && st.st_size > 0;
  free(j);
  if (exists) return ledger_fail(err, errlen, -EEXIST, "ledger: %s already holds a journal", dst);
  uint8_t want[LEDGER_HASH];
  if ((rc = prefix_head(src, at_seq, want, err, errlen)) < 0) return rc;
  return copy_prefix(src, at_seq, want, dst, err, errlen);
}
