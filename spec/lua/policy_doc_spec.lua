-- policy_doc_spec.lua -- the policy reference is the schema: docs/POLICY.md is
-- what policy.reference() writes from it (make docs), and every field of the
-- schema carries its one-line doc, so a field cannot be added undocumented.
local H = require "helper"
local airlock = require "airlock"
local policy = airlock.policy
local schema = require "airlock.policy.schema"

describe("the policy reference", function()
  it("docs/POLICY.md is what the schema writes (run make docs after changing the schema)", function()
    local file = assert(H.slurp("docs/POLICY.md"), "docs/POLICY.md is missing")
    local text = policy.reference()
    if file ~= text then
      -- Name the first line that differs, so the failure says what drifted.
      local i, fl, tl = 0, file .. "\n", text .. "\n"
      local fa, ta = fl:gmatch("([^\n]*)\n"), tl:gmatch("([^\n]*)\n")
      repeat i = i + 1; local a, b = fa(), ta()
        if a ~= b then error(string.format("docs/POLICY.md line %d is %q; the schema writes %q", i, tostring(a), tostring(b))) end
      until a == nil
    end
    assert.equal(text, file)
  end)

  it("documents every field of the schema, with its default where it has one", function()
    local missing, fields = {}, 0
    local function walk(node, path)
      for k, child in pairs(node) do
        if type(k) == "string" then
          local p = path == "" and k or path .. "." .. k
          local about = schema.about(child)
          fields = fields + 1
          if not about or type(about.doc) ~= "string" or about.doc == "" then missing[#missing + 1] = p end
          if type(child) == "table" then walk(child, p) end
        end
      end
    end
    walk(policy.SCHEMA, "")
    table.sort(missing)
    assert.same({}, missing)
    assert.is_true(fields >= 60, "fields: " .. fields)
    local text = policy.reference()
    for _, p in ipairs { "limits.output", "confine.landlock", "tool.confine.seccomp.refuse", "tool.limits.pids",
                         "confine.rlimits.as", "secrets.*.env", "effects.*" } do
      assert.truthy(text:find("`" .. p .. "`", 1, true), p)
    end
    assert.truthy(text:find('| `limits.output` | a size in bytes', 1, true))
    assert.truthy(text:find('`"64K"`', 1, true))
  end)

  it("gives the defaults the code uses: policy.default reads them from the schema", function()
    assert.equal(65536, policy.default("limits.output"))
    assert.equal(16 * 1024 * 1024, policy.default("limits.max_frame"))
    assert.equal(64 * 1024 * 1024, policy.default("tool.limits.tmp_size"))
    assert.is_nil(policy.default("limits.deadline_ms"))
    assert.has_error(function() policy.default("limits.memroy") end)
    -- A guest without an output limit of its own keeps the default's worth of log.
    local guest = 'for i = 1, 5000 do print(string.rep("x", 40)) end'
    local res = airlock.run { guest = guest, policy = { limits = { output = policy.remove } } }
    assert.equal("ok", res.cause, res.message)
    assert.equal(65536, #res.log)
    -- control: a larger limit keeps more
    local more = airlock.run { guest = guest, policy = { limits = { output = "1M" } } }
    assert.equal(5000 * 41, #more.log)
  end)
end)
