-- airlock.exec -- the tool tier: any program, run confined by a policy's
-- `tool` authority, with bounded capture, secrets kept out of what it prints,
-- and the same effects channel as guests (fd 3; `airlock call` inside).
--
-- What a program gets, from the policy (stock: policies/tool.lua):
--   namespaces, rlimits, no_new_privs, Landlock and seccomp (tool.confine);
--   a capability drop (always); one writable workspace (its working
--   directory); HOME (tool.home: the workspace, with the caller's git
--   configuration shown read-only, or the caller's home, read-only, showing
--   its git and shell configuration alone); a private /tmp (tool.tmp = "private": a tmpfs in its own mount
--   namespace) or none; a pids cgroup (tool.limits.pids); an environment that
--   starts empty: tool.env, then the caller's env, then tool.secrets.
local core = require "airlock.core"
local policy = require "airlock.policy"
local secrets = require "airlock.secrets"
local program = require "airlock.program"
local util = require "airlock.util"
local ledger_mod = require "airlock.ledger"
local violations = require "airlock.violations"
local egress = require "airlock.egress"
local network = require "airlock.policy.network"
local confine_mod = require "airlock.confine"
local grants = require "airlock.policy.grants"
local registry = require "airlock.launch.registry"
local run_spec = require "airlock.launch.spec"
local launch = require "airlock.launch.start"
local overlay = require "airlock.workspace.overlay"

local M = {}

local EXEC_KEYS = { argv = true, policy = true, workspace = true, stdin = true, stdin_file = true,
                    stdin_inherit = true, output = true, terminal = true, rootfs = true, env = true,
                    timeout = true, capture = true, home = true,
                    stream = true, ledger = true, durability = true, review = true, observe = true,
                    digest = true }

local function fail(msg, level) error("exec: " .. msg, (level or 1) + 1) end

-- The worker in use (AIRLOCK_WORKER, as the sanitizer suite sets it) marks
-- the build whose command and init go with a program.
local function worker_dir()
  local w = os.getenv("AIRLOCK_WORKER") or core.worker_path()
  return w and w:match("^(.*)/[^/]+$")
end

-- The airlock command beside the worker, so `airlock call` can run inside.
local command_cache
local function airlock_command()
  if command_cache == nil then
    command_cache = false
    local dir = worker_dir()
    -- beside it (a build), PREFIX/bin from libexec/airlock, TREE/bin from a
    -- luarocks tree's lib/lua/5.4
    for _, rel in ipairs { "/airlock", "/../../bin/airlock", "/../../../bin/airlock" } do
      local p = dir and core.fs_realpath(dir .. rel)
      if p then command_cache = p; break end
    end
  end
  return command_cache or nil
end

-- airlock-init, PID 1 of the program's pid namespace (init/main.c), beside the worker.
local function init_program()
  local dir = worker_dir()
  local p = dir and core.fs_realpath(dir .. "/airlock-init")
  return p
end

-- The run's environment: nothing of the host's. tool.env (the allowlist with
-- values), HOME = the workspace, TMPDIR with a private /tmp, the caller's env,
-- then each declared secret under its variable.
local function environment(auth, opts, workspace, secret_values, net)
  local env = {}
  for k, v in pairs(auth.env or {}) do env[k] = v end
  -- With tool.network, the run's egress proxy (airlock.egress), in every spelling.
  if net then for k, v in pairs(egress.env()) do env[k] = v end end
  env.HOME = workspace
  env.PWD = workspace
  if auth.tmp == "private" then env.TMPDIR = "/tmp" end
  if opts.env ~= nil then
    if type(opts.env) ~= "table" then fail("'env' must be a table {NAME = \"value\"}", 4) end
    for k, v in pairs(opts.env) do
      if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then
        fail("env: '" .. tostring(k) .. "' is not an environment variable name", 4)
      end
      if type(v) ~= "string" then fail("env." .. k .. " must be a string", 4) end
      env[k] = v
    end
  end
  for var, name in pairs(auth.secrets or {}) do
    local v = secret_values[name]
    if v == nil then
      return nil, string.format("policy: tool.secrets.%s names the secret '%s', which the policy's " ..
        "secrets section does not declare", var, name)
    end
    env[var] = v
  end
  return env
end

