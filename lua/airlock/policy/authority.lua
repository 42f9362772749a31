-- airlock.policy.authority -- what a policy lets each role do, and whether a
-- run may go at all. resolve turns an entry point's policy argument into a
-- policy of its tier (refusing less confinement than the tier's stock policy
-- unless it says unconfined = true); admit, at the start of every run, warns
-- of such a policy or (AIRLOCK_REQUIRE_CONFINEMENT=1) refuses it; authority
-- gives one role's settings (worker, tool, ledger), the last two as
-- airlock.spawn's options.
local util = require "airlock.util"
local freeze = require "airlock.policy.freeze"
local loader = require "airlock.policy.load"
local compose = require "airlock.policy.compose"
local ceilings = require "airlock.policy.ceilings"
local grants = require "airlock.policy.grants"

local plain = util.copy
local raw = freeze.raw
local loosening, brief = compose.loosening, compose.brief

local M = {}

-- airlock.spawn's options from a program's confine section and its grants
-- (airlock.policy.grants): Landlock's paths are the grants' lists, its other
-- settings (ports, scope) the section's; seccomp's promises stay a list.
local function spawn_options(c, list)
  c = c or {}
  local o = { namespaces = plain(c.namespaces), rlimits = plain(c.rlimits), confine = {} }
  local ll = c.landlock
  if ll then
    ll = ll == true and {} or plain(ll)
    local lists = grants.lists(list)
    for _, kind in ipairs { "read", "write", "exec" } do
      ll[kind] = #lists[kind] > 0 and lists[kind] or nil
    end
    o.confine.landlock = ll
  end
  if c.seccomp then o.confine.seccomp = plain(c.seccomp) end
  if c.no_new_privs ~= nil then o.confine.no_new_privs = c.no_new_privs end
  return o
end

--- resolve(p, base) -> a frozen policy, or nil, message. The one rule every
--- entry point uses to turn a policy argument into a policy, for the tier
--- whose stock policy is base ("untrusted" for guests, "tool" for programs):
---   nil                  base itself
---   a stock name         that stock policy, as it is
---   a file path          what the file returns, then as below
---   a bare table         laid over base (policy.layer), so it has base's
---                        confinement unless it turns a layer off by name
---   a policy             as it is
--- Whatever it is, a result with less confinement than base (a field base
--- locks, loosened) is refused unless it says unconfined = true, the named
--- opt-out: such runs warn every time (admit) and AIRLOCK_REQUIRE_CONFINEMENT=1
--- refuses them. A budget (CPU, memory, stack, instructions, deadline,
--- output) is not confinement: raised above base's, it is refused only past
--- the host's ceiling of its kind (airlock.policy.ceilings).
-- What loosening found for a policy against a stock base, kept: both are
-- frozen, so the answer cannot change (a host starting many runs under one
-- policy pays the walk once).
local loosenings = setmetatable({}, { __mode = "k" })   -- policy -> base name -> {path, o, n} or false

local function loosening_of(b, base, pol)
  local memo = loosenings[pol]
  if not memo then memo = {} loosenings[pol] = memo end
  local found = memo[base]
  if found == nil then
    local path, lp, o, n = loosening(b, pol)
    found = path and { path, lp, o, n } or false
    memo[base] = found
  end
  if found then return found[1], found[2], found[3], found[4] end
end

function M.resolve(p, base)
  local b, err = loader.load(base)
  if not b then return nil, err end
  if p == nil then return b end
  local given, from = p, nil
  if type(p) == "string" then
    if loader.is_stock(p) then
      local s = loader.load(p)
      local over = ceilings.check(s, b, base)
      if over then return nil, over end
      return s
    end
    local v, ferr = ceilings.while_loading(loader.file_value, p, base)
    if v == nil then return nil, ferr end
    given, from = v, p
  end
  local pol = given
  if not freeze.is_policy(given) then
    local ok, r = pcall(compose.layer, b, given)
    if not ok then return nil, r .. (from and " (in " .. from .. ")" or "") end
    pol = r
  end
  -- A policy file without a name of its own gives it its file's ("mods"
  -- for mods.lua): a derived policy is never reported as its base.
  local fname = from and loader.file_name(from)
  if fname then
    local ok, r = pcall(freeze.named, pol, fname)
    if not ok then return nil, r .. " (in " .. from .. ")" end
    pol = r
  end
  if not pol.unconfined then
    local path, _, o, n = loosening_of(b, base, pol)
    if path then
      return nil, string.format("policy: '%s'%s has less confinement than the stock '%s' (%s: %s -> %s). " ..
        "Build it with policy.extend(\"%s\", {...}) or give a bare table, which is laid over '%s'; " ..
        "to run with less confinement on purpose, set unconfined = true in it (every run then warns, " ..
        "and AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it)", freeze.label(pol),
        from and " (" .. from .. ")" or "", base, path, brief(o), brief(n), base, base)
    end
  end
  local over = ceilings.check(pol, b, base)
  if over then return nil, over .. (from and " (in " .. from .. ")" or "") end
  return pol
