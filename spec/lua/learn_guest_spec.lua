-- learn_guest_spec.lua -- `airlock run --learn OUT GUEST.lua`: a real guest
-- that requires a module from its own directory and calls an effect its
-- policy does not grant. The control: under the stock untrusted policy its
-- require fails (module.load is not granted), so the test can fail; the
-- draft serves the module from the guest's directory, flags the effect
-- without granting it, drafts limits from what the run used, and runs it.
-- The drafted limits hold: a guest needing far more memory than the learned
-- one is stopped by its draft, and runs under the stock policy (the control).
-- As root and as uid 65534 (setpriv).
local H = require "helper"
require "airlock"
local core = require "airlock.core"

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")

local function run(cmd) return H.sh(cmd .. " 2>&1; echo rc=$?") end

for _, caller in ipairs { { name = "root", prefix = "" }, { name = "uid 65534", prefix = H.NOBODY } } do
describe("airlock run --learn run by " .. caller.name, function()
  local dir
  before_each(function()
    dir = H.tmpdir()
    assert(os.execute("chmod 777 " .. dir))
    H.write(dir .. "/helper.lua", "return { twice = function(x) return 2 * x end }\n")
    H.write(dir .. "/g.lua", "local h = require 'helper'\nlocal t = {}\nfor i = 1, 1000 do t[i] = h.twice(i) end\n" ..
      "print('sum', #t)\npcall(function() return host.kv_get({ key = 'x' }) end)\nreturn t[10]\n")
    os.execute("chmod a+r " .. dir .. "/*.lua")
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("drafts module.load from the guest's directory, flags what is not granted, and the draft runs it", function()
    local control = run(caller.prefix .. AIRLOCK .. " run " .. dir .. "/g.lua")
    assert.matches("module.load", control)        -- the stock policy does not serve require
    assert.matches("rc=1\n$", control)
    local out = run(caller.prefix .. AIRLOCK .. " run --learn " .. dir .. "/draft.lua " .. dir .. "/g.lua")
    assert.matches("the draft ran the guest again the same way", out)
    assert.matches("rc=0\n$", out)
    local text = H.read(dir .. "/draft.lua")
    assert.matches('%["module.load"%] = handlers.modules%("' .. dir:gsub("%p", "%%%0") .. '"%),   %-%- why: require of helper',
      text)
    assert.matches('%-%- NOT GRANTED: %["kv_get"%]', text)
    assert.matches('cpu = "%d+ms",   %-%- why: the worker used %d+ ms of CPU', text)
    assert.matches('output = "4K",   %-%- why: the guest printed 9 bytes', text)
    assert.are.equal("20\nrc=0\n", run(caller.prefix .. AIRLOCK .. " run --policy " .. dir .. "/draft.lua " .. dir .. "/g.lua"):gsub("^sum\t1000\n", ""))
  end)

  it("drafts limits that hold: a guest needing far more than the learned one used is stopped by them", function()
    H.write(dir .. "/small.lua", "local n = 0\nfor i = 1, 100 do n = n + i end\nreturn n\n")
    os.execute("chmod a+r " .. dir .. "/*.lua")
    local out = run(caller.prefix .. AIRLOCK .. " run --learn " .. dir .. "/d2.lua " .. dir .. "/small.lua")
    assert.matches("rc=0\n$", out)
    -- twice the worker's resident size: about 16M for a worker of 8M
    local mib = tonumber(H.read(dir .. "/d2.lua"):match('memory = "(%d+)M"'))
    assert.is_true(mib ~= nil and mib >= 16 and mib <= 24, "drafted memory " .. tostring(mib))
    -- a heap past the draft's: the stock policy (64M) holds it, the small guest's draft does not
    local bytes = (mib + 4) * 1024 * 1024
    H.write(dir .. "/big.lua", "local s = string.rep('x', " .. bytes .. ")\nreturn #s\n")
    os.execute("chmod a+r " .. dir .. "/*.lua")
    assert.are.equal(bytes .. "\nrc=0\n", run(caller.prefix .. AIRLOCK .. " run " .. dir .. "/big.lua"))   -- the control
    local big = run(caller.prefix .. AIRLOCK .. " run --policy " .. dir .. "/d2.lua " .. dir .. "/big.lua")
    assert.matches("memory", big)
    assert.matches("rc=1\n$", big)
  end)
end)
end
