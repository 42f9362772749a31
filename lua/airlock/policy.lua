-- airlock.policy -- validate, compose and freeze policy tables.
-- A policy is data: unknown keys are errors (a typo never weakens a sandbox),
-- sizes and durations take units, and a loaded policy cannot be modified.
local M = {}

local SIZE_UNITS = { [""] = 1, B = 1, K = 1024, M = 1024 ^ 2, G = 1024 ^ 3 }
local TIME_UNITS = { ms = 1, s = 1000, m = 60000 }

-- Kinds of value a field may hold; each checker returns the normalised value or
-- nil plus what was expected.
local function size(v)
  if math.type(v) == "integer" and v >= 0 then return v end
  if type(v) == "number" and v >= 0 and v == math.floor(v) then return math.tointeger(v) end
  if type(v) == "string" then
    local n, u = v:match("^%s*(%d+%.?%d*)%s*([BKMG]?)i?B?%s*$")
    if n and SIZE_UNITS[u] then return math.floor(tonumber(n) * SIZE_UNITS[u]) end
  end
  return nil, 'a size in bytes (a number, or a string like "64K", "32M", "1G")'
end

local function duration_ms(v)
  if type(v) == "number" and v >= 0 then return math.floor(v) end
  if type(v) == "string" then
    local n, u = v:match("^%s*(%d+%.?%d*)%s*(%a+)%s*$")
    if n and TIME_UNITS[u] then return math.floor(tonumber(n) * TIME_UNITS[u]) end
  end
  return nil, 'a duration in milliseconds (a number, or a string like "500ms", "2s")'
end

local function count(v)
  if type(v) == "number" and v >= 0 and v == math.floor(v) and v < 2 ^ 62 then return math.tointeger(v) end
  return nil, "a whole number >= 0"
end

local function string_(v)
  if type(v) == "string" then return v end
  return nil, "a string"
end

local function argv(v)
  if type(v) == "string" and v ~= "" then return { v } end
  if type(v) == "table" and #v >= 1 then
    local out = {}
    for i, a in ipairs(v) do
      if type(a) ~= "string" then return nil, "a path, or a list {path, args...} of strings" end
      out[i] = a
    end
    if #out == #v then return out end
  end
  return nil, "a path, or a list {path, args...} of strings"
end

local function effect_handler(v)
  if v == false or type(v) == "function" then return v end
  local mt = getmetatable(v)
  if mt and mt.__call then return v end
  return nil, "a handler function, or false to refuse the effect"
end

local function boolean_(v)
  if type(v) == "boolean" then return v end
  return nil, "true or false"
end

