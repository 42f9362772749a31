-- airlock.policy.values -- the rules for a policy's values and the pieces of
-- its error messages. A rule(v, path) returns the normalised value, or nil,
-- what was expected and optionally what was wrong; sizes and durations take
-- units ("64K", "2s"). Also: how a field's path and a wrong value are written
-- (limits.memory, effects["fs.read"]; string "x"), and the "did you mean"
-- hint for a misspelt key or word.
local set_of = require("airlock.util").set_of

local M = {}

local SIZE_UNITS = { [""] = 1, B = 1, K = 1024, M = 1024 ^ 2, G = 1024 ^ 3 }
local TIME_UNITS = { ms = 1, s = 1000, m = 60000 }

-- ------------------------------------------------------------ paths and messages

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or
            repeat return then true until while]]):gmatch("%a+") do KEYWORDS[w] = true end

local function quote(s)
  return '"' .. s:gsub('[%c"\\\127-\255]', function(c)
    local named = { ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r", ['"'] = '\\"', ["\\"] = "\\\\" }
    return named[c] or string.format("\\%03d", c:byte())
  end) .. '"'
end

--- The path of key under path, as Lua would write it: limits.memory,
--- effects["fs.read"].rot, confine.require[2].
local function path_of(path, key)
  if type(key) == "string" and key:match("^[%a_][%w_]*$") and not KEYWORDS[key] then
    return path == "" and key or path .. "." .. key
  end
  if type(key) == "string" then return path .. "[" .. quote(key) .. "]" end
  if math.type(key) == "integer" then return path .. "[" .. key .. "]" end
  if type(key) == "number" or type(key) == "boolean" then return path .. "[" .. tostring(key) .. "]" end
  return path .. "[" .. type(key) .. "]"
end

-- How a wrong value is shown: strings quoted, tables and functions by kind.
local function shown(v)
  if type(v) == "string" then return "string " .. quote(v) end
  if type(v) == "table" then return "a table" end
  if type(v) == "function" then return "a function" end
  return type(v) .. " " .. tostring(v)
end

-- Edit distance with adjacent transpositions counted once (optimal string alignment).
local function distance(a, b)
  local d = {}
  for i = 0, #a do d[i] = { [0] = i } end
  for j = 0, #b do d[0][j] = j end
  for i = 1, #a do
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local v = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        v = math.min(v, d[i - 2][j - 2] + 1)
      end
      d[i][j] = v
    end
  end
  return d[#a][#b]
end

-- The closest of the candidates (a list or a schema's keys), or nil when none is close.
local function closest(key, candidates)
  key = tostring(key)
  local best, bestd
  local function consider(k)
    if type(k) ~= "string" or k == "*" then return end
    local d = distance(key, k)
    if not bestd or d < bestd or (d == bestd and k < best) then best, bestd = k, d end
  end
  if candidates[1] ~= nil then
    for _, k in ipairs(candidates) do consider(k) end
  else
    for k in pairs(candidates) do consider(k) end
  end
  if best and bestd <= math.max(2, #best // 3) then return best end
end

local function hint(key, candidates)
  local c = closest(key, candidates)
  return c and string.format(" (did you mean '%s'?)", c) or ""
end

-- The error for a value that is not what path needs.
local function fail(path, expected, v, detail)
  local where = path == "" and "the policy" or path
  if detail then error(string.format("policy: %s must be %s; %s", where, expected, detail), 0) end
  error(string.format("policy: %s must be %s (got %s)", where, expected, shown(v)), 0)
end

-- ------------------------------------------------------------ value rules
-- A rule(v, path) returns the normalised value, or nil, what was expected, and
-- optionally what was wrong (instead of "got ..."). Every rule is idempotent:
-- a normalised value passes through it unchanged (extend re-validates).

local function size(v)
  if math.type(v) == "integer" and v >= 0 then return v end
  if type(v) == "number" and v >= 0 and v == math.floor(v) and v < 2 ^ 62 then return math.tointeger(v) end
  if type(v) == "string" then
    local n, u = v:match("^%s*(%d+%.?%d*)%s*([BKMG]?)i?B?%s*$")
    if n and SIZE_UNITS[u] then return math.floor(tonumber(n) * SIZE_UNITS[u]) end
  end
  return nil, 'a size in bytes (a number, or a string like "64K", "32M", "1G")'
end

local function duration_ms(v)
  if type(v) == "number" and v >= 0 and v < 2 ^ 53 then return math.floor(v) end
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

local function cores(v)
  if type(v) == "number" and v >= 0 and v <= 4096 then return v end
  return nil, "a number of CPU cores >= 0 (1 is one core, 0.5 half of one; 0: no bound)"
end

local function string_(v)
  if type(v) == "string" then return v end
  return nil, "a string"
end

local function path_(v)
  if type(v) == "string" and v ~= "" and not v:find("\0", 1, true) then return v end
  return nil, "a path (a non-empty string)"
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
  if type(mt) == "table" and mt.__call then return v end
  return nil, "a handler function, or false to refuse the effect"
end

local function boolean_(v)
  if type(v) == "boolean" then return v end
  return nil, "true or false"
end

-- Every integer key 1..n and nothing else.
local function is_sequence(v)
  if type(v) ~= "table" then return false end
  local n = 0
  for k in pairs(v) do
    if math.type(k) ~= "integer" or k < 1 then return false end
    n = n + 1
  end
  return n == #v
end

-- A list of words from a fixed set; "all" stands for every word. Unique, in
-- the set's own order.
local function word_list(words, what)
  local known = {}
  for i, w in ipairs(words) do known[w] = i end
  local expected = string.format('a list of %s (%s), or "all"', what, table.concat(words, ", "))
  return function(v)
    if v == "all" then return { table.unpack(words) } end
    if not is_sequence(v) then return nil, expected end
    local out, seen = {}, {}
    for _, w in ipairs(v) do
      if not known[w] then
        return nil, expected, string.format("'%s' is not one%s", tostring(w), hint(w, words))
      end
      if not seen[w] then seen[w] = true; out[#out + 1] = w end
    end
    table.sort(out, function(a, b) return known[a] < known[b] end)
    return out
  end
end

-- A list of strings (order kept, duplicates dropped) by a per-item rule.
local function list_of(item, what)
  return function(v)
    if type(v) == "string" then v = { v } end
    if not is_sequence(v) then return nil, "a list of " .. what end
    local out, seen = {}, {}
    for i, x in ipairs(v) do
      local val = item(x)
      if val == nil then return nil, "a list of " .. what, string.format("item %d is %s", i, shown(x)) end
      if not seen[val] then seen[val] = true; out[#out + 1] = val end
    end
    return out
  end
end

local function port(v)
  if math.type(v) == "integer" and v >= 1 and v <= 65535 then return v end
  if type(v) == "number" and v == math.floor(v) and v >= 1 and v <= 65535 then return math.tointeger(v) end
end

local function one_of(words)
  local known = set_of(words)
  return function(v)
    if known[v] then return v end
    return nil, "one of: " .. table.concat(words, ", "), type(v) == "string"
      and string.format("got %s%s", quote(v), hint(v, words)) or nil
  end
end

-- RLIMIT_CPU counts whole seconds: a number is seconds, a duration string is
-- rounded up to whole seconds ("1500ms" -> 2).
local function cpu_seconds(v)
  if type(v) == "number" then return count(v) end
  local ms = duration_ms(v)
  if not ms then return nil, 'a number of seconds, or a duration like "1s", "1500ms"' end
  return (ms + 999) // 1000
end

local function env_name(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return true end
  return nil, "an environment variable name (letters, digits, _)"
end

local function secret_name(k)
  if type(k) == "string" and k:match("^[%w_.%-]+$") then return true end
  return nil, "a secret name (letters, digits, _ . -)"
end

local function false_only(v)
  if v == false then return v end
  return nil, "a table { promises = ..., syscalls = ..., mode = ..., refuse = ... }, or false"
end

M.quote = quote
M.path_of = path_of
M.shown = shown
M.hint = hint
M.fail = fail
M.size = size
M.duration_ms = duration_ms
M.count = count
M.cores = cores
M.string_ = string_
M.path_ = path_
M.argv = argv
M.effect_handler = effect_handler
M.boolean_ = boolean_
M.is_sequence = is_sequence
M.word_list = word_list
M.list_of = list_of
M.port = port
M.one_of = one_of
M.cpu_seconds = cpu_seconds
M.env_name = env_name
M.secret_name = secret_name
M.false_only = false_only

return M
