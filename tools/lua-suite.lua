-- lua-suite.lua -- runs the official Lua 5.4 test suite (the testes/ folder of a
-- Lua release, not shipped here) file by file under plain lua5.4 and as airlock
-- guests, and compares. The lines that need io, debug, package or string.dump
-- are removed by the rules in tools/lua-suite-filters.lua, the same for both.
--
--   lua5.4 tools/lua-suite.lua DIR [FILE.lua ...]   (AIRLOCK_BUILD: default build)
--
-- Prints one line per file (lua5.4's outcome, the guest's, whether their
-- output is the same) and then each divergence; exits 0 when every file has
-- the same outcome and output under both. As a module (require), it returns
-- { run = function(dir, files) -> rows }, for spec/worker/lua_suite_spec.lua.
local build = os.getenv("AIRLOCK_BUILD") or "build"
package.cpath = build .. "/lib/?.so;" .. package.cpath
local airlock = require "airlock"
local handlers = require "airlock.handlers"

local here = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./")
local FILTERS = dofile(here .. "lua-suite-filters.lua")

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function spit(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The text of a suite file with its rules applied: a dropped line becomes an
-- empty comment, so line numbers (and so messages) stay those of the file.
-- Every rule must match at least once: a rule that no longer matches means
-- the suite changed, and is reported rather than ignored.
local function filtered(name, text)
  local rules = FILTERS.files[name] or {}
  local lines = {}
  for line in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local drop, unused = {}, {}
  for _, pat in ipairs(FILTERS.every) do
    for i, line in ipairs(lines) do if line:find(pat) then drop[i] = true end end
  end
  for _, pat in ipairs(rules.lines or {}) do
    local hit = false
    for i, line in ipairs(lines) do if line:find(pat) then drop[i], hit = true, true end end
    if not hit then unused[#unused + 1] = "line " .. pat end
  end
  for _, b in ipairs(rules.blocks or {}) do   -- { from pattern, to pattern }, inclusive
    local i, hit = 1, false
    while i <= #lines do
      local j = i
      if lines[i]:find(b[1]) then
        while j <= #lines and not lines[j]:find(b[2]) do j = j + 1 end
        if j > #lines then break end
        for k = i, j do drop[k] = true end
        hit = true
      end
      i = j + 1
    end
    if not hit then unused[#unused + 1] = "block " .. b[1] .. " .. " .. b[2] end
  end
  for _, r in ipairs(rules.replace or {}) do   -- { pattern, replacement }: the rare line that cannot go
    local hit = false
    for i, line in ipairs(lines) do
      if line:find(r[1]) then lines[i], hit = line:gsub(r[1], (r[2]:gsub("%%", "%%%%"))), true end
    end
    if not hit then unused[#unused + 1] = "replace " .. r[1] end
  end
  for i in pairs(drop) do lines[i] = "--" end
  return table.concat(lines, "\n") .. "\n", unused
end

-- Addresses and timings differ from run to run; the rest must not.
local function norm(s)
  s = s:gsub("0x%x+", "ADDR"):gsub("%d+%.%d+ msec", "T msec"):gsub("%d+%.?%d* sec", "T sec")
  for _, pat in ipairs(FILTERS.volatile) do s = s:gsub(pat, "VOLATILE") end
  return s
end

-- The policy of the suite's guests: untrusted, every layer of it, with the
-- budgets a test suite needs (some files run for seconds and allocate
-- hundreds of MiB). Raising budgets is not less confinement: no opt-out.
local POLICY = airlock.policy.extend("untrusted", {
  name = "lua-suite",
  description = "the Lua test suite as guests: untrusted's layers, a suite's budgets",
  limits = { deadline_ms = "300s", memory = "768M", instructions = 0, output = "4M", capture = "1M" },
  confine = { rlimits = { cpu = "300s" } },
})

-- One file under both: { file, lua = "ok" | message, guest = "ok" | cause: message,
-- same (output equal), out = lua5.4's, log = the guest's, unused (stale rules) }.
local function run_file(work, name, text)
  local src, unused = filtered(name, text)
  spit(work .. "/" .. name, src)
  local p = io.popen("cd " .. quote(work) .. " && TZ=UTC timeout 300 lua5.4 " .. quote(name) .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  out = out:gsub("rc=%d+\n$", "")
  local lua_msg = rc == 0 and "ok" or (out:match("lua5.4: ([^\n]*)") or ("exit " .. rc))
  if rc ~= 0 then out = out:gsub("lua5.4: .*$", "") end
  local res = airlock.run { guest = src, name = name,
    policy = airlock.policy.extend(POLICY, { effects = { ["module.load"] = handlers.modules(work) } }) }
  local guest_msg = res.cause == "ok" and "ok" or (res.cause .. ": " .. tostring(res.message))
  return { file = name, lua = lua_msg, guest = guest_msg, same = norm(out) == norm(res.log),
           out = norm(out), log = norm(res.log), unused = unused }
end

-- Runs files (default: every file FILTERS.files names, in order) of the suite
-- in dir; returns the rows, in order.
local function run(dir, files)
  if not files or #files == 0 then files = FILTERS.order end
  local work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -m 700 " .. quote(work)))
  for _, m in ipairs(FILTERS.modules) do   -- what the files require, filtered too
    local text = slurp(dir .. "/" .. m .. ".lua")
    if text then spit(work .. "/" .. m .. ".lua", (filtered(m .. ".lua", text))) end
  end
  local rows = {}
  for _, name in ipairs(files) do
    local text = slurp(dir .. "/" .. name)
    if not text then
      rows[#rows + 1] = { file = name, lua = "missing", guest = "missing", same = false, unused = {} }
    elseif FILTERS.skip[name] then
      rows[#rows + 1] = { file = name, skipped = FILTERS.skip[name], unused = {} }
    else
      rows[#rows + 1] = run_file(work, name, text)
    end
  end
  os.execute("rm -rf " .. quote(work))
  return rows
end

-- The first line where two outputs part.
local function first_difference(a, b)
  local n = 1
  local la, lb = {}, {}
  for l in (a .. "\n"):gmatch("([^\n]*)\n") do la[#la + 1] = l end
  for l in (b .. "\n"):gmatch("([^\n]*)\n") do lb[#lb + 1] = l end
  while la[n] == lb[n] and n <= math.max(#la, #lb) do n = n + 1 end
  return n, la[n] or "(end)", lb[n] or "(end)"
end

local M = { run = run, first_difference = first_difference, filtered = filtered }

if arg and arg[0] and arg[0]:match("lua%-suite%.lua$") then
  local dir = arg and arg[1]
  if not dir then
    io.stderr:write("usage: lua5.4 tools/lua-suite.lua DIR [FILE.lua ...]\n",
                    "  DIR: the testes/ folder of Lua 5.4.4 (lua-5.4.4-tests)\n")
    os.exit(2)
  end
  local files = { table.unpack(arg, 2) }
  local bad = 0
  print(string.format("%-16s %-10s %-10s %s", "file", "lua5.4", "guest", "output"))
  local rows = run(dir, files)
  for _, r in ipairs(rows) do
    if r.skipped then
      print(string.format("%-16s %-10s %-10s %s", r.file, "-", "-", "skipped: " .. r.skipped))
    else
      local agree = (r.lua == "ok") == (r.guest == "ok") and r.same
      if not agree or #r.unused > 0 then bad = bad + 1 end
      print(string.format("%-16s %-10s %-10s %s", r.file, r.lua == "ok" and "pass" or "FAIL",
                          r.guest == "ok" and "pass" or "FAIL", r.same and "same" or "DIFFERS"))
    end
  end
  for _, r in ipairs(rows) do
    if not r.skipped then
      if r.lua ~= "ok" then print(r.file .. ": lua5.4: " .. r.lua) end
      if r.guest ~= "ok" then print(r.file .. ": guest: " .. r.guest) end
      if not r.same and r.out then
        local n, a, b = first_difference(r.out, r.log)
        print(string.format("%s: output line %d: lua5.4 %q, guest %q", r.file, n, a, b))
      end
      for _, u in ipairs(r.unused) do print(r.file .. ": a filter rule matched nothing: " .. u) end
    end
  end
  os.exit(bad == 0 and 0 or 1)
end

return M
