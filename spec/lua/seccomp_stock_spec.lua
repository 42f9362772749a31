-- seccomp_stock_spec.lua -- the seccomp programs compiled when airlock was
-- built (tools/seccomp_stock.c, core/confine_prepare.c): each is what
-- libseccomp compiles here, byte for byte, and `airlock exec` under the
-- stock tool policy takes its program from them instead of compiling one;
-- a policy whose filter differs still gets its own, compiled. As root and as
-- uid 65534, each in a fresh process (a process compiles a spec once and
-- keeps it, so only a first run shows where its program came from).
local H = require "helper"

local function build_dir()
  if H.build:sub(1, 1) == "/" then return H.build end
  local p = io.popen("pwd")
  local cwd = p:read("l")
  p:close()
  return cwd .. "/" .. H.build
end

-- Runs one exec of /bin/true under the policy (nil: the stock tool policy)
-- in a fresh lua5.4 as the given user; -> the build-time programs' count,
-- the hits before and after, the run's cause and seccomp layer.
local function first_exec(as, ws, policy_src)
  local script = ws .. ".lua"
  H.write(script, string.format([[
    package.cpath = %q .. "/lib/?.so;" .. package.cpath
    local airlock = require "airlock"
    local core = require "airlock.core"
    local before = assert(core.seccomp_stock())
    local r, err = airlock.exec { argv = { "/bin/true" }, workspace = %q, policy = %s }
    local after = assert(core.seccomp_stock())
    print(before.usable, before.hits, after.hits, r and r.cause or err, r and r.confinement.seccomp or "-")
  ]], build_dir(), ws, policy_src or "nil"))
  os.execute("chmod 0644 " .. script)
  local out, rc = H.sh("cd / && " .. as .. "lua5.4 " .. script)
  assert.are.equal(0, rc, out)
  local usable, before, after, cause, layer = out:match("^(%d+)\t(%d+)\t(%d+)\t(%S+)\t([^\n]*)")
  assert(usable, out)
  return tonumber(usable), tonumber(before), tonumber(after), cause, layer
end

describe("seccomp programs compiled at build time", function()
  it("are what libseccomp compiles here, byte for byte", function()
    require "airlock"
    local core = require "airlock.core"
    local t = assert(core.seccomp_stock())
    if t.usable == 0 then
      pending("this libseccomp or kernel (its API level) differs from the build's: every filter is compiled here")
    end
    assert.is_true(t.usable >= 1)
  end)

  for _, who in ipairs { { "root", "" }, { "uid 65534", H.NOBODY } } do
    it("serve airlock exec under the stock tool policy, and only a matching spec, as " .. who[1], function()
      if H.sanitized and who[2] ~= "" then pending("release build only: the sanitizer's preloaded runtime is root's") end
      -- A workspace both users can reach and the run's uid 65534 can use.
      local p = io.popen("mktemp -d /tmp/airlock-stock.XXXXXX")
      local ws = p:read("l")
      p:close()
      os.execute("chmod 0755 " .. ws .. " && chown 65534:65534 " .. ws)
      if who[2] ~= "" then
        -- The control: uid 65534 can load this build at all.
        local probe, prc = H.sh("cd / && " .. who[2] .. "lua5.4 -e " .. string.format("%q",
          string.format("package.cpath = %q .. '/lib/?.so;' .. package.cpath require 'airlock'", build_dir())))
        if prc ~= 0 then pending("uid 65534 cannot load the build here: " .. (probe:match("[^\n]*") or "")) end
      end
      local usable, before, after, cause, layer = first_exec(who[2], ws)
      if usable == 0 then pending("this libseccomp or kernel differs from the build's: nothing to take") end
      assert.are.equal("ok", cause, layer)
      assert.matches("^applied", layer)
      assert.are.equal(0, before)
      assert.are.equal(1, after)
      -- A filter of its own (one promise fewer): compiled, not taken, and
      -- the program runs under it all the same.
      local _, b2, a2, cause2, layer2 = first_exec(who[2], ws, [[require("airlock.policy").extend("tool",
        { tool = { confine = { seccomp = { promises = "stdio rpath wpath cpath fattr proc exec id unix" } } } })]])
      assert.are.equal("ok", cause2, layer2)
      assert.matches("^applied", layer2)
      assert.are.equal(0, b2)
      assert.are.equal(0, a2)
      os.execute("rm -rf " .. ws .. " " .. ws .. ".lua")
    end)
  end
end)
