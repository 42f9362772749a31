/*
** ledger_text.c -- a ledger's values as text: the durability modes' names,
** chain hashes in hex, "SEQ:HEX" checkpoints; and the message helper the
** ledger's C files share (core/ and the journal engine in ledger/).
*/
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ledger_int.h"

int ledger_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

static const char *const durability_names[] = {"none", "batch", "always"};

const char *airlock_ledger_durability_name(int d)
{
  return d >= 0 && d <= AIRLOCK_DURABLE_ALWAYS ? durability_names[d] : "?";
}

int airlock_ledger_durability_from_name(const char *word)
{
  for (int d = 0; d <= AIRLOCK_DURABLE_ALWAYS; d++)
    if (word != NULL && strcmp(word, durability_names[d]) == 0) return d;
  return -1;
}

static int hexval(char c)
{
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int ledger_unhex(const char *s, size_t n, uint8_t *out)
{
  for (size_t i = 0; i < n; i++) {
    int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return -EINVAL;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

void airlock_ledger_hex(const uint8_t hash[AIRLOCK_LEDGER_HASH_LEN], char out[65])
{
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < AIRLOCK_LEDGER_HASH_LEN; i++) {
    out[2 * i] = digits[hash[i] >> 4];
    out[2 * i + 1] = digits[hash[i] & 15];
  }
  out[64] = '\0';
}

char *airlock_ledger_format_checkpoint(uint64_t seq, const uint8_t hash[AIRLOCK_LEDGER_HASH_LEN], char *out,
                                       size_t outlen)
{
  char hex[65];
  airlock_ledger_hex(hash, hex);
  snprintf(out, outlen, "%" PRIu64 ":%s", seq, hex);
  return out;
}

int airlock_ledger_parse_checkpoint(const char *s, uint64_t *seq, uint8_t hash[AIRLOCK_LEDGER_HASH_LEN])
{
  uint64_t v = 0;
  const char *p = s;
  if (s == NULL || *p < '0' || *p > '9') return -EINVAL;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return -EINVAL;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  if (v == 0 || *p != ':' || strlen(p + 1) != 2 * AIRLOCK_LEDGER_HASH_LEN) return -EINVAL;
  uint8_t h[AIRLOCK_LEDGER_HASH_LEN];
  if (ledger_unhex(p + 1, sizeof h, h) < 0) return -EINVAL;
  *seq = v;
  memcpy(hash, h, sizeof h);
  return 0;
}
