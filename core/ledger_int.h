/*
** ledger_int.h -- what the ledger's C files share, in core/ (the client,
** ledger_proc.c; ledger_text.c) and in ledger/ (the journal engine and
** airlock-ledgerd). Not part of the public API.
*/
#ifndef AIRLOCK_LEDGER_INT_H
#define AIRLOCK_LEDGER_INT_H

#include <stddef.h>
#include <stdint.h>
#include "ledger.h"

/* Decodes 2n hex digits (either case) into n bytes. Returns 0, or -EINVAL. */
int ledger_unhex(const char *s, size_t n, uint8_t *out);
/* vsnprintf into err (when there is room), then returns rc. */
__attribute__((format(printf, 4, 5))) int ledger_fail(char *err, size_t errlen, int rc, const char *fmt, ...);

#endif
