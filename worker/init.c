/*
** init.c -- validates the init frame into the worker's settings.
** Init comes from the trusted parent, so a bad one is a bug there: say exactly
** which field is wrong on stderr and exit 2, before any guest code exists.
** The fields of init and start frames are named once, in
** lua/airlock/launch/fields.lua (build/gen/init_fields.h is written from it):
** an unknown field, one of the wrong type or a missing required one is such
** an error, so a misspelt field is never read as absent.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "worker.h"
#include "init_fields.h" /* build/gen, from lua/airlock/launch/fields.lua */

/* Whether o is of field type t (worker_field_type, fields.lua's words). */
static int has_type(const msgpack_object *o, worker_field_type t)
{
  switch (t) {
    case WORKER_FT_STRING: return o->type == MSGPACK_OBJECT_STR;
    case WORKER_FT_BOOL: return o->type == MSGPACK_OBJECT_BOOLEAN;
    case WORKER_FT_COUNT:
    case WORKER_FT_INTEGER:
      if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) return 1;
      if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return t == WORKER_FT_INTEGER;
      return (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32) &&
             floor(o->via.f64) == o->via.f64 && (t == WORKER_FT_INTEGER || o->via.f64 >= 0);
    case WORKER_FT_LIST: /* a Lua parent packs an empty list as an empty map */
      return o->type == MSGPACK_OBJECT_ARRAY || (o->type == MSGPACK_OBJECT_MAP && o->via.map.size == 0);
    case WORKER_FT_MAP: return o->type == MSGPACK_OBJECT_MAP;
    case WORKER_FT_BIN: return o->type == MSGPACK_OBJECT_BIN || o->type == MSGPACK_OBJECT_STR;
    case WORKER_FT_ANY: return 1;
  }
  return 0;
}

static const char *const TYPE_WORDS[] = {
    [WORKER_FT_STRING] = "a string",
    [WORKER_FT_BOOL] = "a boolean",
    [WORKER_FT_COUNT] = "a whole number >= 0",
    [WORKER_FT_INTEGER] = "a whole number",
    [WORKER_FT_LIST] = "a list",
    [WORKER_FT_MAP] = "a map",
    [WORKER_FT_BIN] = "bytes",
    [WORKER_FT_ANY] = "a value",
};

/* Checks map (the frame what, or its field at where, "confine.") against
** fields: every key one of them and of its type, every required one there,
** nested maps likewise. Dies naming the first field that is not so. */
static void check_fields(const msgpack_object *map, const worker_field *fields, const char *what,
                         const char *where)
{
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object *k = &map->via.map.ptr[i].key, *v = &map->via.map.ptr[i].val;
    if (k->type != MSGPACK_OBJECT_STR)
      worker_die(WORKER_EXIT_BADINIT, "%s: %s has a key that is not a string", what,
                 *where ? where : "the frame");
    const worker_field *f = fields;
    while (f->name != NULL &&
           !(strlen(f->name) == k->via.str.size && memcmp(f->name, k->via.str.ptr, k->via.str.size) == 0))
      f++;
    int n = k->via.str.size > 64 ? 64 : (int)k->via.str.size;
    if (f->name == NULL)
      worker_die(WORKER_EXIT_BADINIT,
                 "%s: %s%.*s is not a field of the %s frame "
                 "(lua/airlock/launch/fields.lua names them)",
                 what, where, n, k->via.str.ptr, what);
    if (!has_type(v, f->type))
      worker_die(WORKER_EXIT_BADINIT, "%s: %s%s must be %s", what, where, f->name, TYPE_WORDS[f->type]);
    if (f->type == WORKER_FT_MAP && f->fields != NULL) {
      char sub[128];
      snprintf(sub, sizeof sub, "%s%s.", where, f->name);
      check_fields(v, f->fields, what, sub);
    }
  }
  for (const worker_field *f = fields; f->name != NULL; f++)
    if (f->required && airlock_msg_field(map, f->name) == NULL)
      worker_die(WORKER_EXIT_BADINIT, "%s: %s%s is missing", what, where, f->name);
}

static const msgpack_object *field_of(const msgpack_object *map, const char *key, msgpack_object_type type,
                                      const char *where)
{
  const msgpack_object *o = airlock_msg_field(map, key);
  if (o != NULL && o->type != type)
    worker_die(WORKER_EXIT_BADINIT, "init: %s%s has the wrong type", where, key);
  return o;
}

/* A whole number of at least 0. Policies written in Lua often say 20e6, a
** float, so integral floats are accepted too. */
static uint64_t count_of(const msgpack_object *map, const char *key, const char *where)
{
  const msgpack_object *o = airlock_msg_field(map, key);
  if (o == NULL) return 0;
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) return o->via.u64;
  if ((o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32) && o->via.f64 >= 0 &&
      o->via.f64 < 18446744073709551616.0 && floor(o->via.f64) == o->via.f64)
    return (uint64_t)o->via.f64;
  worker_die(WORKER_EXIT_BADINIT, "init: %s%s must be a whole number >= 0", where, key);
}

static void parse_guest(worker_init *in, const msgpack_object *init)
{
  const msgpack_object *guest = field_of(init, "guest", MSGPACK_OBJECT_MAP, "");
  if (guest == NULL) worker_die(WORKER_EXIT_BADINIT, "init: guest is missing");
  const msgpack_object *src = field_of(guest, "source", MSGPACK_OBJECT_STR, "guest.");
  if (src == NULL) worker_die(WORKER_EXIT_BADINIT, "init: guest.source is missing");
  in->source = src->via.str.ptr;
  in->source_len = src->via.str.size;
  const msgpack_object *name = field_of(guest, "name", MSGPACK_OBJECT_STR, "guest.");
  in->name = name != NULL ? name->via.str.ptr : "";
  in->name_len = name != NULL ? name->via.str.size : 0;
}

