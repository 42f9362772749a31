-- layer_table_spec.lua -- C's layer table (core/confine_layers.c: the layers
-- a process sets on itself with one call) is the one list C has of them, and
-- it agrees with the schema's: each row's name is a word `require` takes, the
-- planner plans it, the probe reports it, and nothing else answers to a name
-- the table lacks.
require "airlock"   -- loads the module, whose Lua parts these are
local core = require "airlock.core"
local policy = require "airlock.policy"
local probe = require "airlock.probe"

describe("the layer table", function()
  it("names only layers of the schema, each once", function()
    assert.is_true(#core.confine_layers > 0)
    local words, seen = {}, {}
    for _, w in ipairs(policy.LAYERS) do words[w] = true end
    for _, name in ipairs(core.confine_layers) do
      assert.is_true(words[name], name .. " is not a word of the schema's LAYERS")
      assert.is_nil(seen[name], name .. " twice")
      seen[name] = true
    end
  end)

  it("answers whether this kernel has each of its layers, and refuses a name it lacks", function()
    for _, name in ipairs(core.confine_layers) do assert.is_boolean(core.layer_available(name)) end
    local ok, err = pcall(core.layer_available, "no_such_layer")
    assert.is_false(ok)
    assert.matches("'no_such_layer' is not a layer of the table %(mdwe", err)
  end)

  it("is what the probe shows, after seccomp's lines, each with its line and what it means", function()
    local r = probe.report()
    for i, name in ipairs(core.confine_layers) do
      assert.equal(name, probe.LAYERS[3 + i])
      assert.is_table(r[name], name)
      assert.equal(core.layer_available(name), r[name].ok)
      assert.is_string(r[name].consequence)
    end
  end)
end)
