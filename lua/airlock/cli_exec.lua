-- airlock.cli_exec -- `airlock exec [options] -- PROGRAM [ARGS...]`: one
-- program run confined under a policy's tool authority (airlock.exec).
--
-- Output: the program's stdout and stderr go to ours (after the run, or line
-- by line with --stream), secrets redacted; when the run did not end well, one
-- line on stderr says why. --json prints the whole result as one JSON object.
-- Exit status: the program's own when it exited; 124 when the deadline ended
-- it; 128+N when a signal did (seccomp and the capture of a refused call
-- included); 125 when airlock could not start it (usage, policy, workspace,
-- confinement).
local airlock = require "airlock"
local json = require "airlock.json"

local M = {}

M.USAGE = [[
usage: airlock exec [--policy NAME|FILE] [--workspace DIR] [--timeout DURATION]
                    [--capture SIZE] [--stdin FILE|-] [--env NAME=VALUE]...
                    [--stream] [--json] [--ledger DIR [--durability MODE]]
                    -- PROGRAM [ARGS...]]]

local SIGNALS = { SIGHUP = 1, SIGINT = 2, SIGQUIT = 3, SIGILL = 4, SIGTRAP = 5, SIGABRT = 6, SIGBUS = 7,
                  SIGFPE = 8, SIGKILL = 9, SIGUSR1 = 10, SIGSEGV = 11, SIGUSR2 = 12, SIGPIPE = 13,
                  SIGALRM = 14, SIGTERM = 15, SIGXCPU = 24, SIGXFSZ = 25, SIGSYS = 31 }

local function usage_error(msg)
  io.stderr:write("airlock exec: ", msg, "\n", M.USAGE)
  return 125
end

--- exit_status(result) -> the command's exit status for a result.
function M.exit_status(res)
  if res.cause == "deadline" then return 124 end
  if res.exit_code and (res.cause == "ok" or res.cause == "exit") then return res.exit_code end
  if res.signal then return 128 + (SIGNALS[res.signal] or 0) end
  return res.exit_code or 125
end

function M.main(args)
  local opts, env = {}, {}
  local as_json, stream = false, false
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
      elseif a == "--policy" then opts.policy = value(a)
      elseif a == "--workspace" then opts.workspace = value(a)
      elseif a == "--timeout" then opts.timeout = value(a)
      elseif a == "--capture" then opts.capture = value(a)
      elseif a == "--stdin" then
        local v = value(a)
        opts.stdin_file = v == "-" and "/dev/stdin" or v
      elseif a == "--env" then
        local v = value(a)
        local k, x = v:match("^([^=]+)=(.*)$")
        if not k then error({ usage = "--env takes NAME=VALUE, got '" .. v .. "'" }) end
        env[k] = x
      elseif a == "--ledger" then opts.ledger = value(a)
      elseif a == "--durability" then opts.durability = value(a)
      elseif a == "--json" then as_json = true
      elseif a == "--stream" then stream = true
      elseif a:sub(1, 2) == "--" then error({ usage = "unknown option " .. a })
      else break end   -- the program, without a "--" before it
      i = i + 1
    end
  end)
  if not ok then
    if type(perr) == "table" then return usage_error(perr.usage) end
    error(perr, 0)
  end
  local argv = {}
  for k = i, #args do argv[#argv + 1] = args[k] end
  if #argv == 0 then return usage_error("no program given") end
  opts.argv = argv
  if next(env) then opts.env = env end
  if stream and not as_json then
    opts.stream = function(which, line)
      local out = which == "stdout" and io.stdout or io.stderr
      out:write(line, "\n")
      out:flush()
    end
  end

  local res, err, code
  ok, perr = pcall(function() res, err, code = airlock.exec(opts) end)
  if not ok then
    io.stderr:write("airlock ", tostring(perr):gsub("^[^:]*:%d+: ", ""), "\n")
    return 125
  end
  if not res then
    io.stderr:write("airlock exec: ", tostring(code or "error"), ": ", tostring(err), "\n")
    return 125
  end
  if as_json then
    io.stdout:write(json.encode(res), "\n")
  elseif not stream then
    io.stdout:write(res.stdout)
    io.stderr:write(res.stderr)
  end
  if not as_json then
    if res.stdout_truncated then io.stderr:write("airlock exec: stdout cut at the capture limit\n") end
    if res.stderr_truncated then io.stderr:write("airlock exec: stderr cut at the capture limit\n") end
    if res.cause ~= "ok" and res.cause ~= "exit" then
      io.stderr:write("airlock exec: ", res.cause, ": ", res.message, "\n")
    end
  end
  io.stdout:flush()
  return M.exit_status(res)
end

return M
