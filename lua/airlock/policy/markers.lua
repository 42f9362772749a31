-- airlock.policy.markers -- the two values an override may hold that are not
-- data: policy.append{...} (add these items to the base's list) and
-- policy.remove (drop this key). Validation resolves them (remove: the key is
-- absent; append: its list), composition applies them to a base. Their own
-- module, so that both can know them without requiring each other.
local values = require "airlock.policy.values"

local is_sequence = values.is_sequence

local M = {}

local APPEND = {}   -- marker -> items

--- policy.append{items...}: in an override, adds the items to the base's list.
function M.append(items)
  if not is_sequence(items) then error("policy.append expects a list {item, ...}", 2) end
  local m = setmetatable({}, {
    __metatable = "airlock.policy.append",
    __tostring = function() return "policy.append{...}" end,
    __index = function() error("policy.append{...} is a marker for policy.extend, not a list", 2) end,
  })
  local copy = {}
  for i, v in ipairs(items) do copy[i] = v end
  APPEND[m] = copy
  return m
end
setmetatable(APPEND, { __mode = "k" })

--- policy.remove: in an override, `key = policy.remove` drops the key.
M.remove = setmetatable({}, {
  __metatable = "airlock.policy.remove",
  __tostring = function() return "policy.remove" end,
  __call = function()
    error("policy.remove is a value, not a function: write `key = policy.remove`", 2)
  end,
})

--- The items of a policy.append{...} marker, or nil when v is not one.
function M.appended(v) return APPEND[v] end

return M
