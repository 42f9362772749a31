-- airlock.cli.exec -- `airlock exec [options] -- PROGRAM [ARGS...]`: one
-- program run confined under a policy's tool authority (airlock.exec).
--
-- Like the program it runs: stdin, stdout and stderr are ours, passed
-- straight through (binary-safe, unbuffered, interleaved as written, no size
-- limit). --json or --capture SIZE capture them instead (--json prints the
-- whole result as one JSON object); a policy that hands the program secrets
-- also makes it capture, so they can be redacted. When the run did not end
-- well, one line on stderr says why; calls the policy refused are named there.
-- Exit status: the program's own when it exited; 124 when the deadline ended
-- it; 128+N when a signal did; 127 when the program is not found, 126 when it
-- cannot be run; 125 when airlock could not start it (usage, policy,
-- workspace, confinement); 1 when a capture was cut and the program exited 0.
local airlock = require "airlock"
local json = require "airlock.json"
local overlay = require "airlock.workspace.overlay"
local core = require "airlock.core"
local ledger = require "airlock.ledger"
local exec = require "airlock.exec"
local violations = require "airlock.violations"

local usage = require "airlock.cli.usage"

local M = {}

local SIGNALS = { SIGHUP = 1, SIGINT = 2, SIGQUIT = 3, SIGILL = 4, SIGTRAP = 5, SIGABRT = 6, SIGBUS = 7,
                  SIGFPE = 8, SIGKILL = 9, SIGUSR1 = 10, SIGSEGV = 11, SIGUSR2 = 12, SIGPIPE = 13,
                  SIGALRM = 14, SIGTERM = 15, SIGXCPU = 24, SIGXFSZ = 25, SIGSYS = 31 }

-- A usage error, exit 125; one JSON object on stdout when --json is among
-- the command's own options (those before the program).
local TAKES_VALUE = {}   -- from the usage table, the one list of exec's options
for _, o in ipairs(require("airlock.cli.usage").find("exec").options) do TAKES_VALUE[o[1]] = o[2] ~= nil end
local function usage_error(msg, args)
  local k = 1
  while args and args[k] and args[k] ~= "--" and args[k]:sub(1, 2) == "--" do
    if args[k] == "--json" then
      io.stdout:write(json.encode { ok = false, cause = "usage", message = msg }, "\n")
      return 125
    end
    k = k + (TAKES_VALUE[args[k]] and 2 or 1)
  end
  io.stderr:write("airlock exec: ", msg, "\n", usage.command("exec"))
  return 125
end

-- One prefix naming what failed: "exec: " is the command's own, and a word
-- said twice ("policy: policy: ...") is said once.
local function one_prefix(msg)
  msg = tostring(msg):gsub("^exec: ", "")
  local prev
  repeat prev = msg; msg = msg:gsub("^(%w+): %1: ", "%1: ") until msg == prev
  return msg
end
M.one_prefix = one_prefix

--- exit_status(result) -> the command's exit status for a result.
function M.exit_status(res)
  if res.cause == "deadline" then return 124 end
  if res.exit_code and (res.cause == "ok" or res.cause == "exit") then return res.exit_code end
  if res.signal then return 128 + (SIGNALS[res.signal] or 0) end
  return res.exit_code or 125
end