-- Splits new output into complete lines for opts.stream (complete = true; the
-- newline is not passed); the rest waits, and comes last with complete = false.
local function streamer(fn, redact)
  local pending = { stdout = "", stderr = "" }
  local sent = { stdout = 0, stderr = 0 }
  local function emit(which, text, final)
    local buf = pending[which] .. text
    local from = 1
    while true do
      local nl = buf:find("\n", from, true)
      if not nl then break end
      local line = buf:sub(from, nl - 1)
      fn(which, redact and redact(line) or line, true)
      from = nl + 1
    end
    pending[which] = buf:sub(from)
    if final and pending[which] ~= "" then
      fn(which, redact and redact(pending[which], true) or pending[which], false)
      pending[which] = ""
    end
  end
  return {
    poll = function(run)
      for _, which in ipairs { "stdout", "stderr" } do
        local more = run:output(which, sent[which])
        if more and #more > 0 then
          sent[which] = sent[which] + #more
          emit(which, more)
        end
      end
    end,
    finish = function(res)
      -- What arrived between the last poll and the exit, from the result.
      for _, which in ipairs { "stdout", "stderr" } do
        local all = res[which] or ""
        emit(which, all:sub(sent[which] + 1), true)
      end
    end,
  }
end

--- The policy for a program (policy.resolve): a stock name or file, a policy,
--- or a bare table laid over the stock tool policy. Default: "tool".
function M.resolve_policy(p)
  if p ~= nil and type(p) ~= "string" and type(p) ~= "table" then
    fail("'policy' must be a policy table, a stock policy name or a file path", 3)
  end
  return policy.resolve(p, "tool")
end

-- ------------------------------------------------------------ the steps of exec
-- Each step takes the job (what exec has made so far: opts, argv, pol, auth,
-- workspace, env, ...) and adds to it; a step returns true, or nil, message,
-- cause word[, exit status]. A mistake in opts is raised at exec's caller:
-- fail(..., 3) from a step (1 fail, 2 the step, 3 exec, 4 its caller).

-- The options: their names and types, and which go together.
local function check_options(opts)
  if type(opts) ~= "table" then fail("expects a table {argv = {...}, ...}", 3) end
  for k in pairs(opts) do
    if not EXEC_KEYS[k] then fail(string.format("unknown option '%s'", tostring(k)), 3) end
  end
  local argv = opts.argv
  if type(argv) ~= "table" or type(argv[1]) ~= "string" or argv[1] == "" then
    fail("'argv' must be a list {program, args...} of strings", 3)
  end
  for i, a in ipairs(argv) do
    if type(a) ~= "string" then fail(string.format("argv[%d] must be a string", i), 3) end
  end
  if opts.stream ~= nil and type(opts.stream) ~= "function" then
    fail("'stream' must be a function(which, line, complete)", 3)
  end
  if opts.output ~= nil and opts.output ~= "capture" and opts.output ~= "inherit" then
    fail("'output' must be \"capture\" (the result holds stdout and stderr) or \"inherit\" " ..
         "(the program writes to this process's own)", 3)
  end
  if opts.terminal ~= nil and type(opts.terminal) ~= "boolean" then fail("'terminal' must be a boolean", 3) end
  if opts.digest ~= nil and type(opts.digest) ~= "boolean" then fail("'digest' must be a boolean", 3) end
  if opts.terminal and (opts.output == "capture" or opts.stream or opts.stdin ~= nil or opts.stdin_file ~= nil) then
    fail("'terminal' gives the program a terminal of its own, relayed to this process's stdin and stdout; " ..
         "it takes no 'output', 'stream', 'stdin' or 'stdin_file'", 3)
  end
  local inherit_output = opts.output == "inherit" or opts.terminal == true
  if inherit_output and opts.stream then fail("'stream' needs output = \"capture\"", 3) end
  if opts.stdin_inherit ~= nil and type(opts.stdin_inherit) ~= "boolean" then
    fail("'stdin_inherit' must be a boolean", 3)
  end
  if opts.stdin_inherit and (opts.stdin ~= nil or opts.stdin_file ~= nil) then
    fail("give one of 'stdin', 'stdin_file' and 'stdin_inherit'", 3)
  end
  return { opts = opts, argv = argv, inherit_output = inherit_output }
end

