-- airlock.launch.recording -- the record step of a start: the run's ledger
-- (opened, or its parent's), its first record (init, nest or resume), every
-- handler wrapped so each call is recorded before it is handled and each
-- answer after; and, for a run served from a journal (replay, resume), the
-- handlers that answer from it.
local ledger_mod = require "airlock.ledger"
local session = require "airlock.session"
local init_map = require "airlock.launch.init_map"
local run_handlers = require "airlock.launch.run_handlers"

local M = {}

-- l: an open ledger (airlock.ledger.open), or a directory to create a
-- session in (closed when the run ends), bounded by max_bytes (the policy's
-- ledger.max_bytes; an open ledger keeps the bound it was opened with). A
-- directory that holds a session already is refused, as the commands refuse
-- it, unless the run resumes that session (resuming).
-- Returns ledger, owned, or nil, nil, message.
local function open_ledger(l, durability, max_bytes, resuming)
  if l == nil then return nil end
  if type(l) == "string" then
    if not resuming then
      local fresh, taken = ledger_mod.fresh(l, true)
      if not fresh then return nil, nil, taken end
    end
    local ledger, err = ledger_mod.open(l, { create = true, durability = durability or "batch",
                                             max_bytes = max_bytes })
    if not ledger then return nil, nil, err end
    return ledger, true
  end
  return l, false
end

-- The first record of the run: what its replay starts from.
local function first_record(rec, st, handlers, spec, rp, what, serial, seed)
  local nested, resume_of = spec.nested, spec.resume_of
  if nested then
    -- A nested run (ctx:nest): its init is a nest record, under its parent's call.
    local pctx = nested.ctx
    local limits = init_map.limits(rp.limits, { deadline_ms = nested.deadline_ms or 0 })
    return "nest", "the nested run's start", {
      parent = { run = nested.parent.recorder.run, id = pctx.seq, seq = pctx.ledger_seq },
      depth = nested.parent.nest.depth + 1,
      guest = { name = what.name, source = what.source },
      input = spec.input, seed = seed,
      effects = run_handlers.names(handlers),
      policy = { name = rp.policy.name, base = st.policy_base, digest = st.digest },
      limits = limits,
    }
  elseif resume_of then
    -- Resuming: the init is already in the journal; this records the answer.
    return "resume", "the resume", { input = resume_of.input }
  end
  return "init", "the run's init", {
    guest = what.program and { name = what.name, argv = what.argv } or { name = what.name, source = what.source },
    input = spec.input, seed = seed,
    effects = run_handlers.names(handlers),
    policy = { name = rp.policy.name, base = st.policy_base, digest = st.digest, ref = rp.ref },
  }
end

--- record(record, handlers, spec, rp, what, serial, seed) -> true, or nil,
--- message, "ledger". When the spec names a ledger: the init record (or,
--- resuming, the resume record; nested, the nest record) goes in before
--- anything is spawned; the record gets its recorder, ledger and owned, and
--- the handlers are wrapped.
function M.record(st, handlers, spec, rp, what, serial, seed)
  local bound = ledger_mod.session_max(rp.policy)
  local ledger, owned, lerr = open_ledger(spec.ledger, spec.durability, bound, spec.resume_of ~= nil)
  if lerr then return nil, lerr, "ledger" end
  if not ledger then return true end
  local resume_of, nested = spec.resume_of, spec.nested
  -- The session's bound: the policy's, when this run opened the session; a
  -- nested run's is its parent's; airlock.exec's, when it opened it.
  st.ledger_bound = owned and bound or nested and nested.parent.ledger_bound or spec.ledger_bound
  local rec = session.recorder(st.ledger_bound and ledger_mod.naming_bound(ledger, st.ledger_bound) or ledger,
    nested and nested.ledger_run or resume_of and resume_of.run or serial,
    rp.redact, nested and nested.max_bytes or rp.limits.ledger)
  st.recorder, st.ledger, st.owned = rec, ledger, owned
  local kind, what_is, fields = first_record(rec, st, handlers, spec, rp, what, serial, seed)
  if not rec:append(kind, fields) then
    if owned and not nested then ledger:close() end
    return nil, "ledger: cannot record " .. what_is .. ": " .. rec.failed, "ledger"
  end
  for k, h in pairs(handlers) do handlers[k] = rec:wrap(k, h) end
  return true
end

--- served(record, handlers, collect_log, srv) -> the handlers the run gets.
--- Served from a journal (replay, resume): recorded answers first, in order;
--- past them the live (and recorded) handlers, or divergence. collect_log:
--- the built-in log handler; srv: the server, or nil (handlers as they are).
function M.served(st, handlers, collect_log, srv)
  if not srv then return handlers end
  local live = handlers
  st.server = srv
  handlers = {}
  for k in pairs(live) do handlers[k] = srv:handler(k) end
  if collect_log and handlers.log then
    -- What the guest prints is answered from the journal like any call, and
    -- still collected into result.log, so a replayed result compares whole.
    local served = handlers.log
    handlers.log = function(args, ctx)
      local before = srv.served
      local v = served(args, ctx)
      if srv.served > before then pcall(collect_log, args, ctx) end   -- live ones collect themselves
      return v
    end
  end
  if srv.live then srv.live = function(effect) return live[effect] end end
  return handlers
end

return M
