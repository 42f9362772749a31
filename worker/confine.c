/*
** confine.c -- the layers the worker applies to itself once Lua and its
** libraries are loaded and before the guest's first instruction: Landlock (no
** filesystem rights, no TCP, no signals or abstract sockets outside) and the
** seccomp allowlist. The spawner has already applied namespaces, rlimits,
** capabilities and no_new_privs; the parent verifies the result from outside.
**
** init.confine = { landlock = bool, seccomp = bool, require = {names...},
**                  pretend_absent = {names...} }
** pretend_absent exists for tests only: it makes a layer behave as if this
** kernel lacked it, to prove that `require` fails closed.
*/
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "confine.h"
#include "worker.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZER_BUILD 1
#else
#define SANITIZER_BUILD 0
#endif

/* Whether the array field `key` of spec lists `name`. */
static int listed(const msgpack_object *spec, const char *key, const char *name)
{
  const msgpack_object *list = airlock_msg_field(spec, key);
  if (list == NULL || list->type != MSGPACK_OBJECT_ARRAY) return 0;
  size_t n = strlen(name);
  for (uint32_t i = 0; i < list->via.array.size; i++) {
    const msgpack_object *o = &list->via.array.ptr[i];
    if (o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && memcmp(o->via.str.ptr, name, n) == 0)
      return 1;
  }
  return 0;
}

static int wanted(const msgpack_object *spec, const char *name)
{
  const msgpack_object *o = airlock_msg_field(spec, name);
  return o != NULL && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
}

/* seccomp: the program the parent compiled for this worker (init.confine.
** seccomp_program, BPF bytes for pid 1 of a new pid namespace) when there is
** one and this process is pid 1, else the filter built here. */
static const msgpack_object *seccomp_spec;

static int seccomp_layer(airlock_layer *out)
{
  const msgpack_object *p = airlock_msg_field(seccomp_spec, "seccomp_program");
  if (p != NULL && (p->type == MSGPACK_OBJECT_BIN || p->type == MSGPACK_OBJECT_STR) && getpid() == 1)
    return airlock_confine_seccomp_program(p->type == MSGPACK_OBJECT_BIN ? (const void *)p->via.bin.ptr
                                                                         : (const void *)p->via.str.ptr,
                                           p->via.bin.size, out);
  return airlock_confine_seccomp_worker(out);
}

/* Runs one layer (or says why not) into *out. */
static void apply(const msgpack_object *spec, const char *name, int (*fn)(airlock_layer *),
                  airlock_layer *out)
{
  memset(out, 0, sizeof *out);
  out->name = name;
  out->status = AIRLOCK_LAYER_SKIPPED;
  if (!wanted(spec, name)) {
    snprintf(out->detail, sizeof out->detail, "the policy does not ask for it");
  } else if (listed(spec, "pretend_absent", name)) {
    snprintf(out->detail, sizeof out->detail,
             "pretending this kernel lacks it (confine.pretend_absent, for tests)");
  } else if (SANITIZER_BUILD && strcmp(name, "seccomp") == 0) {
    snprintf(out->detail, sizeof out->detail,
             "this worker is a sanitizer build: ASan needs system calls the allowlist "
             "refuses; confined runs use the release worker");
  } else {
    fn(out); /* fills status and detail either way */
  }
}

static void pack_layer(msgpack_packer *pk, const airlock_layer *l)
{
  char text[sizeof l->detail + 16];
  int n = snprintf(text, sizeof text, "%s: %s", airlock_layer_status_name(l->status), l->detail);
  airlock_pack_cstr(pk, l->name);
  airlock_pack_str(pk, text, n > 0 && (size_t)n < sizeof text ? (size_t)n : strlen(text));
}

/* Applies the layers of the table it sets on itself (confine.h,
** AIRLOCK_CL_WORKER: mdwe), Landlock, then seccomp (which forbids the calls of
** all of them), and packs
** {layer = "applied: what" | "skipped: why" | "failed: why"} into report.
** Returns -1 with the first missing layer in why when a layer the spec
** requires was not applied: the caller must then not run the guest (fail
** closed), 0 otherwise. */
int worker_confine(const msgpack_object *spec, msgpack_packer *report, char *why, size_t len)
{
  airlock_layer layers[AIRLOCK_CL_MAX + 2];
  size_t n = 0;
  for (const airlock_confine_layer *l = airlock_confine_layers; l->name != NULL; l++)
    if (l->flags & AIRLOCK_CL_WORKER) apply(spec, l->name, l->apply, &layers[n++]);
  apply(spec, "landlock", airlock_confine_landlock_deny_all, &layers[n++]);
  seccomp_spec = spec;
  apply(spec, "seccomp", seccomp_layer, &layers[n++]);

  int missing = 0;
  msgpack_pack_map(report, (uint32_t)n);
  for (size_t i = 0; i < n; i++) {
    pack_layer(report, &layers[i]);
    if (layers[i].status != AIRLOCK_LAYER_APPLIED && listed(spec, "require", layers[i].name) && !missing) {
      missing = 1;
      snprintf(why, len, "%s is required but %s: %s", layers[i].name,
               airlock_layer_status_name(layers[i].status), layers[i].detail);
    }
  }
  return missing ? -1 : 0;
}
