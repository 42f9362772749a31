-- airlock.handlers -- ready-made effect handlers for policies.
--
-- Each constructor returns a handler(args, ctx), or a table of them when it
-- serves several effects. args always come from the untrusted guest: every
-- field is checked for type and size, and a refusal raises an error the guest
-- sees as "handler for 'fs.read' failed: denied: ...". Refusals on security
-- grounds start with "denied: "; other failures (a missing file, a full
-- store) say what went wrong without it.
--
--   local handlers = require "airlock.handlers"
--   effects = handlers.merge(
--     handlers.workspace("saves/", { write = true }),            -- fs.read, fs.write, fs.list, fs.stat, fs.remove
--     handlers.kv { dir = "state/" },                            -- kv.get, kv.put, kv.delete, kv.list
--     handlers.random(),                                         -- random.bytes, random.int
--     { ["clock.now"] = handlers.clock { mode = "virtual" },
--       ["module.load"] = handlers.modules("mods/"),
--       ["http.request"] = handlers.http { allow = { "api.example.com" } },
--       ["world.nuke"] = handlers.deny("not in this game") })
--
-- A table of handlers can also be the whole effects field
-- (effects = handlers.workspace(...)); merge refuses an effect given twice.
local core = require "airlock.core"
local nest = require "airlock.nest"
local policy = require "airlock.policy"

local M = {}

local mtype, sfmt = math.type, string.format

local function fail(msg) error(msg, 0) end

-- A guest string made safe to quote in a message: at most 120 bytes, control
-- and non-ASCII bytes escaped.
local function show(s)
  local cut = #s > 120
  s = s:sub(1, 120):gsub("[%c\128-\255'\\]", function(c) return sfmt("\\x%02x", c:byte()) end)
  return "'" .. s .. (cut and "...'" or "'")
end

-- Checks a constructor's options against the keys it knows (a typo is an error).
local function options(opts, known, who)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(sfmt("%s: options must be a table", who), 3) end
  for k in pairs(opts) do
    if not known[k] then error(sfmt("%s: unknown option '%s'", who, tostring(k)), 3) end
  end
  return opts
end

local function size_opt(opts, key, default, who)
  if opts[key] == nil then return default end
  local v, why = policy.parse_size(opts[key])
  if not v then error(sfmt("%s: '%s' must be %s", who, key, why), 3) end
  return v
end

local function count_opt(opts, key, default, who, max)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= math.floor(v) or v < 0 or v > (max or 2 ^ 31) then
    error(sfmt("%s: '%s' must be a whole number from 0 to %d", who, key, max or 2 ^ 31), 3)
  end
  return math.tointeger(v)
end

local function args_table(args)
  if type(args) ~= "table" then fail("expects a table of arguments, got " .. type(args)) end
  return args
end

-- Mutable state (a kv store, per-run counters) lives here, keyed by an empty
-- table the handler holds, never in the handler's own upvalues: a policy's
-- digest covers what its handlers close over (their configuration: a root, an
-- allowlist), and must not change as runs use them.
M._state = setmetatable({}, { __mode = "k" })

-- Per-run state for handlers that count per run: keyed by the run handle the
-- broker passes in ctx (weakly, so ended runs are forgotten).
local function per_run(init)
  local key = {}
  M._state[key] = { runs = setmetatable({}, { __mode = "k" }) }
  return function(ctx)
    local st = M._state[key]
    local run = type(ctx) == "table" and ctx.handle
    if run == nil then st.shared = st.shared or init(); return st.shared end
    local s = st.runs[run]
    if not s then s = init(); st.runs[run] = s end
    return s
  end
end

-- A directory the host names (a workspace root, a kv dir, a module path):
-- made absolute and canonical once, so the handler's meaning does not depend on
-- the host's working directory at each call. Raises at the constructor's caller.
local function host_dir(path, what)
  local real, _, why = core.fs_realpath(path)
  local st = real and core.fs_stat(real, "")
  if not st or st.type ~= "dir" then
    error(sfmt("%s '%s' is not a directory%s", what, path, why and " (" .. why .. ")" or ""), 3)
  end
  return real
end

-- ------------------------------------------------------------------ deny

local decisions = setmetatable({}, { __mode = "k" })

--- deny(reason) -> a handler that refuses every call with "denied: <reason>".
function M.deny(reason)
  if reason ~= nil and type(reason) ~= "string" then error("deny: reason must be a string", 2) end
  reason = reason or "refused by the policy"
  local h = function() fail("denied: " .. reason) end
  decisions[h] = { decision = "deny", reason = reason }
  return h
