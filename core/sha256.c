/*
** sha256.c -- OpenSSL's SHA-256 and HMAC, loaded on first use (see the
** header). The hash uses OpenSSL's own SHA256_Init/_Update/_Final, not EVP:
** the first EVP digest in a process sets up OpenSSL's library context,
** reads its configuration and loads its default provider, which took 2 to
** 5 ms; these take microseconds. OpenSSL 3 marks them deprecated; they
** remain in the 3.x series. The HMAC (checkpoints only) stays on EVP.
*/
#define _GNU_SOURCE
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA256_Init and the rest: see above */
#include "sha256.h"
#include "ledger.h"

#include <dlfcn.h>
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/opensslv.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>

_Static_assert(sizeof(SHA256_CTX) <= sizeof(airlock_sha256_ctx),
               "SHA256_CTX does not fit airlock_sha256_ctx");

#define STR2(x)   #x
#define STR(x)    STR2(x)
/* The soname of the libcrypto the headers belong to: libcrypto.so.3. */
#define LIBCRYPTO "libcrypto.so." STR(OPENSSL_VERSION_MAJOR)

static struct {
  __typeof__(&SHA256_Init) init;
  __typeof__(&SHA256_Update) update;
  __typeof__(&SHA256_Final) final;
  __typeof__(&EVP_sha256) evp_sha256;
  __typeof__(&HMAC) hmac;
} fn;
static char load_error[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
  void *h = dlopen(LIBCRYPTO, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(load_error, sizeof load_error, "sha256: cannot load OpenSSL's %s (%s)", LIBCRYPTO,
             why ? why : "no reason given");
    return;
  }
  /* dlsym hands back a data pointer; POSIX requires it to convert to a function's. */
  *(void **)&fn.init = dlsym(h, "SHA256_Init");
  *(void **)&fn.update = dlsym(h, "SHA256_Update");
  *(void **)&fn.final = dlsym(h, "SHA256_Final");
  *(void **)&fn.evp_sha256 = dlsym(h, "EVP_sha256");
  *(void **)&fn.hmac = dlsym(h, "HMAC");
  if (!fn.init || !fn.update || !fn.final || !fn.evp_sha256 || !fn.hmac) {
    fn.init = NULL; /* all or nothing */
    snprintf(load_error, sizeof load_error,
             "sha256: %s lacks SHA256_Init, SHA256_Update, SHA256_Final, "
             "EVP_sha256 or HMAC",
             LIBCRYPTO);
  }
}

static int say(char *err, size_t errlen, int rc, const char *msg)
{
  if (err && errlen) snprintf(err, errlen, "%s", msg);
  return rc;
}

int airlock_sha256_load(char *err, size_t errlen)
{
  pthread_once(&once, load);
  return fn.init ? 0 : say(err, errlen, -ENOSYS, load_error);
}

int airlock_sha256_init(airlock_sha256_ctx *c, char *err, size_t errlen)
{
  int rc = airlock_sha256_load(err, errlen);
  if (rc != 0) return rc;
  return fn.init((SHA256_CTX *)c) == 1 ? 0 : say(err, errlen, -EIO, "sha256: OpenSSL's SHA256_Init failed");
}

int airlock_sha256_update(airlock_sha256_ctx *c, const void *p, size_t n, char *err, size_t errlen)
{
  return fn.update((SHA256_CTX *)c, p, n) == 1
             ? 0
             : say(err, errlen, -EIO, "sha256: OpenSSL's SHA256_Update failed");
}

int airlock_sha256_final(airlock_sha256_ctx *c, uint8_t md[AIRLOCK_SHA256_LEN], char *err, size_t errlen)
{
  return fn.final(md, (SHA256_CTX *)c) == 1 ? 0
                                            : say(err, errlen, -EIO, "sha256: OpenSSL's SHA256_Final failed");
}

int airlock_sha256_hex(const void *p, size_t n, char hex[65], char *err, size_t errlen)
{
  airlock_sha256_ctx c;
  uint8_t md[AIRLOCK_SHA256_LEN];
  int rc = airlock_sha256_init(&c, err, errlen);
  if (rc == 0) rc = airlock_sha256_update(&c, p, n, err, errlen);
  if (rc == 0) rc = airlock_sha256_final(&c, md, err, errlen);
  if (rc == 0) airlock_ledger_hex(md, hex);
  return rc;
}

int airlock_hmac_sha256(const void *key, size_t klen, const void *data, size_t dlen,
                        uint8_t md[AIRLOCK_SHA256_LEN], char *err, size_t errlen)
{
  int rc = airlock_sha256_load(err, errlen);
  if (rc != 0) return rc;
  if (klen > 0x7fffffff) return say(err, errlen, -EINVAL, "hmac: the key is longer than OpenSSL takes");
  unsigned int n = 0;
  if (fn.hmac(fn.evp_sha256(), key, (int)klen, data, dlen, md, &n) == NULL || n != AIRLOCK_SHA256_LEN)
    return say(err, errlen, -EIO, "hmac: OpenSSL's HMAC failed");
  return 0;
}
