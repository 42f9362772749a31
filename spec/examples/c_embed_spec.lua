-- c_embed_spec.lua -- examples/c-embed: a C-only host (no Lua in the process)
-- spawns a confined worker, answers its one effect and prints the result.
local H = require "helper"

local C_EMBED = H.bin .. "/c-embed"

local sh = H.sh

describe("c-embed", function()
  it("answers the guest's effect and prints its result, exit 0", function()
    local out, rc = sh("timeout " .. H.GUARD_S .. " " .. C_EMBED)
    assert.equal(0, rc, out)
    assert.matches("^effect add {a = 2, b = 3} %-> 5\n", out)
    assert.matches('\ncause ok, value {[^}]*"sum"=>5', out)
    assert.matches('"twice"=>10', out)
    assert.matches("\nwall [%d.]+ ms, 1 effect%(s%)\n$", out)
  end)

  it("says why when the worker cannot be started, exit 1", function()
    local out, rc = sh("timeout " .. H.GUARD_S .. " " .. C_EMBED .. " /nonexistent/airlock-worker")
    assert.equal(1, rc, out)
    assert.matches("c%-embed: .*/nonexistent/airlock%-worker", out)
  end)
end)