-- The policy's tool authority, admitted for programs.
local function authority(job)
  local pol = job.pol
  local admitted, adm_err = policy.admit(pol, "tool", "programs")
  if not admitted then return nil, adm_err, "confinement" end
  local auth, aerr = policy.authority(pol, "tool", { workspace = nil })
  if not auth then return nil, aerr, "policy" end
  job.auth = auth
  return true
end

-- The workspace: the caller's, else the policy's; it must exist. The
-- authority is made again for it, with what exec adds to the spawn options:
-- /tmp, the pids cgroup, secrets; and the program's grants start as the
-- policy's (airlock.policy.grants: the one list of its Landlock paths).
local function workspace_of(job)
  local opts, pol = job.opts, job.pol
  local ws_in = opts.workspace or job.auth.workdir or "."
  if type(ws_in) ~= "string" then fail("'workspace' must be a directory path", 3) end
  local workspace = core.fs_realpath(ws_in)
  local st = workspace and core.fs_stat(workspace, ".")
  if not workspace or not st or st.type ~= "dir" then
    return nil, string.format("workspace: %s is not an existing directory", ws_in), "workspace"
  end
  local wok, werr = program.check_workspace(workspace, job.auth.confine and job.auth.confine.landlock)
  if not wok then return nil, werr, "workspace" end
  local auth = policy.authority(pol, "tool", { workspace = workspace })
  local tool = pol.tool
  auth.tmp = tool.tmp or "none"
  auth.home = tool.home or policy.default("tool.home")
  auth.secrets = {}
  for var, name in pairs(tool.secrets or {}) do auth.secrets[var] = name end
  job.auth, job.tool, job.workspace = auth, tool, workspace
  job.grants = assert(grants.of_policy(tool, workspace, policy.label(pol)))
  return true
end

-- Secrets, the network and the environment; timeout and capture, which may
-- only tighten the policy's limits.
local function environment_of(job)
  local opts, auth = job.opts, job.auth
  local values, serr = secrets.resolve(job.pol.secrets)
  if not values then return nil, serr, "secrets" end
  if job.inherit_output and next(auth.secrets) then
    return nil, "exec: the policy hands the program secrets (tool.secrets), which are redacted from what " ..
      "it prints; with output = \"inherit\" nothing could be redacted, so capture its output instead", "policy"
  end
  local net = egress.configured(job.tool.network) and job.tool.network or nil
  local env, eerr = environment(auth, opts, job.workspace, values, net)
  if not env then return nil, eerr, "policy" end
  local function tighten(name, parse, limit, over)
    if opts[name] == nil then return limit end
    local v, why = parse(opts[name])
    if not v then fail("'" .. name .. "' must be " .. why, 4) end
    if limit and limit > 0 and v > limit then return nil, string.format(over, v, limit) end
    return v
  end
  local deadline, terr = tighten("timeout", policy.parse_duration, auth.deadline_ms,
    "exec: timeout %d ms is over the policy's tool.limits.deadline_ms (%d ms)")
  if terr then return nil, terr, "policy" end
  local capture, cerr = tighten("capture", policy.parse_size, auth.capture,
    "exec: capture %d bytes is over the policy's tool.limits.capture (%d)")
  if cerr then return nil, cerr, "policy" end
  job.values, job.net, job.env, job.deadline, job.capture = values, net, env, deadline, capture
  return true
end

