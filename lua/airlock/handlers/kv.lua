-- airlock.handlers.kv -- kv.get, kv.put, kv.delete and kv.list on a store
-- kept in memory or persisted as one file in a directory of the host's.
local core = require "airlock.core"
local common = require "airlock.handlers.common"
local codec = require "airlock.handlers.kv_codec"

local fail, refuse, options = common.fail, common.refuse, common.options
local size_opt, count_opt, args_table, host_dir = common.size_opt, common.count_opt, common.args_table, common.host_dir
local encoded, decode = codec.encoded, codec.decode
local sfmt = string.format

local M = {}

local KV_MAGIC = "AIRLOCK-KV1\n"
local KV_OPTS = { dir = true, file = true, store = true, max_bytes = true, max_value = true, max_keys = true,
                  max_key = true, write = true, max_written = true }

-- The store persisted in cfg.dir (empty when there is no file yet), or nil
-- and why: a file that is not a store is never read as an empty one.
local function load(cfg)
  local data, code, why = core.fs_read(cfg.dir, cfg.file, cfg.max_bytes * 2 + 4096)
  if not data then
    if code ~= "not_found" then return nil, sfmt("kv: cannot read '%s/%s': %s", cfg.dir, cfg.file, why) end
    return {}
  end
  local ok, t = pcall(function()
    if data:sub(1, #KV_MAGIC) ~= KV_MAGIC then error("not a kv file") end
    local v, pos = decode(data, #KV_MAGIC + 1, 0)
    if type(v) ~= "table" or pos ~= #data + 1 then error("trailing bytes") end
    return v
  end)
  if not ok then return nil, sfmt("kv: '%s/%s' is not a valid store: %s", cfg.dir, cfg.file, tostring(t)) end
  return t
end

-- The store's state: its table, the bytes it holds (keys plus encoded
-- values), its keys, and the bytes written for each run (weak keys).
local function new_state(store)
  local S = { store = store, used = 0, nkeys = 0, written = setmetatable({}, { __mode = "k" }) }
  for k, v in pairs(store) do
    if type(k) == "string" then
      local ok, e = pcall(encoded, v)
      S.used = S.used + #k + (ok and #e or 0)
      S.nkeys = S.nkeys + 1
    end
  end
  return S
end

-- change(k, v, e, ctx): sets store[k] = v (v encoded as e, or nil) within
-- cfg's bounds, keeping the file in step; a failed save leaves it as it was.
local function changer(cfg)
  -- Rewrites the whole file for the run that asked, within max_written.
  local function save(st, ctx)
    local data = KV_MAGIC .. encoded(st.store)
    local who = ctx and ctx.handle or st
    local done = st.written[who] or 0
    if cfg.max_written > 0 and done + #data > cfg.max_written then
      return sfmt("kv: this run has had the store rewritten to %d bytes already, and this change would " ..
        "pass max_written (%d): every change writes the whole file; make fewer, larger changes, or " ..
        "raise max_written", done, cfg.max_written)
    end
    st.written[who] = done + #data
    local ok, _, why = core.fs_write(cfg.dir, cfg.file, data, false)
    if not ok then return "kv: cannot save the store: " .. tostring(why) end
  end
  return function(k, v, e, ctx)
    local st = common.state[cfg]
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
    local why = cfg.dir and save(st, ctx)
    if why then
      st.store[k] = old
      fail(why)
    end
    st.used = st.used - old_size + new_size
    st.nkeys = st.nkeys + (old == nil and v ~= nil and 1 or 0) - (old ~= nil and v == nil and 1 or 0)
  end
end

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
  local file = opts.file or "kv.bin"
  if type(file) ~= "string" or file:find("/", 1, true) or file == "" or file == "." or file == ".." then
    error("kv: 'file' must be a plain file name", 2)
  end
  -- (the options are read here, so that an error names kv's caller)
  local cfg = {
    dir = opts.dir and host_dir(opts.dir, "kv: dir"), file = file,
    max_bytes = size_opt(opts, "max_bytes", 1 << 20, "kv"),
    max_value = size_opt(opts, "max_value", 64 << 10, "kv"),
    max_keys = count_opt(opts, "max_keys", 10000, "kv"),
    max_key = count_opt(opts, "max_key", 256, "kv", 65536),
    write = opts.write ~= false,
    -- Every change rewrites (and fsyncs) the whole file: bound what one run may
    -- make it write, or a put loop turns a 1 MiB store into gigabytes of I/O.
    max_written = size_opt(opts, "max_written", 64 << 20, "kv"),
  }
  if cfg.dir then
    local loaded, why = load(cfg)
    if not loaded then error(why, 2) end
    store = loaded
  end
  -- The handlers close over the configuration; the store and its counts are
  -- state, kept in common.state under cfg.
  common.state[cfg] = new_state(store)
  local change = changer(cfg)

  local function key_arg(args)
    args_table(args)
    local k = args.key
    if type(k) ~= "string" then fail("args.key must be a string, got " .. type(k)) end
    if #k == 0 or #k > cfg.max_key then fail(sfmt("args.key must be 1 to %d bytes long", cfg.max_key)) end
    return k
  end
  local function read_only() refuse("read-only store") end
  return {
    ["kv.get"] = function(args)
      return common.state[cfg].store[key_arg(args)]
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
      if common.state[cfg].store[k] ~= nil then change(k, nil, nil, ctx) end
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
      for k in pairs(common.state[cfg].store) do
        if type(k) == "string" and k:sub(1, #prefix) == prefix then keys[#keys + 1] = k end
      end
      table.sort(keys)
      return keys
    end,
  }
end

return M
