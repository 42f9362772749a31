-- airlock.learn.tool -- learn mode for programs (`airlock exec --learn OUT`):
-- run the program once, confined but permissive, observing what it touches;
-- write the draft policy that covers it (airlock.learn.draft); then prove the
-- draft by running the program again under it, at once, and say what differs.
--
-- The learning run: the stock tool policy with, on top, the host's system
-- read-only (/usr /etc /var /opt /srv and the library and binary
-- directories, which the view binds; not /root, /home, /run, /mnt), programs
-- runnable from /usr /bin /sbin /lib* /opt and from the directory of the
-- program named, the network through the egress proxy with every host
-- allowed and recorded (tool.network.connect answers yes) on the ports of
-- M.PORTS and those asked for (the proxy's own Landlock rules need them
-- named), and its file
-- system calls observed (airlock.exec's observe: the seccomp listener records
-- each path, then lets the call continue). Refused system calls stay refused
-- (tool.confine.seccomp is locked: no draft could grant them) and are listed.
-- It works on a copy of the workspace (cp -a into a fresh temporary
-- directory, removed after), so the proof run, in the workspace itself, finds
-- it as the learning run did, and the command's effects happen once.
local core = require "airlock.core"
local util = require "airlock.util"
local exec = require "airlock.exec"
local policy = require "airlock.policy"
local program = require "airlock.program"
local draft = require "airlock.learn.draft"
local ledger = require "airlock.ledger"

local M = {}

-- The effects a run's ledger records calls of (airlock.ledger.calls), or {}
-- when it cannot be read.
local function effect_calls(dir)
  local ok, list = pcall(ledger.calls, dir)
  return ok and list or {}
end

M.ROUNDS = 3

M.SYSTEM_READ = { "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/var", "/opt", "/srv" }
M.SYSTEM_EXEC = { "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt" }

local function host_type(p)
  local ok, st = pcall(core.fs_realpath_in, "/", p)
  return ok and st and st.type or nil
end

local function existing(list)
  local out = {}
  for _, p in ipairs(list) do if host_type(p) then out[#out + 1] = p end end
  return out
end

-- The ports the learning run's proxy may connect to (its Landlock rules take
-- them from allow patterns, so a name that never resolves carries them).
M.PORTS = { 80, 443, 8080, 8443, 9418 }

