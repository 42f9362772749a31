-- policy_spec.lua -- strict validation (every key typo of every stock policy
-- caught with its path), units, composition (extend, append, remove, locked),
-- roles, the digest, frozen tables, and the stock policies (dev's warning).
local airlock = require "airlock"
local policy = airlock.policy
local H = require "helper"

local STOCK = { "untrusted", "tool", "dev" }

-- A plain deep copy (frozen proxies walk through __pairs; handlers kept).
local function copy(t)
  if type(t) ~= "table" then return t end
  if not policy.is_policy(t) and getmetatable(t) ~= nil then return t end
  local c = {}
  for k, v in pairs(t) do c[k] = copy(v) end
  return c
end

local function errmsg(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error")
  return tostring(err)
end

-- Every misspelling of key that is not itself a valid key of the same map.
local function typos(key, valid)
  local out, seen = {}, {}
  local function add(s) if s ~= key and not valid[s] and not seen[s] then seen[s] = true out[#out + 1] = s end end
  add(key .. key:sub(-1))                                               -- last letter doubled
  add(key:sub(1, 1) .. key)                                             -- first letter doubled
  if #key >= 3 then add(key:sub(1, 1) .. key:sub(3, 3) .. key:sub(2, 2) .. key:sub(4)) end   -- swap 2nd/3rd
  if #key >= 4 then add(key:sub(1, -2)) end                             -- last letter dropped
  if #key >= 5 then add(key:sub(1, 2) .. key:sub(4)) end                -- a middle letter dropped
  add(key:sub(1, -2) .. (key:sub(-1) == "x" and "y" or "x"))            -- last letter replaced
  return out
end

-- Every key path of a policy that the schema names (not the free names of a
-- "*" map such as effect names), with the schema map that holds it:
-- { keys = {...}, node = schema map }.
local function key_paths(t, node, prefix, out)
  out = out or {}
  for k, v in pairs(t) do
    local child = node[k]
    local named = child ~= nil
    if child == nil then child = node["*"] end
    local keys = { table.unpack(prefix) }
    keys[#keys + 1] = k
    if named then out[#out + 1] = { keys = keys, node = node } end
    if type(child) == "table" and type(v) == "table" and (policy.is_policy(v) or getmetatable(v) == nil) then
      key_paths(v, child, keys, out)
    end
  end
  return out
end

local function path_string(keys)
  local p = ""
  for _, k in ipairs(keys) do p = policy.path_of(p, k) end
  return p
end

describe("policy validation", function()
  it("names an unknown key, where it is, and the closest valid key", function()
    assert.has_error(function() policy { limits = { memroy = "1M" } } end,
      "policy: unknown key 'limits.memroy' (did you mean 'memory'?)")
    assert.has_error(function() policy { effect = {} } end,
      "policy: unknown key 'effect' (did you mean 'effects'?)")
  end)

  it("writes a path with a key that is not a name in bracket form", function()
    assert.has_error(function() policy { secrets = { ["fs.token"] = { evn = "X" } } } end,
      "policy: unknown key 'secrets[\"fs.token\"].evn' (did you mean 'env'?)")
    assert.has_error(function() policy { ["fs.read"] = true } end, "policy: unknown key '[\"fs.read\"]'")
    assert.has_error(function() policy { limits = { [3] = 1 } } end, "policy: unknown key 'limits[3]'")
    assert.has_error(function() policy { confine = { ["end"] = true } } end,
      "policy: unknown key 'confine[\"end\"]'")
    assert.has_error(function() policy { tool = { env = { ["A B"] = "x" } } } end,
      'policy: tool.env["A B"]: the key "A B" must be an environment variable name (letters, digits, _)')
    assert.has_error(function() policy { [{}] = 1 } end, "policy: unknown key '[table]'")
    assert.has_error(function() policy { effects = { ["a\nb"] = 1 } } end,
      'policy: effects["a\\nb"] must be a handler function, or false to refuse the effect (got number 1)')
  end)

  for _, name in ipairs(STOCK) do
    it("catches every key typo in the stock policy '" .. name .. "', with its path and the right key", function()
      local stock = assert(policy.load(name))
      local paths = key_paths(stock, policy.SCHEMA, {})
      assert.is_true(#paths >= (name == "dev" and 9 or 25), "too few key paths: " .. #paths)
      local checked = 0
      for _, kp in ipairs(paths) do
        local key = kp.keys[#kp.keys]
        local valid = {}
        for k in pairs(kp.node) do if type(k) == "string" then valid[k] = true end end
        for _, typo in ipairs(typos(key, valid)) do
          local t = copy(stock)
          local parent = t
          for i = 1, #kp.keys - 1 do parent = parent[kp.keys[i]] end
          parent[typo], parent[key] = parent[key], nil
          local bad = { table.unpack(kp.keys) }
          bad[#bad] = typo
          local err = errmsg(policy.new, t)
          assert.equal(string.format("policy: unknown key '%s' (did you mean '%s'?)", path_string(bad), key), err)
          checked = checked + 1
        end
      end
      assert.is_true(checked >= #paths * 3)
    end)
  end

  it("catches typos of keys under a free name (a secret's source)", function()
    for _, kp in ipairs { { "env", "HOME" }, { "file", "/etc/hostname" } } do
      for _, typo in ipairs(typos(kp[1], { env = true, file = true })) do
        local err = errmsg(policy.new, { secrets = { ["api.token"] = { [typo] = kp[2] } } })
        assert.equal(string.format("policy: unknown key 'secrets[\"api.token\"].%s' (did you mean '%s'?)",
          typo, kp[1]), err)
      end
    end
  end)

  it("catches a misspelt word in a list, with its closest word", function()
    assert.equal("policy: confine.require must be a list of layers (namespaces, rlimits, capabilities, " ..
      "no_new_privs, landlock, seccomp, mdwe, cgroup), or \"all\"; 'landlok' is not one (did you mean 'landlock'?)",
      errmsg(policy.new, { confine = { require = { "landlok" } } }))
    assert.matches("'rpth' is not one %(did you mean 'rpath'%?%)",
      errmsg(policy.new, { tool = { confine = { seccomp = { promises = "stdio rpth" } } } }))
    assert.matches("confine.capabilities must be one of: drop, keep; got \"dorp\" %(did you mean 'drop'%?%)",
      errmsg(policy.new, { confine = { capabilities = "dorp" } }))
  end)

  it("says what a field expects", function()
    assert.has_error(function() policy { limits = { memory = "lots" } } end,
      'policy: limits.memory must be a size in bytes (a number, or a string like "64K", "32M", "1G") (got string "lots")')
    assert.has_error(function() policy { effects = { ["fs.read"] = 42 } } end,
      'policy: effects["fs.read"] must be a handler function, or false to refuse the effect (got number 42)')
    assert.has_error(function() policy { limits = { deadline_ms = {} } } end,
      'policy: limits.deadline_ms must be a duration in milliseconds (a number, or a string like "500ms", "2s") (got a table)')
    assert.has_error(function() policy { tool = { confine = { landlock = { bind = { 70000 } } } } } end,
      "policy: tool.confine.landlock.bind must be a list of TCP ports (1-65535); item 1 is number 70000")
    assert.has_error(function() policy { tool = { confine = { landlock = "yes" } } } end,
      'policy: tool.confine.landlock must be true or false, or a table (got string "yes")')
    assert.has_error(function() policy { secrets = { T = { env = "A", file = "/b" } } } end,
      'policy: secrets.T must name exactly one source: { env = "NAME" } or { file = "/path" }')
  end)

  it("parses sizes and durations with units", function()
    local p = policy { limits = { memory = "32M", output = "64K", max_frame = 1024, deadline_ms = "2s",
                                  capture = "1G" } }
    assert.equal(32 * 1024 * 1024, p.limits.memory)
    assert.equal(65536, p.limits.output)
    assert.equal(1024, p.limits.max_frame)
    assert.equal(2000, p.limits.deadline_ms)
    assert.equal(1024 ^ 3, p.limits.capture)
    assert.equal(500, policy { limits = { deadline_ms = "500ms" } }.limits.deadline_ms)
    assert.equal(90000, policy { limits = { deadline_ms = "1.5m" } }.limits.deadline_ms)
    assert.equal(1536 * 1024, policy { limits = { memory = "1.5M" } }.limits.memory)
    assert.equal(100, policy { limits = { memory = "100B" } }.limits.memory)
    assert.equal(2048, policy { limits = { memory = "2KiB" } }.limits.memory)
    -- RLIMIT_CPU is whole seconds: a number is seconds, a duration is rounded up.
    assert.equal(2, policy { confine = { rlimits = { cpu = "1500ms" } } }.confine.rlimits.cpu)
    assert.equal(5, policy { confine = { rlimits = { cpu = 5 } } }.confine.rlimits.cpu)
    -- normalised values survive extend (cpu = "5s" used to come back as 1 s)
    local five = policy { confine = { rlimits = { cpu = "5s" } } }
    assert.equal(5, policy.extend(five, {}).confine.rlimits.cpu)
    assert.equal(5, policy.extend(five, { limits = { memory = "1M" } }).confine.rlimits.cpu)
    assert.equal(300000, policy { tool = { limits = { deadline_ms = "5m" } } }.tool.limits.deadline_ms)
    for _, bad in ipairs { "32Q", "-1M", "M", "1 TB", "" } do
      assert.matches("limits.memory must be a size in bytes", errmsg(policy.new, { limits = { memory = bad } }))
    end
    for _, bad in ipairs { "2h", "fast", "-1s", "s" } do
      assert.matches("limits.deadline_ms must be a duration", errmsg(policy.new, { limits = { deadline_ms = bad } }))
    end
    assert.matches("limits.instructions must be a whole number", errmsg(policy.new, { limits = { instructions = 1.5 } }))
  end)

  it("normalises idempotently: a stock policy validated again is the same, digest included", function()
    for _, name in ipairs(STOCK) do
      local p = policy.load(name)
      local again = policy.new(copy(p))
      assert.is_true(policy.same(p, again), name)
      assert.equal(policy.digest(p), policy.digest(again), name)
      -- (a derived policy's name is its own: extend gives it p's only when asked)
      assert.equal(policy.digest(p), policy.digest(policy.extend(p, { name = p.name })), name)
    end
  end)
end)

describe("frozen policies", function()
  it("raise on writes, nested too, naming the field", function()
    local p = policy.load("tool")
    assert.has_error(function() p.name = "x" end, "policy: cannot modify 'name': a loaded policy is frozen")
    assert.has_error(function() p.limits.memory = 2 ^ 40 end,
      "policy: cannot modify 'limits.memory': a loaded policy is frozen")
    assert.has_error(function() p.confine.rlimits.as = 0 end)
    assert.has_error(function() p.confine.require[1] = "cgroup" end,
      "policy: cannot modify 'confine.require[1]': a loaded policy is frozen")
    assert.has_error(function() p.effects["fs.read"] = print end)
    assert.has_error(function() p.tool.confine.landlock.read[6] = "/" end)
    assert.has_error(function() p.tool.env.LD_PRELOAD = "/x.so" end)
    assert.has_error(function() p.locked[1] = nil end)
    assert.equal(64 * 1024 * 1024, p.limits.memory)
    assert.equal(8, #p.tool.confine.landlock.read)
    assert.is_nil(p.tool.env.LD_PRELOAD)
    assert.equal("airlock.policy", getmetatable(p.confine))
  end)
end)

describe("policy.extend", function()
  it("merges maps deeply, replaces values and lists; the base is untouched", function()
    local base = policy.load("untrusted")
    local p = policy.extend(base, { limits = { memory = "8M" }, effects = { x = function() end },
                                    confine = { namespaces = { "user", "pid", "net", "ipc", "uts", "mount", "cgroup" } } })
    assert.equal(8 * 1024 * 1024, p.limits.memory)
    assert.equal(5000, p.limits.deadline_ms)
    assert.is_function(p.effects.x)
    assert.equal(1, p.confine.rlimits.cpu)
    assert.equal(64 * 1024 * 1024, base.limits.memory)
    assert.is_nil(base.effects.x)
    -- a list replaces: the tool's read list is exactly the override's
    local t = policy.extend(policy.load("dev"), { tool = { confine = { landlock = { read = { "/usr", "/etc" } } } } })
    t = policy.extend(t, { tool = { confine = { landlock = { read = { "/opt" } } } } })
    assert.same({ "/opt" }, copy(t.tool.confine.landlock.read))
  end)

  it("policy.append{...} adds to the base's list", function()
    local p = policy.extend("untrusted", { confine = { require = policy.append { "cgroup" } } })
    assert.same({ "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp", "cgroup" },
      copy(p.confine.require))
    -- (layered: adding an exec path loosens the tool's locked confinement)
    local t = policy.layer("tool", { tool = { confine = { landlock = { exec = policy.append { "/opt/bin" } } } } })
    assert.same({ "/usr", "/lib", "/lib64", "/bin", "/etc", "/opt/bin" }, copy(t.tool.confine.landlock.exec))
    -- onto nothing: the list itself
    local d = policy.extend("dev", { worker = policy.append { "/usr/bin/env" } })
    assert.same({ "/usr/bin/env" }, copy(d.worker))
    assert.has_error(function() policy.extend("untrusted", { limits = policy.append { 1 } }) end,
      "policy: limits is a map: policy.append only adds to lists")
    assert.has_error(function() policy.append { a = 1 } end, "policy.append expects a list {item, ...}")
  end)

  it("key = policy.remove drops the key (one form; calling it says so)", function()
    local dev = policy.extend("dev", { confine = { rlimits = { as = "1G", cpu = "2s" }, landlock = true } })
    local p = policy.extend(dev, { confine = { rlimits = policy.remove }, limits = { memory = policy.remove } })
    assert.is_nil(p.confine.rlimits)
    assert.is_true(p.confine.landlock)
    assert.is_nil(p.limits.memory)
    assert.equal(60000, p.limits.deadline_ms)
    -- untrusted's rlimits map dropped entirely by layering (no locks: what airlock.run does)
    local l = policy.layer("untrusted", { confine = { rlimits = policy.remove } })
    assert.is_nil(l.confine.rlimits)
    assert.is_true(l.confine.seccomp)
    assert.has_error(function() policy.remove("x") end,
      "policy.remove is a value, not a function: write `key = policy.remove`")
    -- outside extend it means: absent
    assert.is_nil(policy { name = policy.remove }.name)
  end)

  describe("locked", function()
    it("refuses loosening a locked field, naming it; tightening is allowed", function()
      -- untrusted locks its confine section
      local cases = {
        { { confine = { seccomp = false } }, "confine.seccomp", "true %-> false" },
        { { confine = { landlock = false } }, "confine.landlock", "true %-> false" },
        { { confine = { no_new_privs = false } }, "confine.no_new_privs", "true %-> false" },
        { { confine = { capabilities = "keep" } }, "confine.capabilities", '"drop" %-> "keep"' },
        { { confine = { require = { "namespaces", "rlimits" } } }, "confine.require", "%-> {namespaces, rlimits}" },
        { { confine = { namespaces = { "pid", "user" } } }, "confine.namespaces", "%-> {user, pid}" },
        { { confine = { rlimits = { as = 0 } } }, "confine.rlimits.as", "%-> 0 would" },   -- no address space limit
        { { confine = { rlimits = { nofile = policy.remove } } }, "confine.rlimits.nofile", "8 %-> nil %(removed%)" },
        { { confine = { rlimits = { nproc = 2 } } }, "confine.rlimits.nproc", "1 %-> 2" },
        { { confine = { rlimits = policy.remove } }, "confine.rlimits.core", "0 %-> nil %(removed%)" },
        { { confine = policy.remove }, "confine.capabilities", '"drop" %-> nil' },
        { { confine = { shared_net = true, namespaces = { "user" } } }, "confine.namespaces", "" },
      }
      for _, c in ipairs(cases) do
        local err = errmsg(policy.extend, "untrusted", c[1])
        assert.matches("^policy: " .. c[2]:gsub("%.", "%%.") .. " is locked by the base policy 'untrusted'", err)
        assert.matches(c[3], err)
        assert.matches("would loosen it", err)
      end
      -- tightening
      local p = policy.extend("untrusted", { confine = {
        rlimits = { as = "256M", nofile = 4, cpu = "1s" }, require = policy.append { "cgroup" },
        shared_net = false } })
      assert.equal(256 * 1024 * 1024, p.confine.rlimits.as)
      assert.is_false(p.confine.shared_net)
      -- and the stricter result cannot be loosened back past itself
      assert.matches("confine.rlimits.as is locked",
        errmsg(policy.extend, p, { confine = { rlimits = { as = "300M" } } }))
      -- untrusted's limits are not locked
      assert.equal(1024 ^ 3, policy.extend("untrusted", { limits = { memory = "1G" } }).limits.memory)
    end)

    it("numbers: a larger limit is looser, and 0 or absent is unlimited where it means that", function()
      local base = policy { name = "b", locked = { "limits" },
        limits = { memory = "32M", instructions = 1e6, deadline_ms = "1s", output = "4K" } }
      assert.equal(16 * 1024 * 1024, policy.extend(base, { limits = { memory = "16M" } }).limits.memory)
      assert.matches("limits.memory is locked by the base policy 'b' %(locked: limits%): 33554432 %-> 67108864",
        errmsg(policy.extend, base, { limits = { memory = "64M" } }))
      assert.matches("limits.instructions is locked", errmsg(policy.extend, base, { limits = { instructions = 0 } }))
      assert.matches("limits.deadline_ms is locked", errmsg(policy.extend, base, { limits = { deadline_ms = policy.remove } }))
      assert.matches("limits.output is locked", errmsg(policy.extend, base, { limits = { output = policy.remove } }))
      assert.matches("limits.max_frame is locked", errmsg(policy.extend, base, { limits = { max_frame = "32M" } }))
      assert.equal(1024, policy.extend(base, { limits = { max_frame = "1K" } }).limits.max_frame)
      -- one field locked alone
      local one = policy { locked = { "limits.memory" }, limits = { memory = "32M", deadline_ms = "1s" } }
      assert.equal(9000, policy.extend(one, { limits = { deadline_ms = "9s" } }).limits.deadline_ms)
      assert.matches("^policy: limits.memory is locked by the base policy '%(unnamed%)':",
        errmsg(policy.extend, one, { limits = { memory = "33M" } }))
    end)

    it("effects: granting one or changing a handler loosens; refusing one tightens", function()
      local h = function() return 1 end
      local base = policy { name = "e", locked = { 'effects["fs.read"]', "effects" }, effects = { ["fs.read"] = h, x = false } }
      assert.matches('^policy: effects%["fs.read"%] is locked by the base policy \'e\'',
        errmsg(policy.extend, base, { effects = { ["fs.read"] = function() return 2 end } }))
      assert.matches("effects.x is locked", errmsg(policy.extend, base, { effects = { x = h } }))
      assert.matches("effects.y is locked", errmsg(policy.extend, base, { effects = { y = h } }))
      local p = policy.extend(base, { effects = { ["fs.read"] = false } })
      assert.is_false(p.effects["fs.read"])
      assert.is_nil(policy.extend(base, { effects = { ["fs.read"] = policy.remove } }).effects["fs.read"])
    end)

    it("the tool's confinement: more paths, ports, promises or a weaker filter loosen it", function()
      local t = policy.load("tool")
      local function tool(c) return { tool = { confine = c } } end
      assert.matches("tool.confine.landlock is locked by the base policy 'tool'",
        errmsg(policy.extend, t, tool { landlock = { write = { "/" } } }))
      assert.matches("tool.confine.landlock is locked", errmsg(policy.extend, t, tool { landlock = { exec = policy.append { "/tmp" } } }))
      assert.matches("tool.confine.landlock is locked", errmsg(policy.extend, t, tool { landlock = { connect = { 443 } } }))
      assert.matches("tool.confine.landlock is locked", errmsg(policy.extend, t, tool { landlock = { scope = false } }))
      assert.matches("tool.confine.landlock is locked", errmsg(policy.extend, t, tool { landlock = false }))
      assert.matches("tool.confine.seccomp is locked", errmsg(policy.extend, t, tool { seccomp = { promises = "stdio rpath wpath cpath fattr proc exec inet" } }))
      assert.matches("tool.confine.seccomp is locked", errmsg(policy.extend, t, tool { seccomp = { mode = "deny" } }))
      -- Refusing with an errno instead of killing is weaker: locked where the base kills.
      local killing = policy.extend(t, tool { seccomp = { promises = "stdio rpath", refuse = "kill" } })
      assert.matches("tool.confine.seccomp is locked", errmsg(policy.extend, killing, tool { seccomp = { refuse = "EPERM" } }))
      assert.matches("tool.confine.seccomp is locked", errmsg(policy.extend, killing, tool { seccomp = { refuse = "errno" } }))
      assert.matches("tool.confine.seccomp is locked", errmsg(policy.extend, t, tool { seccomp = false }))
      assert.matches("tool.confine.namespaces is locked", errmsg(policy.extend, t, tool { namespaces = { "user" } }))
      assert.matches("tool.confine.rlimits.%a+ is locked", errmsg(policy.extend, t, tool { rlimits = policy.remove }))
      -- tightening: fewer paths and promises, more limits
      local p = policy.extend(t, tool { landlock = { read = { "/usr", "/lib", "/lib64" } },
                                        seccomp = { promises = "stdio rpath" }, rlimits = { nofile = 64 } })
      assert.same({ "stdio", "rpath" }, copy(p.tool.confine.seccomp.promises))
      -- the worker's confine stays locked too (untrusted's lock is inherited)
      assert.matches("confine.seccomp is locked", errmsg(policy.extend, t, { confine = { seccomp = false } }))
      assert.same({ "confine", "tool.confine", "tool.protect" }, copy(t.locked))
    end)

    it("locks accumulate and cannot be removed; a lock path must name a field", function()
      local p = policy.extend("untrusted", { locked = { "limits.memory" } })
      assert.same({ "confine", "limits.memory" }, copy(p.locked))
      assert.matches("limits.memory is locked", errmsg(policy.extend, p, { limits = { memory = "1G" } }))
      local q = policy.extend(p, { locked = { "limits.deadline_ms" } })
      assert.same({ "confine", "limits.deadline_ms", "limits.memory" }, copy(q.locked))
      assert.equal("policy: locked: an override cannot remove the base's locks",
        errmsg(policy.extend, p, { locked = policy.remove }))
      assert.same({ "confine", "limits.memory" }, copy(policy.extend(p, { locked = {} }).locked))
      assert.equal("policy: locked must be a list of field paths; unknown key 'confine.secomp' (did you mean 'seccomp'?)",
        errmsg(policy.new, { locked = { "confine.secomp" } }))
      assert.matches("unknown key 'limts' %(did you mean 'limits'%?%)", errmsg(policy.new, { locked = { "limts" } }))
      assert.matches("unknown key 'limits.memory.x'", errmsg(policy.new, { locked = { "limits.memory.x" } }))
      assert.matches("locked must be a list of field paths", errmsg(policy.new, { locked = { "a..b" } }))
    end)

    it("is not checked by layer; a run under a bare table that turns layers off needs the opt-out", function()
      local p = policy.layer("untrusted", { confine = { seccomp = false, require = {} } })
      assert.is_false(p.confine.seccomp)
      local res, err = airlock.run { guest = "return 7", policy = { confine = { require = {} } } }
      assert.is_nil(res)
      assert.matches("less confinement than the stock 'untrusted' %(confine.require", err)
      res = assert(airlock.run { guest = "return 7", policy = { unconfined = true, confine = { require = {} } } })
      assert.equal(7, res.value)
    end)
  end)
end)

describe("process authorities", function()
  it("the top level is the worker's; tool and ledger sections are validated and exposed", function()
    local u = policy.load("untrusted")
    local w = policy.authority(u, "worker")
    assert.equal(u.confine, w.confine)
    assert.equal(u.limits, w.limits)
    local none, err = policy.authority(u, "tool")
    assert.is_nil(none)
    assert.matches("policy 'untrusted' has no tool section", err)
    assert.matches("unknown role 'tols'", select(2, policy.authority(u, "tols")))

    local t = policy.load("tool")
    local o = assert(policy.authority(t, "tool", { workspace = "/tmp/ws" }))
    assert.equal("/tmp/ws", o.workdir)
    assert.same({ "/usr", "/lib", "/lib64", "/bin", "/etc", "/dev/null", "/dev/urandom", "/dev/zero", "/tmp/ws" },
      o.confine.landlock.read)
    assert.same({ "/dev/null", "/tmp/ws" }, o.confine.landlock.write)
    assert.same({ "/usr", "/lib", "/lib64", "/bin", "/etc", "/tmp/ws" }, o.confine.landlock.exec)
    assert.same({ "stdio", "rpath", "wpath", "cpath", "fattr", "unix", "proc", "exec", "id", "tty" },
      o.confine.seccomp.promises)
    assert.same({ "user", "pid", "net", "ipc", "uts", "mount", "cgroup" }, o.namespaces)
    assert.equal(300000, o.deadline_ms)
    assert.equal("/usr/local/bin:/usr/bin:/bin", o.env.PATH)
    assert.equal(".", policy.authority(t, "tool").workdir)
    -- no network: neither an inet promise nor a TCP port
    assert.is_nil(o.confine.landlock.connect)
    for _, w in ipairs(o.confine.seccomp.promises) do assert.are_not.equal("inet", w) end
    -- the journal writer's process is not a policy's to configure
    assert.matches("unknown role 'ledger'", select(2, policy.authority(t, "ledger")))
    assert.has_error(function() policy.new { ledger = { confine = { namespaces = "all" } } } end)
  end)

  it("a tool under the stock tool authority writes its workspace and nothing else", function()
    local ws = os.tmpname()
    os.remove(ws)
    os.execute("mkdir -p '" .. ws .. "'")
    local outside = os.tmpname()
    os.remove(outside)
    local o = assert(policy.authority(policy.load("tool"), "tool", { workspace = ws }))
    o.argv = { "/bin/sh", "-c", "echo made > inside && cat /etc/hostname >/dev/null && echo ok; " ..
                                "echo leak > '" .. outside .. "' || echo refused" }
    o.deadline_ms = 10000
    local p = assert(airlock.spawn(o))
    local res = p:wait()
    assert.equal("ok", res.cause, res.message .. (res.stderr or ""))
    assert.equal("ok\nrefused\n", res.stdout)
    assert.equal("made\n", H.slurp(ws .. "/inside"))
    assert.is_nil(H.slurp(outside))
    -- planned like every run: one report line per layer
    assert.matches("^applied: read /usr ", res.confinement.landlock)
    assert.matches("^applied: promises stdio rpath ", res.confinement.seccomp)
    assert.matches("^applied: user pid", res.confinement.namespaces)
    os.execute("rm -rf '" .. ws .. "'")
  end)
end)

describe("the policy digest", function()
  it("is stable under key order", function()
    local names = {}
    for i = 1, 40 do names[i] = "effect" .. i end
    local h = function() return 1 end
    local a, b = { effects = {}, limits = { memory = "1M", deadline_ms = 100 } }, { limits = {}, effects = {} }
    for i = 1, #names do a.effects[names[i]] = h end
    for i = #names, 1, -1 do b.effects[names[i]] = h end
    b.limits.deadline_ms = 100
    b.limits.memory = 1048576
    -- different insertion histories give different hash layouts
    for i = 1, 100 do b.effects["tmp" .. i] = h end
    for i = 1, 100 do b.effects["tmp" .. i] = nil end
    assert.equal(policy.digest(policy(a)), policy.digest(policy(b)))
    assert.matches("^%x+$", policy.digest(policy(a)))
    assert.equal(64, #policy.digest(policy(a)))
  end)

  it("changes with any change to any field of any stock policy", function()
    local seen = {}
    local count = 0
    local function note(d, what)
      assert.is_nil(seen[d], what .. " gives a digest already seen (" .. tostring(seen[d]) .. ")")
      seen[d] = what
      count = count + 1
    end
    for _, name in ipairs(STOCK) do
      local stock = policy.load(name)
      note(policy.digest(stock), name)
      -- every leaf: a number +1, a boolean flipped, a string changed, a list shortened or grown
      local function walk(t, keys)
        for k, v in pairs(t) do
          local path = { table.unpack(keys) }
          path[#path + 1] = k
          local changes = {}
          if type(v) == "number" then changes = { v + 1 }
          elseif type(v) == "boolean" then changes = { not v }
          elseif type(v) == "string" then changes = { v .. "x" }
          elseif type(v) == "table" and #v > 0 then
            local shorter = copy(v)
            shorter[#shorter] = nil
            changes = { shorter }
          elseif type(v) == "table" then walk(v, path) end
          for _, new in ipairs(changes) do
            local c = copy(stock)
            local parent = c
            for i = 1, #path - 1 do parent = parent[path[i]] end
            parent[path[#path]] = new
            local ok, p = pcall(policy.new, c)   -- "dropx" is no capability word: not a policy
            if ok then note(policy.digest(p), name .. ":" .. path_string(path)) end
          end
        end
      end
      walk(stock, {})
    end
    assert.is_true(count > 60, "only " .. count .. " variants")
  end)

  it("covers each handler's source text (and its captured values), not its identity", function()
    local function with(src) return policy { effects = { x = assert(load(src, "=(handler)"))() } } end
    local function with_text(src) return policy { effects = { x = assert(load(src))() } } end
    -- text chunks: the source is the chunk itself
    assert.equal(policy.digest(with_text("return function() return 1 end")),
                 policy.digest(with_text("return function() return 1 end")))
    assert.are_not.equal(policy.digest(with_text("return function() return 1 end")),
                         policy.digest(with_text("return function() return 2 end")))
    -- no source: the stripped bytecode
    assert.equal(policy.digest(with("return function() return 1 end")),
                 policy.digest(with("return function() return 1 end")))
    assert.are_not.equal(policy.digest(with("return function() return 1 end")),
                         policy.digest(with("return function() return 2 end")))
    -- a handler defined in a file: its lines, read back through debug info
    local path = os.tmpname() .. ".lua"
    local function handler_from(body)
      local f = io.open(path, "w")
      f:write("-- handlers\nlocal M = {}\nfunction M.look(args, ctx)\n  " .. body .. "\nend\nreturn M\n")
      f:close()
      return assert(loadfile(path))().look
    end
    local h1 = handler_from("return { trees = 1 }")
    assert.equal("function M.look(args, ctx)\n  return { trees = 1 }\nend", policy.source_of(h1))
    local d1 = policy.digest(policy { effects = { look = h1 } })
    assert.equal(d1, policy.digest(policy { effects = { look = handler_from("return { trees = 1 }") } }))
    assert.are_not.equal(d1, policy.digest(policy { effects = { look = handler_from("return { trees = 2 }") } }))
    os.remove(path)
    -- a factory's handlers differ by what they close over
    local function factory(root) return function(args) return root .. args.path end end
    assert.are_not.equal(policy.digest(policy { effects = { r = factory("/a/") } }),
                         policy.digest(policy { effects = { r = factory("/b/") } }))
    assert.equal(policy.digest(policy { effects = { r = factory("/a/") } }),
                 policy.digest(policy { effects = { r = factory("/a/") } }))
    -- the old name keeps working
    local p = policy.load("untrusted")
    assert.equal(policy.digest(p), require("airlock.session").digest(p))
  end)

  it("is in every run result and in the ledger's init record", function()
    local p = policy.extend("untrusted", { effects = { x = function() return 1 end } })
    local dir = os.tmpname()
    os.remove(dir)
    local res = assert(airlock.run { guest = "return host.x()", policy = p, ledger = dir })
    assert.equal("ok", res.cause, res.message)
    assert.equal(policy.digest(p), res.digest)
    local init
    for rec in airlock.ledger.records(dir) do if rec.kind == "init" then init = rec end end
    assert.equal(policy.digest(p), init.policy.digest)
    os.execute("rm -rf '" .. dir .. "'")
    -- a bare table's run: the digest of what it ran under
    local r2 = assert(airlock.run { guest = "return 1", policy = { limits = { memory = "8M" } } })
    assert.equal(policy.digest(policy.layer("untrusted", { limits = { memory = "8M" } })), r2.digest)
  end)
end)

describe("stock policies", function()
  it("load by name, each documented at its top, and report unknown names", function()
    for _, name in ipairs(STOCK) do
      local p = assert(policy.load(name))
      assert.equal(name, p.name)
      local f = assert(io.open("policies/" .. name .. ".lua"))
      local head = f:read("l")
      f:close()
      assert.matches("^%-%- " .. name .. " %-%- ", head)
    end
    local p, err = policy.load("nonesuch")
    assert.is_nil(p)
    assert.matches("no stock policy or file named 'nonesuch'", err)
  end)

  it("loads a policy file and reports its errors with the file name", function()
    local path = os.tmpname()
    local f = io.open(path, "w")
    f:write("return { limits = { deadline_ms = 100, memroy = 1 } }")
    f:close()
    local p, err = policy.load(path)
    os.remove(path)
    assert.is_nil(p)
    assert.matches("unknown key 'limits.memroy'", err)
    assert.matches(path, err, 1, true)
  end)

  it("only dev is unconfined", function()
    assert.is_true(policy.unconfined(policy.load("dev")))
    for _, name in ipairs { "untrusted", "tool" } do assert.is_false(policy.unconfined(policy.load(name))) end
    assert.is_true(policy.unconfined(policy { limits = { memory = "1M" } }))
  end)

  describe("dev", function()
    local AIRLOCK = H.bin .. "/airlock"
    local sh = H.sh
    local guest
    setup(function()
      guest = os.tmpname() .. ".lua"
      local f = io.open(guest, "w")
      f:write("print('hi') return 6 * 7")
      f:close()
    end)
    teardown(function() os.remove(guest) end)

    it("prints a loud warning on every run", function()
      local out, rc = sh(AIRLOCK .. " run " .. guest .. " --policy dev")
      assert.equal(0, rc, out)
      assert.matches("airlock: WARNING: policy 'dev' runs guests WITHOUT confinement\n", out, 1, true)
      assert.matches("hi\n", out, 1, true)
      assert.matches("42\n", out, 1, true)
      -- twice in one process: twice
      local lua = string.format([[
        package.cpath = %q .. "/lib/?.so;" .. package.cpath
        local airlock = require "airlock"
        for _ = 1, 2 do assert(airlock.run { guest = "return 1", policy = "dev" }) end
      ]], H.build)
      local out2 = sh("lua5.4 -e '" .. lua:gsub("'", "'\\''") .. "'")
      local n = select(2, out2:gsub("WARNING: policy 'dev' runs guests WITHOUT confinement", ""))
      assert.equal(2, n, out2)
      -- a confined policy: no warning
      local out3 = sh(AIRLOCK .. " run " .. guest)
      assert.is_nil(out3:match("WARNING"))
    end)

    it("is refused with AIRLOCK_REQUIRE_CONFINEMENT=1; confined policies still run", function()
      local out, rc = sh("AIRLOCK_REQUIRE_CONFINEMENT=1 " .. AIRLOCK .. " run " .. guest .. " --policy dev")
      assert.equal(2, rc, out)
      assert.matches("policy 'dev' runs guests without confinement, and AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it",
        out, 1, true)
      assert.is_nil(out:match("42"))
      local lua = string.format([[
        package.cpath = %q .. "/lib/?.so;" .. package.cpath
        local airlock = require "airlock"
        local res = assert(airlock.run { guest = "return 1", policy = "dev" })
        io.write(res.cause, " ", res.message, "\n")
        assert(res.digest == airlock.policy.digest(airlock.policy.load("dev")))
        local b = airlock.broker()
        io.write(tostring(b:reload("dev")), "\n")
        res = airlock.run { guest = "return 1", policy = { limits = { memory = "1M" } } }
        io.write(res.cause, "\n")
      ]], H.build)
      local out2 = sh("AIRLOCK_REQUIRE_CONFINEMENT=1 lua5.4 -e '" .. lua:gsub("'", "'\\''") .. "'")
      assert.matches("^confinement confinement: policy 'dev' runs guests without confinement", out2)
      assert.matches("\nnil\n", out2, 1, true)
      assert.matches("\nok\n", out2, 1, true)
      out, rc = sh("AIRLOCK_REQUIRE_CONFINEMENT=1 " .. AIRLOCK .. " run " .. guest .. " --policy untrusted")
      assert.equal(0, rc, out)
      assert.equal("hi\n42\n", out)
    end)
  end)
end)

describe("one confine vocabulary for guests and programs", function()
  it("takes the same keys in confine and tool.confine, and refuses what a role cannot use", function()
    -- Same words everywhere: require and shared_net are a program's too now.
    local t = policy.new { tool = { confine = { namespaces = "all", shared_net = true, require = { "cgroup" },
                                                landlock = { read = { "/usr" } }, seccomp = { promises = "stdio" } } } }
    assert.same({ "cgroup" }, t.tool.confine.require)
    assert.has_error(function() policy.new { confine = { landlock = { read = { "/etc" } } } } end,
      "policy: confine.landlock must be true or false; Landlock rules are for programs " ..
      "(tool.confine.landlock); a guest's worker opens no file or socket itself (effects do that)")
    assert.has_error(function() policy.new { confine = { seccomp = { promises = "stdio" } } } end,
      "policy: confine.seccomp must be true or false; seccomp filters are for programs " ..
      "(tool.confine.seccomp); a guest's worker has its own fixed allowlist")
    assert.has_error(function() policy.new { tool = { confine = { seccomp = true } } } end,
      "policy: tool.confine has seccomp = true, which is the guest worker's allowlist; a program needs its " ..
      "promises: seccomp = { promises = \"stdio rpath ...\" }")
    assert.has_error(function() policy.new { tool = { confine = { capabilities = "keep" } } } end,
      "policy: tool.confine has capabilities = \"keep\"; a program always loses its capabilities")
    -- control: what each role can use loads
    assert.is_true(policy.is_policy(policy.new { confine = { landlock = true, seccomp = true },
                                                 tool = { confine = { landlock = true, seccomp = false } } }))
  end)

  it("judges loosening by the rule each field's schema entry names, the same in every section", function()
    for _, section in ipairs { "confine", "tool.confine" } do
      local function nest(v)
        local out = v
        for part in section:reverse():gmatch("[^.]+") do out = { [part:reverse()] = out } end
        return out
      end
      local base = policy.new(nest { namespaces = { "user", "net" }, no_new_privs = true, rlimits = { nofile = 8 } })
      base = policy.extend(base, { locked = { section } })
      -- tightening passes: one more namespace, a smaller limit
      policy.extend(base, nest { namespaces = { "user", "net", "pid" }, rlimits = { nofile = 4 } })
      assert.has_error(function() policy.extend(base, nest { namespaces = { "user" } }) end)
      assert.has_error(function() policy.extend(base, nest { rlimits = { nofile = 9 } }) end)
      assert.has_error(function() policy.extend(base, nest { no_new_privs = false }) end)
      assert.has_error(function() policy.extend(base, nest { shared_net = true }) end)
    end
  end)

  it("a program's require fails closed like a guest's: a required layer skipped stops the start", function()
    local ws = H.tmpdir()
    local loose = { pids = 0, memory = 0, cpu = 0 }
    -- memory = 0 (no memory bound) is over the default memory ceiling: raised for this case
    local was = policy.ceilings().memory
    policy.ceilings { memory = 0 }
    finally(function() policy.ceilings { memory = was } end)
    -- control: without require the program runs, its cgroup layer reported skipped
    local ok = assert(airlock.exec { argv = { "true" }, workspace = ws,
      policy = policy.extend("tool", { tool = { limits = loose } }) })
    assert.equal("ok", ok.cause, ok.message)
    assert.equal("skipped: tool.limits.pids is 0 (no pids cgroup)", ok.confinement.cgroup)
    local res, err, cause = airlock.exec { argv = { "true" }, workspace = ws,
      policy = policy.extend("tool", { tool = { limits = loose, confine = { require = { "cgroup" } } } }) }
    assert.is_nil(res)
    assert.equal("confinement", cause)
    assert.equal("confinement: cgroup is required but skipped: tool.limits.pids is 0 (no pids cgroup)", err)
    os.execute("rm -rf '" .. ws .. "'")
  end)
end)
