-- airlock.policy.load -- a policy by name or path: a stock policy
-- (policies/NAME.lua, compiled into the module as airlock.policies.NAME) or a
-- Lua file that returns a policy table, validated as it is. The entry points
-- (airlock.run, airlock.exec, the command) take theirs through resolve
-- (airlock.policy.authority), which lays a bare table over the stock policy
-- of their tier.
local freeze = require "airlock.policy.freeze"
local new = freeze.new

local M = {}

local function loader(what)
  local ok, p = pcall(require, "airlock.policies." .. what)
  if ok then return p end
  if tostring(p):match("module 'airlock%.policies%.[^']*' not found") then return nil end
  error(p, 0)
end

-- What the Lua file at path returns (a table or a policy), or nil, message.
-- base: the stock policy a bare table from it is laid over (for the message).
local function file_value(what, base)
  local chunk, err = loadfile(what, "t")
  if not chunk then
    if err:match("No such file") or err:match("cannot open") then
      return nil, string.format("policy: no stock policy or file named '%s'", what)
    end
    return nil, "policy: " .. err
  end
  local ok, t = pcall(chunk)
  if not ok then return nil, "policy: " .. what .. ": " .. tostring(t) end
  if type(t) ~= "table" then
    return nil, string.format("policy: %s returned %s; a policy file ends with " ..
      "`return policy.extend(\"%s\", {...})` (policy = require \"airlock.policy\"), or with " ..
      "`return {...}`, a table laid over the stock policy", what,
      t == nil and "nothing" or "a " .. type(t) .. ", not a policy table", base or "untrusted")
  end
  return t
end

--- file_name(path) -> the name a policy file gives a policy without a name
--- of its own: its file name without ".lua" ("mods" for policies/mods.lua).
local function file_name(path)
  local base = tostring(path):match("([^/]+)/*$")
  base = base and base:gsub("%.lua$", "")
  return base ~= "" and base or nil
end
M.file_name = file_name

--- load(name_or_path): a stock policy by name ("untrusted", "tool",
--- "dev") or a Lua file that returns a policy table, validated as it is (no
--- base under it: entry points use resolve), and named after the file when
--- it has no name of its own. Returns the frozen policy, or nil, message.
-- Stock policies, frozen once: every run starts from one (resolve lays the
-- run's over it), and a frozen policy cannot change, so one copy serves all.
local stock = {}

function M.load(what)
  if type(what) ~= "string" then return nil, "policy: load expects a name or a path" end
  if stock[what] then return stock[what] end
  if what:match("^[%w_%-]+$") then
    local ok, p = pcall(loader, what)
    if not ok then return nil, tostring(p) end
    if p ~= nil then
      local ok2, pol = pcall(new, p)
      if ok2 then stock[what] = pol return pol end
      return nil, pol .. " (in the stock policy '" .. what .. "')"
    end
  end
  local t, err = file_value(what)
  if t == nil then return nil, err end
  local ok2, pol = pcall(new, t)
  if not ok2 then return nil, pol .. " (in " .. what .. ")" end
  local name = file_name(what)
  if name then
    ok2, pol = pcall(freeze.named, pol, name)
    if not ok2 then return nil, pol .. " (in " .. what .. ")" end
  end
  return pol
end

--- is_stock(name) -> whether name is one of the stock policies.
function M.is_stock(name)
  if type(name) ~= "string" or not name:match("^[%w_%-]+$") then return false end
  local ok, p = pcall(loader, name)
  return ok and p ~= nil
end

M.file_value = file_value

return M
