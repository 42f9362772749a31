-- cli_spec.lua -- the airlock command as a person uses it: exit codes, messages, JSON.
local H = require "helper"
local dk = require "dkjson"

local sh = H.sh

local function guest_file(src)
  local path = os.tmpname() .. ".lua"
  local f = io.open(path, "w")
  f:write(src)
  f:close()
  return path
end

local AIRLOCK = H.bin .. "/airlock"

describe("airlock run", function()
  it("prints the value and the guest's output, exit 0", function()
    local g = guest_file("local t = ... print('adding') return t.a + t.b")
    local out, rc = sh(AIRLOCK .. " run " .. g .. " --input '{\"a\":2,\"b\":3}'")
    os.remove(g)
    assert.equal(0, rc)
    assert.equal("adding\n5\n", out)
  end)

  it("prints one JSON object with --json", function()
    local g = guest_file("print('x') return { n = 1 }")
    local out, rc = sh(AIRLOCK .. " run " .. g .. " --json")
    os.remove(g)
    assert.equal(0, rc)
    local obj = dk.decode(out)
    assert.is_true(obj.ok)
    assert.equal("ok", obj.cause)
    assert.same({ n = 1 }, obj.value)
    assert.equal("x\n", obj.log)
    assert.is_number(obj.usage.wall_ms)
  end)

  it("exits 1 with the cause when the guest fails", function()
    local g = guest_file("error('nope')")
    local out, rc = sh(AIRLOCK .. " run " .. g)
    os.remove(g)
    assert.equal(1, rc)
    assert.matches("airlock: error: .*nope", out)
  end)

  it("exits 2 with a clear message on bad usage", function()
    local out, rc = sh(AIRLOCK .. " run /nonexistent/guest.lua")
    assert.equal(2, rc)
    assert.matches("cannot read guest /nonexistent/guest.lua: No such file", out)
    local g = guest_file("return 1")
    out, rc = sh(AIRLOCK .. " run " .. g .. " --input '{bad'")
    assert.equal(2, rc)
    assert.matches("%-%-input is not valid JSON", out)
    out, rc = sh(AIRLOCK .. " run " .. g .. " --policy nonesuch")
    assert.equal(2, rc)
    assert.matches("no stock policy or file named 'nonesuch'", out)
    out, rc = sh(AIRLOCK .. " run " .. g .. " --frobnicate")
    assert.equal(2, rc)
    assert.matches("unknown option %-%-frobnicate", out)
    os.remove(g)
    out, rc = sh(AIRLOCK .. " nonesuch")
    assert.equal(2, rc)
    assert.matches("unknown command 'nonesuch'", out)
  end)
end)

describe("airlock demo", function()
  it("runs and shows each cause", function()
    local out, rc = sh(AIRLOCK .. " demo")
    assert.equal(0, rc)
    for _, cause in ipairs { "ok", "error", "instructions", "memory", "denied" } do
      assert.matches("%s" .. cause .. "%s", out)
    end
  end)
end)

describe("airlock repl", function()
  it("evaluates expressions and runs guests from standard input", function()
    local out, rc = sh("printf 'return 1 + 2\\nairlock.run{guest=\"return 7\"}.value\\n' | " .. AIRLOCK .. " repl")
    assert.equal(0, rc)
    assert.equal("3\n7\n", out)
  end)
end)

describe("airlock run on a terminal", function()
  -- script(1) gives the command a pseudo-terminal, as a person's shell would.
  local function on_tty(cmd)
    local log = os.tmpname()
    local out = sh("timeout -k 5 " .. H.GUARD_S .. " script -qec " .. string.format("%q", cmd) .. " " .. log ..
      " >/dev/null; cat " .. log)
    os.remove(log)
    return out
  end

  it("shows the control characters a guest prints as ^X, unless --raw", function()
    -- OSC 52 (write the clipboard), a title, a screen clear.
    local g = guest_file([[print("\27]52;c;aGk=\7\27]0;pwned\7\27[2Jafter") return 1]])
    local out = on_tty(AIRLOCK .. " run " .. g)
    assert.is_nil(out:find("\27", 1, true), out)
    assert.is_truthy(out:find("^[]52;c;aGk=^G^[]0;pwned^G^[[2Jafter", 1, true), out)
    -- The control: piped, and on a terminal with --raw, the bytes are the guest's.
    local piped = sh(AIRLOCK .. " run " .. g)
    assert.is_truthy(piped:find("\27]52;c;aGk=\7", 1, true), piped)
    local raw = on_tty(AIRLOCK .. " run --raw " .. g)
    assert.is_truthy(raw:find("\27]52;c;aGk=\7", 1, true), raw)
    os.remove(g)
  end)
end)
