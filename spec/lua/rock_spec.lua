-- rock_spec.lua -- `luarocks make` in the checkout (airlock-0.1-1.rockspec)
-- installs into a temporary luarocks tree, offline, and what it installed
-- works as a Lua user would use it: the module runs a guest and a program
-- with the worker and airlock-init it finds beside itself, and the tree's
-- command runs too (airlock call reachable inside exec).
local H = require "helper"

-- Nothing of the build's own environment may help the installed tree.
local sh = H.sh_installed

describe("luarocks make", function()
  local tree, ws
  setup(function()
    tree = H.tmpdir()
    ws = H.tmpdir()
  end)
  teardown(function() os.execute("rm -rf " .. tree .. " " .. ws) end)

  it("installs the module, the worker, airlock-init and the command into a tree, and they work", function()
    local out, rc = sh("luarocks --tree " .. tree .. " make --lua-version 5.4 airlock-0.1-1.rockspec")
    assert.are.equal(0, rc, out)
    assert.matches("airlock 0%.1%-1 is now installed", out)
    for _, f in ipairs { "lib/lua/5.4/airlock.so", "lib/lua/5.4/airlock-worker", "lib/lua/5.4/airlock-init",
                         "bin/airlock" } do
      assert.is_truthy(io.open(tree .. "/" .. f, "rb"), f .. " is not in the tree")
    end
    -- the ledger process is installed, its test build (crash points) never is
    assert.is_truthy(io.open(tree .. "/lib/lua/5.4/airlock-ledgerd", "rb"))
    assert.equal("", (sh("find " .. tree .. " -name '*crashpoints*'")))
    local script = ws .. "/use.lua"
    H.write(script, string.format([[
package.cpath = %q
local airlock = require "airlock"
print(require("airlock.core").worker_path())
local r = airlock.run { guest = "return 6 * 7" }
print(r.cause, r.value)
local e = airlock.exec { argv = { "sh", "-c", "echo pid $$" }, workspace = %q }
print(e.cause, e.stdout)
]], tree .. "/lib/lua/5.4/?.so", ws))
    out, rc = sh("cd / && lua5.4 " .. script)
    assert.are.equal(0, rc, out)
    assert.are.equal(tree .. "/lib/lua/5.4/airlock-worker\nok\t42\nok\tpid 2\n\n", out)
    out, rc = sh("cd / && " .. tree .. "/bin/airlock exec --workspace " .. ws ..
      " -- sh -c 'airlock call log \"{\\\"text\\\":\\\"hi\\\"}\"'")
    assert.are.equal(0, rc, out)
    assert.are.equal("true\n", out)
    out, rc = sh(tree .. "/bin/airlock run -e 'return 1+1'")
    assert.are.equal(0, rc, out)
    assert.are.equal("2\n", out)
  end)
end)
