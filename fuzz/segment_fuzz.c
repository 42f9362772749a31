/*
** segment_fuzz.c -- libFuzzer target: arbitrary bytes as a session's first
** sealed segment (block headers, zstd frames), read by verify with the zstd
** codec registered, as airlock-ledgerd reads it. Any outcome is fine except
** a crash, a leak, a sanitizer report or an allocation the lengths asked for.
*/
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "journal.h"
#include "ledger_zstd.h"

static char dir[64], seg[96], journal[96];

static void cleanup(void)
{
  unlink(seg);
  unlink(journal);
  rmdir(dir);
}

static void setup(void)
{
  if (dir[0] != 0) return;
  snprintf(dir, sizeof dir, "/tmp/airlock-segment-fuzz-XXXXXX");
  if (mkdtemp(dir) == NULL) abort();
  snprintf(seg, sizeof seg, "%s/segment.000001", dir);
  snprintf(journal, sizeof journal, "%s/journal", dir);
  int fd = open(journal, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600); /* empty */
  if (fd < 0) abort();
  close(fd);
  airlock_ledger_set_codec(ledger_zstd_codec());
  atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  setup();
  int fd = open(seg, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) abort();
  if (size > 0 && write(fd, data, size) != (ssize_t)size) abort();
  close(fd);
  airlock_ledger_report rep;
  airlock_ledger_verify(dir, NULL, NULL, &rep);
  return 0;
}
