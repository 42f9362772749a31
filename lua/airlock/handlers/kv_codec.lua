-- airlock.handlers.kv_codec -- the kv store's value encoding: strings,
-- numbers, booleans, and tables of those (keys strings or integers), encoded
-- with string.pack so a stored copy is exact (integer vs float kept) and its
-- size known. Tables are written with their keys sorted, so a value has one
-- encoding.
local M = {}

local mtype, sfmt = math.type, string.format

local function fail(msg) error(msg, 0) end

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

--- encoded(v) -> the encoding of v; raises (the call's failure) for a value
--- that cannot be stored.
M.encoded = encoded

--- decode(s, pos, depth) -> value, next position; raises on malformed bytes.
M.decode = decode

return M
