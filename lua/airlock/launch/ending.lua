-- airlock.launch.ending -- what happens when runs end (b:step): each result
-- is completed from its run's record (log, policy, digest, the confinement
-- report, what a journal served, secrets redacted), its nested runs still
-- waiting are cancelled, its end is recorded and made durable and its
-- ledger closed when the run owned it; a nested run's end goes to its
-- parent's call instead of the host.
local confine = require "airlock.confine"
local secrets = require "airlock.secrets"
local nest = require "airlock.nest"

local M = {}

-- The end record of a recorded run (pause or done), made durable unless the
-- ledger promised none; the result names the ledger and its head.
local function record_end(st, res)
  local rec = st.recorder
  if res.cause == "paused" and not st.nest.parent then
    rec:append("pause", { prompt = res.value })
  else
    rec:append("done", { cause = res.cause, ok = res.ok, value = res.value, message = res.message })
  end
  local fok, ferr = true, nil
  if st.ledger:durability() ~= "none" then fok, ferr = st.ledger:flush() end
  if not fok then rec.failed = rec.failed or ferr end
  res.ledger = { dir = st.ledger:dir(), head = st.ledger:checkpoint(), error = rec.failed }
  if st.owned then st.ledger:close() end
end

-- Completes result res from its run's record st.
local function complete(st, res)
  res.log = table.concat(st.log)
  res.pooled = st.pooled
  res.policy = st.policy
  res.policy_base = st.policy_base
  res.digest = st.digest
  res.confinement = confine.report(st.plan, res.confinement)
  res.note_errors = st.note_errors
  if st.server then
    res.served = st.server.served
    res.live_effects = st.server.live_calls
  end
  if st.redact then secrets.redact_result(res, st.redact, st.log_bytes >= st.log_max) end
end

--- ended(bs, done) -> the results the host gets: done (b:_step's results of
--- runs that ended) completed, less the nested runs', whose handlers go on.
function M.ended(bs, done)
  local per = bs and bs.live   -- run id -> record
  local nested_done = {}   -- result -> record, for the nested runs among them
  -- Nested runs first, deepest first: a run's end is recorded before its
  -- parent's, which may close the ledger they share (nest.ended).
  local order = {}
  for i, res in ipairs(done) do
    local st = per and per[res.run]
    order[i] = { res = res, depth = st and st.nest and st.nest.depth or 0, i = i }
  end
  table.sort(order, function(x, y) if x.depth ~= y.depth then return x.depth > y.depth end return x.i < y.i end)
  for _, o in ipairs(order) do
    local res = o.res
    local st = per and per[res.run]
    if st then
      complete(st, res)
      nest.ended(st, res.cause)
      if st.nest and st.nest.parent then nested_done[res] = st end
      if st.nest and st.nest.tree.count > 0 and st.nest.depth == 0 then res.nested = st.nest.tree.count end
      if st.recorder and not st.nest.recorded_end then record_end(st, res) end
      per[res.run] = nil
      bs.ledgered[res.run] = nil
    end
  end
  -- A nested run's end is its parent's call's answer, not a result of the
  -- broker's: its handler goes on (nest.finished), and the host never sees it.
  local kept, resumed = {}, nil
  for _, res in ipairs(done) do
    local st = nested_done[res]
    if st then
      resumed = resumed or {}
      resumed[#resumed + 1] = { st, res }
    else
      kept[#kept + 1] = res
    end
  end
  for _, r in ipairs(resumed or {}) do nest.finished(r[1], r[2]) end
  return kept
end

return M
