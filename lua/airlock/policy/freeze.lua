-- airlock.policy.freeze -- a table made a policy: materialized (markers
-- resolved, a plain copy), checked against the schema (unknown keys are
-- errors naming the key, with the closest known one; values normalised by
-- their rules), then frozen: a read-only proxy over the checked table, so a
-- loaded policy cannot be modified. raw(p) is the plain table behind a proxy.
local values = require "airlock.policy.values"
local S = require "airlock.policy.schema"
local markers = require "airlock.policy.markers"

local quote, path_of, shown, hint, fail = values.quote, values.path_of, values.shown, values.hint, values.fail
local SCHEMA, LEAF, POST, KEYS = S.SCHEMA, S.LEAF, S.POST, S.KEYS
local REMOVE, appended = markers.remove, markers.appended

local M = {}

-- ------------------------------------------------------------ frozen tables

local frozen = setmetatable({}, { __mode = "k" })   -- proxy -> the plain table behind it

local function freeze(t, path)
  -- Handler objects (tables with a metatable) are code, not data: left as they are.
  if type(t) ~= "table" or frozen[t] or getmetatable(t) ~= nil then return t end
  local proxy = {}
  for k, v in pairs(t) do   -- a leaf needs no path: only a table is frozen (and named in errors)
    if type(v) == "table" then t[k] = freeze(v, path_of(path, k)) end
  end
  frozen[proxy] = t
  return setmetatable(proxy, {
    __index = t,
    __newindex = function(_, k)
      error(string.format("policy: cannot modify '%s': a loaded policy is frozen", path_of(path, k)), 2)
    end,
    __pairs = function() return next, t, nil end,
    __len = function() return #t end,
    __metatable = "airlock.policy",
  })
end

--- Is t a validated, frozen policy (or a part of one)?
function M.is_policy(t) return type(t) == "table" and frozen[t] ~= nil end

--- The plain table behind a frozen policy (shared, do not modify).
local function raw(t) return frozen[t] or t end

-- A plain copy; markers resolved (remove drops the key, append becomes its list).
local function materialize(t)
  if t == REMOVE then return nil end
  if appended(t) then return materialize(appended(t)) end
  if type(t) ~= "table" or (not frozen[t] and getmetatable(t) ~= nil) then return t end
  local c = {}
  for k, v in pairs(raw(t)) do c[k] = materialize(v) end
  return c
end

-- ------------------------------------------------------------ validation

-- The checked, normalised copy of tbl (plain, markers resolved) against a
-- schema node, or an error naming the first bad key or value.
local function check(tbl, schema, path)
  if type(tbl) ~= "table" then
    if schema[LEAF] then
      local val, expected, detail = schema[LEAF](tbl, path)
      if val == nil then fail(path, expected .. ", or a table", tbl, detail) end
      return val
    end
    fail(path, "a table", tbl)
  end
  local out = {}
  for k, v in pairs(tbl) do
    local p = path_of(path, k)
    local rule = schema[k]
    if rule == nil and type(k) == "string" and k ~= "*" then
      rule = schema["*"]
      if rule ~= nil and schema[KEYS] then
        local ok, expected = schema[KEYS](k)
        if not ok then error(string.format("policy: %s: the key %s must be %s", p, quote(k), expected), 0) end
      end
    end
    if rule == nil or type(k) == "table" then
      error(string.format("policy: unknown key '%s'%s", p, hint(k, schema)), 0)
    end
    if v == REMOVE then
      -- nothing to remove outside extend: the key is simply absent
    else
      if appended(v) then v = materialize(v) end
      if type(rule) == "table" then
        out[k] = check(v, rule, p)
      else
        local val, expected, detail = rule(v, p)
        if val == nil then fail(p, expected, v, detail) end
        out[k] = val
      end
    end
  end
  if schema[POST] then
    local why = schema[POST](out)
    if why then error(string.format("policy: %s %s", path == "" and "the policy" or path, why), 0) end
  end
  return out
end

--- Validates a policy table and returns a frozen copy. Errors name the bad key.
function M.new(t)
  if M.is_policy(t) then return t end
  if type(t) ~= "table" then error(string.format("policy: a policy must be a table (got %s)", shown(t)), 0) end
  return freeze(check(materialize(t), SCHEMA, ""), "")
end

-- ------------------------------------------------------------ names

-- A derived policy (policy.extend, policy.layer) has a name of its own or
-- none, never its base's; what it derives from is kept here, beside it.
local bases = setmetatable({}, { __mode = "k" })   -- derived policy -> the name of the one it derives from

--- derived(p, base) -> p, noted as derived from base (its name, or what base
--- itself derives from when it has none).
function M.derived(p, base)
  bases[p] = base.name or bases[base]
  return p
end

--- base_of(p) -> the name of the policy p was derived from (its nearest
--- named ancestor), or nil for a policy made as it is (a stock one, policy.new).
function M.base_of(p) return bases[p] end

--- named(p, name) -> p when it has a name, else a copy of it named name,
--- derived from what p derives from: a policy file without a name of its
--- own is named after the file.
function M.named(p, name)
  if p.name ~= nil then return p end
  local c = materialize(p)
  c.name = name
  local result = M.new(c)
  bases[result] = bases[p]
  return result
end

--- label(p) -> how messages name p: its name, else "(unnamed, from 'BASE')",
--- else "(unnamed)".
function M.label(p)
  if p.name ~= nil then return tostring(p.name) end
  if bases[p] ~= nil then return string.format("(unnamed, from '%s')", tostring(bases[p])) end
  return "(unnamed)"
end

M.raw = raw
M.materialize = materialize

return M
