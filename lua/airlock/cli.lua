-- airlock.cli -- the airlock command: run, repl, bench, demo.
-- Exit status: 0 success, 1 the guest failed (any cause but ok), 2 bad usage.
local airlock = require "airlock"

local M = {}

local USAGE = [[
usage: airlock COMMAND [ARGS]

  run GUEST.lua [--policy NAME|FILE] [--input JSON] [--json]
                       run one guest and print its value (or the result as JSON)
  repl                 interactive Lua with the airlock module loaded
  bench [--json] [--quick]
                       measure spawn and effect round trips against baselines
  demo                 a short tour: guests that succeed, fail and misbehave
  version              print the version
  help                 this text
]]

local function json()
  local ok, dk = pcall(require, "dkjson")
  if not ok then error("the Debian package lua-dkjson is needed for JSON (apt-get install lua-dkjson)", 0) end
  return dk
end

local function usage_error(msg)
  io.stderr:write("airlock: ", msg, "\n", USAGE)
  return 2
end

-- Parses "--flag value" and "--switch" options; returns positional args and options.
local function parse(args, spec)
  local pos, opts = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    local name = a:match("^%-%-([%w-]+)$")
    if name then
      local kind = spec[name]
      if kind == nil then return nil, "unknown option --" .. name end
      if kind == "value" then
        i = i + 1
        if args[i] == nil then return nil, "option --" .. name .. " needs a value" end
        opts[name] = args[i]
      else
        opts[name] = true
      end
    else
      pos[#pos + 1] = a
    end
    i = i + 1
  end
  return pos, opts
end

-- JSON output. dkjson (used for --input) treats any table with a numeric
-- key "n" as an array, which would corrupt guest values such as {n = 1}; the
-- encoder below decides by the keys alone: exactly 1..#t is an array.
local function encode(v, seen)
  local t = type(v)
  if t == "nil" then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    return math.type(v) == "integer" and tostring(v) or string.format("%.17g", v)
  end
  if t == "string" then
    return '"' .. v:gsub('[%c"\\]', function(c)
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
M.encode_json = encode

local function show_value(v)
  if type(v) == "string" then return v end
  if type(v) == "table" then return encode(v) end
  return tostring(v)
end

function M.run(args)
  local pos, opts = parse(args, { policy = "value", input = "value", json = "switch" })
  if not pos then return usage_error(opts) end
  if #pos ~= 1 then return usage_error("run: expected exactly one guest file") end
  local path = pos[1]
  local f, ferr = io.open(path, "rb")
  if not f then
    io.stderr:write("airlock: run: cannot read guest ", ferr, "\n")
    return 2
  end
  local source = f:read("a")
  f:close()
  local input
  if opts.input then
    local v, _, err = json().decode(opts.input, 1, nil)
    if err then
      io.stderr:write("airlock: run: --input is not valid JSON: ", err, "\n")
      return 2
    end
    input = v
  end
  local pol = opts.policy
  if pol then
    local p, perr = airlock.policy.load(pol)
    if not p then
      io.stderr:write("airlock: run: ", perr, "\n")
      return 2
    end
    pol = p
  end
  local b <close> = airlock.broker()
  local on_log = not opts.json and function(text) io.stdout:write(text) io.stdout:flush() end or nil
  local run, err = b:start { guest = source, name = path:match("([^/]+)$"), policy = pol,
                             input = input, on_log = on_log }
  if not run then
    io.stderr:write("airlock: run: ", err, "\n")
    return 2
  end
  local res = run:wait(b)
  if opts.json then
    local out = { ok = res.ok, cause = res.cause, message = res.message, value = res.value,
                  usage = res.usage, log = res.log, confinement = res.confinement,
                  error = res.error, stderr = res.stderr ~= "" and res.stderr or nil,
                  policy = res.policy }
    io.stdout:write(encode(out), "\n")
  elseif res.ok then
    if res.value ~= nil then io.stdout:write(show_value(res.value), "\n") end
  else
    io.stderr:write(string.format("airlock: %s: %s\n", res.cause, res.message))
    if res.error and res.error.traceback then io.stderr:write(res.error.traceback, "\n") end
  end
  return res.ok and 0 or 1
end

function M.repl(args)
  return require("airlock.repl").main(args)
end

function M.bench(args)
  return require("airlock.bench").main(args)
end

function M.demo(args)
  return require("airlock.demo").main(args)
end

function M.version()
  print(airlock._VERSION)
  return 0
end

function M.help()
  io.stdout:write(USAGE)
  return 0
end

function M.main(argv)
  local cmd = argv[1]
  local rest = { table.unpack(argv, 2) }
  if cmd == nil then return usage_error("no command given") end
  if cmd == "-h" or cmd == "--help" then cmd = "help" end
  local f = M[cmd]
  if type(f) ~= "function" or cmd == "main" then return usage_error("unknown command '" .. cmd .. "'") end
  return f(rest)
end

return M
