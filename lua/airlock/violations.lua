-- airlock.violations -- one structured record per refusal of a program's
-- run, for the result (result.violations) and the command's stderr:
-- { kind = "network" | "syscall" | "limit", what, rule (the policy field that
-- would allow it), reason, at (ms since the run started, when known) }.
-- Network refusals come from the egress proxy as they happen
-- (airlock.egress); this adds the refused system calls and the limits that
-- ended the run, and says whether the sandbox ended it (result.sandbox).
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

--- line(v) -> the one line the command prints for a violation.
function M.line(v)
  if v.kind == "network" then return string.format("refused %s: %s", v.what, v.reason) end
  return string.format("refused %s: %s (%s)", v.what, v.reason, v.rule)
end

return M
