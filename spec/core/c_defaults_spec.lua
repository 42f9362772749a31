-- c_defaults_spec.lua -- the C API's stock untrusted defaults
-- (airlock_untrusted_defaults, core/untrusted.c) are what the Lua module gives
-- a guest under policies/untrusted.lua: the same init limits and layers, the
-- same namespaces, rlimits, capabilities, no_new_privs, deadline and bounds.
-- The Lua side is read where it is decided: the options the module hands the
-- broker (b:_start) for a run under the policy, and the policy's own fields,
-- every one of which must be compared here or named with the reason a C host
-- has no such field: a field added to the policy fails this spec until the C
-- defaults carry it.
local airlock = require "airlock"
local core = require "airlock.core"
local H = require "helper"

local policy = airlock.policy

-- What the C library gives: spec/fixtures/c_defaults.c prints it as Lua.
local function c_defaults()
  local out, rc = H.sh(H.bin .. "/c-defaults")
  assert.equal(0, rc, out)
  return assert(load(out, "=c-defaults", "t", {}))()
end

-- The options the Lua module hands the broker for one run under pol: b:_start
-- is wrapped for the run (the broker's methods are one table for every broker).
local function lua_start(pol)
  local methods = getmetatable(airlock.broker()).__index
  local real, seen = methods._start, nil
  methods._start = function(self, start)
    seen = seen or start
    return real(self, start)
  end
  local ok, res = pcall(airlock.run, { guest = "return 1", policy = pol })
  methods._start = real
  assert(ok, res)
  assert(res and res.cause == "ok", res and res.message)
  return assert(seen, "the run did not reach b:_start")
end

local function set(list)
  local s = {}
  for _, v in ipairs(list or {}) do s[v] = true end
  return s
end

-- The layers the worker applies itself (init.confine); the others the spawner
-- applies and the C broker refuses to start without (an asked-for namespace,
-- rlimit, capability drop or no_new_privs that fails fails the start).
local WORKER_LAYERS = { landlock = true, seccomp = true, mdwe = true }

-- Fields of the Lua side a C host's defaults do not carry, and why.
local NOT_IN_C = {
  ["init.confine.seccomp_program"] = "the same filter, compiled by the parent once (airlock_init.seccomp_program " ..
    "takes one; without it the worker builds its own)",
  ["init.confine.pretend_absent"] = "tests only",
  ["start.shared_net"] = "a root host's shortcut to one empty net namespace (spawn.netns_fd); each run's own " ..
    "is just as empty",
  ["limits.ledger"] = "recording is the Lua module's (airlock.ledger)",
  ["limits.pool"] = "b:warm's pool is the Lua module's (a C host parks workers itself)",
  ["limits.nest"] = "nested runs are the Lua module's (ctx:nest)",
  ["init.limits.cpu_enforced"] = "false only in a replay, which is the Lua module's (airlock.replay); the " ..
    "worker reads it absent as true, as a C host sends it",
}
-- Options of b:_start that are not policy: the run itself.
local RUN_ITSELF = { argv = true, init = true, handlers = true, ctx = true, no_aslr = true }

-- Every difference between what C gives and what Lua gives under pol: a list
-- of "field: C ... , Lua ..." lines (empty when they agree).
local function differences(c, pol)
  local rp = assert(policy.resolve(pol, "untrusted"))
  local start = lua_start(pol)
  local diff = {}
  local function check(field, cv, lv)
    if cv ~= lv then diff[#diff + 1] = string.format("%s: C %s, Lua %s", field, tostring(cv), tostring(lv)) end
  end
  -- init.limits: each the Lua module sends, with 0 for none (C leaves a 0 out)
  for k, v in pairs(start.init.limits) do
    if not NOT_IN_C["init.limits." .. k] then check("init.limits." .. k, c.init.limits[k] or 0, v) end
  end
  for k in pairs(c.init.limits) do
    if start.init.limits[k] == nil then diff[#diff + 1] = "init.limits." .. k .. ": only in C" end
  end
  -- init.confine: the worker's layers, and require
  local lc = start.init.confine
  for k, v in pairs(lc) do
    local field = "init.confine." .. k
    if WORKER_LAYERS[k] then
      check(field, c.init.confine[k], v)
    elseif k == "require" then
      local cr = set(c.init.confine.require)
      for _, layer in ipairs(v) do
        if WORKER_LAYERS[layer] then check("init.confine.require " .. layer, cr[layer] == true, true)
        elseif layer == "namespaces" then check("required namespaces", #c.start.namespaces > 0, true)
        elseif layer == "rlimits" then check("required rlimits", next(c.start.rlimits) ~= nil, true)
        elseif layer == "capabilities" then check("required capabilities", c.start.drop_caps, true)
        elseif layer == "no_new_privs" then check("required no_new_privs", c.start.no_new_privs, true)
        else diff[#diff + 1] = "init.confine.require " .. layer .. ": a layer the C defaults do not know" end
      end
      for layer in pairs(cr) do check("init.confine.require " .. layer .. " (only in C)", set(v)[layer], true) end
    elseif not NOT_IN_C[field] then
      diff[#diff + 1] = field .. ": not in the C defaults (core/untrusted.c), nor in NOT_IN_C here"
    end
  end
  for k in pairs(c.init.confine) do
    if lc[k] == nil then diff[#diff + 1] = "init.confine." .. k .. ": only in C" end
  end
  -- the spawner's and the broker's options
  for k, v in pairs(start) do
    local field = "start." .. k
    if k == "namespaces" then
      check(field, table.concat(c.start.namespaces, " "), table.concat(v, " "))
    elseif k == "rlimits" then
      for name in pairs(set(core.rlimits)) do check("start.rlimits." .. name, c.start.rlimits[name], v[name]) end
    elseif c.start[k] ~= nil then
      check(field, c.start[k], v)
    elseif not (RUN_ITSELF[k] or NOT_IN_C[field]) then
      diff[#diff + 1] = field .. ": not in the C defaults (core/untrusted.c), nor in NOT_IN_C here"
    end
  end
  check("start.expect_ready", c.start.expect_ready, start.expect_ready == nil or start.expect_ready)
  for _, k in ipairs { "namespaces", "rlimits", "drop_caps", "no_new_privs", "verify_seccomp" } do
    if start[k] == nil then diff[#diff + 1] = "start." .. k .. ": only in C" end
  end
  -- the policy's limits, each one the worker, the broker or the module enforces
  local TO_C = { instructions = "init", memory = "init", output = "init", turn_instructions = "init", cpu = "init",
                 turn_cpu = "init", deadline_ms = "start", max_frame = "start", capture = "start" }
  for k in pairs(require("airlock.util").copy(rp.limits)) do
    if not TO_C[k] and not NOT_IN_C["limits." .. k] then
      diff[#diff + 1] = "limits." .. k .. ": a limit the C defaults do not carry, nor named in NOT_IN_C here"
    end
  end
  check("limits.capture", c.start.capture_max, rp.limits.capture)
  table.sort(diff)
  return diff
end

describe("the C API's untrusted defaults (airlock_untrusted_defaults)", function()
  it("are what the Lua module gives a guest under policies/untrusted.lua", function()
    assert.same({}, differences(c_defaults(), "untrusted"))
  end)

  it("would be caught drifting: a policy that differs in a limit and an rlimit is not matched (the control)", function()
    local diff = differences(c_defaults(), policy.extend("untrusted", {
      limits = { memory = "32M", turn_instructions = 1000 }, confine = { rlimits = { stack = "4M" } } }))
    -- the address space follows the heap: 32M of it gives 32M + 16M + 64M
    assert.same({ "init.limits.memory: C 67108864, Lua 33554432", "init.limits.turn_instructions: C 0, Lua 1000",
                  "start.rlimits.as: C 167772160, Lua 117440512", "start.rlimits.stack: C 8388608, Lua 4194304" }, diff)
  end)

  it("share the C library's own defaults with the policy schema", function()
    assert.equal(policy.default("limits.output"), core.limits.output)
    assert.equal(policy.default("limits.capture"), core.limits.capture)
    assert.equal(policy.default("limits.max_frame"), core.limits.max_frame)
    assert.equal(policy.default("tool.limits.capture"), core.limits.capture)
    assert.equal(policy.default("tool.limits.tmp_size"), core.limits.tmp_size)
  end)
end)
