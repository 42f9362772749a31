-- install_spec.lua -- `make install` into a temporary DESTDIR (PREFIX=/usr/local),
-- then the installed tree used as a person would: the command runs a guest
-- confined, with the worker it finds beside itself (libexec/airlock), the
-- installed module finds it too, and a C program builds against the installed
-- header, library and airlock.pc (pkg-config) and runs.
local H = require "helper"
local dk = require "dkjson"

-- Environment the installed tree must not lean on: the build's worker and
-- build directory, and the sanitizer run's preloaded runtime.
local CLEAN = "env -u AIRLOCK_WORKER -u AIRLOCK_BUILD -u LD_PRELOAD -u AIRLOCK_POLICY "

local function sh(cmd)
  local p = io.popen(CLEAN .. "sh -c " .. string.format("%q", cmd) .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  return (out:gsub("rc=%d+\n$", "")), rc
end

local write = H.write

describe("make install", function()
  local dest, prefix

  setup(function()
    dest = os.tmpname()
    os.remove(dest)
    prefix = dest .. "/usr/local"
    local out, rc = sh("make -s install PREFIX=/usr/local DESTDIR=" .. dest)
    assert(rc == 0, "make install failed:\n" .. out)
  end)

  teardown(function()
    if dest and dest:match("^/tmp/") then os.execute("rm -rf '" .. dest .. "'") end
  end)

  it("installs the library, headers, airlock.pc, module, worker and command", function()
    for _, f in ipairs {
      "lib/libairlock.a", "include/airlock/airlock.h", "include/airlock/confine.h",
      "include/airlock/ledger.h", "lib/pkgconfig/airlock.pc", "lib/lua/5.4/airlock.so",
      "libexec/airlock/airlock-worker", "bin/airlock",
    } do
      assert.is_truthy(io.open(prefix .. "/" .. f, "rb"), f .. " is not installed")
    end
    local _, rc = sh("test -x " .. prefix .. "/bin/airlock && test -x " .. prefix .. "/libexec/airlock/airlock-worker")
    assert.equal(0, rc)
    local pc = H.slurp(prefix .. "/lib/pkgconfig/airlock.pc")
    assert.matches("prefix=/usr/local\n", pc, 1, true)
    assert.matches("Libs: -L${libdir} -lairlock", pc, 1, true)
    assert.matches("Cflags: -I${includedir}/airlock", pc, 1, true)
  end)

  it("the installed command runs a guest, confined, with the installed worker", function()
    local g = os.tmpname() .. ".lua"
    write(g, "local t = ... print('from the guest') return { sum = t.a + t.b }")
    local out, rc = sh(prefix .. "/bin/airlock run " .. g .. " --input '{\"a\":2,\"b\":40}' --json")
    os.remove(g)
    assert.equal(0, rc, out)
    local res = dk.decode(out)
    assert.is_table(res, out)
    assert.equal("ok", res.cause)
    assert.same({ sum = 42 }, res.value)
    assert.equal("from the guest\n", res.log)
    assert.equal("untrusted", res.policy)
    -- Confined as usual: the seccomp allowlist and Landlock are required layers
    -- of the default policy, so an ok run had them applied.
    assert.matches("^applied", res.confinement.seccomp)
    assert.matches("^applied", res.confinement.landlock)
  end)

  it("the installed module finds the installed worker", function()
    local script = os.tmpname() .. ".lua"
    write(script, string.format([[
package.cpath = %q
local airlock = require "airlock"
print(require("airlock.core").worker_path())
local r = airlock.run { guest = "return 6 * 7" }
print(r.cause, r.value)
]], prefix .. "/lib/lua/5.4/?.so"))
    local out, rc = sh("cd / && lua5.4 " .. script)
    os.remove(script)
    assert.equal(0, rc, out)
    assert.equal(prefix .. "/libexec/airlock/airlock-worker\nok\t42\n", out)
  end)

  it("a C program builds against the installed header and airlock.pc, and runs", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    write(dir .. "/probe.c", [[
#include <stdio.h>
#include <airlock.h>
int main(void) {
  airlock_probe_report r;
  if (airlock_probe(&r) != 0) { puts("probe failed"); return 1; }
  printf("protocol %d, probed\n", AIRLOCK_PROTOCOL_VERSION);
  return 0;
}
]])
    local flags, rc = sh("PKG_CONFIG_PATH=" .. prefix .. "/lib/pkgconfig pkg-config --define-variable=prefix="
      .. prefix .. " --cflags --libs airlock")
    assert.equal(0, rc, flags)
    flags = flags:gsub("%s+$", "")
    assert.matches("-I" .. prefix .. "/include/airlock", flags, 1, true)
    assert.matches("-L" .. prefix .. "/lib", flags, 1, true)
    local out
    out, rc = sh("cc -o " .. dir .. "/probe " .. dir .. "/probe.c " .. flags)
    assert.equal(0, rc, out)
    out, rc = sh(dir .. "/probe")
    os.execute("rm -rf '" .. dir .. "'")
    assert.equal(0, rc, out)
    assert.matches("^protocol %d+, probed\n$", out)
  end)
end)
