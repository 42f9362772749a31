-- airlock.policy.schema -- what a policy table may hold: every key of every
-- section with the rule for its value (airlock.policy.values), the words of
-- the closed sets (namespaces, layers, seccomp promises, errno names), and
-- the rule for `locked`, whose field paths ("confine", "limits.memory",
-- 'effects["fs.read"]') are checked against the schema itself. A schema node
-- is a table of key -> rule or node; "*" stands for any string key, and four
-- sentinel keys (LEAF, POST, KEYS, ABOUT) carry the rest. Every field says,
-- once, its rule, its default, what loosens it and what it is for (field and
-- section below): validation, composition, the defaults others read
-- (policy.default) and the reference (docs/POLICY.md) all come from here.
local values = require "airlock.policy.values"

local quote, path_of, hint = values.quote, values.path_of, values.hint
local size, duration_ms, count, cores = values.size, values.duration_ms, values.count, values.cores
local string_, path_, argv, boolean_ = values.string_, values.path_, values.argv, values.boolean_
local effect_handler, is_sequence = values.effect_handler, values.is_sequence
local word_list, list_of, one_of, port = values.word_list, values.list_of, values.one_of, values.port
local cpu_seconds, env_name, secret_name = values.cpu_seconds, values.env_name, values.secret_name
local looser = require "airlock.policy.looser"
local network = require "airlock.policy.network"

local M = {}

-- Sentinel keys of schema nodes (tables, so they never collide with user keys).
local LEAF = setmetatable({}, { __name = "leaf" })       -- rule for a non-table value of a map node
local POST = setmetatable({}, { __name = "post" })       -- check of the whole validated map
local KEYS = setmetatable({}, { __name = "keys" })       -- check of the keys a "*" map accepts