--- learning_policy(program_dir, ports) -> the permissive policy of a learning run.
function M.learning_policy(program_dir, ports, more)
  local ex = existing(M.SYSTEM_EXEC)
  if program_dir then ex[#ex + 1] = program_dir end
  local rd, wr = existing(M.SYSTEM_READ), {}
  more = more or {}
  for _, p in ipairs(more.read or {}) do rd[#rd + 1] = p end
  for _, p in ipairs(more.exec or {}) do ex[#ex + 1] = p end
  for _, p in ipairs(more.write or {}) do wr[#wr + 1] = p end
  local allow = {}
  for _, list in ipairs { M.PORTS, ports or {} } do
    for _, p in ipairs(list) do allow[#allow + 1] = "airlock-learn.invalid:" .. p end
  end
  for _, pat in ipairs(more.network or {}) do allow[#allow + 1] = pat end
  return policy.extend("tool", {
    name = "learn",
    tool = {
      grant = { read = rd, exec = ex, write = wr },
      network = { allow = allow, connect = function() return true end },
    },
  })
end

-- A fresh copy of dir (cp -a) in a new temporary directory. -> path, or nil, message.
local function scratch_copy(dir)
  local tmp = util.tmpdir("airlock-learn")
  if not tmp then return nil, "learn: could not make a temporary directory (mktemp -d)" end
  if not os.execute("cp -a " .. util.shell_quote(dir) .. "/. " .. util.shell_quote(tmp) .. "/") then
    os.execute("rm -rf " .. util.shell_quote(tmp))
    return nil, "learn: could not copy the workspace " .. dir .. " (cp -a) for the learning run"
  end
  return tmp
end

-- What the base policy covers already: its Landlock paths, the workspace,
-- /proc (its own), airlock's installation. (/tmp, a private tmpfs, is the
-- run's own: its paths are left out before.)
local function covered(workspace)
  local base = exec.resolve_policy("tool")
  local ll = base.tool.confine.landlock or {}
  local out = { workspace, "/proc" }
  for _, list in ipairs { ll.read or {}, ll.write or {}, ll.exec or {} } do
    for _, p in ipairs(list) do out[#out + 1] = p end
  end
  local w = core.worker_path and core.worker_path()
  local wd = w and (core.fs_realpath(w:match("^(.*)/[^/]+$") or "") or nil)
  if wd then out[#out + 1] = wd end
  return out
end

-- Paths the learning run found and the proof run did not: the draft's gaps.
local function gaps(learned, proved, flagged)
  local missing = {}
  for _, r in ipairs(draft.records(proved)) do
    if r.view == "-" then missing[r.path] = true end
  end
  local out, seen = {}, {}
  for _, r in ipairs(draft.records(learned)) do
    if r.view == "+" and missing[r.path] and not flagged[r.path] and not seen[r.path] then
      seen[r.path] = true
      out[#out + 1] = r.path
    end
  end
  return out
end

--- learn{argv, out, workspace, env, stdin_inherit, output, ports = {more ports}, prove = true,
---   timeout = ms | "30s" (each run's deadline; none by default, as for exec)}
---   -> report, or nil, message, cause. report: {draft = path, learned = result,
---   proved = result (with prove), differences = {lines}, runs = bool (the
---   draft ran with no violation and the same exit status), learned_ok (the
---   learning run itself exited 0), plan (the draft as data)}.
function M.learn(opts)
  if type(opts.out) ~= "string" or opts.out == "" then return nil, "learn: needs a file to write the draft to", "usage" end
  local ws = core.fs_realpath(opts.workspace or ".")
  if not ws then return nil, "learn: the workspace " .. tostring(opts.workspace) .. " does not exist", "workspace" end
  local argv = opts.argv
  local path = (opts.env and opts.env.PATH) or os.getenv("PATH") or program.DEFAULT_PATH
  local found = program.locate(argv[1], { path = path, cwd = ws, runnable = function() return true end })
  local real = found and core.fs_realpath(found:match("^(.*)/[^/]+$") or "/")
  -- Each run keeps a ledger in a temporary directory, read for the effects
  -- the program asked for (airlock call) and whether the policy granted them.
  local function run(pol, where, output)
    local tmp = util.tmpdir("airlock-learn")
    if not tmp then return nil, "learn: could not make a temporary directory (mktemp -d)", "io" end
    local res, err, code = exec.exec { argv = argv, policy = pol, workspace = where, env = opts.env,
      observe = true, timeout = opts.timeout, output = output, ledger = tmp .. "/l",
      stdin_inherit = output == "inherit" and opts.stdin_inherit or nil }
    if res then res.effect_calls = effect_calls(tmp .. "/l") end
    os.execute("rm -rf " .. util.shell_quote(tmp))
    return res, err, code
  end
  -- A path outside the learning view that the draft grants may have changed
  -- what the program did (git cannot clone a repository it cannot see): the
  -- run is learned again with those grants (and the connections below), up
  -- to M.ROUNDS times in all.
  local more, learned, plan, records = { read = {}, write = {}, exec = {}, network = {} }, nil, nil, nil
  local learn_ports = {}
  for _, list in ipairs { M.PORTS, opts.ports or {} } do for _, p in ipairs(list) do learn_ports[p] = true end end
  for round = 1, M.ROUNDS do
    local copy, cerr = scratch_copy(ws)
    if not copy then return nil, cerr, "workspace" end
    local lerr, lcode
    learned, lerr, lcode = run(M.learning_policy(real, opts.ports, more), copy,
      round == 1 and (opts.output or "capture") or "capture")
    if not learned then
      os.execute("rm -rf " .. util.shell_quote(copy))
      return nil, "learn: the learning run did not start: " .. tostring(lerr), lcode
    end
    if learned.observed == nil then
      os.execute("rm -rf " .. util.shell_quote(copy))
      return nil, "learn: this kernel or privilege level gave no seccomp listener, so nothing could be " ..
        "observed (airlock probe says what can be enforced)", "confinement"
    end
    -- Under the stock policy's private /tmp every path there is the run's own
    -- (a file being made is not there yet when its call is seen), and no
    -- grant could show the host's /tmp beneath it: none is learned.
    local private_tmp = exec.resolve_policy("tool").tool.tmp == "private"
    records = {}
    for _, r in ipairs(draft.records(learned.observed)) do
      local in_tmp = r.path == "/tmp" or r.path:sub(1, 5) == "/tmp/"
      if not (in_tmp and (private_tmp or r.view ~= "-")) then records[#records + 1] = r end
    end
    local outside = {}
    for _, r in ipairs(records) do   -- the copy's paths are the workspace's
      if r.path:sub(1, #copy + 1) == copy .. "/" or r.path == copy then r.path = ws .. r.path:sub(#copy + 1) end
      if r.view == "-" then outside[r.path] = true end
    end
    plan = draft.plan({ records = records, network = learned.network, refused = learned.refused }, {
      covered = covered(ws), stat = host_type,
    })
    os.execute("rm -rf " .. util.shell_quote(copy))
    local again = false
    for _, list in ipairs { "read", "write", "exec" } do
      for _, g in ipairs(plan[list]) do
        local why = g.why:match("^(.-) %(") or g.why
        if outside[why] and not more[list][g.path] then
          more[list][g.path] = true
          more[list][#more[list] + 1] = g.path
          again = true
        end
      end
    end
    -- A connection the proxy refused (a loopback or private address is
    -- reached only when named) or could not make (a port it was not given)
    -- is learned again with its pattern allowed.
    for _, n in ipairs(plan.network) do
      if (n.refused or not learn_ports[n.port]) and not more.network[n.pattern] then
        more.network[n.pattern] = true
        more.network[#more.network + 1] = n.pattern
        again = true
      end
    end
    if not again then break end
  end
  plan.effects = learned.effect_calls or {}
  local text = draft.text(plan, { argv = argv, base = "tool" })
  local f, ferr = io.open(opts.out, "w")
  if not f then return nil, "learn: cannot write the draft: " .. tostring(ferr), "io" end
  f:write(text)
  f:close()
  local report = { draft = opts.out, learned = learned, plan = plan, differences = {} }
  if opts.prove == false then return report end
  local proved, perr = run(opts.out, ws, "capture")
  if not proved then
    report.differences[1] = "the draft did not start: " .. tostring(perr)
    report.runs = false
    return report
  end
  report.proved = proved
  local flagged = {}
  for _, x in ipairs(plan.flagged) do flagged[x.path] = true end
  local d = report.differences
  local said = {}
  for _, p in ipairs(gaps(learned.observed, proved.observed, flagged)) do
    said[p] = true
    d[#d + 1] = "missing under the draft: " .. p
  end
  -- A violation the learning run had too (its deadline, say) is no difference.
  local had = {}
  for _, v in ipairs(learned.violations or {}) do had[tostring(v.kind) .. "\0" .. tostring(v.what)] = true end
  for _, v in ipairs(proved.violations or {}) do
    if v.kind ~= "syscall" and not said[v.what] and not had[tostring(v.kind) .. "\0" .. tostring(v.what)] then
      d[#d + 1] = string.format("violation: %s: %s (%s)", tostring(v.what), tostring(v.reason), tostring(v.rule))
    end
  end
  local refused_before = {}
  for _, c in ipairs(learned.effect_calls or {}) do refused_before[c.effect] = c.denied > 0 end
  for _, c in ipairs(proved.effect_calls or {}) do
    if c.denied > 0 and not refused_before[c.effect] then d[#d + 1] = "refused under the draft: the effect " .. c.effect end
  end
  if proved.cause ~= learned.cause or proved.exit_code ~= learned.exit_code then
    d[#d + 1] = string.format("the learning run ended %s (exit %s), the proof run %s (exit %s)", learned.cause,
      tostring(learned.exit_code), proved.cause, tostring(proved.exit_code))
  end
  report.runs = #d == 0
  -- A draft "runs first time" when the program also did well in the learning run.
  report.learned_ok = learned.cause == "ok" or (learned.cause == "exit" and learned.exit_code == 0)
  return report
end

return M
