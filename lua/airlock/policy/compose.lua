-- airlock.policy.compose -- composition, and what counts as loosening.
-- extend(base, overrides) lays an override over a base, led by the schema:
-- maps merge deeply, values and lists replace, the markers append and remove
-- (airlock.policy.markers) act on the base's value; then every field the base
-- locks is compared, old against new, by the rule its schema entry names
-- (a larger limit, a lost namespace, a granted effect...; a field with no rule
-- loosens when it changes at all). layer(base, t) is the same merge without the locks.
local values = require "airlock.policy.values"
local schema = require "airlock.policy.schema"
local markers = require "airlock.policy.markers"
local freeze = require "airlock.policy.freeze"
local loader = require "airlock.policy.load"

local quote, path_of, shown, fail = values.quote, values.path_of, values.shown, values.fail
local is_sequence = values.is_sequence
local SCHEMA, LEAF, about_of = schema.SCHEMA, schema.LEAF, schema.about
local child_of, parse_path = schema.child_of, schema.parse_path
local REMOVE, appended = markers.remove, markers.appended
local raw, materialize, is_policy = freeze.raw, freeze.materialize, freeze.is_policy

local M = {}

-- ------------------------------------------------------------ composition

-- A value that merges as a map: a table, not a marker nor a handler object.
local function is_map_value(v)
  return type(v) == "table" and v ~= REMOVE and not appended(v) and (is_policy(v) or getmetatable(v) == nil)
end

