-- airlock.handlers.log -- log (what the guest's print sends), bounded per run.
local common = require "airlock.handlers.common"

local fail, options, size_opt, per_run = common.fail, common.options, common.size_opt, common.per_run
local sfmt = string.format

local M = {}

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

return M
