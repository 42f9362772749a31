-- policy_spec.lua -- strict validation, units, extend and freezing.
local policy = require("airlock").policy

describe("airlock.policy", function()
  it("names an unknown key, where it is, and the closest valid key", function()
    assert.has_error(function() policy { limits = { memroy = "1M" } } end,
      "policy: unknown key 'limits.memroy' (did you mean 'memory'?)")
    assert.has_error(function() policy { effect = {} } end,
      "policy: unknown key 'effect' (did you mean 'effects'?)")
  end)

  it("says what a field expects", function()
    assert.has_error(function() policy { limits = { memory = "lots" } } end,
      'policy: limits.memory must be a size in bytes (a number, or a string like "64K", "32M", "1G") (got string "lots")')
    assert.has_error(function() policy { effects = { ["fs.read"] = 42 } } end,
      'policy: effects["fs.read"] must be a handler function, or false to refuse the effect (got number 42)')
  end)

  it("parses sizes and durations", function()
    local p = policy { limits = { memory = "32M", output = "64K", max_frame = 1024, deadline_ms = "2s" } }
    assert.equal(32 * 1024 * 1024, p.limits.memory)
    assert.equal(65536, p.limits.output)
    assert.equal(1024, p.limits.max_frame)
    assert.equal(2000, p.limits.deadline_ms)
    assert.equal(500, policy { limits = { deadline_ms = "500ms" } }.limits.deadline_ms)
  end)

  it("freezes a loaded policy", function()
    local p = policy { limits = { memory = "1M" } }
    assert.has_error(function() p.limits.memory = 2 ^ 40 end)
    assert.has_error(function() p.name = "x" end)
    assert.equal(1048576, p.limits.memory)
  end)

  it("extends: maps merge, values replace, the base is untouched", function()
    local base = policy.load("untrusted")
    local p = policy.extend(base, { limits = { memory = "8M" }, effects = { x = function() end } })
    assert.equal(8 * 1024 * 1024, p.limits.memory)
    assert.equal(5000, p.limits.deadline_ms)
    assert.is_function(p.effects.x)
    assert.equal(64 * 1024 * 1024, base.limits.memory)
    assert.is_nil(base.effects.x)
  end)

  it("loads stock policies by name and reports unknown names", function()
    assert.equal("untrusted", policy.load("untrusted").name)
    assert.equal("dev", policy.load("dev").name)
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
end)
