-- lua_suite_spec.lua -- the official Lua 5.4.4 test suite, file by file, under
-- lua5.4 and as guests (tools/lua-suite.lua; the filters in
-- tools/lua-suite-filters.lua remove what needs io, debug, package or
-- string.dump). The suite is not shipped: AIRLOCK_LUA_TESTS names its testes/
-- folder. The files both runs agree on today must keep agreeing.
local dir = os.getenv("AIRLOCK_LUA_TESTS")

describe("the Lua 5.4.4 test suite as guests", function()
  if not dir then
    it("is skipped: AIRLOCK_LUA_TESTS is not set", function()
      pending("AIRLOCK_LUA_TESTS is not set (the testes/ folder of Lua 5.4.4, lua-5.4.4-tests)")
    end)
    return
  end
  package.path = "tools/?.lua;" .. package.path
  local suite = dofile("tools/lua-suite.lua")
  local filters = dofile("tools/lua-suite-filters.lua")
  for _, name in ipairs(filters.agree) do
    it("passes " .. name .. " as lua5.4 does, with the same output", function()
      local row = suite.run(dir, { name })[1]
      assert.equal("ok", row.lua, name .. " under lua5.4")
      assert.equal("ok", row.guest, name .. " as a guest")
      assert.same({}, row.unused)
      if not row.same then
        local n, a, b = suite.first_difference(row.out, row.log)
        error(string.format("%s: output line %d: lua5.4 %q, guest %q", name, n, a, b))
      end
    end)
  end
end)
