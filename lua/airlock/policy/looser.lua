-- airlock.policy.looser -- the kinds of "this change loosens the field",
-- which the schema names field by field. A rule is looser(old, new, about)
-- -> true when new grants more than old; about is the field's schema entry
-- (its default stands for an absent value). A field whose schema names no
-- rule loosens when it changes at all (airlock.policy.compose).
local set_of = require("airlock.util").set_of

local M = {}

local INF = math.huge
M.INF = INF

--- What each rule says, for the reference (docs/POLICY.md); filled below.
M.WORDS = {}

local zero_of = setmetatable({}, { __mode = "k" })   -- upper rule -> what 0 stands for

--- value(about, x) -> what x stands for in a field whose rule is upper: a
--- number, INF when unlimited (an absent value is the field's default).
function M.value(about, x)
  local default = about and about.default or INF
  if x == nil then return default end
  local zero = about and zero_of[about.looser]
  if x == 0 and zero then return zero == "default" and default or zero end
  return x
end

--- Numbers where larger is looser. opts.zero: what 0 stands for (INF when 0
--- means unlimited, "default" when it means the default). An absent value is
--- the field's default, or unlimited when it has none.
function M.upper(opts)
  opts = opts or {}
  local fn
  fn = function(old, new, about)
    about = about or { looser = fn }
    return M.value(about, new) > M.value(about, old)
  end
  zero_of[fn] = opts.zero
  M.WORDS[fn] = opts.zero == INF and "a larger value, or 0 (unlimited)" or "a larger value"
  return fn
end

--- An address-space limit (rlimits.as): an absent one is what the memory
--- budget derives (airlock.confine), which a value can only lower; 0 is none.
--- Loosened by a larger value, by removing it, or by 0.
function M.address_space(old, new)
  if new == 0 then return old ~= 0 end                     -- none at all
  if new == nil then return old ~= nil and old ~= 0 end    -- the derived one, which may be larger
  if old == nil or old == 0 then return false end
  return new > old
end

-- true when some item of a is not in b.
local function missing(a, b)
  local sb = set_of(b)
  if type(a) == "table" then
    for _, v in ipairs(a) do if not sb[v] then return true end end
  end
  return false
end

--- true is the stricter value (no_new_privs = true).
function M.flag(old, new) return old == true and new ~= true end
--- false is the stricter value (shared_net, workspace_exec).
function M.flag_inverted(old, new) return old ~= true and new == true end
--- A list where each item restricts: removing one loosens (namespaces).
function M.superset(old, new) return missing(old, new) end
--- A list where each item grants: adding one loosens (notify, tool.network.allow).
function M.more(old, new) return missing(new, old) end
--- Granting an effect or a secret, or changing its handler, loosens; refusing tightens.
function M.grant(old, new)
  if new == nil or new == false then return false end
  return old ~= new
end
--- One of a set of words where only `strict` is strict (capabilities = "drop").
function M.only(strict)
  local fn = function(old, new) return old == strict and new ~= strict end
  M.WORDS[fn] = "any value but \"" .. strict .. "\""
  return fn
end

--- Landlock: off loosens; so does a path or port granted that was not, or
--- scope turned off. true is a ruleset with no rule.
function M.landlock(old, new)
  local function norm(x)
    if x == nil or x == false then return nil end
    if x == true then x = {} end
    return x
  end
  old, new = norm(old), norm(new)
  if old == nil then return false end
  if new == nil then return true end
  for _, k in ipairs { "read", "write", "exec", "bind", "connect" } do
    if missing(new[k], old[k]) then return true end
  end
  return old.scope ~= false and new.scope == false
end

--- seccomp: off loosens; so do a promise or call more on an allowlist, one
--- fewer on a denylist, an allowlist become a denylist, and a refusal that
--- stops killing. true is the worker's fixed allowlist.
function M.seccomp(old, new)
  if old == nil or old == false then return false end
  if new == nil or new == false then return true end
  if old == true or new == true then return old ~= new end
  local om, nm = old.mode or "allow", new.mode or "allow"
  if om == "allow" and nm == "deny" then return true end
  if om == "allow" and nm == "allow" then
    if missing(new.promises, old.promises) or missing(new.syscalls, old.syscalls) then return true end
  elseif om == "deny" and nm == "deny" then
    if missing(old.syscalls, new.syscalls) then return true end
  end
  -- Absent is the schema's default (a fitting errno), so only an explicit kill is the strict one.
  return old.refuse == "kill" and new.refuse ~= "kill"
end

M.WORDS[M.flag] = "turning it off"
M.WORDS[M.flag_inverted] = "turning it on"
M.WORDS[M.superset] = "removing an item"
M.WORDS[M.more] = "adding an item"
M.WORDS[M.grant] = "granting it, or changing its handler"
M.WORDS[M.landlock] = "turning it off, a path or port more, scope off"
M.WORDS[M.address_space] = "a larger value, removing it, or 0 (none)"
M.WORDS[M.seccomp] = "turning it off, a promise or call more, deny mode, a refusal that does not kill"

return M
