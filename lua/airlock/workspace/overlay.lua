-- airlock.workspace.overlay -- a program's workspace through a copy-on-write
-- overlay (tool.overlay): the program writes into a tmpfs whose size and
-- inodes the kernel bounds (core/spawn_mount.c, AIRLOCK_MOUNT_OVERLAY), so a
-- run cannot fill the host's disk through its workspace, and the real
-- workspace is never written. The child hands the tmpfs to this process
-- before exec; after the run, the kernel's own count of it (fstatfs) says
-- whether the run reached the bound, which is then a violation, and the
-- change set is read from it, following no link the program made; what
-- tool.overlay.commit takes of it is applied to the real workspace by this
-- process, file by file (core/overlay_apply.c), and the rest goes with the
-- tmpfs.
local core = require "airlock.core"
local policy = require "airlock.policy"

local M = {}

--- The policy's tool.overlay section with its defaults filled in, or nil
--- when the mode is off (the plain workspace bind).
function M.configured(tool)
  local ov = tool and tool.overlay
  if ov == nil then return nil end
  return {
    max_bytes = ov.max_bytes or policy.default("tool.overlay.max_bytes"),
    max_files = ov.max_files or policy.default("tool.overlay.max_files"),
    commit = ov.commit or policy.default("tool.overlay.commit"),
  }
end

--- plan(ov, start) -> true, or nil, message: the spawn options of an
--- overlaid workspace. tool.protect's paths are read-only binds over the
--- overlay as over a plain workspace (core/spawn_mount.c).
function M.plan(ov, start)
  if not ov then return true end
  if not start.workspace then
    return nil, "policy: tool.overlay needs the mount namespace (tool.confine.namespaces holds \"mount\")"
  end
  start.overlay_bytes, start.overlay_files = ov.max_bytes, ov.max_files
  return true
end

--- lock(ov, workspace) -> a lock to close when the run's change set is
--- applied, false when the mode is off; or nil, message when another
--- overlaid run holds the workspace: the second run is refused, not queued
--- (it would read a workspace the first is about to change).
function M.lock(ov, workspace)
  if not ov then return false end
  local l, err = core.overlay_lock(workspace)
  if not l then
    return nil, string.format("workspace: %s is in use by another overlaid run (%s); run again when it has " ..
      "ended", workspace, tostring(err))
  end
  return l
end

--- take(ov, run) -> the run's writable layer (an airlock.overlay_layer that
--- closes the tmpfs), false when the mode is off; or nil, message when the
--- layer did not arrive (the run is then cancelled by the caller).
function M.take(ov, run)
  if not ov then return false end
  local layer = run:_overlay_take()
  if not layer then return nil, "confinement: overlay: the run's writable layer did not arrive" end
  -- The change set is hashed when the run ends, and OpenSSL is opened on
  -- first use (2 ms): it is opened now, while the program runs. (Failing
  -- here is not fatal: the hashing says why.)
  core.sha256_load()
  return layer
end

