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

local NOBODY = H.NOBODY

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
  "mv .git .g3 && mv .g3 .git; echo gitmove=$?; " ..   -- else: a fresh .git/hooks beside the old mounts
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
      assert.matches("gitmove=1\n", res.stdout)
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
    assert.matches("gitmove=0\n", res.stdout)
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
      "policy: tool.protect is locked by the base policy 'tool': {.git//hooks/, .git//config} -> {.git/hooks} " ..
      "would loosen it")
    assert.has_error(function() policy.new { tool = { protect = { "../etc" } } } end)
    assert.has_error(function() policy.new { tool = { protect = { "/etc" } } } end)
    os.execute("rm -rf " .. ws)
  end)

  it("refuses a protected path reached through a symbolic link, and makes nothing without a .git", function()
    local ws = H.tmpdir()
    assert(os.execute("mkdir -p " .. ws .. "/.git " .. ws .. "/elsewhere && ln -s ../elsewhere " .. ws .. "/.git/hooks"))
    local none, err, cause = airlock.exec { argv = { "true" }, workspace = ws }
    assert.is_nil(none)
    assert.equal("confinement", cause)
    assert.matches("tool.protect names .git/hooks, which is reached through a symbolic link", err)
    local plain = H.tmpdir()
    local res = assert(airlock.exec { argv = { "true" }, workspace = plain })
    assert.equal("ok", res.cause, res.message)
    assert.equal("skipped: not made, the directory before // not being there at the start (what the program " ..
      "makes there is its own, not protected): .git/hooks/ .git/config", res.confinement.protect)
    assert.same({}, core.fs_list(plain, ".", 10))
    -- So a program may make a repository there (git init works); it is its own.
    local init = assert(airlock.exec { argv = { "sh", "-c", "git init -q . && echo init=$?" }, workspace = plain })
    assert.equal("init=0\n", init.stdout)
    os.execute("rm -rf " .. ws .. " " .. plain)
  end)
end)

-- ------------------------------------------------------------ paths that do not exist yet, patterns

local util = require("airlock.util")
local PY = "/usr/bin/python3"

-- A Python program trying each step of an attack in turn and printing
-- "step errno" (or "step ok"), so a spec can name what stopped which.
local function py(steps)
  return PY .. " -c " .. util.shell_quote("import os, errno\n" ..
    "def t(name, f):\n" ..
    "  try:\n    f(); print(name, 'ok')\n" ..
    "  except OSError as e:\n    print(name, errno.errorcode[e.errno])\n" ..
    "def w(p, s):\n  with open(p, 'w') as f: f.write(s)\n" .. steps)
end

-- A world-writable scratch directory (the unprivileged runs write there).
local function scratch()
  local d = H.tmpdir()
  assert(os.execute("chmod 777 " .. d))
  return d
end

-- A policy file extending tool, readable by uid 65534.
local function policy_file(body)
  local dir = scratch()
  H.write(dir .. "/p.lua", "local policy = require 'airlock.policy'\nreturn " .. body .. "\n")
  assert(os.execute("chmod 755 " .. dir .. " && chmod 644 " .. dir .. "/p.lua"))
  return dir .. "/p.lua"
end

-- Every name in ws, as "a a/b ..." (sorted), to compare a workspace with itself.
local function tree(ws)
  return (H.sh("cd " .. ws .. " && find . -mindepth 1 | sort | tr '\\n' ' '"))
end

local NO_PROTECT = "{ unconfined = true, tool = { protect = policy.remove } }"   -- a bare table: layered over tool

