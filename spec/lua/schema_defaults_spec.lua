-- schema_defaults_spec.lua -- the policy schema is the one statement of every
-- confinement default: for each field of confine (guests) and tool.confine
-- (programs) that has a default, the planner (airlock.confine) makes the same
-- plan whether the field is absent or set to the schema's default. A default
-- the docs (docs/POLICY.md, written from the schema) state and the planner
-- does not apply fails here, field by field.
require "airlock"   -- loads the module, whose Lua parts these are
local policy = require "airlock.policy"
local schema = require "airlock.policy.schema"
local confine = require "airlock.confine"
local grants = require "airlock.policy.grants"

-- A plain copy of a plan's parts (no functions, nothing shared).
local function plain(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = plain(x) end
  return out
end

local function guest_plan(c)
  local plan, err, failed = confine.plan { role = "guest", confine = c, limits = {} }
  plan = plan or failed
  assert(plan, err)
  return plain { start = plan.start, init = plan.init, layers = plan.layers }
end

-- A program's plan: what it reports, and the spawner's options, where a
-- field given as its schema default is dropped (the planner passes an
-- explicit no_new_privs, landlock.scope or seccomp.mode through to the
-- spawner, whose binding (lua/binding/lconfine.c) reads each absent as that
-- same default). seccomp.refuse is filled in by the planner, so a planner
-- that applied another value than the schema's would still show.
local function program_plan(c)
  local tool = policy.new { tool = { confine = c } }.tool
  local plan, err, failed = confine.plan { role = "program", confine = tool.confine,
    grants = assert(grants.of_policy(tool)), limits = {}, tmp = "none", root = false }
  plan = plan or failed
  assert(plan, err)
  local out = plain { start = plan.start, layers = plan.layers }
  local sc = out.start.confine or {}
  local function drop(t, path)
    for k, v in pairs(t or {}) do
      if v == policy.default(path .. k) then t[k] = nil end
    end
  end
  drop(sc, "tool.confine.")
  if type(sc.landlock) == "table" then drop(sc.landlock, "tool.confine.landlock.") end
  if type(sc.seccomp) == "table" then drop(sc.seccomp, "tool.confine.seccomp.") end
  return out
end

-- Every field of node with a default: { path, key, default, sub } where sub
-- names the section the field is in (nil: node itself).
local function defaults_of(node)
  local out = {}
  for k, child in pairs(node) do
    if type(k) == "string" then
      local about = schema.about(child)
      if about and about.default ~= nil then out[#out + 1] = { key = k, default = about.default } end
      if type(child) == "table" then
        for k2, grand in pairs(child) do
          local a2 = type(k2) == "string" and schema.about(grand)
          if a2 and a2.default ~= nil then out[#out + 1] = { sub = k, key = k2, default = a2.default } end
        end
      end
    end
  end
  table.sort(out, function(a, b) return (a.sub or "") .. "." .. a.key < (b.sub or "") .. "." .. b.key end)
  return out
end

-- A section a sub-field needs to mean anything (a program's Landlock rules,
-- its seccomp filter).
local SECTION = {
  landlock = function() return { read = { "/usr" } } end,
  seccomp = function() return { promises = "stdio rpath" } end,
}

local function check(role, node, plan_of, prefix)
  local list = defaults_of(node)
  assert.is_true(#list > 0)
  local drift = {}
  for _, d in ipairs(list) do
    local absent, given = {}, {}
    if d.sub then
      absent[d.sub], given[d.sub] = SECTION[d.sub](), SECTION[d.sub]()
      given[d.sub][d.key] = d.default
    else
      given[d.key] = d.default
    end
    local a, g = plan_of(absent), plan_of(given)
    local path = prefix .. (d.sub and d.sub .. "." or "") .. d.key
    if not require("luassert.util").deepcompare(a, g, true) then
      drift[#drift + 1] = string.format("%s (%s): the schema's default %q is not what the planner applies",
        path, role, tostring(d.default))
    end
  end
  assert.same({}, drift)
end

describe("the schema's confinement defaults", function()
  it("are what the planner applies for a guest", function()
    check("guest", schema.SCHEMA.confine, guest_plan, "confine.")
  end)

  it("are what the planner applies for a program", function()
    check("program", schema.SCHEMA.tool.confine, program_plan, "tool.confine.")
  end)

  it("name seccomp.refuse's errno, which a program gets when its policy says nothing", function()
    local tool = policy.new { tool = { confine = { seccomp = { promises = "stdio" } } } }.tool
    local plan = assert(confine.plan { role = "program", confine = tool.confine, limits = {}, tmp = "none" })
    assert.equal(policy.default("tool.confine.seccomp.refuse"), plan.start.confine.seccomp.refuse)
    assert.equal("errno", plan.start.confine.seccomp.refuse)
  end)

  it("would catch a drift (the control): a value other than the default changes the plan", function()
    assert.are_not.same(program_plan { seccomp = { promises = "stdio rpath" } },
      program_plan { seccomp = { promises = "stdio rpath", refuse = "kill" } })
    assert.are_not.same(guest_plan {}, guest_plan { capabilities = "drop" })
  end)

  it("keep the layer list in the schema alone: the planner reports its layers in the schema's order", function()
    local plan = program_plan {}
    local names = {}
    for _, list in ipairs { policy.LAYERS, policy.PROGRAM_LAYERS } do
      for _, n in ipairs(list) do if plan.layers[n] then names[#names + 1] = n end end
    end
    for n in pairs(plan.layers) do
      local known = false
      for _, list in ipairs { policy.LAYERS, policy.PROGRAM_LAYERS } do
        for _, m in ipairs(list) do known = known or m == n end
      end
      assert(known or n == "workspace" or n == "rootfs" or n == "effects", "a layer the schema does not list: " .. n)
    end
    assert.is_true(#names >= #policy.LAYERS)
  end)
end)
