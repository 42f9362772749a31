-- airlock.session -- runs recorded in a ledger, and runs served from one:
-- recording (every call and its answer, before and after the handler runs),
-- replay (a fresh worker answered only from the journal), resume after a
-- pause (the prefix replayed, then live), and divergence detection.
--
-- One run per session: a session's first init record is the run; the runs
-- its handlers nest (airlock.nest) are in the same session. Records:
--   init   {guest = {name, source}, input, seed, effects, policy = {name, ref, digest}}
--   nest   {parent = {run, id, seq}, depth, guest, input, seed, effects, policy, limits}
--          (a nested run's init: it ran under call id of run parent.run)
--   call   {id, effect, args, decision = "allow"}   (written before the handler runs)
--   reply  {id, effect, status = "ok" | "err", value | error}
--   pause  {prompt}          resume {input}
--   done   {cause, ok, value, message}
local core = require "airlock.core"
local quote = require("airlock.util").quote
local policy = require "airlock.policy"
local ledger_mod = require "airlock.ledger"

local M = {}

local DEFER = core.defer()

-- Deep equality of two decoded msgpack values (tables compared by content).
local function same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then
    if math.type(a) == "float" or math.type(b) == "float" then return a == b end
    return a == b
  end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end
M.same = same

-- A short, bounded rendering of a value for messages.
local function show(v, depth)
  depth = depth or 0
  if type(v) == "string" then
    return quote(#v > 60 and v:sub(1, 60) .. "..." or v)
  end
  if type(v) ~= "table" then return tostring(v) end
  if depth > 2 then return "{...}" end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
  local parts = {}
  for i, k in ipairs(keys) do
    if i > 8 then parts[#parts + 1] = "..." break end
    local key = math.type(k) == "integer" and "" or (tostring(k) .. "=")
    parts[#parts + 1] = key .. show(v[k], depth + 1)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end
M.show = show

--- digest(policy) -> hex SHA-256 of the policy (airlock.policy.digest: a
--- canonical encoding of everything but handler code, plus each handler's
--- source text).
function M.digest(pol)
  return policy.digest(pol)
end

-- ------------------------------------------------------------ recording

local recorder = {}
recorder.__index = recorder

--- recorder(ledger, run, redact) -> an object that records one run's calls.
--- redact (airlock.secrets.redactor), when given, is applied to every
--- record's fields before it is appended: no secret reaches the journal.
--- max_bytes bounds what the run's records may hold in all (the policy's
--- limits.ledger): past it every record is refused but the run's end (pause,
--- done), so a flood of calls ends the run with cause ledger, not the disk.
---
--- What waits for the ledger process. A record that admits something (call,
--- note, nest, init, pause, done) is appended and waited for: the handler
--- runs only once it is accepted. An answer (reply) is queued and goes out
--- with the next waited record, in one round trip with it: the guest may see
--- its answer before the reply is accepted, and a refused reply makes the
--- next record fail (the ledger process's refusals are sticky), so nothing
--- more is performed. Durability "always" waits for every record, replies too.
function M.recorder(ledger, run, redact, max_bytes)
  local queue_replies = not (ledger.durability and ledger:durability() == "always")
  return setmetatable({ ledger = ledger, run = run, redact = redact, bytes = 0, queue_replies = queue_replies,
                        max_bytes = max_bytes or M.LEDGER_MAX_DEFAULT }, recorder)
end

M.LEDGER_MAX_DEFAULT = policy.default("limits.ledger")

function recorder:append(kind, fields, queued)
  if self.redact and fields then fields = self.redact(fields) end
  if self.max_bytes > 0 and self.bytes >= self.max_bytes and kind ~= "done" and kind ~= "pause" then
    local err = string.format("ledger: this run's records have reached %d bytes, the policy's limits.ledger " ..
      "(%d); nothing more is recorded, so nothing more is performed", self.bytes, self.max_bytes)
    self.failed = err
    return nil, err
  end
  -- bytes: what this record and the queued ones accepted with it added (the
  -- ledger counts each record once, in the waited append that follows it)
  local seq, bytes = self.ledger:append(kind, self.run, fields, not queued)
  if not seq then
    self.failed = bytes
    return nil, bytes
  end
  self.bytes = self.bytes + (bytes or 0)
  return seq
end

--- reply(id, effect, ok, v, deferred): deferred when the host answered later
--- (run:reply, run:fail): that answer ended the guest's turn, and a replay
--- gives it as one too (limits.turn_instructions).
function recorder:reply(id, effect, ok, v, deferred, code)
  local fields = { id = id, effect = effect, status = ok and "ok" or "err", deferred = deferred or nil,
                   code = not ok and type(code) == "string" and code or nil }
  if ok then fields.value = v else fields.error = tostring(v) end
  return self:append("reply", fields, self.queue_replies)
end

--- denied(id, effect): records a call of an effect the policy does not grant
--- (decision deny, granted = false; no args, no reply): replay skips it, since
--- the same call is refused again without any handler.
function recorder:denied(id, effect)
  return self:append("call", { id = id, effect = effect, decision = "deny", granted = false,
                               reason = "not granted by the policy" })
end

-- Notes are recorded before their handlers run, as calls are, but without a
-- round trip each: a note's record is queued and its handler kept, and the
-- recorder settles its notes (waits until the ledger process has accepted
-- their records, then runs their handlers, in order) before its run's next
-- call, and every recorder settles at the end of each b:step. A guest's notes
-- are thus handled in the step they arrived in, in order, before anything
-- else of that run; what fails to be recorded is not performed.
local unsettled = setmetatable({}, { __mode = "k" })   -- recorder -> true: notes kept
local settling = false

local function note_error(n, msg)
  if type(n.ctx.on_note_error) == "function" then pcall(n.ctx.on_note_error, n.effect, msg) end
end

-- settle() -> true, or nil, message (the notes' records were refused: none
-- of them was performed, and the run is ended with cause ledger).
function recorder:settle()
  local list = self.notes
  if not list then return true end
  self.notes, unsettled[self] = nil, nil
  local ok, err = self.ledger:sync()
  if not ok then
    self.failed = self.failed or err
    list[1].ctx.handle:abort("ledger", "ledger: the note could not be recorded, so it was not performed: " ..
      tostring(err):gsub("^ledger: ", ""))
    return nil, err
  end
  self.bytes = self.bytes + (err or 0)   -- sync's second value: the bytes they added
  local was = settling
  settling = true
  for _, n in ipairs(list) do
    local hok, herr = xpcall(n.handler, debug.traceback, n.args, n.ctx)
    if not hok then note_error(n, herr) end
  end
  settling = was
  return true
end

--- settle(): every recorder's kept notes, recorded and handled (b:step calls it).
function M.settle()
  -- every ledger process gets its notes first, then each is waited for (in
  -- settle): they work on them at the same time
  for rec in pairs(unsettled) do rec.ledger:send() end
  while next(unsettled) do
    local rec = next(unsettled)
    rec:settle()
  end
end

--- settling() -> true while kept notes' handlers run (b:step refuses then).
function M.settling() return settling end

-- Calls, admitted together. Before b:step handles any call, it gives each
-- recorded run's waiting call to its recorder (ctx.admit), then calls
-- admit_flush once (and again at the first call that was not waiting then,
-- one a run sent after its notes: the calls waiting at that point, together):
-- every call record is queued first, then each ledger is
-- waited for once, so the ledger processes of many runs work on their
-- records at the same time and N runs' calls cost about one round trip, not
-- N in a row. An admitted call's handler runs as before, once its record is
-- accepted; one whose record was refused is not performed (cause ledger).
local admitting = {}   -- recorders with a call queued since the last flush

function recorder:admit(effect, args, seq)
  local d = self.decisions and self.decisions[effect]
  if not d then return end   -- not a handler of its own
  -- Notes the run sent before this call have their records queued already,
  -- so the call's comes after them; their handlers run before the call's (wrap).
  local ok, err = self:append("call", { id = seq, effect = effect, args = args, decision = d[1], reason = d[2] }, true)
  self.admitted = self.admitted or {}
  self.admitted[seq] = { seq = ok, err = not ok and err or nil }
  if ok then admitting[#admitting + 1] = self end
end

--- admit_flush(): waits for the ledgers of the calls admitted since the last one.
function M.admit_flush()
  local list = admitting
  admitting = {}
  -- every ledger process gets its records first, then each is waited for:
  -- they work on them at the same time
  for _, rec in ipairs(list) do rec.ledger:send() end
  local synced = {}   -- ledger -> true, or the message of its failure
  for _, rec in ipairs(list) do
    local l = rec.ledger
    if synced[l] == nil then
      local ok, bytes = l:sync()
      synced[l] = ok and true or tostring(bytes)
      if ok then rec.bytes = rec.bytes + (bytes or 0) end
    end
    if synced[l] ~= true then
      rec.failed = rec.failed or synced[l]
      for _, a in pairs(rec.admitted) do
        if a.seq then a.seq, a.err = nil, synced[l] end
      end
    end
  end
end

-- Wraps a handler so its call is recorded before it runs and its answer after.
-- A call that cannot be recorded is not performed: the run ends with cause ledger.
function recorder:wrap(effect, handler)
  -- A policy's explicit refusal (airlock.handlers.deny) is recorded as such.
  local decision, reason = "allow", nil
  local hmod = package.loaded["airlock.handlers"]
  if hmod and hmod.decision then
    local d, why = hmod.decision(handler)
    if d then decision, reason = d, why end
  end
  self.decisions = self.decisions or {}
  self.decisions[effect] = { decision, reason }
  return function(args, ctx)
    if ctx.note then
      -- A note: recorded before its handler runs (settle), nothing after (no answer).
      local ok, err = self:append("note", { id = ctx.seq, effect = effect, args = args }, true)
      if not ok then
        ctx.handle:abort("ledger", "ledger: the note could not be recorded, so it was not performed: " ..
          err:gsub("^ledger: ", ""))
        error("ledger: " .. err, 0)
      end
      self.notes = self.notes or {}
      self.notes[#self.notes + 1] = { handler = handler, args = args, ctx = ctx, effect = effect }
      unsettled[self] = true
      return nil
    end
    local ok, err
    local adm = self.admitted and self.admitted[ctx.seq]
    if adm then   -- recorded already, with the step's other calls (admit)
      self.admitted[ctx.seq] = nil
      ok, err = adm.seq, adm.err
      -- The run's notes before it: accepted with it (or refused with it), and
      -- handled now, before the call's own handler.
      if ok and self.notes then
        local settled, serr = self:settle()
        if not settled then ok, err = nil, tostring(serr) end
      end
    else
      local settled, serr = self:settle()   -- this run's notes before its call
      if not settled then
        ctx.handle:abort("ledger", "ledger: the call could not be recorded, so it was not performed: " ..
          tostring(serr):gsub("^ledger: ", ""))
        error("ledger: " .. tostring(serr), 0)
      end
      ok, err = self:append("call", { id = ctx.seq, effect = effect, args = args,
                                      decision = decision, reason = reason })
    end
    ctx.ledger_seq = ok   -- the call record's seq: a nested run started here names it
    if not ok then
      ctx.handle:abort("ledger", "ledger: the call could not be recorded, so it was not performed: " .. err:gsub("^ledger: ", ""))
      error("ledger: " .. err, 0)
    end
    local pok, v = pcall(handler, args, ctx)
    if v == DEFER and pok then
      self.deferred = self.deferred or {}
      self.deferred[ctx.seq] = effect
      return v
    end
    -- An answer too large to send fails the call (the binding refuses it):
    -- recorded as that failure, which a replay gives again, not as a value
    -- the guest never got.
    if pok then
      local fits, why = ctx.handle:_answer_fits(v)
      if not fits then pok, v = false, why end
    end
    local rok, rerr = self:reply(ctx.seq, effect, pok, v, nil, not pok and core.denial(v) and "denied" or nil)
    if not rok then
      ctx.handle:abort("ledger", "ledger: the answer could not be recorded: " .. rerr:gsub("^ledger: ", ""))
    end
    if not pok then error(v, 0) end
    return v
  end
end

-- ------------------------------------------------------------ reading a session

--- load(dir) -> the session as tables, or nil, message:
--- { session, init, run, calls = {call records with .reply}, inputs = {resume inputs},
---   final = last pause or done record, records = count, max_run = the largest run id,
---   children = { [call id] = {nested run tables, in order} },
---   runs = { [run id] = a nested run: { init = its nest record, calls, final, children, depth } } }
--- A nest record must name a run of the session and a call of that run
--- already recorded, at the depth below it, and a run id not used before;
--- anything else is a malformed journal (nothing in it is trusted).
function M.load(dir)
  local ledger = ledger_mod
  local s = { calls = {}, inputs = {}, records = 0, children = {}, runs = {}, max_run = 0, depth = 0 }
  local byid = {}   -- run id -> { [call id] = call awaiting its reply }
  local calls_of = {}   -- run id -> { [call id] = true } (every call recorded, for nest records)
  local function malformed(rec, why)
    error(string.format("ledger %s: malformed: the nest record at seq %d %s", dir, rec.seq, why), 0)
  end
  local ok, err = pcall(function()
    for rec in ledger.records(dir) do
      s.records = s.records + 1
      if math.type(rec.run) == "integer" and rec.run > s.max_run then s.max_run = rec.run end
      if rec.kind == "session" then
        s.session = s.session or rec
      elseif rec.kind == "init" then
        if not s.init then
          s.init, s.run = rec, rec.run
          s.runs[rec.run] = s
          byid[rec.run], calls_of[rec.run] = {}, {}
        end
      elseif rec.kind == "nest" and s.init then
        local p = type(rec.parent) == "table" and rec.parent or {}
        local parent = s.runs[p.run]
        if math.type(rec.run) ~= "integer" or s.runs[rec.run] then malformed(rec, "reuses or lacks a run id") end
        if not parent then malformed(rec, "names a parent run the session does not hold") end
        if not calls_of[p.run][p.id] then malformed(rec, "names a call its parent run has not made") end
        if rec.depth ~= parent.depth + 1 then malformed(rec, "gives a depth that is not its parent's plus one") end
        local child = { init = rec, run = rec.run, calls = {}, children = {}, depth = rec.depth, parent = parent }
        s.runs[rec.run] = child
        byid[rec.run], calls_of[rec.run] = {}, {}
        local list = parent.children[p.id] or {}
        list[#list + 1] = child
        parent.children[p.id] = list
      elseif s.runs[rec.run] then
        local r = s.runs[rec.run]
        if rec.kind == "call" and rec.granted == false then
          r.denied = (r.denied or 0) + 1   -- refused again in a replay, with no handler
        elseif rec.kind == "call" or rec.kind == "note" then
          r.calls[#r.calls + 1] = rec   -- notes in order among the calls: served the same way
          byid[rec.run][rec.id] = rec
          calls_of[rec.run][rec.id] = true
        elseif rec.kind == "reply" then
          local call = byid[rec.run][rec.id]
          if call then call.reply = rec; byid[rec.run][rec.id] = nil end
        elseif rec.kind == "resume" and r == s then
          s.inputs[#s.inputs + 1] = rec.input
        elseif rec.kind == "pause" or rec.kind == "done" then
          r.final = rec
        end
      end
    end
  end)
  if not ok then return nil, tostring(err) end
  if not s.init then return nil, "ledger " .. dir .. ": no run recorded (no init record)" end
  return s
end

-- ------------------------------------------------------------ serving from a journal

local server = {}
server.__index = server

--- server(session, live) -> answers calls from the session's recorded calls in
--- order; past the end, live (a function(effect) -> handler or nil) answers,
--- or the run diverges when there is none (replay).
--- nested (a function(ctx, child)), when given, replays each nested run the
--- journal holds under a served call (s.children[call id]) before the call's
--- recorded answer is given (airlock.nest.replay_child).
function M.server(s, live, nested)
  return setmetatable({ s = s, next = 1, live = live, served = 0, live_calls = 0, nested = nested }, server)
end

-- The CPU budgets do not run in a replay (init.lua, spawn_options): a run
-- one of them ended is ended here with the recorded cause and message once
-- the journal has nothing more to serve. What the guest did after its last
-- recorded effect had no observable result, so the replay ends alike: the
-- same effects, values and cause; only where the budget struck may differ.
local BUDGET_CAUSES = { cpu = true }

function server:exhausted(handle)
  local fin = self.s.final
  if self.live or self.next <= #self.s.calls or type(fin) ~= "table" then return end
  if fin.kind == "done" and BUDGET_CAUSES[fin.cause] then
    handle:abort(fin.cause, type(fin.message) == "string" and fin.message or fin.cause)
  end
end

-- The run that serves from this journal has started: one that recorded no
-- effect at all is ended at once, if a budget ended it.
function server:started(handle)
  self:exhausted(handle)
end

function server:handler(effect)
  return function(args, ctx)
    local rec = self.s.calls[self.next]
    if rec == nil then
      local h = self.live and self.live(effect)
      if h then
        self.live_calls = self.live_calls + 1
        return h(args, ctx)
      end
      local msg = string.format("diverged: the guest asked for '%s' %s after the journal's last call",
        effect, show(args))
      ctx.handle:abort("diverged", msg)
      error(msg, 0)
    end
    if (rec.kind == "note") ~= (ctx.note == true) then
      local msg = string.format("diverged at seq %d: the journal has a %s of '%s', the guest sent a %s of '%s'",
        rec.seq, rec.kind, rec.effect, ctx.note and "note" or "call", effect)
      ctx.handle:abort("diverged", msg)
      error(msg, 0)
    end
    if rec.effect ~= effect or not same(rec.args, args) then
      local msg = string.format("diverged at seq %d: the journal has '%s' %s, the guest asked for '%s' %s",
        rec.seq, rec.effect, show(rec.args), effect, show(args))
      ctx.handle:abort("diverged", msg)
      error(msg, 0)
    end
    self.next = self.next + 1
    self.served = self.served + 1
    self:exhausted(ctx.handle)
    if ctx.note then return nil end   -- a note has no answer to give
    local kids = self.s.children and self.s.children[rec.id]
    if kids then
      if not self.nested then
        local msg = string.format("diverged at seq %d: the journal has nested runs under '%s', and this " ..
          "replay cannot run them", rec.seq, effect)
        ctx.handle:abort("diverged", msg)
        error(msg, 0)
      end
      for _, child in ipairs(kids) do self.nested(ctx, child) end
    end
    local reply = rec.reply
    if reply == nil then
      -- The call was recorded but never answered (the run ended first).
      local msg = string.format("diverged at seq %d: the journal has no answer to '%s'", rec.seq, effect)
      ctx.handle:abort("diverged", msg)
      error(msg, 0)
    end
    -- An answer the host deferred ended the guest's turn: this one does too.
    if reply.deferred == true then ctx.handle:_turn(ctx.seq) end
    if reply.status == "err" then
      -- A deferred failure reached the guest as the host gave it (run:fail:
      -- its message, its code), not wrapped as a handler's error: so again.
      if reply.deferred == true and type(reply.error) == "string" then
        ctx.handle:fail(ctx.seq, reply.error, type(reply.code) == "string" and reply.code or nil)
        return DEFER
      end
      -- A refusal was recorded with code denied: it is one again.
      if reply.code == "denied" and type(reply.error) == "string" then
        core.deny((reply.error:gsub("^denied: ", "")))
      end
      error(reply.error, 0)
    end
    return reply.value
  end
end

return M
