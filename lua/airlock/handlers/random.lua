-- airlock.handlers.random -- random.bytes and random.int, from the parent's CSPRNG.
local common = require "airlock.handlers.common"

local fail, options, size_opt, args_table = common.fail, common.options, common.size_opt, common.args_table
local sfmt = string.format

local M = {}

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

return M
