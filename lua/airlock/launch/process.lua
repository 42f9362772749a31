-- airlock.launch.process -- airlock.spawn: a plain program, started confined
-- under no policy (its own confine spec, planned by the one planner, so its
-- result has the confinement report), through the one start function; and
-- the process object it gives.
local core = require "airlock.core"
local policy = require "airlock.policy"
local program = require "airlock.program"
local util = require "airlock.util"
local confine = require "airlock.confine"
local grants = require "airlock.policy.grants"
local spec = require "airlock.launch.spec"
local launch = require "airlock.launch.start"

local M = {}

local SPAWN_KEYS = { argv = true, confine = true, namespaces = true, rlimits = true, env = true,
                     workdir = true, workspace = true, deadline_ms = true, capture = true }

local function spawn_env(env)
  if env == nil then return nil end
  if type(env) ~= "table" then error("spawn: 'env' must be a list of \"K=V\" or a map", 3) end
  local out, path = {}, nil
  for i, v in ipairs(env) do
    if type(v) ~= "string" or not v:find("=", 1, true) then
      error(string.format("spawn: env[%d] must be a \"K=V\" string", i), 3)
    end
    out[#out + 1] = v
  end
  for k, v in pairs(env) do
    if math.type(k) ~= "integer" then
      if type(k) ~= "string" or type(v) ~= "string" then error("spawn: env must map names to strings", 3) end
      out[#out + 1] = k .. "=" .. v
    end
  end
  table.sort(out)
  for _, kv in ipairs(out) do path = path or kv:match("^PATH=(.*)") end
  return out, path
end

local process_methods = {}
local process_mt = { __index = process_methods }

--- p:wait() -> result {ok, cause, exit_code, signal, stdout, stderr, usage, message}.
function process_methods:wait()
  local id = self._run:id()
  while not self._result and self._run:live() do
    local done, err = self._broker:step(-1)
    if not done then return nil, err end
    for _, res in ipairs(done) do if res.run == id then self._result = res end end
  end
  return self._result or self._run:result()
end

--- p:kill(): ends the process (and everything it started); wait() then says cancelled.
function process_methods:kill()
  if self._run:live() then self._run:cancel() end
  return true
end

--- p:pid() -> the pid, or nil once it has ended.
function process_methods:pid() return self._run:pid() end

function process_mt.__close(p) p._broker:close() end
process_mt.__gc = process_mt.__close

--- airlock.spawn{argv = {...}, confine = spec, namespaces = {...} | "all", rlimits = {...},
--- env = {"K=V"} | {K = "V"}, workdir = path, deadline_ms = ms | "2s", capture = bytes | "64K"}
--- -> process, or nil, message, errno. A plain program, started confined: namespaces,
--- rlimits (policy units), a capability drop (with a user namespace, or as root), then the confinement
--- spec (airlock.confine's form; its seccomp filter must allow execve: promise 'exec').
--- In kill mode a refused call ends the run with cause seccomp, the call named.
function M.spawn(opts)
  if type(opts) ~= "table" then error("spawn: expects a table {argv = {...}, ...}", 2) end
  for k in pairs(opts) do
    if not SPAWN_KEYS[k] then error(string.format("spawn: unknown option '%s'", tostring(k)), 2) end
  end
  local argv = opts.argv
  if type(argv) ~= "table" or type(argv[1]) ~= "string" then
    error("spawn: 'argv' must be a list {program, args...} of strings", 2)
  end
  local env, path = spawn_env(opts.env)
  argv = { table.unpack(argv) }
  argv[1] = program.find(argv[1], path)   -- in the child's PATH, else the usual one
  if not argv[1] then return nil, "spawn: '" .. opts.argv[1] .. "' not found in PATH", 2 end
  local schema = policy.SCHEMA.confine
  local namespaces, rlimits
  if opts.namespaces ~= nil then
    local why
    namespaces, why = schema.namespaces(opts.namespaces)
    if not namespaces then error("spawn: 'namespaces' must be " .. why, 2) end
  end
  if opts.rlimits ~= nil then
    if type(opts.rlimits) ~= "table" then error("spawn: 'rlimits' must be a table", 2) end
    rlimits = {}
    for k, v in pairs(opts.rlimits) do
      local check = schema.rlimits[k]
      if not check then error(string.format("spawn: unknown rlimit '%s'", tostring(k)), 2) end
      local val, why = check(v)
      if not val then error(string.format("spawn: rlimits.%s must be %s", k, why), 2) end
      rlimits[k] = val
    end
  end
  local function unit(name, parse)
    if opts[name] == nil then return nil end
    local v, why = parse(opts[name])
    if not v then error(string.format("spawn: '%s' must be %s", name, why), 3) end
    return v
  end
  -- The workspace: the working directory (unless workdir says otherwise),
  -- bound nosuid in the program's mount namespace and, when root, idmapped.
  local workspace = opts.workspace
  if workspace ~= nil then
    if type(workspace) ~= "string" or workspace:sub(1, 1) ~= "/" then
      error("spawn: 'workspace' must be an absolute directory path", 2)
    end
    local mount = false
    for _, ns in ipairs(namespaces or {}) do mount = mount or ns == "mount" end
    if not mount then
      error("spawn: 'workspace' needs the mount namespace (it is bound nosuid there, and idmapped when root)", 2)
    end
    local real = core.fs_realpath(workspace)
    local wok, werr = program.check_workspace(real or workspace,
      type(opts.confine) == "table" and type(opts.confine.landlock) == "table" and opts.confine.landlock or nil)
    if not wok then return nil, werr, "workspace" end
    if opts.workdir ~= nil and opts.workdir ~= workspace then
      error("spawn: 'workdir' and 'workspace' differ; a workspace is the working directory", 2)
    end
  end
  -- Its confinement: the one planner (airlock.confine), on spawn's own spec
  -- (a copy: the planner fills in what it decides). A refused call kills the
  -- run unless the spec says otherwise (a program under a policy gets an
  -- errno). Capabilities are dropped wherever that is possible.
  -- Promises written as one string of words ("stdio rpath") become the
  -- list every other run has, here where they come in.
  local own = type(opts.confine) == "table" and util.copy(opts.confine) or nil
  local sc = own and type(own.seccomp) == "table" and own.seccomp
  if sc and sc.refuse == nil then sc.refuse = "kill" end
  if sc and type(sc.promises) == "string" then
    local words = {}
    for w in sc.promises:gmatch("[^%s,]+") do words[#words + 1] = w end
    sc.promises = words
  end
  own = own or {}
  local plan, perr = confine.plan {
    role = "program",
    confine = { namespaces = namespaces, rlimits = rlimits, no_new_privs = own.no_new_privs,
                landlock = own.landlock, seccomp = own.seccomp },
    grants = grants.of_landlock(own.landlock, "airlock.spawn's confine.landlock"),
    limits = { pids = 0 }, tmp = "none", root = program.is_root(),
  }
  if not plan then return nil, perr, "confinement" end
  local start = plan.start
  -- Spawn's Landlock refuses what no rule lists, in the host's own tree: the
  -- view the planner makes for a policy's program (only what Landlock grants,
  -- bound in its mount namespace) is exec's, not spawn's.
  start.view_ro, start.view_rw = nil, nil
  start.confine = opts.confine ~= nil and (type(opts.confine) == "table" and own or opts.confine) or nil
  start.env, start.workdir, start.workspace = env, opts.workdir or workspace, workspace ~= nil or nil
  local b = core.broker()
  local run, err, code = launch.start(b, spec.process {
    name = argv[1], argv = argv, plan = plan,
    deadline_ms = unit("deadline_ms", policy.parse_duration), capture = unit("capture", policy.parse_size),
  })
  if not run then b:close(); return nil, err, code end
  return setmetatable({ _broker = b, _run = run }, process_mt)
end

return M