end

--- confinement_required() -> whether AIRLOCK_REQUIRE_CONFINEMENT asks that
--- no run goes with less confinement than its stock base (set, and not "0").
function M.confinement_required()
  local req = os.getenv("AIRLOCK_REQUIRE_CONFINEMENT")
  return req ~= nil and req ~= "" and req ~= "0"
end

local admitted = setmetatable({}, { __mode = "k" })   -- policy -> base -> what admit found
local warned = setmetatable({}, { __mode = "k" })     -- host -> policy -> true

--- admit(pol, base, what, host) -> true, or nil, message, at the start of every
--- run under pol in the tier of base (what: "guests" or "programs"). A policy
--- with less confinement than base (a layer or a rule of it off, which takes
--- the opt-out unconfined = true; or no layer at all) prints one warning line
--- to stderr, once per host (a broker: one line per command, not one per bot
--- of a game host) or on every call when host is nil;
--- AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it instead (cause confinement). The
--- opt-out alone, with every layer there, and a raised budget are neither.
local function less_of(pol, base)
  local memo = admitted[pol] or {}
  admitted[pol] = memo
  local less = memo[base]
  if less == nil then
    less = false
    if base == "untrusted" and M.unconfined(pol) then
      less = ""
    else
      local b = loader.load(base)
      local path = b and loosening_of(b, base, pol)
      if path then less = string.format(" (less than the stock '%s': %s)", base, path) end
    end
    memo[base] = less
  end
  return less
end

function M.admit(pol, base, what, host)
  local less = less_of(pol, base)
  if not less then return true end
  local name = freeze.label(pol)
  if M.confinement_required() then
    return nil, string.format("confinement: policy '%s' runs %s without confinement%s, " ..
      "and AIRLOCK_REQUIRE_CONFINEMENT=1 refuses it", name, what, less)
  end
  if host ~= nil then
    local seen = warned[host] or setmetatable({}, { __mode = "k" })
    warned[host] = seen
    if seen[pol] then return true end
    seen[pol] = true
  end
  io.stderr:write(string.format("airlock: WARNING: policy '%s' runs %s WITHOUT confinement%s\n", name, what, less))
  return true
end

--- always_admitted(pol, base) -> whether admit(pol, base, ...) is true whatever
--- the environment says and prints nothing: pol has no less confinement than
--- base (a pool asks once, not at every start).
function M.always_admitted(pol, base) return less_of(pol, base) == false end

--- authority(p, role, opts) -> the settings of one role, or nil, message.
---   "worker": { worker, limits, confine, effects, secrets } (parts of the frozen policy)
---   "tool":   airlock.spawn options (add argv): namespaces, rlimits, confine
---             {landlock, seccomp, no_new_privs}, env, workdir, deadline_ms, capture;
---             Landlock's lists are the policy's grants (airlock.policy.grants:
---             its own lists, the workspace (opts.workspace, else
---             tool.workspace; exec too with tool.workspace_exec), tool.grant),
---             seccomp's promises a list of words; the workspace is the
---             working directory
function M.authority(p, role, opts)
  p = freeze.new(p)
  opts = opts or {}
  local name = freeze.label(p)
  if role == "worker" then
    return { worker = p.worker, limits = p.limits, confine = p.confine, effects = p.effects, secrets = p.secrets }
  elseif role == "tool" then
    local t = p.tool
    if not t then return nil, string.format("policy '%s' has no tool section (no authority for tools)", name) end
    local ws = opts.workspace or t.workspace
    local list, gerr = grants.of_policy(t, ws, name)
    if not list then return nil, gerr end
    local o = spawn_options(t.confine, list)
    o.workdir = ws
    o.workspace = opts.workspace   -- for airlock.spawn: bound nosuid, idmapped when root
    o.env = plain(t.env)
    o.deadline_ms = t.limits and t.limits.deadline_ms
    o.capture = t.limits and t.limits.capture
    return o
  end
  return nil, string.format("policy: unknown role '%s' (worker or tool)", tostring(role))
end

--- unconfined(p) -> true when runs under p have no confinement at all: its
--- confine section turns on no layer (the stock dev has none). unconfined =
--- true alone is not that: it allows less confinement, and a policy that
--- keeps every layer (raising a budget, say) is confined all the same.
function M.unconfined(p)
  local c = p.confine
  if not c then return true end
  local function any(t) return t ~= nil and next(raw(t)) ~= nil end
  return not (any(c.namespaces) or any(c.rlimits) or c.capabilities == "drop" or c.no_new_privs
              or c.landlock or c.seccomp or c.mdwe)
end

return M
