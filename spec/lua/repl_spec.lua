-- repl_spec.lua -- `airlock repl` driven through a real pseudo-terminal like a
-- person at a keyboard: tmux when it is installed, else a small python3 pty
-- driver. Each case types lines (waiting for the next prompt as a person
-- would), presses Ctrl-C or Ctrl-D, then checks what the screen shows.
local H = require "helper"
local dk = require "dkjson"

local AIRLOCK = H.bin .. "/airlock"

local function have(cmd)
  local p = io.popen("command -v " .. cmd .. " 2>/dev/null")
  local out = p:read("a")
  p:close()
  return out:match("%S") ~= nil
end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  p:close()
  return out
end

local function sleep(s) os.execute("sleep " .. s) end

local write = H.write

-- The environment the REPL runs with: a fresh data dir, and whatever the build
-- under test needs (the sanitizer pass preloads ASan and picks the worker).
local function repl_env(data)
  local env = { "XDG_DATA_HOME=" .. data, "HOME=" .. data, "TERM=xterm" }
  for _, k in ipairs { "LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "AIRLOCK_WORKER", "AIRLOCK_POLICY", "PATH" } do
    local v = os.getenv(k)
    if v then env[#env + 1] = k .. "=" .. v end
  end
  return env
end

local function prompts(text)
  local n = 0
  for _ in text:gmatch("airlock> ") do n = n + 1 end
  for _ in text:gmatch("      >> ") do n = n + 1 end
  return n
end

-- Steps: {"line", text} types text and Enter, then waits for the next prompt;
-- {"start", text} types text and Enter without waiting; {"key", "C-c"|"C-d"};
-- {"prompt"} waits for the next prompt; {"wait", text} waits until text is on
-- the screen; {"sleep", seconds}.
-- Returns the transcript (what the screen showed, scrollback included).

local function drive_tmux(steps, data)
  local sock = "airlock-spec-" .. H.pid()
  -- tmux itself runs without the sanitizer pass's LD_PRELOAD (the REPL gets it
  -- through repl_env).
  local T = "env -u LD_PRELOAD tmux -L " .. sock .. " "
  local cmd = "env " .. table.concat((function()
    local t = {}
    for _, kv in ipairs(repl_env(data)) do t[#t + 1] = q(kv) end
    return t
  end)(), " ") .. " " .. q(AIRLOCK) .. " repl; echo '[exited]'; sleep 30"
  sh(T .. "-f /dev/null new-session -d -s repl -x 160 -y 50 " .. q(cmd))
  local function screen() return sh(T .. "capture-pane -p -J -t repl -S - -E -") end
  -- Waits until the screen shows what pred looks for (past H.GUARD_S, a
  -- hang: the transcript then shows where it stopped).
  local function wait_for(pred, seconds)
    local t0 = os.time()
    while os.time() - t0 <= (seconds or H.GUARD_S) do
      local s = screen()
      if pred(s) then return s end
      sleep(0.05)
    end
    return screen()
  end
  local seen = prompts(wait_for(function(s) return prompts(s) >= 1 end))
  local function next_prompt()
    local s = wait_for(function(s) return prompts(s) > seen end)
    seen = prompts(s)
  end
  for _, st in ipairs(steps) do
    local kind, arg = st[1], st[2]
    if kind == "line" or kind == "start" then
      sh(T .. "send-keys -t repl -l " .. q(arg))
      sh(T .. "send-keys -t repl Enter")
      if kind == "line" then next_prompt() end
    elseif kind == "key" then
      sh(T .. "send-keys -t repl " .. arg)
      if arg == "C-d" then wait_for(function(s) return s:find("[exited]", 1, true) end) end
    elseif kind == "prompt" then
      next_prompt()
    elseif kind == "wait" then
      wait_for(function(s) return s:find(arg, 1, true) end)
    elseif kind == "sleep" then
      sleep(arg)
    end
  end
  local out = screen()
  sh(T .. "kill-server")
  return out
end

local PY = [=[
import json, os, pty, select, sys, time
steps, argv, env = json.load(open(sys.argv[1]))
GUARD = float(sys.argv[2])   # past it a wait is a hang, never a measure
pid, fd = pty.fork()
if pid == 0:
    os.execve(argv[0], argv, dict(e.split("=", 1) for e in env))
out = b""
def pump(t):
    global out
    end = time.time() + t
    while True:
        left = end - time.time()
        if left <= 0: return
        r, _, _ = select.select([fd], [], [], left)
        if not r: return
        try: data = os.read(fd, 65536)
        except OSError: return
        if not data: return
        out += data
def prompts():
    s = out.decode("utf-8", "replace")
    return s.count("airlock> ") + s.count("      >> ")
def wait_prompt(seen):
    end = time.time() + GUARD
    while prompts() <= seen and time.time() < end: pump(0.05)
seen = -1
wait_prompt(0); seen = prompts()
keys = {"C-c": b"\x03", "C-d": b"\x04", "Enter": b"\r"}
for st in steps:
    kind = st[0]
    if kind in ("line", "start"):
        os.write(fd, st[1].encode() + b"\r")
        if kind == "line": wait_prompt(seen); seen = prompts()
        else: pump(0.05)
    elif kind == "key":
        os.write(fd, keys[st[1]])
        pump(GUARD if st[1] == "C-d" else 0.05)   # C-d: until the REPL has exited (EOF)
    elif kind == "prompt":
        wait_prompt(seen); seen = prompts()
    elif kind == "wait":
        end = time.time() + GUARD
        while st[1] not in out.decode("utf-8", "replace") and time.time() < end: pump(0.05)
    elif kind == "sleep":
        pump(st[1])
pump(0.3)
sys.stdout.write(out.decode("utf-8", "replace").replace("\r", ""))
]=]

local function drive_python(steps, data)
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. q(dir))
  write(dir .. "/drive.py", PY)
  write(dir .. "/steps.json", dk.encode { steps, { AIRLOCK, "repl" }, repl_env(data) })
  local out = sh("env -u LD_PRELOAD python3 " .. q(dir .. "/drive.py") .. " " .. q(dir .. "/steps.json") .. " " .. H.GUARD_S)
  os.execute("rm -rf " .. q(dir))
  -- Drop terminal escapes so the transcript reads like the screen.
  return (out:gsub("\27%[[%d;?]*[%a]", ""):gsub("\27[%(%)][%w]", ""))
end

-- AIRLOCK_REPL_PTY=python tries the fallback where tmux is installed.
local drive = (have("tmux") and os.getenv("AIRLOCK_REPL_PTY") ~= "python") and drive_tmux or drive_python

local function session(steps)
  local data = os.tmpname()
  os.remove(data)
  os.execute("mkdir -p " .. q(data))
  local out = drive(steps, data)
  return out, data
end

local function cleanup(data) os.execute("rm -rf " .. q(data)) end

describe("airlock repl at a terminal", function()
  it("takes a function defined over several lines, with a continuation prompt", function()
    local out, data = session {
      { "line", "function sq(n)" }, { "line", "  return n * n" }, { "line", "end" },
      { "line", "sq(7) + 1" }, { "key", "C-d" } }
    cleanup(data)
    assert.matches("      >>   return n %* n", out)
    assert.matches("      >> end\n", out)
    assert.matches("airlock> sq%(7%) %+ 1\n50\n", out)
  end)

  it("pretty-prints a table: indented, keys sorted, cycles marked", function()
    local out, data = session {
      { "line", "t = {zeta = 1, alpha = {2, 3}, mid = 'x'}; t.self = t" },
      { "line", "t" }, { "key", "C-d" } }
    cleanup(data)
    assert.matches('airlock> t\n{\n  alpha = {\n    2,\n    3,\n  },\n  mid = "x",\n  self = <cycle>,\n  zeta = 1,\n}\n', out)
  end)

  it(":run of a guest file prints cause ok and the value", function()
    local g = os.tmpname() .. ".lua"
    write(g, "print('from the guest') return 6 * 7")
    local out, data = session { { "line", ":run " .. g }, { "key", "C-d" } }
    cleanup(data)
    os.remove(g)
    assert.matches("from the guest\n", out)
    assert.matches("cause ok  value 42  wall [%d.]+ ms  effects %d+", out)
  end)

  it("Ctrl-C cancels a guest that never ends, and the REPL carries on", function()
    -- The guest waits on an effect nobody answers, under a deadline far past
    -- this test: only Ctrl-C ends it. (A spinning guest would race its own
    -- 1 s CPU limit, which untrusted locks, against the keystroke.)
    local pol = os.tmpname() .. ".lua"
    write(pol, 'local airlock = require "airlock"\nreturn airlock.policy.extend("untrusted", { name = "waits", ' ..
      'limits = { deadline_ms = "10m" }, effects = { ["wait.forever"] = function() return airlock.defer() end } })\n')
    local out, data = session {
      { "line", ":policy " .. pol },
      { "start", "run('print(\"wait\" .. \"ing\") host.call(\"wait.forever\", {})')" }, { "wait", "waiting" },
      { "key", "C-c" }, { "prompt" },
      { "line", "40 + 2" }, { "key", "C-d" } }
    cleanup(data)
    os.remove(pol)
    assert.matches("cause cancelled", out)
    assert.matches("airlock> 40 %+ 2\n42\n", out)
    assert.not_matches("cause cpu", out)
  end)

  it("Ctrl-C abandons a half-typed chunk", function()
    local out, data = session {
      { "line", "function broken(" }, { "key", "C-c" }, { "prompt" },
      { "line", "'still here'" }, { "key", "C-d" } }
    cleanup(data)
    assert.matches('airlock> \'still here\'\n"still here"\n', out)
  end)

  it(":help lists the commands", function()
    local out, data = session { { "line", ":help" }, { "key", "C-d" } }
    cleanup(data)
    for _, c in ipairs { ":help", ":policy NAME", ":run FILE", ":probe", ":ledger DIR", "Ctrl%-C", "Ctrl%-D" } do
      assert.matches(c, out)
    end
  end)

  it("writes what was typed to the history file in the user's data dir", function()
    local out, data = session { { "line", "1 + 1" }, { "line", ":policy untrusted" }, { "key", "C-d" } }
    local hist = H.slurp(data .. "/airlock/history")
    cleanup(data)
    assert.matches("\n2\n", out)
    assert.is_not_nil(hist, "no history file")
    assert.matches("1 %+ 1\n", hist)
    assert.matches(":policy untrusted", hist)
  end)
end)
