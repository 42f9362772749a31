/*
** confine_observe.c -- the calls learn mode observes: the file system calls
** whose path tells which grants a program needs (opened, run, looked for,
** made or removed). A learning run's filter sends each to the listener
** (broker_observe.c), which records its path and lets it continue.
*/
#define _GNU_SOURCE
#include "confine.h"

#include <stddef.h>
#include <sys/syscall.h>

/* {nr, kind, path_arg, dirfd_arg, flags_arg, path2_arg, dirfd2_arg}.
** execveat is observed from any fd but AIRLOCK_SPAWN_INIT_FD and
** AIRLOCK_SPAWN_EXEC_FD (confine.h; the filter lets those through): the
** spawner's child starts airlock-init from one after its filter is on, while
** the parent, which answers the listener, waits for that exec (CLONE_VFORK).
** A program started by fexecve (execveat of "" with AT_EMPTY_PATH) is
** recorded as the file its fd names. */
const airlock_observed_call airlock_observed_calls[] = {
#ifdef SYS_open
    {SYS_open, 'r', 0, -1, 1, -1, -1},
#endif
#ifdef SYS_creat
    {SYS_creat, 'w', 0, -1, -1, -1, -1},
#endif
    {SYS_openat, 'r', 1, 0, 2, -1, -1},
    {SYS_execve, 'x', 0, -1, -1, -1, -1},
    {SYS_execveat, 'x', 1, 0, -1, -1, -1},
#ifdef SYS_stat
    {SYS_stat, 's', 0, -1, -1, -1, -1},
#endif
#ifdef SYS_lstat
    {SYS_lstat, 's', 0, -1, -1, -1, -1},
#endif
    {SYS_newfstatat, 's', 1, 0, -1, -1, -1},
    {SYS_statx, 's', 1, 0, -1, -1, -1},
#ifdef SYS_access
    {SYS_access, 's', 0, -1, -1, -1, -1},
#endif
    {SYS_faccessat, 's', 1, 0, -1, -1, -1},
#ifdef SYS_faccessat2
    {SYS_faccessat2, 's', 1, 0, -1, -1, -1},
#endif
#ifdef SYS_readlink
    {SYS_readlink, 's', 0, -1, -1, -1, -1},
#endif
    {SYS_readlinkat, 's', 1, 0, -1, -1, -1},
#ifdef SYS_mkdir
    {SYS_mkdir, 'd', 0, -1, -1, -1, -1},
#endif
    {SYS_mkdirat, 'd', 1, 0, -1, -1, -1},
#ifdef SYS_unlink
    {SYS_unlink, 'd', 0, -1, -1, -1, -1},
#endif
#ifdef SYS_rmdir
    {SYS_rmdir, 'd', 0, -1, -1, -1, -1},
#endif
    {SYS_unlinkat, 'd', 1, 0, -1, -1, -1},
#ifdef SYS_rename
    {SYS_rename, 'd', 0, -1, -1, 1, -1},
#endif
#ifdef SYS_renameat
    {SYS_renameat, 'd', 1, 0, -1, 3, 2},
#endif
    {SYS_renameat2, 'd', 1, 0, -1, 3, 2},
#ifdef SYS_truncate
    {SYS_truncate, 'w', 0, -1, -1, -1, -1},
#endif
    {-1, 0, -1, -1, -1, -1, -1},
};

const airlock_observed_call *airlock_observed_call_find(long nr)
{
  for (const airlock_observed_call *c = airlock_observed_calls; c->nr >= 0; c++)
    if (c->nr == nr) return c;
  return NULL;
}
