-- airlock.launch.registry -- what the launch package keeps between a run's
-- start and its end: one record per run, and the state of each broker.
-- Everything in the package finds a run's record here (record_of); nothing
-- here starts, steps or ends a run.
local M = {}

-- Per-run records, weak keys, so a record goes with its run:
--   { policy = name, digest, plan (confine.plan's), log = {pieces}, log_bytes, log_max,
--     on_log, redact (its secrets' redactor, or nil), recorder, ledger, owned
--     (closed when the run ends), server (when served from a journal), nest
--     (airlock.nest.state), start (the function that started it, which its
--     nested runs start through) }
M.runs = setmetatable({}, { __mode = "k" })

-- Per broker, weak keys: { snapshot = {policy, ref} (b:reload's), live =
-- { [run id] = the record of a run b:step has not seen end }, ledgered = the
-- same for the live runs that have a ledger, pool = { [key] = a pool of
-- prepared workers (b:warm) }, pool_by = { [policy or "stock:name"] = the
-- same pools, found without resolving }, parked = { [run id] = the pool of a
-- parked run } }.
M.brokers = setmetatable({}, { __mode = "k" })

--- state(b) -> broker b's state, made on first use.
function M.state(b)
  local bs = M.brokers[b]
  if not bs then
    bs = { live = {}, ledgered = {}, parked = {} }
    M.brokers[b] = bs
  end
  return bs
end

--- record_of(run) -> the run's record, or nil for a run this package did not start.
function M.record_of(run) return M.runs[run] end

--- register(b, run, record): the run is live; b:step finds its record by the
--- run's id, reply and fail by the run.
function M.register(b, run, st)
  local bs = M.state(b)
  bs.live[run:id()] = st
  if st.ledger then bs.ledgered[run:id()] = st end
  M.runs[run] = st
end

return M
