/*
** lcheckpoint.c -- what `airlock ledger checkpoint` and `verify --checkpoint
** FILE` need from C: HMAC-SHA256 (OpenSSL), the files kept outside a
** session's directory (a key, a checkpoint file), and one walk of a journal,
** in a read-only ledger process, that learns the chain hash at many seqs.
**
**   core.sha256(data)                        -> 64 lowercase hex digits
**   core.sha256_load()                       -> true, or nil, message
**   core.hmac_sha256(key, data)              -> 64 lowercase hex digits
**   core.checkpoint_outside(path, dir)       -> true, or nil, message
**   core.checkpoint_key(path, dir)           -> key bytes, or nil, message
**   core.checkpoint_append(path, line, dir)  -> true, or nil, message
**   core.ledger_proc_verify_at(program, dir, {seq, ...})
**                                            -> report, {hex or false, ...},
**                                               or nil, message, errno
**
** The files are the host's, so the host opens them; the journal is the
** ledger process's alone. A failure is nil and a message starting with its
** cause word (key:, checkpoint:, ledger:); a wrong argument raises.
** Both digests are OpenSSL's, loaded on first use (core/sha256.h).
*/
#include "lbinding.h"
#include "ledger.h"
#include "ledger_proc.h"
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_MIN 32
#define KEY_MAX 4096

static int fail(lua_State *L, const char *message, int err)
{
  lua_pushnil(L);
  lua_pushstring(L, message);
  lua_pushinteger(L, err);
  return 3;
}

/* core.sha256(data) -> hex (the policy digest, specs) */
static int l_sha256(lua_State *L)
{
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  char hex[65], err[300];
  if (airlock_sha256_hex(s, len, hex, err, sizeof err) != 0) return luaL_error(L, "%s", err);
  lua_pushstring(L, hex);
  return 1;
}

/* core.sha256_load() -> true, or nil, message: OpenSSL opened now (it is
** opened on first use: core/sha256.h), for a caller that will hash later and
** is idle now. */
static int l_sha256_load(lua_State *L)
{
  char err[300];
  if (airlock_sha256_load(err, sizeof err) != 0) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* core.hmac_sha256(key, data) -> hex */
static int l_hmac_sha256(lua_State *L)
{
  size_t klen, dlen;
  const char *key = luaL_checklstring(L, 1, &klen);
  const char *data = luaL_checklstring(L, 2, &dlen);
  if (klen == 0 || klen > INT_MAX) return luaL_argerror(L, 1, "a key of 1 byte or more");
  uint8_t md[AIRLOCK_SHA256_LEN];
  char hex[65], err[300];
  if (airlock_hmac_sha256(key, klen, data, dlen, md, err, sizeof err) != 0) return luaL_error(L, "%s", err);
  airlock_ledger_hex(md, hex);
  lua_pushstring(L, hex);
  return 1;
}

/* Is real (a resolved path) dir_real or beneath it? */
static int beneath(const char *real, const char *dir_real)
{
  size_t n = strlen(dir_real);
  if (n == 1 && dir_real[0] == '/') return 1;
  return strncmp(real, dir_real, n) == 0 && (real[n] == '\0' || real[n] == '/');
}

/* 0 when path, and every prefix of it that exists, resolves outside dir;
** else -1 with why in msg (what: "the key file", "the checkpoint file"). A
** prefix that resolves into dir (DIR/sub/x, whatever sub links to) counts:
** whoever writes beneath dir could change what it leads to. */
static int outside(const char *path, const char *dir, const char *what, char *msg, size_t len)
{
  char dir_real[PATH_MAX], real[PATH_MAX], prefix[PATH_MAX];
  if (realpath(dir, dir_real) == NULL) {
    snprintf(msg, len, "ledger: cannot resolve the session directory %s: %s", dir, strerror(errno));
    return -1;
  }
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof prefix) {
    snprintf(msg, len, "usage: %s's path is empty or too long", what);
    return -1;
  }
  for (size_t i = 1; i <= n; i++) {
    if (i < n && path[i] != '/') continue;
    memcpy(prefix, path, i);
    prefix[i] = '\0';
    if (realpath(prefix, real) == NULL) {
      if (errno == ENOENT) break; /* what follows does not exist yet */
      snprintf(msg, len, "checkpoint: cannot resolve %s: %s", prefix, strerror(errno));
      return -1;
    }
    if (beneath(real, dir_real)) {
      snprintf(msg, len,
               "checkpoint: %s %s is inside the session directory %s (as %s): an anchor must "
               "be outside the ledger's authority; keep it in another directory",
               what, path, dir, real);
      return -1;
    }
  }
  return 0;
}

