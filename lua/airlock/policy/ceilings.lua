-- airlock.policy.ceilings -- how far a policy may raise a budget: the host's
-- ceilings. A budget (schema.BUDGETS: CPU, memory, stack, instructions,
-- deadline, output) is sized by each policy; where a policy asks for more
-- than the stock policy of its tier gives, it may ask up to the ceiling of
-- that kind and no further (resolve refuses it, naming the field, the value
-- and the ceiling). The ceilings belong to the process that runs guests: the
-- embedding program sets them (airlock.policy.ceilings{...}), the airlock
-- command from --ceiling and AIRLOCK_CEILING. Isolation has no ceiling: it is
-- locked (airlock.policy.compose).
local values = require "airlock.policy.values"
local schema = require "airlock.policy.schema"
local looser = require "airlock.policy.looser"
local get_path = require("airlock.policy.compose").get_path

local INF = looser.INF

local M = {}

-- Each kind: the rule of its value and the ceiling a process starts with (0: none).
M.KINDS = { "cpu", "memory", "stack", "instructions", "deadline", "output" }
local KIND = {
  cpu = { rule = values.duration_ms, default = 10 * 60 * 1000 },   -- 10 minutes
  memory = { rule = values.size, default = 4 << 30 },
  stack = { rule = values.size, default = 64 << 20 },
  instructions = { rule = values.count, default = 0 },
  deadline = { rule = values.duration_ms, default = 0 },
  output = { rule = values.size, default = 64 << 20 },
}

local current = {}
for _, k in ipairs(M.KINDS) do current[k] = KIND[k].default end
local generation = 0   -- changes with every set, so what check found for a policy is kept per generation
local loading = 0      -- > 0 while a policy file runs: it may not change them

