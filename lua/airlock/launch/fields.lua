-- airlock.launch.fields -- the fields of the frames a parent sends a guest's
-- worker before its guest runs, as data: the init frame (every run) and the
-- start frame (a prepared worker's run). Each field: its name, its msgpack
-- type, whether it is required, a nested map's own fields, and one line on
-- what it is. tools/init_fields.lua writes build/gen/init_fields.h from this,
-- the table the worker's parser (worker/init.c) checks a frame against: an
-- unknown field, a field of the wrong type or a missing required one ends the
-- worker with a message naming it, before any guest code exists.
--
-- Types: "string"; "bool"; "count" (a whole number >= 0; a Lua parent may
-- send an integral float); "integer" (any whole number); "list" (an array;
-- an empty map is an empty list, which is how Lua packs {}); "map" (with
-- fields); "bin" (bytes: a msgpack bin, or a str as Lua packs a string);
-- "any" (one value of any type).
-- Data only: no code, no require.

local GUEST = {
  { name = "name", type = "string", doc = "the guest's name, in tracebacks" },
  { name = "source", type = "string", required = true, doc = "the guest's Lua source" },
}

return {
  init = {
    { name = "t", type = "string", required = true, doc = "the frame's kind: init" },
    { name = "v", type = "count", required = true, doc = "the protocol version" },
    { name = "run", type = "count", doc = "the run's id" },
    { name = "prepare", type = "bool", doc = "a prepared worker: its guest comes in a start frame" },
    { name = "guest", type = "map", fields = GUEST, doc = "the guest (required unless prepare)" },
    { name = "input", type = "any", doc = "the run's input, the guest's ..." },
    { name = "seed", type = "integer", doc = "the seed of the guest's math.random" },
    { name = "limits", type = "map", doc = "the budgets the worker enforces (absent or 0: none)", fields = {
      { name = "instructions", type = "count", doc = "Lua VM instructions of the run" },
      { name = "turn_instructions", type = "count", doc = "Lua VM instructions of one turn" },
      { name = "memory", type = "count", doc = "bytes of Lua heap" },
      { name = "output", type = "count", doc = "bytes the guest may print" },
      { name = "cpu", type = "count", doc = "ms of the worker's CPU time for the run" },
      { name = "turn_cpu", type = "count", doc = "ms of the worker's CPU time for one turn" },
      { name = "cpu_enforced", type = "bool", doc = "false in a replay: the budgets tick but never strike" },
    } },
    { name = "effects", type = "list", doc = "the effect names the guest may call" },
    { name = "notify", type = "list", doc = "the effects that are notifications" },
    { name = "confine", type = "map", doc = "the layers the worker applies to itself", fields = {
      { name = "landlock", type = "bool", doc = "a Landlock ruleset with no rule" },
      { name = "seccomp", type = "bool", doc = "the worker's fixed seccomp allowlist" },
      { name = "mdwe", type = "bool", doc = "memory-deny-write-execute" },
      { name = "require", type = "list", doc = "layers that must apply, or the worker exits" },
      { name = "pretend_absent", type = "list", doc = "layers to report as missing (for tests)" },
      { name = "seccomp_program", type = "bin", doc = "the compiled allowlist, when the parent made it" },
    } },
    { name = "resume", type = "map", doc = "a resumed run's recorded inputs", fields = {
      { name = "inputs", type = "list", doc = "the input of each turn so far" },
    } },
  },
  start = {
    { name = "t", type = "string", required = true, doc = "the frame's kind: start" },
    { name = "v", type = "count", required = true, doc = "the protocol version" },
    { name = "run", type = "count", doc = "the run's id" },
    { name = "guest", type = "map", required = true, fields = GUEST, doc = "the guest" },
    { name = "input", type = "any", doc = "the run's input" },
  },
}