end

--- decision(handler) -> "deny", reason for a handler made by deny(), else nil.
--- (A ledger recorder can record such calls as decision "deny" without running them.)
function M.decision(h)
  local d = decisions[h]
  if d then return d.decision, d.reason end
  return nil
end

-- ------------------------------------------------------------------ merge

--- merge(t1, t2, ...) -> one table of effect handlers; an effect named twice is an error.
function M.merge(...)
  local out = {}
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if t ~= nil then
      if type(t) ~= "table" then error(sfmt("merge: argument %d must be a table of handlers", i), 2) end
      for k, v in pairs(t) do
        if type(k) ~= "string" then error(sfmt("merge: argument %d has a non-string effect name", i), 2) end
        if out[k] ~= nil then error(sfmt("merge: effect '%s' is given twice", k), 2) end
        out[k] = v
      end
    end
  end
  return out
end

-- ------------------------------------------------------------------ workspace

-- Turns a failure code of the core.fs_* primitives into the guest's message.
local function fs_error(code, detail, path, limit)
  local p = show(path)
  if code == "bad_path" then fail("denied: path " .. p .. " " .. detail) end
  if code == "escape" then fail("denied: path " .. p .. " leads outside the workspace") end
  if code == "magic" then fail("denied: path " .. p .. " goes through a /proc magic link or a symlink loop") end
  if code == "type" then fail("denied: " .. p .. " is a " .. detail .. "; only regular files and directories are served") end
  if code == "raced" then fail("denied: " .. p .. " changed while it was being opened") end
  if code == "not_found" then fail("no such file or directory: " .. p) end
  if code == "not_dir" then fail("not a directory: " .. p) end
  if code == "is_dir" then fail("is a directory: " .. p) end
  if code == "not_empty" then fail("directory not empty: " .. p) end
  if code == "too_large" then fail(sfmt("%s is larger than the workspace's max_bytes (%d)", p, limit or 0)) end
  if code == "too_many" then fail(sfmt("%s has more than %d entries", p, limit or 0)) end
  if code == "access" then fail("the host's permissions refuse access to " .. p) end
  if code == "no_space" then fail("no space left on the host for " .. p) end
  if code == "root" then fail(detail:match("cannot be removed") and "denied: the workspace root cannot be removed"
                              or "the workspace is not available") end
  if code == "unsupported" then fail("the workspace needs openat2 (Linux 5.6 or later)") end
  fail(sfmt("%s: %s", p, detail or code))
end

-- The path argument: {path = "..."}, or the bare string.
local function path_arg(args, optional)
  if type(args) == "string" then return args end
  args_table(args)
  local p = args.path
  if p == nil and optional then return "" end
  if type(p) ~= "string" then fail("args.path must be a string, got " .. type(p)) end
  return p
end

local WORKSPACE_OPTS = { write = true, max_bytes = true, max_entries = true, mkdirs = true }

