-- airlock.protect -- tool.protect's entries turned into the paths the spawner
-- holds (core/spawn_protect.c): each named path, present or not (a missing one
-- gets an empty placeholder for the run), and each present match of a pattern.
--
-- Patterns: `*` and `?` match within one component, `**` any number of
-- directories (none included): "**/.env", "config/*.pem". They are matched
-- when the run starts by a walk of the workspace that never follows a
-- symbolic link and is bounded (WALK_ENTRIES entries looked at, WALK_DEPTH
-- directories deep); past a bound the run is refused rather than protected in
-- part. A match made during the run cannot be foreseen and is not protected,
-- but for "**/NAME" (NAME plain) NAME at the top is a named path as well.
--
-- Anchored: "DIR//REST" is protected only when DIR is there at the start
-- (then whatever of REST is missing is made, as for a named path); without
-- DIR nothing is made, so a DIR the program makes is its own. The stock
-- policy protects ".git//hooks/" and ".git//config" so: a repository's hooks
-- and config, present or not, while `git init` in a fresh workspace works.
local core = require "airlock.core"

local M = {}

M.WALK_ENTRIES = 10000
M.WALK_DEPTH = 16

local function is_pattern(s) return s:find("[*?]") ~= nil end

-- A component of a pattern as an anchored Lua pattern.
local function component(c)
  local lua = c:gsub("[%^%$%(%)%%%.%[%]%+%-]", "%%%0"):gsub("%*", "[^/]*"):gsub("%?", "[^/]")
  return "^" .. lua .. "$"
end

local function join(dir, name) return dir == "" and name or (dir .. "/" .. name) end

-- What rel is in ws, never through a symbolic link: "dir", "file", "other",
-- false (missing: it, or a directory above it), or nil and where a link is.
local function look(ws, rel)
  local prefix = ""
  for part in rel:gmatch("[^/]+") do
    prefix = join(prefix, part)
    local st = core.fs_realpath_in(ws, prefix)
    if not st then return false end
    if st.real ~= ws .. "/" .. prefix then return nil, prefix, st.real end
    if prefix ~= rel and st.type ~= "dir" then return false end
  end
  return core.fs_realpath_in(ws, rel).type
end

-- Every present match of pattern (a list of components) in ws, or nil, why.
local function walk(ws, pattern, entry)
  local out, seen, visited = {}, {}, 0
  local function bound()
    return string.format("confinement: tool.protect's pattern %s: the workspace holds more than %d entries " ..
      "to look through (the bound); name the paths, or a narrower pattern (a directory before the *)", entry,
      M.WALK_ENTRIES)
  end
  local function go(dir, i, depth)
    if depth > M.WALK_DEPTH then
      return string.format("confinement: tool.protect's pattern %s: %s is deeper than %d directories " ..
        "(the bound); name the paths, or a narrower pattern", entry, dir, M.WALK_DEPTH)
    end
    if i > #pattern then
      if dir ~= "" and not seen[dir] then seen[dir] = true; out[#out + 1] = dir end
      return
    end
    local c = pattern[i]
    if c == "**" then
      local e = go(dir, i + 1, depth)   -- no directory at all
      if e then return e end
    elseif not is_pattern(c) then
      local rel = join(dir, c)
      visited = visited + 1
      if visited > M.WALK_ENTRIES then return bound() end
      local kind, link = look(ws, rel)
      if kind == nil then
        return string.format("workspace: tool.protect's pattern %s reaches %s, a symbolic link; a protected " ..
          "path must be the file or directory itself", entry, link)
      end
      if kind and (i == #pattern or kind == "dir") then return go(rel, i + 1, depth + 1) end
      return
    end
    local names, code = core.fs_list(ws, dir == "" and "." or dir, M.WALK_ENTRIES - visited)
    if code == "too_many" then return bound() end
    if not names then return end   -- gone or unreadable: nothing to match there
    table.sort(names)
    local want = c ~= "**" and component(c)
    for _, name in ipairs(names) do
      visited = visited + 1
      if visited > M.WALK_ENTRIES then return bound() end
      local rel = join(dir, name)
      local st = core.fs_realpath_in(ws, rel)
      local link = not st or st.real ~= ws .. "/" .. rel   -- a symbolic link (or gone): never followed
      if c == "**" then
        if not link and st.type == "dir" then
          local e = go(rel, i, depth + 1)
          if e then return e end
        end
      elseif name:match(want) then
        if link and i == #pattern then
          return string.format("workspace: tool.protect's pattern %s matches %s, a symbolic link; a protected " ..
            "path must be the file or directory itself", entry, rel)
        end
        if not link and (i == #pattern or st.type == "dir") then
          local e = go(rel, i + 1, depth + 1)
          if e then return e end
        end
      end
    end
  end
  local e = go("", 1, 0)
  if e then return nil, e end
  return out
end

--- resolve(ws, entries) -> { paths = { {rel, dir, present} ... }, patterns =
--- { {entry, count, top} ... }, absent = { DIR//REST entries whose DIR is not
--- there } }, or nil, message (a refusal: "workspace:" or "confinement:").
--- ws: the workspace's real path.
function M.resolve(ws, entries)
  local res, index = { paths = {}, patterns = {}, absent = {} }, {}
  local function add(rel, dir)
    if index[rel] then return true end
    local kind, link, real = look(ws, rel)
    if kind == nil then
      return nil, string.format("workspace: tool.protect names %s, which is reached through a symbolic link " ..
        "(%s leads to %s); a protected path must be the file or directory itself", rel, link, real)
    end
    index[rel] = true
    res.paths[#res.paths + 1] = { rel = rel, dir = dir and not kind or kind == "dir", present = kind and true }
    return true
  end
  for _, entry in ipairs(entries) do
    local dir = entry:sub(-1) == "/"
    local anchor = entry:match("^(.-)//.")
    local clean = entry:gsub("/+$", ""):gsub("/+", "/"):gsub("^%./", "")
    local held = true
    if anchor and anchor ~= "" and not is_pattern(entry) then
      local kind, link, real = look(ws, (anchor:gsub("/+", "/")))
      if kind == nil then
        return nil, string.format("workspace: tool.protect names %s, which is reached through a symbolic link " ..
          "(%s leads to %s); a protected path must be the file or directory itself", clean, link, real)
      end
      if not kind then   -- DIR//REST without DIR: nothing to hold, nothing made
        held = false
        res.absent[#res.absent + 1] = clean .. (dir and "/" or "")
      end
    end
    if not held then
      -- said in the report line
    elseif is_pattern(clean) then
      local parts = {}
      for part in clean:gmatch("[^/]+") do
        if part ~= "." then parts[#parts + 1] = part end
      end
      local found, why = walk(ws, parts, clean)
      if not found then return nil, why end
      for _, rel in ipairs(found) do
        local ok, err = add(rel, false)
        if not ok then return nil, err end
      end
      local rest = clean:match("^%*%*/(.+)$")
      local top = rest and not is_pattern(rest) and rest or nil
      if top then
        local ok, err = add(top, dir)
        if not ok then return nil, err end
      end
      res.patterns[#res.patterns + 1] = { entry = clean, count = #found, top = top }
    elseif clean ~= "" then
      local ok, err = add(clean, dir)
      if not ok then return nil, err end
    end
  end
  return res
end

return M
