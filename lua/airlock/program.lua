-- airlock.program -- what airlock.spawn and airlock.exec both need to start a
-- plain program: finding it in PATH, and whether its capabilities can be
-- dropped here.
local util = require "airlock.util"
local core = require "airlock.core"

local M = {}

M.DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

--- find(name, path) -> the program's path, or nil: a name without a slash is
--- looked up in path (the program's own PATH; default M.DEFAULT_PATH).
function M.find(name, path)
  if name:find("/", 1, true) then return name end
  for dir in (path or M.DEFAULT_PATH):gmatch("[^:]+") do
    if util.exists(dir .. "/" .. name) then return dir .. "/" .. name end
  end
  return nil
end

--- locate(name, opts) -> path, or nil, message, exit status (127 not found,
--- 126 not runnable), the way a shell inside the sandbox would find it:
--- opts.path (PATH), opts.cwd (where "./prog" and "bin/prog" resolve: the
--- workspace), opts.runnable(real path) -> true or the policy field that
--- would have to grant it; opts.root: a root file system the program runs
--- in (paths resolve inside it; real paths are the host's). A PATH entry the program cannot run from is passed
--- over (inside, it does not exist); if the name is found only there, the
--- message names it and the field that would grant it. When it is found
--- further down PATH, the second result is the copy passed over: {path,
--- real (when outside what the policy lets run), why}.
function M.locate(name, opts)
  local function check(p)
    local real, st
    if opts.root and not M.beneath(p, opts.cwd) then
      st = core.fs_realpath_in(opts.root, p)
      real = st and st.real
    else
      real = core.fs_realpath(p)
      local dir, base = (real or ""):match("^(.*)/([^/]+)$")
      local ok, s = pcall(core.fs_stat, dir ~= "" and dir or "/", base)
      st = ok and s or nil
    end
    if not st then return nil, "not found", 127 end
    if st.type ~= "file" or (st.mode or 0) & 73 == 0 then return nil, "not executable", 126 end
    local ok = opts.runnable(real)
    if ok ~= true then return nil, ok, 126, real end
    return real
  end
  if name:find("/", 1, true) then
    local p = name:sub(1, 1) == "/" and name or (opts.cwd .. "/" .. name)
    local real, why, status, outside = check(p)
    if real then return p end
    if outside then
      return nil, string.format("%s (%s) is outside what the policy lets programs run: %s", name, outside, why), status
    end
    return nil, string.format("%s: %s", name, why), status
  end
  local outside
  local path = opts.path or M.DEFAULT_PATH
  for dir in path:gmatch("[^:]+") do
    if dir:sub(1, 1) ~= "/" then dir = opts.cwd .. "/" .. dir end
    local p = dir .. "/" .. name
    local real, why, status, out = check(p)
    if real then
      -- Found further down PATH than a copy the program cannot run: said,
      -- since what runs is not what the caller's shell would run.
      local passed = outside and { path = outside[1], real = outside[2], why = outside[3] }
      return p, passed
    end
    if out and not outside then outside = { p, out, why } end
    if status == 126 and not out and not outside then outside = { p, nil, why } end
  end
  if outside and outside[2] then
    return nil, string.format("'%s' is found only at %s (%s), outside what the policy lets programs run: %s",
      name, outside[1], outside[2], outside[3]), 127
  elseif outside then
    return nil, string.format("'%s' at %s is %s", name, outside[1], outside[3]), 126
  end
  return nil, string.format("'%s' not found in PATH (%s)", name, path), 127
end

-- The caller's own configuration a program may see, read-only: git's and
-- the shells'. Nothing else of the caller's home is there: not its keys,
-- tokens, history or caches.
M.HOME_FILES = { ".gitconfig", ".config/git/config", ".config/git/ignore", ".config/git/attributes",
                 ".profile", ".bashrc", ".bash_profile", ".inputrc", ".zshrc" }
local GIT_CONFIGS = { [".gitconfig"] = true, [".config/git/config"] = true }

--- home(mode, caller_home, workspace, private_tmp) -> the program's HOME,
--- the files of the caller's home it sees (read-only; airlock.policy.grants
--- .home grants them, a link's target too: the view remakes the link), and
--- the git configuration to name in GIT_CONFIG_GLOBAL, or nil.
---   "workspace": HOME is the workspace; the caller's git configuration
---     (~/.gitconfig, else ~/.config/git/config) is shown and named, so git
---     commits as the caller and `git config --global` cannot write a
---     .gitconfig into the repository.
---   "caller": HOME is the caller's home, read-only, holding those of
---     M.HOME_FILES present and nothing else; the workspace when it holds
---     none of them.
--- A home that lies in the workspace, or under a private /tmp (which hides
--- it), shows nothing.
function M.home(mode, caller_home, workspace, private_tmp)
  if type(caller_home) ~= "string" or caller_home:sub(1, 1) ~= "/" then return workspace, {} end
  local home = core.fs_realpath(caller_home)
  if not home or home == "/" or M.beneath(home, workspace) or (private_tmp and M.beneath(home, "/tmp")) then
    return workspace, {}
  end
  local files, git = {}, nil
  for _, name in ipairs(M.HOME_FILES) do
    local p = home .. "/" .. name
    local real = core.fs_realpath(p)
    local dir, base = (real or ""):match("^(.*)/([^/]+)$")
    local ok, st = pcall(core.fs_stat, dir ~= "" and dir or "/", base or ".")
    if real and ok and st and st.type == "file" and (mode == "caller" or GIT_CONFIGS[name] and not git) then
      files[#files + 1] = p
      if real ~= p then files[#files + 1] = real end
      if GIT_CONFIGS[name] and not git then git = p end
    end
  end
  if mode == "caller" then
    if #files == 0 then return workspace, {} end
    return home, files
  end
  return workspace, files, git
end

--- is_root() -> whether this process runs as (effective) root.
function M.is_root()
  local s = util.read_file("/proc/self/status") or ""
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

--- beneath(path, dir) -> whether path is dir or lies below it (both absolute
--- and canonical).
function M.beneath(path, dir)
  return path == dir or path:sub(1, #dir + 1) == (dir == "/" and "/" or dir .. "/")
end

--- check_workspace(dir, landlock) -> true, or nil, message: a workspace is
--- made writable (and, when root, idmapped so the program owns what is in
--- it), so it must be a directory of its own: not /, and holding none of the
--- paths the Landlock rules keep read-only or executable (the system).
function M.check_workspace(dir, landlock)
  if dir == "/" then
    return nil, "workspace: / cannot be a workspace; give a directory of its own"
  end
  local writable = util.set_of(landlock and landlock.write)
  for _, list in ipairs { landlock and landlock.read or {}, landlock and landlock.exec or {} } do
    for _, p in ipairs(list) do
      if M.beneath(p, dir) and not writable[p] then
        return nil, string.format("workspace: %s holds %s, which the policy keeps read-only; a workspace " ..
          "is made writable, so give a directory of its own", dir, p)
      end
    end
  end
  return true
end

return M
