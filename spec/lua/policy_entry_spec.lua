-- policy_entry_spec.lua -- one policy rule for every entry point: each entry
-- point x each kind of policy input gives the same outcome, read from the
-- run's confinement report (or the refusal, or the warning). A bare table, from
-- a file or not, is laid over its tier's stock policy (untrusted for guests,
-- tool for programs); less confinement is refused unless the policy says
-- unconfined = true, which warns on every run and which
-- AIRLOCK_REQUIRE_CONFINEMENT=1 refuses.
local H = require "helper"
local airlock = require "airlock"
local core = require "airlock.core"

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")
local dir = H.tmpdir()
local ws = H.tmpdir()

local function file(name, text)
  local path = dir .. "/" .. name .. ".lua"
  H.write(path, text)
  return path
end

-- The inputs, per tier: how to give each (Lua value, or a file path), and
-- what every entry point must make of it: "confined" (seccomp, Landlock and
-- namespaces applied), "refused" (less confinement, no opt-out) or "warned"
-- (the opt-out: it runs, says so, and its seccomp layer is off).
local GUEST_INPUTS = {
  { "stock name", "untrusted", "confined" },
  { "policy object", function() return airlock.policy.extend("untrusted", { name = "obj" }) end, "confined" },
  { "bare table", function() return { name = "bare", limits = { deadline_ms = "2s" } } end, "confined" },
  { "file returning a bare table", file("bare", 'return { name = "bare-file", effects = {} }'), "confined" },
  { "file returning an extended policy",
    file("ext", 'return require("airlock.policy").extend("untrusted", { name = "ext" })'), "confined" },
  { "file with a bare tool section",
    file("tooly", 'return require("airlock.policy").extend("untrusted", { name = "tooly", tool = { env = {} } })'),
    "confined" },
  { "file turning seccomp off without the opt-out",
    file("loose", 'return { name = "loose", confine = { seccomp = false, require = {} } }'), "refused" },
  { "policy object with no confinement", function() return airlock.policy.new { name = "naked" } end, "refused" },
  { "file with the explicit opt-out",
    file("optout", 'return { name = "optout", unconfined = true, confine = { seccomp = false, require = {} } }'),
    "warned" },
}

local TOOL_INPUTS = {
  { "stock name", "tool", "confined" },
  { "policy object", function() return airlock.policy.extend("tool", { name = "obj" }) end, "confined" },
  { "bare table", function() return { name = "bare", tool = { limits = { capture = "2M" } } } end, "confined" },
  { "file returning a bare table", file("tbare", 'return { name = "tbare", tool = { env = { X = "1" } } }'),
    "confined" },
  { "file returning an extended policy",
    file("text", 'return require("airlock.policy").extend("tool", { name = "text" })'), "confined" },
  { "file with a bare tool section (extends untrusted)", dir .. "/tooly.lua", "refused" },
  { "file turning seccomp off without the opt-out",
    file("tloose", 'return { name = "tloose", tool = { confine = { seccomp = false } } }'), "refused" },
  { "file with the explicit opt-out",
    file("toptout", 'return { name = "toptout", unconfined = true, tool = { confine = { seccomp = false } } }'),
    "warned" },
}

local function value(input)
  local v = input[2]
  if type(v) == "function" then return v() end
  return v
end

-- The outcome from a result (or a refusal) and what went to stderr.
local function outcome(res, err, stderr)
  -- A command that could not start a run prints {ok = false, cause, message}.
  if not res or res.cause == "confinement" or (res.ok == false and res.run == nil) then
    local msg = res and res.message or tostring(err)
    if msg:match("less confinement") or msg:match("AIRLOCK_REQUIRE_CONFINEMENT") then return "refused", msg end
    return "other", msg
  end
  local c = res.confinement or {}
  local on = tostring(c.seccomp):match("^applied") and tostring(c.landlock):match("^applied")
    and tostring(c.namespaces):match("^applied")
  if on then return "confined", res.cause end
  if stderr == nil or stderr:match("WARNING: policy '[^']+' runs %a+ WITHOUT confinement") then
    return tostring(c.seccomp):match("^skipped") and "warned" or "other", tostring(c.seccomp)
  end
  return "other", "no warning: " .. tostring(stderr)
end

-- CLI runs: stdout holds the JSON result, stderr the warning.
local function cli(args)
  local errf = os.tmpname()
  local p = io.popen(AIRLOCK .. " " .. args .. " 2>" .. errf)
  local out = p:read("a")
  p:close()
  local stderr = H.read(errf)
  os.remove(errf)
  local res = require("dkjson").decode(out)
  if type(res) ~= "table" or not res.cause then return nil, stderr, stderr end
  return res, res.message, stderr
end

