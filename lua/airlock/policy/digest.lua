-- airlock.policy.digest -- a policy's digest: SHA-256 over a canonical
-- encoding (sorted keys) of everything but handler code, plus each handler's
-- source text when it can be found (else its stripped bytecode) and the
-- values it closes over. A loaded policy's digest is taken once and kept.
local quote = require("airlock.policy.values").quote
local is_policy = require("airlock.policy.freeze").is_policy
local read_file = require("airlock.util").read_file
local core = require "airlock.core"

local M = {}

local function sha256(s) return core.sha256(s) end

-- Lines first..last of text (all of it when first is 0: a main chunk).
local function lines(text, first, last)
  if first == 0 then return text end
  local out, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if n >= first then out[#out + 1] = line end
    if n >= last then break end
  end
  if n < last then return nil end
  return table.concat(out, "\n")
end

-- Chunks compiled into the module (tools/embed.lua names them "@lua/airlock/x.lua"
-- and "@policies/x.lua"): digested by bytecode, so the digest never depends on
-- whether the source tree happens to be readable from here.
local function embedded(source)
  local base = source:match("^@lua/airlock/(.+)%.lua$")
  local name = base and "airlock." .. (base == "init" and base or base:gsub("/init$", "")):gsub("/", ".")
  if not name then
    base = source:match("^@policies/(.+)%.lua$")
    name = base and "airlock.policies." .. base
  end
  return name and package.preload[name] ~= nil
end

--- The source text of a Lua function when it can be found (defined in a file
--- that is still readable, or in a chunk of text), else nil.
function M.source_of(f)
  local info = debug.getinfo(f, "S")
  if not info or info.what == "C" then return nil end
  local src = info.source or ""
  local text
  if src:sub(1, 1) == "@" then
    if embedded(src) then return nil end
    text = read_file(src:sub(2))
  elseif src:sub(1, 1) ~= "=" then
    text = src   -- load()ed text: the chunk is its own source
  end
  return text and lines(text, info.linedefined, info.lastlinedefined)
end

local canonical

-- A function: its source text (else its stripped bytecode), then the values it
-- closes over (e.g. the root a handler factory was given), _ENV and modules aside.
local function function_code(f, out, seen, depth)
  if debug.getinfo(f, "S").what == "C" then out[#out + 1] = "fn:C" return end
  local text = M.source_of(f)
  if text then
    out[#out + 1] = "src:" .. sha256(text)
  else
    local ok, code = pcall(string.dump, f, true)
    out[#out + 1] = ok and ("bc:" .. sha256(code)) or "fn:?"
  end
  local modules = {}
  for _, m in pairs(package.loaded) do if type(m) == "table" then modules[m] = true end end
  out[#out + 1] = "("
  for i = 1, 255 do
    local name, v = debug.getupvalue(f, i)
    if name == nil then break end
    if name ~= "_ENV" and not (type(v) == "table" and (modules[v] or v == _G)) then
      out[#out + 1] = quote(name) .. "="
      canonical(v, out, seen, depth + 1)
      out[#out + 1] = ";"
    end
  end
  out[#out + 1] = ")"
end

local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  if ta == "string" or ta == "number" then return a < b end
  return tostring(a) < tostring(b)
end

function canonical(v, out, seen, depth)
  local t = type(v)
  if depth > 32 then out[#out + 1] = "<deep>" return end
  if t == "table" then
    if seen[v] then out[#out + 1] = "<cycle>" return end
    seen[v] = true
    local mt = not is_policy(v) and getmetatable(v)
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, key_order)
    out[#out + 1] = "{"
    for _, k in ipairs(keys) do
      canonical(k, out, seen, depth + 1)
      out[#out + 1] = "="
      canonical(v[k], out, seen, depth + 1)
      out[#out + 1] = ";"
    end
    if type(mt) == "table" and mt.__call then
      out[#out + 1] = "call="
      canonical(mt.__call, out, seen, depth + 1)
    end
    out[#out + 1] = "}"
    seen[v] = nil
  elseif t == "function" then
    if seen[v] then out[#out + 1] = "<cycle>" return end
    seen[v] = true
    function_code(v, out, seen, depth)
    seen[v] = nil
  elseif t == "string" then
    out[#out + 1] = quote(v)
  elseif math.type(v) == "float" then
    out[#out + 1] = string.format("%.17g", v)
  elseif t == "number" or t == "boolean" or t == "nil" then
    out[#out + 1] = tostring(v)
  else
    out[#out + 1] = "<" .. t .. ">"
  end
end

--- The canonical text the digest is taken over (for audits and tests).
function M.canonical(p)
  local out = {}
  canonical(p, out, {}, 0)
  return table.concat(out)
end

local digests = setmetatable({}, { __mode = "k" })

--- digest(p) -> hex SHA-256 of the policy's canonical encoding. A loaded
--- policy's digest is taken once (it is an immutable snapshot) and kept.
function M.digest(p)
  if is_policy(p) and digests[p] then return digests[p] end
  local d = sha256("airlock-policy-v1\0" .. M.canonical(p))
  if is_policy(p) then digests[p] = d end
  return d
end

return M
