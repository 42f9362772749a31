-- airlock.policy.grants -- every path a program's Landlock rules let it
-- reach, as one list of grants, each { path, rights, why }: rights are
-- letters of "rwx" (r: read files and list directories beneath path; w:
-- write, make and remove beneath it; x: run what is beneath it, which also
-- reads it), why says where the grant comes from, for a person reading it.
-- This module is the one place a program's paths are assembled: the
-- planner (airlock.confine) only reads the list, turning it into Landlock's
-- read, write and exec lists (lists) in the order the grants come.
--
--   of_policy(tool, workspace)   the policy's own: tool.confine.landlock's
--                                read, write and exec, the workspace (read
--                                and write; and exec with tool.workspace_exec),
--                                tool.grant's read, write and exec
--   of_landlock(ll, why)         airlock.spawn's confine.landlock lists
--   rootfs(list, entries, ws)    another root file system takes the place
--                                of the system paths (what is read or run)
--   command(list, path)          the airlock command (`airlock call`)
--   init(list, path)             airlock-init, PID 1 of the pid namespace
--   terminal(list, paths)        the program's terminal (/dev/tty, its pts)
--   home(list, paths)            the caller's configuration files a program
--                                sees (tool.home; airlock.program.home)
--   lists(list)                  -> { read, write, exec }, each path once
local util = require "airlock.util"
local program = require "airlock.program"

local plain = util.copy

local M = {}

-- Which Landlock list each letter adds to.
local LISTS = { r = "read", w = "write", x = "exec" }
local LETTERS = { "r", "w", "x" }

local function add(list, path, rights, why)
  list[#list + 1] = { path = path, rights = rights, why = why }
  return list
end

--- The policy's grants, for a program in workspace (nil: none). Refuses
--- tool.grant of / (nil, message), naming the policy.
function M.of_policy(tool, workspace, name)
  local list = {}
  local ll = tool.confine and tool.confine.landlock
  if type(ll) == "table" then
    for _, letter in ipairs(LETTERS) do
      local kind = LISTS[letter]
      for _, path in ipairs(ll[kind] and plain(ll[kind]) or {}) do
        add(list, path, letter, "tool.confine.landlock." .. kind)
      end
    end
  end
  if workspace then add(list, workspace, tool.workspace_exec and "rwx" or "rw", "the workspace") end
  -- What a program may write or run, it may read too.
  for _, g in ipairs { { "read", "r" }, { "write", "rw" }, { "exec", "rx" } } do
    local kind, rights = g[1], g[2]
    for _, path in ipairs(tool.grant and tool.grant[kind] and plain(tool.grant[kind]) or {}) do
      if path == "/" then
        return nil, string.format("policy '%s': tool.grant.%s cannot grant / (name the directories " ..
          "the program needs)", tostring(name), kind)
      end
      add(list, path, rights, "tool.grant." .. kind)
    end
  end
  return list
end

--- airlock.spawn's own Landlock lists (confine.landlock, a table or true)
--- as grants, in their order: read, write, exec. A list may be one path, as
--- the binding reads it (lua/binding/lconfine.c).
function M.of_landlock(ll, why)
  local list = {}
  if type(ll) ~= "table" then return list end
  for _, letter in ipairs(LETTERS) do
    local kind = LISTS[letter]
    local given = ll[kind]
    for _, path in ipairs(type(given) == "string" and { given } or type(given) == "table" and given or {}) do
      add(list, path, letter, why .. "." .. kind)
    end
  end
  return list
end

--- Another root file system: its top-level entries (read and run) take the
--- place of what the list let the program read or run, but for devices
--- (beneath /dev) and the workspace; what it may write stays.
function M.rootfs(list, entries, workspace)
  local out = {}
  for _, e in ipairs(entries) do add(out, e, "rx", "the root file system") end
  for _, g in ipairs(list) do
    local kept = g.path == workspace or program.beneath(g.path, "/dev")
    local rights = kept and g.rights or g.rights:gsub("[rx]", "")
    if rights ~= "" then add(out, g.path, rights, g.why) end
  end
  return out
end

function M.command(list, path) return add(list, path, "x", "the airlock command (`airlock call`)") end

function M.init(list, path) return add(list, path, "x", "airlock-init, PID 1 of its pid namespace") end

function M.terminal(list, paths)
  for _, p in ipairs(paths) do add(list, p, "rw", "its terminal") end
  return list
end

--- The caller's configuration files a program sees, read-only (tool.home).
function M.home(list, paths)
  for _, p in ipairs(paths) do
    add(list, p, "r", "the caller's configuration (tool.home)")
  end
  return list
end

--- Landlock's lists from the grants: each path in the list of each of its
--- rights, once, in the order the grants come.
function M.lists(list)
  local out, seen = { read = {}, write = {}, exec = {} }, { read = {}, write = {}, exec = {} }
  for _, g in ipairs(list or {}) do
    for _, letter in ipairs(LETTERS) do
      local kind = LISTS[letter]
      if g.rights:find(letter, 1, true) and not seen[kind][g.path] then
        seen[kind][g.path] = true
        local l = out[kind]
        l[#l + 1] = g.path
      end
    end
  end
  return out
end

--- The paths the list lets a program run (rights with x), in order.
function M.runnable(list)
  local out = {}
  for _, g in ipairs(list or {}) do if g.rights:find("x", 1, true) then out[#out + 1] = g.path end end
  return out
end

return M
