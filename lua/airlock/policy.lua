-- airlock.policy -- validate, compose, freeze and digest policy tables.
-- A policy is data: unknown keys are errors (a typo never weakens a sandbox),
-- sizes and durations take units, and a loaded policy cannot be modified.
--
-- Roles (process authorities). The top level is the `worker` authority, the
-- guest runtime: `limits`, `confine`, `effects`, `secrets` (and `worker`, the
-- worker program). Two more roles have their own section:
--   tool   = { limits, confine, env, secrets, workspace, tmp }   programs under `airlock exec`
--   ledger = { confine }                           the journal writer
-- Their `confine` is airlock.spawn's form (Landlock paths, seccomp promises).
-- policy.authority(p, role, opts) gives a role's settings, ready to use.
--
-- Composition: policy.extend(base, overrides)
--   maps merge deeply; values and lists replace;
--   key = policy.append{...}   adds the items to the base's list;
--   key = policy.remove        drops the key (and all under it);
--   locked = {"confine", "limits.memory", 'effects["fs.read"]'} in a base marks
--   fields no override may loosen (an error naming the field); tightening is
--   allowed. Locks accumulate: an override's `locked` adds to the base's, and
--   cannot remove any.
--
-- Digest: policy.digest(p), SHA-256 over a canonical encoding (sorted keys) of
-- everything but handler code, plus each handler's source text.
local M = {}

local SIZE_UNITS = { [""] = 1, B = 1, K = 1024, M = 1024 ^ 2, G = 1024 ^ 3 }
local TIME_UNITS = { ms = 1, s = 1000, m = 60000 }

-- Sentinel keys of schema nodes (tables, so they never collide with user keys).
local LEAF = setmetatable({}, { __name = "leaf" })       -- rule for a non-table value of a map node
local POST = setmetatable({}, { __name = "post" })       -- check of the whole validated map
local KEYS = setmetatable({}, { __name = "keys" })       -- check of the keys a "*" map accepts

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
M.path_of = path_of

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
  local known = {}
  for _, w in ipairs(words) do known[w] = true end
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

