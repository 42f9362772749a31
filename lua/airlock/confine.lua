-- airlock.confine -- the one planner: a policy's confine section, for a guest's
-- worker or for a program, turned into what the spawner, the broker and the
-- worker each apply, and one report line per layer.
--
--   confine.plan(run)   run: one description of the run to confine, the
--                       same shape for a guest and a program (M.plan below):
--                       its role, its confine section, its limits and, for
--                       a program, its grants (airlock.policy.grants)
--
-- Layers (LAYERS below, in report order) and who applies them:
--   namespaces, rlimits, capabilities, no_new_privs   the spawner, before exec
--   landlock, seccomp     a guest: the worker, before the guest's first
--                         instruction; a program: the spawner, before exec
--   mdwe                  a guest: the worker, first; a program: the spawner
--   cgroup                a program: its run's pids, memory and cpu cgroups;
--                         a guest: none (skipped, the worker caps itself)
--   tmp                   a program: a private tmpfs on /tmp
--   protect               a program: paths of its workspace made read-only
-- The parent verifies from outside: namespaces right after spawn
-- (/proc/PID/ns), the Seccomp line of /proc/PID/status, and for a guest the
-- Cap* lines and NoNewPrivs on ready. A layer listed in `require` that is
-- not applied ends the run with cause "confinement" before it starts.
--
-- Adding a layer: docs/CONFINEMENT.md, "Adding a layer", names every place.
local policy = require "airlock.policy"
local core = require "airlock.core"
local util = require "airlock.util"
local program = require "airlock.program"
local protect = require "airlock.protect"
local network = require "airlock.policy.network"
local grants = require "airlock.policy.grants"

local set_of, copy = util.set_of, util.copy

local M = {}

M.LAYERS = policy.LAYERS

-- For tests only: AIRLOCK_TEST_PRETEND_ABSENT="landlock,namespaces" makes those
-- layers behave as if this kernel lacked them, to prove `require` fails closed.
local function pretended()
  local set = {}
  for w in (os.getenv("AIRLOCK_TEST_PRETEND_ABSENT") or ""):gmatch("[%w_]+") do set[w] = true end
  return set
end
local PRETEND = "pretending this kernel lacks it (AIRLOCK_TEST_PRETEND_ABSENT, for tests)"

-- A plain copy of a list from a frozen policy (its proxy packs as empty).
local function list_copy(list)
  local out = {}
  for i, v in ipairs(list or {}) do out[i] = v end
  return out
end

local function describe_rlimits(rl, why)
  local parts = {}
  for _, k in ipairs(core.rlimits) do
    if rl[k] then
      parts[#parts + 1] = string.format("%s=%d%s%s", k, rl[k], k == "cpu" and "s" or "",
        why[k] and " (from " .. why[k] .. ")" or "")
    end
  end
  return table.concat(parts, " ")
end

local netns_ok, netns_why
--- Whether the shared empty net namespace can be used here (root only): true,
--- or false and why. Asked once per process.
function M.shared_netns()
  if netns_ok == nil then
    local ok, err = core.shared_netns()
    netns_ok, netns_why = ok == true, err
  end
  return netns_ok, netns_why
end

local available_cache = {}
--- Whether this kernel has a layer of C's layer table (core.confine_layers:
--- mdwe ...), asked once per process.
function M.layer_available(name)
  if available_cache[name] == nil then available_cache[name] = core.layer_available(name) end
  return available_cache[name]
end

local program_cache
--- The worker's seccomp filter for pid 1, as BPF bytes (built on first use),
--- or nil when it cannot be built here (the worker then builds its own).
function M.worker_program()
  if program_cache == nil then program_cache = core.seccomp_worker_program(1) or false end
  return program_cache or nil
end

