/*
** embedded.h -- the Lua parts compiled into the module, as bytecode (see tools/embed.lua).
*/
#ifndef AIRLOCK_EMBEDDED_H
#define AIRLOCK_EMBEDDED_H
#include <stddef.h>

typedef struct airlock_embedded {
  const char *name;       /* module name, e.g. "airlock.cli" */
  const char *chunkname;  /* "@lua/airlock/cli.lua" */
  const char *source;
  size_t len;
} airlock_embedded;

extern const airlock_embedded airlock_embedded_files[];

#endif
