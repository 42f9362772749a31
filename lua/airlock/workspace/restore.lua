-- airlock.workspace.restore -- a session's committed change sets undone
-- (revert) or done again (reapply) from its journal and the contents it kept
-- (docs/LEDGER.md, "Kept contents"). The journal is trusted only after its
-- chain verifies, and even then each field is checked as untrusted bytes
-- (a path relative, without "..", bounded; a hash 64 hex digits). Everything
-- is checked before anything is written: each path's state in the workspace
-- is the one the records say it should be (unless force), each blob is
-- present and of its hash (core/overlay_restore.c checks them as it stages
-- them, before the workspace is written); then each path is written through
-- the overlay applier, through no link.
local core = require "airlock.core"
local ledger = require "airlock.ledger"

local M = {}

local PATH_MAX = 4095
local KINDS = { created = true, modified = true, deleted = true, symlink = true, dir = true }

local function plain_path(p)
  if type(p) ~= "string" or #p == 0 or #p > PATH_MAX or p:find("\0", 1, true) or p:sub(1, 1) == "/" then
    return false
  end
  for part in (p .. "/"):gmatch("([^/]*)/") do
    if part == "" or part == "." or part == ".." then return false end
  end
  return true
end

-- The state a committed change left (new) and the one it found (before),
-- from its record, or nil, reason.
local function states(r)
  local new
  if r.change == "created" or r.change == "modified" then
    if not ledger.is_sha256_hex(r.sha256) then return nil, "its sha256 is not 64 hex digits" end
    if math.type(r.mode) ~= "integer" or r.mode < 0 or r.mode > 4095 then return nil, "its mode is not one" end
    new = { kind = "file", sha256 = r.sha256, mode = r.mode }
  elseif r.change == "deleted" then
    new = { kind = "none" }
  elseif r.change == "dir" then
    if math.type(r.mode) ~= "integer" or r.mode < 0 or r.mode > 4095 then return nil, "its mode is not one" end
    new = { kind = "dir", mode = r.mode }
  else
    local t = r.target
    if type(t) ~= "string" or #t == 0 or #t > PATH_MAX or t:find("\0", 1, true) then
      return nil, "its link's target is not a link's text"
    end
    new = { kind = "link", sha256 = core.sha256(t), text = t }
  end
  local before
  if r.before == "none" then
    before = { kind = "none" }
  elseif r.before == "file" or r.before == "link" then
    if not ledger.is_sha256_hex(r.before_sha256) then return nil, "its before_sha256 is not 64 hex digits" end
    local m = r.before_mode
    if math.type(m) ~= "integer" or m < 0 or m > 4095 then return nil, "its before_mode is not one" end
    before = { kind = r.before, sha256 = r.before_sha256, mode = m }
  elseif r.before == "dir" and r.change == "dir" then
    before = { kind = "dir" }   -- a directory the run found and kept (its mode, say, changed)
  elseif r.before == nil then
    return nil, "its contents were not kept (no before field: run with a session directory)"
  elseif r.before == "dir" or r.before == "emptied dir" then
    return nil, "it deleted or emptied a directory, whose contents are not kept"
  elseif r.before == "other" then
    return nil, "it replaced something neither a file, a link nor a directory, which is not kept"
  else
    return nil, "it replaced a " .. tostring(r.before) .. ", which is not kept"
  end
  return new, before
end

local function same(a, b)
  return a.kind == b.kind and (a.kind == "none" or a.kind == "other" or a.kind == "dir" or a.sha256 == b.sha256)
end

local function said(s)
  if s.kind == "none" then return "absent" end
  if s.kind == "other" then return "neither a file, a link nor a directory" end
  if s.kind == "dir" then return "a directory" end
  return string.format("a %s of SHA-256 %s", s.kind, s.sha256 and s.sha256:sub(1, 12) .. "..." or "?")
end