--- A value of kind as the messages write it ("4G", "90s", "unlimited").
local function shown(kind, v)
  if v == INF then return "unlimited" end
  if kind == "cpu" or kind == "deadline" then
    if v % 60000 == 0 then return string.format("%dm", v // 60000) end
    if v % 1000 == 0 then return string.format("%ds", v // 1000) end
    return string.format("%dms", v)
  end
  if kind == "instructions" then return string.format("%d", v) end
  for _, u in ipairs { { "G", 1 << 30 }, { "M", 1 << 20 }, { "K", 1 << 10 } } do
    if v % u[2] == 0 then return string.format("%d%s", v // u[2], u[1]) end
  end
  return string.format("%d", v)
end
M.shown = shown

--- get() -> the current ceilings, { kind = number } (0: none).
function M.get()
  local out = {}
  for _, k in ipairs(M.KINDS) do out[k] = current[k] end
  return out
end

--- defaults() -> the ceilings a process starts with.
function M.defaults()
  local out = {}
  for _, k in ipairs(M.KINDS) do out[k] = KIND[k].default end
  return out
end

-- t -> { kind = number }, or nil, message (every name and value checked).
local function normalised(t)
  local out = {}
  for k, v in pairs(t) do
    local kind = type(k) == "string" and KIND[k]
    if not kind then
      return nil, string.format("ceilings: unknown ceiling '%s'%s; the ceilings are %s", tostring(k),
        type(k) == "string" and values.hint(k, M.KINDS) or "", table.concat(M.KINDS, ", "))
    end
    local n, expected = kind.rule(v)
    if n == nil then
      return nil, string.format("ceilings: %s must be %s, or 0 for none (got %s)", k, expected, values.shown(v))
    end
    out[k] = n
  end
  return out
end

--- ceilings(t) -> the ceilings now in force ({ kind = number }, 0: none),
--- after setting each kind t names to its value ("60s", "2G", 1e10; 0:
--- none); the others stay as they were. ceilings() only reads them. Nothing
--- is set when a name or value is wrong (an error naming it). A policy file
--- cannot set them: it is what they bound.
function M.ceilings(t)
  if t == nil then return M.get() end
  if type(t) ~= "table" then error("ceilings: expects a table like { cpu = \"60s\", memory = \"2G\" }", 2) end
  if loading > 0 then
    error("ceilings: a policy file cannot change the host's ceilings (the host program sets them, " ..
      "or the airlock command's --ceiling)", 2)
  end
  local n, err = normalised(t)
  if not n then error(err, 2) end
  for k, v in pairs(n) do current[k] = v end
  generation = generation + 1
  return M.get()
end

--- parse("cpu=60s,memory=2G") -> { cpu = 60000, memory = 2147483648 }, or
--- nil, message: what --ceiling and AIRLOCK_CEILING take.
function M.parse(text)
  local out = {}
  for item in tostring(text):gmatch("[^,]+") do
    local k, v = item:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
    if not k or v == "" then
      return nil, string.format("ceilings: '%s' is not NAME=VALUE (like cpu=60s,memory=2G)", item)
    end
    local n = tonumber(v)
    if n and (k == "cpu" or k == "deadline") and n ~= 0 then
      return nil, string.format("ceilings: %s=%s needs a unit: %ss (seconds), %sms, %sm", k, v, v, v, v)
    end
    out[k] = n or v
  end
  if next(out) == nil then return nil, "ceilings: expected NAME=VALUE[,NAME=VALUE...] (like cpu=60s,memory=2G)" end
  return normalised(out)
end

--- while_loading(f, ...) -> f(...), during which the ceilings cannot be set
--- (resolve runs policy files under it).
function M.while_loading(f, ...)
  loading = loading + 1
  local res = table.pack(pcall(f, ...))
  loading = loading - 1
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

local checked = setmetatable({}, { __mode = "k" })   -- policy -> { [base] = {generation, message or false} }

-- What budget b stands at in policy t, in the ceiling's units (INF: no
-- bound), and whether t sets it itself: when t leaves it unset, the budget
-- that stands in for it (b.unset) does.
local function value_of(b, t)
  local v = get_path(t, b.keys)
  if b.unset and (v == nil or v == 0) then
    return looser.value(b.unset.about, get_path(t, b.unset.keys)) * b.unset.unit, false
  end
  return looser.value(b.about, v) * b.unit, true
end

--- check(pol, base, base_name) -> nil when every budget of pol is within what
--- base (the stock policy of its tier) gives or the ceiling of its kind; else
--- the message refusing it: the field, its value, the stock's, the ceiling
--- and how to raise it. A budget under an rlimits section pol does not have
--- is not checked: that layer is off (a confinement matter, which warns);
--- nor is a guest's rlimits.cpu when limits.cpu, which it then follows, is set.
--- limits.cpu, set, is measured against the stock's CPU: its limits.cpu, or
--- its rlimits.cpu when it sets none.
function M.check(pol, base, base_name)
  local memo = checked[pol]
  if not memo then memo = setmetatable({}, { __mode = "k" }) checked[pol] = memo end
  local found = memo[base]
  if found and found[1] == generation then return found[2] or nil end
  local message = false
  for _, b in ipairs(schema.BUDGETS) do
    local want, own = value_of(b, pol)
    local off = b.layer and get_path(pol, b.layer) == nil                  -- the rlimits layer off
    local stood_in = b.instead and (get_path(pol, b.instead) or 0) > 0      -- another budget stands for it
    if own and not off and not stood_in then
      local stock = value_of(b, base)
      local ceiling = current[b.kind] == 0 and INF or current[b.kind]
      if want > stock and want > ceiling then
        local v = shown(b.kind, want)
        local arg = want == INF and "0" or v                       -- 0: no ceiling
        local lua = (want == INF or b.kind == "instructions") and arg or string.format("%q", arg)
        message = string.format("policy: '%s' raises %s to %s (the stock '%s' has %s), above the host's %s " ..
          "ceiling of %s. To allow it, raise the ceiling: airlock.policy.ceilings{ %s = %s } in the host " ..
          "program, or --ceiling %s=%s (or AIRLOCK_CEILING=%s=%s) for the airlock command",
          tostring(pol.name or "(unnamed)"), b.path, v, base_name, shown(b.kind, stock), b.kind,
          shown(b.kind, ceiling), b.kind, lua, b.kind, arg, b.kind, arg)
        break
      end
    end
  end
  memo[base] = { generation, message }
  return message or nil
end

return M
