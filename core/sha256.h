/*
** sha256.h -- SHA-256 and HMAC-SHA-256 for the library, the command and the
** Lua module, from OpenSSL's libcrypto, which is loaded on first use.
**
** Why loaded, not linked: libcrypto is 4.5 MiB with about 20,000
** relocations; a program linked to it pays for them at every start (1.7 ms
** of each `airlock exec` on a machine where a page fault is dear), although
** most commands never hash. The ledger keeper (ledger/journal_read.c)
** hashes every record and links libcrypto as usual.
**
** A process that confines itself must load it first (airlock_sha256_load;
** core.confine does): Landlock may then refuse the library's file.
** Every function returns 0, or a negative errno with why in err: -ENOSYS
** when the library cannot be loaded, -EIO when OpenSSL fails.
*/
#ifndef AIRLOCK_SHA256_H
#define AIRLOCK_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define AIRLOCK_SHA256_LEN 32

/* OpenSSL's SHA256_CTX, held opaquely (sha256.c checks that it fits). */
typedef union {
  unsigned char bytes[128];
  uint64_t align;
} airlock_sha256_ctx;

int airlock_sha256_load(char *err, size_t errlen);
int airlock_sha256_init(airlock_sha256_ctx *c, char *err, size_t errlen);
int airlock_sha256_update(airlock_sha256_ctx *c, const void *p, size_t n, char *err, size_t errlen);
int airlock_sha256_final(airlock_sha256_ctx *c, uint8_t md[AIRLOCK_SHA256_LEN], char *err, size_t errlen);
/* The digest of n bytes at p as 64 lowercase hex digits. */
int airlock_sha256_hex(const void *p, size_t n, char hex[65], char *err, size_t errlen);
int airlock_hmac_sha256(const void *key, size_t klen, const void *data, size_t dlen,
                        uint8_t md[AIRLOCK_SHA256_LEN], char *err, size_t errlen);

#endif