/* core.checkpoint_outside(path, dir) -> true, or nil, message */
static int l_outside(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1), *dir = luaL_checkstring(L, 2);
  char msg[PATH_MAX * 2 + 256];
  if (outside(path, dir, "the checkpoint file", msg, sizeof msg) < 0) return fail(L, msg, EINVAL);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.checkpoint_key(path, dir) -> key bytes, or nil, message. The key file
** must be a regular file (not a link), owned by the caller, readable by no
** group or other, of KEY_MIN..KEY_MAX bytes, and outside dir. */
static int l_key(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1), *dir = luaL_checkstring(L, 2);
  char msg[PATH_MAX * 2 + 256];
  if (outside(path, dir, "the key file", msg, sizeof msg) < 0) return fail(L, msg, EINVAL);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    if (e == ELOOP)
      snprintf(msg, sizeof msg, "key: %s is a symbolic link: give the key file itself", path);
    else
      snprintf(msg, sizeof msg, "key: cannot open %s: %s", path, strerror(e));
    return fail(L, msg, e);
  }
  struct stat st;
  const char *why = NULL;
  char whybuf[160];
  if (fstat(fd, &st) < 0) {
    snprintf(whybuf, sizeof whybuf, "cannot stat it: %s", strerror(errno));
    why = whybuf;
  } else if (!S_ISREG(st.st_mode)) {
    why = "is not a regular file: give a file holding the key";
  } else if (st.st_uid != geteuid()) {
    snprintf(whybuf, sizeof whybuf, "is owned by uid %u, not by this user (uid %u): the key must be yours",
             (unsigned)st.st_uid, (unsigned)geteuid());
    why = whybuf;
  } else if (st.st_mode & 077) {
    snprintf(whybuf, sizeof whybuf, "is open to its group or others (mode %04o): chmod 600 it",
             (unsigned)(st.st_mode & 07777));
    why = whybuf;
  } else if (st.st_nlink != 1) {
    snprintf(whybuf, sizeof whybuf, "has %u hard links: keep one name of it", (unsigned)st.st_nlink);
    why = whybuf;
  } else if (st.st_size < KEY_MIN || st.st_size > KEY_MAX) {
    snprintf(whybuf, sizeof whybuf, "holds %lld bytes, and a key is %d to %d bytes (head -c 32 /dev/urandom)",
             (long long)st.st_size, KEY_MIN, KEY_MAX);
    why = whybuf;
  }
  if (why) {
    close(fd);
    snprintf(msg, sizeof msg, "key: %s %s", path, why);
    return fail(L, msg, EINVAL);
  }
  char key[KEY_MAX];
  size_t got = 0, want = (size_t)st.st_size;
  while (got < want) {
    ssize_t r = read(fd, key + got, want - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != want) {
    snprintf(msg, sizeof msg, "key: %s changed while it was read", path);
    return fail(L, msg, EIO);
  }
  lua_pushlstring(L, key, got);
  memset(key, 0, sizeof key);
  return 1;
}

