-- init_fields_spec.lua -- the worker reads its init frame strictly, against
-- the fields lua/airlock/launch/fields.lua names (build/gen/init_fields.h): a
-- misspelt field, one of the wrong type or a missing required one ends the
-- worker (exit 2) with a message naming the field, before any guest runs,
-- instead of being read as "not asked for".
local airlock = require "airlock"
local core = require "airlock.core"
local H = require "helper"
local fields = require "airlock.launch.fields"

-- Starts the worker with init as it is (no policy, no planner) -> its result.
local function run_init(init)
  local b <close> = airlock.broker()
  local run = assert(b:_start { argv = { core.worker_path() }, init = init, handlers = {},
                                deadline_ms = H.GUARD_S * 1000 })
  return run:wait(b)
end

local function init_with(confine, extra)
  local init = { t = "init", v = core.protocol_version, run = 1, guest = { name = "g", source = "return 42" },
                 limits = {}, effects = {}, confine = confine }
  for k, v in pairs(extra or {}) do init[k] = v end
  return init
end

describe("the worker's init frame", function()
  it("runs a guest from an init that names only known fields (the control)", function()
    local res = run_init(init_with { landlock = false, seccomp = false, mdwe = false })
    assert.equal("ok", res.cause, res.message)
    assert.equal(42, res.value)
  end)

  it("refuses a misspelt confine field, naming it", function()
    local res = run_init(init_with { landlock = false, lanlock = true })
    assert.equal(2, res.exit_code, res.message)
    assert.matches("init: confine.lanlock is not a field of the init frame", res.stderr, 1, true)
  end)

  it("refuses a confine field of the wrong type, naming it", function()
    local res = run_init(init_with { seccomp = "yes" })
    assert.equal(2, res.exit_code, res.message)
    assert.matches("init: confine.seccomp must be a boolean", res.stderr, 1, true)
  end)

  it("refuses an unknown top-level field and a missing required one", function()
    local res = run_init(init_with({}, { limts = { memory = 1 } }))
    assert.equal(2, res.exit_code, res.message)
    assert.matches("init: limts is not a field of the init frame", res.stderr, 1, true)
    res = run_init(init_with({}, { guest = { name = "g" } }))
    assert.equal(2, res.exit_code, res.message)
    assert.matches("init: guest.source is missing", res.stderr, 1, true)
  end)

  it("is described by fields.lua: every field has a name, a type and a line of doc", function()
    local TYPES = { string = true, bool = true, count = true, integer = true, list = true, map = true,
                    bin = true, any = true }
    local function walk(list, where)
      for _, f in ipairs(list) do
        assert(type(f.name) == "string" and TYPES[f.type] and type(f.doc) == "string", where .. tostring(f.name))
        if f.fields then walk(f.fields, where .. f.name .. ".") end
      end
    end
    walk(fields.init, "init.")
    walk(fields.start, "start.")
  end)

  it("gets from the planner only confine fields fields.lua names", function()
    local known = {}
    for _, f in ipairs(fields.init) do
      if f.name == "confine" then for _, c in ipairs(f.fields) do known[c.name] = true end end
    end
    local untrusted = airlock.policy.load("untrusted")
    local plan = assert(require("airlock.confine").plan { role = "guest", confine = untrusted.confine,
      limits = untrusted.limits })
    for k in pairs(plan.init) do assert(known[k], "the planner sends confine." .. k) end
  end)
end)
