/*
** check.h -- the counting CHECK macros shared by the C tests in spec/c and the
** summary line ("N passed, N failed") that spec/run and CI read.
*/
#ifndef AIRLOCK_CHECK_H
#define AIRLOCK_CHECK_H

#include <stdio.h>

static int passed, failed;

/* Counts one check; on failure names the file, line and what was checked. */
#define CHECK_MSG(cond, what)                                              \
  do {                                                                     \
    if (cond) {                                                            \
      passed++;                                                            \
    } else {                                                               \
      failed++;                                                            \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, what); \
    }                                                                      \
  } while (0)

#define CHECK(cond) CHECK_MSG(cond, #cond)

/* Prints the summary line; returns the process exit status. */
static inline int check_summary(void) {
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

#endif
