-- airlock.repl -- interactive Lua with the airlock module loaded.
-- Expressions print their values; multi-line input continues until it compiles.
local airlock = require "airlock"
local core = require "airlock.core"

local M = {}

local function pretty(v, indent, seen)
  indent, seen = indent or "", seen or {}
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) ~= "table" then return tostring(v) end
  if seen[v] then return "<cycle>" end
  seen[v] = true
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  if #keys == 0 then return "{}" end
  local lines = { "{" }
  for _, k in ipairs(keys) do
    local ks = type(k) == "string" and k:match("^[%a_][%w_]*$") and k or "[" .. pretty(k) .. "]"
    lines[#lines + 1] = indent .. "  " .. ks .. " = " .. pretty(v[k], indent .. "  ", seen) .. ","
  end
  lines[#lines + 1] = indent .. "}"
  return table.concat(lines, "\n")
end
M.pretty = pretty

-- readline at a terminal; plain lines without prompts from a pipe.
local function read(prompt)
  if core.readline then return core.readline(prompt) end
  return io.stdin:read("l")
end

function M.main()
  if core.readline then
    print(airlock._VERSION .. " -- try: airlock.run{guest = 'return 6*7'}   (Ctrl-D to leave)")
  end
  local env = setmetatable({ airlock = airlock }, { __index = _G })
  while true do
    local line = read("airlock> ")
    if not line then
      if core.readline then print() end
      return 0
    end
    local chunk = line
    local fn, err = load("return " .. chunk, "=repl", "t", env)
    if not fn then fn, err = load(chunk, "=repl", "t", env) end
    while not fn and err and err:match("<eof>$") do
      local more = read("      >> ")
      if not more then break end
      chunk = chunk .. "\n" .. more
      fn, err = load(chunk, "=repl", "t", env)
    end
    if core.add_history then core.add_history((chunk:gsub("\n", " "))) end
    if not fn then
      print(err)
    else
      local res = table.pack(xpcall(fn, debug.traceback))
      if not res[1] then
        print(res[2])
      else
        for i = 2, res.n do print(pretty(res[i])) end
      end
    end
  end
end

return M