--- committed(dir, run) -> list of { run, seq, path, new, before }, workspace
--- (the records' own, or nil); or nil, message. The session's committed
--- changes (of run N when given), in the journal's order, after the chain
--- verifies; a change that a later record says was refused or failed is not one.
function M.committed(dir, run)
  local rep, verr = ledger.verify(dir)
  if not rep then return nil, "the journal cannot be read: " .. tostring(verr) end
  if not rep.ok then
    return nil, string.format("the journal does not verify (%s): nothing of it is trusted", tostring(rep.reason))
  end
  local list, at, workspace = {}, {}, nil
  local ok, err = pcall(function()
    for r in ledger.records(dir) do
      if r.kind == "workspace.change" and (run == nil or r.run == run) and KINDS[r.change] then
        if not plain_path(r.path) then
          error(string.format("record #%s: its path is not a relative path without '..'", tostring(r.seq)), 0)
        end
        local key = tostring(r.run) .. "\0" .. r.path
        if r.decision == "committed" then
          local new, before = states(r)
          if not new then error(string.format("record #%s (%s): %s", tostring(r.seq), r.path, before), 0) end
          if type(r.workspace) ~= "string" or r.workspace:sub(1, 1) ~= "/" then
            error(string.format("record #%s (%s): it names no workspace", tostring(r.seq), r.path), 0)
          end
          if workspace and workspace ~= r.workspace then
            error(string.format("record #%s: its workspace %s is not %s, the earlier records'", tostring(r.seq),
              r.workspace, workspace), 0)
          end
          workspace = r.workspace
          list[#list + 1] = { run = r.run, seq = r.seq, path = r.path, new = new, before = before }
          at[key] = #list
        elseif (r.decision == "refused" or r.decision == "failed") and at[key] then
          list[at[key]].gone = true   -- never applied
        end
      end
    end
  end)
  if not ok then return nil, "the journal: " .. tostring(err) end
  local out = {}
  for _, c in ipairs(list) do if not c.gone then out[#out + 1] = c end end
  return out, workspace
end

--- run(dir, how, opts) -> count of paths written, workspace, left (the
--- directories a revert would remove that hold what no record names, left in
--- place); or nil, message, code ("refused": nothing was written; else it
--- failed while writing).
--- how: "revert" (the changes undone, newest first) or "reapply" (done
--- again, oldest first). opts: run (one run's changes), workspace (instead
--- of the records'), force (a path that is not as the records expect is
--- written anyway).
function M.run(dir, how, opts)
  opts = opts or {}
  local changes, ws = M.committed(dir, opts.run)
  if not changes then return nil, ws, "refused" end
  if #changes == 0 then
    return nil, "no committed change with kept contents in the session" ..
      (opts.run and " for run " .. tostring(opts.run) or ""), "refused"
  end
  ws = opts.workspace or ws
  local real = core.fs_realpath(ws)
  if not real then return nil, "the workspace " .. tostring(ws) .. " does not exist", "refused" end
  local rdir = core.fs_realpath(dir) or dir
  if (rdir .. "/"):sub(1, #real + 1) == real .. "/" then
    return nil, string.format("the session %s is inside the workspace %s", dir, real), "refused"
  end
  -- One writer at a time: an overlaid run holds the same lock while it applies.
  local lock <close>, lerr = core.overlay_lock(real)
  if not lock then
    return nil, string.format("the workspace %s is in use by an overlaid run (%s); run again when it has ended",
      real, tostring(lerr)), "refused"
  end
  local from, to, first, last, step = "new", "before", #changes, 1, -1
  if how == "reapply" then from, to, first, last, step = "before", "new", 1, #changes, 1 end
  local cur, order, final, emptied = {}, {}, {}, {}
  for i = first, last, step do
    local c = changes[i]
    local now = cur[c.path]
    if not now then
      local kind, sha, err = core.overlay_look(real, c.path)
      if not kind then
        return nil, string.format("%s cannot be looked at through no link (%s): a link or a file stands where " ..
          "one of its directories was; nothing was changed", c.path, tostring(sha or err)), "refused"
      end
      now = { kind = kind, sha256 = sha }
    end
    if not same(now, c[from]) and not opts.force then
      return nil, string.format("%s is %s, not %s as run %s %s it; nothing was changed (--force to %s it anyway)",
        c.path, said(now), said(c[from]), tostring(c.run), how == "revert" and "left" or "found", how), "refused"
    end
    cur[c.path] = c[to]
    if c[from].kind == "dir" and c[to].kind == "none" then emptied[#emptied + 1] = c.path end
    if final[c.path] then order[final[c.path]] = false end
    order[#order + 1] = c.path
    final[c.path] = #order
  end
  local items = {}
  for _, path in ipairs(order) do
    if path then
      local s = cur[path]
      items[#items + 1] = { path = path, kind = s.kind, sha256 = s.sha256, mode = s.mode, text = s.text }
    end
  end
  local ok, err, code = core.overlay_restore(real, dir, items)
  if not ok then return nil, tostring(err):gsub("^ledger: ", ""), code == "refused" and "refused" or "failed" end
  -- A directory the run made is removed only when empty: one that now holds
  -- what no record names (a file made since) is left, and said.
  local left = {}
  for _, path in ipairs(emptied) do
    if cur[path].kind == "none" and core.overlay_look(real, path) == "dir" then left[#left + 1] = path end
  end
  return #items, real, left
end

return M