-- Another root file system: it takes the place of the system paths the
-- policy names (read and exec), read-only; the devices it names stay.
local function root_file_system(job)
  local opts, workspace = job.opts, job.workspace
  if opts.rootfs == nil then return true end
  if type(opts.rootfs) ~= "string" then fail("'rootfs' must be a directory path", 3) end
  local rootfs = core.fs_realpath(opts.rootfs)
  local rst = rootfs and core.fs_stat(rootfs, ".")
  if not rst or rst.type ~= "dir" then
    return nil, string.format("rootfs: %s is not an existing directory", opts.rootfs), "rootfs", 125
  end
  if rootfs == "/" then
    return nil, "rootfs: / is the host's own root; give the directory of another root file system", "rootfs", 125
  end
  if program.beneath(workspace, rootfs) then
    return nil, string.format("rootfs: the workspace %s lies inside the root file system %s; keep it outside",
      workspace, rootfs), "rootfs", 125
  end
  if not job.tool.confine.landlock then
    return nil, "rootfs: the policy has no Landlock rules to replace (tool.confine.landlock)", "policy", 125
  end
  -- Landlock's rules go on each top-level entry: the view binds them one by
  -- one at /NAME, and a rule on the directory above would not be reached.
  local entries = {}
  local names = core.fs_list(rootfs, ".", 4096) or {}
  table.sort(names)
  for _, name in ipairs(names) do
    local own = name == "dev" or name == "proc" or name == "sys" or name == "tmp"
    local st = not own and core.fs_realpath_in(rootfs, "/" .. name)
    -- a symbolic link (bin -> usr/bin) is remade in the view, its target an entry too
    if st and st.real == rootfs .. "/" .. name then entries[#entries + 1] = st.real end
  end
  job.grants = grants.rootfs(job.grants, entries, workspace)
  job.rootfs = rootfs
  return true
end

-- airlock's own programs inside: the airlock command (`airlock call`) and
-- airlock-init (PID 1 of the pid namespace, which runs the program as PID 2),
-- both runnable; neither may lie in the workspace, where the program could
-- rewrite what the host runs later.
local function installation(job)
  local env, workspace = job.env, job.workspace
  local cmd = airlock_command()
  local cmd_dir = cmd and cmd:match("^(.*)/[^/]+$")
  job.path = env.PATH or program.DEFAULT_PATH
  job.policy_exec = {}   -- what the policy itself lets programs run, for messages
  if job.tool.confine.landlock then
    for _, p in ipairs(grants.runnable(job.grants)) do
      if p ~= workspace then job.policy_exec[#job.policy_exec + 1] = p end
    end
  end
  -- HOME (tool.home), and the caller's git configuration shown read-only.
  local caller = job.opts.home
  if caller ~= nil and type(caller) ~= "string" then fail("'home' must be a directory path", 4) end
  local given = job.opts.env or {}
  if not job.rootfs and not given.HOME then   -- (another root file system holds none of the caller's files)
    local home, files, git = program.home(job.auth.home, caller or os.getenv("HOME"), workspace,
      job.auth.tmp == "private")
    env.HOME = home
    if git and env.GIT_CONFIG_GLOBAL == nil then env.GIT_CONFIG_GLOBAL = git end
    grants.home(job.grants, files)
  end
  if cmd then
    env.PATH = job.path .. ":" .. cmd_dir
    env.AIRLOCK = cmd
    grants.command(job.grants, cmd)
  end
  local ns = util.set_of(job.auth.namespaces)   -- the namespaces the program gets
  local init = ns.pid and init_program()
  if ns.pid and not init then
    return nil, string.format("exec: airlock-init is missing beside the worker (%s); rebuild or reinstall " ..
      "airlock (make build, make install)", tostring(worker_dir())), "exec"
  end
  if init then grants.init(job.grants, init) end
  for _, p in ipairs { cmd or false, core.fs_realpath(core.worker_path() or "") or false } do
    if p and program.beneath(p, workspace) then
      return nil, string.format("workspace: %s holds %s, part of the airlock installation that the host " ..
        "runs later; a program may change its workspace, so give a directory of its own", workspace, p),
        "workspace"
    end
  end
  job.cmd, job.cmd_dir, job.ns, job.init = cmd, cmd_dir, ns, init
  return true
end

-- The program, found as a shell inside would find it: in PATH, passing over
-- directories the program cannot run from; "./prog" in the workspace.
local function locate(job)
  local landlock = job.tool.confine.landlock
  local exec_roots = {}
  for _, p in ipairs(grants.runnable(job.grants)) do exec_roots[#exec_roots + 1] = core.fs_realpath(p) or p end
  local found, passed, fstatus = program.locate(job.argv[1], {
    path = job.path, cwd = job.workspace, root = job.rootfs,
    runnable = function(real)
      if not landlock then return true end
      for _, r in ipairs(exec_roots) do if program.beneath(real, r) then return true end end
      return string.format("tool.confine.landlock.exec grants %s%s; grant its directory in a policy that " ..
        "extends tool: tool = { grant = { exec = { \"%s\" } } } (docs/TOOLS.md, \"Granting more\")",
        table.concat(job.policy_exec, " "), job.tool.workspace_exec and " and the workspace" or "",
        real:match("^(.*)/[^/]*$") or real)
    end,
  })
  if not found then return nil, "exec: " .. passed, "exec", fstatus end
  job.found = found
  if passed then
    local dir = (passed.real or passed.path):match("^(.*)/[^/]*$")
    job.path_passed = string.format("'%s' at %s %s; ran %s instead%s", job.argv[1], passed.path,
      passed.real and "is outside what the policy lets programs run" or ("is " .. passed.why), found,
      passed.real and string.format(" (tool = { grant = { exec = { \"%s\" } } } would grant its directory)", dir)
      or "")
  end
  job.full = table.move(job.argv, 1, #job.argv, 1, {})   -- as given: argv[1] stays as typed
  return true
end

-- A terminal of its own: its stdin, stdout and stderr, its controlling
-- terminal (airlock-init makes it so), and /dev/tty in its Landlock rules
-- and its view (opened before the plan, which makes both). -> the pty, or nil.
local function terminal(job)
  if not job.opts.terminal then return nil end
  local pty = core.pty_open()
  local pts
  job.pty_fd, pts = pty:slave()
  grants.terminal(job.grants, { "/dev/tty", pts })
  return pty
end

-- Everything else about its confinement: the one planner (airlock.confine),
-- and the spawn options exec adds to the plan's.
local function plan_of(job)
  local opts, tool, auth = job.opts, job.tool, job.auth
  local plan, perr = confine_mod.plan {
    role = "program", confine = tool.confine, grants = job.grants,
    limits = tool.limits, tmp = auth.tmp, workspace = job.workspace, rootfs = job.rootfs, protect = tool.protect,
    keep = job.cmd_dir and { job.cmd_dir } or nil, effects = job.cmd, root = program.is_root(), network = job.net,
  }
  if not plan then return nil, perr, "confinement" end
  local envlist = {}
  for k, v in pairs(job.env) do envlist[#envlist + 1] = k .. "=" .. v end
  table.sort(envlist)
  local start, inherit = plan.start, job.inherit_output
  start.path, start.env, start.workdir = job.found, envlist, job.workspace
  start.stdin, start.stdin_file, start.stdin_fd = opts.stdin, opts.stdin_file, opts.stdin_inherit and 0 or nil
  start.stdout_fd, start.stderr_fd = inherit and 1 or nil, inherit and 2 or nil
  if job.pty_fd then start.stdin_fd, start.stdout_fd, start.stderr_fd = job.pty_fd, job.pty_fd, job.pty_fd end
  start.workspace = job.ns.mount or nil   -- bound nosuid, nodev; idmapped to the caller when root
  start.init_program = job.init or nil
  start.rootfs = job.rootfs
  job.overlay = overlay.configured(tool)   -- tool.overlay: the workspace copy-on-write, bounded
  local ook, oerr = overlay.plan(job.overlay, start)
  if not ook then return nil, oerr, "policy" end
  if opts.observe or (job.net and start.confine) then
    local c = {}
    for k, v in pairs(start.confine or {}) do c[k] = v end
    -- learn mode (airlock.learn): its file system calls recorded, in result.observed
    if opts.observe then c.observe = true end
    -- with a proxy: connects elsewhere recorded, in result.connects (violations.connects)
    if job.net then c.observe_connect = egress.PORT end
    start.confine = c
  end
  job.plan = plan
  return true
end

-- The ledger is written by this (trusted) process: never inside the
-- workspace, where the program could plant what it opens. It stays open past
-- the program's end, for the records of connections that end after it
-- (net.end), of the change set and of the refusals read from the run once it
-- ended: opened here, closed by the closer returned.
local function ledger_of(job)
  local opts = job.opts
  local ledger = opts.ledger
  if ledger == nil then return true end
  if type(ledger) ~= "string" then fail("'ledger' must be a directory path", 3) end
  local parent = ledger:match("^(.*)/[^/]*/*$") or "."
  local real = core.fs_realpath(ledger) or
    ((core.fs_realpath(parent ~= "" and parent or "/") or parent) .. "/" .. ledger:match("([^/]*)/*$"))
  if program.beneath(real, job.workspace) then
    return nil, string.format("ledger: %s is inside the workspace %s, which the program may change; " ..
      "keep the ledger outside it", ledger, job.workspace), "ledger"
  end
  local fresh, taken, code = ledger_mod.fresh(ledger, true)
  if not fresh then return nil, taken, code end
  local lerr
  job.ledger_bound = ledger_mod.session_max(job.pol)
  job.ledger, lerr = ledger_mod.open(ledger, { create = true, durability = opts.durability or "batch",
                                               max_bytes = job.ledger_bound })
  if not job.ledger then return nil, lerr, "ledger" end
  local opened = job.ledger
  job.ledger_closer = setmetatable({}, { __close = function() opened:close() end })
  return true
end

-- The start step's failure, as exec reports it: a layer the spawner could not
-- set up (its cgroups; a protected path it could not hold, make or cover) is a
-- confinement failure: fail closed, never run unprotected. The step is the
-- spawner's word for where it failed; the message is the spawner's own.
local function start_failure(err, code, step)
  if step == "cgroup" or step == "protect" then
    local msg = tostring(err)
    while msg:find("^spawn: ") do msg = msg:sub(8) end
    return nil, "confinement: " .. msg, "confinement"
  end
  -- The cause is a word (the binding's failures carry an errno number).
  if type(code) ~= "string" then code = tostring(err):match("^(%a+):") or "spawn" end
  return nil, err, code, code == "spawn" and 126 or 125
end

-- The run's egress proxy, when its plan gives it a network. -> the proxy or
-- false; or nil, message, cause, status (the run cancelled and ended).
local function proxy_for(job, b, run, t0)
  if not job.plan.start.egress_port then return false end
  local rec = registry.record_of(run)
  local proxy, perr, pcode = egress.start(b, run, { policy = job.pol, t0 = t0, secrets = job.values,
                                                    recorder = rec and rec.recorder })
  if not proxy then
    run:cancel()
    while run:live() do b:step(-1) end
    return nil, perr, pcode, 125
  end
  return proxy
end

-- Steps the broker until the run ends, streaming its output; the proxy's
-- end is taken as it comes. -> the run's result, or nil, message, code.
local function wait(job, b, run, proxy)
  local stream = job.opts.stream and streamer(job.opts.stream, secrets.redactor(job.values))
  local res
  while true do
    local done, serr, scode = b:step(-1)
    if not done then return nil, serr, scode end
    for _, r in ipairs(done) do
      if r.run == run:id() then res = r end
      if proxy and r.run == proxy.run:id() then proxy.result = r end
    end
    if res then break end
    if stream then stream.poll(run) end
  end
  if stream then stream.finish(res) end
  if proxy then
    egress.finish(proxy, b)
    egress.report(proxy, res)
  end
  return res
end

-- The host's type of a path (symbolic links followed) and its real path, or nil.
local function host_type(p)
  local ok, st = pcall(core.fs_realpath_in, "/", p)
  if not ok or not st then return nil end
  return st.type, st.real
end

-- What the program may change: its Landlock write paths (the workspace and
-- grants among them) and its private /tmp.
local function writable_roots(job)
  local out = { job.workspace }
  local c = job.plan.start.confine
  for _, p in ipairs(c and type(c.landlock) == "table" and c.landlock.write or {}) do out[#out + 1] = p end
  if job.auth.tmp == "private" then out[#out + 1] = "/tmp" end
  return out
end

--- airlock.exec{argv = {program, args...}, policy = "tool" | name | file | table,
---   workspace = dir, stdin = string | stdin_file = path | stdin_inherit = true,
---   output = "capture" | "inherit", env = {NAME = "value"}, timeout = ms | "2s",
---   capture = bytes | "64K", stream = function(which, line, complete),
---   ledger = dir, durability = "batch", review = function(changes, ctx), digest = false}
---   (review: with tool.overlay, asked after the policy's commit with what it
---   took; true keeps them, false none, a list those of them)
---   -> result, or nil, message, cause word, exit status (127: not found, 126:
---   not runnable, else 125: what a shell or env(1) would exit with).
--- result: ok, cause, message, exit_code | signal, stdout, stderr (secrets
--- redacted; *_truncated when over the capture limit; empty with output =
--- "inherit"), refused (the calls the policy refused, each with its errno and
--- count), usage, confinement, policy, digest, argv, workspace; ledger when recorded.
--- digest = false: no policy digest in the result when nothing records the
--- run (a ledger always has it): the digest is SHA-256, and loading OpenSSL
--- for it is about 2 ms of a short run (the command asks this unless --json
--- or --ledger).
--- observe = true (learn mode, airlock.learn): result.observed holds a line per
--- file system call the program made, "KV PATH" (core/airlock.h), when the
--- kernel's seccomp listener could be used; absent otherwise. Each path the
--- program could not reach is then a violation too (airlock.violations.paths).
--- With tool.network, result.connects names the destinations the program
--- connected to directly, not through its proxy, each a violation too
--- (airlock.violations.connects).
function M.exec(opts, broker)
  local job = check_options(opts)
  local pol, perr = M.resolve_policy(opts.policy)
  if not pol then return nil, perr, "policy" end
  job.pol = pol
  for _, step in ipairs { authority, workspace_of, environment_of, root_file_system, installation, locate } do
    local ok, err, code, status = step(job)
    if not ok then return nil, err, code, status end
  end
  if opts.stdin ~= nil and type(opts.stdin) ~= "string" then fail("'stdin' must be a string", 2) end
  if opts.review ~= nil and type(opts.review) ~= "function" then
    fail("'review' must be a function(changes, ctx) -> true, false or the changes to apply", 2)
  end
  if opts.stdin_file ~= nil and type(opts.stdin_file) ~= "string" then fail("'stdin_file' must be a path", 2) end
  local pty <close> = terminal(job)   -- closed on every way out
  for _, step in ipairs { plan_of, ledger_of } do
    local ok, err, code, status = step(job)
    if not ok then return nil, err, code, status end
  end
  local wlock <close>, wlerr = overlay.lock(job.overlay, job.workspace)   -- one overlaid run at a time
  if wlock == nil then return nil, wlerr, "workspace", 125 end
  local b = broker or core.broker()
  -- Closed on every way out, a stream callback's error included: the program dies with it.
  local owned <close> = broker == nil and b or nil
  local _ <close> = job.ledger_closer   -- the ledger exec opened, closed before the broker
  local t0 = core.now_ms()
  local deadline = job.deadline
  local run, err, code, step = launch.start(b, run_spec.program {
    policy = pol, ledger = job.ledger, durability = opts.durability, ledger_bound = job.ledger_bound,
    digest = opts.digest,
    program = { name = job.argv[1], argv = job.full, plan = job.plan,
                deadline_ms = deadline and deadline > 0 and deadline or nil, capture = job.capture },
  })
  if pty then
    pty:close_slave()
    if run then pty:relay() end
  end
  if not run then return start_failure(err, code, step) end
  local layer <close>, lerr = overlay.take(job.overlay, run)   -- closed on every way out
  local orec = layer and registry.record_of(run)   -- the change set's records go to the run's ledger
  if layer == nil then
    run:cancel()
    while run:live() do b:step(-1) end
    return nil, lerr, "confinement", 125
  end
  local proxy, perr2, pcode, pstatus = proxy_for(job, b, run, t0)
  if proxy == nil then return nil, perr2, pcode, pstatus end
  local res, werr, wcode = wait(job, b, run, proxy)
  if not res then return nil, werr, wcode end
  overlay.finish(job.overlay, layer, res, job.workspace, orec and orec.recorder, opts.review,
    type(opts.ledger) == "string" and { dir = opts.ledger, max_bytes = job.ledger_bound } or nil)
  violations.add(res)
  local seen = #(res.violations or {})
  if res.observed then violations.paths(res, { stat = host_type, writable = writable_roots(job) }) end
  if res.connects then   -- direct connects, each named with the proxy and the field
    local net = job.net
    violations.connects(res, { proxy = egress.env().HTTP_PROXY, allowed = function(host, port)
      return network.first(net.allow, host, port) ~= nil and not network.denied(net.deny, host, port)
    end })
  end
  -- The refusals read from the run once it ended (paths it could not reach,
  -- direct connects) go to its ledger too, like those seen while it ran.
  local rec = job.ledger and registry.record_of(run)
  for i = seen + 1, rec and rec.recorder and #(res.violations or {}) or 0 do
    local v = res.violations[i]
    rec.recorder:append("violation", { violation = v.kind, what = v.what, rule = v.rule, reason = v.reason })
  end
  if pty then pty:wait(500) end
  res.argv = job.full
  res.program = job.found
  res.path_passed = job.path_passed   -- a copy earlier on PATH it could not run, or nil
  res.workspace = job.workspace
  return res
end

return M
