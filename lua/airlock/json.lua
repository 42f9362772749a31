-- airlock.json -- JSON for the command line: --input, --json, bench output.
-- Decoding is Debian's dkjson. Encoding is our own: dkjson treats any table
-- with a numeric key "n" as an array, which would corrupt guest values such as
-- {n = 1}; here the keys alone decide: exactly 1..#t is an array.
local M = {}

-- JSON text is UTF-8: a guest's or a program's bytes that are not (a cut
-- multi-byte sequence, binary output) become U+FFFD, one per bad byte, so
-- the output always parses. Valid text passes through unchanged.
local function utf8_valid(s)
  if utf8.len(s) then return s end
  local out, i = {}, 1
  while i <= #s do
    local n, bad = utf8.len(s, i)
    if n then out[#out + 1] = s:sub(i) break end
    out[#out + 1] = s:sub(i, bad - 1)
    out[#out + 1] = "\u{FFFD}"
    i = bad + 1
  end
  return table.concat(out)
end

local function encode(v, seen)
  local t = type(v)
  if t == "nil" then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    return math.type(v) == "integer" and tostring(v) or string.format("%.17g", v)
  end
  if t == "string" then
    return '"' .. utf8_valid(v):gsub('[%c"\\]', function(c)
      local named = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }
      return named[c] or string.format("\\u%04x", c:byte())
    end) .. '"'
  end
  if t ~= "table" then return '"' .. tostring(v) .. '"' end
  seen = seen or {}
  if seen[v] then return '"<cycle>"' end
  seen[v] = true
  local n, count, keys = #v, 0, {}
  for k in pairs(v) do count = count + 1 keys[#keys + 1] = k end
  local out = {}
  if count > 0 and count == n then
    for i = 1, n do out[i] = encode(v[i], seen) end
    seen[v] = nil
    return "[" .. table.concat(out, ",") .. "]"
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do out[#out + 1] = encode(tostring(k)) .. ":" .. encode(v[k], seen) end
  seen[v] = nil
  return "{" .. table.concat(out, ",") .. "}"
end
M.encode = function(v) return encode(v) end

--- decode(text) -> value, or nil and a message saying what is wrong with text.
function M.decode(text)
  local ok, dk = pcall(require, "dkjson")
  if not ok then error("the Debian package lua-dkjson is needed for JSON (apt-get install lua-dkjson)", 0) end
  local v, _, err = dk.decode(text, 1, nil)
  if err then return nil, err end
  return v
end

return M