-- ------------------------------------------------------------ the layers
-- Each is function(p, c), or one per role (ROLES, below): p is the plan
-- being made (p.role, p.start, p.init, p.run: the run's description;
-- p:applied(name, text), p:skip(name, why), p:refuse(message)), c the run's
-- confine section, in the one shape the schema gives it (a guest's confine,
-- a program's tool.confine): Landlock's paths are not read from it but from
-- p.run.grants.

local layer = {}

function layer.namespaces(p, c)
  local ns = c.namespaces
  if not ns or #ns == 0 then return p:skip("namespaces", "the policy asks for none") end
  if p.pretend.namespaces then return p:skip("namespaces", PRETEND) end
  p.start.namespaces = list_copy(ns)
  local net = ""
  -- A program with a network (tool.network) has a net namespace of its own,
  -- where its egress proxy listens (the network layer); no other shares it.
  local own_net = network.configured(p.run.network)
  if own_net and set_of(p.start.namespaces).net then
    net = "; net is the run's own"
  elseif c.shared_net and set_of(p.start.namespaces).net then
    local ok, why = M.shared_netns()
    if ok then
      p.start.shared_net = true
      net = "; net is the one empty namespace all runs share"
    else
      net = "; net is the run's own (" .. why .. ")"
    end
  end
  p:applied("namespaces", ": " .. table.concat(ns, " ") .. net .. " (checked in /proc/PID/ns after spawn)")
end

-- The address space a guest's worker gets from its memory budget (bytes of
-- Lua heap): the heap, half of it again for the allocator's overhead and
-- fragmentation, and 64M for the interpreter, its stack and its two frame
-- buffers. Measured (docs/CONFINEMENT.md, "Budgets are not confinement"): an
-- ordinary heap of small strings or tables maps up to 1.31 times its size;
-- the worker maps 3M idle and 45M more with a 15M call and its 15M answer in
-- flight.
M.AS_FIXED = 64 << 20
function M.address_space(memory) return memory + memory // 2 + M.AS_FIXED end

