-- airlock.program -- what airlock.spawn and airlock.exec both need to start a
-- plain program: finding it in PATH, and whether its capabilities can be
-- dropped here.
local M = {}

M.DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

--- find(name, path) -> the program's path, or nil: a name without a slash is
--- looked up in path (the program's own PATH; default M.DEFAULT_PATH).
function M.find(name, path)
  if name:find("/", 1, true) then return name end
  for dir in (path or M.DEFAULT_PATH):gmatch("[^:]+") do
    local f = io.open(dir .. "/" .. name, "rb")
    if f then f:close(); return dir .. "/" .. name end
  end
  return nil
end

--- is_root() -> whether this process runs as (effective) root.
function M.is_root()
  local f = io.open("/proc/self/status", "rb")
  local s = f and f:read("a") or ""
  if f then f:close() end
  return s:match("\nUid:%s+%d+%s+0%s") ~= nil
end

--- can_drop_caps(namespaces, root) -> whether the spawner can empty the
--- capability sets: with a user namespace (CAP_SETPCAP inside it), or as root
--- (a root program then holds none). root: M.is_root(), if already known.
function M.can_drop_caps(namespaces, root)
  for _, ns in ipairs(namespaces or {}) do
    if ns == "user" then return true end
  end
  if root == nil then root = M.is_root() end
  return root
end

return M
