-- policy_fuzz_spec.lua -- policy validation fed random tables: shaped like real
-- policies (keys from the schema, near-miss keys, every kind of value, nesting),
-- 5,000 of them from a fixed seed. Each must either load as a frozen policy or
-- raise a one-line string error starting with "policy:"; never a crash, a
-- non-string error, or an error from inside the validator's own code.
local airlock = require "airlock"
local policy = airlock.policy

local seed = tonumber(os.getenv("AIRLOCK_FUZZ_SEED") or "") or 20261130
local rng_state = seed
local function rnd(n)   -- xorshift: the same tables on every machine for a seed
  rng_state = rng_state ~ (rng_state << 13) & 0xffffffff
  rng_state = rng_state ~ (rng_state >> 17)
  rng_state = rng_state ~ (rng_state << 5) & 0xffffffff
  return rng_state % n + 1
end

-- Every key path in the schema, to draw keys from.
local keys = {}
local function collect(schema, depth)
  for k, v in pairs(schema) do
    if type(k) == "string" and k ~= "*" then keys[#keys + 1] = k end
    if type(v) == "table" and depth < 4 then collect(v, depth + 1) end
  end
end
collect(policy.SCHEMA, 0)
table.sort(keys)
local extra = { "fs.read", "world.look", "rot", "memroy", "", "\0", "a b", 1, 2, -1, 0.5, true }

local function value(depth)
  local kind = rnd(depth > 3 and 9 or 12)
  if kind == 1 then return rnd(100000) end
  if kind == 2 then return -rnd(100) end
  if kind == 3 then return rnd(1000) / 7 end
  if kind == 4 then return ({ "64K", "32M", "1G", "2s", "500ms", "all", "drop", "keep", "x", "" })[rnd(10)] end
  if kind == 5 then return rnd(2) == 1 end
  if kind == 6 then return function() return 1 end end
  if kind == 7 then return math.huge end
  if kind == 8 then return 0 / 0 end
  if kind == 9 then return nil end
  local t = {}
  for _ = 1, rnd(5) do
    local k = rnd(4) == 1 and extra[rnd(#extra)] or keys[rnd(#keys)]
    t[k] = value(depth + 1)
  end
  if rnd(4) == 1 then t[1] = value(depth + 1) end
  return t
end

describe("policy validation fed random tables", function()
  it("loads or refuses each of 5,000 with a clear policy error (seed " .. seed .. ")", function()
    local loaded, refused = 0, 0
    for i = 1, 5000 do
      local t = value(0)
      if type(t) ~= "table" then t = { name = t } end
      local ok, p = pcall(policy, t)
      if ok then
        assert.is_true(policy.is_policy(p), "case " .. i .. ": not frozen")
        assert.has_error(function() p.name = "changed" end)
        loaded = loaded + 1
      else
        assert.is_string(p, "case " .. i .. ": a non-string error")
        assert.matches("^policy", p, nil, false, "case " .. i .. ": " .. p)
        assert.is_nil(p:find("\n"), "case " .. i .. ": a multi-line error: " .. p)
        assert.is_nil(p:find("policy[%w_/]*%.lua:%d+:"), "case " .. i .. ": the validator itself failed: " .. p)
        refused = refused + 1
      end
    end
    print(string.format("  %d loaded, %d refused", loaded, refused))
    assert.is_true(loaded > 0 and refused > 0)
  end)
end)