describe("tool.protect on paths that do not exist yet", function()
  local cmd = core.fs_realpath(H.bin .. "/airlock")
  local no_protect

  setup(function() no_protect = policy_file(NO_PROTECT) end)

  -- The command as who, in ws, with --json: the decoded result.
  local function run(who, ws, program, pol)
    local as = who == "root" and "" or NOBODY
    local out = H.sh("{ cd " .. ws .. " && " .. as .. cmd .. " exec --json" .. (pol and (" --policy " .. pol) or "") ..
      " --workspace " .. ws .. " -- " .. program .. " 2>/dev/null; }")   -- the control's warning not in the JSON
    return assert(dk.decode(out), out)
  end

  local function unprivileged_ok()
    local probe = H.sh(NOBODY .. cmd .. " version 2>&1; echo rc=$?")
    return probe:match("rc=0"), probe
  end

  -- Each step succeeds unconfined (the control); under the stock policy,
  -- where .git/hooks and .git/config are missing, each fails.
  local REPO_ATTACK = py [[
t('mkdir hooks', lambda: os.makedirs('.git/hooks', exist_ok=True))
t('plant hook', lambda: w('.git/hooks/pre-commit', 'evil'))
w('.git/c', '[core]\n\tfsmonitor = evil\n'); w('.git/c2', '[core]\n\tfsmonitor = evil\n')
t('link onto config', lambda: os.link('.git/c', '.git/config'))
t('rename onto config', lambda: os.rename('.git/c2', '.git/config'))
t('symlink into hooks', lambda: os.symlink('/etc/passwd', '.git/hooks/post-checkout'))
t('rename .git away', lambda: (os.rename('.git', 'g'), os.rename('g', '.git')))
t('remove config', lambda: os.unlink('.git/config'))
t('remove hooks', lambda: os.rename('.git/hooks', '.git/h2'))
for p in ('.git/c', '.git/c2'):
  if os.path.exists(p): os.unlink(p)
]]

  for _, who in ipairs { "root", "uid 65534" } do
    it("a .git without hooks or config: both made empty, read-only, then gone; as " .. who, function()
      if who ~= "root" then
        local ok, probe = unprivileged_ok()
        if not ok then pending("skipped: uid 65534 cannot run " .. cmd .. " here: " .. probe) return end
      end
      local ws = scratch()
      assert(os.execute("mkdir -m 777 " .. ws .. "/.git"))
      local res = run(who, ws, REPO_ATTACK)
      assert.equal("ok", res.cause, res.message)
      assert.equal("applied: not there at the start, so made empty and read-only for the run (removed after " ..
        "it): .git/hooks/ .git/config", res.confinement.protect)
      assert.equal("mkdir hooks ok\nplant hook EROFS\nlink onto config EEXIST\nrename onto config EBUSY\n" ..
        "symlink into hooks EROFS\nrename .git away EBUSY\nremove config EBUSY\nremove hooks EBUSY\n", res.stdout)
      assert.equal("./.git ", tree(ws))   -- no placeholder left behind, nothing planted
      -- The control: the same program, the same user, no tool.protect.
      local ctl = run(who, ws, REPO_ATTACK, no_protect)
      assert.equal("mkdir hooks ok\nplant hook ok\nlink onto config ok\nrename onto config ok\n" ..
        "symlink into hooks ok\nrename .git away ok\nremove config ok\nremove hooks ok\n", ctl.stdout)
      assert.equal("evil", H.slurp(ws .. "/.git/h2/pre-commit"))
      os.execute("rm -rf " .. ws)
    end)
  end

  local ENV_ATTACK = py [[
t('symlink onto .env', lambda: os.symlink('/etc/passwd', '.env'))
t('remove .env', lambda: os.unlink('.env'))
t('create .env', lambda: w('.env', 'TOKEN=stolen'))
w('x', 'TOKEN=x'); w('y', 'TOKEN=y')
t('rename onto .env', lambda: os.rename('x', '.env'))
if os.path.exists('.env') and os.path.getsize('.env') > 0: os.unlink('.env')
t('link onto .env', lambda: os.link('y', '.env'))
for p in ('x', 'y'):
  if os.path.exists(p): os.unlink(p)
]]

  for _, who in ipairs { "root", "uid 65534" } do
    it("a missing .env (appended to tool.protect), as " .. who, function()
      if who ~= "root" then
        local ok, probe = unprivileged_ok()
        if not ok then pending("skipped: uid 65534 cannot run " .. cmd .. " here: " .. probe) return end
      end
      local ws = scratch()
      local pol = policy_file("policy.extend('tool', { tool = { protect = policy.append { '.env' } } })")
      local res = run(who, ws, ENV_ATTACK, pol)
      assert.equal("ok", res.cause, res.message)
      assert.equal("applied: not there at the start, so made empty and read-only for the run (removed after it): " ..
        ".env; not made, the directory before // not being there at the start (what the program makes there is " ..
        "its own, not protected): .git/hooks/ .git/config", res.confinement.protect)
      assert.equal("symlink onto .env EEXIST\nremove .env EBUSY\ncreate .env EROFS\nrename onto .env EBUSY\n" ..
        "link onto .env EEXIST\n", res.stdout)
      assert.equal("", tree(ws))
      local ctl = run(who, ws, ENV_ATTACK, no_protect)
      assert.equal("symlink onto .env ok\nremove .env ok\ncreate .env ok\nrename onto .env ok\n" ..
        "link onto .env ok\n", ctl.stdout)
      assert.equal("TOKEN=y", H.slurp(ws .. "/.env"))
      os.execute("rm -rf " .. ws)
    end)
  end

  local DEEP_ATTACK = py [[
t('write a/b/c/.env', lambda: w('a/b/c/.env', 'TOKEN=stolen'))
t('rename a/b/c away', lambda: (os.rename('a/b/c', 'a/b/d'), os.rename('a/b/d', 'a/b/c')))
t('write config/k.pem', lambda: w('config/k.pem', 'stolen'))
t('create .env', lambda: (w('.env', 'TOKEN=stolen'), os.unlink('.env')))
t('new n/.env', lambda: (os.makedirs('n'), w('n/.env', 'x'), os.unlink('n/.env'), os.rmdir('n')))
]]

  for _, who in ipairs { "root", "uid 65534" } do
    it("**/.env at depth 3 and config/*.pem: the matches there at the start, as " .. who, function()
      if who ~= "root" then
        local ok, probe = unprivileged_ok()
        if not ok then pending("skipped: uid 65534 cannot run " .. cmd .. " here: " .. probe) return end
      end
      local ws = scratch()
      assert(os.execute("cd " .. ws .. " && mkdir -p a/b/c config && echo TOKEN=1 > a/b/c/.env && " ..
        "echo key > config/k.pem && echo no > config/k.txt && chmod -R a+rwX ."))
      local before = tree(ws)
      local pol = policy_file("policy.extend('tool', { tool = { protect = policy.append { '**/.env', 'config/*.pem' } } })")
      local res = run(who, ws, DEEP_ATTACK, pol)
      assert.equal("ok", res.cause, res.message)
      assert.equal("applied: read-only in the workspace: a/b/c/.env config/k.pem; not there at the start, so made " ..
        "empty and read-only for the run (removed after it): .env; not made, the directory before // not being " ..
        "there at the start (what the program makes there is its own, not protected): .git/hooks/ .git/config; " ..
        "pattern **/.env: the 1 match there at the start, and .env at the top; one made during the run elsewhere " ..
        "is not protected; pattern config/*.pem: the 1 match there at the start; one made during the run " ..
        "elsewhere is not protected", res.confinement.protect)
      assert.equal("write a/b/c/.env EROFS\nrename a/b/c away EBUSY\nwrite config/k.pem EROFS\ncreate .env EROFS\n" ..
        "new n/.env ok\n", res.stdout)   -- the last: said in the report line
      assert.equal(before, tree(ws))
      assert.equal("TOKEN=1\n", H.slurp(ws .. "/a/b/c/.env"))
      local ctl = run(who, ws, DEEP_ATTACK, no_protect)
      assert.equal("write a/b/c/.env ok\nrename a/b/c away ok\nwrite config/k.pem ok\ncreate .env ok\n" ..
        "new n/.env ok\n", ctl.stdout)
      os.execute("rm -rf " .. ws)
    end)
  end

  it("leaves the workspace as it was when the program is killed, and after its parent is killed", function()
    local ws = scratch()
    assert(os.execute("mkdir " .. ws .. "/.git"))
    local dl = H.sh("cd " .. ws .. " && " .. cmd .. " exec --json --timeout 300ms -- sleep 5")
    assert.equal("deadline", assert(dk.decode(dl), dl).cause)
    assert.equal("./.git ", tree(ws))
    -- The parent itself killed mid-run: its placeholders stay (marked, empty);
    -- the next run takes them over and removes them after it.
    local pid = H.sh("cd " .. ws .. " && { " .. cmd .. " exec -- sleep " .. H.GUARD_S ..
      " >/dev/null 2>&1 & echo $!; }"):match("%d+")
    H.wait_until("the run's placeholders", function() return core.fs_stat(ws, ".git/config") end)
    assert.equal("./.git ./.git/config ./.git/hooks ", tree(ws))
    os.execute("kill -9 " .. pid)
    H.wait_until("the killed parent to be dead", function() return H.dead(pid) end)
    assert.equal("./.git ./.git/config ./.git/hooks ", tree(ws))   -- what a dead parent leaves
    local again = run("root", ws, "sh -c 'echo evil > .git/hooks/pre-commit; echo $?'")
    assert.equal("2\n", again.stdout)   -- still protected: taken over, not trusted as the user's
    assert.equal("./.git ", tree(ws))
    os.execute("rm -rf " .. ws)
  end)

  it("two runs sharing a workspace: the one that ends first leaves the other's placeholders", function()
    local ws = scratch()
    assert(os.execute("mkdir " .. ws .. "/.git"))
    local out = H.tmpdir() .. "/a.json"
    -- The first run goes on until the second has ended and been checked: it
    -- waits for "b-done" in the workspace, which this host makes then.
    os.execute("cd " .. ws .. " && { " .. cmd .. " exec --json -- sh -c 'i=0; until [ -e b-done ] || " ..
      "[ $i -ge " .. H.GUARD_S * 20 .. " ]; do sleep 0.05; i=$((i+1)); done; " ..
      "echo evil > .git/hooks/pre-commit; echo a=$?' > " .. out .. " 2>/dev/null & }")
    H.wait_until("the first run's placeholders", function() return core.fs_stat(ws, ".git/config") end)
    local b = run("root", ws, "true")
    assert.equal("ok", b.cause, b.message)
    assert.equal("applied: read-only in the workspace: .git/hooks .git/config", b.confinement.protect)
    assert.equal("./.git ./.git/config ./.git/hooks ", tree(ws))   -- the first run still holds them
    H.write(ws .. "/b-done", "")
    H.wait_until("the first run's result", function()
      local text = H.slurp(out)
      return text and text:match("}")
    end)
    os.remove(ws .. "/b-done")
    local a = assert(dk.decode(H.slurp(out)))
    assert.equal("a=2\n", a.stdout)   -- still read-only after the other run ended
    assert.equal("./.git ", tree(ws))
    os.execute("rm -rf " .. ws .. " " .. out:match("^(.*)/"))
  end)

  it("git commit works in a repository without hooks (made empty for the run)", function()
    local ws = scratch()
    assert(os.execute("cd " .. ws .. " && git init -q --template= . && git config user.email a@b && " ..
      "git config user.name a && echo one > f && git add f && git commit -qm one && chmod -R a+rwX ."))
    local before = tree(ws)
    local res = run("root", ws, "sh -c 'echo two >> f && git commit -qam two; echo commit=$?'")
    assert.equal("commit=0\n", res.stdout)
    assert.matches("made empty and read%-only for the run %(removed after it%): .git/hooks/$", res.confinement.protect)
    assert.matches("two", H.sh("cd " .. ws .. " && git log --oneline"))
    local after = tree(ws)
    assert.is_nil(after:find("hooks", 1, true))   -- the placeholder is gone
    for name in before:gmatch("%S+") do assert.truthy(after:find(name .. " ", 1, true), name) end   -- git's own added
    os.execute("rm -rf " .. ws)
  end)

  it("refuses a missing path beneath a symbolic link leading out, making nothing there", function()
    local ws, out = scratch(), scratch()
    assert(os.execute("ln -s " .. out .. " " .. ws .. "/conf"))
    local none, err, cause = airlock.exec { argv = { "true" }, workspace = ws,
      policy = policy.extend("tool", { tool = { protect = policy.append { "conf/keys/" } } }) }
    assert.is_nil(none)
    assert.equal("confinement", cause)
    assert.matches("confinement: tool.protect: conf is a symbolic link", err)
    assert.same({}, core.fs_list(out, ".", 10))
    os.execute("rm -rf " .. ws .. " " .. out)
  end)

  it("refuses a pattern past the walk's bound rather than protect part of it", function()
    local ws = scratch()
    assert(os.execute("cd " .. ws .. " && for i in $(seq 30); do mkdir d$i; done"))
    local P = require("airlock.protect")
    local bound = P.WALK_ENTRIES
    P.WALK_ENTRIES = 20
    local none, err, cause = airlock.exec { argv = { "true" }, workspace = ws,
      policy = policy.extend("tool", { tool = { protect = policy.append { "**/.env" } } }) }
    P.WALK_ENTRIES = bound
    assert.is_nil(none)
    assert.equal("confinement", cause)
    assert.matches("tool.protect's pattern %*%*/.env: the workspace holds more than 20 entries", err)
    assert.equal(nil, tree(ws):find(".git", 1, true))   -- refused before anything was made
    -- More matches than a run may protect (128): refused too, not cut short.
    assert(os.execute("cd " .. ws .. " && for i in $(seq 130); do : > k$i.pem; done"))
    none, err, cause = airlock.exec { argv = { "true" }, workspace = ws,
      policy = policy.extend("tool", { tool = { protect = policy.append { "*.pem" } } }) }
    assert.is_nil(none)
    assert.equal("confinement", cause)
    assert.matches("^confinement: tool.protect: protected paths must be at most 128", err)
    os.execute("rm -rf " .. ws)
  end)

  it("behaves as bubblewrap's --ro-bind does on an existing file", function()
    local attack = py [[
t('write', lambda: w('.env', 'x'))
w('x', '1')
t('rename', lambda: os.rename('x', '.env'))
t('unlink', lambda: os.unlink('.env'))
t('link', lambda: os.link('x', '.env'))
t('symlink', lambda: os.symlink('/etc/passwd', '.env'))
os.unlink('x')
]]
    local ws = scratch()
    H.write(ws .. "/.env", "TOKEN=1\n")
    local bw = H.sh("bwrap --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/bin /bin " ..
      "--proc /proc --dev /dev --bind " .. ws .. " " .. ws .. " --ro-bind " .. ws .. "/.env " .. ws .. "/.env --chdir " ..
      ws .. " " .. attack .. " 2>&1")
    if not bw:match("^write") then pending("skipped: bwrap does not run here: " .. bw) return end
    local pol = policy_file("policy.extend('tool', { tool = { protect = policy.append { '.env' } } })")
    local res = run("root", ws, attack, pol)
    assert.equal("write EROFS\nrename EBUSY\nunlink EBUSY\nlink EEXIST\nsymlink EEXIST\n", bw)
    assert.equal(bw, res.stdout)
    assert.equal("TOKEN=1\n", H.slurp(ws .. "/.env"))
    os.execute("rm -rf " .. ws)
  end)
end)

