-- c_embed_spec.lua -- examples/c-embed: a C-only host (no Lua in the process)
-- starts from the stock untrusted defaults (airlock_untrusted_defaults), gives
-- the guest an input and a per-turn budget, answers its one effect and prints
-- the result. Its worker is held to what `airlock run` and the Lua module give
-- a guest under untrusted, read from outside; a host that sets nothing (the
-- example's --bare) is not, which is what makes that comparison able to fail.
local airlock = require "airlock"
local json = require "dkjson"
local H = require "helper"

local C_EMBED = H.bin .. "/c-embed"

local sh = H.sh

local function c_embed(args)
  return sh("timeout " .. H.GUARD_S .. " " .. C_EMBED .. " " .. (args or ""))
end

-- A guest in a file, for --guest.
local function guest_file(source)
  local path = os.tmpname()
  H.write(path, source)
  return path
end

-- The example's `inspect` lines as {["ns user"] = "its own", ["status Seccomp:"]
-- = "2", ["limits Max open files"] = "8 8 files", ["ready seccomp"] = "applied: ..."}.
local function inspected(out)
  local t = {}
  for kind, rest in ("\n" .. out):gmatch("\ninspect (%a+) ([^\n]*)") do
    local key, value
    if kind == "limits" then
      key, value = rest:match("^(Max [%a ]-)%s%s+(.-)%s*$")
    else
      key, value = rest:match("^(%S+)%s+(.-)%s*$")
    end
    value = value:gsub("%s+", " ")
    t[kind .. " " .. key] = value
  end
  return t
end

-- The same lines for a worker of this process's own (pid), as the example
-- prints them: namespaces against ours, then what /proc shows.
local STATUS = { "Uid:", "Gid:", "NoNewPrivs:", "Seccomp:", "Cap" }
local LIMITS = { "Max cpu time", "Max file size", "Max stack size", "Max core file size", "Max processes",
                 "Max open files", "Max address space" }
