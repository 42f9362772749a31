-- airlock.learn.guest -- learn mode for guests (`airlock run --learn OUT
-- GUEST.lua`): run the guest once under its base policy (default untrusted)
-- with module.load served from the guest's own directory and every call
-- recorded (a ledger in a temporary directory, removed after); write the
-- draft that covers what it used; run it again under the draft and say what
-- differs.
--
-- The draft holds:
--   effects     module.load = handlers.modules(the guest's directory) when it
--               required a module found there; each effect it called that the
--               base policy does not grant, as a commented-out line (no draft
--               can write its handler), with how often
--   limits      from what the run used, with headroom: cpu 4x the worker's
--               user + system CPU (at least 250 ms), memory 2x the worker's
--               peak resident size (at least 16M: an upper bound of the Lua
--               heap, which the worker does not report), output 2x the bytes
--               printed (at least 4K). Instructions are not drafted: the run
--               does not report how many it used (limits.instructions stays
--               the base policy's).
local airlock = require "airlock"
local core = require "airlock.core"
local util = require "airlock.util"
local policy = require "airlock.policy"
local handlers = require "airlock.handlers"
local ledger = require "airlock.ledger"
local json = require "airlock.json"

local M = {}

-- Runs the guest under pol with a ledger; -> result, calls {effect -> {effect, n,
-- denied}}, order {effects in first-call order}, or nil, message.
local function observed_run(source, name, pol, input)
  local dir = util.tmpdir("airlock-learn")
  if not dir then return nil, "learn: could not make a temporary directory (mktemp -d)" end
  local b <close> = airlock.broker()
  local run, err = b:start { guest = source, name = name, policy = pol, input = input, ledger = dir .. "/l" }
  if not run then
    os.execute("rm -rf " .. util.shell_quote(dir))
    return nil, "learn: the guest did not start: " .. tostring(err)
  end
  local res = run:wait(b)
  local list, calls = ledger.calls(dir .. "/l")
  local order = {}
  for i, c in ipairs(list) do order[i] = c.effect end
  os.execute("rm -rf " .. util.shell_quote(dir))
  return res, calls, order
end

local function size_text(bytes)
  if bytes % (1024 * 1024) == 0 then return (bytes // (1024 * 1024)) .. "M" end
  return (bytes + 1023) // 1024 .. "K"
end

--- draft_text(used, about) -> the policy file's text. used: {cpu_ms, rss_kb,
--- output, modules_dir, modules = {names}, denied = {{effect, n}}}.
function M.draft_text(used, about)
  local o = {}
  local function w(...) o[#o + 1] = table.concat({ ... }) end
  w("-- A draft policy from one learning run (airlock run --learn) of ", about.name, ".")
  w("-- Limits are what the run used, with headroom; instructions are not drafted (not reported).")
  w("local policy = require \"airlock.policy\"")
  w("local handlers = require \"airlock.handlers\"")
  w("")
  w("return policy.extend(", string.format("%q", about.base), ", {")
  w("  name = \"draft\",")
  w("  limits = {")
  w(string.format("    cpu = \"%dms\",   -- why: the worker used %d ms of CPU (x4)", used.cpu_limit, used.cpu_ms))
  w(string.format("    memory = \"%s\",   -- why: the worker's peak resident size was %d KiB (x2; the heap is less)",
    size_text(used.memory_limit), used.rss_kb))
  w(string.format("    output = \"%s\",   -- why: the guest printed %d bytes (x2)", size_text(used.output_limit),
    used.output))
  w("  },")
  w("  effects = {")
  if used.modules_dir then
    w(string.format("    [\"module.load\"] = handlers.modules(%q),   -- why: require of %s", used.modules_dir,
      table.concat(used.modules, ", ")))
  end
  for _, d in ipairs(used.denied) do
    w(string.format("    -- NOT GRANTED: [%q] = <a handler>,   -- the guest called host.%s %s; the base " ..
      "policy does not grant it", d.effect, d.effect, d.n == 1 and "once" or (d.n .. " times")))
  end
  w("  },")
  w("})")
  return table.concat(o, "\n") .. "\n"
end

--- learn{guest = path, out = path, policy = base (default "untrusted"), input}
---   -> report {draft, learned, proved, differences, runs, learned_ok}, or nil, message.
function M.learn(opts)
  local f = io.open(opts.guest, "rb")
  if not f then return nil, "learn: cannot read the guest " .. tostring(opts.guest) end
  local source = f:read("a")
  f:close()
  local base = opts.policy or "untrusted"
  local gdir = core.fs_realpath((opts.guest:match("^(.*)/[^/]*$")) or ".") or "."
  local name = opts.guest:match("([^/]+)$") or opts.guest
  local serve = handlers.modules(gdir)
  local required, req_order = {}, {}
  local learning = policy.extend(base, { name = "learn", effects = {
    ["module.load"] = function(args, ctx)
      if type(args) == "table" and type(args.name) == "string" and not required[args.name] then
        required[args.name] = true
        req_order[#req_order + 1] = args.name
      end
      return serve(args, ctx)
    end,
  } })
  local res, calls, order = observed_run(source, name, learning, opts.input)
  if not res then return nil, calls end
  local u = res.usage or {}
  local cpu_ms = math.floor((u.user_ms or 0) + (u.sys_ms or 0) + 0.5)
  local used = {
    cpu_ms = cpu_ms, cpu_limit = math.max(250, 4 * cpu_ms),
    rss_kb = u.max_rss_kb or 0, memory_limit = math.max(16 << 20, 2 * (u.max_rss_kb or 0) * 1024),
    output = #(res.log or ""), output_limit = math.max(4096, 2 * #(res.log or "")),
    modules = req_order, modules_dir = #req_order > 0 and gdir or nil, denied = {},
  }
  used.memory_limit = ((used.memory_limit + (1 << 20) - 1) >> 20) << 20   -- whole MiB
  for _, e in ipairs(order) do
    if calls[e].denied > 0 and e ~= "module.load" then used.denied[#used.denied + 1] = { effect = e, n = calls[e].n } end
  end
  local out, ferr = io.open(opts.out, "w")
  if not out then return nil, "learn: cannot write the draft: " .. tostring(ferr) end
  out:write(M.draft_text(used, { name = name, base = base }))
  out:close()
  local report = { draft = opts.out, learned = res, used = used, differences = {} }
  report.learned_ok = res.ok
  local proved, pcalls = observed_run(source, name, opts.out, opts.input)
  if not proved then
    report.differences[1] = "the draft did not start: " .. tostring(pcalls)
    report.runs = false
    return report
  end
  report.proved = proved
  local d = report.differences
  if proved.cause ~= res.cause then
    d[#d + 1] = string.format("the learning run ended %s, the proof run %s (%s)", res.cause, proved.cause,
      tostring(proved.message))
  end
  if proved.cause == res.cause and json.encode({ v = proved.value }) ~= json.encode({ v = res.value }) then
    d[#d + 1] = "the proof run returned another value"
  end
  for e, c in pairs(pcalls) do
    local was = calls[e]
    if c.denied > 0 and not (was and was.denied > 0) then d[#d + 1] = "refused under the draft: host." .. e end
  end
  report.runs = #d == 0
  return report
end

return M