local GUEST_ENTRIES = {
  { "airlock.run", function(p) return airlock.run { guest = "return 1", policy = p } end },
  { "broker:start", function(p)
      local b = airlock.broker()
      local run, err = b:start { guest = "return 1", policy = p }
      if not run then b:close() return nil, err end
      local res = run:wait(b)
      b:close()
      return res
    end },
  { "broker:reload then start", function(p)
      local b = airlock.broker()
      local d, err = b:reload(p)
      if not d then b:close() return nil, err end
      local run, serr = b:start { guest = "return 1" }
      if not run then b:close() return nil, serr end
      local res = run:wait(b)
      b:close()
      return res
    end },
  { "airlock run (command)", cli = true, function(p)
      local g = dir .. "/g.lua"
      H.write(g, "return 1")
      return cli("run " .. g .. " --json --policy " .. p)
    end },
}

local TOOL_ENTRIES = {
  { "airlock.exec", function(p) return airlock.exec { argv = { "true" }, policy = p, workspace = ws } end },
  { "airlock exec (command)", cli = true, function(p)
      return cli("exec --json --workspace " .. ws .. " --policy " .. p .. " -- true")
    end },
}

local function matrix(tier, entries, inputs)
  describe(tier .. ": every entry point x every kind of policy input", function()
    for _, entry in ipairs(entries) do
      -- A command line takes names and files only, not Lua values.
      for _, input in ipairs(inputs) do if not (entry.cli and type(input[2]) == "function") then
        it(entry[1] .. " with a " .. input[1] .. " is " .. input[3], function()
          local res, err, stderr = entry[2](value(input))
          local got, why = outcome(res, err, stderr)
          assert.are.equal(input[3], got, why)
        end)
      end end
    end
  end)
end

matrix("guests", GUEST_ENTRIES, GUEST_INPUTS)
matrix("programs", TOOL_ENTRIES, TOOL_INPUTS)

describe("the opt-out", function()
  it("is refused under AIRLOCK_REQUIRE_CONFINEMENT=1 for guests and programs alike", function()
    local g = dir .. "/g.lua"
    H.write(g, "return 1")
    for _, args in ipairs { "run " .. g .. " --policy " .. dir .. "/optout.lua",
                            "exec --workspace " .. ws .. " --policy " .. dir .. "/toptout.lua -- true" } do
      local out, rc = H.sh("AIRLOCK_REQUIRE_CONFINEMENT=1 " .. AIRLOCK .. " " .. args)
      assert.are_not.equal(0, rc, out)
      assert.matches("AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it", out)
    end
  end)

  it("warns once per run, every run", function()
    local out = H.sh("for i in 1 2; do " .. AIRLOCK .. " exec --workspace " .. ws .. " --policy " ..
      dir .. "/toptout.lua -- true; done")
    local _, n = out:gsub("WARNING: policy 'toptout' runs programs WITHOUT confinement", "")
    assert.are.equal(2, n, out)
  end)

  it("the REPL's :policy takes the same rule", function()
    local out = H.sh("printf ':policy " .. dir .. "/loose.lua\\n:policy " .. dir .. "/bare.lua\\n' | " ..
      AIRLOCK .. " repl")
    assert.matches("less confinement than the stock 'untrusted'", out)
    assert.matches("policy: " .. dir:gsub("%p", "%%%0") .. "/bare.lua %(digest", out)
  end)
end)

teardown(function()
  os.execute("rm -rf " .. dir .. " " .. ws)
end)

-- A policy is resolved once per policy object: the stock base is frozen
-- once, and what a frozen policy loosens against it is kept. Neither may
-- let a later change through.
describe("resolving once", function()
  it("keeps a run's stock base as it was frozen, whatever its module table becomes", function()
    local mod = require "airlock.policies.untrusted"
    local before = airlock.policy.load("untrusted")
    local saved = mod.limits.memory
    mod.limits.memory = "1G"   -- a careless host edits the module's table
    local ok, after = pcall(airlock.policy.load, "untrusted")
    mod.limits.memory = saved
    assert.is_true(ok)
    assert.equal(before, after)
    assert.equal(before.limits.memory, after.limits.memory)
    assert.are_not.equal(1 << 30, after.limits.memory)
  end)

  it("refuses a loosening policy every time, not only the first (control: a tightening one runs)", function()
    local loose = airlock.policy.new { name = "loose-every-time", confine = { seccomp = false } }
    for _ = 1, 3 do
      local res, err = airlock.run { guest = "return 1", policy = loose }
      assert.is_nil(res)
      assert.matches("less confinement than the stock 'untrusted'", err)
    end
    local tight = airlock.policy.extend("untrusted", { name = "tight", limits = { memory = "8M" } })
    for _ = 1, 3 do
      local res = assert(airlock.run { guest = "return 1", policy = tight })
      assert.equal("ok", res.cause, res.message)
    end
  end)
end)
