/*
** check.h -- the counting CHECK macros shared by the C tests in spec/c and the
** summary line ("N passed, N failed, N skipped") that spec/run and CI read.
** A case that needs something this machine lacks is skipped with SKIP, which
** prints one "skipped: FILE:LINE: reason" line (spec/run lists them all).
*/
#ifndef AIRLOCK_CHECK_H
#define AIRLOCK_CHECK_H

#include <stdio.h>

static int passed, failed, skipped;

/* Counts one check; on failure names the file, line and what was checked. */
#define CHECK_MSG(cond, what)                                                 \
  do {                                                                        \
    if (cond) {                                                               \
      passed++;                                                               \
    } else {                                                                  \
      failed++;                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, what); \
    }                                                                         \
  } while (0)

#define CHECK(cond) CHECK_MSG(cond, #cond)

/* Counts one skipped case and says why, on one line; the reason names the
** property of the machine that is missing, found by a control at run time. */
#define SKIP(reason)                                            \
  do {                                                          \
    skipped++;                                                  \
    printf("skipped: %s:%d: %s\n", __FILE__, __LINE__, reason); \
    fflush(stdout);                                             \
  } while (0)

/* Prints the summary line; returns the process exit status. */
static inline int check_summary(void)
{
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed == 0 ? 0 : 1;
}

#endif