/* core.checkpoint_append(path, line, dir) -> true, or nil, message: appends
** line (and a newline) to path, created 0600 if missing, then fsyncs it. */
static int l_append(lua_State *L)
{
  size_t n;
  const char *path = luaL_checkstring(L, 1), *line = luaL_checklstring(L, 2, &n),
             *dir = luaL_checkstring(L, 3);
  if (n == 0 || memchr(line, '\n', n) != NULL) return luaL_argerror(L, 2, "one line, without a newline");
  char msg[PATH_MAX * 2 + 256];
  if (outside(path, dir, "the checkpoint file", msg, sizeof msg) < 0) return fail(L, msg, EINVAL);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0600);
  if (fd < 0) {
    int e = errno;
    snprintf(msg, sizeof msg, "checkpoint: cannot open %s to append: %s%s", path, strerror(e),
             e == ELOOP ? " (it is a symbolic link: give the file itself)" : "");
    return fail(L, msg, e);
  }
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    close(fd);
    snprintf(msg, sizeof msg, "checkpoint: %s is not a regular file with one name: give a file of its own",
             path);
    return fail(L, msg, EINVAL);
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addlstring(&b, line, n);
  luaL_addchar(&b, '\n');
  luaL_pushresult(&b);
  size_t len;
  const char *text = lua_tolstring(L, -1, &len);
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, text + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  int e = done == len ? (fsync(fd) < 0 ? errno : 0) : (errno ? errno : EIO);
  close(fd);
  if (e) {
    snprintf(msg, sizeof msg, "checkpoint: cannot write %s: %s", path, strerror(e));
    return fail(L, msg, e);
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* core.ledger_proc_verify_at(program, dir, {seq, ...}) -> report, hashes */
static int l_verify_at(lua_State *L)
{
  const char *program = luaL_checkstring(L, 1), *dir = luaL_checkstring(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 3);
  if (n < 1 || n > AIRLOCK_LEDGER_PROC_AT_MAX)
    return luaL_error(L, "bad argument #3 to 'ledger_proc_verify_at' (between 1 and %d seqs)",
                      AIRLOCK_LEDGER_PROC_AT_MAX);
  uint64_t *seqs = lua_newuserdatauv(L, (size_t)n * sizeof *seqs, 0);
  uint8_t(*hashes)[AIRLOCK_LEDGER_HASH_LEN] = lua_newuserdatauv(L, (size_t)n * sizeof *hashes, 0);
  uint8_t *found = lua_newuserdatauv(L, (size_t)n, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 3, i);
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    lua_pop(L, 1);
    if (!isint || v < 1 || (i > 1 && (uint64_t)v <= seqs[i - 2]))
      return luaL_argerror(L, 3, "seqs must be integers >= 1, increasing");
    seqs[i - 1] = (uint64_t)v;
  }
  airlock_ledger_report rep;
  int rc = airlock_ledger_proc_verify_at(program, dir, seqs, (size_t)n, hashes, found, &rep);
  if (rc < 0 && rc != -EBADMSG) return airlock_l_verify_failed(L, dir, &rep, rc);
  airlock_l_push_ledger_report(L, &rep, rc == 0);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 0; i < n; i++) {
    if (found[i]) {
      char hex[65];
      airlock_ledger_hex(hashes[i], hex);
      lua_pushstring(L, hex);
    } else {
      lua_pushboolean(L, 0);
    }
    lua_rawseti(L, -2, i + 1);
  }
  return 2;
}

void airlock_l_open_checkpoint(lua_State *L)
{
  lua_pushcfunction(L, l_sha256);
  lua_setfield(L, -2, "sha256");
  lua_pushcfunction(L, l_sha256_load);
  lua_setfield(L, -2, "sha256_load");
  lua_pushcfunction(L, l_hmac_sha256);
  lua_setfield(L, -2, "hmac_sha256");
  lua_pushcfunction(L, l_outside);
  lua_setfield(L, -2, "checkpoint_outside");
  lua_pushcfunction(L, l_key);
  lua_setfield(L, -2, "checkpoint_key");
  lua_pushcfunction(L, l_append);
  lua_setfield(L, -2, "checkpoint_append");
  lua_pushcfunction(L, l_verify_at);
  lua_setfield(L, -2, "ledger_proc_verify_at");
  lua_pushinteger(L, AIRLOCK_LEDGER_PROC_AT_MAX);
  lua_setfield(L, -2, "ledger_checkpoints_max");
}
