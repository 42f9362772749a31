-- airlock.workspace.overlay -- a program's workspace through a copy-on-write
-- overlay (tool.overlay): the program writes into a tmpfs whose size and
-- inodes the kernel bounds (core/spawn_mount.c, AIRLOCK_MOUNT_OVERLAY), so a
-- run cannot fill the host's disk through its workspace, and the real
-- workspace is never written. The child hands the tmpfs to this process
-- before exec; after the run, the kernel's own count of it (fstatfs) says
-- whether the run reached the bound, which is then a violation. With commit
-- = "never", the one value so far, the changes go with the tmpfs.
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
    commit = ov.commit,
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

--- take(ov, run) -> the run's writable layer (an airlock.overlay_layer that
--- closes the tmpfs), false when the mode is off; or nil, message when the
--- layer did not arrive (the run is then cancelled by the caller).
function M.take(ov, run)
  if not ov then return false end
  local layer = run:_overlay_take()
  if not layer then return nil, "confinement: overlay: the run's writable layer did not arrive" end
  return layer
end

local function mib(n) return string.format("%.1f MiB", n / 1048576) end

--- finish(ov, layer, res): res.overlay = { bytes_used, bytes_max, files_used,
--- files_max, commit, applied = false }, and a violation (kind "limit") for
--- each bound the run reached, as the kernel counts it. Closes the layer.
function M.finish(ov, layer, res)
  if not layer then return end
  local u, err = layer:usage()
  layer:close()
  if not u then
    res.overlay = { commit = ov.commit, applied = false, error = err }
    return
  end
  res.overlay = { bytes_used = u.bytes_used, bytes_max = u.bytes_max, files_used = u.files_used,
                  files_max = u.files_max, commit = ov.commit, applied = false }
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
  res.violations = v
end

return M
