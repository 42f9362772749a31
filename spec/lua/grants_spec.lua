-- grants_spec.lua -- a program's Landlock paths are one list of grants
-- ({path, rights, why}, airlock.policy.grants), and the planner reads them
-- and nothing else: the policy's lists, the workspace, tool.grant, another
-- root file system and airlock exec's own programs all arrive as grants; a
-- path only the section names, with no grant, reaches no rule.
require "airlock"   -- loads the module, whose Lua parts these are
local policy = require "airlock.policy"
local grants = require "airlock.policy.grants"
local confine = require "airlock.confine"

local function paths(list)
  local out = {}
  for i, g in ipairs(list) do out[i] = g.path .. ":" .. g.rights end
  return out
end

describe("a program's grants", function()
  it("are the policy's lists, the workspace and tool.grant, in that order, each with why", function()
    local tool = policy.extend("tool", { tool = { grant = { read = { "/srv/data" }, write = { "/srv/out" },
                                                             exec = { "/opt/tool" } } } }).tool
    local list = assert(grants.of_policy(tool, "/tmp/ws", "t"))
    local l = grants.lists(list)
    assert.same({ "/usr", "/lib", "/lib64", "/bin", "/etc", "/dev/null", "/dev/urandom", "/dev/zero", "/tmp/ws",
                  "/srv/data", "/srv/out", "/opt/tool" }, l.read)
    assert.same({ "/dev/null", "/tmp/ws", "/srv/out" }, l.write)
    assert.same({ "/usr", "/lib", "/lib64", "/bin", "/etc", "/tmp/ws", "/opt/tool" }, l.exec)   -- tool.workspace_exec
    for _, g in ipairs(list) do assert.is_string(g.why) end
    -- the same lists as the tool authority's spawn options
    local auth = assert(policy.authority(policy.extend("tool", { tool = { grant = { read = { "/srv/data" },
      write = { "/srv/out" }, exec = { "/opt/tool" } } } }), "tool", { workspace = "/tmp/ws" }))
    assert.same(l.read, auth.confine.landlock.read)
    assert.same(l.write, auth.confine.landlock.write)
    assert.same(l.exec, auth.confine.landlock.exec)
  end)

  it("refuse tool.grant of /, naming the policy", function()
    local tool = policy.extend("tool", { tool = { grant = { exec = { "/" } } } }).tool
    local list, err = grants.of_policy(tool, nil, "wide")
    assert.is_nil(list)
    assert.matches("policy 'wide': tool.grant.exec cannot grant /", err)
  end)

  it("under another root file system keep only devices, the workspace and what is written", function()
    local list = {
      { path = "/usr", rights = "x", why = "p" }, { path = "/dev/null", rights = "rw", why = "p" },
      { path = "/tmp/ws", rights = "rw", why = "ws" }, { path = "/srv/out", rights = "rw", why = "g" },
    }
    assert.same({ "/r/usr:rx", "/dev/null:rw", "/tmp/ws:rw", "/srv/out:w" },
      paths(grants.rootfs(list, { "/r/usr" }, "/tmp/ws")))
  end)

  it("take airlock.spawn's own lists, a list of one path written as the path", function()
    local list = grants.of_landlock({ read = "/etc", exec = { "/usr", "/lib" }, connect = { 80 } }, "spawn")
    assert.same({ "/etc:r", "/usr:x", "/lib:x" }, paths(list))
    assert.equal("spawn.read", list[1].why)
    assert.same({}, grants.of_landlock(true, "spawn"))
  end)

  it("add exec's own programs and the terminal; lists hold each path once", function()
    local list = {}
    grants.command(list, "/opt/airlock/bin/airlock")
    grants.init(list, "/opt/airlock/bin/airlock-init")
    grants.terminal(list, { "/dev/tty", "/dev/pts/3", "/dev/tty" })
    local l = grants.lists(list)
    assert.same({ "/opt/airlock/bin/airlock", "/opt/airlock/bin/airlock-init" }, l.exec)
    assert.same({ "/dev/tty", "/dev/pts/3" }, l.write)
    assert.same({ "/opt/airlock/bin/airlock", "/opt/airlock/bin/airlock-init" }, grants.runnable(list))
  end)
end)

describe("the planner", function()
  local function plan(section, list)
    return assert(confine.plan { role = "program", confine = section, grants = list, limits = {}, tmp = "none",
                                 root = false })
  end

  it("takes Landlock's paths from the grants alone, its ports and scope from the section", function()
    local p = plan({ landlock = { read = { "/only/in/the/section" }, connect = { 8080 }, scope = true } },
      { { path = "/granted", rights = "r", why = "a test" } })
    assert.same({ "/granted" }, p.start.confine.landlock.read)
    assert.same({ 8080 }, p.start.confine.landlock.connect)
    assert.is_true(p.start.confine.landlock.scope)
    assert.matches("read /granted;", p.layers.landlock)
    -- the control: the same grant as a write shows in the write list instead
    local w = plan({ landlock = true }, { { path = "/granted", rights = "w", why = "a test" } })
    assert.is_nil(w.start.confine.landlock.read)
    assert.same({ "/granted" }, w.start.confine.landlock.write)
  end)

  it("grants nothing where Landlock is off", function()
    local p = plan({}, { { path = "/granted", rights = "rwx", why = "a test" } })
    assert.is_nil(p.start.confine.landlock)
    assert.matches("^skipped", p.layers.landlock)
  end)

  it("keeps seccomp's promises a list of words, adding inet for a network as one more word", function()
    local section = { namespaces = { "net" }, seccomp = { promises = { "stdio", "rpath" } }, landlock = true }
    local p = plan(section)
    assert.same({ "stdio", "rpath" }, p.start.confine.seccomp.promises)
    assert.matches("promises stdio rpath;", p.layers.seccomp)
    local n = assert(confine.plan { role = "program", confine = section, limits = {}, tmp = "none",
                                    root = false, network = { allow = { "example.org:443" } } })
    assert.same({ "stdio", "rpath", "inet" }, n.start.confine.seccomp.promises)
    assert.same({ "stdio", "rpath" }, section.seccomp.promises)   -- the section itself is left as it was
  end)

  it("takes one shape: a run without a role, or with another, is an error", function()
    assert.has_error(function() confine.plan { confine = {} } end, "confine.plan: run.role must be \"guest\" or \"program\"")
    assert.has_error(function() confine.plan({}, "guest") end)
  end)
end)
