-- airlock.launch.journal -- the entries that run a recorded session again:
-- airlock.replay (answered only from its journal), airlock.resume (a paused
-- session continued, live from the pause on) and airlock.branch (a session
-- cut at a pause, to be resumed).
local core = require "airlock.core"
local policy = require "airlock.policy"
local session = require "airlock.session"
local ledger = require "airlock.ledger"
local nest = require "airlock.nest"
local spec = require "airlock.launch.spec"
local resolve = require "airlock.launch.resolve"
local launch = require "airlock.launch.start"

local M = {}

-- The policy a recorded run is run again under: want (the user's), else the
-- stock policy the journal names; never a file a journal names, since whoever
-- can write a journal can re-chain it (the chain is unkeyed). A digest that
-- differs from the recorded one refuses the run unless changed_ok, and is
-- then a note.
local function recorded_policy(s, want, changed_ok)
  local rp = s.init.policy or {}
  local named = want
  if named == nil then
    named = rp.ref or rp.name
    if named == nil then
      return nil, "policy: the journal names no policy" ..
        (type(rp.base) == "string" and " of its own (the run's was derived from '" .. rp.base .. "')" or "") ..
        "; give the one the run was recorded under (--policy)"
    end
    if not policy.is_stock(named) then
      return nil, string.format("policy: the journal names the policy '%s', which is not a stock policy; " ..
        "a journal never chooses code to run, so give it yourself (--policy FILE) once you trust it",
        tostring(named))
    end
  end
  local pol, err = resolve.policy_of(named)
  if not pol then return nil, err end
  local note
  if rp.digest and policy.digest(pol) ~= rp.digest then
    note = string.format("the policy '%s' is not the one the run was recorded under (digest %s..., now %s...)",
      type(named) == "string" and named or tostring(pol.name), tostring(rp.digest):sub(1, 12),
      policy.digest(pol):sub(1, 12))
    if not changed_ok then
      return nil, "policy: " .. note .. "; to run it anyway, say so (--policy-changed, or policy_changed = true)"
    end
  end
  return pol, nil, note
end

-- A served call with nested runs under it replays each of them from the
-- journal first (airlock.nest.replay_child), their own nested runs likewise.
local function replay_nested(ctx, child)
  return nest.replay_child(ctx, child, function(c) return session.server(c, nil, replay_nested) end)
end

-- Runs a recorded session again in a fresh worker, served by srv. extra: b:start
-- options over the recorded ones; resume_of: the resume to record (spec.rerun's).
local function rerun(s, pol, srv, extra, resume_of)
  if s.init.guest and s.init.guest.argv then
    return nil, string.format("the session recorded a program (airlock exec %s), not a guest: only guest " ..
      "runs can be replayed or resumed; `airlock ledger verify` and `ledger show` audit it",
      table.concat(s.init.guest.argv, " "):sub(1, 200))
  end
  local b <close> = core.broker()
  local run, err, code = launch.start(b, spec.rerun(s, pol, srv, extra, resume_of))
  if not run then return nil, err, code end
  return run:wait(b)
end

--- airlock.replay(dir, {policy = ..., policy_changed = bool, guest = source}) -> report, or nil,
--- message. The policy: opts.policy, else the stock policy the journal names
--- (a journal never names a file to run); one whose digest differs from the
--- recorded one needs policy_changed = true. Re-runs the
--- session's run in a fresh worker answered only from the journal: report =
--- { identical = bool, result = the new result, recorded = the recorded end
--- (done or pause record), served = calls answered from the journal,
--- live_effects = 0 (nothing may be performed for real), note = policy change }.
--- guest replaces the recorded source, to check that changed code still asks
--- for the same effects (cause diverged, naming the seq, when it does not).
function M.replay(dir, opts)
  opts = opts or {}
  local s, err = session.load(dir)
  if not s then return nil, err end
  local pol, perr, note = recorded_policy(s, opts.policy, opts.policy_changed)
  if not pol then return nil, perr, "policy" end
  local srv = session.server(s, nil, replay_nested)
  local res, rerr = rerun(s, pol, srv, { guest = opts.guest })
  if not res then return nil, rerr end
  local rec = s.final
  local identical = rec ~= nil and res.cause == (rec.kind == "pause" and "paused" or rec.cause)
  if identical then
    local want = rec.kind == "pause" and rec.prompt or rec.value
    identical = session.same(res.value, want) and srv.next == #s.calls + 1
  end
  return { identical = identical, result = res, recorded = rec, served = srv.served,
           live_effects = srv.live_calls, calls = #s.calls, note = note, nested = res.nested or 0 }
end

--- airlock.resume(dir, input, {policy = ..., policy_changed = bool, durability = ...}) -> result, or nil,
--- message, code. Continues a paused session: a fresh worker replays the
--- journal up to the pause, host.input returns input there, and from then on
--- the run is live and recorded in the same journal.
function M.resume(dir, input, opts)
  opts = opts or {}
  local s, err = session.load(dir)
  if not s then return nil, err end
  if not s.final or s.final.kind ~= "pause" then
    return nil, string.format("ledger %s: the run is not paused (it ended with %s)", dir,
      s.final and ("cause " .. tostring(s.final.cause)) or "no end recorded")
  end
  local pol, perr, note = recorded_policy(s, opts.policy, opts.policy_changed)
  if not pol then return nil, perr, "policy" end
  s.inputs[#s.inputs + 1] = input
  local srv = session.server(s, true, replay_nested)
  local res, rerr, code = rerun(s, pol, srv, { ledger = dir, durability = opts.durability },
    { input = input, run = s.run })
  if not res then return nil, rerr, code end
  res.note = note
  return res
end

--- airlock.branch(dir, at_seq, newdir) -> true, or nil, message: a new session
--- holding the journal's records up to at_seq, which must be a pause of the
--- run, so the branch can be resumed (and replays up to there alone).
--- (airlock.ledger.branch copies any prefix, for the journal alone.)
function M.branch(dir, at, newdir)
  -- A branch is to be resumed: it ends at a pause of the run, or it would be
  -- a session nothing can continue (and whose replay can only diverge).
  if math.type(at) == "integer" then
    local kind, pauses = nil, {}
    pcall(function()   -- a journal that cannot be read is ledger.branch's to report
      for rec in ledger.records(dir) do
        if rec.seq == at then kind = rec.kind end
        if rec.kind == "pause" then pauses[#pauses + 1] = tostring(rec.seq) end
      end
    end)
    if kind and kind ~= "pause" then
      return nil, string.format("record %d is a '%s', not a pause: a branch must end where the run paused, " ..
        "so it can be resumed (%s)", at, kind, #pauses > 0 and "this session paused at seq " ..
        table.concat(pauses, ", ") or "this session never paused"), "branch"
    end
  end
  return ledger.branch(dir, at, newdir)
end

return M
