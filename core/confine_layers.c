/*
** confine_layers.c -- the table of the confinement layers a process sets on
** itself with one call (confine.h, airlock_confine_layers), and each one's
** functions: how it is set, and whether this kernel has it. The spawner's
** child, the worker, the binding's start options and the probe read the
** table; none of them names a layer of it.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>

#include "airlock.h"
#include "confine.h"

/* ------------------------------------------------------------------ mdwe */

/* Memory-deny-write-execute (PR_SET_MDWE, Linux 6.3+) for the calling
** process's address space: no mapping may be writable and executable, or gain
** exec; kept across fork and exec, never undone. Skipped (-EINVAL) on older
** kernels. */
static int mdwe_available(void)
{
  return prctl(PR_GET_MDWE, 0, 0, 0, 0) >= 0;
}

static int mdwe_apply(airlock_layer *out)
{
  if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0) {
    int e = errno;
    if (out == NULL) return -e;
    airlock_layer_set_(out, "mdwe", e == EINVAL ? AIRLOCK_LAYER_SKIPPED : AIRLOCK_LAYER_FAILED, e,
                       e == EINVAL ? "this kernel has no PR_SET_MDWE (it needs Linux 6.3+)"
                                   : "prctl(PR_SET_MDWE): %s",
                       airlock_strerror(e));
    return -e;
  }
  int got = prctl(PR_GET_MDWE, 0, 0, 0, 0);
  if (got < 0 || !(got & PR_MDWE_REFUSE_EXEC_GAIN)) {
    if (out != NULL)
      airlock_layer_set_(out, "mdwe", AIRLOCK_LAYER_FAILED, EIO, "PR_GET_MDWE does not confirm it (%d)", got);
    return -EIO;
  }
  airlock_layer_set_(out, "mdwe", AIRLOCK_LAYER_APPLIED, 0,
                     "no mapping writable and executable, none may gain exec (PR_SET_MDWE)");
  return 0;
}

/* ------------------------------------------------------------------ the table */

const airlock_confine_layer airlock_confine_layers[] = {
    {"mdwe", mdwe_apply, mdwe_available, "PR_SET_MDWE available (memory-deny-write-execute)",
     "prctl(PR_GET_MDWE) fails: memory-deny-write-execute needs Linux 6.3+",
     AIRLOCK_CL_WORKER | AIRLOCK_CL_OWN_MM},
    {NULL, NULL, NULL, NULL, NULL, 0},
};

_Static_assert(sizeof airlock_confine_layers / sizeof *airlock_confine_layers <= AIRLOCK_CL_MAX + 1,
               "airlock_spawn_opts.layers has a bit per row");

const airlock_confine_layer *airlock_confine_layer_named(const char *name)
{
  for (const airlock_confine_layer *l = airlock_confine_layers; name != NULL && l->name != NULL; l++)
    if (strcmp(l->name, name) == 0) return l;
  return NULL;
}

unsigned airlock_confine_layer_bit(const char *name)
{
  const airlock_confine_layer *l = airlock_confine_layer_named(name);
  return l ? 1u << (unsigned)(l - airlock_confine_layers) : 0;
}
