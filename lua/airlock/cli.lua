-- airlock.cli -- the airlock command: run, probe, repl, bench, demo.
-- Exit status: 0 success, 1 the guest failed (any cause but ok) or probe found
-- that the untrusted policy cannot run here, 2 bad usage.
local airlock = require "airlock"
local json = require "airlock.json"

local M = {}

local USAGE = [[
usage: airlock COMMAND [ARGS]

  run GUEST.lua [--policy NAME|FILE] [--input JSON] [--json]
                       run one guest and print its value (or the result as JSON)
  probe [--json]       what this kernel can enforce (Landlock, seccomp, namespaces, ...),
                       how to fix what is missing; exit 1 if the untrusted policy cannot run
  repl                 interactive Lua with the airlock module loaded
  bench [--json] [--quick]
                       measure spawn and effect round trips against baselines
  demo                 a short tour: guests that succeed, fail and misbehave
  version              print the version
  help                 this text
]]

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

local function show_value(v)
  if type(v) == "string" then return v end
  if type(v) == "table" then return json.encode(v) end
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
    local v, err = json.decode(opts.input)
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
    io.stdout:write(json.encode(out), "\n")
  elseif res.ok then
    if res.value ~= nil then io.stdout:write(show_value(res.value), "\n") end
  else
    io.stderr:write(string.format("airlock: %s: %s\n", res.cause, res.message))
    if res.error and res.error.traceback then io.stderr:write(res.error.traceback, "\n") end
  end
  return res.ok and 0 or 1
end

function M.probe(args)
  local pos, opts = parse(args, { json = "switch" })
  if not pos then return usage_error("probe: " .. opts) end
  if #pos > 0 then return usage_error("probe: unexpected argument '" .. pos[1] .. "'") end
  local probe = require "airlock.probe"
  local report = probe.report()
  if opts.json then
    io.stdout:write(probe.json(report), "\n")
  else
    io.stdout:write(probe.format(report))
  end
  return report.verdict.ok and 0 or 1
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
