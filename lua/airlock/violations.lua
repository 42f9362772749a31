-- airlock.violations -- one structured record per refusal of a program's
-- run, for the result (result.violations) and the command's stderr:
-- { kind = "network" | "syscall" | "limit" | "path", what, rule (the policy field that
-- would allow it), reason, at (ms since the run started, when known) }.
-- Network refusals come from the egress proxy as they happen
-- (airlock.egress); this adds the refused system calls and the limits that
-- ended the run, and says whether the sandbox ended it (result.sandbox);
-- with observed calls (airlock.exec's observe), the paths the program could
-- not reach (M.paths); with a proxy, the program's direct connects (M.connects).
local M = {}

local LIMIT_RULE = {
  deadline = { "deadline", "tool.limits.deadline_ms (or a shorter --timeout)" },
  memory = { "memory", "tool.limits.memory" },
  cpu = { "CPU time", "tool.confine.rlimits.cpu" },
  seccomp = { "a system call", "tool.confine.seccomp" },
  ledger = { "the ledger", "limits.ledger" },
}

--- The sandbox's part in how the run ended: "ended" (a limit, a refusal
--- that kills, the ledger, a cancel: not the program's doing), "refused"
--- (the program failed after the policy refused something it asked for:
--- likely why), or nil (the program's own outcome).
local ENDED = { deadline = true, memory = true, cpu = true, seccomp = true, confinement = true,
                protocol = true, ledger = true, cancelled = true }

--- add(res): fills res.violations (keeping those already there first) and res.sandbox.
function M.add(res)
  local v = res.violations or {}
  for _, r in ipairs(res.refused or {}) do
    v[#v + 1] = { kind = "syscall", what = r.syscall, rule = "tool.confine.seccomp.promises",
                  reason = string.format("refused with %s%s", tostring(r.errno),
                    (r.count or 1) > 1 and string.format(" (%d times)", r.count) or "") }
  end
  local lim = LIMIT_RULE[res.cause]
  if lim then
    v[#v + 1] = { kind = "limit", what = lim[1], rule = lim[2], reason = tostring(res.message),
                  at = res.usage and res.usage.wall_ms and math.floor(res.usage.wall_ms) or nil }
  end
  local u = res.usage or {}
  if (u.pids_refused or 0) > 0 then
    v[#v + 1] = { kind = "limit", what = "processes", rule = "tool.limits.pids",
                  reason = string.format("%d forks refused at the limit", u.pids_refused) }
  end
  res.violations = v
  if ENDED[res.cause] then res.sandbox = "ended"
  elseif res.cause ~= "ok" and #v > 0 then res.sandbox = "refused" end
  return res
end

--- paths(res, ctx): with result.observed (airlock.exec's observe), adds a
--- violation for each path the program could not reach, naming the field that
--- would grant it: one its view lacks but the host has (the program saw
--- ENOENT: a path outside the view does not exist for it) -> tool.grant.read,
--- or tool.grant.exec when it tried to run it; one it wrote, made or removed
--- outside what it may change (the view's read-only mount or Landlock refused
--- it: EROFS or EACCES) -> tool.grant.write. /proc is the run's own, not judged. ctx: stat(path) -> the host's type or nil; writable =
--- {roots}. At most M.PATHS_MAX records; res.path_violations_total counts all.
M.PATHS_MAX = 64
local function beneath(p, root)
  return p == root or (p:sub(1, #root) == root and (root:sub(-1) == "/" or p:sub(#root + 1, #root + 1) == "/"))
end
-- The host has p, and it is not the run's own /proc by another name
-- (/etc/mtab -> /proc/self/mounts: "self" is looked up in the run's view as
-- the broker's pid, which its pid namespace does not have).
local function seen_on_host(ctx, p)
  local t, real = ctx.stat(p)
  return t ~= nil and not (real and (real == "/proc" or real:sub(1, 6) == "/proc/"))
end

function M.paths(res, ctx)
  if not res.observed then return res end
  local v = res.violations or {}
  local seen, total = {}, 0
  for line in res.observed:gmatch("[^\n]+") do
    local kind, view, p = line:match("^([rwxsd])([%+%-%?]) (/.*)$")
    if kind and not seen[p] then
      local rule, reason
      local writes = kind == "w" or kind == "d"
      local inside = false   -- what it may change it may also make: a path there missing before is its own
      for _, root in ipairs(ctx.writable or {}) do if beneath(p, root) then inside = true break end end
      if inside or p == "/proc" or p:sub(1, 6) == "/proc/" then
        rule = nil   -- its own, or the run's own /proc (the host's says nothing of it)
      elseif writes then
        rule = "tool.grant.write"
        reason = kind == "w" and "read-only for the program (the write was refused)"
          or "its directory is read-only for the program (the change was refused)"
      elseif view == "-" and seen_on_host(ctx, p) then
        rule = kind == "x" and "tool.grant.exec" or "tool.grant.read"
        reason = "outside the program's view, so it found nothing there (ENOENT); the host has it"
      end
      if rule then
        seen[p] = true
        total = total + 1
        if total <= M.PATHS_MAX then v[#v + 1] = { kind = "path", what = p, rule = rule, reason = reason } end
      end
    end
  end
  res.violations = v
  if total > 0 then res.path_violations_total = total end
  return res
end

--- connects(res, ctx): with result.connects (a run with tool.network: the
--- IPv4 and IPv6 destinations the program connected to directly, not through
--- its proxy), adds a "network" violation for each: the kernel refused it
--- (Landlock lets the program connect only to the proxy's port; its network
--- namespace has only its loopback), and the proxy reaches a destination only
--- when tool.network.allow names it. ctx: proxy = the proxy's URL (HTTP_PROXY);
--- allowed(host, port) -> whether the policy lets the proxy reach it.
--- result.connects_total counts every such connect.
function M.connects(res, ctx)
  if not res.connects then return res end
  local v = res.violations or {}
  for _, dest in ipairs(res.connects) do
    local host, port = dest:match("^%[(.*)%]:(%d+)$")
    if not host then host, port = dest:match("^(.*):(%d+)$") end
    local through = string.format("a direct connection: a program reaches the network only through the run's " ..
      "proxy (HTTP_PROXY=%s)", tostring(ctx.proxy))
    local reason
    if host and ctx.allowed and ctx.allowed(host, tonumber(port)) then
      reason = through .. ", which tool.network.allow already lets reach it: connect through the proxy"
    else
      reason = string.format("%s; to let the proxy reach it, add %q to tool.network.allow and connect " ..
        "through the proxy", through, dest)
    end
    v[#v + 1] = { kind = "network", what = dest, rule = "tool.network.allow", reason = reason }
  end
  res.violations = v
  return res
end

--- line(v) -> the one line the command prints for a violation.
function M.line(v)
  if v.kind == "network" then return string.format("refused %s: %s", v.what, v.reason) end
  return string.format("refused %s: %s (%s)", v.what, v.reason, v.rule)
end

return M
