-- airlock.checkpoint -- checkpoints of a session kept outside the ledger's
-- authority (docs/LEDGER.md, "Checkpoints"): one line of text each,
--
--   airlock-checkpoint-v1 session=<32 hex> seq=<n> hash=<64 hex> time=<UTC> [hmac-sha256=<64 hex>]
--
-- time is YYYY-MM-DDTHH:MM:SSZ. A keyed line's MAC is HMAC-SHA256, under a key
-- the host holds, over the line's bytes before " hmac-sha256=". The head is
-- read through a read-only ledger process, never by opening the journal here.
--
--   local checkpoint = require "airlock.checkpoint"
--   local line = assert(checkpoint.take(dir, { key = key }))      -- text, fields
--   local rep = assert(checkpoint.verify(dir, assert(checkpoint.read_file(path, dir)), key))
local core = require "airlock.core"
local ledger = require "airlock.ledger"

local M = {}

M.FORMAT = "airlock-checkpoint-v1"
M.FILE_MAX = 4 * 1024 * 1024   -- bytes of a checkpoint file
M.LINE_MAX = 4096              -- bytes of one line
M.COUNT_MAX = core.ledger_checkpoints_max   -- lines of one file (one walk asks for them all)

local MAC = " hmac-sha256="

--- format(c, key) -> the line for c = {session, seq, hash, time}; with key
--- (bytes), the MAC over the rest is appended.
function M.format(c, key)
  local text = string.format("%s session=%s seq=%d hash=%s time=%s", M.FORMAT, c.session, c.seq, c.hash,
    os.date("!%Y-%m-%dT%H:%M:%SZ", c.time))
  if key then text = text .. MAC .. core.hmac_sha256(key, text) end
  return text
end

