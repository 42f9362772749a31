/*
** confine.c -- the layers the worker applies to itself once its libraries are
** loaded and before the guest's first instruction. For now a seam: nothing is
** applied and every layer says so; issue 3 fills in Landlock and seccomp.
*/
#include <string.h>

#include "worker.h"

/* The worker's own layers; the spawner applies the rest before exec. */
static const char *const layers[] = { "landlock", "seccomp" };
#define LAYER_COUNT (sizeof layers / sizeof layers[0])

static const char NOT_YET[] = "skipped: not implemented yet (issue 3)";

/* Whether confine.require (an array of layer names) lists layer. Names of
** layers the spawner owns are the parent's to check. */
static int required(const msgpack_object *spec, const char *layer)
{
  const msgpack_object *req = airlock_msg_field(spec, "require");
  if (req == NULL || req->type != MSGPACK_OBJECT_ARRAY)
    return 0;
  size_t n = strlen(layer);
  for (uint32_t i = 0; i < req->via.array.size; i++) {
    const msgpack_object *o = &req->via.array.ptr[i];
    if (o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
        memcmp(o->via.str.ptr, layer, n) == 0)
      return 1;
  }
  return 0;
}

/* Packs {layer = "applied" | "skipped: why" | "failed: errno"} into report.
** Returns -1 when a layer the spec requires was not applied: the caller must
** then not run the guest (fail closed), 0 otherwise. */
int worker_confine(const msgpack_object *confine_spec, msgpack_packer *report)
{
  int missing = 0;
  msgpack_pack_map(report, LAYER_COUNT);
  for (size_t i = 0; i < LAYER_COUNT; i++) {
    airlock_pack_cstr(report, layers[i]);
    airlock_pack_str(report, NOT_YET, sizeof NOT_YET - 1);
    missing |= required(confine_spec, layers[i]);
  }
  return missing ? -1 : 0;
}
