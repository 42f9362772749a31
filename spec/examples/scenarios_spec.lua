-- scenarios_spec.lua -- examples/scenarios: the scripts a tester writes with the
-- module (chaos, red team, replay) run as a person would run them, against
-- the build under test (AIRLOCK_BUILD); each must exit 0 and say ok.
local H = require "helper"

local sh = H.sh

local function scenario(name)
  return sh("AIRLOCK_BUILD='" .. H.build .. "' timeout 120 lua5.4 examples/scenarios/" .. name .. ".lua")
end

describe("examples/scenarios", function()
  it("chaos.lua: workers killed mid-effect end as crash, nothing leaks", function()
    local out, rc = scenario("chaos")
    assert.equal(0, rc, out)
    assert.matches("chaos: ok: 20 workers killed mid%-effect, each cause crash", out)
  end)

  it("redteam.lua: every escape attempt is contained", function()
    local out, rc = scenario("redteam")
    assert.equal(0, rc, out)
    assert.not_matches("NOT CONTAINED", out)
    assert.matches("redteam: ok: all %d+ escape attempts contained", out)
    assert.matches("hog memory%s+memory", out)
    assert.matches("ask for an effect the policy does not grant%s+denied", out)
  end)

  it("replay.lua: a mutated guest diverges at the seq of the changed call", function()
    local out, rc = scenario("replay")
    assert.equal(0, rc, out)
    assert.matches("replay: ok: .* diverged at seq %d+: the journal has 'kv.put'", out)
  end)

  it("a scenario that finds a problem exits non-zero with a message", function()
    -- redteam.lua with the memory limit lifted off the hog: it must say so and fail.
    local src = assert(io.open("examples/scenarios/redteam.lua")):read("a")
    src = src:gsub('expect = { memory = true }', 'expect = { ok = true }')
    local path = os.tmpname() .. ".lua"
    local f = assert(io.open(path, "w"))
    f:write(src)
    f:close()
    local out, rc = sh("AIRLOCK_BUILD='" .. H.build .. "' timeout 120 lua5.4 " .. path)
    os.remove(path)
    assert.equal(1, rc, out)
    assert.matches("NOT CONTAINED", out)
    assert.matches("redteam: FAIL: 1 of %d+ attempts were not contained", out)
  end)
end)
