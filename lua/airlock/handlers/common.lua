-- airlock.handlers.common -- what every family of ready-made handlers shares:
-- failing and refusing a call, quoting a guest string, checking a
-- constructor's options, per-run state, and the guest's message for a failed
-- core.fs_* primitive.
local core = require "airlock.core"
local policy = require "airlock.policy"

local M = {}

local sfmt = string.format

--- fail(msg): the call fails with msg (the guest sees "handler for 'x' failed: msg").
function M.fail(msg) error(msg, 0) end

--- refuse(reason): the call is refused (a denial, core.deny: the guest sees
--- "denied: reason", and a run the guest lets it end is cause denied).
function M.refuse(reason) core.deny(reason) end

local fail, refuse = M.fail, M.refuse

--- show(s): a guest string made safe to quote in a message: at most 120 bytes,
--- control and non-ASCII bytes escaped.
function M.show(s)
  local cut = #s > 120
  s = s:sub(1, 120):gsub("[%c\128-\255'\\]", function(c) return sfmt("\\x%02x", c:byte()) end)
  return "'" .. s .. (cut and "...'" or "'")
end

--- options(opts, known, who): checks a constructor's options against the keys
--- it knows (a typo is an error, raised at the constructor's caller).
function M.options(opts, known, who)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(sfmt("%s: options must be a table", who), 3) end
  for k in pairs(opts) do
    if not known[k] then error(sfmt("%s: unknown option '%s'", who, tostring(k)), 3) end
  end
  return opts
end

function M.size_opt(opts, key, default, who)
  if opts[key] == nil then return default end
  local v, why = policy.parse_size(opts[key])
  if not v then error(sfmt("%s: '%s' must be %s", who, key, why), 3) end
  return v
end

function M.count_opt(opts, key, default, who, max)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= math.floor(v) or v < 0 or v > (max or 2 ^ 31) then
    error(sfmt("%s: '%s' must be a whole number from 0 to %d", who, key, max or 2 ^ 31), 3)
  end
  return math.tointeger(v)
end

function M.args_table(args)
  if type(args) ~= "table" then fail("expects a table of arguments, got " .. type(args)) end
  return args
end

-- Mutable state (a kv store, per-run counters) lives here, keyed by an empty
-- table the handler holds, never in the handler's own upvalues: a policy's
-- digest covers what its handlers close over (their configuration: a root, an
-- allowlist), and must not change as runs use them.
M.state = setmetatable({}, { __mode = "k" })

--- per_run(init) -> state(ctx): per-run state for handlers that count per
--- run, keyed by the run handle the broker passes in ctx (weakly, so ended
--- runs are forgotten).
function M.per_run(init)
  local key = {}
  M.state[key] = { runs = setmetatable({}, { __mode = "k" }) }
  return function(ctx)
    local st = M.state[key]
    local run = type(ctx) == "table" and ctx.handle
    if run == nil then st.shared = st.shared or init(); return st.shared end
    local s = st.runs[run]
    if not s then s = init(); st.runs[run] = s end
    return s
  end
end

--- host_dir(path, what): a directory the host names (a workspace root, a kv
--- dir, a module path) made absolute and canonical once, so the handler's
--- meaning does not depend on the host's working directory at each call.
--- Raises at the constructor's caller.
function M.host_dir(path, what)
  local real, _, why = core.fs_realpath(path)
  local st = real and core.fs_stat(real, "")
  if not st or st.type ~= "dir" then
    error(sfmt("%s '%s' is not a directory%s", what, path, why and " (" .. why .. ")" or ""), 3)
  end
  return real
end

--- fs_error(code, detail, path, limit): turns a failure code of the core.fs_*
--- primitives into the guest's message (a refusal on security grounds, or a
--- failure saying what went wrong).
function M.fs_error(code, detail, path, limit)
  local p = M.show(path)
  if code == "bad_path" then refuse("path " .. p .. " " .. detail) end
  if code == "escape" then refuse("path " .. p .. " leads outside the workspace") end
  if code == "magic" then refuse("path " .. p .. " goes through a /proc magic link or a symlink loop") end
  if code == "type" then refuse(p .. " is a " .. detail .. "; only regular files and directories are served") end
  if code == "raced" then refuse(p .. " changed while it was being opened") end
  if code == "not_found" then fail("no such file or directory: " .. p) end
  if code == "not_dir" then fail("not a directory: " .. p) end
  if code == "is_dir" then fail("is a directory: " .. p) end
  if code == "not_empty" then fail("directory not empty: " .. p) end
  if code == "too_large" then fail(sfmt("%s is larger than the workspace's max_bytes (%d)", p, limit or 0)) end
  if code == "too_many" then fail(sfmt("%s has more than %d entries", p, limit or 0)) end
  if code == "access" then fail("the host's permissions refuse access to " .. p) end
  if code == "no_space" then fail("no space left on the host for " .. p) end
  if code == "root" then
    if detail:match("cannot be removed") then refuse("the workspace root cannot be removed") end
    fail("the workspace is not available")
  end
  if code == "unsupported" then fail("the workspace needs openat2 (Linux 5.6 or later)") end
  fail(sfmt("%s: %s", p, detail or code))
end

return M