-- The changes the policy's commit takes, in the layer's order: all, none,
-- or those a function names (by change or by path; others are ignored).
-- -> list, decision word, error message (a function that failed: none).
local function decide(commit, changes, res, workspace)
  if commit == "never" then return {}, "never" end
  if commit == "always" then return changes, "always" end
  if commit == "on_success" then
    if res.cause == "ok" and res.exit_code == 0 then return changes, "on_success" end
    return {}, "on_success"
  end
  local copy = {}
  for i, c in ipairs(changes) do
    local t = {}
    for k, v in pairs(c) do t[k] = v end
    copy[i] = t
  end
  local ok, r = pcall(commit, copy, { exit_code = res.exit_code, cause = res.cause, signal = res.signal,
                                      workspace = workspace, argv = res.argv })
  if not ok then return {}, "function", "tool.overlay.commit failed: " .. tostring(r) end
  if r == true then return changes, "function" end
  if type(r) ~= "table" then return {}, "function" end
  local chosen = {}
  for _, x in ipairs(r) do
    local path = type(x) == "table" and x.path or x
    if type(path) == "string" then chosen[path] = true end
  end
  local out = {}
  for _, c in ipairs(changes) do if chosen[c.path] then out[#out + 1] = c end end
  return out, "function"
end

local STATUS = { created = "A", modified = "M", deleted = "D", symlink = "L", dir = "A", special = "!" }

--- status(changes) -> lines like `git status --short` with sizes, and a
--- summary line like `git diff --stat`'s last: one per change ("A  path
--- (12 bytes)", "M  path", "D  path", "L  path -> target", "A  dir/", "!  path
--- (a device node, fifo or socket: never applied)"); " R" after the letter
--- for a change that replaces another type of file, which is refused.
function M.status(changes)
  local lines, n, bytes = {}, { A = 0, M = 0, D = 0, L = 0, ["!"] = 0 }, 0
  for _, c in ipairs(changes) do
    local s = STATUS[c.kind] or "?"
    n[s] = (n[s] or 0) + 1
    local tail = ""
    if c.kind == "created" or c.kind == "modified" then
      tail = string.format(" (%d bytes)", c.size or 0)
      bytes = bytes + (c.size or 0)
    elseif c.kind == "symlink" then tail = " -> " .. tostring(c.target)
    elseif c.kind == "special" then tail = " (a device node, fifo or socket: never applied)" end
    lines[#lines + 1] = string.format("%s%s %s%s%s", s, c.replaces and "R" or " ", c.path,
      c.kind == "dir" and "/" or "", tail)
  end
  lines[#lines + 1] = string.format("%d change%s: %d added, %d modified, %d deleted, %d links, %d bytes to write",
    #changes, #changes == 1 and "" or "s", n.A, n.M, n.D, n.L, bytes)
  return lines
end

--- keep(layer, take, workspace, keep, violations) -> { [path] = kept },
--- or {}, message: the contents of the changes taken kept as blobs of the
--- session keep.dir (core/overlay_keep.c), bounded by keep.max_bytes with what
--- the session holds; each kept { before = "none" | "file" | "link" | "dir" |
--- "other" | "emptied dir" (a directory change that emptied one), before_sha256,
--- before_mode, sha256 }. Contents that would pass
--- the bound are a violation naming ledger.max_bytes.
function M.keep(layer, take, workspace, keep, v)
  local items = {}
  for _, c in ipairs(take) do
    if c.kind ~= "dir" and c.kind ~= "special" then
      items[#items + 1] = { path = c.path, new = c.kind == "created" or c.kind == "modified" }
    end
  end
  local list, err, code = layer:keep(workspace, keep.dir, items, keep.max_bytes or 0)
  if not list then
    if code == "bound" then
      v[#v + 1] = { kind = "limit", what = "the change set's contents", rule = "ledger.max_bytes", reason = err }
    end
    return {}, err
  end
  local kept, want = {}, {}
  for _, c in ipairs(take) do want[c.path] = c.sha256 end
  for _, k in ipairs(list) do
    if k.sha256 and k.sha256 ~= want[k.path] then
      return {}, string.format("overlay: keep %s: its content is not the one read from the writable layer; " ..
        "nothing was applied", k.path)
    end
    kept[k.path] = k
  end
  -- A directory has no contents to keep: what stood at its place is looked
  -- at, so a revert knows whether the run made it (before "none") or found
  -- it; one the run emptied (opaque) is said so, for no revert can refill it.
  for _, c in ipairs(take) do
    if c.kind == "dir" then
      local kind = core.overlay_look(workspace, c.path)
      kept[c.path] = { before = (kind == "dir" and c.opaque) and "emptied dir" or kind or "other" }
    end
  end
  return kept
end

local function mib(n) return string.format("%.1f MiB", n / 1048576) end

--- finish(ov, layer, res, workspace): res.overlay = { bytes_used, bytes_max,
--- files_used, files_max, changes, commit, applied (how many were), results
--- (one per change taken: path and applied, refused or error) }, and a violation
--- (kind "limit") for each bound the run reached, as the kernel counts it.
--- changes: the change set read from the layer (core/overlay_changes.c),
--- each { path, kind = "created" | "modified" | "deleted" | "symlink" |
--- "dir" | "special", mode, size, target, links, opaque, replaces }, parents
--- first; nil with changes_error when it could not be read. recorder: the
--- run's (a ledger), which gets a "workspace.change" record per change { path,
--- change (its kind), size, sha256, mode, target, decision = "committed" |
--- "refused" | "failed" | "discarded" }. keep: { dir, max_bytes } of the
--- ledger's session: the committed changes' contents are kept there first
--- (M.keep) and their records add before, before_sha256, before_mode and
--- workspace; contents that cannot be kept leave the set unapplied
--- (res.overlay.keep_error). Closes the layer.
function M.finish(ov, layer, res, workspace, recorder, review, keep)
  if not layer then return end
  local u, err = layer:usage()
  local changes, cerr, ccode = layer:changes(workspace)
  if not u then
    layer:close()
    res.overlay = { applied = 0, error = err }
    return
  end
  res.overlay = { bytes_used = u.bytes_used, bytes_max = u.bytes_max, files_used = u.files_used,
                  files_max = u.files_max, changes = changes, changes_error = cerr, applied = 0 }
  local v = res.violations or {}
  if u.bytes_used >= u.bytes_max then
    v[#v + 1] = { kind = "limit", what = "workspace writes", rule = "tool.overlay.max_bytes",
                  reason = string.format("the writable layer is full (%s): writes past it failed with ENOSPC",
                    mib(u.bytes_max)) }
  end
  if u.files_used >= u.files_max then
    v[#v + 1] = { kind = "limit", what = "workspace files", rule = "tool.overlay.max_files",
                  reason = string.format("the writable layer holds its %d files: more failed with ENOSPC",
                    u.files_max) }
  end
  if ccode == "bound" then   -- sparse files whose lengths pass the bound: none of it is read
    v[#v + 1] = { kind = "limit", what = "the change set's files", rule = "tool.overlay.max_bytes",
                  reason = (cerr:gsub("^overlay: ", "")) }
  end
  res.violations = v
  -- What the policy commits, applied from the layer while it is still held;
  -- a change set that could not be read whole is applied not at all. With
  -- a recorder each change's decision is recorded first, and only a change
  -- whose record the ledger admitted is applied (a refused record stops the
  -- rest); one that then could not be applied gets a second record saying so.
  local o = res.overlay
  local take, decision, derr = {}, "none", cerr
  if changes then take, decision, derr = decide(ov.commit, changes, res, workspace) end
  o.commit, o.commit_error = decision, derr
  -- The caller's review (airlock exec --review) narrows what the policy took.
  if review and #take > 0 then
    local reviewed, _, rerr = decide(review, take, res, workspace)
    o.reviewed, take = #reviewed, reviewed
    if rerr then o.commit_error = rerr:gsub("^tool%.overlay%.commit", "review") end
  end
  -- With a session to keep them in, what the taken changes need to be undone
  -- and done again is kept before one is applied; what cannot be kept (the
  -- bound, a failure) leaves the whole set unapplied.
  local kept, unkept = {}, nil
  if keep and recorder and #take > 0 then
    kept, unkept = M.keep(layer, take, workspace, keep, v)
    if unkept then take = {} end
  end
  o.keep_error = unkept
  local chosen = {}
  for _, c in ipairs(take) do chosen[c.path] = true end
  local function record(c, outcome, reason)
    if not recorder or o.ledger_error then return not o.ledger_error end
    local k = kept[c.path] or {}
    local ok, lerr = recorder:append("workspace.change", { path = c.path, change = c.kind, size = c.size,
      sha256 = c.sha256, mode = c.mode, target = c.target, decision = outcome,
      reason = reason or (outcome == "discarded" and unkept or nil),
      before = k.before, before_sha256 = k.before_sha256, before_mode = k.before_mode,
      workspace = keep and workspace or nil })
    if ok then return true end
    o.ledger_error = lerr
    v[#v + 1] = { kind = "limit", what = "the ledger", rule = "limits.ledger, ledger.max_bytes",
                  reason = "the change set's records did not fit; the changes after them were not applied: " ..
                    tostring(lerr) }
    return false
  end
  local paths, by_path = {}, {}
  for _, c in ipairs(changes or {}) do
    by_path[c.path] = c
    if record(c, chosen[c.path] and "committed" or "discarded") and chosen[c.path] then
      paths[#paths + 1] = c.path
    end
  end
  o.results = {}
  if #paths > 0 then
    local results, aerr = layer:apply(workspace, paths)
    o.results, o.apply_error = results or {}, aerr
    for _, r in ipairs(o.results) do
      if r.applied then o.applied = o.applied + 1
      else record(by_path[r.path], r.refused and "refused" or "failed", r.refused or r.error) end
    end
  end
  layer:close()
end

return M
