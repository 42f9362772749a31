-- airlock.policy.schema -- what a policy table may hold: every key of every
-- section with the rule for its value (airlock.policy.values), the words of
-- the closed sets (namespaces, layers, seccomp promises, errno names), and
-- the rule for `locked`, whose field paths ("confine", "limits.memory",
-- 'effects["fs.read"]') are checked against the schema itself. A schema node
-- is a table of key -> rule or node; "*" stands for any string key, and three
-- sentinel keys (LEAF, POST, KEYS) carry the rest.
local values = require "airlock.policy.values"

local quote, path_of, hint = values.quote, values.path_of, values.hint
local size, duration_ms, count, cores = values.size, values.duration_ms, values.count, values.cores
local string_, path_, argv, boolean_ = values.string_, values.path_, values.argv, values.boolean_
local effect_handler, is_sequence = values.effect_handler, values.is_sequence
local word_list, list_of, one_of, port = values.word_list, values.list_of, values.one_of, values.port
local cpu_seconds, env_name, secret_name = values.cpu_seconds, values.env_name, values.secret_name
local false_only = values.false_only

local M = {}

-- Sentinel keys of schema nodes (tables, so they never collide with user keys).
local LEAF = setmetatable({}, { __name = "leaf" })       -- rule for a non-table value of a map node
local POST = setmetatable({}, { __name = "post" })       -- check of the whole validated map
local KEYS = setmetatable({}, { __name = "keys" })       -- check of the keys a "*" map accepts

local core = require "airlock.core"
M.NAMESPACES = core.namespaces   -- C's table (the spawner's), in its order
M.LAYERS = { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp", "cgroup" }
M.PROMISES = core.promises       -- the seccomp promise words of core/confine_promises.c, in its order
local ERRNOS = core.refuse_errnos   -- what refuse may name, from C

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

-- The value rule of each rlimit; the names are C's (core.rlimits), and a
-- name there without a rule here is a build error, not a silent gap.
local RULE_OF = { as = size, cpu = cpu_seconds, nofile = count, nproc = count,
                  fsize = size, core = size, stack = size }
local RLIMITS = {}
for _, name in ipairs(core.rlimits) do
  RLIMITS[name] = assert(RULE_OF[name], "policy.schema: no value rule for the rlimit " .. name)
end

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
    nest = { depth = count, runs = count },   -- ctx:nest: how deep nested runs go (4), how many one run's tree starts (64)
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

-- ------------------------------------------------------------ walking the schema; lock paths

-- The schema node under node for key ("*" stands for any string key), or nil.
local function child_of(node, key)
  if type(node) ~= "table" then return nil end
  local c = node[key]
  if c == nil and type(key) == "string" and key ~= "*" then c = node["*"] end
  return c
end

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

M.LEAF, M.POST, M.KEYS = LEAF, POST, KEYS
M.RLIMITS = RLIMITS
M.child_of = child_of
M.parse_path = parse_path

return M
