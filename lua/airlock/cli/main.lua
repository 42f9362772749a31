-- airlock.cli.main -- the airlock command: run, exec, call, probe, repl, bench, demo, ledger.
-- Exit status: 0 success, 1 the guest failed (any cause but ok) or probe found
-- that the untrusted policy cannot run here, 2 bad usage.
local airlock = require "airlock"
local json = require "airlock.json"
local util = require "airlock.util"
local core = require "airlock.core"
local ledger = require "airlock.ledger"
local ceilings = require "airlock.policy.ceilings"

local M = {}

local usage = require "airlock.cli.usage"

-- Set by main when the command line asks for --json: then even a usage
-- error is one JSON object on stdout.
local json_wanted = false

-- A usage error: the message, then the usage of the command it is about (or
-- a pointer to the whole list), exit 2.
local function usage_error(msg, cmd)
  if json_wanted then
    io.stdout:write(json.encode { ok = false, cause = "usage", message = msg }, "\n")
    return 2
  end
  local c = cmd and usage.find(cmd)
  io.stderr:write("airlock: ", msg, "\n", c and usage.command(cmd) or "run 'airlock --help' for the commands\n")
  return 2
end

-- Parses "--flag value", "--switch" and "--list value" (repeatable: a list
-- of the values) options; returns positional args and options.
local function parse(args, spec)
  local pos, opts = {}, {}
  local i = 1
  while i <= #args do
    local a = args[i]
    local name = a:match("^%-%-([%w-]+)$")
    if name then
      local kind = spec[name]
      if kind == nil then return nil, "unknown option --" .. name end
      if kind == "value" or kind == "list" then
        i = i + 1
        if args[i] == nil then return nil, "option --" .. name .. " needs a value" end
        if kind == "list" then
          opts[name] = opts[name] or {}
          table.insert(opts[name], args[i])
        else
          opts[name] = args[i]
        end
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

-- The host's ceilings on budgets (airlock.policy.ceilings) from the
-- command's user: AIRLOCK_CEILING, then each --ceiling (each
-- "NAME=VALUE[,NAME=VALUE...]"), later ones winning. -> true, or nil, message.
local function set_ceilings(list)
  for _, text in ipairs(list or {}) do
    local t, err = ceilings.parse(text)
    if not t then return nil, (err:gsub("^ceilings: ", "")) end
    airlock.policy.ceilings(t)
  end
  return true
end
M.set_ceilings = set_ceilings

local function show_value(v)
  if type(v) == "string" then return v end
  if type(v) == "table" then return json.encode(v) end
  return tostring(v)
end

-- Reads a guest file, or nil, why.
local function read_guest(path)
  local source, err = util.read_file(path)
  if not source then return nil, "cannot read guest " .. tostring(err) end
  return source
end

local function decode_input(text)
  if text == nil then return true, nil end
  local v, err = json.decode(text)
  if err then return false, "--input is not valid JSON: " .. err end
  return true, v
end

