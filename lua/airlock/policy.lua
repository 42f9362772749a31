-- airlock.policy -- validate, compose, freeze and digest policy tables.
-- A policy is data: unknown keys are errors (a typo never weakens a sandbox),
-- sizes and durations take units, and a loaded policy cannot be modified.
--
-- Roles (process authorities). The top level is the `worker` authority, the
-- guest runtime: `limits`, `confine`, `effects`, `secrets` (and `worker`, the
-- worker program). Two more roles have their own section:
--   tool   = { limits, confine, env, secrets, workspace, tmp }   programs under `airlock exec`
--   ledger = { confine }                           the journal writer
-- Their `confine` is airlock.spawn's form (Landlock paths, seccomp promises).
-- policy.authority(p, role, opts) gives a role's settings, ready to use.
--
-- Composition: policy.extend(base, overrides)
--   maps merge deeply; values and lists replace;
--   key = policy.append{...}   adds the items to the base's list;
--   key = policy.remove        drops the key (and all under it);
--   locked = {"confine", "limits.memory", 'effects["fs.read"]'} in a base marks
--   fields no override may loosen (an error naming the field); tightening is
--   allowed. Locks accumulate: an override's `locked` adds to the base's, and
--   cannot remove any. A lock on a confine section locks isolation: the
--   budgets in it (rlimits.cpu, rlimits.stack) stay free to size; other locks
--   ("limits", "confine.rlimits.cpu") hold what they cover. What a policy's
--   budgets (policy.BUDGETS: CPU, memory, stack, instructions, deadline,
--   output) ask past its tier's stock policy is bounded by the host's
--   ceilings (policy.ceilings{...}), checked by resolve.
--
-- Digest: policy.digest(p), SHA-256 over a canonical encoding (sorted keys) of
-- everything but handler code, plus each handler's source text.
--
-- This file is the facade; each concern is one module under airlock.policy:
--   values     the rules for values (sizes, durations, word lists...) and the
--              pieces of error messages (field paths, "did you mean")
--   looser     the kinds of "this change loosens a field"
--   schema     what a policy table may hold: per field its rule, default,
--              what loosens it and a one-line doc; the lock paths
--   markers    policy.append and policy.remove
--   freeze     validation against the schema, and the frozen proxies (new)
--   load       stock policies by name, policy files by path
--   compose    extend and layer, and the check of locked fields
--   ceilings   the host's ceilings on budgets, and the check of a policy against them
--   digest     the canonical encoding and its SHA-256
--   grants     a program's Landlock paths as one list of {path, rights, why}
--   authority  resolve, admit, each role's settings
--   reference  the policy reference (docs/POLICY.md), written from the schema
-- Each requires only those above it in this list, so there is no cycle.
local values = require "airlock.policy.values"
local schema = require "airlock.policy.schema"
local markers = require "airlock.policy.markers"
local freeze = require "airlock.policy.freeze"
local loader = require "airlock.policy.load"
local compose = require "airlock.policy.compose"
local ceilings = require "airlock.policy.ceilings"
local digest = require "airlock.policy.digest"
local authority = require "airlock.policy.authority"
local reference = require "airlock.policy.reference"

local M = {}

-- The schema and the words of its closed sets.
M.SCHEMA = schema.SCHEMA
M.NAMESPACES = schema.NAMESPACES
M.LAYERS = schema.LAYERS
M.PROGRAM_LAYERS = schema.PROGRAM_LAYERS
M.PROMISES = schema.PROMISES

-- Values and paths.
M.path_of = values.path_of
M.parse_size = values.size
M.parse_duration = values.duration_ms
M.parse_path = schema.parse_path

--- default(path) -> the value an absent field stands for ("limits.output" ->
--- 65536), from its schema entry; nil when it has none (unset, or unlimited).
function M.default(path)
  local node = schema.SCHEMA
  for _, k in ipairs(assert(schema.parse_path(path))) do
    node = assert(schema.child_of(node, k), "policy.default: no field " .. path)
  end
  local about = schema.about(node)
  return about and about.default
end

-- Making, loading and composing policies.
M.new = freeze.new
M.is_policy = freeze.is_policy
M.base_of = freeze.base_of
M.label = freeze.label
M.load = loader.load
M.is_stock = loader.is_stock
M.append = markers.append
M.remove = markers.remove
M.extend = compose.extend
M.layer = compose.layer
M.same = compose.same

-- Budgets and the host's ceilings on them (airlock.policy.ceilings).
M.BUDGETS = schema.BUDGETS
M.ceilings = ceilings.ceilings

--- reference() -> the policy reference (docs/POLICY.md) as Markdown, from the schema.
function M.reference() return reference.text() end

-- Digest.
M.source_of = digest.source_of
M.canonical = digest.canonical
M.digest = digest.digest

-- Roles.
M.resolve = authority.resolve
M.confinement_required = authority.confinement_required
M.admit = authority.admit
M.always_admitted = authority.always_admitted
M.authority = authority.authority
M.unconfined = authority.unconfined

return setmetatable(M, { __call = function(_, t) return M.new(t) end })