M.NAMESPACES = { "user", "pid", "net", "ipc", "uts", "mount", "cgroup" }
M.LAYERS = { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp", "cgroup" }
-- The seccomp promise words of core/confine_promises.c (docs/CONFINEMENT.md).
M.PROMISES = { "stdio", "rpath", "wpath", "cpath", "fattr", "inet", "unix", "dns", "proc", "exec", "id", "tty" }
local ERRNOS = { "EPERM", "EACCES", "ENOSYS", "EINVAL", "ENOTSUP", "EOPNOTSUPP", "EROFS", "ENOENT" }

-- Promise words, as a string "stdio rpath" or a list; normalised to a sorted list.
local promise_words = (function()
  local words = word_list(M.PROMISES, "promise words")
  return function(v)
    if type(v) == "string" then
      local list = {}
      for w in v:gmatch("%S+") do list[#list + 1] = w end
      v = list
    end
    local out, expected, detail = words(v)
    if not out then
      return nil, 'promise words, as a string "stdio rpath ..." or a list (' ..
        table.concat(M.PROMISES, ", ") .. ")", detail
    end
    return out
  end
end)()

local function refuse(v)
  if v == "kill" or v == "errno" then return v end
  for _, e in ipairs(ERRNOS) do if v == e then return v end end
  if math.type(v) == "integer" and v >= 1 and v <= 4095 then return v end
  return nil, '"kill", "errno" (a fitting errno per call, each named), an errno name (' ..
    table.concat(ERRNOS, ", ") .. ") or an errno number",
    type(v) == "string" and string.format("got %s%s", quote(v), hint(v, ERRNOS)) or nil
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

local RLIMITS = { as = size, cpu = cpu_seconds, nofile = count, nproc = count,
                  fsize = size, core = size, stack = size }

-- airlock.spawn's confinement, for programs (tool, ledger).
local PROCESS_CONFINE = {
  namespaces = word_list(M.NAMESPACES, "namespaces"),
  rlimits = RLIMITS,
  no_new_privs = boolean_,
  landlock = {                 -- true: a ruleset with no path at all
    read = list_of(path_, "paths"), write = list_of(path_, "paths"), exec = list_of(path_, "paths"),
    bind = list_of(port, "TCP ports (1-65535)"), connect = list_of(port, "TCP ports (1-65535)"),
    scope = boolean_,
    [LEAF] = boolean_,
  },
  seccomp = {
    promises = promise_words,
    syscalls = list_of(function(s) return type(s) == "string" and s:match("^[%w_]+$") and s or nil end,
                       "system call names"),
    mode = one_of { "allow", "deny" },
    refuse = refuse,
    [LEAF] = false_only,
  },
}

local locked_rule   -- defined below (it walks M.SCHEMA)

M.SCHEMA = {
  name = string_,
  description = string_,
  worker = argv,
  unconfined = boolean_,
  locked = function(v) return locked_rule(v) end,
  limits = {
    deadline_ms = duration_ms,
    memory = size,
    instructions = count,
    output = size,
    max_frame = size,
    capture = size,
    ledger = size,
  },
  effects = { ["*"] = effect_handler },
  confine = {
    namespaces = word_list(M.NAMESPACES, "namespaces"),
    shared_net = boolean_,
    rlimits = RLIMITS,
    capabilities = one_of { "drop", "keep" },
    no_new_privs = boolean_,
    landlock = boolean_,
    seccomp = boolean_,
    require = word_list(M.LAYERS, "layers"),
  },
  secrets = {
    [KEYS] = secret_name,
    ["*"] = {
      env = function(v) if env_name(v) then return v end return nil, "an environment variable name" end,
      file = path_,
      [POST] = function(t)
        if (t.env == nil) == (t.file == nil) then
          return "must name exactly one source: { env = \"NAME\" } or { file = \"/path\" }"
        end
      end,
    },
  },
  tool = {
    limits = { deadline_ms = duration_ms, capture = size, pids = count, tmp_size = size,
               memory = size, cpu = cores },
    confine = PROCESS_CONFINE,
    env = { [KEYS] = env_name, ["*"] = string_ },
    secrets = { [KEYS] = env_name,                          -- ENV_NAME = "declared.secret"
                ["*"] = function(v) if secret_name(v) then return v end return secret_name(v) end },
    workspace = path_,
    workspace_exec = boolean_,   -- programs may run what they build in the workspace
    tmp = one_of { "private", "none" },
    -- Paths a derived policy grants on top of tool.confine's (which stays
    -- locked): a toolchain in /opt, a device. Each appears in the program's
    -- view and its Landlock rules; never /, never the airlock installation.
    grant = { read = list_of(path_, "paths"), write = list_of(path_, "paths"),
              exec = list_of(path_, "paths") },
  },
  ledger = {
    confine = PROCESS_CONFINE,
  },
}

-- ------------------------------------------------------------ markers

local marker_mt = { __metatable = "airlock.policy.marker" }
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
local REMOVE = M.remove

-- ------------------------------------------------------------ frozen tables

local frozen = setmetatable({}, { __mode = "k" })   -- proxy -> the plain table behind it

local function freeze(t, path)
  -- Handler objects (tables with a metatable) are code, not data: left as they are.
  if type(t) ~= "table" or frozen[t] or getmetatable(t) ~= nil then return t end
  local proxy = {}
  for k, v in pairs(t) do t[k] = freeze(v, path_of(path, k)) end
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
  if APPEND[t] then return materialize(APPEND[t]) end
  if type(t) ~= "table" or (not frozen[t] and getmetatable(t) ~= nil) then return t end
  local c = {}
  for k, v in pairs(raw(t)) do c[k] = materialize(v) end
  return c
end

-- ------------------------------------------------------------ validation

local function child_of(node, key)
  if type(node) ~= "table" then return nil end
  local c = node[key]
  if c == nil and type(key) == "string" and key ~= "*" then c = node["*"] end
  return c
end

local function fail(path, expected, v, detail)
  local where = path == "" and "the policy" or path
  if detail then error(string.format("policy: %s must be %s; %s", where, expected, detail), 0) end
  error(string.format("policy: %s must be %s (got %s)", where, expected, shown(v)), 0)
end

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
      if APPEND[v] then v = materialize(v) end
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

-- ------------------------------------------------------------ lock paths

-- "confine.rlimits.as", 'effects["fs.read"]', "x[2]" -> { keys... }, or nil, why.
local function parse_path(s)
  local keys, i = {}, 1
  local first = true
  while i <= #s do
    local ident = s:match("^[%a_][%w_]*", first and i or nil)
    if first then
      if not ident then return nil, "must start with a key name" end
      keys[#keys + 1] = ident
      i = i + #ident
      first = false
    elseif s:sub(i, i) == "." then
      ident = s:match("^[%a_][%w_]*", i + 1)
      if not ident then return nil, "a '.' must be followed by a key name" end
      keys[#keys + 1] = ident
      i = i + 1 + #ident
    elseif s:sub(i, i) == "[" then
      local q = s:sub(i + 1, i + 1)
      if q == '"' or q == "'" then
        local j = s:find(q .. "]", i + 2, true)
        if not j then return nil, "an unclosed [\"...\"]" end
        keys[#keys + 1] = s:sub(i + 2, j - 1)
        i = j + 2
      else
        local n, rest = s:match("^%[(%d+)%]()", i)
        if not n then return nil, "a [ must hold a quoted key or a number" end
        keys[#keys + 1] = math.tointeger(tonumber(n))
        i = rest
      end
    else
      return nil, "unexpected '" .. s:sub(i, i) .. "'"
    end
  end
  if #keys == 0 then return nil, "is empty" end
  return keys
end

-- Checks a lock path against the schema; returns its canonical form.
local function lock_path(s)
  if type(s) ~= "string" then return nil, "a field path like \"confine\" or \"limits.memory\"" end
  local keys, why = parse_path(s)
  if not keys then return nil, "a field path like \"confine\" or \"limits.memory\"", s .. ": " .. why end
  local node, p = M.SCHEMA, ""
  for _, k in ipairs(keys) do
    local c = type(node) == "table" and child_of(node, k) or nil
    if c == nil or k == "locked" then
      return nil, "a field path of the policy",
        string.format("unknown key '%s'%s", path_of(p, k), type(node) == "table" and hint(k, node) or "")
    end
    node, p = c, path_of(p, k)
  end
  return p
end

function locked_rule(v)
  if type(v) == "string" then v = { v } end
  if not is_sequence(v) then return nil, 'a list of field paths like {"confine", "limits.memory"}' end
  local out, seen = {}, {}
  for _, s in ipairs(v) do
    local p, expected, detail = lock_path(s)
    if not p then return nil, "a list of field paths", detail or expected end
    if not seen[p] then seen[p] = true; out[#out + 1] = p end
  end
  table.sort(out)
  return out
end

-- ------------------------------------------------------------ new, load

--- Validates a policy table and returns a frozen copy. Errors name the bad key.
function M.new(t)
  if M.is_policy(t) then return t end
  if type(t) ~= "table" then error(string.format("policy: a policy must be a table (got %s)", shown(t)), 0) end
  return freeze(check(materialize(t), M.SCHEMA, ""), "")
end

local function loader(what)
  local ok, p = pcall(require, "airlock.policies." .. what)
  if ok then return p end
  if tostring(p):match("module 'airlock%.policies%.[^']*' not found") then return nil end
  error(p, 0)
end

-- What the Lua file at path returns (a table or a policy), or nil, message.
local function file_value(what)
  local chunk, err = loadfile(what, "t")
  if not chunk then
    if err:match("No such file") or err:match("cannot open") then
      return nil, string.format("policy: no stock policy or file named '%s'", what)
    end
    return nil, "policy: " .. err
  end
  local ok, t = pcall(chunk)
  if not ok then return nil, "policy: " .. what .. ": " .. tostring(t) end
  return t
end

--- load(name_or_path): a stock policy by name ("untrusted", "tool", "ledger",
--- "dev") or a Lua file that returns a policy table, validated as it is (no
--- base under it: entry points use resolve). Returns the frozen policy, or
--- nil, message.
function M.load(what)
  if type(what) ~= "string" then return nil, "policy: load expects a name or a path" end
  if what:match("^[%w_%-]+$") then
    local ok, p = pcall(loader, what)
    if not ok then return nil, tostring(p) end
    if p ~= nil then
      local ok2, pol = pcall(M.new, p)
      if ok2 then return pol end
      return nil, pol .. " (in the stock policy '" .. what .. "')"
    end
  end
  local t, err = file_value(what)
  if t == nil then return nil, err end
  local ok2, pol = pcall(M.new, t)
  if not ok2 then return nil, pol .. " (in " .. what .. ")" end
  return pol
end

--- is_stock(name) -> whether name is one of the stock policies.
function M.is_stock(name)
  if type(name) ~= "string" or not name:match("^[%w_%-]+$") then return false end
  local ok, p = pcall(loader, name)
  return ok and p ~= nil
end

-- ------------------------------------------------------------ composition

local function is_map_value(v)
  return type(v) == "table" and v ~= REMOVE and not APPEND[v] and (frozen[v] or getmetatable(v) == nil)
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
    elseif APPEND[v] then
      local cur = out[k]
      if type(child) == "table" and not child[LEAF] then
        error(string.format("policy: %s is a map: policy.append only adds to lists", p), 0)
      end
      if cur ~= nil and not is_sequence(cur) then
        error(string.format("policy: %s: policy.append needs a list in the base (it holds %s)", p, shown(cur)), 0)
      end
      local list = {}
      for _, x in ipairs(cur or {}) do list[#list + 1] = x end
      for _, x in ipairs(APPEND[v]) do list[#list + 1] = materialize(x) end
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

local INF = math.huge

-- Numbers where larger is looser. opts.unset: the value when absent (INF =
-- unlimited); opts.zero: the value 0 stands for (INF when 0 means unlimited).
local function upper(opts)
  opts = opts or {}
  local function eff(x)
    if x == nil then return opts.unset or INF end
    if x == 0 and opts.zero then return opts.zero end
    return x
  end
  return function(old, new) return eff(new) > eff(old) end
end

local function set_of(list)
  local s = {}
  if type(list) == "table" then for _, v in ipairs(list) do s[v] = true end end
  return s
end

-- true when some item of a is not in b.
local function missing(a, b)
  local sb = set_of(b)
  if type(a) == "table" then
    for _, v in ipairs(a) do if not sb[v] then return true end end
  end
  return false
end

local function flag(old, new) return old == true and new ~= true end                -- true is stricter
local function flag_inverted(old, new) return old ~= true and new == true end       -- false is stricter
local function superset(old, new) return missing(old, new) end                      -- removing loosens
local function changed(old, new) return not M.same(old, new) end

local function landlock_rule(old, new)
  local function norm(x)
    if x == nil or x == false then return nil end
    if x == true then x = {} end
    return x
  end
  old, new = norm(old), norm(new)
  if old == nil then return false end
  if new == nil then return true end
  for _, k in ipairs { "read", "write", "exec", "bind", "connect" } do
    if missing(new[k], old[k]) then return true end
  end
  return old.scope ~= false and new.scope == false
end

local function seccomp_rule(old, new)
  if old == nil or old == false then return false end
  if new == nil or new == false then return true end
  local om, nm = old.mode or "allow", new.mode or "allow"
  if om == "allow" and nm == "deny" then return true end
  if om == "allow" and nm == "allow" then
    if missing(new.promises, old.promises) or missing(new.syscalls, old.syscalls) then return true end
  elseif om == "deny" and nm == "deny" then
    if missing(old.syscalls, new.syscalls) then return true end
  end
  return (old.refuse or "kill") == "kill" and (new.refuse or "kill") ~= "kill"
end

-- An effect: granting one, or changing a handler's code, loosens; refusing tightens.
local function grant(old, new)
  if new == nil or new == false then return false end
  return old ~= new
end

-- By schema path, "*" for any key of a "*" map.
local LOOSER = {
  ["limits.deadline_ms"] = upper { zero = INF },
  ["limits.memory"] = upper { zero = INF },
  ["limits.instructions"] = upper { zero = INF },
  ["limits.output"] = upper { unset = 65536 },
  ["limits.max_frame"] = upper { unset = 16 * 1024 * 1024, zero = 16 * 1024 * 1024 },
  ["limits.capture"] = upper { unset = 65536, zero = 65536 },
  ["limits.ledger"] = upper { unset = 64 * 1024 * 1024, zero = INF },
  ["effects.*"] = grant,
  ["confine.namespaces"] = superset,
  ["confine.shared_net"] = flag_inverted,
  ["confine.capabilities"] = function(old, new) return old == "drop" and new ~= "drop" end,
  ["confine.no_new_privs"] = flag,
  ["confine.landlock"] = flag,
  ["confine.seccomp"] = flag,
  ["confine.require"] = superset,
  ["tool.limits.deadline_ms"] = upper { zero = INF },
  ["tool.limits.capture"] = upper { unset = 65536, zero = 65536 },
  ["tool.limits.pids"] = upper { zero = INF },
  ["tool.limits.tmp_size"] = upper(),
  ["tool.limits.memory"] = upper { zero = INF },
  ["tool.limits.cpu"] = upper { zero = INF },
  ["tool.tmp"] = function(old, new) return old == "none" and new ~= "none" end,
  ["tool.workspace_exec"] = flag_inverted,
  ["tool.secrets.*"] = grant,
}
for _, role in ipairs { "tool.confine", "ledger.confine" } do
  LOOSER[role .. ".namespaces"] = superset
  LOOSER[role .. ".no_new_privs"] = flag
  LOOSER[role .. ".landlock"] = landlock_rule
  LOOSER[role .. ".seccomp"] = seccomp_rule
end
for _, role in ipairs { "confine", "tool.confine", "ledger.confine" } do
  for k in pairs(RLIMITS) do LOOSER[role .. ".rlimits." .. k] = upper() end
end

local function brief(v)
  if v == nil then return "nil (removed)" end
  if type(v) == "table" and not frozen[v] and getmetatable(v) ~= nil then return "a handler" end
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
local function loosened(node, pattern, old, new, path)
  local rule = LOOSER[pattern]
  if rule then
    if rule(old, new) then return path, old, new end
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
      local child = child_of(node, k)
      local sub = (node[k] == nil and node["*"] ~= nil) and "*" or k
      local p, o, n = loosened(child, pattern == "" and tostring(sub) or pattern .. "." .. tostring(sub),
        (old or {})[k], (new or {})[k], path_of(path, k))
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
-- path, the lock that covers it, the old value and the new one.
local function loosening(base, result)
  for _, lp in ipairs(base.locked or {}) do
    local keys = assert(parse_path(lp))
    local node, pattern = M.SCHEMA, ""
    for _, k in ipairs(keys) do
      local sub = (type(node) == "table" and node[k] == nil and node["*"] ~= nil) and "*" or tostring(k)
      node = child_of(node, k)
      pattern = pattern == "" and sub or pattern .. "." .. sub
    end
    local p, o, n = loosened(node, pattern, get_path(base, keys), get_path(result, keys), lp)
    if p then return p, lp, o, n end
  end
end

-- Errors when result loosens a field base locks.
local function check_locks(base, result)
  local p, lp, o, n = loosening(base, result)
  if p then
    error(string.format("policy: %s is locked by the base policy '%s'%s: %s -> %s would loosen it",
      p, tostring(base.name or "(unnamed)"), p ~= lp and " (locked: " .. lp .. ")" or "",
      brief(o), brief(n)), 0)
  end
end

local function as_policy(base)
  if type(base) == "string" then
    local p, err = M.load(base)
    if not p then error(err, 0) end
    return p
  end
  return M.new(base)
end

--- extend(base, overrides) -> a new frozen policy: maps merge deeply, values
--- and lists replace, policy.append{...} adds to a list, policy.remove drops a
--- key; loosening a field the base locks is an error naming it. base may be a
--- policy, a table or a stock name.
function M.extend(base, overrides)
  base = as_policy(base)
  if overrides ~= nil and type(overrides) ~= "table" then
    error(string.format("policy: extend: the overrides must be a table (got %s)", shown(overrides)), 0)
  end
  local result = M.new(merge(materialize(base), overrides or {}, M.SCHEMA, ""))
  check_locks(base, result)
  return result
end

--- layer(base, t): t over base, as extend does, but without checking locks.
--- This is what airlock.run does with a bare table: its author states the
--- whole intent, and may turn layers off by name.
function M.layer(base, overrides)
  base = as_policy(base)
  return M.new(merge(materialize(base), overrides or {}, M.SCHEMA, ""))
end

-- ------------------------------------------------------------ digest

-- Deep equality (tables by content, frozen or not).
function M.same(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  if not (is_map_value(a) and is_map_value(b)) then return false end
  for k, v in pairs(raw(a)) do if not M.same(v, b[k]) then return false end end
  for k in pairs(raw(b)) do if a[k] == nil then return false end end
  return true
end

local function sha256(s) return require("airlock.core").sha256(s) end

-- Lines first..last of text (all of it when first is 0: a main chunk).
local function lines(text, first, last)
  if first == 0 then return text end
  local out, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if n >= first then out[#out + 1] = line end
    if n >= last then break end
  end
  if n < last then return nil end
  return table.concat(out, "\n")
end

local function read_all(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- Chunks compiled into the module (tools/embed.lua names them "@lua/airlock/x.lua"
-- and "@policies/x.lua"): digested by bytecode, so the digest never depends on
-- whether the source tree happens to be readable from here.
local function embedded(source)
  local base = source:match("^@lua/airlock/(.+)%.lua$")
  local name = base and "airlock." .. base:gsub("/", ".")
  if not name then
    base = source:match("^@policies/(.+)%.lua$")
    name = base and "airlock.policies." .. base
  end
  return name and package.preload[name] ~= nil
end

--- The source text of a Lua function when it can be found (defined in a file
--- that is still readable, or in a chunk of text), else nil.
function M.source_of(f)
  local info = debug.getinfo(f, "S")
  if not info or info.what == "C" then return nil end
  local src = info.source or ""
  local text
  if src:sub(1, 1) == "@" then
    if embedded(src) then return nil end
    text = read_all(src:sub(2))
  elseif src:sub(1, 1) ~= "=" then
    text = src   -- load()ed text: the chunk is its own source
  end
  return text and lines(text, info.linedefined, info.lastlinedefined)
end

local canonical

-- A function: its source text (else its stripped bytecode), then the values it
-- closes over (e.g. the root a handler factory was given), _ENV and modules aside.
local function function_code(f, out, seen, depth)
  if debug.getinfo(f, "S").what == "C" then out[#out + 1] = "fn:C" return end
  local text = M.source_of(f)
  if text then
    out[#out + 1] = "src:" .. sha256(text)
  else
    local ok, code = pcall(string.dump, f, true)
    out[#out + 1] = ok and ("bc:" .. sha256(code)) or "fn:?"
  end
  local modules = {}
  for _, m in pairs(package.loaded) do if type(m) == "table" then modules[m] = true end end
  out[#out + 1] = "("
  for i = 1, 255 do
    local name, v = debug.getupvalue(f, i)
    if name == nil then break end
    if name ~= "_ENV" and not (type(v) == "table" and (modules[v] or v == _G)) then
      out[#out + 1] = quote(name) .. "="
      canonical(v, out, seen, depth + 1)
      out[#out + 1] = ";"
    end
  end
  out[#out + 1] = ")"
end

local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  if ta == "string" or ta == "number" then return a < b end
  return tostring(a) < tostring(b)
end

function canonical(v, out, seen, depth)
  local t = type(v)
  if depth > 32 then out[#out + 1] = "<deep>" return end
  if t == "table" then
    if seen[v] then out[#out + 1] = "<cycle>" return end
    seen[v] = true
    local mt = not frozen[v] and getmetatable(v)
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, key_order)
    out[#out + 1] = "{"
    for _, k in ipairs(keys) do
      canonical(k, out, seen, depth + 1)
      out[#out + 1] = "="
      canonical(v[k], out, seen, depth + 1)
      out[#out + 1] = ";"
    end
    if type(mt) == "table" and mt.__call then
      out[#out + 1] = "call="
      canonical(mt.__call, out, seen, depth + 1)
    end
    out[#out + 1] = "}"
    seen[v] = nil
  elseif t == "function" then
    if seen[v] then out[#out + 1] = "<cycle>" return end
    seen[v] = true
    function_code(v, out, seen, depth)
    seen[v] = nil
  elseif t == "string" then
    out[#out + 1] = quote(v)
  elseif math.type(v) == "float" then
    out[#out + 1] = string.format("%.17g", v)
  elseif t == "number" or t == "boolean" or t == "nil" then
    out[#out + 1] = tostring(v)
  else
    out[#out + 1] = "<" .. t .. ">"
  end
end

--- The canonical text the digest is taken over (for audits and tests).
function M.canonical(p)
  local out = {}
  canonical(p, out, {}, 0)
  return table.concat(out)
end

local digests = setmetatable({}, { __mode = "k" })

--- digest(p) -> hex SHA-256 of the policy's canonical encoding. A loaded
--- policy's digest is taken once (it is an immutable snapshot) and kept.
function M.digest(p)
  if frozen[p] and digests[p] then return digests[p] end
  local d = sha256("airlock-policy-v1\0" .. M.canonical(p))
  if frozen[p] then digests[p] = d end
  return d
end

-- ------------------------------------------------------------ roles

local function plain(t)
  if type(t) ~= "table" then return t end
  local c = {}
  for k, v in pairs(t) do c[k] = plain(v) end
  return c
end

-- airlock.spawn's options from a process confine section; `dirs` are added
-- to Landlock's read and write lists (and exec, with exec_dirs).
local function spawn_options(c, dirs, exec_dirs)
  c = c or {}
  local o = { namespaces = plain(c.namespaces), rlimits = plain(c.rlimits), confine = {} }
  local ll = c.landlock
  if ll then
    ll = ll == true and {} or plain(ll)
    for _, d in ipairs(dirs) do
      ll.read = ll.read or {}
      ll.write = ll.write or {}
      if not set_of(ll.read)[d] then ll.read[#ll.read + 1] = d end
      if not set_of(ll.write)[d] then ll.write[#ll.write + 1] = d end
      if exec_dirs then
        ll.exec = ll.exec or {}
        if not set_of(ll.exec)[d] then ll.exec[#ll.exec + 1] = d end
      end
    end
    o.confine.landlock = ll
  end
  if c.seccomp then
    local sc = plain(c.seccomp)
    if sc.promises then sc.promises = table.concat(sc.promises, " ") end
    o.confine.seccomp = sc
  end
  if c.no_new_privs ~= nil then o.confine.no_new_privs = c.no_new_privs end
  return o
end

--- resolve(p, base) -> a frozen policy, or nil, message. The one rule every
--- entry point uses to turn a policy argument into a policy, for the tier
--- whose stock policy is base ("untrusted" for guests, "tool" for programs):
---   nil                  base itself
---   a stock name         that stock policy, as it is
---   a file path          what the file returns, then as below
---   a bare table         laid over base (policy.layer), so it has base's
---                        confinement unless it turns a layer off by name
---   a policy             as it is
--- Whatever it is, a result with less confinement than base (a field base
--- locks, loosened) is refused unless it says unconfined = true, the named
--- opt-out: such runs warn every time (admit) and AIRLOCK_REQUIRE_CONFINEMENT=1
--- refuses them.
function M.resolve(p, base)
  local b, err = M.load(base)
  if not b then return nil, err end
  if p == nil then return b end
  local given, from = p, nil
  if type(p) == "string" then
    if M.is_stock(p) then return M.load(p) end
    local v, ferr = file_value(p)
    if v == nil then return nil, ferr end
    given, from = v, p
  end
  local pol = given
  if not M.is_policy(given) then
    local ok, r = pcall(M.layer, b, given)
    if not ok then return nil, r .. (from and " (in " .. from .. ")" or "") end
    pol = r
  end
  if not pol.unconfined then
    local path, _, o, n = loosening(b, pol)
    if path then
      return nil, string.format("policy: '%s'%s has less confinement than the stock '%s' (%s: %s -> %s). " ..
        "Build it with policy.extend(\"%s\", {...}) or give a bare table, which is laid over '%s'; " ..
        "to run with less confinement on purpose, set unconfined = true in it (every run then warns, " ..
        "and AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it)", tostring(pol.name or "(unnamed)"),
        from and " (" .. from .. ")" or "", base, path, brief(o), brief(n), base, base)
    end
  end
  return pol
end

--- confinement_required() -> whether AIRLOCK_REQUIRE_CONFINEMENT asks that
--- no run goes with less confinement than its stock base (set, and not "0").
function M.confinement_required()
  local req = os.getenv("AIRLOCK_REQUIRE_CONFINEMENT")
  return req ~= nil and req ~= "" and req ~= "0"
end

local admitted = setmetatable({}, { __mode = "k" })   -- policy -> base -> what admit found
local warned = setmetatable({}, { __mode = "k" })     -- host -> policy -> true

--- admit(pol, base, what, host) -> true, or nil, message, at the start of every
--- run under pol in the tier of base (what: "guests" or "programs"). A policy
--- with less confinement than base (the opt-out unconfined = true, or no layer
--- at all) prints one warning line to stderr, once per host (a broker: one
--- line per command, not one per bot of a game host) or on every call when
--- host is nil; AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it instead (cause
--- confinement).
function M.admit(pol, base, what, host)
  local memo = admitted[pol] or {}
  admitted[pol] = memo
  local less = memo[base]
  if less == nil then
    less = false
    if pol.unconfined or (base == "untrusted" and M.unconfined(pol)) then
      less = ""
      local b = M.load(base)
      local path = b and loosening(b, pol)
      if path and not (base == "untrusted" and M.unconfined(pol)) then
        less = string.format(" (less than the stock '%s': %s)", base, path)
      end
    end
    memo[base] = less
  end
  if not less then return true end
  local name = tostring(pol.name or "(unnamed)")
  if M.confinement_required() then
    return nil, string.format("confinement: policy '%s' runs %s without confinement%s, " ..
      "and AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it", name, what, less)
  end
  if host ~= nil then
    local seen = warned[host] or setmetatable({}, { __mode = "k" })
    warned[host] = seen
    if seen[pol] then return true end
    seen[pol] = true
  end
  io.stderr:write(string.format("airlock: WARNING: policy '%s' runs %s WITHOUT confinement%s\n", name, what, less))
  return true
end

--- authority(p, role, opts) -> the settings of one role, or nil, message.
---   "worker": { worker, limits, confine, effects, secrets } (parts of the frozen policy)
---   "tool":   airlock.spawn options (add argv): namespaces, rlimits, confine
---             {landlock, seccomp, no_new_privs}, env, workdir, deadline_ms, capture;
---             the workspace (opts.workspace, else tool.workspace) is added to
---             Landlock's read and write lists (and exec, with tool.workspace_exec)
---             and is the working directory
---   "ledger": airlock.spawn options; opts.session, the session directory, is
---             the one directory added to Landlock's read and write lists
function M.authority(p, role, opts)
  p = M.new(p)
  opts = opts or {}
  local name = tostring(p.name or "(unnamed)")
  if role == "worker" then
    return { worker = p.worker, limits = p.limits, confine = p.confine, effects = p.effects, secrets = p.secrets }
  elseif role == "tool" then
    local t = p.tool
    if not t then return nil, string.format("policy '%s' has no tool section (no authority for tools)", name) end
    local ws = opts.workspace or t.workspace
    local o = spawn_options(t.confine, ws and { ws } or {}, t.workspace_exec)
    local ll = o.confine.landlock
    for _, kind in ipairs { "read", "write", "exec" } do
      for _, g in ipairs(t.grant and t.grant[kind] and plain(t.grant[kind]) or {}) do
        if g == "/" then
          return nil, string.format("policy '%s': tool.grant.%s cannot grant / (name the directories " ..
            "the program needs)", name, kind)
        end
        if ll then
          ll[kind] = ll[kind] or {}
          if not set_of(ll[kind])[g] then ll[kind][#ll[kind] + 1] = g end
          if kind ~= "read" and not set_of(ll.read or {})[g] then
            ll.read = ll.read or {}
            ll.read[#ll.read + 1] = g
          end
        end
      end
    end
    o.workdir = ws
    o.workspace = opts.workspace   -- for airlock.spawn: bound nosuid, idmapped when root
    o.env = plain(t.env)
    o.deadline_ms = t.limits and t.limits.deadline_ms
    o.capture = t.limits and t.limits.capture
    return o
  elseif role == "ledger" then
    local l = p.ledger
    if not l then return nil, string.format("policy '%s' has no ledger section (no authority for the ledger)", name) end
    if opts.session == nil then return nil, "the ledger authority needs the session directory (opts.session)" end
    return spawn_options(l.confine, { opts.session })
  end
  return nil, string.format("policy: unknown role '%s' (worker, tool or ledger)", tostring(role))
end

--- unconfined(p) -> true when runs under p have no confinement at all: the
--- policy says so (unconfined = true, as the stock dev does), or its confine
--- section turns on no layer.
function M.unconfined(p)
  if p.unconfined then return true end
  local c = p.confine
  if not c then return true end
  local function any(t) return t ~= nil and next(raw(t)) ~= nil end
  return not (any(c.namespaces) or any(c.rlimits) or c.capabilities == "drop" or c.no_new_privs
              or c.landlock or c.seccomp)
end

M.parse_size = size
M.parse_duration = duration_ms
M.parse_path = parse_path

return setmetatable(M, { __call = function(_, t) return M.new(t) end })
