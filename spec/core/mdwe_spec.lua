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

-- The control for the kernel: a program of its own asks for PR_SET_MDWE (in
-- a child, so nothing here is marked) and says whether the kernel took it.
local PROBE = [[
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
  pid_t p = fork();
  if (p == 0) _exit(prctl(65, 1, 0, 0, 0) == 0 ? 0 : 1);   /* PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN */
  int st = 0;
  waitpid(p, &st, 0);
  puts(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "yes" : "no");
  return 0;
}
]]

describe("the mdwe layer", function()
  local ws, policy_file, cmd, kernel_has
  setup(function()
    ws = H.tmpdir()
    local f = assert(io.open(ws .. "/wx.c", "w"))
    f:write(WX)
    f:close()
    f = assert(io.open(ws .. "/probe.c", "w"))
    f:write(PROBE)
    f:close()
    assert(os.execute("gcc -o " .. ws .. "/wx " .. ws .. "/wx.c && gcc -o " .. ws .. "/probe " .. ws .. "/probe.c"))
    kernel_has = H.sh(ws .. "/probe") == "yes\n"
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

  -- What airlock decides on every kernel: it sees what the control sees.
  -- Without the layer, a guest's report says so; the cases that need the
  -- kernel's refusal are then pending, never passed.
  local NO_MDWE = "this kernel has no PR_SET_MDWE (Linux 6.3+): nothing to refuse with"
  it("is detected as the kernel's own control finds it, and reported skipped where it is absent", function()
    assert.equal(kernel_has, core.layer_available("mdwe"))
    if not kernel_has then
      local res = assert(airlock.run { guest = "return 1" })
      assert.equal("skipped: this kernel has no PR_SET_MDWE (it needs Linux 6.3+)", res.confinement.mdwe)
    end
  end)

  for _, who in ipairs { "root", "uid 65534" } do
    it("refuses a program's writable+executable memory, as " .. who .. " (control: without it the same program maps it)", function()
      if not kernel_has then pending(NO_MDWE) end
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
    if not kernel_has then pending(NO_MDWE) end
    local on = assert(airlock.exec { argv = { "./wx" }, workspace = ws, policy = policy_file })
    assert.equal(3, on.exit_code, on.message)
    local off = assert(airlock.exec { argv = { "./wx" }, workspace = ws })
    assert.equal("ok", off.cause, off.message .. " " .. tostring(off.stderr))
    assert.equal("wx ok\n", off.stdout)
  end)

  it("is on for guests under untrusted, and locked there", function()
    assert.has_error(function() airlock.policy.extend("untrusted", { confine = { mdwe = false } }) end,
      "policy: confine.mdwe is locked by the base policy 'untrusted' (locked: confine): true -> false would loosen it")
    local res = assert(airlock.run { guest = "return 1" })
    assert.equal("ok", res.cause, res.message)
    if not kernel_has then pending(NO_MDWE) end
    assert.matches("^applied: ", res.confinement.mdwe)
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
