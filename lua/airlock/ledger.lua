-- airlock.ledger -- the ledger from Lua: a session directory holding a
-- hash-chained, append-only journal of records (core/ledger.h says what is on
-- disk and what verification proves). A thin layer over airlock.core's
-- ledger_* functions, plus the text that `airlock ledger show` prints.
--
--   local ledger = require "airlock.ledger"     -- after require "airlock"
--   local L = assert(ledger.open(dir, { create = true, durability = "batch" }))
--   local seq = assert(L:append("call", 1, { effect = "fs.read", args = { path = "a.txt" } }))
--   local cp = L:checkpoint()                   -- "SEQ:HEX": keep it outside the ledger
--   L:close()
--   assert(ledger.verify(dir, cp).ok)
--   for rec in ledger.records(dir) do print(rec.seq, rec.kind, rec.run) end
--
-- Failures of the system or of a journal are nil, message, errno; a wrong
-- argument is an error. Requires airlock.core and airlock.json, never
-- "airlock" (airlock.init may load this file).
local core = require "airlock.core"
local json = require "airlock.json"
local util = require "airlock.util"
local policy = require "airlock.policy"

local M = {}

-- The ledger runs in a process of its own (airlock-ledgerd, core/ledger_proc.h),
-- one per session: it alone opens the session directory, confined to it, and
-- this process is its client. It lives beside the worker (AIRLOCK_LEDGERD
-- names another; AIRLOCK_WORKER's directory is looked in first).
local program_path
local function program()
  if program_path then return program_path end
  local p = os.getenv("AIRLOCK_LEDGERD")
  if p == nil or p == "" then
    local w = os.getenv("AIRLOCK_WORKER")
    if w == nil or w == "" then
      local err, code
      w, err, code = core.worker_path()
      if not w then
        return nil, "ledger: cannot find airlock-ledgerd, which lives beside airlock-worker (" ..
          tostring(err) .. "); set AIRLOCK_LEDGERD", code
      end
    end
    p = (w:match("^(.*)/[^/]*$") or ".") .. "/airlock-ledgerd"
  end
  program_path = p
  return p
end
M.program = program

--- open(dir, opts) -> ledger, or nil, message, errno.
-- opts: create (bool: make dir, and its missing parents, and start a session when there is no journal),
-- durability ("none" (default), "batch" (group commit every batch_ms, default
-- 2) or "always" (fdatasync per append)), batch_ms, session (extra fields of a
-- new session's record, e.g. a policy digest). One writer per directory: a
-- second open, from any process, is refused with "ledger: DIR is in use by pid N".
-- A torn tail (a partial last record from an interrupted write) is cut off;
-- L:report().torn_bytes says how many bytes, L:report().reason says where.
-- Methods: append(kind, run, fields) -> seq (kind: a short lower-case word, not
-- "session"; the session layer writes init, call, reply, pause, resume, done;
-- fields: a table with string keys other than seq, kind, run, t),
-- head() -> seq, hex; checkpoint() -> "SEQ:HEX"; session_id(); durable_seq();
-- flush(), tick() -> true (or nil, message, errno; a failed write or sync makes
-- every later append fail the same way); sync_due_ms() -> ms until tick has
-- work, -1 if none; report(); dir(); close() (also by <close> and the GC).
-- The ledger process adds: max_bytes (the session's journal may not grow past
-- it: appends are refused, errno EDQUOT), admit_ms (the admission deadline:
-- a ledger process that answers no request within it is killed, and every
-- later append fails: fail closed), seal_bytes (the journal is sealed into a
-- zstd segment once it holds this many bytes; default 8 MiB), and the methods pid() (the ledger
-- process), grant() (this start's, never reused), sync() (wait until every
-- queued append is accepted; -> true, the bytes they added) and append(kind, run, fields, false) (queued;
-- a refusal surfaces at the next waiting call). An append returns once its
-- record is accepted: written whole to the journal by the ledger process. It
-- is committed (on disk) once durable_seq() reaches it; flush() commits now.
function M.open(dir, opts)
  if type(dir) ~= "string" then error("bad argument #1 to 'open' (string expected, got " .. type(dir) .. ")", 2) end
  local prog, err, code = program()
  if not prog then return nil, err, code end
  return core.ledger_proc_open(prog, dir, opts)
end

-- ------------------------------------------------------------ the session's bound

M.EDQUOT = 122   -- the errno of an append refused for the session's bound

--- session_max(pol) -> the bytes a session recorded under policy pol may
--- hold (its ledger.max_bytes, else the schema's default; 0: unbounded).
function M.session_max(pol)
  local v = type(pol) == "table" and type(pol.ledger) == "table" and pol.ledger.max_bytes or nil
  if v == nil then v = policy.default("ledger.max_bytes") end
  return v
end

--- naming_bound(L, bytes) -> L as a recorder sees it: its appends, but a
--- refusal for the session's bound (EDQUOT) names the policy field that set
--- it. Everything else is L's.
function M.naming_bound(L, bytes)
  -- append and sync (which waits for queued appends) are where the bound is met
  local function named(method)
    return function(_, ...)
      local ok, b, errno = L[method](L, ...)
      if ok == nil and errno == M.EDQUOT then
        return nil, string.format("ledger: the session's journal has reached its bound of %d bytes, the " ..
          "policy's ledger.max_bytes; nothing more is recorded, so nothing more is performed (raise " ..
          "ledger.max_bytes, or record in a new session)", bytes), errno
      end
      return ok, b, errno
    end
  end
  local wrapped = { append = named("append"), sync = named("sync") }
  return setmetatable({}, { __index = function(_, k)
    if wrapped[k] then return wrapped[k] end
    local v = L[k]
    if type(v) ~= "function" then return v end
    return function(_, ...) return v(L, ...) end
  end })
end

--- records(dir) -> iterator over the verified records, in order, streaming:
--   for rec in ledger.records(dir) do ... end
-- Each rec holds the body's fields (seq, kind, run, t, and the caller's) plus
-- hash (the chain hash after it, hex) and offset (in the journal). Damage
-- raises an error naming the seq and the damage word (altered, substituted,
-- deleted, reordered, malformed); a torn tail ends the iteration quietly. The
-- second value is the reader: reader:report() after the loop has torn_bytes.
-- A journal that cannot be opened is an error too.
function M.records(dir)
  local prog, perr = program()
  if not prog then error(perr, 0) end
  local it, reader, ctl, close = core.ledger_proc_records(prog, dir)
  if not it then error(reader, 0) end
  return it, reader, ctl, close
end

--- calls(dir) -> list, by_effect: the effects the journal in dir records calls
-- of, in first-call order, each { effect, n (calls), denied (how many the
-- policy refused) }, and the same entries by effect name. An effect name over
-- 128 bytes is left out (a record's fields are untrusted). Raises as records does.
function M.calls(dir)
  local list, by = {}, {}
  for rec in M.records(dir) do
    if rec.kind == "call" and type(rec.effect) == "string" and #rec.effect <= 128 then
      local c = by[rec.effect]
      if not c then
        c = { effect = rec.effect, n = 0, denied = 0 }
        by[rec.effect], list[#list + 1] = c, c
      end
      c.n = c.n + 1
      if rec.decision == "deny" then c.denied = c.denied + 1 end
    end
  end
  return list, by
end

--- is_sha256_hex(s) -> whether s is a SHA-256 as 64 lower-case hex digits (a
-- blob's name; a record's field is untrusted bytes).
function M.is_sha256_hex(s) return type(s) == "string" and #s == 64 and s:match("^[0-9a-f]+$") ~= nil end

--- verify(dir, checkpoint) -> report, or nil, message, errno (unreadable).
-- report: ok, records, last_seq, bytes, head ("SEQ:HEX"), torn_bytes,
-- session_id, and when damaged first_bad_seq, damage (the word) and reason
-- (one sentence starting with that word); reason also describes a torn tail,
-- which is not damage. checkpoint, "SEQ:HEX" or nil, must be matched by the
-- record with that seq: this is what catches records removed from the end.
function M.verify(dir, checkpoint)
  local prog, err, code = program()
  if not prog then return nil, err, code end
  return core.ledger_proc_verify(prog, dir, checkpoint)
end

-- The kept contents (blobs/ab/<sha256>) the branch's records name, copied
-- from src through no link; a blob src lacks is left out (a revert of the
-- branch then says which). -> how many were copied, how many were missing.
local function copy_blobs(src, dst)
  local want, list = {}, {}
  local ok = pcall(function()
    for rec in M.records(dst) do
      if rec.kind == "workspace.change" then
        for _, field in ipairs { "sha256", "before_sha256" } do   -- either may be absent
          local h = rec[field]
          if M.is_sha256_hex(h) and not want[h] then want[h], list[#list + 1] = true, h end
        end
      end
    end
  end)
  local copied, missing = 0, 0
  for _, h in ipairs(ok and list or {}) do
    local rel = "blobs/" .. h:sub(1, 2) .. "/" .. h
    local fine, done = pcall(function()
      local st = core.fs_stat(src, rel)
      local data = st and st.type == "file" and core.fs_read(src, rel, st.size)
      return data and core.sha256(data) == h and core.fs_write(dst, rel, data, true)
    end)
    if fine and done then
      copied = copied + 1
    else
      missing = missing + 1
    end
  end
  return copied, missing
end

--- branch(src, at, dst) -> true, {blobs = copied, blobs_missing = n}; or nil,
-- message, errno: a new session in dst starting from src's records 1..at (the
-- new session record says where from), with the contents an overlaid run
-- kept (blobs/) that those records name, so the branch can be reverted.
function M.branch(src, at, dst)
  local prog, err, code = program()
  if not prog then return nil, err, code end
  local ok, berr, bcode = core.ledger_proc_branch(prog, src, at, dst)
  if not ok then return nil, berr, bcode end
  local copied, missing = copy_blobs(src, dst)
  return true, { blobs = copied, blobs_missing = missing }
end

--- head(dir) -> "SEQ:HEX" of the last verified record, or nil, message, errno
-- (a damaged journal has no head: the message says where the damage is).
function M.head(dir)
  local rep, err, errno = M.verify(dir)   -- through a read-only ledger process, like every reader
  if not rep then return nil, err, errno end
  if not rep.ok then
    return nil, string.format("ledger %s: damaged at seq %d: %s", dir, rep.first_bad_seq, rep.reason), 74
  end
  return rep.head
end

--- parse_checkpoint(s) -> seq, hex (lower case), or nil, message.
function M.parse_checkpoint(s)
  local seq, hex = tostring(s):match("^(%d+):(%x+)$")
  seq = seq and math.tointeger(tonumber(seq))
  if not seq or seq < 1 or #hex ~= 64 then
    return nil, "a checkpoint is SEQ:HASH (a seq >= 1, a colon, 64 hex digits), not '" .. tostring(s) .. "'"
  end
  return seq, hex:lower()
end

M.sha256 = core.sha256

--- fresh(dir, api) -> true when dir (or nil) holds no session yet, else nil,
--- message, "ledger": a recorded run (the commands' --ledger, or with api the
--- ledger option of airlock.run, b:start and airlock.exec) starts a new
--- session, and a second run in an old one would make the first's replay
--- differ. The one check for every entry point.
function M.fresh(dir, api)
  if dir == nil or not util.exists(dir .. "/journal") then return true end
  return nil, string.format("ledger: %s already holds a session; %s starts a new one: give a new " ..
    "directory (%s continues a paused run)", dir, api and "the ledger option" or "--ledger",
    api and "airlock.resume(dir, input)" or "airlock resume " .. dir), "ledger"
end

-- ------------------------------------------------------------ show

M.DEPTHS_MAX = 4096

local OWN = { seq = true, kind = true, run = true, t = true, hash = true, offset = true }
local STRING_MAX = 120

local function quote(s)
  if #s > STRING_MAX then s = s:sub(1, STRING_MAX) .. string.format("...(%d bytes)", #s) end
  return util.quote(s)
end

-- A value as compact, one-line Lua: {path="a.txt"}, {1, 2}, "x".
local function lua_text(v)
  local t = type(v)
  if t == "string" then return quote(v) end
  if t ~= "table" then
    if math.type(v) == "float" and v == math.floor(v) and v > -1e15 and v < 1e15 then
      return string.format("%.1f", v)
    end
    return tostring(v)
  end
  local n, count, keys = #v, 0, {}
  for k in pairs(v) do count = count + 1 keys[#keys + 1] = k end
  local out = {}
  if count == n then
    for i = 1, n do out[i] = lua_text(v[i]) end
    return "{" .. table.concat(out, ", ") .. "}"
  end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == "string" or type(a) == "number") then return a < b end
    return type(a) < type(b)
  end)
  for _, k in ipairs(keys) do
    local key = type(k) == "string" and k:match("^[%a_][%w_]*$") and k or "[" .. lua_text(k) .. "]"
    out[#out + 1] = key .. "=" .. lua_text(v[k])
  end
  return "{" .. table.concat(out, ", ") .. "}"
end
M.lua_text = lua_text

local function time_text(t)
  if type(t) ~= "number" then return "?" end
  local s = math.floor(t)
  local ms = math.floor((t - s) * 1000)
  return os.date("!%Y-%m-%d %H:%M:%S", s) .. string.format(".%03dZ", ms)
end

--- line(rec, depth) -> one human-readable line for a record:
--   #12    2025-05-01 10:00:00.123Z  call     run 1  fs.read {path="a.txt"}  decision="allow"
-- The fields effect (bare) and args (as Lua) come first, then the rest sorted,
-- key=value; strings over 120 bytes are cut. depth (a nested run's, from its
-- nest record) indents the kind by two spaces a level; a nest record says
-- first where it runs: "under run 1 call 3 (#7)".
function M.line(rec, depth)
  local indent = string.rep("  ", math.min(math.type(depth) == "integer" and depth > 0 and depth or 0, 16))
  local parts = { string.format("%-6s %s  %s%-8s run %-3s", "#" .. tostring(rec.seq), time_text(rec.t),
                                indent, tostring(rec.kind), tostring(rec.run)) }
  local p = rec.kind == "nest" and type(rec.parent) == "table" and rec.parent or nil
  if p then
    parts[#parts + 1] = string.format("under run %s call %s (#%s)", lua_text(p.run), lua_text(p.id), lua_text(p.seq))
  end
  if type(rec.effect) == "string" then parts[#parts + 1] = rec.effect end
  if rec.args ~= nil then parts[#parts + 1] = lua_text(rec.args) end
  local keys = {}
  for k in pairs(rec) do
    if not OWN[k] and not (k == "effect" and type(rec.effect) == "string") and k ~= "args"
       and not (p and k == "parent") then
      keys[#keys + 1] = k
    end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do parts[#parts + 1] = tostring(k) .. "=" .. lua_text(rec[k]) end
  return table.concat(parts, "  ")
end

--- show(dir, {json = bool}) -> iterator of one line per record (no newline):
-- the text of line(rec), or with json one JSON object per record (its fields,
-- hash and offset). Damage raises as in records(); the second value is the
-- reader (reader:report() after the loop tells of a torn tail).
function M.show(dir, opts)
  local as_json = opts and opts.json
  local it, reader, ctl, close = M.records(dir)
  -- The depth of each nested run, from its nest record (at most DEPTHS_MAX
  -- runs remembered, so a journal of a million nest records stays bounded).
  local depth, known = {}, 0
  local function next_line(r)
    local rec = it(r, ctl)
    if rec == nil then return nil end
    if as_json then return json.encode(rec) end
    if rec.kind == "nest" and math.type(rec.depth) == "integer" and known < M.DEPTHS_MAX and depth[rec.run] == nil then
      depth[rec.run], known = rec.depth, known + 1
    end
    return M.line(rec, depth[rec.run])
  end
  return next_line, reader, nil, close
end

return M
