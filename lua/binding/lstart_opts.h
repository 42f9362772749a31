/*
** lstart_opts.h -- b:_start's options table read into airlock_run_opts (lstart_opts.c).
*/
#ifndef AIRLOCK_LSTART_OPTS_H
#define AIRLOCK_LSTART_OPTS_H

#include "lbinding.h"

/* The child's stdio as b:_start's options give it: descriptors of this
** process it gets as its own (stdin_fd, stdout_fd, stderr_fd: not captured,
** e.g. 1 and 2 for a command's passthrough), or stdin from a string (handed
** over in a memfd, so no write can block) or a file. */
typedef struct airlock_l_stdio {
  int pass_fd[3];          /* -1: not given */
  const char *data, *file; /* stdin's bytes, or its file */
  size_t len;
} airlock_l_stdio;

/* What b:_start reads from its table before anything is made. */
typedef struct airlock_l_start {
  airlock_run_opts o; /* every field the table gives but init and spawn.confine,
                         spawn.stdin_fd (airlock_l_open_stdin) */
  airlock_rlimits rl; /* o.spawn.rlimits points here when the table has rlimits */
  airlock_l_stdio io;
} airlock_l_start;

/* Reads the options table at t into s (zeroed first): every key must be an
** option; argv, the plain fields, namespaces, rlimits, shared_net, the mount
** list (workspace, rootfs, keep, tmpfs with tmpfs_size and tmpfs_inodes,
** view_ro, view_rw, protect) and the stdio. Raises a Lua error for a malformed
** table. The strings and the mount list stay on the Lua stack, alive until the
** caller returns. confine, handlers, ctx and init are the caller's to read. */
void airlock_l_read_start(lua_State *L, int t, airlock_l_start *s);
/* The child's stdin into *fd_out: a new descriptor above 2 (the caller closes
** it), or -1 for none (/dev/null). Returns 0, or -errno with why in err.
** Raises no Lua error. */
int airlock_l_open_stdin(const airlock_l_stdio *io, int *fd_out, char *err, size_t errlen);
/* The empty net namespace every run with shared_net joins, made on first use
** and held for the life of the process: its fd, or -errno with *why. */
int airlock_l_shared_netns(const char **why);

#endif