--- workspace(root, {write = false, max_bytes = "1M", max_entries = 10000, mkdirs = true})
--- -> { ["fs.read"], ["fs.write"], ["fs.list"], ["fs.stat"], ["fs.remove"] }
--- Every path is resolved beneath root by the kernel (openat2 RESOLVE_BENEATH |
--- RESOLVE_NO_MAGICLINKS): `..`, absolute paths, symlinks leading out (even
--- swapped in mid-call), /proc magic links, NUL bytes, paths over 4095 bytes
--- or components over 255 are refused; only regular files and directories are
--- opened. Writes are atomic (temporary file in the same directory, fsync,
--- rename: a symlink at the name is replaced, never written through) and create
--- missing parent directories unless mkdirs = false. write defaults to false.
---   fs.read{path} -> string          fs.write{path, data} -> true
---   fs.list{path = ""} -> sorted names   fs.stat{path} -> {type = "file"|"dir", size} or nil
---   fs.remove{path} -> true (a file or an empty directory)
function M.workspace(root, opts)
  if type(root) ~= "string" or root == "" then error("workspace: root must be a directory path", 2) end
  opts = options(opts, WORKSPACE_OPTS, "workspace")
  local write = opts.write == true
  local max_bytes = size_opt(opts, "max_bytes", 1 << 20, "workspace")
  local max_entries = count_opt(opts, "max_entries", 10000, "workspace", 1e7)
  local mkdirs = opts.mkdirs ~= false
  root = host_dir(root, "workspace: root")

  local function read_only() fail("denied: read-only workspace") end
  return {
    ["fs.read"] = function(args)
      local p = path_arg(args)
      local data, code, why = core.fs_read(root, p, max_bytes)
      if not data then fs_error(code, why, p, max_bytes) end
      return data
    end,
    ["fs.write"] = function(args)
      if not write then read_only() end
      args_table(args)
      local p, data = args.path, args.data
      if type(p) ~= "string" then fail("args.path must be a string, got " .. type(p)) end
      if type(data) ~= "string" then fail("args.data must be a string, got " .. type(data)) end
      if #data > max_bytes then fail(sfmt("args.data is larger than the workspace's max_bytes (%d)", max_bytes)) end
      local ok, code, why = core.fs_write(root, p, data, mkdirs)
      if not ok then fs_error(code, why, p, max_bytes) end
      return true
    end,
    ["fs.list"] = function(args)
      local p = args == nil and "" or path_arg(args, true)
      local names, code, why = core.fs_list(root, p, max_entries)
      if not names then fs_error(code, why, p, max_entries) end
      table.sort(names)
      return names
    end,
    ["fs.stat"] = function(args)
      local p = path_arg(args)
      local s, code, why = core.fs_stat(root, p)
      if s == false then return nil end
      if not s then fs_error(code, why, p) end
      return { type = s.type, size = s.size }
    end,
    ["fs.remove"] = function(args)
      if not write then read_only() end
      local p = path_arg(args)
      local ok, code, why = core.fs_remove(root, p)
      if not ok then fs_error(code, why, p) end
      return true
    end,
  }
end

-- ------------------------------------------------------------------ kv

-- Values: strings, numbers, booleans, and tables of those (keys strings or
-- integers), encoded with string.pack so a stored copy is exact (integer vs
-- float kept) and its size known.
local MAX_DEPTH = 32

local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  return a < b
end

