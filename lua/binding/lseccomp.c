/*
** lseccomp.c -- airlock.core.seccomp_worker_program(tgid): the worker's seccomp
** filter compiled once in the parent, so a worker in a new pid namespace (pid 1)
** loads a ready program instead of building one per run.
*/
#include "lbinding.h"

#include <errno.h>
#include <stdlib.h>

#include "confine.h"

int airlock_l_seccomp_worker_program(lua_State *L)
{
  lua_Integer tgid = luaL_checkinteger(L, 1);
  luaL_argcheck(L, tgid > 0, 1, "a pid (> 0)");
  void *prog;
  size_t len;
  char err[256];
  int rc = airlock_seccomp_worker_program((long)tgid, &prog, &len, err, sizeof err);
  if (rc != 0) return airlock_l_fail(L, "seccomp", err, -rc);
  lua_pushlstring(L, prog, len);
  free(prog);
  return 1;
}