static void parse_seed(worker_init *in, const msgpack_object *init)
{
  const msgpack_object *seed = airlock_msg_field(init, "seed");
  if (seed != NULL && seed->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
    in->seed = seed->via.i64;
  else
    in->seed = (int64_t)count_of(init, "seed", ""); /* the bits are what count */
}

static void parse_limits(worker_init *in, const msgpack_object *init)
{
  const msgpack_object *limits = field_of(init, "limits", MSGPACK_OBJECT_MAP, "");
  in->instructions = count_of(limits, "instructions", "limits.");
  in->memory = count_of(limits, "memory", "limits.");
  in->output = count_of(limits, "output", "limits.");
  in->turn_instructions = count_of(limits, "turn_instructions", "limits.");
  in->cpu_ms = count_of(limits, "cpu", "limits.");
  in->turn_cpu_ms = count_of(limits, "turn_cpu", "limits.");
  /* false in a replay: the budgets tick as recorded (the notes they send,
  ** the same allocations) but never strike; a boolean either way, so the
  ** init frame has the same size as its recording's. Absent: true. */
  const msgpack_object *enforced = field_of(limits, "cpu_enforced", MSGPACK_OBJECT_BOOLEAN, "limits.");
  in->cpu_enforced = enforced == NULL || enforced->via.boolean;
  if (in->cpu_ms > UINT64_MAX / 1000000u || in->turn_cpu_ms > UINT64_MAX / 1000000u)
    worker_die(WORKER_EXIT_BADINIT, "init: limits.cpu and limits.turn_cpu are milliseconds below 2^44");
  if (in->memory > SIZE_MAX)
    worker_die(WORKER_EXIT_BADINIT, "init: limits.memory is larger than the address space");
}

/* Effect names arrive in call frames later; each is held to the same rule the
** parent enforces on them, so sugar can never build an unsendable call. */
static const msgpack_object *name_list(const msgpack_object *init, const char *key)
{
  /* A Lua parent packs an empty list as an empty map: both mean none. */
  const msgpack_object *fx = airlock_msg_field(init, key);
  if (fx != NULL && fx->type == MSGPACK_OBJECT_MAP && fx->via.map.size == 0) return NULL;
  fx = field_of(init, key, MSGPACK_OBJECT_ARRAY, "");
  for (uint32_t i = 0; fx != NULL && i < fx->via.array.size; i++) {
    const msgpack_object *e = &fx->via.array.ptr[i];
    if (e->type != MSGPACK_OBJECT_STR || e->via.str.size == 0 || e->via.str.size > AIRLOCK_EFFECT_NAME_MAX)
      worker_die(WORKER_EXIT_BADINIT, "init: %s[%u] must be a name of 1 to %d bytes", key, (unsigned)i + 1,
                 AIRLOCK_EFFECT_NAME_MAX);
  }
  return fx;
}

static void parse_effects(worker_init *in, const msgpack_object *init)
{
  in->effects = name_list(init, "effects");
  in->notify = name_list(init, "notify");
}

void worker_init_parse(worker *w, const msgpack_object *init)
{
  worker_init *in = &w->init;
  memset(in, 0, sizeof *in);
  check_fields(init, worker_init_fields, "init", "");
  const msgpack_object *run = airlock_msg_field(init, "run");
  if (run != NULL && run->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    worker_die(WORKER_EXIT_BADINIT, "init: run must be a whole number >= 0");
  const msgpack_object *prepare = field_of(init, "prepare", MSGPACK_OBJECT_BOOLEAN, "");
  in->prepared = prepare != NULL && prepare->via.boolean;
  if (in->prepared && airlock_msg_field(init, "guest") != NULL)
    worker_die(WORKER_EXIT_BADINIT, "init: a prepared worker's guest comes in its start frame, not in init");
  if (!in->prepared) parse_guest(in, init);
  parse_seed(in, init);
  parse_limits(in, init);
  parse_effects(in, init);
  in->input = airlock_msg_field(init, "input");
  in->confine = field_of(init, "confine", MSGPACK_OBJECT_MAP, "");
  /* A Lua parent packs an empty list as an empty map: both mean none. */
  const msgpack_object *resume = field_of(init, "resume", MSGPACK_OBJECT_MAP, "");
  const msgpack_object *inputs = airlock_msg_field(resume, "inputs");
  if (inputs != NULL && inputs->type == MSGPACK_OBJECT_ARRAY)
    in->resume_inputs = inputs;
  else if (inputs != NULL && !(inputs->type == MSGPACK_OBJECT_MAP && inputs->via.map.size == 0))
    worker_die(WORKER_EXIT_BADINIT, "init: resume.inputs must be a list");
}

/* A prepared worker's run: its id, guest and input. Everything else (seed,
** limits, effects, confinement) was fixed by init, before the state was made. */
void worker_start_parse(worker *w, const msgpack_object *start)
{
  worker_init *in = &w->init;
  check_fields(start, worker_start_fields, "start", "");
  const msgpack_object *run = airlock_msg_field(start, "run");
  if (run != NULL && run->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    worker_die(WORKER_EXIT_BADINIT, "start: run must be a whole number >= 0");
  parse_guest(in, start);
  in->input = airlock_msg_field(start, "input");
}
