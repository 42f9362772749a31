-- airlock.cli.ledger -- airlock ledger verify|show|head|checkpoint|revert|reapply
-- DIR: exit 0 intact (or restored), 1 damaged or unreadable midway (or a
-- revert or reapply refused or failed), 2 bad usage, no journal to read, or a
-- key or checkpoint file that cannot be used.
local json = require "airlock.json"
local ledger = require "airlock.ledger"
local checkpoint = require "airlock.checkpoint"
local core = require "airlock.core"
local restore = require "airlock.workspace.restore"

local M = {}

-- cli: the command's helpers (usage_error, parse, cannot_start: cli/main.lua).
-- Each subcommand: fn(c), c = {sub, dir, opts, key, usage_error, cannot_start,
-- cannot (a failure to read the session), torn_note(report)} -> exit status.
local SUB = {}

-- checkpoint DIR [--to FILE] [--key KEYFILE]: the session's head as a checkpoint line.
function SUB.checkpoint(c)
  local dir, opts, key, cannot_start, cannot = c.dir, c.opts, c.key, c.cannot_start, c.cannot
  if opts.to then
    local ok, oerr = core.checkpoint_outside(opts.to, dir)
    if not ok then return cannot_start(opts, "ledger checkpoint", oerr, "checkpoint") end
  end
  local line, c = checkpoint.take(dir, { key = key })
  if not line then
    if tostring(c):match("damaged at seq") then
      if opts.json then
        io.stdout:write(json.encode { ok = false, cause = "ledger", message = c }, "\n")
      else
        io.stderr:write(c, "\n")
      end
      return 1
    end
    return cannot(c)
  end
  if opts.to then
    local ok, aerr = core.checkpoint_append(opts.to, line, dir)
    if not ok then return cannot_start(opts, "ledger checkpoint", aerr, "checkpoint") end
  end
  if opts.json then
    io.stdout:write(json.encode { ok = true, dir = dir, format = checkpoint.FORMAT, session = c.session,
      seq = c.seq, hash = c.hash, time = c.time, keyed = key ~= nil, line = line, to = opts.to }, "\n")
  elseif opts.to then
    io.stdout:write(string.format("ledger %s: checkpoint at seq %d%s appended to %s\n", dir, c.seq,
      key and " (keyed)" or "", opts.to))
  else
    io.stdout:write(line, "\n")
  end
  return 0
end