-- "cause: message", without saying the cause twice when the message starts with it.
local function cause_text(res)
  local msg = res.message or ""
  if msg:sub(1, #res.cause) == res.cause then return msg end
  return res.cause .. ": " .. msg
end

-- What a guest prints, made safe for a terminal: on a terminal (unless
-- --raw), control characters but newline and tab are shown as cat -v does
-- (ESC as ^[), so no guest can write the clipboard (OSC 52), retitle the
-- window or clear the screen. Elsewhere the bytes are left as they are.
local function for_terminal(opts)
  if opts.raw or not core.isatty(1) then return function(s) return s end end
  return function(s)
    return (s:gsub("[%z\1-\8\11-\31\127]", function(c)
      local b = c:byte()
      return b == 127 and "^?" or "^" .. string.char(b + 64)
    end))
  end
end

-- A command that could not start: with --json one JSON object saying why
-- (cause, message), else one line on stderr. Exit 2.
local function cannot_start(opts, what, err, cause)
  local msg = tostring(err)
  if opts.json then
    io.stdout:write(json.encode { ok = false, cause = cause or msg:match("^(%a+):") or "error", message = msg }, "\n")
  else
    io.stderr:write("airlock: ", what, ": ", msg, "\n")
  end
  return 2
end

-- Prints a run's result the way run and resume do; returns the exit status:
-- 0 ok, 1 failed, 3 paused (waiting for `airlock resume`).
local function report(res, opts, ledger_dir)
  if opts.json then
    local out = { ok = res.ok, cause = res.cause, message = res.message, value = res.value,
                  usage = res.usage, log = res.log, confinement = res.confinement,
                  error = res.error, stderr = res.stderr ~= "" and res.stderr or nil,
                  policy = res.policy, policy_base = res.policy_base, digest = res.digest, run = res.run,
                  signal = res.signal, exit_code = res.exit_code, ledger = res.ledger }
    io.stdout:write(json.encode(out), "\n")
    io.stdout:flush()   -- whole, before any line on stderr (2>&1 would cut the object)
  elseif res.ok then
    if res.value ~= nil then io.stdout:write(for_terminal(opts)(show_value(res.value)), "\n") end
  elseif res.cause == "paused" then
    io.stderr:write(string.format("airlock: paused: %s\n", show_value(res.value)))
    if ledger_dir then
      io.stderr:write(string.format("airlock: continue with: airlock resume %s --input JSON\n", ledger_dir))
    else
      io.stderr:write("airlock: nothing can resume this run: it has no ledger (run it with --ledger DIR " ..
        "to make a pause resumable)\n")
    end
  else
    io.stderr:write("airlock: ", cause_text(res), "\n")
    if res.error and res.error.traceback then io.stderr:write(res.error.traceback, "\n") end
  end
  if res.ledger and res.ledger.error then
    io.stderr:write("airlock: ledger: ", res.ledger.error, "\n")
  end
  if res.cause == "paused" then return 3 end
  return res.ok and 0 or 1
end

function M.run(args)
  -- -e CODE: the guest inline (as lua -e); "-": the guest read from stdin.
  local inline
  local rest = {}
  local i = 1
  while i <= #args do
    if args[i] == "-e" then
      if args[i + 1] == nil then return usage_error("run: -e needs the guest's code", "run") end
      if inline then return usage_error("run: give -e once", "run") end
      inline = args[i + 1]
      i = i + 2
    else
      rest[#rest + 1] = args[i]
      i = i + 1
    end
  end
  local pos, opts = parse(rest, { policy = "value", input = "value", json = "switch",
                                  ledger = "value", durability = "value", raw = "switch", ceiling = "list",
                                  learn = "value" })
  if not pos then return usage_error("run: " .. opts, "run") end
  if opts.learn then return require("airlock.learn.cli").run_main(opts, pos, usage_error) end
  local cok, cerr = set_ceilings(opts.ceiling)
  if not cok then return usage_error("run: --ceiling: " .. cerr, "run") end
  local path, source
  if inline then
    if #pos ~= 0 then return usage_error("run: give a guest file, -e CODE or -, not more than one", "run") end
    path, source = "(command line)", inline
  else
    if #pos ~= 1 then return usage_error("run: expected one guest: a file, -e CODE, or - (stdin)", "run") end
    path = pos[1]
    if path == "-" then
      source, path = io.stdin:read("a"), "(stdin)"
      if not source then return usage_error("run: cannot read the guest from stdin", "run") end
    else
      local rerr
      source, rerr = read_guest(path)
      if not source then return cannot_start(opts, "run", rerr, "usage") end
    end
  end
  local okin, input = decode_input(opts.input)
  if not okin then return cannot_start(opts, "run", input, "usage") end
  if opts.policy then
    local p, perr = airlock.policy.resolve(opts.policy, "untrusted")
    if not p then return cannot_start(opts, "run", perr, "policy") end
  end
  if opts.durability and not ({ none = true, batch = true, always = true })[opts.durability] then
    return usage_error("run: --durability must be none, batch or always")
  end
  local fresh, taken = ledger.fresh(opts.ledger)
  if not fresh then return cannot_start(opts, "run", taken, "ledger") end
  local b <close> = airlock.broker()
  local safe = for_terminal(opts)
  local on_log = not opts.json and function(text) io.stdout:write(safe(text)) io.stdout:flush() end or nil
  -- The policy goes by name or path, so a recorded run can reload it.
  local run, err = b:start { guest = source, name = path:match("([^/]+)$") or path, policy = opts.policy,
                             input = input, on_log = on_log, ledger = opts.ledger,
                             durability = opts.durability }
  if not run then return cannot_start(opts, "run", err) end
  return report(run:wait(b), opts, opts.ledger)
end

function M.replay(args)
  local pos, opts = parse(args, { policy = "value", guest = "value", json = "switch",
                                  ["policy-changed"] = "switch", ceiling = "list" })
  if not pos then return usage_error("replay: " .. opts, "replay") end
  local cok, cerr = set_ceilings(opts.ceiling)
  if not cok then return usage_error("replay: --ceiling: " .. cerr, "replay") end
  if #pos ~= 1 then return usage_error("replay: expected one ledger directory", "replay") end
  local guest
  if opts.guest then
    local rerr
    guest, rerr = read_guest(opts.guest)
    if not guest then return cannot_start(opts, "replay", rerr, "usage") end
  end
  local rep, err = airlock.replay(pos[1], { policy = opts.policy, guest = guest,
                                            policy_changed = opts["policy-changed"] })
  if not rep then return cannot_start(opts, "replay", err) end
  if rep.note then io.stderr:write("airlock: replay: note: ", rep.note, "\n") end
  local res = rep.result
  if opts.json then
    io.stdout:write(json.encode { identical = rep.identical, served = rep.served, calls = rep.calls,
      live_effects = rep.live_effects, nested = rep.nested, cause = res.cause, message = res.message,
      value = res.value, recorded = rep.recorded and { kind = rep.recorded.kind, cause = rep.recorded.cause,
                                   value = rep.recorded.value or rep.recorded.prompt } }, "\n")
  elseif rep.identical then
    local nested = (rep.nested or 0) > 0
      and string.format(", %d nested run%s replayed", rep.nested, rep.nested == 1 and "" or "s") or ""
    io.stdout:write(string.format("replay %s: identical (%d calls answered from the journal%s, %d live effects)\n",
      pos[1], rep.served, nested, rep.live_effects))
  else
    local what = res.ok and ("returned " .. show_value(res.value)) or cause_text(res)
    io.stdout:write(string.format("replay %s: differs: %s (%d of %d calls answered, %d live effects)\n",
      pos[1], what, rep.served, rep.calls, rep.live_effects))
  end
  return rep.identical and 0 or 1
end

function M.resume(args)
  local pos, opts = parse(args, { policy = "value", input = "value", json = "switch", durability = "value",
                                  raw = "switch", ceiling = "list",
                                  ["policy-changed"] = "switch" })
  if not pos then return usage_error("resume: " .. opts, "resume") end
  local cok, cerr = set_ceilings(opts.ceiling)
  if not cok then return usage_error("resume: --ceiling: " .. cerr, "resume") end
  if #pos ~= 1 then return usage_error("resume: expected one ledger directory", "resume") end
  if not opts.input then return usage_error("resume: --input JSON is required (the answer to the pause)", "resume") end
  local okin, input = decode_input(opts.input)
  if not okin then return cannot_start(opts, "resume", input, "usage") end
  local res, err = airlock.resume(pos[1], input, { policy = opts.policy, durability = opts.durability,
                                                   policy_changed = opts["policy-changed"] })
  if not res then return cannot_start(opts, "resume", err) end
  if res.note then io.stderr:write("airlock: resume: note: ", res.note, "\n") end
  if not opts.json and res.log ~= "" then io.stdout:write(for_terminal(opts)(res.log)) end
  return report(res, opts, pos[1])
end

function M.branch(args)
  local pos, opts = parse(args, { at = "value" })
  if not pos then return usage_error("branch: " .. opts, "branch") end
  local at = opts.at and tonumber(opts.at)
  if #pos ~= 2 or not at or at ~= math.floor(at) or at < 1 then
    return usage_error("branch: expected DIR --at SEQ NEWDIR", "branch")
  end
  local ok, err = airlock.branch(pos[1], math.tointeger(at), pos[2])
  if not ok then
    io.stderr:write("airlock: branch: ", err, "\n")
    return 1
  end
  local kept = type(err) == "table" and err or {}
  io.stdout:write(string.format("branch %s: records 1..%d of %s, head %s%s\n", pos[2], at, pos[1],
    ledger.head(pos[2]) or "?", (kept.blobs or 0) > 0 and string.format(", %d kept contents copied", kept.blobs) or ""))
  if (kept.blobs_missing or 0) > 0 then
    io.stderr:write(string.format("airlock: branch: %d kept contents the records name are missing from %s/blobs " ..
      "or altered: a revert of the branch will be refused\n", kept.blobs_missing, pos[1]))
  end
  return 0
end

function M.probe(args)
  local pos, opts = parse(args, { json = "switch" })
  if not pos then return usage_error("probe: " .. opts, "probe") end
  if #pos > 0 then return usage_error("probe: unexpected argument '" .. pos[1] .. "'", "probe") end
  local probe = require "airlock.probe"   -- the probe subcommand
  local report = probe.report()
  if opts.json then
    io.stdout:write(probe.json(report), "\n")
  else
    io.stdout:write(probe.format(report))
  end
  return report.verdict.ok and 0 or 1
end

function M.repl(args)
  return require("airlock.cli.repl").main(args)
end

function M.bench(args)
  if args[1] == "ledger" then
    -- The ledger's benchmark is C (appends per mode against SQLite, verify
    -- throughput): airlock-ledger-bench, beside the worker.
    local worker = core.worker_path()
    local prog = worker and worker:gsub("airlock%-worker$", "airlock-ledger-bench")
    if not prog or not util.exists(prog) then
      io.stderr:write("airlock: bench ledger: airlock-ledger-bench is not built (make build)\n")
      return 2
    end
    local quoted = {}
    for i = 2, #args do
      -- --quick, as the other benches take it: shorter rounds, a smaller journal to verify.
      if args[i] == "--quick" then quoted[#quoted + 1] = "--seconds 0.5 --verify-mb 64"
      else quoted[#quoted + 1] = util.shell_quote(args[i]) end
    end
    local ok, _, code = os.execute(prog .. " " .. table.concat(quoted, " "))
    return ok and 0 or (code or 1)
  end
  if args[1] == "exec" then return require("airlock.cli.bench_exec").main({ table.unpack(args, 2) }) end
  if args[1] == "scale" then return require("airlock.cli.bench_scale").main({ table.unpack(args, 2) }) end
  if args[1] == "net" then return require("airlock.cli.bench_net").main({ table.unpack(args, 2) }) end
  if args[1] == "guest" then return require("airlock.cli.bench_guest").main({ table.unpack(args, 2) }) end
  return require("airlock.cli.bench").main(args)
end

-- The command ends as soon as exec has: what exec opened (its broker, a
-- ledger, a terminal) it has closed on every way out, and freeing the Lua
-- state one object at a time cost a tenth of the command's start. The C
-- library's exit still flushes stdout and stderr.
function M.exec(args)
  local status = require("airlock.cli.exec").main(args)
  io.stdout:flush()
  io.stderr:flush()
  os.exit(status, false)
end

function M.demo(args)
  return require("airlock.cli.demo").main(args)
end

-- airlock ledger verify|show|head|checkpoint DIR: lua/airlock/cli/ledger.lua.
function M.ledger(args)
  return require("airlock.cli.ledger").main(args, { usage_error = usage_error, parse = parse,
                                                     cannot_start = cannot_start })
end

local CALL_ARGS_MAX = 16 * 1024 * 1024   -- bytes of JSON read from stdin ("-")

-- airlock call EFFECT [JSON-ARGS]: one effect call over fd 3, for programs run
-- by `airlock exec`. Exit status: 0 the parent answered ok (printed as one line
-- of JSON on stdout); 1 it answered with an error; 3 the error's code is
-- "denied" (refused by policy); 2 bad usage, malformed JSON-ARGS, fd 3 not an
-- airlock channel, or a reply that breaks the protocol. Errors go to stderr as
-- "airlock call: EFFECT: message".
function M.call(args)
  local pos, opts = parse(args, {})
  if not pos then return usage_error("call: " .. opts, "call") end
  if #pos < 1 or #pos > 2 then return usage_error("call: expected EFFECT [JSON-ARGS]", "call") end
  local effect, text = pos[1], pos[2]
  local function fail(msg)
    io.stderr:write("airlock call: ", effect, ": ", msg, "\n")
    return 2
  end
  if text == "-" then
    local parts, size = {}, 0
    while true do
      local chunk = io.stdin:read(65536)
      if not chunk then break end
      size = size + #chunk
      if size > CALL_ARGS_MAX then return fail("JSON-ARGS on stdin is over 16 MiB") end
      parts[#parts + 1] = chunk
    end
    text = table.concat(parts)
  end
  local value
  if text ~= nil then
    -- Strict: one JSON value and nothing after it but white space.
    local okdk, dk = pcall(require, "dkjson")
    if not okdk then return fail("the Debian package lua-dkjson is needed for JSON-ARGS") end
    local v, at, err = dk.decode(text, 1, nil)
    if err then return fail("JSON-ARGS is not valid JSON: " .. err) end
    local extra = text:find("%S", at)
    if extra then
      return fail(string.format("JSON-ARGS is not valid JSON: text after the value at byte %d", extra))
    end
    value = v
  end
  local status, result, code = core.channel_call(3, effect, value)
  if status == true then
    local okw, werr = io.stdout:write(json.encode(result), "\n")
    if okw then okw, werr = io.stdout:flush() end
    if not okw then return fail("cannot write the answer to stdout: " .. tostring(werr)) end
    return 0
  end
  io.stderr:write("airlock call: ", effect, ": ", result, "\n")
  if status == nil then return 2 end
  return code == "denied" and 3 or 1
end

function M.version()
  print(airlock._VERSION)
  return 0
end

-- airlock help [COMMAND] | --man [COMMAND] | --completion
function M.help(args)
  args = args or {}
  if args[1] == "--help" or args[1] == "-h" then io.stdout:write(usage.command("help")) return 0 end
  if args[1] == "--completion" then
    io.stdout:write(usage.completion())
    return 0
  end
  local man = args[1] == "--man"
  local name = table.concat({ table.unpack(args, man and 2 or 1) }, " ")
  if man then
    local page = usage.man(name ~= "" and name or nil, airlock._VERSION:match("[%d.]+$"))
    if not page then return usage_error("help: no man page for '" .. name .. "'", "help") end
    io.stdout:write(page)
    return 0
  end
  if name == "" then io.stdout:write(usage.global()) return 0 end
  if name == "ledger" then
    for _, c in ipairs(usage.COMMANDS) do
      if c.name:match("^ledger ") then io.stdout:write(usage.command(c.name), "\n") end
    end
    return 0
  end
  if not usage.find(name) then return usage_error("help: unknown command '" .. name .. "'") end
  io.stdout:write(usage.command(name))
  return 0
end

-- --help or -h among a command's arguments (before any "--"): its usage, exit
-- 0. exec looks for itself (what follows its program is the program's).
local function wants_help(args)
  for _, a in ipairs(args) do
    if a == "--" then return false end
    if a == "--help" or a == "-h" then return true end
  end
  return false
end

function M.main(argv)
  local cmd = argv[1]
  local rest = { table.unpack(argv, 2) }
  json_wanted = false
  for _, a in ipairs(rest) do
    if a == "--" then break end
    if a == "--json" then json_wanted = cmd ~= "exec" end   -- exec says it itself
  end
  if cmd == nil then return usage_error("no command given") end
  if os.getenv("AIRLOCK_CEILING") then
    local cok, cerr = set_ceilings { os.getenv("AIRLOCK_CEILING") }
    if not cok then return usage_error("AIRLOCK_CEILING: " .. cerr) end
  end
  if cmd == "-h" or cmd == "--help" then cmd = "help" end
  if cmd == "--version" or cmd == "-V" then cmd = "version" end
  local f = M[cmd]
  if type(f) ~= "function" or cmd == "main" then return usage_error("unknown command '" .. cmd .. "'") end
  if cmd ~= "exec" and cmd ~= "help" and wants_help(rest) then
    local sub = cmd == "ledger" and rest[1] and usage.find("ledger " .. rest[1]) and ("ledger " .. rest[1])
    if cmd == "ledger" and not sub then return M.help { "ledger" } end
    if cmd == "bench" then sub = "bench" end
    io.stdout:write(usage.command(sub or cmd))
    return 0
  end
  return f(rest)
end

return M