--- parse(line) -> {session, seq, hash, time, mac, signed}, or nil, why.
-- signed is the text the MAC covers.
function M.parse(line)
  local head, mac = line, nil
  local at = line:find(MAC, 1, true)
  if at then head, mac = line:sub(1, at - 1), line:sub(at + #MAC) end
  local session, seq, hash, time = head:match("^" .. M.FORMAT:gsub("%-", "%%-") ..
    " session=(%x+) seq=(%d+) hash=(%x+) time=(%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ)$")
  if not session then
    local word = line:match("^(%S+)")
    if word and word:match("^airlock%-checkpoint%-v%d+$") and word ~= M.FORMAT then
      return nil, "format " .. word .. " is not one this airlock reads (" .. M.FORMAT .. ")"
    end
    return nil, "not a checkpoint line (" .. M.FORMAT .. " session=HEX seq=N hash=HEX time=UTC " ..
      "[hmac-sha256=HEX])"
  end
  seq = math.tointeger(tonumber(seq))
  if #session ~= 32 or #hash ~= 64 or not seq or seq < 1 then
    return nil, "a session id is 32 hex digits, a seq >= 1, a hash 64 hex digits"
  end
  if mac and not (#mac == 64 and mac:match("^%x+$")) then return nil, "hmac-sha256 is 64 hex digits" end
  return { session = session:lower(), seq = seq, hash = hash:lower(), time = time,
           mac = mac and mac:lower(), signed = head }
end

--- take(dir, {key = bytes}) -> line, fields, or nil, message, errno: the
--- session's head now, through a read-only ledger process. A damaged
--- journal has no checkpoint to take.
function M.take(dir, opts)
  local rep, err, errno = ledger.verify(dir)
  if not rep then return nil, err, errno end
  if not rep.ok then
    return nil, string.format("ledger %s: damaged at seq %d: %s", dir, rep.first_bad_seq, rep.reason), 74
  end
  if rep.last_seq < 1 then return nil, "ledger " .. dir .. ": no record to checkpoint", 61 end
  local seq, hash = ledger.parse_checkpoint(rep.head)
  local c = { session = rep.session_id, seq = seq, hash = hash, time = os.time() }
  local line = M.format(c, opts and opts.key)
  return line, assert(M.parse(line))
end

--- read_file(path, dir) -> list of parsed lines (each with its line number,
--- as .line), or nil, message. Bounded (FILE_MAX, LINE_MAX, COUNT_MAX); a
--- malformed line, or one whose seq is not above the one before, is an
--- error naming its number. A file inside dir is refused: it anchors nothing.
function M.read_file(path, dir)
  local ok, why = core.checkpoint_outside(path, dir)
  if not ok then return nil, why end
  local f, err = io.open(path, "rb")
  if not f then return nil, "checkpoint: cannot read " .. tostring(err) end
  local size = f:seek("end")
  if not size or size > M.FILE_MAX then
    f:close()
    return nil, string.format("checkpoint: %s holds %s bytes, over the %d a checkpoint file may hold: " ..
      "keep the latest lines in a new file", path, tostring(size), M.FILE_MAX)
  end
  f:seek("set")
  local text = f:read(M.FILE_MAX) or ""
  f:close()
  local list, n, pos = {}, 0, 1
  while pos <= #text do
    n = n + 1
    local nl = text:find("\n", pos, true) or #text + 1
    local raw = text:sub(pos, nl - 1)
    pos = nl + 1
    if #raw > M.LINE_MAX then
      return nil, string.format("checkpoint: %s line %d: over %d bytes", path, n, M.LINE_MAX)
    end
    local c, perr = M.parse(raw)
    if not c then return nil, string.format("checkpoint: %s line %d: malformed: %s", path, n, perr) end
    c.line = n
    local prev = list[#list]
    if prev and c.seq <= prev.seq then
      return nil, string.format("checkpoint: %s line %d: seq %d is not above line %d's seq %d " ..
        "(checkpoints are appended as the session grows)", path, n, c.seq, prev.line, prev.seq)
    end
    if #list == M.COUNT_MAX then
      return nil, string.format("checkpoint: %s holds more than %d checkpoints: keep the latest in a " ..
        "new file", path, M.COUNT_MAX)
    end
    list[#list + 1] = c
  end
  if #list == 0 then return nil, "checkpoint: " .. path .. " holds no checkpoint" end
  return list
end

--- verify(dir, list, key) -> report, or nil, message, errno (no journal).
-- One walk of the journal (through a read-only ledger process) for every
-- checkpoint. report = the ledger's verify report (ok, records, head, ...,
-- first_bad_seq, damage, reason) with checkpoints = one result per line, in
-- order: {line, seq, ok, damage, reason}. The first failing checkpoint's
-- reason becomes the report's when the chain itself is intact. With key,
-- every line must carry a MAC that verifies (else "forged").
function M.verify(dir, list, key)
  local prog, perr, pcode = ledger.program()
  if not prog then return nil, perr, pcode end
  local seqs = {}
  for i, c in ipairs(list) do seqs[i] = c.seq end
  local rep, hashes, errno = core.ledger_proc_verify_at(prog, dir, seqs)
  if not rep then return nil, hashes, errno end
  local results, first
  results = {}
  for i, c in ipairs(list) do
    local r = { line = c.line, seq = c.seq, ok = false }
    if key and not c.mac then
      r.damage, r.reason = "forged", string.format("forged: checkpoint line %d carries no MAC, and --key " ..
        "asks for one on every line", c.line or i)
    elseif key and core.hmac_sha256(key, c.signed) ~= c.mac then
      r.damage, r.reason = "forged", string.format("forged: checkpoint line %d's MAC does not verify under " ..
        "this key (written without it, or changed since)", c.line or i)
    elseif rep.session_id ~= c.session then
      r.damage, r.reason = "substituted", string.format("substituted: the journal is session %s, checkpoint " ..
        "line %d names session %s", tostring(rep.session_id), c.line or i, c.session)
    elseif not hashes[i] then
      if rep.ok or (rep.first_bad_seq or 0) > c.seq then
        r.damage, r.reason = "truncated", string.format("truncated: the journal ends at seq %d, before " ..
          "checkpoint seq %d (line %d)", rep.last_seq or 0, c.seq, c.line or i)
      else
        r.damage, r.reason = rep.damage, string.format("%s (before checkpoint seq %d, line %d)",
          tostring(rep.reason), c.seq, c.line or i)
      end
    elseif hashes[i] ~= c.hash then
      r.damage, r.reason = "altered", string.format("altered: seq %d has chain hash %s, checkpoint line %d " ..
        "says %s (the journal was rewritten up to there)", c.seq, hashes[i], c.line or i, c.hash)
    else
      r.ok = true
    end
    results[i] = r
    if not r.ok and not first then first = r end
  end
  rep.checkpoints = results
  if first then
    if rep.ok then
      rep.ok = false
      rep.damage, rep.reason = first.damage, first.reason
      rep.first_bad_seq = first.damage == "truncated" and (rep.last_seq or 0) + 1 or first.seq
    end
  end
  return rep
end

return M