-- Applies over (raw, possibly with markers) onto out (a plain copy), led by the schema.
local function merge(out, over, node, path)
  for k, v in pairs(raw(over)) do
    local p = path_of(path, k)
    local child = child_of(node, k)
    if path == "" and k == "locked" then
      if v == REMOVE then error("policy: locked: an override cannot remove the base's locks", 0) end
      -- Locks accumulate: the base's stay, the override's are added.
      local list = {}
      for _, l in ipairs(type(out.locked) == "table" and out.locked or {}) do list[#list + 1] = l end
      local add = materialize(v)
      if type(add) == "string" then add = { add } end
      if type(add) ~= "table" then fail("locked", "a list of field paths", add) end
      for _, l in ipairs(add) do list[#list + 1] = l end
      out.locked = list
    elseif v == REMOVE then
      out[k] = nil
    elseif appended(v) then
      local cur = out[k]
      if type(child) == "table" and not child[LEAF] then
        error(string.format("policy: %s is a map: policy.append only adds to lists", p), 0)
      end
      if cur ~= nil and not is_sequence(cur) then
        error(string.format("policy: %s: policy.append needs a list in the base (it holds %s)", p, shown(cur)), 0)
      end
      local list = {}
      for _, x in ipairs(cur or {}) do list[#list + 1] = x end
      for _, x in ipairs(appended(v)) do list[#list + 1] = materialize(x) end
      out[k] = list
    elseif type(child) == "table" and is_map_value(v) and type(out[k]) == "table" then
      out[k] = merge(out[k], v, child, p)
    else
      out[k] = materialize(v)
    end
  end
  return out
end

-- ------------------------------------------------------------ locks: what loosens
-- Each field's schema entry names its rule (airlock.policy.looser); a map
-- without one is compared key by key, and a field without one loosens when
-- it changes at all.

local function changed(old, new) return not M.same(old, new) end

local function brief(v)
  if v == nil then return "nil (removed)" end
  if type(v) == "table" and not is_policy(v) and getmetatable(v) ~= nil then return "a handler" end
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = tostring(x) end
    if #parts > 0 or next(raw(v)) == nil then return "{" .. table.concat(parts, ", ") .. "}" end
    return "{...}"
  end
  if type(v) == "function" then return "a handler" end
  if type(v) == "string" then return quote(v) end
  return tostring(v)
end

-- The first loosened field under (old, new), as "path: old -> new", or nil.
-- With free, budgets are not held (they answer to the host's ceilings).
local function loosened(node, old, new, path, free)
  local about = about_of(node)
  if free and about and about.budget then return nil end
  if about and about.looser then
    if about.looser(old, new, about) then return path, old, new end
    return nil
  end
  if type(node) == "table" and (old == nil or is_map_value(old)) and (new == nil or is_map_value(new))
     and (old ~= nil or new ~= nil) then
    local keys = {}
    for k in pairs(raw(old or {})) do keys[k] = true end
    for k in pairs(raw(new or {})) do keys[k] = true end
    local sorted = {}
    for k in pairs(keys) do sorted[#sorted + 1] = k end
    table.sort(sorted, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(sorted) do
      local p, o, n = loosened(child_of(node, k), (old or {})[k], (new or {})[k], path_of(path, k), free)
      if p then return p, o, n end
    end
    return nil
  end
  if changed(old, new) then return path, old, new end
end

local function get_path(t, keys)
  for _, k in ipairs(keys) do
    if type(t) ~= "table" then return nil end
    t = t[k]
  end
  return t
end

-- The first field that result loosens among those base locks, or nil:
-- path, the lock that covers it, the old value and the new one. A lock on a
-- confine section locks isolation, not the budgets in it (schema.BUDGETS:
-- rlimits.cpu, rlimits.stack), unless hold_budgets (a nested run's policy,
-- held to its parent's in everything); any other lock holds what it covers.
local function loosening(base, result, hold_budgets)
  for _, lp in ipairs(base.locked or {}) do
    local keys = assert(parse_path(lp))
    local node = SCHEMA
    for _, k in ipairs(keys) do node = child_of(node, k) end
    local free = not hold_budgets and (about_of(node) or {}).isolation == true
    local p, o, n = loosened(node, get_path(base, keys), get_path(result, keys), lp, free)
    if p then return p, lp, o, n end
  end
end

-- Errors when result loosens a field base locks.
local function check_locks(base, result)
  local p, lp, o, n = loosening(base, result)
  if p then
    error(string.format("policy: %s is locked by the base policy '%s'%s: %s -> %s would loosen it",
      p, freeze.label(base), p ~= lp and " (locked: " .. lp .. ")" or "",
      brief(o), brief(n)), 0)
  end
end

local function as_policy(base)
  if type(base) == "string" then
    local p, err = loader.load(base)
    if not p then error(err, 0) end
    return p
  end
  return freeze.new(base)
end

-- A derived policy (extend, layer) has a name of its own or none: the one
-- its overrides give, never its base's, so a policy laid over untrusted is
-- not reported nor recorded as untrusted. What it derives from is kept
-- beside it (freeze.base_of).
local function derive(base, overrides)
  local merged = merge(materialize(base), overrides or {}, SCHEMA, "")
  if raw(overrides or {}).name == nil then merged.name = nil end
  return freeze.derived(freeze.new(merged), base)
end

--- extend(base, overrides) -> a new frozen policy: maps merge deeply, values
--- and lists replace, policy.append{...} adds to a list, policy.remove drops a
--- key; loosening a field the base locks is an error naming it. base may be a
--- policy, a table or a stock name. The result's name is the overrides' (or
--- none); base_of names the base.
function M.extend(base, overrides)
  base = as_policy(base)
  if overrides ~= nil and type(overrides) ~= "table" then
    error(string.format("policy: extend: the overrides must be a table (got %s)", shown(overrides)), 0)
  end
  local result = derive(base, overrides)
  check_locks(base, result)
  return result
end

--- layer(base, t): t over base, as extend does, but without checking locks.
--- This is what airlock.run does with a bare table: its author states the
--- whole intent, and may turn layers off by name.
function M.layer(base, overrides)
  return derive(as_policy(base), overrides)
end

-- ------------------------------------------------------------ equality

-- Deep equality (tables by content, frozen or not).
function M.same(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  if not (is_map_value(a) and is_map_value(b)) then return false end
  for k, v in pairs(raw(a)) do if not M.same(v, b[k]) then return false end end
  for k in pairs(raw(b)) do if a[k] == nil then return false end end
  return true
end

-- The fields a nested run's policy is compared on: everything but the
-- names, the description and the locks (which only say what extend checks).
local NEST_FIELDS = {}
for k in pairs(SCHEMA) do
  if type(k) == "string" and k ~= "name" and k ~= "description" and k ~= "locked" then NEST_FIELDS[#NEST_FIELDS + 1] = k end
end
table.sort(NEST_FIELDS)

--- tighter(parent, child) -> nil when child loosens nothing of parent, else
--- "path: old -> new" naming the first field it loosens (by the rules locks
--- use: a larger limit, a granted effect, a lost layer; a field without a
--- rule loosens when it changes). Used for ctx:nest's policies, where every
--- field counts as locked.
function M.tighter(parent, child)
  local base = setmetatable({ locked = NEST_FIELDS }, { __index = parent })
  local p, _, o, n = loosening(base, child, true)
  if p then return string.format("%s: %s -> %s", p, brief(o), brief(n)) end
  return nil
end

M.loosening = loosening
M.brief = brief
M.get_path = get_path

return M