local function encode(v, out, depth)
  local t = type(v)
  if t == "string" then
    out[#out + 1] = "s" .. string.pack("<s4", v)
  elseif t == "number" then
    out[#out + 1] = mtype(v) == "integer" and "i" .. string.pack("<j", v) or "n" .. string.pack("<n", v)
  elseif t == "boolean" then
    out[#out + 1] = v and "T" or "F"
  elseif t == "table" then
    if depth >= MAX_DEPTH then fail(sfmt("value nested deeper than %d tables", MAX_DEPTH)) end
    local keys = {}
    for k in pairs(v) do
      if type(k) ~= "string" and mtype(k) ~= "integer" then fail("table keys must be strings or integers") end
      keys[#keys + 1] = k
    end
    table.sort(keys, key_less)
    out[#out + 1] = "t" .. string.pack("<I4", #keys)
    for _, k in ipairs(keys) do
      encode(k, out, depth + 1)
      encode(v[k], out, depth + 1)
    end
  else
    fail("values must be strings, numbers, booleans or tables of those, not " .. t)
  end
end

local function encoded(v)
  local out = {}
  encode(v, out, 0)
  return table.concat(out)
end

local function decode(s, pos, depth)
  local tag = s:sub(pos, pos)
  pos = pos + 1
  if tag == "s" then return string.unpack("<s4", s, pos) end
  if tag == "i" then return string.unpack("<j", s, pos) end
  if tag == "n" then return string.unpack("<n", s, pos) end
  if tag == "T" then return true, pos end
  if tag == "F" then return false, pos end
  if tag == "t" and depth < MAX_DEPTH then
    local n
    n, pos = string.unpack("<I4", s, pos)
    if n > #s - pos + 1 then error("bad count") end
    local t = {}
    for _ = 1, n do
      local k, v
      k, pos = decode(s, pos, depth + 1)
      if type(k) ~= "string" and mtype(k) ~= "integer" then error("bad key") end
      v, pos = decode(s, pos, depth + 1)
      t[k] = v
    end
    return t, pos
  end
  error("bad tag")
end

local KV_MAGIC = "AIRLOCK-KV1\n"
local KV_OPTS = { dir = true, file = true, store = true, max_bytes = true, max_value = true, max_keys = true,
                  max_key = true, write = true, max_written = true }

--- kv(store) or kv{dir = path | store = table, file = "kv.bin", max_bytes = "1M", max_value = "64K",
--- max_keys = 10000, max_key = 256, write = true, max_written = "64M"}
--- -> { ["kv.get"], ["kv.put"], ["kv.delete"], ["kv.list"] }
--- store: a plain table kept in memory (the host may read it); dir: a directory
--- where the store is persisted as one file, rewritten atomically on every change;
--- max_written bounds the bytes those rewrites may write for one run (0: unbounded).
---   kv.get{key} -> value or nil       kv.put{key, value} -> true
---   kv.delete{key} -> true            kv.list{prefix = ""} -> sorted keys
function M.kv(arg)
  local opts, store
  if arg == nil then
    opts, store = {}, {}
  elseif type(arg) == "table" and (type(arg.dir) == "string" or type(arg.store) == "table") then
    opts = options(arg, KV_OPTS, "kv")
    store = opts.store
  elseif type(arg) == "table" then
    opts, store = {}, arg
  else
    error("kv: expects a table store, or options {dir = path} / {store = table}", 2)
  end
  local max_bytes = size_opt(opts, "max_bytes", 1 << 20, "kv")
  local max_value = size_opt(opts, "max_value", 64 << 10, "kv")
  local max_keys = count_opt(opts, "max_keys", 10000, "kv")
  local max_key = count_opt(opts, "max_key", 256, "kv", 65536)
  -- Every change rewrites (and fsyncs) the whole file: bound what one run may
  -- make it write, or a put loop turns a 1 MiB store into gigabytes of I/O.
  local max_written = size_opt(opts, "max_written", 64 << 20, "kv")
  local write = opts.write ~= false
  local dir, file = opts.dir, opts.file or "kv.bin"
  if type(file) ~= "string" or file:find("/", 1, true) or file == "" or file == "." or file == ".." then
    error("kv: 'file' must be a plain file name", 2)
  end

  if dir then
    store = {}
    dir = host_dir(dir, "kv: dir")
    local data, code, why = core.fs_read(dir, file, max_bytes * 2 + 4096)
    if data then
      local ok, t = pcall(function()
        if data:sub(1, #KV_MAGIC) ~= KV_MAGIC then error("not a kv file") end
        local v, pos = decode(data, #KV_MAGIC + 1, 0)
        if type(v) ~= "table" or pos ~= #data + 1 then error("trailing bytes") end
        return v
      end)
      if not ok then error(sfmt("kv: '%s/%s' is not a valid store: %s", dir, file, tostring(t)), 2) end
      store = t
    elseif code ~= "not_found" then
      error(sfmt("kv: cannot read '%s/%s': %s", dir, file, why), 2)
    end
  end

  -- The configuration the handlers close over; the store and its counts are
  -- state, kept in M._state under cfg.
  local cfg = { dir = dir, file = file, max_bytes = max_bytes, max_value = max_value, max_keys = max_keys,
                max_key = max_key, write = write, max_written = max_written }
  local S = { store = store, used = 0, nkeys = 0,   -- bytes held: keys plus encoded values
              written = setmetatable({}, { __mode = "k" }) }   -- run handle -> bytes written for it
  for k, v in pairs(store) do
    if type(k) == "string" then
      local ok, e = pcall(encoded, v)
      S.used = S.used + #k + (ok and #e or 0)
      S.nkeys = S.nkeys + 1
    end
  end
  M._state[cfg] = S

  local function key_arg(args)
    args_table(args)
    local k = args.key
    if type(k) ~= "string" then fail("args.key must be a string, got " .. type(k)) end
    if #k == 0 or #k > cfg.max_key then fail(sfmt("args.key must be 1 to %d bytes long", cfg.max_key)) end
    return k
  end

  -- Sets store[k] = v (v encoded as e, or nil), keeping the file in step.
  local function change(k, v, e, ctx)
    local st = M._state[cfg]
    local old = st.store[k]
    local old_ok, old_e = pcall(encoded, old)
    local old_size = old ~= nil and #k + (old_ok and #old_e or 0) or 0
    local new_size = v ~= nil and #k + #e or 0
    if v ~= nil and old == nil and st.nkeys >= cfg.max_keys then
      fail(sfmt("kv: the store is full (max_keys %d)", cfg.max_keys))
    end
    if st.used - old_size + new_size > cfg.max_bytes then
      fail(sfmt("kv: the store is full (max_bytes %d)", cfg.max_bytes))
    end
    st.store[k] = v
    if cfg.dir then
      local data = KV_MAGIC .. encoded(st.store)
      local who = ctx and ctx.handle or st
      local done = st.written[who] or 0
      if cfg.max_written > 0 and done + #data > cfg.max_written then
        st.store[k] = old
        fail(sfmt("kv: this run has had the store rewritten to %d bytes already, and this change would " ..
          "pass max_written (%d): every change writes the whole file; make fewer, larger changes, or " ..
          "raise max_written", done, cfg.max_written))
      end
      st.written[who] = done + #data
      local ok, _, why = core.fs_write(cfg.dir, cfg.file, data, false)
      if not ok then
        st.store[k] = old
        fail("kv: cannot save the store: " .. tostring(why))
      end
    end
    st.used = st.used - old_size + new_size
    st.nkeys = st.nkeys + (old == nil and v ~= nil and 1 or 0) - (old ~= nil and v == nil and 1 or 0)
  end

  local function read_only() fail("denied: read-only store") end
  return {
    ["kv.get"] = function(args)
      return M._state[cfg].store[key_arg(args)]
    end,
    ["kv.put"] = function(args, ctx)
      if not cfg.write then read_only() end
      local k = key_arg(args)
      local v = args.value
      if v == nil then fail("args.value is missing (use kv.delete to remove a key)") end
      local e = encoded(v)
      if #e > cfg.max_value then fail(sfmt("args.value is larger than the store's max_value (%d)", cfg.max_value)) end
      change(k, (decode(e, 1, 0)), e, ctx)   -- a private copy, exactly as encoded
      return true
    end,
    ["kv.delete"] = function(args, ctx)
      if not cfg.write then read_only() end
      local k = key_arg(args)
      if M._state[cfg].store[k] ~= nil then change(k, nil, nil, ctx) end
      return true
    end,
    ["kv.list"] = function(args)
      local prefix = ""
      if args ~= nil then
        args_table(args)
        if args.prefix ~= nil and type(args.prefix) ~= "string" then fail("args.prefix must be a string") end
        prefix = args.prefix or ""
      end
      local keys = {}
      for k in pairs(M._state[cfg].store) do
        if type(k) == "string" and k:sub(1, #prefix) == prefix then keys[#keys + 1] = k end
      end
      table.sort(keys)
      return keys
    end,
  }
end

-- ------------------------------------------------------------------ clock, random

local CLOCK_OPTS = { mode = true, start = true, step = true }

--- clock{mode = "real" | "virtual", start = 0, step = 1} -> a handler for clock.now,
--- answering {time = seconds since the epoch, clock = seconds}. virtual: each run
--- starts at start and every call advances the clock by step seconds.
function M.clock(opts)
  opts = options(opts, CLOCK_OPTS, "clock")
  local mode = opts.mode or "real"
  if mode == "real" then
    if opts.start ~= nil or opts.step ~= nil then error("clock: 'start' and 'step' are for mode 'virtual'", 2) end
    return function() return { time = os.time(), clock = os.clock() } end
  end
  if mode ~= "virtual" then error("clock: mode must be 'real' or 'virtual'", 2) end
  local start, step = opts.start or 0, opts.step or 1
  if type(start) ~= "number" or start ~= start or math.abs(start) > 2 ^ 53 then error("clock: 'start' must be a number", 2) end
  if type(step) ~= "number" or step < 0 or step > 2 ^ 32 then error("clock: 'step' must be a number >= 0", 2) end
  local state = per_run(function() return { n = 0 } end)
  return function(_, ctx)
    local s = state(ctx)
    local elapsed = s.n * step
    s.n = s.n + 1
    return { time = start + elapsed, clock = elapsed }
  end
end

local function urandom(n)
  if n == 0 then return "" end
  local f = assert(io.open("/dev/urandom", "rb"))
  local s = f:read(n)
  f:close()
  if not s or #s ~= n then fail("random: /dev/urandom gave a short read") end
  return s
end

local RANDOM_OPTS = { max_bytes = true }

--- random{max_bytes = 4096} -> { ["random.bytes"], ["random.int"] } from the parent's CSPRNG.
---   random.bytes{n} -> n random bytes      random.int{min = 1, max} -> an integer in [min, max]
function M.random(opts)
  opts = options(opts, RANDOM_OPTS, "random")
  local max_bytes = size_opt(opts, "max_bytes", 4096, "random")
  return {
    ["random.bytes"] = function(args)
      local n = type(args) == "table" and args.n or args
      n = type(n) == "number" and math.tointeger(n) or nil
      if not n or n < 0 or n > max_bytes then
        fail(sfmt("args.n must be an integer from 0 to %d", max_bytes))
      end
      return urandom(n)
    end,
    ["random.int"] = function(args)
      args_table(args)
      local lo, hi = args.min, args.max
      if lo == nil then lo = 1 end
      lo = type(lo) == "number" and math.tointeger(lo) or nil
      hi = type(hi) == "number" and math.tointeger(hi) or nil
      if not lo or not hi then fail("args.min and args.max must be integers") end
      if lo > hi then fail("args.min must not be greater than args.max") end
      local span = hi - lo            -- as an unsigned 64-bit number
      local mask, sh = span, 1
      while sh <= 32 do mask, sh = mask | (mask >> sh), sh * 2 end
      while true do
        local r = string.unpack("<j", urandom(8)) & mask
        if not math.ult(span, r) then return lo + r end
      end
    end,
  }
end

-- ------------------------------------------------------------------ log

local LOG_OPTS = { max_bytes = true, sink = true, raw = true }

local function default_sink(text, ctx)
  io.stderr:write(sfmt("[airlock run %s] %s", tostring(type(ctx) == "table" and ctx.run or "?"), text))
  if text:sub(-1) ~= "\n" then io.stderr:write("\n") end
end

--- log{max_bytes = "64K", sink = function(text, ctx), raw = false} -> a handler for log
--- (what the guest's print sends). At most max_bytes per run reach the sink,
--- then one "[log truncated]" line; control characters other than newline and
--- tab are escaped unless raw. The default sink is the host's stderr.
--- (A policy that sets log this way replaces the built-in one, so result.log stays empty.)
function M.log(opts)
  opts = options(opts, LOG_OPTS, "log")
  local max = size_opt(opts, "max_bytes", 64 << 10, "log")
  local sink = opts.sink or default_sink
  if type(sink) ~= "function" then error("log: 'sink' must be a function(text, ctx)", 2) end
  local raw = opts.raw == true
  local state = per_run(function() return { bytes = 0, cut = false } end)
  return function(args, ctx)
    local text = type(args) == "table" and args.text
    if type(text) ~= "string" then fail("args.text must be a string") end
    local s = state(ctx)
    if s.cut then return true end
    if not raw then
      text = text:gsub("[%z\1-\8\11-\31\127]", function(c) return sfmt("\\x%02x", c:byte()) end)
    end
    if s.bytes + #text > max then
      text = text:sub(1, max - s.bytes)
      s.cut = true
    end
    s.bytes = s.bytes + #text
    if #text > 0 then sink(text, ctx) end
    if s.cut then sink("[log truncated]\n", ctx) end
    return true
  end
end

-- ------------------------------------------------------------------ modules

local MODULES_OPTS = { max_bytes = true }

--- modules(path or {paths...}, {max_bytes = "256K"}) -> a handler for module.load,
--- answering {source = text} for the guest's require(name): name is
--- [%w_]+ components separated by dots (dots are directories), looked up as
--- name.lua then name/init.lua under each path, resolved like the workspace.
--- Binary chunks (first byte 0x1b) and files over max_bytes are refused.
function M.modules(paths, opts)
  if type(paths) == "string" then paths = { paths } end
  if type(paths) ~= "table" or #paths == 0 then error("modules: expects a directory path or a list of them", 2) end
  opts = options(opts, MODULES_OPTS, "modules")
  local max = size_opt(opts, "max_bytes", 256 << 10, "modules")
  local roots = {}
  for i, p in ipairs(paths) do
    if type(p) ~= "string" or p == "" then error("modules: paths must be strings", 2) end
    roots[i] = host_dir(p, "modules: path")
  end
  return function(args)
    args_table(args)
    local name = args.name
    if type(name) ~= "string" then fail("args.name must be a string") end
    if #name == 0 or #name > 200 then fail("denied: module name must be 1 to 200 bytes") end
    for comp in (name .. "."):gmatch("([^.]*)%.") do
      if not comp:match("^[%w_]+$") then fail("denied: module name " .. show(name) .. " is not [%w_]+ parts joined by dots") end
    end
    local base = name:gsub("%.", "/")
    for _, root in ipairs(roots) do
      for _, rel in ipairs { base .. ".lua", base .. "/init.lua" } do
        local src, code, why = core.fs_read(root, rel, max)
        if src then
          if src:byte(1) == 27 then fail("denied: module " .. show(name) .. " is a binary chunk") end
          return { source = src }
        end
        if code ~= "not_found" and code ~= "not_dir" then
          if code == "too_large" then fail(sfmt("module %s is larger than %d bytes", show(name), max)) end
          fs_error(code, why, rel, max)
        end
      end
    end
    fail("module " .. show(name) .. " not found")
  end
end

-- ------------------------------------------------------------------ http

local HTTP_OPTS = { allow = true, methods = true, max_bytes = true, timeout = true, max_redirects = true,
                    max_header_bytes = true }
-- Headers libcurl sets itself, or that would let a guest smuggle a request.
local FORBIDDEN_HEADERS = { host = true, ["content-length"] = true, ["transfer-encoding"] = true,
                            connection = true, expect = true, upgrade = true, te = true, trailer = true,
                            ["keep-alive"] = true, ["proxy-authorization"] = true, ["proxy-connection"] = true }
local CREDENTIAL_HEADERS = { authorization = true, cookie = true }
local REDIRECTS = { [301] = true, [302] = true, [303] = true, [307] = true, [308] = true }

local function parse_headers(raw)
  local out = {}
  for line in raw:gmatch("([^\r\n]*)\r?\n") do
    local name, value = line:match("^([^:%s]+):%s*(.-)%s*$")
    if name then
      name = name:lower()
      out[name] = out[name] and out[name] .. ", " .. value or value
    end
  end
  return out
end

local HTTP_ERRORS = {
  bad_url = "bad URL",
  scheme = "denied: only http and https URLs are allowed",
  bad_method = "bad method",
  timeout = "timed out",
  connect = "cannot connect",
  busy = "too many requests at once",
}

-- Requests made from a call's handler on a broker do not block it: each
-- broker has one engine (libcurl's multi interface, core.http_engine) whose
-- descriptor the broker watches (b:_watch_extra); the handler waits in its
-- coroutine (nest.suspend) while the broker serves every other run, and goes
-- on when its transfer ends. Called anywhere else (a host's own code, a
-- note's handler), a request is performed at once and blocks.
local engines = setmetatable({}, { __mode = "k" })   -- broker -> {engine, waiting = {id -> resume}}

local function engine_for(b)
  local e = engines[b]
  if e then return e end
  local engine, code, why = core.http_engine()
  if not engine then return nil, code, why end
  e = { engine = engine, waiting = {} }
  assert(b:_watch_extra(engine:fd(), function()
    -- Never raises: a transfer's end goes to its handler, whose errors are its call's.
    local ok, done = pcall(engine.pump, engine)
    if not ok then
      local failed = e.waiting
      e.waiting = {}
      for _, resume in pairs(failed) do resume(nil, "io", tostring(done)) end
      return
    end
    for _, d in ipairs(done) do
      local resume = e.waiting[d.id]
      e.waiting[d.id] = nil
      if resume then resume(d.res, d.code, d.detail) end
    end
  end))
  engines[b] = e
  return e
end

-- Not API: how many of broker b's requests are in flight (for specs).
function M._http_in_flight(b)
  local e = engines[b]
  return e and e.engine:pending() or 0
end

-- One request: on the broker's engine when the handler can wait, else now.
local function http_perform(req, ctx)
  local run = type(ctx) == "table" and ctx.handle
  if run and nest.suspendable() and run:live() then
    local e, code, why = engine_for(run:_broker())
    if not e then return nil, code, why end
    local id, ecode, detail = e.engine:start(req)
    if not id then return nil, ecode, detail end
    return nest.suspend(function(resume) e.waiting[id] = resume end,
      function() e.waiting[id] = nil e.engine:cancel(id) end)   -- its run ended first
  end
  return core.http_request(req)
end

--- http{allow = {"api.example.com", "127.0.0.1:8080"}, methods = {"GET"}, max_bytes = "1M",
--- timeout = "5s", max_redirects = 5, max_header_bytes = "64K"} -> a handler for
--- http.request{url, method = "GET", headers = {Name = value}, body} -> {status, headers, body, url}.
--- The parent performs the request (libcurl) only to allowed hosts: "host:port",
--- or "host" for the scheme's default port; http and https only; the host is
--- compared after libcurl's own URL parsing, and the parsed URL is the one
--- connected to. Redirects are followed here, each re-checked against the
--- allowlist (credentials are dropped on a redirect); the response is bounded
--- by max_bytes (the transfer is aborted past it); timeout covers the whole call.
--- Response header names are lower case. The call blocks the broker's loop for
--- its duration (at most timeout).
function M.http(opts)
  opts = options(opts, HTTP_OPTS, "http")
  if type(opts.allow) ~= "table" or #opts.allow == 0 then
    error("http: 'allow' must be a non-empty list of \"host\" or \"host:port\"", 2)
  end
  local allow = {}
  for i, a in ipairs(opts.allow) do
    if type(a) ~= "string" or not a:match("^[%w%.%-%[%]:]+$") then
      error(sfmt("http: allow[%d] must be \"host\" or \"host:port\"", i), 2)
    end
    allow[i] = a:lower()
  end
  local methods = {}
  for i, m in ipairs(opts.methods or { "GET" }) do
    if type(m) ~= "string" or not m:match("^%a+$") then error(sfmt("http: methods[%d] must be a method name", i), 2) end
    methods[m:upper()] = true
  end
  local max_bytes = size_opt(opts, "max_bytes", 1 << 20, "http")
  local max_header = size_opt(opts, "max_header_bytes", 64 << 10, "http")
  local timeout = 5000
  if opts.timeout ~= nil then
    local v, why = policy.parse_duration(opts.timeout)
    if not v or v < 1 then error("http: 'timeout' must be " .. (why or "at least 1ms"), 2) end
    timeout = v
  end
  local max_redirects = count_opt(opts, "max_redirects", 5, "http", 20)

  return function(args, ctx)
    args_table(args)
    local url, method, body = args.url, args.method or "GET", args.body
    if type(url) ~= "string" then fail("args.url must be a string") end
    if #url > 8192 then fail("args.url is longer than 8192 bytes") end
    if type(method) ~= "string" then fail("args.method must be a string") end
    method = method:upper()
    if not methods[method] then fail("denied: method " .. show(method) .. " is not allowed") end
    if body ~= nil and type(body) ~= "string" then fail("args.body must be a string") end
    if body and #body > max_bytes then fail(sfmt("args.body is larger than max_bytes (%d)", max_bytes)) end
    local headers = {}
    if args.headers ~= nil then
      if type(args.headers) ~= "table" then fail("args.headers must be a table {Name = value}") end
      for k, v in pairs(args.headers) do
        if type(k) ~= "string" or not k:match("^[%w!#$%%&'*+.^_`|~-]+$") or #k > 256 then
          fail("denied: bad header name " .. show(tostring(k)))
        end
        if type(v) ~= "string" or #v > 8192 or v:find("[%z\r\n]") then
          fail("denied: bad value for header " .. show(k))
        end
        if FORBIDDEN_HEADERS[k:lower()] then fail("denied: header " .. show(k) .. " cannot be set") end
        headers[#headers + 1] = { k, v }
        if #headers > 64 then fail("denied: more than 64 headers") end
      end
      table.sort(headers, function(a, b) return a[1] < b[1] end)
    end

    local deadline = core.now_ms() + timeout
    local redirects = 0
    while true do
      local list = {}
      for _, h in ipairs(headers) do list[#list + 1] = h[1] .. ": " .. h[2] end
      local left = math.floor(deadline - core.now_ms())
      if left < 1 then fail(sfmt("timed out after %d ms", timeout)) end
      local res, code, detail = http_perform({
        url = url, method = method, headers = list, body = body, allow = allow,
        max_bytes = max_bytes, max_header_bytes = max_header, timeout_ms = left,
      }, ctx)
      if not res then
        local where = redirects > 0 and ("redirect to " .. show(url)) or show(url)
        if code == "not_allowed" then
          fail(sfmt("denied: %s: host %s is not in the allowlist", where, show(detail)))
        elseif code == "too_large" then
          fail(sfmt("%s: response %s larger than %d bytes", where, detail, detail == "headers" and max_header or max_bytes))
        elseif code == "timeout" then
          fail(sfmt("%s: timed out after %d ms", where, timeout))
        end
        fail(sfmt("%s: %s: %s", where, HTTP_ERRORS[code] or code, detail))
      end
      if REDIRECTS[res.status] and res.location and max_redirects > 0 then
        redirects = redirects + 1
        if redirects > max_redirects then fail(sfmt("too many redirects (max %d)", max_redirects)) end
        if res.status == 303 or ((res.status == 301 or res.status == 302) and method == "POST") then
          if method ~= "HEAD" then method = "GET" end
          body = nil
        end
        if not methods[method] then fail("denied: redirect needs method " .. show(method) .. ", which is not allowed") end
        local kept = {}
        for _, h in ipairs(headers) do
          local n = h[1]:lower()
          if not CREDENTIAL_HEADERS[n] and not (body == nil and n == "content-type") then kept[#kept + 1] = h end
        end
        headers = kept
        url = res.location
      else
        return { status = res.status, headers = parse_headers(res.headers), body = res.body, url = url }
      end
    end
  end
end

return M
