-- airlock.launch.spec -- the run spec: one plain table that describes one
-- run, built by every entry (b:start, airlock.exec, airlock.spawn, ctx:nest
-- and a nested run's replay, airlock.replay and airlock.resume) and taken by
-- the one start function (airlock.launch.start). The pool's runs are b:start's.
--
-- Fields (all optional but what runs):
--   what runs      guest (Lua source or a .lua path) and name; or program
--                  (airlock.exec's or airlock.spawn's: { name, argv, plan,
--                  deadline_ms, capture; policy = false and channel = false
--                  for a run under no policy and with no effects channel
--                  (airlock.spawn) })
--   policy         a policy, a stock name, a file path or a bare table (nil:
--                  the broker's snapshot, else AIRLOCK_POLICY, else untrusted)
--   the run        input, seed, on_log
--   record         ledger (a directory or an open ledger), durability,
--                  ledger_bound (the bound an open ledger was opened with);
--                  digest = false: an unrecorded program run needs no policy
--                  digest (its result has none)
--   journal        serve (a journal's server: replay, resume), resume_inputs
--                  (the inputs its resumes gave), resume_of ({input, run}:
--                  the resume to record), next_run (the next run number in it)
--   parent         nested ({ parent = its record, ctx = the call it runs
--                  under, deadline_ms, ledger_run, max_bytes, grant }) for a
--                  run started by ctx:nest or replayed under a served call
local M = {}

-- b:start's options (docs/API.md, airlock.run); any other is an error.
M.START_KEYS = { guest = true, name = true, policy = true, input = true, seed = true, on_log = true,
                 ledger = true, durability = true }

--- of_start(opts) -> the spec of b:start{...}: a copy of opts (raises, at
--- b:start's caller, on anything else).
function M.of_start(opts)
  if type(opts) ~= "table" then error("start: expects a table {guest = ..., policy = ...}", 3) end
  local spec = {}
  for k, v in pairs(opts) do
    if not M.START_KEYS[k] then error(string.format("start: unknown option '%s'", tostring(k)), 3) end
    spec[k] = v
  end
  return spec
end

--- program(f) -> the spec of a program's run (airlock.exec): f = { policy,
--- ledger, durability, ledger_bound, digest, program = {name, argv, plan,
--- deadline_ms, capture} }.
function M.program(f)
  return { policy = f.policy, ledger = f.ledger, durability = f.durability, ledger_bound = f.ledger_bound,
           digest = f.digest, program = f.program }
end

--- process(f) -> the spec of a plain program under no policy (airlock.spawn):
--- f = { name, argv, plan, deadline_ms, capture }.
function M.process(f)
  return { program = { name = f.name, argv = f.argv, plan = f.plan, deadline_ms = f.deadline_ms,
                       capture = f.capture, policy = false, channel = false } }
end

--- nested(opts, nested, serve) -> the spec of a nested run (ctx:nest, or its
--- replay when serve is the journal's server for it).
function M.nested(opts, nested, serve)
  local spec = { nested = nested, serve = serve }
  for k, v in pairs(opts) do spec[k] = v end
  return spec
end

--- rerun(s, pol, srv, extra, resume_of) -> the spec of a recorded run run
--- again (airlock.replay, airlock.resume): s = session.load's, served by srv;
--- extra: b:start options over the recorded ones.
function M.rerun(s, pol, srv, extra, resume_of)
  local spec = {
    guest = s.init.guest.source, name = s.init.guest.name, policy = pol,
    input = s.init.input, seed = s.init.seed,
    serve = srv, resume_inputs = #s.inputs > 0 and s.inputs or nil, resume_of = resume_of,
    next_run = s.max_run + 1,
  }
  for k, v in pairs(extra or {}) do spec[k] = v end
  return spec
end

--- poolable(spec) -> true when a warm pool's worker may serve the run: an
--- unrecorded guest run with no seed of its own (see airlock.launch.pool).
function M.poolable(spec)
  return not spec.ledger and spec.seed == nil and not (spec.serve or spec.program or spec.nested)
end

return M
