-- airlock.cli.bench_guest -- `airlock bench guest`: how fast CPU-bound guest
-- code runs under airlock against plain lua5.4, the peer users know. Five
-- classic programs (allocation, floating point, calls, strings, integer
-- arrays) each time their own work with os.clock (CPU time, user + system)
-- and return it; the same file runs under lua5.4 and as a guest under each
-- policy, interleaved, in the same run. Reported per program and policy: the
-- median CPU seconds of each, and speed = lua5.4's time / the guest's (1 is
-- lua5.4's speed; the target under the stock policies is >= 0.9).
local airlock = require "airlock"
local json = require "airlock.json"
local bench = require "airlock.cli.bench"

local M = {}

-- Each program ends with `return os.clock() - t0`; sizes give lua5.4 about
-- 0.05 to 0.2 s of CPU on this machine class (well inside the stock budgets).
local PROGRAMS = {
  { "alloc", [[
local t0 = os.clock()
local function tree(d) if d == 0 then return {} end return { tree(d - 1), tree(d - 1) } end
local function count(t) if not t[1] then return 1 end return 1 + count(t[1]) + count(t[2]) end
local n = 0
for _ = 1, 40 do n = n + count(tree(14)) end
assert(n == 40 * (2 ^ 15 - 1))
return os.clock() - t0]] },
  { "float", [[
local t0 = os.clock()
local inside = 0
for y = 0, 399 do
  for x = 0, 399 do
    local cr, ci, zr, zi, k = x / 200 - 1.5, y / 200 - 1.0, 0.0, 0.0, 0
    while k < 100 and zr * zr + zi * zi < 4.0 do
      zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
      k = k + 1
    end
    if k == 100 then inside = inside + 1 end
  end
end
assert(inside > 0)
return os.clock() - t0]] },
  { "calls", [[
local t0 = os.clock()
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
assert(fib(31) == 1346269)
return os.clock() - t0]] },
  { "strings", [[
local t0 = os.clock()
local parts, total = {}, 0
for i = 1, 180000 do
  local s = string.format("%d:%s", i, ("ab"):rep(i % 8))
  parts[#parts + 1] = s:upper():gsub("A", "x")
  if #parts == 500 then total = total + #table.concat(parts, ","); parts = {} end
end
assert(total > 0)
return os.clock() - t0]] },
  { "arrays", [[
local t0 = os.clock()
local found = 0
for _ = 1, 6 do
  local n, sieve = 400000, {}
  for i = 2, n do sieve[i] = true end
  for i = 2, n do
    if sieve[i] then
      found = found + 1
      for j = i * i, n, i do sieve[j] = false end
    end
  end
end
assert(found == 6 * 33860)
return os.clock() - t0]] },
}

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  return s[(#s + 1) // 2]
end

-- The policies the guest runs under: the stock one as a host gets it (a CPU
-- budget for the run), with a per-turn CPU budget too, and with the exact,
-- costlier instruction count (limits.instructions) beside its CPU budget.
local function policies()
  return {
    { "untrusted", "untrusted" },
    { "untrusted+turn", airlock.policy.extend("untrusted", { name = "bench-guest-turn",
        limits = { turn_cpu = "900ms" } }) },
    -- (its CPU budget raised: counted instructions run about half as fast)
    { "instructions", airlock.policy.extend("untrusted", { name = "bench-guest-instructions",
        limits = { instructions = 1e9, cpu = "5s", deadline_ms = "60s" } }) },
  }
end

-- lua5.4 on the file: its own CPU seconds for the work, or nil, why.
local function peer(path)
  local p = io.popen(string.format("lua5.4 -e 'io.write(string.format(\"%%.6f\", dofile(%q)))' 2>&1", path))
  local out = p:read("a")
  p:close()
  local t = tonumber(out)
  if not t then return nil, "lua5.4: " .. (out:match("[^\n]*")):sub(1, 200) end
  return t
end

local function guest(src, name, pol)
  local res = airlock.run { guest = src, name = name, policy = pol }
  if not res.ok then return nil, string.format("%s: %s", res.cause, res.message) end
  return res.value
end

--- rows(rounds) -> a row per program and policy: { bench = "guest-NAME/POLICY",
--- program, policy, guest_s, lua_s, speed }, or { bench, program, policy, skipped }.
function M.rows(rounds)
  local rows = {}
  if not os.execute("command -v lua5.4 >/dev/null 2>&1") then
    return { { bench = "guest-speed", policy = "-", skipped = "lua5.4 is not installed" } }
  end
  local pols = policies()
  for _, prog in ipairs(PROGRAMS) do
    local name, src = prog[1], prog[2]
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(src)
    f:close()
    local peer_t, times, why = {}, {}, nil
    for _ = 1, rounds do
      local t, err = peer(path)
      if not t then why = err break end
      peer_t[#peer_t + 1] = t
      for _, p in ipairs(pols) do
        local g, gerr = guest(src, name, p[2])
        if not g then why = p[1] .. ": " .. gerr break end
        times[p[1]] = times[p[1]] or {}
        table.insert(times[p[1]], g)
      end
      if why then break end
    end
    os.remove(path)
    for _, p in ipairs(pols) do
      if why then
        rows[#rows + 1] = { bench = "guest-" .. name .. "/" .. p[1], program = name, policy = p[1], skipped = why }
      else
        local g, l = median(times[p[1]]), median(peer_t)
        rows[#rows + 1] = { bench = "guest-" .. name .. "/" .. p[1], program = name, policy = p[1],
                            guest_s = g, lua_s = l, speed = l / g, rounds = rounds }
      end
    end
  end
  return rows
end

function M.print_rows(rows)
  print(string.format("%-16s %-14s %10s %10s %7s", "program", "policy", "guest_s", "lua5.4_s", "speed"))
  local worst = {}
  for _, r in ipairs(rows) do
    if r.skipped then
      print(string.format("%-16s %-14s skipped: %s", r.program or r.bench, r.policy or "-", r.skipped))
    else
      print(string.format("%-16s %-14s %10.4f %10.4f %7.2f", r.program, r.policy, r.guest_s, r.lua_s, r.speed))
      worst[r.policy] = math.min(worst[r.policy] or math.huge, r.speed)
    end
  end
  local parts = {}
  for _, p in ipairs(policies()) do
    if worst[p[1]] then parts[#parts + 1] = string.format("%s %.2f", p[1], worst[p[1]]) end
  end
  if #parts > 0 then
    print("slowest program's speed against lua5.4 (1 = lua5.4; target >= 0.9): " .. table.concat(parts, ", "))
  end
end

function M.main(args)
  local as_json, quick = bench.options(args, "guest")
  if as_json == nil then return 2 end
  local rows = M.rows(quick and 1 or 5)
  if as_json then
    for _, r in ipairs(rows) do io.stdout:write(json.encode(r), "\n") end
  else
    M.print_rows(rows)
  end
  return 0
end

return M
