-- protect_spec.lua -- tool.protect: paths of the workspace a program may read
-- but not change. The stock tool policy protects a repository's .git/hooks
-- and .git/config (what git runs and trusts later, outside the sandbox) and
-- leaves the rest of .git writable, so commits work. Real attempts, as root
-- and as an unprivileged user, each with a control that succeeds.
local airlock = require "airlock"
local core = require "airlock.core"
local H = require "helper"
local policy = airlock.policy
local dk = require "dkjson"

local NOBODY = "setpriv --reuid 65534 --regid 65534 --clear-groups "

-- A workspace holding a git repository with one commit.
local function repo()
  local ws = H.tmpdir()
  assert(os.execute("cd " .. ws .. " && git init -q . && git config user.email a@b && git config user.name a" ..
    " && echo one > f && git add f && git commit -qm one && chmod -R a+rwX " .. ws))
  return ws
end

local ATTACK = "echo evil > .git/hooks/pre-commit; echo hooks=$?; " ..
  "printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/config; echo config=$?; " ..
  "mv .git/hooks .git/h2; echo move=$?; " ..
  "echo two >> f && git commit -qam two; echo commit=$?; cat .git/config >/dev/null; echo read=$?"

describe("tool.protect", function()
  local cmd = core.fs_realpath(H.bin .. "/airlock")

  for _, who in ipairs { "root", "uid 65534" } do
    it("keeps a repository's hooks and config as they were, and commits work, as " .. who, function()
      local as = who == "root" and "" or NOBODY
      if who ~= "root" then
        local probe = H.sh(as .. cmd .. " version 2>&1; echo rc=$?")
        if not probe:match("rc=0") then pending("skipped: uid 65534 cannot run " .. cmd .. " here: " .. probe) return end
      end
      local ws = repo()
      local config = H.slurp(ws .. "/.git/config")
      local out = H.sh("cd " .. ws .. " && " .. as .. cmd .. " exec --json --workspace " .. ws ..
        " -- sh -c " .. require("airlock.util").shell_quote(ATTACK))
      local res = assert(dk.decode(out), out)
      assert.equal("ok", res.cause, res.message)
      assert.matches("hooks=[12]\n", res.stdout)
      assert.matches("config=[12]\n", res.stdout)
      assert.matches("move=1\n", res.stdout)
      assert.matches("commit=0\n", res.stdout)
      assert.matches("read=0\n", res.stdout)
      assert.matches("Read%-only file system", res.stderr)
      assert.equal("applied: read-only in the workspace: .git/hooks .git/config", res.confinement.protect)
      assert.is_nil(H.slurp(ws .. "/.git/hooks/pre-commit"))
      assert.equal(config, H.slurp(ws .. "/.git/config"))
      assert.matches("two", H.sh("cd " .. ws .. " && git log --oneline"))
      os.execute("rm -rf " .. ws)
    end)
  end

  it("control: without tool.protect the same program plants the hook (the mount is what stops it)", function()
    local ws = repo()
    local res = assert(airlock.exec { argv = { "sh", "-c", ATTACK }, workspace = ws,
      policy = { unconfined = true, tool = { protect = policy.remove } } })
    assert.matches("hooks=0\n", res.stdout)
    assert.matches("config=0\n", res.stdout)
    assert.matches("move=0\n", res.stdout)
    assert.equal("evil\n", H.slurp(ws .. "/.git/h2/pre-commit"))   -- planted, then moved
    assert.equal("skipped: the policy protects no path (tool.protect)", res.confinement.protect)
    os.execute("rm -rf " .. ws)
  end)

  it("protects more on request, readable still; and its list is locked in the stock policy", function()
    local ws = repo()
    H.write(ws .. "/.env", "TOKEN=x\n")
    local res = assert(airlock.exec { argv = { "sh", "-c", "cat .env; echo y >> .env; echo w=$?" }, workspace = ws,
      policy = policy.extend("tool", { tool = { protect = policy.append { ".env" } } }) })
    assert.equal("TOKEN=x\nw=2\n", res.stdout)
    assert.equal("TOKEN=x\n", H.slurp(ws .. "/.env"))
    assert.has_error(function() policy.extend("tool", { tool = { protect = { ".git/hooks" } } }) end,
      "policy: tool.protect is locked by the base policy 'tool': {.git/hooks, .git/config} -> {.git/hooks} " ..
      "would loosen it")
    assert.has_error(function() policy.new { tool = { protect = { "../etc" } } } end)
    assert.has_error(function() policy.new { tool = { protect = { "/etc" } } } end)
    os.execute("rm -rf " .. ws)
  end)

  it("refuses a protected path reached through a symbolic link, and says when none exists yet", function()
    local ws = H.tmpdir()
    assert(os.execute("mkdir -p " .. ws .. "/.git " .. ws .. "/elsewhere && ln -s ../elsewhere " .. ws .. "/.git/hooks"))
    local none, err, cause = airlock.exec { argv = { "true" }, workspace = ws }
    assert.is_nil(none)
    assert.equal("confinement", cause)
    assert.matches("tool.protect names .git/hooks, which is reached through a symbolic link", err)
    local plain = H.tmpdir()
    local res = assert(airlock.exec { argv = { "true" }, workspace = plain })
    assert.equal("ok", res.cause, res.message)
    assert.matches("^skipped: none of tool.protect is in the workspace yet", res.confinement.protect)
    os.execute("rm -rf " .. ws .. " " .. plain)
  end)
end)