-- ------------------------------------------------------------ the roles
-- What differs between the two roles the planner plans for, as data the
-- planner and the layers read (p.role) instead of a branch in each:
--   pretend_only    the layers AIRLOCK_TEST_PRETEND_ABSENT may pretend away
--                   (nil: all of them)
--   worker_init     the worker applies what the plan's init holds: its
--                   required layers and what it is to pretend absent
--   spawner_confine the spawner applies Landlock and seccomp (start.confine)
--   address_space   RLIMIT_AS from the memory budget, and as_why, the line's why
--   cpu_backstop    RLIMIT_CPU a second above limits.cpu (a guest's worker)
--   nnp_for_layers  no_new_privs whenever Landlock or seccomp is on (the
--                   spawner sets it for them; a guest's worker asks itself)
--   seccomp_refuse  what a refused call does when the section does not say
--   lines           report lines that are not layers: name -> function(run)
--                   giving the line, or nil
-- A layer whose work differs wholly between them is a function per role
-- (layer.X = { guest = f, program = f }); a role it names no function for
-- does not have the layer at all.
local ROLES = {
  guest = { name = "guest", worker_init = true,
            address_space = function(memory) return M.address_space(memory) end,
            as_why = "limits.memory, half again and 64M", cpu_backstop = true, nnp_for_layers = false,
            lines = {} },
  program = { name = "program", pretend_only = { cgroup = true }, spawner_confine = true,
              address_space = function(memory) return memory end, as_why = "tool.limits.memory",
              cpu_backstop = false, nnp_for_layers = true,
              seccomp_refuse = policy.default("tool.confine.seccomp.refuse"),
              lines = {
                workspace = function(run) return run.workspace and run.workspace .. " (read and write)" end,
                rootfs = function(run)
                  return run.rootfs and run.rootfs .. " (its own top-level entries, read-only, nosuid, nodev)"
                end,
                effects = function(run) return run.effects and "fd 3; `airlock call` is " .. run.effects end,
              } },
}

-- Budgets the rlimits follow, for the layer's line (field -> how it was derived).
local function derive_rlimits(p, rl)
  local limits, why = p.run.limits or {}, {}
  -- RLIMIT_AS: from the memory budget, unless the policy names a lower one;
  -- 0 is none at all (and turns the derived one off too).
  local memory = limits.memory or 0
  if rl.as == 0 then
    rl.as = nil
  elseif memory > 0 then
    local derived = p.role.address_space(memory)
    if not rl.as or derived < rl.as then
      rl.as = derived
      why.as = p.role.as_why
    end
  end
  -- RLIMIT_CPU of a guest's worker: a backstop a second above the run's CPU
  -- budget (limits.cpu, enforced by the worker), in whole seconds.
  local cpu_ms = p.role.cpu_backstop and limits.cpu or 0
  if cpu_ms > 0 then
    rl.cpu = (cpu_ms + 1000 + 999) // 1000
    why.cpu = "limits.cpu and 1 s"
  end
  return why
end

function layer.rlimits(p, c)
  -- A plain copy (the policy is a frozen proxy, which next() cannot walk).
  local rl
  for k, v in pairs(c.rlimits or {}) do rl = rl or {}; rl[k] = v end
  if not rl then return p:skip("rlimits", "the policy sets none") end
  if p.pretend.rlimits then return p:skip("rlimits", PRETEND) end
  local why = derive_rlimits(p, rl)
  p.start.rlimits = rl
  -- Written when the plan is done: a program's cgroup layer may add nproc.
  p.after[#p.after + 1] = function() p:applied("rlimits", ": " .. describe_rlimits(p.start.rlimits, why)) end
end

layer.capabilities = {}

-- A program always loses them, where that is possible (a user namespace, or root).
function layer.capabilities.program(p, c)
  if not program.can_drop_caps(c.namespaces, p.run.root) then
    return p:skip("capabilities", "not root and no user namespace")
  end
  p.start.drop_caps = true
  p:applied("capabilities", ": bounding, ambient and inheritable sets emptied")
end

function layer.capabilities.guest(p, c)
  if c.capabilities ~= "drop" then return p:skip("capabilities", "the policy keeps them") end
  if p.pretend.capabilities then return p:skip("capabilities", PRETEND) end
  p.start.drop_caps = true
  p:applied("capabilities", ": bounding, ambient and inheritable sets emptied" ..
    (p.start.namespaces and " and uid 65534 in the user namespace" or "") ..
    " (Cap* in /proc/PID/status checked zero on ready)")
end

function layer.no_new_privs(p, c)
  -- Landlock and seccomp need it: for a program, the spawner sets it for them.
  local want = c.no_new_privs or (p.role.nnp_for_layers and (c.landlock or c.seccomp))
  if not want then return p:skip("no_new_privs", "the policy does not ask for it") end
  if p.pretend.no_new_privs then return p:skip("no_new_privs", PRETEND) end
  p.start.no_new_privs = true
  p:applied("no_new_privs", " (set before exec)")
end

layer.landlock = {}

-- The worker applies it and reports it in its ready frame.
function layer.landlock.guest(p, c)
  p.init.landlock = c.landlock == true
  if p.pretend.landlock then p.init.pretend_absent[#p.init.pretend_absent + 1] = "landlock" end
end

-- The spawner applies it: its paths are the run's grants (read in order,
-- each path once), its ports and scope the section's.
function layer.landlock.program(p, c)
  if not c.landlock then return p:skip("landlock", "the policy does not ask for it") end
  local ll = type(c.landlock) == "table" and copy(c.landlock) or {}
  local lists = grants.lists(p.run.grants)
  for _, kind in ipairs { "read", "write", "exec" } do
    ll[kind] = #lists[kind] > 0 and lists[kind] or nil
  end
  p.start.confine.landlock = ll
  p:applied("landlock", string.format(": read %s; write %s; exec %s%s", table.concat(ll.read or {}, " "),
    table.concat(ll.write or {}, " "), table.concat(ll.exec or {}, " "),
    p.run.tmp == "private" and "; /tmp (private)" or ""))
  -- The program's file tree holds what Landlock grants and nothing else (a
  -- view): what the policy does not name cannot be watched, locked or seen.
  if set_of(c.namespaces).mount then
    local ws, rootfs = p.run.workspace, p.run.rootfs
    local beneath = program.beneath
    local ro, rw = {}, {}
    for _, list in ipairs { ll.read or {}, ll.exec or {} } do
      for _, path in ipairs(list) do
        if path ~= ws and not (rootfs and beneath(path, rootfs)) then ro[#ro + 1] = path end
      end
    end
    for _, path in ipairs(ll.write or {}) do if path ~= ws then rw[#rw + 1] = path end end
    p.start.view_ro, p.start.view_rw = ro, rw
  end
end

layer.seccomp = {}

function layer.seccomp.guest(p, c)
  p.init.seccomp = c.seccomp == true
  if p.pretend.seccomp then p.init.pretend_absent[#p.init.pretend_absent + 1] = "seccomp" end
  -- The parent checks the filter itself rather than trusting the report.
  p.start.verify_seccomp = c.seccomp == true and not p.pretend.seccomp
  -- A worker born in a new pid namespace is pid 1, so its filter (which names
  -- its own pid) is the same every run: compiled once here, loaded there.
  if p.init.seccomp and not p.pretend.seccomp and set_of(p.start.namespaces).pid then
    p.init.seccomp_program = M.worker_program()
  end
end

-- The spawner applies it: the section's filter, its promises a list of
-- words all the way to the spawner's reader (lua/binding/lconfine.c).
function layer.seccomp.program(p, c)
  if not c.seccomp then return p:skip("seccomp", "the policy does not ask for it") end
  local sc = type(c.seccomp) == "table" and copy(c.seccomp) or {}
  if sc.promises then sc.promises = list_copy(sc.promises) end
  if sc.syscalls then sc.syscalls = list_copy(sc.syscalls) end
  p.start.confine.seccomp = sc
  -- A program gets an errno for a call its policy refuses (each named in the
  -- result) unless the policy says "kill": what programs expect of a sandbox.
  if sc.refuse == nil then sc.refuse = p.role.seccomp_refuse end
  local r = sc.refuse
  p:applied("seccomp", ": " .. (sc.mode == "deny" and "denylist" or
    ("promises " .. table.concat(sc.promises or {}, " "))) ..
    "; refused calls " .. (r == "errno" and "fail with a fitting errno, each named in the result" or
    r == "kill" and "kill the run" or ("fail with " .. tostring(r))) .. " (Seccomp: 2 checked after spawn)")
end

-- Memory-deny-write-execute: nothing the process maps may be writable and
-- executable at once, or gain exec later. It belongs to an address space:
-- a guest's worker sets it on itself first thing (before Landlock and
-- seccomp, in its ready report); for a program the spawner's child sets it
-- before exec, in a copy of the address space. Kept across fork and exec,
-- never undone. A program with a JIT needs it off.
layer.mdwe = {}

function layer.mdwe.guest(p, c)
  p.init.mdwe = c.mdwe == true
  if p.pretend.mdwe then p.init.pretend_absent[#p.init.pretend_absent + 1] = "mdwe" end
end

function layer.mdwe.program(p, c)
  if not c.mdwe then return p:skip("mdwe", "the policy does not ask for it") end
  if not M.layer_available("mdwe") then return p:skip("mdwe", "this kernel has no PR_SET_MDWE (it needs Linux 6.3+)") end
  p.start.mdwe = true
  p:applied("mdwe", ": no mapping writable and executable, none may gain exec (PR_SET_MDWE before exec)")
end

-- A program's cgroups: pids, memory and cpu for the whole run. Without one, a
-- caller who is not root is bounded per process (RLIMIT_NPROC counts per user
-- namespace); root is exempt from RLIMIT_NPROC, so for root no cgroup means
-- no start (fail closed).
local function cgroup_for(p, name)
  local where, why = core.pids_cgroup(name)
  if p.pretend.cgroup then
    where, why = nil, "cgroup: pretending this kernel has no " .. (name or "pids") ..
      " cgroup (AIRLOCK_TEST_PRETEND_ABSENT, for tests)"
  end
  return where, why and tostring(why):gsub("^cgroup: ", "")
end

layer.cgroup = {}

function layer.cgroup.guest(p)
  p:skip("cgroup", "no delegated cgroup is configured (memory, CPU and pids are bounded by " ..
    "rlimits and the worker's own caps)")
end

function layer.cgroup.program(p, c)
  local limits, root, start = p.run.limits or {}, p.run.root, p.start
  local user_ns = set_of(c.namespaces).user
  local cg, notes = {}, {}
  local pids = limits.pids and limits.pids > 0 and limits.pids or nil
  if pids then
    local where, why = cgroup_for(p)
    if where then
      start.pids_max = pids
      cg[#cg + 1] = "pids.max " .. pids
    elseif not root and user_ns then
      start.rlimits = start.rlimits or {}
      start.rlimits.nproc = math.min(start.rlimits.nproc or pids, pids)
      notes[#notes + 1] = "pids: " .. why .. "; processes are bounded by RLIMIT_NPROC=" ..
        start.rlimits.nproc .. " in the program's own user namespace instead"
    else
      return p:refuse(string.format("confinement: the pids limit (tool.limits.pids = %d) needs a pids " ..
        "cgroup: %s; as root RLIMIT_NPROC binds nothing, so the program is not started " ..
        "(tool.limits.pids = 0 runs without a process limit)", pids, why))
    end
  else
    notes[#notes + 1] = "tool.limits.pids is 0 (no pids cgroup)"
  end
  local cpu = limits.cpu and limits.cpu > 0 and math.max(1, math.floor(limits.cpu * 1000)) or nil
  for _, b in ipairs { { "memory", "memory_max", limits.memory and limits.memory > 0 and limits.memory or nil },
                       { "cpu", "cpu_millis", cpu } } do
    local name, key, want = b[1], b[2], b[3]
    if want then
      local where, why = cgroup_for(p, name)
      if where then
        start[key] = want
        cg[#cg + 1] = name == "memory" and ("memory " .. want .. " bytes")
          or string.format("cpu %g cores", want / 1000)
      elseif not root then
        notes[#notes + 1] = name .. " (" .. why .. "): bounded per process by rlimits instead"
      else
        return p:refuse(string.format("confinement: the %s limit (tool.limits.%s) needs a %s cgroup: %s; " ..
          "the program is not started (tool.limits.%s = 0 runs without one)", name, name, name, why, name))
      end
    end
  end
  if #cg == 0 then return p:skip("cgroup", table.concat(notes, "; ")) end
  p:applied("cgroup", ": " .. table.concat(cg, ", ") ..
    (#notes > 0 and "; skipped: " .. table.concat(notes, "; ") or ""))
end

layer.tmp = {}

function layer.tmp.program(p)
  local ctx = p.run
  if ctx.tmp ~= "private" then return p:skip("tmp", "no /tmp (tool.tmp = \"none\")") end
  local size = ctx.limits and ctx.limits.tmp_size
  p.start.tmpfs = { "/tmp" }
  -- The workspace stays visible (spawn does that); so does the airlock
  -- command's own directory, read-only, when it is under /tmp too.
  p.start.keep = ctx.keep
  if size then p.start.tmpfs_size = tostring(size // 1024) .. "k" end
  -- One inode per 4 KiB of its size: a million empty files are not free.
  local default = policy.default("tool.limits.tmp_size")   -- the spawner's own (core.limits.tmp_size)
  p.start.tmpfs_inodes = math.max(1024, (size or default) // 4096)
  p:applied("tmp", string.format(": private tmpfs on /tmp (size %s, %d files at most)",
    p.start.tmpfs_size or ((default >> 20) .. "m"), p.start.tmpfs_inodes))
end

-- A program's network (tool.network, airlock.egress): a net namespace of its
-- own whose loopback the spawner brings up and listens on for the run's
-- egress proxy; the program may make IPv4/IPv6 sockets (promise inet) and,
-- where Landlock has TCP rules, connect to the proxy's port alone.
layer.network = {}

function layer.network.program(p, c)
  local net = p.run.network
  if not network.configured(net) then return p:skip("network", "none (no tool.network): the net namespace is empty") end
  if not set_of(c.namespaces).net then
    return p:refuse("confinement: tool.network needs the program's net namespace (tool.confine.namespaces), " ..
      "where its proxy listens; without it the program would have the host's network")
  end
  local port = network.PORT
  p.start.egress_port = port
  local sc, ll = p.start.confine.seccomp, p.start.confine.landlock
  if type(sc) == "table" and sc.mode ~= "deny" then
    sc.promises = sc.promises or {}
    if not set_of(sc.promises).inet then sc.promises[#sc.promises + 1] = "inet" end
  end
  if type(ll) == "table" then ll.connect, ll.bind = { port }, {} end
  p:applied("network", string.format(": through the run's egress proxy at 127.0.0.1:%d (HTTP CONNECT and " ..
    "http:// URLs), allow %s%s%s; nothing else is reachable (promise inet%s)", port,
    table.concat(net.allow or {}, " "), net.deny and #net.deny > 0 and ("; deny " .. table.concat(net.deny, " ")) or "",
    net.connect and "; tool.network.connect decides the rest" or "",
    type(ll) == "table" and ("; Landlock TCP connect " .. port .. " only") or ""))
end

-- Paths of the workspace a program may read but not change (tool.protect),
-- resolved by airlock.protect: each named one, present or not (the spawner
-- makes a missing one empty for the run and removes it after), and each
-- present match of a pattern; the spawner makes each read-only in place and
-- binds the directories above it onto themselves (core/spawn_protect.c). One
-- reached through a symbolic link is refused: the link would stay changeable.
-- A path the spawner cannot hold or make refuses the run (tool.protect named).
layer.protect = {}

function layer.protect.program(p, c)
  local ws = p.run.workspace
  local list = list_copy(p.run.protect)
  if #list == 0 or not ws then return p:skip("protect", "the policy protects no path (tool.protect)") end
  if not set_of(c.namespaces).mount then
    return p:refuse("confinement: tool.protect needs the mount namespace (tool.confine.namespaces), where " ..
      "each protected path is made read-only")
  end
  local res, err = protect.resolve(ws, list)
  if not res then return p:refuse(err) end
  local abs, there, made = {}, {}, {}
  for _, e in ipairs(res.paths) do
    abs[#abs + 1] = ws .. "/" .. e.rel .. (e.dir and not e.present and "/" or "")
    if e.present then there[#there + 1] = e.rel else made[#made + 1] = e.rel .. (e.dir and "/" or "") end
  end
  local parts = {}
  if #there > 0 then parts[#parts + 1] = "read-only in the workspace: " .. table.concat(there, " ") end
  if #made > 0 then
    parts[#parts + 1] = "not there at the start, so made empty and read-only for the run (removed after it): " ..
      table.concat(made, " ")
  end
  if #res.absent > 0 then
    parts[#parts + 1] = "not made, the directory before // not being there at the start (what the program " ..
      "makes there is its own, not protected): " .. table.concat(res.absent, " ")
  end
  for _, pat in ipairs(res.patterns) do
    parts[#parts + 1] = string.format("pattern %s: the %d match%s there at the start%s; one made during the " ..
      "run elsewhere is not protected", pat.entry, pat.count, pat.count == 1 and "" or "es",
      pat.top and (", and " .. pat.top .. " at the top") or "")
  end
  if #abs == 0 then
    return p:skip("protect", table.concat(parts, "; "))
  end
  p.start.protect = abs
  p:applied("protect", ": " .. table.concat(parts, "; "))
end

-- Report order: the schema's layers (policy.LAYERS, the words `require`
-- takes), then those only a program has (policy.PROGRAM_LAYERS).
local ORDER = {}
for _, list in ipairs { M.LAYERS, policy.PROGRAM_LAYERS } do
  for _, name in ipairs(list) do
    assert(layer[name], "confine: no planner for the layer " .. name)
    ORDER[#ORDER + 1] = name
  end
end

-- ------------------------------------------------------------ the plan

local Plan = {}
Plan.__index = Plan

function Plan:applied(name, text) self.layers[name] = "applied" .. text end

-- A layer not applied; a required one makes the plan fail.
function Plan:skip(name, why)
  self.layers[name] = "skipped: " .. why
  if self.required[name] and not self.failure then
    self.failure = string.format("confinement: %s is required but skipped: %s", name, why)
  end
end

function Plan:refuse(message) self.failure = self.failure or message end

--- plan(run) -> plan, or nil, message, plan when a layer the run's section
--- requires cannot be applied (or, for a program, a limit has no way to be
--- enforced). run, one shape for every run:
---   role       "guest" (a worker hosting a guest) or "program" (a program
---              the spawner starts); what differs between them is ROLES'
---   confine    the confine section, as the schema gives it: a guest's
---              confine, a program's tool.confine (or airlock.spawn's own)
---   limits     the budgets the rlimits and cgroups follow (limits, tool.limits)
---   grants     a program's Landlock paths, { {path, rights, why} }
---              (airlock.policy.grants); the planner only reads them
---   a program's: tmp (tool.tmp), workspace, rootfs, protect (tool.protect),
---   keep ({dirs kept under /tmp}), effects (the `airlock call` command),
---   root (program.is_root()), network (tool.network)
--- plan = { start = {options for broker:_start}, init = {init.confine}, layers =
--- {name = "applied: ..." | "skipped: ..."}, required = {name = true} }.
function M.plan(run)
  if type(run) ~= "table" then error("confine.plan: run must be a table { role, confine, ... }", 2) end
  local r = ROLES[run.role]
  if not r then error("confine.plan: run.role must be \"guest\" or \"program\"", 2) end
  local section = run.confine or {}
  local pretend = pretended()
  for word in pairs(pretend) do
    if r.pretend_only and not r.pretend_only[word] then pretend[word] = nil end
  end
  local p = setmetatable({
    role = r, run = run, pretend = pretend,
    start = {}, init = {}, layers = {}, required = set_of(section.require), after = {},
  }, Plan)
  if r.spawner_confine then
    p.start.confine = {}
    if section.no_new_privs ~= nil then p.start.confine.no_new_privs = section.no_new_privs end
  end
  if r.worker_init then p.init = { require = list_copy(section.require), pretend_absent = {} } end
  for _, name in ipairs(ORDER) do
    local l = layer[name]
    if type(l) == "table" then l = l[r.name] end   -- the layer's function for this role, if it has one
    if l then l(p, section) end
  end
  for _, f in ipairs(p.after) do f() end
  for name, line in pairs(r.lines) do p.layers[name] = line(run) end
  local plan = { start = p.start, init = p.init, layers = p.layers, required = p.required }
  if p.failure then return nil, p.failure, plan end
  return plan
end

--- The message for a spawn that failed creating namespaces (b:_start's step
--- "clone"), or nil if the failure was something else.
function M.namespace_failure(message, step)
  if step ~= "clone" then return nil end
  return "cannot create namespaces here (" .. message .. "). Unprivileged user namespaces are " ..
    "probably disabled: on Debian, sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 23.10 " ..
    "and later, sysctl kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile " ..
    "allowing 'userns' for airlock; in a container, allow clone/unshare in its seccomp profile. " ..
    "Runs continue without namespaces unless the policy requires them; `airlock probe` tells more"
end

--- Merges the worker's report (ready frame) into the plan's layers, in order.
function M.report(plan, confined)
  local out = copy(plan.layers)
  if type(confined) == "table" then
    for k, v in pairs(confined) do out[k] = v end
  end
  return out
end

return M
