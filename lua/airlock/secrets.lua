-- airlock.secrets -- a policy's secrets: resolved in the parent when a run
-- starts, handed to handlers (ctx.secrets), never to the guest, and redacted
-- from everything a run produces.
--
--   secrets = { API_TOKEN = { env = "HOST_TOKEN" },      -- the parent's environment
--               DB_PASS   = { file = "/run/keys/db" } }  -- a file (one trailing newline dropped)
--
-- Every occurrence of a secret's value is replaced by "[redacted:NAME]" in the
-- run's result (value, message, error, log, stdout, stderr, traceback), in its
-- ledger records, in what print hands to on_log, and in every answer a handler
-- gives the guest (so a handler that returns a secret by mistake hands the
-- guest only its name). Matching is exact, on bytes: a secret that reaches an
-- output transformed (escaped by %q, JSON, base64, split in two) is not found.
local core = require "airlock.core"
local read_file = require("airlock.util").read_file

local M = {}

--- resolve(spec) -> { NAME = value }, or nil, message naming the secret.
--- spec: the policy's validated `secrets` section (nil: no secrets, {}).
function M.resolve(spec)
  local out = {}
  if spec == nil then return out end
  local names = {}
  for name in pairs(spec) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local s = spec[name]
    local v
    if s.env then
      v = os.getenv(s.env)
      if v == nil then
        return nil, string.format("secrets: %s: the environment variable %s is not set", name, s.env)
      end
    else
      local err
      v, err = read_file(s.file)
      if v == nil then
        return nil, string.format("secrets: %s: cannot read %s (%s)", name, s.file, tostring(err))
      end
      v = v:gsub("\r?\n$", "")
    end
    if v == "" then
      return nil, string.format("secrets: %s: the value is empty (from %s), so it could not be redacted",
        name, s.env and ("the environment variable " .. s.env) or s.file)
    end
    out[name] = v
  end
  return out
end

--- readonly(values) -> a table handlers can read and iterate but not change.
function M.readonly(values)
  local copy = {}
  for k, v in pairs(values) do copy[k] = v end
  return setmetatable({}, {
    __index = copy,
    __newindex = function() error("ctx.secrets is read-only", 2) end,
    __pairs = function() return next, copy, nil end,
    __len = function() return 0 end,
    __metatable = "airlock.secrets",
  })
end

-- Plain replacement of every occurrence of needle in s.
local function replace_all(s, needle, label)
  local i = s:find(needle, 1, true)
  if not i then return s end
  local out, from = {}, 1
  while i do
    out[#out + 1] = s:sub(from, i - 1)
    out[#out + 1] = label
    from = i + #needle
    i = s:find(needle, from, true)
  end
  out[#out + 1] = s:sub(from)
  return table.concat(out)
end

--- redactor(values) -> redact(v, cut), or nil when there is nothing to redact.
--- redact(v) returns v with every secret's value replaced by [redacted:NAME]:
--- strings directly, tables as copies (keys too); other values as they are.
--- cut = true also replaces a tail that is the start of a secret (of 4 bytes
--- or more): for output that was cut off at a limit mid-secret.
function M.redactor(values)
  local list = {}
  for name, v in pairs(values or {}) do list[#list + 1] = { value = v, label = "[redacted:" .. name .. "]" } end
  if #list == 0 then return nil end
  -- Longest first, so a secret that contains another is replaced whole.
  table.sort(list, function(a, b)
    if #a.value ~= #b.value then return #a.value > #b.value end
    return a.label < b.label
  end)

  local whole = {}
  for _, e in ipairs(list) do whole[e.value] = true end

  local function str(s, cut)
    if cut then
      -- A tail that starts a secret (and is not a whole one, replaced below).
      for _, e in ipairs(list) do
        for n = math.min(#e.value - 1, #s), 4, -1 do
          local tail = s:sub(-n)
          if tail == e.value:sub(1, n) and not whole[tail] then
            s = s:sub(1, -n - 1) .. e.label
            break
          end
        end
      end
    end
    for _, e in ipairs(list) do s = replace_all(s, e.value, e.label) end
    return s
  end

  local function redact(v, cut, seen)
    if type(v) == "string" then return str(v, cut) end
    if type(v) ~= "table" then return v end
    seen = seen or {}
    if seen[v] then return seen[v] end
    local c = {}
    seen[v] = c
    for k, x in pairs(v) do c[redact(k, false, seen)] = redact(x, false, seen) end
    return c
  end
  return redact
end

--- guard(handler, redact) -> a handler whose answers (values and error
--- messages) reach the guest redacted. The deferral marker passes unchanged.
function M.guard(handler, redact)
  return function(args, ctx)
    local ok, v = pcall(handler, args, ctx)
    if not ok then
      local why = core.denial(v)
      if why then core.deny(redact(why)) end   -- a refusal stays one
      error(redact(v), 0)
    end
    return redact(v)
  end
end

--- redact_result(res, redact, log_cut): redacts a run's result table in place
--- (log_cut: the log was cut off at the output limit).
function M.redact_result(res, redact, log_cut)
  for _, k in ipairs { "value", "message" } do
    if res[k] ~= nil then res[k] = redact(res[k]) end
  end
  if res.log then res.log = redact(res.log, log_cut) end
  if res.stdout then res.stdout = redact(res.stdout, res.stdout_truncated) end
  if res.stderr then res.stderr = redact(res.stderr, res.stderr_truncated) end
  if type(res.error) == "table" then res.error = redact(res.error) end
  return res
end

return M