local core = require "airlock.core"
M.NAMESPACES = core.namespaces   -- C's table (the spawner's), in its order
-- The confinement layers, in the order the planner (airlock.confine) applies
-- and reports them: the words confine.require takes, then those only a
-- program has. This is the one list; a new layer is added here.
M.LAYERS = { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp", "mdwe", "cgroup" }
M.PROGRAM_LAYERS = { "tmp", "protect", "network" }
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

-- ------------------------------------------------------------ entries
-- field(rule, about) is a leaf of the schema: the rule for its value and
-- about = { doc = one line for the reference, default = the value an absent
-- field stands for (nil: none, or unlimited), looser = the airlock.policy.looser
-- rule that says what loosens it (none: any change does) }. section(node,
-- about) gives a map node the same about. The reference (docs/POLICY.md) is
-- made from these (airlock.policy.reference), and a spec keeps it so.
local ABOUT = setmetatable({}, { __name = "about" })
local about_of = setmetatable({}, { __mode = "k" })   -- field's rule -> about

local function field(rule, about)
  local f = function(v, p) return rule(v, p) end
  about_of[f] = about
  return f
end

local function section(node, about)
  node[ABOUT] = about
  return node
end

--- The about of a schema node (a field's rule or a map node), or nil.
function M.about(node)
  if type(node) == "table" then return node[ABOUT] end
  return about_of[node]
end

local upper, flag, flag_inverted, superset = looser.upper, looser.flag, looser.flag_inverted, looser.superset
local UNLIMITED = upper { zero = looser.INF }

-- ------------------------------------------------------------ confinement
-- One `confine` vocabulary for every process a policy runs: the guest worker
-- (top-level confine) and programs (tool.confine). The journal writer's
-- process is not configured by policy: its confinement is fixed (ledger/main.c,
-- SECURITY.md), since it must hold its libraries before Landlock narrows it to
-- one directory, and no policy should loosen it. A guest's worker opens no file and no socket (it reaches
-- the world through effects), so for it Landlock and seccomp are on or off:
-- a ruleset with no rule, and the worker's fixed allowlist. A program names
-- its paths, ports and promises. Each role refuses what it cannot use.
local RLIMIT_DOC = {
  as = "address space of each process, in bytes; absent, a guest's worker gets limits.memory and half " ..
    "again plus 64M, a program tool.limits.memory (docs/CONFINEMENT.md); a value can only lower that " ..
    "(0: none at all)",
  cpu = "CPU seconds of each process (then SIGXCPU); a guest's worker gets limits.cpu plus 1 s " ..
    "instead when limits.cpu is set",
  nofile = "open file descriptors", nproc = "processes of the (namespaced) user",
  fsize = "largest file a process may write", core = "core dump size", stack = "stack size",
}
local RLIMITS = {}
for _, name in ipairs(core.rlimits) do
  RLIMITS[name] = field(assert(RULE_OF[name], "policy.schema: no value rule for the rlimit " .. name),
    { doc = assert(RLIMIT_DOC[name], "policy.schema: no doc for the rlimit " .. name),
      looser = name == "as" and looser.address_space or upper() })
end
section(RLIMITS, { doc = "resource limits set by the spawner before exec (RLIMIT_*)" })

-- A guest's layer is on or off; a table there is a program's form, said so.
local function guest_only(rule, what, where, why)
  return function(v)
    if type(v) == "table" then
      return nil, "true or false", what .. " are for programs (" .. where .. "); " .. why
    end
    return rule(v)
  end
end

-- A program's Landlock rules and seccomp filter.
local LANDLOCK = section({
  read = field(list_of(path_, "paths"), { doc = "paths the process may read beneath" }),
  write = field(list_of(path_, "paths"), { doc = "paths the process may change beneath" }),
  exec = field(list_of(path_, "paths"), { doc = "paths the process may run programs from (and read)" }),
  bind = field(list_of(port, "TCP ports (1-65535)"), { doc = "TCP ports it may bind" }),
  connect = field(list_of(port, "TCP ports (1-65535)"), { doc = "TCP ports it may connect to" }),
  scope = field(boolean_, { doc = "abstract unix sockets and signals stay within the run", default = true }),
  [LEAF] = boolean_,
}, { doc = "Landlock rules (true: a ruleset with no rule)", default = false, looser = looser.landlock })

local SECCOMP = section({
  promises = field(promise_words, { doc = "the groups of system calls allowed" }),
  syscalls = field(list_of(function(s) return type(s) == "string" and s:match("^[%w_]+$") and s or nil end,
                   "system call names"), { doc = "more calls allowed (allow mode) or refused (deny mode)" }),
  mode = field(one_of { "allow", "deny" }, { doc = "allow: an allowlist of promises and calls; " ..
    "deny: a denylist of calls", default = "allow" }),
  refuse = field(refuse, { doc = "what a refused call does: kill the run, fail with a fitting errno " ..
    "(each named in the result), or fail with this errno", default = "errno" }),
  [LEAF] = boolean_,
}, { doc = "a seccomp filter of promises", default = false, looser = looser.seccomp })

local function confine_node(role)
  local guest = role == "guest"
  local node = {
    namespaces = field(word_list(M.NAMESPACES, "namespaces"),
      { doc = "new namespaces for the process (none when absent)", looser = superset }),
    shared_net = field(boolean_, { doc = "the net namespace is one empty namespace all runs share " ..
      "(root only; else each run makes its own)", default = false, looser = flag_inverted }),
    rlimits = RLIMITS,
    capabilities = field(one_of { "drop", "keep" }, { doc = "drop empties the bounding, ambient and " ..
      "inheritable sets" .. (guest and "" or " (programs always drop)"), default = guest and "keep" or "drop",
      looser = looser.only("drop") }),
    no_new_privs = field(boolean_, { doc = "PR_SET_NO_NEW_PRIVS before exec: no setuid or file " ..
      "capability gains", default = false, looser = flag }),
    landlock = guest and field(guest_only(boolean_, "Landlock rules", "tool.confine.landlock",
        "a guest's worker opens no file or socket itself (effects do that)"),
        { doc = "true: the worker's ruleset with no rule (no file, no TCP, scoped signals)", default = false,
          looser = looser.landlock })
      or LANDLOCK,
    seccomp = guest and field(guest_only(boolean_, "seccomp filters", "tool.confine.seccomp",
        "a guest's worker has its own fixed allowlist"),
        { doc = "true: the worker's fixed allowlist (anything else is SIGSYS)", default = false,
          looser = looser.seccomp })
      or SECCOMP,
    mdwe = field(boolean_, { doc = "memory-deny-write-execute (PR_SET_MDWE, Linux 6.3+): no mapping may be " ..
      "writable and executable, or become executable; set before exec, kept by every child" ..
      (guest and "" or " (programs with a JIT need it off)"), default = false, looser = flag }),
    require = field(word_list(M.LAYERS, "layers"), { doc = "layers that must apply, or the run ends " ..
      "with cause confinement before it starts", looser = superset }),
  }
  -- What a role cannot use is an error naming the field that would work.
  node[POST] = function(c)
    if not guest then
      if c.seccomp == true then
        return "has seccomp = true, which is the guest worker's allowlist; a program needs its " ..
          "promises: seccomp = { promises = \"stdio rpath ...\" }"
      end
      if c.capabilities == "keep" then
        return "has capabilities = \"keep\"; a program always loses its capabilities"
      end
    end
  end
  return section(node, { doc = guest and "how the guest's worker is confined (docs/CONFINEMENT.md)"
    or "how the process is confined (docs/TOOLS.md)", isolation = true })
end

local PROCESS_CONFINE = confine_node("process")   -- programs and the journal writer
local locked_rule   -- defined below (it walks M.SCHEMA)

M.SCHEMA = section({
  name = field(string_, { doc = "the policy's name, in results and messages" }),
  description = field(string_, { doc = "one line on what it is for" }),
  worker = field(argv, { doc = "the worker program, or {path, args...} (default: airlock-worker " ..
    "beside the module, or AIRLOCK_WORKER)" }),
  unconfined = field(boolean_, { doc = "the named opt-out: less confinement than the stock " ..
    "policy is allowed, with a warning on every run", default = false, looser = flag_inverted }),
  locked = field(function(v) return locked_rule(v) end, { doc = "field paths no override may loosen " ..
    "(tightening stays allowed); an override adds to them, never removes" }),
  limits = section({
    deadline_ms = field(duration_ms, { doc = "wall clock of a run, enforced by the parent (0: none)",
      looser = UNLIMITED }),
    memory = field(size, { doc = "the guest's Lua heap, enforced by the worker's allocator; the worker's " ..
      "address space follows from it (confine.rlimits.as; 0: none)", looser = UNLIMITED }),
    instructions = field(count, { doc = "Lua VM instructions of a run (0: unlimited)", looser = UNLIMITED }),
    turn_instructions = field(count, { doc = "Lua VM instructions of one turn, from one deferred " ..
      "answer to the next (then cause instructions; 0: unlimited)", looser = UNLIMITED }),
    cpu = field(duration_ms, { doc = "the worker's own CPU time (user + system, as os.clock reads " ..
      "it) for the whole run, checked once per ms of CPU (then cause cpu; 0: none)", looser = UNLIMITED }),
    turn_cpu = field(duration_ms, { doc = "the worker's own CPU time for one turn, from one deferred " ..
      "answer to the next (then cause cpu; 0: none)", looser = UNLIMITED }),
    output = field(size, { doc = "bytes the guest may print (the log)", default = core.limits.output,
      looser = upper() }),
    max_frame = field(size, { doc = "the largest frame accepted from the child (0: the default)",
      default = core.limits.max_frame, looser = upper { zero = "default" } }),
    capture = field(size, { doc = "bytes kept of each captured stream (0: the default)", default = core.limits.capture,
      looser = upper { zero = "default" } }),
    ledger = field(size, { doc = "bytes one run may record (then cause ledger; 0: unbounded)",
      default = 64 * 1024 * 1024, looser = UNLIMITED }),
    pool = field(count, { doc = "workers b:warm may keep parked, spawned ahead, for runs under this policy",
      default = 32, looser = upper() }),
    nest = section({
      depth = field(count, { doc = "how deep nested runs go (0: a handler cannot nest one)", default = 4,
        looser = upper() }),
      runs = field(count, { doc = "how many nested runs one run's tree may start", default = 64,
        looser = upper() }),
    }, { doc = "nested runs a handler starts with ctx:nest (docs/API.md)" }),
  }, { doc = "a guest run's limits" }),
  effects = section({ ["*"] = field(effect_handler, { doc = "the handler(args, ctx) of an effect, " ..
    "or false to refuse it", looser = looser.grant }) }, { doc = "effect name -> handler" }),
  notify = field(list_of(function(v)
      if type(v) == "string" and #v >= 1 and #v <= 256 then return v end
    end, "effect names"), { doc = "effects that are notifications: the guest sends them without " ..
      "waiting and gets no answer (host.NAME returns nothing; print, with \"log\"), batched; each " ..
      "must be granted", looser = looser.more }),
  confine = confine_node("guest"),
  secrets = section({
    [KEYS] = secret_name,
    ["*"] = section({
      env = field(function(v) if env_name(v) then return v end return nil, "an environment variable name" end,
        { doc = "the secret is this variable of the host's environment" }),
      file = field(path_, { doc = "the secret is this file's content" }),
      [POST] = function(t)
        if (t.env == nil) == (t.file == nil) then
          return "must name exactly one source: { env = \"NAME\" } or { file = \"/path\" }"
        end
      end,
    }, { doc = "where a secret comes from (one of env, file)" }),
  }, { doc = "name -> source; resolved in the parent, given to handlers only, redacted everywhere" }),
  tool = section({
    limits = section({
      deadline_ms = field(duration_ms, { doc = "wall clock of a program's run (0: none)", looser = UNLIMITED }),
      capture = field(size, { doc = "bytes kept of stdout and of stderr (0: the default)", default = core.limits.capture,
        looser = upper { zero = "default" } }),
      pids = field(count, { doc = "processes at once, by a pids cgroup (0: no cgroup)", looser = UNLIMITED }),
      tmp_size = field(size, { doc = "size of the private /tmp", default = core.limits.tmp_size, looser = upper() }),
      memory = field(size, { doc = "memory of the whole run, by a memory cgroup; each process's address " ..
        "space follows it (tool.confine.rlimits.as; 0: none)", looser = UNLIMITED }),
      cpu = field(cores, { doc = "CPU cores for the whole run, by a cpu cgroup (0: none)", looser = UNLIMITED }),
    }, { doc = "a program run's limits" }),
    confine = PROCESS_CONFINE,
    env = section({ [KEYS] = env_name, ["*"] = field(string_, { doc = "a variable of the program's environment" }) },
      { doc = "the program's environment starts empty: these, then the caller's" }),
    secrets = section({ [KEYS] = env_name,                  -- ENV_NAME = "declared.secret"
      ["*"] = field(function(v) if secret_name(v) then return v end return secret_name(v) end,
        { doc = "the declared secret handed to the program in this variable", looser = looser.grant }) },
      { doc = "variable -> secret name" }),
    workspace = field(path_, { doc = "the one writable directory (its working directory, and HOME by default)" }),
    home = field(one_of { "workspace", "caller" }, { doc = "the program's HOME. workspace: the workspace; " ..
      "the caller's git configuration (~/.gitconfig, else ~/.config/git/config) is shown read-only and named " ..
      "in GIT_CONFIG_GLOBAL, so git commits as the caller. caller: the caller's home, read-only, showing its " ..
      "git and shell configuration alone (.gitconfig, .config/git/{config,ignore,attributes}, .profile, " ..
      ".bashrc, .bash_profile, .inputrc, .zshrc); the workspace when it holds none of them",
      default = "workspace", looser = looser.only("workspace") }),
    protect = field(list_of(function(v)
        if type(v) == "string" and v ~= "" and v:sub(1, 1) ~= "/" and not v:find("\0", 1, true)
           and not ("/" .. v .. "/"):find("/%.%./") then return v end
      end, "paths relative to the workspace (no \"..\")"), { doc = "paths in the workspace the program " ..
        "may read but not change, remove, rename or add to (a read-only mount over each; a missing one is made " ..
        "empty for the run, a directory with a trailing /; DIR//REST only when DIR is there); patterns with * " ..
        "and ? in a component and ** for any directories (\"**/.env\") cover the matches present when it starts",
        looser = superset }),
    workspace_exec = field(boolean_, { doc = "programs may run what they build in the workspace",
      default = false, looser = flag_inverted }),
    tmp = field(one_of { "private", "none" }, { doc = "private: a fresh tmpfs on /tmp in its own mount " ..
      "namespace", default = "none", looser = looser.only("none") }),
    -- The workspace seen through a copy-on-write overlay whose writable layer
    -- the kernel bounds (airlock.workspace.overlay; docs/TOOLS.md, "Overlay").
    overlay = section({
      max_bytes = field(function(v)
        local n, why = size(v)
        if n and n >= 4096 then return n end
        return nil, why and (why .. " of at least 4K") or "a size of at least 4K"
      end, { doc = "bytes the run may write through its workspace in all (a tmpfs's size; past it ENOSPC)",
        default = 1024 * 1024 * 1024, looser = upper() }),
      max_files = field(function(v)
        local n = count(v)
        if n and n >= 1 and n <= 100000000 then return n end
        return nil, "a whole number of files from 1 to 100000000"
      end, { doc = "files, directories and links the run may create or change (the tmpfs's inodes; " ..
        "past it ENOSPC)", default = 100000, looser = upper() }),
      commit = field(function(v)
        if type(v) == "function" then return v end
        return one_of { "always", "on_success", "never" }(v)
      end, { doc = "which of the run's changes reach the real workspace when it ends: \"always\", " ..
        "\"on_success\" (all when the program exits 0), \"never\", or a function(changes, ctx) returning " ..
        "true, false or the list of changes to apply", default = "on_success" }),
    }, { doc = "the workspace through an overlay whose writable layer the kernel bounds; its presence " ..
      "turns the mode on (docs/TOOLS.md, \"Overlay\")" }),
    -- Paths a derived policy grants on top of tool.confine's (which stays
    -- locked): a toolchain in /opt, a device. Each appears in the program's
    -- view and its Landlock rules; never /, never the airlock installation.
    grant = section({
      read = field(list_of(path_, "paths"), { doc = "more paths to read" }),
      write = field(list_of(path_, "paths"), { doc = "more paths to change" }),
      exec = field(list_of(path_, "paths"), { doc = "more paths to run programs from" }),
    }, { doc = "paths granted on top of tool.confine (which stays locked)" }),
    -- Network through the run's egress proxy (airlock.egress): the program's
    -- net namespace stays empty but for the proxy's address on its loopback.
    network = section({
      allow = field(network.patterns, { doc = "host patterns a program may connect to through the proxy: " ..
        "\"pypi.org\", \"*.pythonhosted.org:443\", \"127.0.0.1:8080\" (no port: 80 and 443)",
        looser = looser.more }),
      deny = field(network.patterns, { doc = "host patterns refused even when allow or connect would allow them " ..
        "(deny wins; no port: every port)", looser = superset }),
      connect = field(effect_handler, { doc = "handler(args, ctx) for a connection no pattern names: " ..
        "true allows it, false or an error (the reason) refuses it" }),
      inject = section({ [KEYS] = network.pattern,
        ["*"] = section({
          header = field(function(v)
            if type(v) == "string" and v:match("^[%w!#$%%&'*+.^_`|~-]+$") and #v <= 64 then return v end
            return nil, "an HTTP header name (letters, digits, -)"
          end, { doc = "the header the proxy sets" }),
          secret = field(function(v) if secret_name(v) then return v end return secret_name(v) end,
            { doc = "the declared secret that is its value" }),
          prefix = field(function(v)
            if type(v) == "string" and #v <= 64 and not v:find("[%c]") then return v end
            return nil, "a short string without control characters (\"Bearer \")"
          end, { doc = "written before the secret", default = "" }),
          [POST] = function(t)
            if t.header == nil or t.secret == nil then return "needs header and secret" end
          end,
        }, { doc = "a header added to the host's requests", looser = looser.grant }),
      }, { doc = "host pattern -> a header with a secret, added by the proxy to plain-HTTP requests " ..
        "(never inside the sandbox; a CONNECT to such a host is refused)" }),
    }, { doc = "network for programs through the run's egress proxy (docs/TOOLS.md, \"Network\")" }),
  }, { doc = "programs run by airlock exec (docs/TOOLS.md)" }),
  ledger = section({
    max_bytes = field(size, { doc = "bytes a session's journal may hold in all, over every run and resume " ..
      "recorded in it (then cause ledger, naming this field; 0: unbounded), with the contents an overlaid " ..
      "run's committed changes keep there (a set that would pass it is not applied). Enforced by the ledger " ..
      "process and, for the contents, by the parent before they are written",
      default = 1024 * 1024 * 1024, looser = UNLIMITED }),
  }, { doc = "the session a run records into (its process's confinement is fixed: SECURITY.md)" }),
}, { doc = "a policy" })

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

