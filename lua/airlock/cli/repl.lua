-- airlock.cli.repl -- interactive Lua with the airlock module loaded.
-- Expressions print their values (tables pretty-printed, run results
-- summarised); an incomplete chunk continues on the next line. Commands start
-- with ':' (:help lists them). At a terminal: readline editing, a history file
-- in the user's data dir, and Ctrl-C cancels the running guest (or abandons the
-- line being typed) without leaving; Ctrl-D leaves.
local airlock = require "airlock"
local core = require "airlock.core"
local util = require "airlock.util"
local probe = require "airlock.probe"
local ledger = require "airlock.ledger"

local M = {}

local MAX_ITEMS = 40     -- entries shown per table before "... N more"
local MAX_DEPTH = 6

local function is_ident(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil
end

local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta == "number" and tb == "number" then return a < b end
  if ta ~= tb then return ta == "number" end      -- the array part first
  return tostring(a) < tostring(b)
end

-- pretty(v) -> text: strings quoted, tables indented with sorted keys,
-- cycles shown as <cycle>, long tables cut with "... N more".
local function pretty(v, indent, seen, depth)
  indent, seen, depth = indent or "", seen or {}, depth or 0
  if type(v) == "string" then return util.quote(v) end
  if type(v) ~= "table" then return tostring(v) end
  if seen[v] then return "<cycle>" end
  if depth >= MAX_DEPTH then return "{...}" end
  seen[v] = true
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, key_order)
  if #keys == 0 then seen[v] = nil return "{}" end
  local lines = { "{" }
  local inner = indent .. "  "
  for i, k in ipairs(keys) do
    if i > MAX_ITEMS then
      lines[#lines + 1] = string.format("%s... %d more", inner, #keys - MAX_ITEMS)
      break
    end
    local val = pretty(v[k], inner, seen, depth + 1)
    if k == i then     -- the sequence part: values alone
      lines[#lines + 1] = inner .. val .. ","
    else
      local ks = is_ident(k) and k or "[" .. pretty(k, inner, seen, depth + 1) .. "]"
      lines[#lines + 1] = inner .. ks .. " = " .. val .. ","
    end
  end
  lines[#lines + 1] = indent .. "}"
  seen[v] = nil     -- a table seen twice on different paths is not a cycle
  return table.concat(lines, "\n")
end
M.pretty = pretty

local function one_line(v)
  local s = type(v) == "table" and pretty(v):gsub("\n%s*", " "):gsub(", }", " }") or pretty(v)
  if #s > 200 then s = s:sub(1, 197) .. "..." end
  return s
end

-- A run's result (airlock.run, run:wait): a table with cause and usage.
local function is_result(v)
  return type(v) == "table" and type(v.cause) == "string" and type(v.usage) == "table"
end

-- summary(res) -> "cause ok  value 42  wall 1.23 ms  effects 1" (and the message when it failed)
local function summary(res)
  local u = res.usage or {}
  local parts = { "cause " .. res.cause }
  if res.ok or res.value ~= nil then parts[#parts + 1] = "value " .. one_line(res.value) end
  if not res.ok and res.message and res.message ~= "" then
    parts[#parts + 1] = "message " .. one_line(res.message)
  end
  parts[#parts + 1] = string.format("wall %.2f ms", tonumber(u.wall_ms) or 0)
  parts[#parts + 1] = "effects " .. tostring(u.effects or 0)
  if res.policy or res.policy_base then
    parts[#parts + 1] = "policy " .. tostring(res.policy or "(unnamed)") ..
      (res.policy_base and " (from " .. tostring(res.policy_base) .. ")" or "")
  end
  return table.concat(parts, "  ")
end
M.summary = summary

local function show(v)
  if is_result(v) then return summary(v) end
  return pretty(v)
end
M.show = show

-- ------------------------------------------------------------ interruption

-- While a guest runs, Ctrl-C cancels it: run:wait polls the flag that the
-- command's SIGINT handler sets (core.interrupted, in lua/main.c).
local waiting = 0
local function interruptible_wait(run, b)
  waiting = waiting + 1
  local ok, res, err = pcall(function()
    while run:live() do
      local _, serr = b:step(100)
      if serr then return nil, serr end
      if core.interrupted and core.interrupted() then
        run:cancel("interrupted (Ctrl-C)")
      end
    end
    return run:result()
  end)
  waiting = waiting - 1
  if not ok then error(res, 0) end
  if res == nil then return nil, err end
  return res
end

-- Host Lua typed at the prompt that never ends: a count hook stops it on Ctrl-C
-- (except inside a run's wait, which cancels the guest instead).
local function interrupt_hook()
  if waiting == 0 and core.interrupted(true) then
    core.interrupted()
    error("interrupted", 2)
  end
end

-- ------------------------------------------------------------ input

local interactive = core.readline ~= nil

-- readline at a terminal; plain lines without prompts from a pipe.
-- Returns line, or nil at the end of input, or nil, "interrupted".
local function read(prompt)
  if interactive then return core.readline(prompt) end
  return io.stdin:read("l")
end

local function data_dir()
  local xdg = os.getenv("XDG_DATA_HOME")
  if xdg and xdg ~= "" then return xdg .. "/airlock" end
  local home = os.getenv("HOME")
  if home and home ~= "" then return home .. "/.local/share/airlock" end
  return nil
end

-- The history file's path, its directory made if missing (nil when there is no home).
function M.history_path()
  local dir = data_dir()
  if not dir then return nil end
  os.execute("mkdir -p " .. util.shell_quote(dir) .. " 2>/dev/null")
  return dir .. "/history"
end

-- ------------------------------------------------------------ commands

local HELP = [[
commands:
  :help          this text
  :policy NAME   the policy for :run and run(src) (a stock name or a file; now %s)
  :run FILE      run a guest file under the current policy and summarise the result
  :probe         what this kernel can enforce (airlock probe)
  :ledger DIR    verify a session's hash chain and show its last records
  Ctrl-C         cancel the running guest (or abandon the line); Ctrl-D leaves
Lua: any expression prints its value; airlock is loaded; run(src [, input]) runs
source under the current policy and returns its result (summarised: show(res)
prints every field).]]

local function new_state()
  return { policy = os.getenv("AIRLOCK_POLICY") or "untrusted" }
end

local function run_guest(state, guest, input, name)
  local b <close> = airlock.broker()
  local run, err, code = b:start { guest = guest, policy = state.policy, input = input, name = name,
                                   on_log = function(text) io.stdout:write(text) io.stdout:flush() end }
  if code == "confinement" then
    return { ok = false, cause = "confinement", message = err, usage = {}, policy = state.policy }
  end
  if not run then return nil, err end
  local res, werr = run:wait(b)
  if res == nil then return nil, werr end
  return res
end

local commands = {}

function commands.help(state)
  print(string.format(HELP, state.policy))
end

function commands.policy(state, arg)
  if arg == "" then print("policy: " .. state.policy) return end
  local p, err = airlock.policy.resolve(arg, "untrusted")
  if not p then print("policy: " .. tostring(err)) return end
  state.policy = arg
  print(string.format("policy: %s (digest %s...)", arg, airlock.policy.digest(p):sub(1, 12)))
end

function commands.run(state, arg)
  if arg == "" then print("usage: :run FILE") return end
  local src, ferr = util.read_file(arg)
  if not src then print("run: cannot read " .. tostring(ferr)) return end
  local res, err = run_guest(state, src, nil, arg:match("([^/]+)$"))
  if not res then print("run: " .. tostring(err)) return end
  print(summary(res))
  return res
end

function commands.probe()
  local rep = probe.report()
  io.stdout:write(probe.format(rep))
end

function commands.ledger(_, arg)
  if arg == "" then print("usage: :ledger DIR") return end
  local rep, err = ledger.verify(arg)
  if not rep then
    local msg = tostring(err)
    print(msg:match("^ledger") and msg or "ledger: " .. msg)
    return
  end
  if rep.ok then
    print(string.format("ledger %s: intact, %d records, head %s", arg, rep.records, rep.head))
  else
    print(string.format("ledger %s: damaged at seq %s: %s", arg, tostring(rep.first_bad_seq), rep.reason))
  end
  local last, keep = {}, 5
  local ok, werr = pcall(function()
    local it, reader = ledger.show(arg)
    local walked, werr2 = pcall(function()
      for line in it, reader do
        last[#last + 1] = line
        if #last > keep then table.remove(last, 1) end
      end
    end)
    reader:close()
    if not walked then error(werr2, 0) end
  end)
  if #last > 0 then print(string.format("last %d records:", #last)) end
  for _, line in ipairs(last) do print("  " .. line) end
  if not ok then print("ledger: " .. tostring(werr)) end
end

local function command(state, line)
  local name, arg = line:match("^:(%a*)%s*(.-)%s*$")
  local f = commands[name or ""]
  if not f then print("unknown command '" .. line .. "' (:help lists them)") return end
  local ok, err = xpcall(f, debug.traceback, state, arg or "")
  if not ok then print(err) end
end

-- ------------------------------------------------------------ completion

local KEYWORDS = { "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
                   "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while" }

-- The names a value offers: a table's string keys, and those its metatable's
-- __index table offers (the methods of brokers, runs and other objects).
local function names_of(v, out, seen)
  seen = seen or {}
  if seen[v] then return out end
  seen[v] = true
  if type(v) == "table" then
    for k in next, v do if type(k) == "string" then out[k] = true end end
  end
  local mt = (type(v) == "table" or type(v) == "userdata") and getmetatable(v)
  local idx = type(mt) == "table" and rawget(mt, "__index")
  if type(idx) == "table" then names_of(idx, out, seen) end
  return out
end

--- complete(env, word) -> the completions of word ("airl", "airlock.po",
--- "b:st"): globals and keywords, or the fields (methods after ':') of the
--- value the part before the last '.' or ':' names. Nothing is called but
--- plain indexing through tables (no function runs).
function M.complete(env, word)
  local base, sep, part = word:match("^(.*)([.:])([%w_]*)$")
  local pool, prefix = {}, ""
  if base then
    local v = env
    for name in (base .. "."):gmatch("([%a_][%w_]*)%.") do
      if type(v) ~= "table" and type(v) ~= "userdata" then return {} end
      local ok, nv = pcall(function() return v[name] end)
      if not ok then return {} end
      v = nv
    end
    if v == nil then return {} end
    names_of(v, pool)
    prefix = base .. sep
  else
    part = word
    names_of(env, pool)
    names_of(_G, pool)
    for _, k in ipairs(KEYWORDS) do pool[k] = true end
  end
  local out = {}
  for k in pairs(pool) do
    if k:sub(1, #part) == part and k:match("^[%a_][%w_]*$") and not (k:sub(1, 2) == "__" and #part < 2) then
      out[#out + 1] = prefix .. k
    end
  end
  table.sort(out)
  return out
end

-- ------------------------------------------------------------ the loop

-- A traceback of the user's code alone: the frames of the REPL that called it
-- (from the first xpcall up) are not the user's business.
local function user_traceback(msg)
  local tb = debug.traceback(msg, 2)
  local keep = {}
  for line in tb:gmatch("[^\n]+") do
    if line:find("in function 'xpcall'", 1, true) or line:find("airlock/repl.lua", 1, true) then break end
    keep[#keep + 1] = line
  end
  if keep[#keep] == "stack traceback:" then keep[#keep] = nil end
  return table.concat(keep, "\n")
end
M.user_traceback = user_traceback

local function eval(fn)
  if core.interrupted then debug.sethook(interrupt_hook, "", 1000) end
  local res = table.pack(xpcall(fn, user_traceback))
  if core.interrupted then debug.sethook() end
  if not res[1] then
    print(res[2])
  else
    for i = 2, res.n do print(show(res[i])) end
  end
end

function M.main()
  local state = new_state()
  if core.catch_sigint then core.catch_sigint() end
  core.run_methods.wait = interruptible_wait
  local history
  if interactive then
    history = M.history_path()
    if history then
      local f = io.open(history, "a")   -- created if missing
      if f then f:close() end
      core.history_load(history)
    end
    print(airlock._VERSION .. " -- :help for commands; try: run 'return 6*7'   (Ctrl-D to leave)")
  end
  local env = setmetatable({ airlock = airlock, pretty = pretty }, { __index = _G })
  env.show = function(v) print(pretty(v)) end
  env.run = function(src, input) return run_guest(state, src, input) end
  if core.set_completer then core.set_completer(function(word) return M.complete(env, word) end) end
  while true do
    local line, rerr = read("airlock> ")
    if not line and rerr ~= "interrupted" then
      if interactive then print() end
      return 0
    end
    if line and line:match("^%s*:") then
      if interactive and core.add_history then
        core.add_history(line)
        if history then core.history_save(history) end
      end
      command(state, (line:gsub("^%s*", "")))
    elseif line and line:match("%S") then
      local chunk = line
      local fn, err = load("return " .. chunk, "=repl", "t", env)
      if not fn then fn, err = load(chunk, "=repl", "t", env) end
      local abandoned = false
      while not fn and err and err:match("<eof>$") do
        local more, merr = read("      >> ")
        if not more and merr == "interrupted" then abandoned = true break end
        if not more then   -- the end of input inside a chunk ends the REPL, as it does lua's
          print(err)
          return 0
        end
        chunk = chunk .. "\n" .. more
        fn, err = load(chunk, "=repl", "t", env)
      end
      if interactive and core.add_history then
        core.add_history((chunk:gsub("\n", " ")))
        if history then core.history_save(history) end
      end
      if abandoned then
        -- Ctrl-C in a continuation line: the chunk is dropped.
      elseif not fn then
        print(err)
      else
        eval(fn)
      end
    end
  end
end

return M