local function inspect_lines(pid)
  local lines = {}
  for _, ns in ipairs { { "user", "user" }, { "pid", "pid" }, { "net", "net" }, { "ipc", "ipc" },
                        { "uts", "uts" }, { "mount", "mnt" }, { "cgroup", "cgroup" } } do
    local mine, theirs = H.readlink("/proc/self/ns/" .. ns[2]), H.readlink("/proc/" .. pid .. "/ns/" .. ns[2])
    lines[#lines + 1] = "inspect ns " .. ns[1] .. " " ..
      (not theirs and "unreadable" or mine == theirs and "shared with the host" or "its own")
  end
  for _, f in ipairs { { "status", STATUS }, { "limits", LIMITS } } do
    for line in H.read("/proc/" .. pid .. "/" .. f[1]):gmatch("[^\n]+") do
      for _, k in ipairs(f[2]) do
        if line:sub(1, #k) == k then lines[#lines + 1] = "inspect " .. f[1] .. " " .. line break end
      end
    end
  end
  return table.concat(lines, "\n")
end

-- What a guest's worker is held to under the stock untrusted policy, through
-- the Lua module: the /proc view while it waits for a deferred answer, and its
-- ready frame's report (layers the worker applies itself).
local function untrusted_reference()
  local b <close> = airlock.broker()
  local view
  -- a bare table: laid over untrusted, as every entry point does
  local run = assert(b:start { guest = [[return host.call("wait.here", {})]], policy = {
    effects = { ["wait.here"] = function(_, ctx)
      view = inspect_lines(ctx.handle:pid())
      return 1
    end } } })
  local res = run:wait(b)
  assert.equal("ok", res.cause, res.message)
  local t = inspected(view)
  for _, layer in ipairs { "mdwe", "landlock", "seccomp" } do t["ready " .. layer] = res.confinement[layer] end
  return t
end

-- The worker compiles its seccomp filter itself unless the parent hands it
-- one compiled once (the Lua module does, as airlock_init.seccomp_program
-- lets a C host do): the same allowlist, said in the report.
local function same_filter_text(text)
  return (text:gsub(" %(compiled once by the parent%)", ""))
end
local function same_filter(t)
  if t["ready seccomp"] then t["ready seccomp"] = same_filter_text(t["ready seccomp"]) end
  return t
end

-- The keys whose values differ between a and b, sorted.
local function differing(a, b)
  local keys, seen = {}, {}
  for _, t in ipairs { a, b } do
    for k in pairs(t) do
      if not seen[k] and a[k] ~= b[k] then seen[k] = true keys[#keys + 1] = k end
    end
  end
  table.sort(keys)
  return keys
end

describe("c-embed", function()
  it("answers the guest's effect and prints its result, exit 0", function()
    local out, rc = c_embed()
    assert.equal(0, rc, out)
    assert.matches("^effect add {a = 2, b = 3} %-> 5\n", out)
    assert.matches('\ncause ok, value {[^}]*"sum"=>5', out)
    assert.matches('"twice"=>10', out)
    assert.matches("\nwall [%d.]+ ms, 1 effect%(s%)\n$", out)
  end)

  it("gives the guest its input (the guest adds what the host put in the init frame)", function()
    local out, rc = c_embed("--add 40 2")
    assert.equal(0, rc, out)
    assert.matches("^effect add {a = 40, b = 2} %-> 42\n", out)
    assert.matches('\ncause ok, value {[^}]*"sum"=>42', out)
    local path = guest_file("local t = ... return t.a * 1000 + t.b")
    out, rc = c_embed("--add 7 9 --guest " .. path)
    os.remove(path)
    assert.equal(0, rc, out)
    assert.matches("^cause ok, value 7009\n", out)
  end)

  it("ends a guest past its per-turn instruction budget with cause instructions, naming the field", function()
    local path = guest_file("while true do end")
    local out, rc = c_embed("--guest " .. path)
    os.remove(path)
    assert.equal(1, rc, out)
    assert.matches("\ncause instructions, value none, turn instruction budget of 5000000 exhausted " ..
      "%(limits%.turn_instructions", "\n" .. out)
  end)

  it("ends a guest past its per-turn CPU budget with cause cpu, naming the field", function()
    -- Few VM instructions, each one a lot of CPU (a 1 MiB string.rep): the
    -- instruction budget stays far away, the CPU budget does not.
    local path = guest_file('local s = ("x"):rep(4096) while true do local _ = s:rep(256) end')
    local out, rc = c_embed("--guest " .. path)
    os.remove(path)
    assert.equal(1, rc, out)
    assert.matches("\ncause cpu, value none, turn CPU budget of 250 ms used up %(limits%.turn_cpu", "\n" .. out)
  end)

  it("holds its worker to what the Lua module gives a guest under untrusted, seen from outside", function()
    local out, rc = c_embed("--inspect")
    assert.equal(0, rc, out)
    local mine, ref = same_filter(inspected(out)), same_filter(untrusted_reference())
    -- what is compared: every namespace, no_new_privs, seccomp, identity,
    -- capabilities, each rlimit the policy sets, and the worker's own layers
    local n = 0
    for _ in pairs(ref) do n = n + 1 end
    assert.equal(7 + 2 + 2 + 5 + 7 + 3, n)
    assert.same({}, differing(mine, ref))
    assert.equal("its own", mine["ns net"])
    assert.equal("2", mine["status Seccomp:"])
    assert.equal("8 8 files", mine["limits Max open files"])
    assert.matches("^applied: ", mine["ready landlock"])
    assert.matches("^applied: ", mine["ready seccomp"])
  end)

  it("reports the same layers as `airlock run` under untrusted", function()
    local out, rc = sh(H.bin .. "/airlock run --policy untrusted --json -e 'return 1'")
    assert.equal(0, rc, out)
    local res = assert(json.decode(out))
    local c = same_filter(inspected(assert(c_embed("--inspect"))))
    for _, layer in ipairs { "mdwe", "landlock", "seccomp" } do
      assert.equal(same_filter_text(res.confinement[layer]), c["ready " .. layer], layer)
    end
  end)

  it("the control: a host that sets nothing (--bare) gets less, and the comparison says so", function()
    local out, rc = c_embed("--bare --inspect")
    assert.equal(0, rc, out)
    assert.matches("running WITHOUT the untrusted defaults", out)
    local diff = differing(same_filter(inspected(out)), same_filter(untrusted_reference()))
    for _, k in ipairs { "ns user", "ns pid", "ns net", "ns mount", "status NoNewPrivs:", "status Seccomp:",
                         "status CapBnd:", "limits Max cpu time", "limits Max open files", "limits Max address space",
                         "ready landlock", "ready seccomp" } do
      assert.is_truthy(("\n" .. table.concat(diff, "\n") .. "\n"):find("\n" .. k .. "\n", 1, true), k)
    end
  end)

  it("says why when the worker cannot be started, exit 1", function()
    local out, rc = c_embed("/nonexistent/airlock-worker")
    assert.equal(1, rc, out)
    assert.matches("c%-embed: .*/nonexistent/airlock%-worker", out)
  end)
end)
