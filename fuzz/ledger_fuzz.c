/*
** ledger_fuzz.c -- libFuzzer target: arbitrary bytes as a session's journal,
** through verify, the streaming reader and a writer's open (which truncates a
** torn tail and must refuse damage in the middle). Any outcome is fine except
** a crash, a leak or a sanitizer report.
*/
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "journal.h"

static char dir[64], journal[96];

static void cleanup(void)
{
  char lock[96];
  snprintf(lock, sizeof lock, "%s/lock", dir);
  unlink(journal);
  unlink(lock);
  rmdir(dir);
}

/* One session directory per fuzzing process, removed at exit. */
static void setup(void)
{
  if (dir[0] != 0) return;
  snprintf(dir, sizeof dir, "/tmp/airlock-ledger-fuzz-XXXXXX");
  if (mkdtemp(dir) == NULL) abort();
  snprintf(journal, sizeof journal, "%s/journal", dir);
  atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  setup();
  int fd = open(journal, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) abort();
  if (size > 0 && write(fd, data, size) != (ssize_t)size) abort();
  close(fd);

  airlock_ledger_report rep;
  airlock_ledger_verify(dir, NULL, NULL, &rep);

  char err[256];
  airlock_ledger_reader *r;
  if (airlock_ledger_reader_open(dir, &r, err, sizeof err) == 0) {
    airlock_ledger_record rec;
    while (airlock_ledger_reader_next(r, &rec) > 0) {
    }
    airlock_ledger_reader_close(r);
  }

  airlock_ledger *l;
  airlock_ledger_opts o = {0};
  o.durability = AIRLOCK_DURABLE_NONE;
  if (airlock_ledger_open(dir, &o, &l, &rep, err, sizeof err) == 0) {
    uint64_t seq;
    airlock_ledger_append(l, "call", 1, NULL, &seq);
    airlock_ledger_close(l);
  }
  return 0;
}
