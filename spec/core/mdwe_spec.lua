-- mdwe_spec.lua -- the mdwe layer (memory-deny-write-execute, PR_SET_MDWE):
-- a program that maps memory writable and executable, or makes a mapping
-- executable, is refused once its policy asks for the layer, as root and as
-- an unprivileged user; the same program without it succeeds (the control).
-- A guest's worker gets it from the stock untrusted policy, and `require`
-- fails closed without it.
local airlock = require "airlock"
local core = require "airlock.core"
local H = require "helper"

-- A real attempt: an RWX mapping, then an RW mapping turned RX.
local WX = [[
#include <stdio.h>
#include <sys/mman.h>
int main(void) {
  void *p = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) { perror("mmap rwx"); return 3; }
  void *q = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (q == MAP_FAILED || mprotect(q, 4096, PROT_READ | PROT_EXEC) != 0) { perror("mprotect rx"); return 4; }
  puts("wx ok");
  return 0;
}
]]

local NOBODY = H.NOBODY

describe("the mdwe layer", function()
  if not core.mdwe_available() then
    it("is reported skipped on a kernel without PR_SET_MDWE", function()
      print("\nnote: this kernel has no PR_SET_MDWE (Linux 6.3+): only the skipped report is checked")
      local res = assert(airlock.run { guest = "return 1" })
      assert.equal("skipped: this kernel has no PR_SET_MDWE (it needs Linux 6.3+)", res.confinement.mdwe)
    end)
    return
  end

  local ws, policy_file, cmd
  setup(function()
    ws = H.tmpdir()
    local f = assert(io.open(ws .. "/wx.c", "w"))
    f:write(WX)
    f:close()
    assert(os.execute("gcc -o " .. ws .. "/wx " .. ws .. "/wx.c"))
    assert(os.execute("chmod -R 777 " .. ws))
    local dir = H.tmpdir()
    assert(os.execute("chmod 755 " .. dir))
    policy_file = dir .. "/mdwe.lua"
    f = assert(io.open(policy_file, "w"))
    f:write('return require("airlock.policy").extend("tool", { tool = { confine = { mdwe = true } } })\n')
    f:close()
    assert(os.execute("chmod 644 " .. policy_file))
    cmd = core.fs_realpath(H.bin .. "/airlock")
  end)
  teardown(function() os.execute("rm -rf '" .. ws .. "' '" .. policy_file:match("^(.*)/") .. "'") end)

  for _, who in ipairs { "root", "uid 65534" } do
    it("refuses a program's writable+executable memory, as " .. who .. " (control: without it the same program maps it)", function()
      local as = who == "root" and "" or NOBODY
      if who ~= "root" then
        local probe = H.sh(as .. cmd .. " version 2>&1; echo rc=$?")
        if not probe:match("rc=0") then pending("skipped: uid 65534 cannot run " .. cmd .. " here: " .. probe) return end
      end
      local base = "cd " .. ws .. " && " .. as .. cmd .. " exec --json --workspace " .. ws
      local control = assert(require("dkjson").decode((H.sh(base .. " -- ./wx"))))
      assert.equal("ok", control.cause, control.message)
      assert.equal("wx ok\n", control.stdout)
      assert.equal("skipped: the policy does not ask for it", control.confinement.mdwe)
      local res = assert(require("dkjson").decode((H.sh(base .. " --policy " .. policy_file .. " -- ./wx"))))
      assert.equal(3, res.exit_code, res.message)
      assert.matches("mmap rwx: Permission denied", res.stderr)
      assert.matches("^applied: no mapping writable and executable", res.confinement.mdwe)
    end)
  end

  it("marks only the program's address space, never the host's (a later program without it maps W+X)", function()
    -- In a CLONE_VM child, PR_SET_MDWE would mark the caller's address space,
    -- and every later child would inherit it through exec.
    local on = assert(airlock.exec { argv = { "./wx" }, workspace = ws, policy = policy_file })
    assert.equal(3, on.exit_code, on.message)
    local off = assert(airlock.exec { argv = { "./wx" }, workspace = ws })
    assert.equal("ok", off.cause, off.message .. " " .. tostring(off.stderr))
    assert.equal("wx ok\n", off.stdout)
  end)

  it("is on for guests under untrusted, and locked there", function()
    local res = assert(airlock.run { guest = "return 1" })
    assert.equal("ok", res.cause, res.message)
    assert.matches("^applied: ", res.confinement.mdwe)
    assert.has_error(function() airlock.policy.extend("untrusted", { confine = { mdwe = false } }) end,
      "policy: confine.mdwe is locked by the base policy 'untrusted' (locked: confine): true -> false would loosen it")
  end)

  it("fails closed when required and unavailable, and runs on (skipped, said so) when not required", function()
    local real = os.getenv
    os.getenv = function(k) if k == "AIRLOCK_TEST_PRETEND_ABSENT" then return "mdwe" end return real(k) end
    local ok, err = pcall(function()
      local res = assert(airlock.run { guest = [[print("ran") return 1]],
        policy = airlock.policy.extend("untrusted", { confine = { require = airlock.policy.append { "mdwe" } } }) })
      assert.equal("confinement", res.cause)
      assert.matches("mdwe is required but skipped: pretending this kernel lacks it", res.message)
      assert.equal("", res.log)
      local on = assert(airlock.run { guest = "return 2" })
      assert.equal(2, on.value)
      assert.matches("^skipped: pretending", on.confinement.mdwe)
    end)
    os.getenv = real
    if not ok then error(err, 0) end
  end)
end)