-- verify DIR [--checkpoint SEQ:HASH|FILE] [--key KEYFILE]: the hash chain, and the checkpoints.
function SUB.verify(c)
  local dir, opts, key, cannot_start, cannot = c.dir, c.opts, c.key, c.cannot_start, c.cannot
  local usage_error, torn_note = c.usage_error, c.torn_note
  local cp, list = opts.checkpoint, nil
  if cp and not cp:match("^%d+:%x+$") then   -- not SEQ:HASH: a file of checkpoint lines
    local lerr
    list, lerr = checkpoint.read_file(cp, dir)
    if not list then return cannot_start(opts, "ledger verify", lerr, "checkpoint") end
  elseif cp then
    local ok, err = ledger.parse_checkpoint(cp)
    if not ok then return usage_error("ledger verify: --checkpoint: " .. err, "ledger verify") end
  end
  if key and not list then
    return usage_error("ledger verify: --key checks the MACs of a checkpoint file: give --checkpoint FILE " ..
      "(a bare SEQ:HASH carries no MAC)", "ledger verify")
  end
  local rep, err
  if list then rep, err = checkpoint.verify(dir, list, key) else rep, err = ledger.verify(dir, cp) end
  if not rep then return cannot(err) end
  if opts.json then
    rep.dir = dir
    rep.checkpoint = cp
    rep.keyed = list and key ~= nil or nil
    io.stdout:write(json.encode(rep), "\n")
  elseif rep.ok then
    local what = ""
    if list then
      what = string.format(", %d checkpoint%s match%s%s", #list, #list == 1 and "" or "s",
        #list == 1 and "es" or "", key and " (keyed)" or "")
    elseif cp then
      what = ", checkpoint matches"
    end
    io.stdout:write(string.format("ledger %s: intact, %d records, head %s%s\n", dir, rep.records,
                                  rep.head, what))
    local note = torn_note(rep)
    if note then io.stdout:write(note, "\n") end
  else
    if rep.damage == "forged" then   -- the checkpoint file fails, whatever the journal holds
      io.stdout:write(string.format("ledger %s: not verified: %s\n", dir, rep.reason))
    else
      io.stdout:write(string.format("ledger %s: damaged at seq %d: %s\n", dir, rep.first_bad_seq, rep.reason))
    end
    for _, r in ipairs(rep.checkpoints or {}) do
      if not r.ok and r.reason ~= rep.reason then io.stdout:write("  ", r.reason, "\n") end
    end
  end
  return rep.ok and 0 or 1
end

-- revert|reapply DIR [--run N] [--workspace DIR] [--force]: an overlaid run's
-- committed changes undone or done again (airlock.workspace.restore).
function SUB.revert(c)
  local dir, opts, usage_error, sub = c.dir, c.opts, c.usage_error, c.sub
  local run = opts.run and tonumber(opts.run)
  if opts.run and (math.type(run) ~= "integer" or run < 1) then
    return usage_error("ledger " .. sub .. ": --run takes a run number (1 or more)", "ledger " .. sub)
  end
  local n, where, code = restore.run(dir, sub, { run = run, workspace = opts.workspace, force = opts.force })
  local left = n and code or {}
  if opts.json then
    io.stdout:write(json.encode(n and { ok = true, paths = n, workspace = where, left = left } or
      { ok = false, cause = code, message = where }), "\n")
  elseif n then
    io.stdout:write(string.format("ledger %s: %s: %d path%s written in %s\n", dir,
      sub == "revert" and "reverted" or "reapplied", n, n == 1 and "" or "s", where))
    for _, p in ipairs(left) do
      io.stdout:write(string.format("ledger %s: left the directory %s: it holds what no record names\n", dir, p))
    end
  else
    io.stderr:write(string.format("airlock: ledger %s: %s: %s\n", sub, code, where))
  end
  return n and 0 or 1
end
SUB.reapply = SUB.revert

-- head DIR: the hash of the last record.
function SUB.head(c)
  local dir, cannot = c.dir, c.cannot
  local rep, err = ledger.verify(dir)
  if not rep then return cannot(err) end
  if not rep.ok then
    io.stderr:write(string.format("ledger %s: damaged at seq %d: %s\n", dir, rep.first_bad_seq, rep.reason))
    return 1
  end
  io.stdout:write(rep.head, "\n")
  return 0
end

-- show DIR [--json]: every record, one line each.
function SUB.show(c)
  local dir, opts, cannot, torn_note = c.dir, c.opts, c.cannot, c.torn_note
  local ok, it, reader = pcall(ledger.show, dir, { json = opts.json })
  if not ok then return cannot(it) end
  local rc = 0
  local walked, werr = pcall(function()
    for line in it, reader do io.stdout:write(line, "\n") end
  end)
  io.stdout:flush()
  local rep = reader:report()
  reader:close()
  if not walked then
    if rep.first_bad_seq then
      io.stderr:write(string.format("ledger %s: damaged at seq %d: %s\n", dir, rep.first_bad_seq, rep.reason))
    else
      io.stderr:write("airlock: ledger show: ", tostring(werr), "\n")
    end
    rc = 1
  else
    local note = torn_note(rep)
    if note then io.stderr:write(note, "\n") end
  end
  return rc
end

function M.main(args, cli)
  local usage_error, parse, cannot_start = cli.usage_error, cli.parse, cli.cannot_start
  local sub = args[1]
  local specs = { verify = { checkpoint = "value", key = "value", json = "switch" }, show = { json = "switch" },
                  head = {}, checkpoint = { to = "value", key = "value", json = "switch" },
                  revert = { run = "value", workspace = "value", force = "switch", json = "switch" },
                  reapply = { run = "value", workspace = "value", force = "switch", json = "switch" } }
  if sub == nil then return usage_error("ledger: expected verify, show, head, checkpoint, revert or reapply") end
  if not specs[sub] then
    return usage_error("ledger: unknown subcommand '" .. sub .. "' (verify, show, head, checkpoint, revert, " ..
      "reapply)")
  end
  local pos, opts = parse({ table.unpack(args, 2) }, specs[sub])
  if not pos then return usage_error("ledger " .. sub .. ": " .. opts, "ledger " .. sub) end
  if #pos ~= 1 then
    return usage_error("ledger " .. sub .. ": expected exactly one session directory", "ledger " .. sub)
  end
  local dir = pos[1]
  local c = { sub = sub, dir = dir, opts = opts, usage_error = usage_error, cannot_start = cannot_start }
  function c.cannot(err)
    return cannot_start(opts, "ledger " .. sub, (tostring(err):gsub("^ledger: ", "")), "ledger")
  end
  function c.torn_note(rep)
    if (rep.torn_bytes or 0) > 0 then
      return string.format("ledger %s: note: %s; a writer's next open cuts it off", dir, rep.reason)
    end
  end
  -- --key KEYFILE: the host's key, never the ledger process's nor the guest's.
  if opts.key then
    local kerr
    c.key, kerr = core.checkpoint_key(opts.key, dir)
    if not c.key then return cannot_start(opts, "ledger " .. sub, kerr, "key") end
  end
  return SUB[sub](c)
end

return M
