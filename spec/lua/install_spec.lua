-- install_spec.lua -- `make install` into a temporary DESTDIR (PREFIX=/usr/local),
-- then the installed tree used as a person would: the command runs a guest
-- confined, with the worker it finds beside itself (libexec/airlock), the
-- installed module finds it too, and a C program builds against the installed
-- header, library and airlock.pc (pkg-config) and runs.
local H = require "helper"
local dk = require "dkjson"

-- Nothing of the build's own environment may help the installed tree.
local sh = H.sh_installed

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
    -- the ledger process is installed, its test build (crash points) never is
    assert.is_truthy(io.open(prefix .. "/libexec/airlock/airlock-ledgerd", "rb"))
    assert.equal("", (sh("find " .. dest .. " -name '*crashpoints*'")))
    local pc = H.slurp(prefix .. "/lib/pkgconfig/airlock.pc")
    assert.matches("prefix=/usr/local\n", pc, 1, true)
    assert.matches("Libs: -L${libdir} -lairlock", pc, 1, true)
    assert.matches("Cflags: -I${includedir} -I${includedir}/airlock", pc, 1, true)
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
#include <airlock/airlock.h>
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

  it("installs man pages holding every option each command's --help names, and a bash completion", function()
    local man1 = prefix .. "/share/man/man1/"
    local pages = { "airlock.1", "airlock-run.1", "airlock-exec.1", "airlock-ledger.1", "airlock-replay.1",
                    "airlock-resume.1", "airlock-call.1", "airlock-probe.1", "airlock-bench.1" }
    for _, p in ipairs(pages) do
      local text = H.slurp(man1 .. p)
      assert.is_truthy(text, p .. " is not installed")
      assert.matches("^%.TH AIRLOCK", text)
    end
    -- man renders the page
    local out, rc = sh("MANWIDTH=80 man -l " .. man1 .. "airlock-exec.1 | head -3")
    assert.equal(0, rc, out)
    assert.matches("AIRLOCK%-EXEC%(1%)", out)
    -- Every option in `airlock COMMAND --help` is in the command's page and in airlock(1).
    local all = H.slurp(man1 .. "airlock.1"):gsub("\\%-", "-")
    for _, cmd in ipairs { "run", "exec", "replay", "resume", "call", "probe", "bench",
                           "ledger verify", "ledger show", "ledger head", "branch", "help" } do
      local help = sh(prefix .. "/bin/airlock " .. cmd .. " --help")
      assert.matches("^usage: airlock " .. cmd:gsub("%p", "%%%0"), help)
      local page = H.slurp(man1 .. "airlock-" .. cmd:match("^%S+") .. ".1")
      page = page and page:gsub("\\%-", "-") or all
      local n = 0
      for flag in help:gmatch("\n  (%-%-?[%w-]+)") do
        n = n + 1
        assert.is_truthy(page:find(".B " .. flag, 1, true), cmd .. ": " .. flag .. " is not in its man page")
        assert.is_truthy(all:find(".B " .. flag, 1, true), cmd .. ": " .. flag .. " is not in airlock(1)")
      end
      if cmd == "exec" then assert.is_true(n >= 12) end
    end
    local comp = H.slurp(prefix .. "/share/bash-completion/completions/airlock")
    assert.matches("complete %-F _airlock airlock", comp)
    local script = os.tmpname()
    write(script, "source " .. prefix .. "/share/bash-completion/completions/airlock\n" ..
      "COMP_WORDS=(airlock exec --wor); COMP_CWORD=2; _airlock; echo \"${COMPREPLY[*]}\"\n")
    out, rc = sh("bash " .. script)
    os.remove(script)
    assert.equal(0, rc, out)
    assert.equal("--workspace\n", out)
  end)

  it("make uninstall removes what make install wrote", function()
    local d2 = os.tmpname()
    os.remove(d2)
    local out, rc = sh("make -s install PREFIX=/usr DESTDIR=" .. d2 .. " >/dev/null && make -s uninstall " ..
      "PREFIX=/usr DESTDIR=" .. d2 .. " >/dev/null && find " .. d2 .. " -type f")
    os.execute("rm -rf '" .. d2 .. "'")
    assert.equal(0, rc, out)
    assert.equal("", out)
  end)
end)