-- The command line -> cmd {opts, env, as_json, stream, stdin, no_tty,
-- review}, or nil and the exit status (--help: 0; a usage error: 125).
local function parse(args)
  local cmd = { opts = {}, env = {}, as_json = false, stream = false, stdin = "-", no_tty = false }
  local opts, env = cmd.opts, cmd.env
  local i = 1
  local function value(flag)
    i = i + 1
    if args[i] == nil then error({ usage = flag .. " needs a value" }) end
    return args[i]
  end
  local ok, perr = pcall(function()
    while i <= #args do
      local a = args[i]
      if a == "--" then i = i + 1 break
      elseif a == "--help" or a == "-h" then error({ help = true })
      elseif a == "--policy" then opts.policy = value(a)
      elseif a == "--workspace" then opts.workspace = value(a)
      elseif a == "--rootfs" then opts.rootfs = value(a)
      elseif a == "--timeout" then
        opts.timeout = value(a)
        if opts.timeout:match("^%d+$") then
          error({ usage = "--timeout " .. opts.timeout .. " needs a unit: " .. opts.timeout .. "s (seconds), " ..
            opts.timeout .. "ms, " .. opts.timeout .. "m" })
        end
      elseif a == "--capture" then opts.capture = value(a)
      elseif a == "--stdin" then cmd.stdin = value(a)
      elseif a == "--env" then
        local v = value(a)
        local k, x = v:match("^([^=]+)=(.*)$")
        if not k then error({ usage = "--env takes NAME=VALUE, got '" .. v .. "'" }) end
        env[k] = x
      elseif a == "--ceiling" then
        local cok, cerr = require("airlock.cli.main").set_ceilings { value(a) }
        if not cok then error({ usage = "--ceiling: " .. cerr }) end
      elseif a == "--ledger" then opts.ledger = value(a)
      elseif a == "--durability" then opts.durability = value(a)
      elseif a == "--learn" then opts.learn = value(a)
      elseif a == "--observe" then opts.observe = true
      elseif a == "--json" then cmd.as_json = true
      elseif a == "--review" then cmd.review = true
      elseif a == "--no-tty" then cmd.no_tty = true
      elseif a == "--stream" then cmd.stream = true
      elseif a:sub(1, 2) == "--" then error({ usage = "unknown option " .. a })
      else break end   -- the program, without a "--" before it
      i = i + 1
    end
  end)
  if not ok then
    if type(perr) == "table" and perr.help then io.stdout:write(usage.command("exec")) return nil, 0 end
    if type(perr) == "table" then return nil, usage_error(perr.usage, args) end
    error(perr, 0)
  end
  local argv = {}
  for k = i, #args do argv[#argv + 1] = args[k] end
  if #argv == 0 then return nil, usage_error("no program given", args) end
  opts.argv = argv
  if next(env) then opts.env = env end
  -- The caller's PATH finds the program, as a shell would (unless --env sets one).
  if not env.PATH and os.getenv("PATH") then
    opts.env = opts.env or {}
    opts.env.PATH = os.getenv("PATH")
  end
  return cmd
end