describe("tool.protect on a path whose directories are missing too", function()
  local cmd = core.fs_realpath(H.bin .. "/airlock")
  local ATTACK = py [[
t('make conf/keys', lambda: os.makedirs('conf/keys', exist_ok=True))
t('plant a key', lambda: w('conf/keys/k', 'evil'))
t('rename conf away', lambda: (os.rename('conf', 'c2'), os.rename('c2', 'conf')))
t('remove keys', lambda: os.rename('conf/keys', 'conf/k2'))
t('write beside', lambda: (w('conf/other', 'fine'), os.unlink('conf/other')))
]]
  for _, who in ipairs { "root", "uid 65534" } do
    it("makes them first (the program cannot make the parent before), and removes them after, as " .. who, function()
      local as = who == "root" and "" or NOBODY
      if who ~= "root" and not H.sh(as .. cmd .. " version 2>&1; echo rc=$?"):match("rc=0") then
        pending("skipped: uid 65534 cannot run " .. cmd .. " here") return
      end
      local ws = scratch()
      local pol = policy_file("policy.extend('tool', { tool = { protect = policy.append { 'conf/keys/' } } })")
      local function go(p)
        local out = H.sh("{ cd " .. ws .. " && " .. as .. cmd .. " exec --json --policy " .. p .. " -- " .. ATTACK ..
          " 2>/dev/null; }")
        return assert(dk.decode(out), out)
      end
      local res = go(pol)
      assert.equal("ok", res.cause, res.message)
      assert.equal("make conf/keys ok\nplant a key EROFS\nrename conf away EBUSY\nremove keys EBUSY\nwrite beside ok\n",
        res.stdout)
      assert.matches("made empty and read%-only for the run %(removed after it%): conf/keys/;", res.confinement.protect)
      assert.equal("", tree(ws))
      local ctl = go(policy_file("{ unconfined = true, tool = { protect = policy.remove } }"))
      assert.equal("make conf/keys ok\nplant a key ok\nrename conf away ok\nremove keys ok\nwrite beside ok\n", ctl.stdout)
      os.execute("rm -rf " .. ws)
    end)
  end
end)