-- A list of words from a fixed set; "all" stands for every word.
local function word_list(words, what)
  local known = {}
  for _, w in ipairs(words) do known[w] = true end
  local expected = string.format('a list of %s (%s), or "all"', what, table.concat(words, ", "))
  return function(v)
    if v == "all" then return { table.unpack(words) } end
    if type(v) ~= "table" then return nil, expected end
    local out, seen = {}, {}
    for k, w in pairs(v) do
      if math.type(k) ~= "integer" or not known[w] then
        return nil, expected .. string.format("; '%s' is not one", tostring(w))
      end
      if not seen[w] then seen[w] = true; out[#out + 1] = w end
    end
    table.sort(out)
    return out
  end
end

local function one_of(words)
  local known = {}
  for _, w in ipairs(words) do known[w] = true end
  return function(v)
    if known[v] then return v end
    return nil, "one of: " .. table.concat(words, ", ")
  end
end

-- RLIMIT_CPU counts whole seconds: a duration rounded up.
local function cpu_seconds(v)
  local ms, expected = duration_ms(v)
  if not ms then return nil, expected end
  return (ms + 999) // 1000
end

M.NAMESPACES = { "user", "pid", "net", "ipc", "uts", "mount", "cgroup" }
M.LAYERS = { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp", "cgroup" }

M.SCHEMA = {
  name = string_,
  description = string_,
  worker = argv,
  limits = {
    deadline_ms = duration_ms,
    memory = size,
    instructions = count,
    output = size,
    max_frame = size,
    capture = size,
  },
  effects = { ["*"] = effect_handler },
  confine = {
    namespaces = word_list(M.NAMESPACES, "namespaces"),
    shared_net = boolean_,
    rlimits = { as = size, cpu = cpu_seconds, nofile = count, nproc = count,
                fsize = size, core = size, stack = size },
    capabilities = one_of { "drop", "keep" },
    no_new_privs = boolean_,
    landlock = boolean_,
    seccomp = boolean_,
    require = word_list(M.LAYERS, "layers"),
  },
}

-- Closest valid key by edit distance, for "did you mean" hints.
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

local function closest(key, schema)
  local best, bestd
  for k in pairs(schema) do
    if k ~= "*" then
      local d = distance(tostring(key), k)
      if not bestd or d < bestd then best, bestd = k, d end
    end
  end
  if best and bestd <= math.max(2, #best // 3) then return best end
end

local function path_of(path, key)
  if type(key) == "string" and key:match("^[%a_][%w_]*$") then
    return path == "" and key or path .. "." .. key
  end
  return string.format("%s[%q]", path, key)
end

local function check(tbl, schema, path)
  if type(tbl) ~= "table" then
    error(string.format("policy: %s must be a table (got %s)", path == "" and "the policy" or path, type(tbl)), 0)
  end
  local out = {}
  for k, v in pairs(tbl) do
    local p = path_of(path, k)
    local rule = schema[k]
    if rule == nil and type(k) == "string" then rule = schema["*"] end
    if rule == nil then
      local hint = closest(k, schema)
      error(string.format("policy: unknown key '%s'%s", p,
        hint and string.format(" (did you mean '%s'?)", hint) or ""), 0)
    end
    if type(rule) == "table" then
      out[k] = check(v, rule, p)
    else
      local val, expected = rule(v)
      if val == nil then
        error(string.format("policy: %s must be %s (got %s %s)", p, expected, type(v),
          type(v) == "string" and string.format("%q", v) or tostring(v)), 0)
      end
      out[k] = val
    end
  end
  return out
end

local frozen = setmetatable({}, { __mode = "k" })

local function freeze(t)
  -- Handler objects (tables with a metatable) are code, not data: left as they are.
  if type(t) ~= "table" or frozen[t] or getmetatable(t) ~= nil then return t end
  local proxy = {}
  for k, v in pairs(t) do t[k] = freeze(v) end
  frozen[proxy] = t
  return setmetatable(proxy, {
    __index = t,
    __newindex = function(_, k) error(string.format("policy: cannot modify '%s': a loaded policy is frozen", tostring(k)), 2) end,
    __pairs = function() return next, t, nil end,
    __len = function() return #t end,
    __metatable = "airlock.policy",
  })
end

--- Is t a validated, frozen policy?
function M.is_policy(t) return type(t) == "table" and frozen[t] ~= nil end

--- The plain table behind a frozen policy (shared, do not modify).
local function raw(t) return frozen[t] or t end

local function deep_copy(t)
  if type(t) ~= "table" or (not frozen[t] and getmetatable(t) ~= nil) then return t end
  local c = {}
  for k, v in pairs(raw(t)) do c[k] = deep_copy(v) end
  return c
end

--- Validates a policy table and returns a frozen copy. Errors name the bad key.
function M.new(t)
  if M.is_policy(t) then return t end
  return freeze(check(deep_copy(t), M.SCHEMA, ""))
end

-- Lists (sequences) replace; maps merge deeply.
local function is_list(t) return type(t) == "table" and (next(t) == nil or rawlen(t) > 0) and t[1] ~= nil end

local function merge(base, over)
  local out = deep_copy(base)
  for k, v in pairs(raw(over)) do
    if type(v) == "table" and type(out[k]) == "table" and not is_list(v) and not is_list(out[k])
       and (getmetatable(v) == nil or frozen[v]) then
      out[k] = merge(out[k], v)
    else
      out[k] = deep_copy(v)
    end
  end
  return out
end

--- extend(base, overrides): maps merge deeply, lists and values replace.
function M.extend(base, overrides)
  return M.new(merge(M.new(base), overrides or {}))
end

--- load(name_or_path): a stock policy by name ("untrusted") or a Lua file that
--- returns a policy table. Returns the frozen policy, or nil, message.
function M.load(what)
  if type(what) ~= "string" then return nil, "policy: load expects a name or a path" end
  local chunk, err
  if what:match("^[%w_%-]+$") then
    local ok, p = pcall(require, "airlock.policies." .. what)
    if ok then
      local ok2, pol = pcall(M.new, p)
      if ok2 then return pol end
      return nil, pol
    end
    if not p:match("not found") then return nil, p end
  end
  chunk, err = loadfile(what, "t")
  if not chunk then
    if err:match("No such file") or err:match("cannot open") then
      return nil, string.format("policy: no stock policy or file named '%s'", what)
    end
    return nil, "policy: " .. err
  end
  local ok, t = pcall(chunk)
  if not ok then return nil, "policy: " .. what .. ": " .. tostring(t) end
  local ok2, pol = pcall(M.new, t)
  if not ok2 then return nil, pol .. " (in " .. what .. ")" end
  return pol
end

M.parse_size = size
M.parse_duration = duration_ms

return setmetatable(M, { __call = function(_, t) return M.new(t) end })
