/*
** embedded.h -- the Lua parts compiled in, as bytecode (see tools/embed.lua):
** the library's (airlock_embedded_files, in airlock.so and every host that
** links the binding) and the airlock command's own (airlock_embedded_cli: its
** command line, REPL, demo and benchmark, linked into the command only).
*/
#ifndef AIRLOCK_EMBEDDED_H
#define AIRLOCK_EMBEDDED_H
#include <stddef.h>

typedef struct airlock_embedded {
  const char *name;      /* module name, e.g. "airlock.cli" */
  const char *chunkname; /* "@lua/airlock/cli.lua" */
  const char *source;
  size_t len;
} airlock_embedded;

extern const airlock_embedded airlock_embedded_files[];
extern const airlock_embedded airlock_embedded_cli[];

struct lua_State;
/* Makes each of files (ending with a NULL name) requirable (package.preload). */
void airlock_install_preloads(struct lua_State *L, const airlock_embedded *files);

#endif
