-- airlock.launch.step -- b:step, and the run methods that answer deferred
-- calls (run:reply, run:fail, recorded as they are given) and wait (run:wait).
local core = require "airlock.core"
local session = require "airlock.session"
local registry = require "airlock.launch.registry"
local pool = require "airlock.launch.pool"
local ending = require "airlock.launch.ending"

local M = {}

local broker_methods, run_methods = core.broker_methods, core.run_methods
local runs, brokers = registry.runs, registry.brokers

--- b:step(timeout_ms) -> list of results of the runs that finished; handlers
--- for calls that arrived are run inside. timeout -1 waits, 0 polls.
function broker_methods:step(timeout)
  -- Group commit: the wait never outlasts a batch ledger's sync window, and
  -- every step gives due ledgers their fdatasync.
  -- Only the live runs that have a ledger are visited (bs.ledgered), so a
  -- step costs no more for many unrecorded runs than for one.
  local bs = brokers[self]
  local ledgered = bs and next(bs.ledgered) and bs.ledgered
  if ledgered then
    for _, st in pairs(ledgered) do
      local due = st.ledger:sync_due_ms()
      if due >= 0 and (timeout == nil or timeout < 0 or due < timeout) then timeout = due end
    end
  end
  if session.settling() then
    error("step: called from inside a handler (the broker is not re-entrant)", 2)
  end
  local done, err, code = self:_step(timeout)
  session.settle()   -- the notes that arrived: recorded, then handled, before anything ends
  if not done then return nil, err, code end
  if ledgered then
    for _, st in pairs(ledgered) do
      local ok, terr = st.ledger:tick()
      if not ok and st.recorder then st.recorder.failed = st.recorder.failed or terr end
    end
  end
  done = pool.forget_ended(bs, done)
  pool.refill(self, bs, done)
  if #done == 0 then return done end
  return ending.ended(bs, done)
end

-- Deferred answers of a recorded run are recorded as they are given.
local function recorder_of(run)
  local rec = runs[run] and runs[run].recorder
  return rec and rec.deferred and rec
end

local c_reply, c_fail = run_methods.reply, run_methods.fail
function run_methods:reply(seq, value)
  local redact = runs[self] and runs[self].redact
  if redact then value = redact(value) end
  local rec = recorder_of(self)
  local effect = rec and rec.deferred[seq]
  if effect then
    rec.deferred[seq] = nil
    -- An answer too large to send fails the call (c_reply says so): it is
    -- recorded as that failure.
    local fits, why = self:_answer_fits(value)
    if not rec:reply(seq, effect, fits == true, fits and value or why, true) then
      self:abort("ledger", "ledger: the answer could not be recorded: " .. rec.failed:gsub("^ledger: ", ""))
      return nil, rec.failed
    end
  end
  return c_reply(self, seq, value)
end
function run_methods:fail(seq, message, code)
  local redact = runs[self] and runs[self].redact
  if redact then message = redact(message) end
  local rec = recorder_of(self)
  local effect = rec and rec.deferred[seq]
  if effect then
    rec.deferred[seq] = nil
    if not rec:reply(seq, effect, false, message, true, code) then
      self:abort("ledger", "ledger: the answer could not be recorded: " .. rec.failed:gsub("^ledger: ", ""))
      return nil, rec.failed
    end
  end
  return c_fail(self, seq, message, code)
end

--- run:wait() -> result: steps the run's broker until this run has finished.
function run_methods:wait(b)
  while self:live() do
    local _, err = b:step(-1)
    if err then return nil, err end
  end
  return self:result()
end

return M