-- --review: with tool.overlay, the change set the policy would apply is shown
-- on stderr and applied only on "y" read from our stdin, so the program gets
-- none of it (/dev/null unless --stdin FILE).
local function reviewer(cmd)
  if cmd.stdin == "-" then cmd.stdin = "none" end
  cmd.opts.review = function(changes, ctx)
    io.stderr:write(string.format("airlock exec: the program exited with %s; its changes to %s:\n",
      ctx.exit_code and tostring(ctx.exit_code) or tostring(ctx.cause), ctx.workspace))
    for _, l in ipairs(overlay.status(changes)) do io.stderr:write("  ", l, "\n") end
    io.stderr:write("apply them? [y/N] ")
    io.stderr:flush()
    local answer = io.stdin:read("l")
    local yes = answer ~= nil and (answer:lower() == "y" or answer:lower() == "yes")
    if not yes then
      io.stderr:write(answer == nil and "\n" or "", string.format("airlock exec: not applied: %s left as it " ..
        "was (%d change%s discarded)\n", ctx.workspace, #changes, #changes == 1 and "" or "s"))
    end
    return yes
  end
end

-- Where the program's stdin, stdout and stderr go. Captured when asked
-- (--json, --capture) or when secrets must be redacted; otherwise the program
-- writes to our own. On a terminal (stdin and stdout both) it gets a terminal
-- of its own, relayed to ours: job control, /dev/tty and full-screen programs
-- work, and ours stays ours; --no-tty passes our descriptors as they are.
-- -> nil, or a usage error's exit status.
local function plumb(cmd, args)
  local opts, stdin = cmd.opts, cmd.stdin
  if stdin == "-" then opts.stdin_inherit = true
  elseif stdin ~= "none" then opts.stdin_file = stdin end
  local pol_ok, pol = pcall(exec.resolve_policy, opts.policy)
  local secrets_declared = pol_ok and pol and pol.tool and pol.tool.secrets and next(pol.tool.secrets) ~= nil
  if cmd.review and pol_ok and pol and not (pol.tool and pol.tool.overlay) then
    return usage_error("--review needs a policy with tool.overlay (the bind mode writes the workspace as the " ..
      "program runs: there is nothing to review)", args)
  end
  cmd.capture = cmd.as_json or opts.capture ~= nil or secrets_declared
  -- Only --json shows the policy's digest, and a ledger records it anyway.
  if not cmd.as_json then opts.digest = false end
  if not cmd.capture and not cmd.no_tty and stdin == "-" and core.isatty(0) and core.isatty(1) then
    opts.terminal, opts.stdin_inherit = true, nil
  elseif not cmd.capture then
    opts.output = "inherit"
  end
  if cmd.capture and cmd.stream and not cmd.as_json then
    opts.stream = function(which, line, complete)
      local out = which == "stdout" and io.stdout or io.stderr
      out:write(line, complete and "\n" or "")
      out:flush()
    end
  end
end

-- airlock could not run it: one line (or the JSON object). -> exit status.
local function refused_start(cmd, err, code, status)
  local msg = one_prefix(err)
  if code and code ~= "exec" and msg:sub(1, #code + 2) ~= code .. ": " then msg = code .. ": " .. msg end
  if cmd.as_json then
    io.stdout:write(json.encode { ok = false, cause = code or "error", message = tostring(err) }, "\n")
  else
    io.stderr:write("airlock exec: ", msg, "\n")
  end
  return status or 125
end

-- What airlock says on stderr after the program: a copy passed over on PATH,
-- a capture cut, an end airlock made, the refusals with the field that would
-- allow each, and the calls the policy refused when the program failed.
local function report(res)
  if res.path_passed then io.stderr:write("airlock exec: ", res.path_passed, "\n") end
  if res.stdout_truncated then io.stderr:write("airlock exec: stdout cut at the capture limit\n") end
  if res.stderr_truncated then io.stderr:write("airlock exec: stderr cut at the capture limit\n") end
  -- A signal the program got from itself or its own is its business (the
  -- status says it, as a shell's would); what airlock ended is said here.
  if res.cause ~= "ok" and res.cause ~= "exit" and res.cause ~= "crash" then
    io.stderr:write("airlock exec: ", one_prefix(res.cause .. ": " .. res.message), "\n")
  elseif res.cause == "exit" and res.message:match("^the program could not be started") then
    io.stderr:write("airlock exec: ", res.message, "\n")
  end
  -- Each connection the policy refused, each bound of an overlaid workspace
  -- the run reached, and with --observe each path the program could not
  -- reach, with the field that would allow it (the program may have handled
  -- it; it is said anyway, since a program seldom says why a connection or a
  -- write failed, and a path outside its view is only a missing file to it).
  local shown = 0
  for _, v in ipairs(res.violations or {}) do
    if v.kind == "network" or v.kind == "path" or tostring(v.rule):match("^tool%.overlay%.") then
      shown = shown + 1
      if shown <= 5 then io.stderr:write("airlock exec: ", violations.line(v), "\n") end
    end
  end
  if shown > 5 then io.stderr:write(string.format("airlock exec: and %d more refusals (--json lists them)\n", shown - 5)) end
  -- A committed set whose contents could not be kept in the session was not applied.
  if res.overlay and res.overlay.keep_error then
    io.stderr:write("airlock exec: not applied: ", tostring(res.overlay.keep_error), "\n")
  end
  -- Refused calls a program handled are its business; when it failed, they may be why.
  if res.refused and M.exit_status(res) ~= 0 then
    local parts = {}
    for _, r in ipairs(res.refused) do
      parts[#parts + 1] = string.format("%s (%s%s)", r.syscall, r.errno, r.count > 1 and (", " .. r.count .. "x") or "")
    end
    io.stderr:write("airlock exec: the policy refused ", table.concat(parts, ", "),
      res.refused_total > #res.refused and string.format(" and %d more", res.refused_total - #res.refused) or "",
      " (tool.confine.seccomp)\n")
  end
end

function M.main(args)
  local cmd, code0 = parse(args)
  if not cmd then return code0 end
  local opts = cmd.opts
  if opts.learn then return require("airlock.learn.cli").main(opts, args) end
  local fresh, taken = ledger.fresh(opts.ledger)
  if not fresh then
    if cmd.as_json then io.stdout:write(json.encode { ok = false, cause = "ledger", message = taken }, "\n")
    else io.stderr:write("airlock exec: ", taken, "\n") end
    return 125
  end
  if cmd.review then reviewer(cmd) end
  local perr = plumb(cmd, args)
  if perr then return perr end
  local res, err, code, status
  local ok, xerr = pcall(function() res, err, code, status = airlock.exec(opts) end)
  if not ok then
    io.stderr:write("airlock exec: ", one_prefix((tostring(xerr):gsub("^[^:]*:%d+: ", ""))), "\n")
    return 125
  end
  if not res then return refused_start(cmd, err, code, status) end
  if cmd.as_json then
    io.stdout:write(json.encode(res), "\n")
  elseif cmd.capture and not cmd.stream then
    io.stdout:write(res.stdout)
    io.stderr:write(res.stderr)
  end
  if not cmd.as_json then report(res) end
  io.stdout:flush()
  local st = M.exit_status(res)
  if (res.stdout_truncated or res.stderr_truncated) and st == 0 then st = 1 end
  return st
end

return M
