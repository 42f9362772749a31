-- airlock.cli.ledger -- airlock ledger verify|show|head DIR: exit 0 intact,
-- 1 damaged or unreadable midway, 2 bad usage or no journal to read.
local json = require "airlock.json"

local M = {}

-- cli: the command's helpers (usage_error, parse, cannot_start: cli/main.lua).
function M.main(args, cli)
  local usage_error, parse, cannot_start = cli.usage_error, cli.parse, cli.cannot_start
  local ledger = require "airlock.ledger"
  local sub = args[1]
  local specs = { verify = { checkpoint = "value", json = "switch" }, show = { json = "switch" }, head = {} }
  if sub == nil then return usage_error("ledger: expected verify, show or head") end
  if not specs[sub] then return usage_error("ledger: unknown subcommand '" .. sub .. "' (verify, show, head)") end
  local pos, opts = parse({ table.unpack(args, 2) }, specs[sub])
  if not pos then return usage_error("ledger " .. sub .. ": " .. opts, "ledger " .. sub) end
  if #pos ~= 1 then
    return usage_error("ledger " .. sub .. ": expected exactly one session directory", "ledger " .. sub)
  end
  local dir = pos[1]
  local function cannot(err)
    return cannot_start(opts, "ledger " .. sub, (tostring(err):gsub("^ledger: ", "")), "ledger")
  end
  local function torn_note(rep)
    if (rep.torn_bytes or 0) > 0 then
      return string.format("ledger %s: note: %s; a writer's next open cuts it off", dir, rep.reason)
    end
  end

  if sub == "verify" then
    if opts.checkpoint then
      local ok, err = ledger.parse_checkpoint(opts.checkpoint)
      if not ok then return usage_error("ledger verify: --checkpoint: " .. err, "ledger verify") end
    end
    local rep, err = ledger.verify(dir, opts.checkpoint)
    if not rep then return cannot(err) end
    if opts.json then
      rep.dir = dir
      rep.checkpoint = opts.checkpoint
      io.stdout:write(json.encode(rep), "\n")
    elseif rep.ok then
      io.stdout:write(string.format("ledger %s: intact, %d records, head %s%s\n", dir, rep.records,
                                    rep.head, opts.checkpoint and ", checkpoint matches" or ""))
      local note = torn_note(rep)
      if note then io.stdout:write(note, "\n") end
    else
      io.stdout:write(string.format("ledger %s: damaged at seq %d: %s\n", dir, rep.first_bad_seq, rep.reason))
    end
    return rep.ok and 0 or 1
  end

  if sub == "head" then
    local rep, err = ledger.verify(dir)
    if not rep then return cannot(err) end
    if not rep.ok then
      io.stderr:write(string.format("ledger %s: damaged at seq %d: %s\n", dir, rep.first_bad_seq, rep.reason))
      return 1
    end
    io.stdout:write(rep.head, "\n")
    return 0
  end

  -- show
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

return M