-- ------------------------------------------------------------ budgets
-- Isolation (what a guest or program can reach) is locked by a base; budgets
-- (how much it may use) are sized by each policy up to the host's ceiling of
-- their kind (airlock.policy.ceilings). A lock on a confine section (isolation)
-- does not hold the budgets in it: untrusted locks "confine", not its
-- rlimits.cpu. Any other lock holds what it covers ("limits", "limits.memory",
-- "confine.rlimits.cpu"). Each budget: its path and the ceiling's kind, and
--   unit     the ceiling's units per unit of the field (RLIMIT_CPU counts
--            seconds, the cpu ceiling milliseconds)
--   layer    the section that, absent, means the layer is off: no rlimit is
--            set, so there is nothing to size
--   instead  the budget that, set, stands in for this one (a guest's
--            RLIMIT_CPU follows limits.cpu then)
--   unset    the budget that stands in for this one when it is not set
--            (limits.cpu unset: rlimits.cpu bounds the guest's CPU)
-- A path this schema does not hold (yet) is left out.
local function budget_field(path)
  local keys, node = assert(parse_path(path)), M.SCHEMA
  for _, k in ipairs(keys) do node = child_of(node, k) end
  if node == nil then return nil end
  return keys, assert(M.about(node), "policy.schema: a budget without an about: " .. path)
end

M.BUDGETS = {}
for _, b in ipairs {
  { "limits.cpu", "cpu", unset = { "confine.rlimits.cpu", 1000 } }, { "limits.turn_cpu", "cpu" },
  { "confine.rlimits.cpu", "cpu", unit = 1000, layer = "confine.rlimits", instead = "limits.cpu" },
  { "limits.memory", "memory" }, { "confine.rlimits.stack", "stack", layer = "confine.rlimits" },
  { "limits.instructions", "instructions" }, { "limits.turn_instructions", "instructions" },
  { "limits.deadline_ms", "deadline" }, { "limits.output", "output" }, { "limits.capture", "output" },
  { "tool.limits.deadline_ms", "deadline" }, { "tool.limits.memory", "memory" },
  { "tool.limits.capture", "output" },
  { "tool.confine.rlimits.cpu", "cpu", unit = 1000, layer = "tool.confine.rlimits" },
  { "tool.confine.rlimits.stack", "stack", layer = "tool.confine.rlimits" },
} do
  local keys, about = budget_field(b[1])
  if keys then
    about.budget = b[2]
    local e = { path = b[1], keys = keys, kind = b[2], unit = b.unit or 1, about = about,
                layer = b.layer and assert(parse_path(b.layer)), instead = b.instead and assert(parse_path(b.instead)) }
    if b.unset then
      local ukeys, uabout = assert(budget_field(b.unset[1]))
      e.unset = { keys = ukeys, about = uabout, unit = b.unset[2] }
    end
    M.BUDGETS[#M.BUDGETS + 1] = e
  end
end

M.LEAF, M.POST, M.KEYS, M.ABOUT = LEAF, POST, KEYS, ABOUT
M.RLIMITS = RLIMITS
M.child_of = child_of
M.parse_path = parse_path

return M
