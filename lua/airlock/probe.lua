-- airlock.probe -- `airlock probe`: what this kernel and privilege level can
-- enforce, what a run does about each layer, and whether the stock `untrusted`
-- policy can run here.
--
-- report() -> the table of airlock.core.probe(), one {ok, detail} entry per
-- layer (landlock, seccomp, seccomp_kill_process, user_ns, net_ns, pid_ns,
-- mount_ns, ipc_ns, uts_ns, cgroup_ns, pidfd, cgroup2_delegated), each given a
-- `consequence` string, plus the plain fields landlock_abi (0 when absent),
-- is_root, unprivileged_userns_clone, apparmor_restrict_userns (-1 when the
-- sysctl does not exist), kernel, max_user_namespaces (-1 when absent),
-- container (a word, or nil outside a container) and verdict = {ok, policy,
-- detail, missing = {layer names} or nil}.
-- Requires airlock.core, and airlock.policy inside report() to read what
-- untrusted's confine.require asks for; never "airlock" (airlock.init may load this file).
local core = require "airlock.core"
local util = require "airlock.util"
local json = require "airlock.json"
local policy = require "airlock.policy"
local read_file, wrap = util.read_file, util.wrap

local M = {}

-- Display order of the layers: the layer table's (core.confine_layers, the
-- layers set with one call: mdwe ...) after seccomp's; core.probe() reports
-- those that depend on the kernel.
M.LAYERS = { "landlock", "seccomp", "seccomp_kill_process" }
for _, name in ipairs(core.confine_layers) do M.LAYERS[#M.LAYERS + 1] = name end
for _, name in ipairs { "user_ns", "pid_ns", "net_ns", "ipc_ns", "uts_ns", "mount_ns", "cgroup_ns", "pidfd",
                        "cgroup2_delegated", "pids_cgroup", "memory_cgroup", "cpu_cgroup" } do
  M.LAYERS[#M.LAYERS + 1] = name
end

-- confine.require words that need nothing the probe could miss.
local ALWAYS = { rlimits = true, capabilities = true, no_new_privs = true }

-- The probe entries (and unprobeable words) the stock untrusted policy
-- requires, read from its confine section (the one statement of it; the
-- policy is part of the module). Returns the list (in display order) and the
-- policy's words for the verdict.
local function untrusted_requires(is_root)
  local c = policy.load("untrusted").confine
  local set, words, extra = { pidfd = true }, {}, {}
  for _, layer in ipairs(c.require) do
    if layer == "namespaces" then
      local list = {}
      for _, n in ipairs(c.namespaces or {}) do
        list[#list + 1] = n
        set[n .. "_ns"] = true
      end
      -- Without privilege the spawner needs a user namespace for the others.
      if #list > 0 and not is_root then set.user_ns = true end
      words[#words + 1] = "namespaces " .. table.concat(list, " ")
    else
      words[#words + 1] = layer
      if layer == "landlock" or layer == "seccomp" then
        set[layer] = true
      elseif not ALWAYS[layer] then
        extra[#extra + 1] = layer   -- e.g. cgroup: no run applies it yet, so never available
      end
    end
  end
  local list = {}
  for _, name in ipairs(M.LAYERS) do if set[name] then list[#list + 1] = name end end
  for _, w in ipairs(extra) do list[#list + 1] = w end
  return list, table.concat(words, ", ")
end

local NS = {
  user_ns = { word = "user", flag = "CLONE_NEWUSER", config = "CONFIG_USER_NS" },
  pid_ns = { word = "pid", flag = "CLONE_NEWPID", config = "CONFIG_PID_NS",
             gives = "the guest is PID 1 of its own PID namespace and sees no other process" },
  net_ns = { word = "net", flag = "CLONE_NEWNET", config = "CONFIG_NET_NS",
             gives = "the guest has its own network stack with only a loopback device: no network" },
  ipc_ns = { word = "ipc", flag = "CLONE_NEWIPC", config = "CONFIG_IPC_NS",
             gives = "System V IPC and POSIX message queues are not shared with the host" },
  uts_ns = { word = "uts", flag = "CLONE_NEWUTS", config = "CONFIG_UTS_NS",
             gives = "hostname and domain name are the guest's own" },
  mount_ns = { word = "mount", flag = "CLONE_NEWNS", config = "CONFIG_NAMESPACES",
               gives = "the guest has a private mount table; nothing it could mount reaches the host" },
  cgroup_ns = { word = "cgroup", flag = "CLONE_NEWCGROUP", config = "CONFIG_CGROUPS",
                gives = "the guest's cgroup is the root of its view: the host's hierarchy is hidden" },
}

local function read_int(path)
  local s = read_file(path)
  return s and tonumber(s:match("^%s*(%-?%d+)")) or -1
end

-- A word naming the container runtime this process runs under, or nil.
local function container()
  local env = os.getenv("container")
  if env and env ~= "" then return env end
  if read_file("/run/.containerenv") then return "podman" end
  if read_file("/.dockerenv") then return "docker" end
  local cg = read_file("/proc/1/cgroup") or ""
  for _, word in ipairs { "kubepods", "docker", "containerd", "libpod", "lxc" } do
    if cg:find(word, 1, true) then return word end
  end
  return nil
end

local function policy_word(needed)
  if needed then
    return "the stock untrusted policy requires it, so every run under it ends with cause " ..
           "`confinement` before the guest's first instruction"
  end
  return "untrusted does not require it"
end

local REQUIRED = {}   -- set by report() before the consequences
local function required(name)
  for _, n in ipairs(REQUIRED) do if n == name then return true end end
  return false
end

-- Why creating namespaces fails here and what to do, as a list of sentences.
-- r is the report, e the failing entry.
local function userns_advice(r, e)
  local out = {}
  local detail = e.detail or ""
  if detail:find("Invalid argument", 1, true) or detail:find("not implemented", 1, true) then
    out[#out + 1] = "the kernel was built without user namespaces: rebuild with CONFIG_USER_NS=y"
  end
  if r.max_user_namespaces == 0 then
    out[#out + 1] = "user.max_user_namespaces is 0, which forbids user namespaces to everyone: " ..
                    "`sysctl -w user.max_user_namespaces=15000` (persist it in /etc/sysctl.d/)"
  elseif detail:find("No space left", 1, true) then
    out[#out + 1] = "the user.max_user_namespaces limit is reached: raise it with " ..
                    "`sysctl -w user.max_user_namespaces=15000`"
  end
  if not r.is_root and r.unprivileged_userns_clone == 0 then
    out[#out + 1] = "kernel.unprivileged_userns_clone is 0 (the Debian/Ubuntu switch for " ..
                    "unprivileged user namespaces): `sysctl -w kernel.unprivileged_userns_clone=1` " ..
                    "(persist it in /etc/sysctl.d/)"
  end
  if not r.is_root and r.apparmor_restrict_userns == 1 then
    out[#out + 1] = "kernel.apparmor_restrict_unprivileged_userns is 1 (Ubuntu 23.10 and later): " ..
                    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor " ..
                    "profile for the program that spawns runs (the airlock command, or the Lua " ..
                    "host that loads airlock.so) granting `userns,`: e.g. /etc/apparmor.d/airlock " ..
                    "holding the two lines `abi <abi/4.0>,` and `profile airlock " ..
                    "/usr/local/bin/airlock flags=(unconfined) { userns, }` (with the real path), " ..
                    "loaded with `apparmor_parser -r /etc/apparmor.d/airlock`"
  end
  if r.container then
    out[#out + 1] = "this process runs in a container (" .. r.container .. "): its runtime's " ..
                    "seccomp profile (and AppArmor profile) refuse unshare/clone with namespace " ..
                    "flags: start it with `--security-opt seccomp=<a profile allowing unshare and " ..
                    "clone with CLONE_NEW*>` or `--security-opt seccomp=unconfined` (Docker also " ..
                    "`--security-opt apparmor=unconfined`; Kubernetes: securityContext.seccompProfile)"
  end
  if #out == 0 then
    out[#out + 1] = "no known switch explains it; the usual causes are: on Debian/Ubuntu " ..
                    "`sysctl -w kernel.unprivileged_userns_clone=1`; on Ubuntu 23.10+ " ..
                    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor " ..
                    "profile granting `userns,` to the airlock binary; in a container, the " ..
                    "runtime's seccomp profile (`--security-opt seccomp=...`); inside a chroot or " ..
                    "a multithreaded process unshare(CLONE_NEWUSER) is refused with EPERM"
  end
  return out
end

local function ns_consequence(r, name)
  local e, ns = r[name], NS[name]
  local need = required(name)
  if e.ok then
    if name == "user_ns" then
      return "each child is born in its own user namespace, mapped to uid and gid 65534, so " ..
             "it holds no capability on the host" ..
             (r.is_root and "" or "; it also gives the unprivileged spawner the right to " ..
                                  "create the other namespaces")
    end
    return ns.gives
  end
  local why
  if name ~= "user_ns" and r.user_ns and r.user_ns.ok and
     (e.detail or ""):find("Invalid argument", 1, true) then
    why = { "the kernel was built without this namespace: rebuild with " .. ns.config .. "=y" }
  elseif name ~= "user_ns" and r.user_ns and r.user_ns.ok and not r.is_root and
         r.apparmor_restrict_userns == 1 then
    why = { "a user namespace can be created but AppArmor leaves it without capabilities " ..
            "(kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu 23.10+): " ..
            "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile " ..
            "granting `userns,` to the program that spawns runs (the airlock command, or the " ..
            "Lua host that loads airlock.so)" }
  elseif name ~= "user_ns" and r.user_ns and not r.user_ns.ok and not r.is_root then
    why = { "without privilege it needs a user namespace, which is unavailable (see user_ns)" }
  else
    why = userns_advice(r, e)
  end
  return string.format("No %s namespace: %s. Why and what to do: %s. Fallback: runs skip the " ..
                       "%s namespace unless the policy requires it; %s.", ns.word, e.detail,
                       table.concat(why, "; "), ns.word, policy_word(need))
end

local function landlock_consequence(r)
  local e, abi = r.landlock, r.landlock_abi
  if e.ok then
    local parts = { "each worker restricts itself with a deny-all Landlock ruleset (ABI " ..
                    abi .. "): no file can be opened" }
    parts[#parts + 1] = abi >= 4 and "no TCP bind or connect"
                        or "TCP is not restricted (needs ABI 4, Linux 6.7)"
    parts[#parts + 1] = abi >= 6 and "no signals or abstract unix sockets outside the sandbox"
                        or "signals and abstract unix sockets are not scoped (needs ABI 6, Linux 6.12)"
    return table.concat(parts, "; ")
  end
  local fix
  if (e.detail or ""):find("disabled", 1, true) then
    fix = "Landlock is built into this kernel but not enabled: add landlock to the LSM list on " ..
          "the kernel command line, keeping the current entries (read them from " ..
          "/sys/kernel/security/lsm), e.g. `lsm=landlock,lockdown,yama,apparmor,bpf`, and reboot"
  else
    fix = "a kernel >= 5.13 built with CONFIG_SECURITY_LANDLOCK=y, with landlock in the active " ..
          "LSMs (CONFIG_LSM, or `lsm=landlock,...` on the kernel command line keeping the " ..
          "current entries)"
  end
  return string.format("Landlock is unavailable: %s. What to do: %s. Fallback: the landlock layer is " ..
                       "skipped (result.confinement says so) unless the policy requires it; %s.",
                       e.detail, fix, policy_word(required("landlock")))
end

local function seccomp_consequence(r)
  if r.seccomp.ok then
    return "each worker loads the system call allowlist; any other call ends the run with " ..
           "cause `seccomp`"
  end
  return string.format("seccomp filters are unavailable: %s. What to do: a kernel built with " ..
                       "CONFIG_SECCOMP_FILTER=y; in a container, a runtime that lets seccomp(2) " ..
                       "through. Fallback: the seccomp layer is skipped unless the policy " ..
                       "requires it; %s.", r.seccomp.detail, policy_word(required("seccomp")))
end

local CONSEQUENCE = {
  mdwe = function(r)
    if r.mdwe.ok then return "no worker or program under mdwe can map memory writable and executable" end
    return "the mdwe layer is skipped (untrusted does not require it); the worker's seccomp filter " ..
      "still refuses executable mappings and mprotect"
  end,
  landlock = landlock_consequence,
  seccomp = seccomp_consequence,
  seccomp_kill_process = function(r)
    if r.seccomp_kill_process.ok then
      return "system calls of a foreign architecture or x32 kill the whole worker at once"
    end
    return "kill-thread is used instead (Linux < 4.14); the worker is single-threaded, so a " ..
           "foreign-architecture call still ends it"
  end,
  pidfd = function(r)
    if r.pidfd.ok then return "the broker watches each child's exit through a pidfd in its epoll loop" end
    return "no run can start: spawning needs pidfd_open (Linux 5.3 or later); every start fails " ..
           "with \"spawn: this kernel has no pidfd_open\""
  end,
  cgroup2_delegated = function(r)
    if r.cgroup2_delegated.ok then
      return "a writable cgroup2 subtree is available; guest runs use no cgroup (memory, CPU " ..
             "and time are capped by the worker's allocator, the instruction budget, rlimits " ..
             "and the deadline); see pids_cgroup for airlock exec"
    end
    return "nothing changes for guest runs: they use no cgroup (memory, CPU and time are capped " ..
           "by the worker's allocator, the instruction budget, rlimits and the deadline); see " ..
           "pids_cgroup for airlock exec"
  end,
  pids_cgroup = function(r)
    if r.pids_cgroup.ok then
      return "airlock exec holds each program and all it forks to tool.limits.pids processes"
    end
    if r.is_root then
      return "as root, airlock exec refuses a policy with tool.limits.pids (the stock tool policy " ..
             "has 128) with cause confinement, since RLIMIT_NPROC binds no root; pids = 0 runs " ..
             "without a process limit"
    end
    return "airlock exec holds each program with RLIMIT_NPROC = tool.limits.pids instead, counted " ..
           "in the program's own user namespace"
  end,
  memory_cgroup = function(r)
    if r.memory_cgroup.ok then
      return "airlock exec holds all of a run's processes together to tool.limits.memory (cause memory)"
    end
    if r.is_root then
      return "as root, airlock exec refuses a policy with tool.limits.memory (the stock tool policy has " ..
             "4G) with cause confinement; memory = 0 (past the default memory ceiling: --ceiling " ..
             "memory=0) runs with tool.confine.rlimits.as per process alone"
    end
    return "airlock exec bounds memory per process only (RLIMIT_AS), and says so in the run's report"
  end,
  cpu_cgroup = function(r)
    if r.cpu_cgroup.ok then
      return "airlock exec holds all of a run's processes together to tool.limits.cpu cores, and " ..
             "reports the CPU time they used"
    end
    if r.is_root then
      return "as root, airlock exec refuses a policy with tool.limits.cpu with cause confinement; " ..
             "cpu = 0 runs bounded by the deadline alone"
    end
    return "airlock exec bounds CPU by the deadline (and rlimits.cpu per process) only, and says so"
  end,
}
for name in pairs(NS) do CONSEQUENCE[name] = function(r) return ns_consequence(r, name) end end
-- A layer of the table that says nothing more of itself.
local function table_consequence(r, name)
  if r[name].ok then return "runs whose policy asks for " .. name .. " get it" end
  return "the " .. name .. " layer is skipped here; a policy that requires it (confine.require) cannot run"
end

--- report() -> the probe table with a consequence per layer and a verdict.
function M.report()
  local r, err = core.probe()
  if not r then error("airlock: " .. tostring(err), 2) end
  r.max_user_namespaces = read_int("/proc/sys/user/max_user_namespaces")
  r.container = container()
  local words
  REQUIRED, words = untrusted_requires(r.is_root)
  for _, name in ipairs(M.LAYERS) do
    local e = r[name]
    if type(e) == "table" then e.consequence = (CONSEQUENCE[name] or table_consequence)(r, name) end
  end
  local missing = {}
  for _, name in ipairs(REQUIRED) do
    if not (r[name] and r[name].ok) then missing[#missing + 1] = name end
  end
  local effect, no_pidfd = {}, false
  for _, name in ipairs(missing) do no_pidfd = no_pidfd or name == "pidfd" end
  if #missing > (no_pidfd and 1 or 0) then effect[#effect + 1] = "its runs end with cause `confinement`" end
  if no_pidfd then effect[#effect + 1] = "without pidfd no run can start at all" end
  r.verdict = {
    policy = "untrusted",
    ok = #missing == 0,
    missing = #missing > 0 and missing or nil,
    detail = #missing == 0
      and "the untrusted policy can run here: every layer it requires (" .. words ..
          ") is available"
      or "the untrusted policy cannot run here: missing " .. table.concat(missing, ", ") ..
         " (" .. table.concat(effect, "; ") .. ")",
  }
  return r
end

--- format(report) -> text: a header, one aligned line per layer (name, yes/no,
--- detail; what a missing layer means and how to fix it indented below), the verdict.
function M.format(r)
  r = r or M.report()
  local w = 0
  for _, name in ipairs(M.LAYERS) do w = math.max(w, #name) end
  local out = {}
  local head = string.format("airlock probe: Linux %s, %s", r.kernel or "?",
                             r.is_root and "running as root" or "running unprivileged")
  if r.container then head = head .. ", in a container (" .. r.container .. ")" end
  out[#out + 1] = head
  local sysctls = {}
  if r.unprivileged_userns_clone and r.unprivileged_userns_clone >= 0 then
    sysctls[#sysctls + 1] = "kernel.unprivileged_userns_clone=" .. r.unprivileged_userns_clone
  end
  if r.apparmor_restrict_userns and r.apparmor_restrict_userns >= 0 then
    sysctls[#sysctls + 1] = "kernel.apparmor_restrict_unprivileged_userns=" .. r.apparmor_restrict_userns
  end
  if r.max_user_namespaces and r.max_user_namespaces >= 0 then
    sysctls[#sysctls + 1] = "user.max_user_namespaces=" .. r.max_user_namespaces
  end
  if #sysctls > 0 then out[#out + 1] = "sysctl: " .. table.concat(sysctls, ", ") end
  out[#out + 1] = ""
  local indent = string.rep(" ", w + 7)
  for _, name in ipairs(M.LAYERS) do
    local e = r[name]
    if type(e) == "table" then
      local mark = e.ok and "yes" or "no"
      out[#out + 1] = string.format("%-" .. w .. "s  %-3s  %s", name, mark, e.detail or "")
      if not e.ok and e.consequence then
        out[#out + 1] = indent .. wrap(e.consequence, 100 - #indent, indent)
      end
    end
  end
  out[#out + 1] = ""
  if r.verdict then
    out[#out + 1] = wrap((r.verdict.ok and "verdict: yes, " or "verdict: no, ") .. r.verdict.detail,
                         91, "         ")
  end
  return table.concat(out, "\n") .. "\n"
end

--- json(report) -> one line of JSON.
function M.json(r)
  return json.encode(r or M.report())
end

return M
