-- airlock.handlers.workspace -- fs.read, fs.write, fs.list, fs.stat and
-- fs.remove beneath one directory of the host's.
local core = require "airlock.core"
local common = require "airlock.handlers.common"

local fail, refuse, options = common.fail, common.refuse, common.options
local size_opt, count_opt, args_table, host_dir = common.size_opt, common.count_opt, common.args_table, common.host_dir
local fs_error = common.fs_error
local sfmt = string.format

local M = {}

-- The path argument: {path = "..."}, or the bare string.
local function path_arg(args, optional)
  if type(args) == "string" then return args end
  args_table(args)
  local p = args.path
  if p == nil and optional then return "" end
  if type(p) ~= "string" then fail("args.path must be a string, got " .. type(p)) end
  return p
end

local WORKSPACE_OPTS = { write = true, max_bytes = true, max_entries = true, mkdirs = true }

--- workspace(root, {write = false, max_bytes = "1M", max_entries = 10000, mkdirs = true})
--- -> { ["fs.read"], ["fs.write"], ["fs.list"], ["fs.stat"], ["fs.remove"] }
--- Every path is resolved beneath root by the kernel (openat2 RESOLVE_BENEATH |
--- RESOLVE_NO_MAGICLINKS): `..`, absolute paths, symlinks leading out (even
--- swapped in mid-call), /proc magic links, NUL bytes, paths over 4095 bytes
--- or components over 255 are refused; only regular files and directories are
--- opened. Writes are atomic (temporary file in the same directory, fsync,
--- rename: a symlink at the name is replaced, never written through) and create
--- missing parent directories unless mkdirs = false. write defaults to false.
---   fs.read{path} -> string          fs.write{path, data} -> true
---   fs.list{path = ""} -> sorted names   fs.stat{path} -> {type = "file"|"dir", size} or nil
---   fs.remove{path} -> true (a file or an empty directory)
function M.workspace(root, opts)
  if type(root) ~= "string" or root == "" then error("workspace: root must be a directory path", 2) end
  opts = options(opts, WORKSPACE_OPTS, "workspace")
  local write = opts.write == true
  local max_bytes = size_opt(opts, "max_bytes", 1 << 20, "workspace")
  local max_entries = count_opt(opts, "max_entries", 10000, "workspace", 1e7)
  local mkdirs = opts.mkdirs ~= false
  root = host_dir(root, "workspace: root")

  local function read_only() refuse("read-only workspace") end
  return {
    ["fs.read"] = function(args)
      local p = path_arg(args)
      local data, code, why = core.fs_read(root, p, max_bytes)
      if not data then fs_error(code, why, p, max_bytes) end
      return data
    end,
    ["fs.write"] = function(args)
      if not write then read_only() end
      args_table(args)
      local p, data = args.path, args.data
      if type(p) ~= "string" then fail("args.path must be a string, got " .. type(p)) end
      if type(data) ~= "string" then fail("args.data must be a string, got " .. type(data)) end
      if #data > max_bytes then fail(sfmt("args.data is larger than the workspace's max_bytes (%d)", max_bytes)) end
      local ok, code, why = core.fs_write(root, p, data, mkdirs)
      if not ok then fs_error(code, why, p, max_bytes) end
      return true
    end,
    ["fs.list"] = function(args)
      local p = args == nil and "" or path_arg(args, true)
      local names, code, why = core.fs_list(root, p, max_entries)
      if not names then fs_error(code, why, p, max_entries) end
      table.sort(names)
      return names
    end,
    ["fs.stat"] = function(args)
      local p = path_arg(args)
      local s, code, why = core.fs_stat(root, p)
      if s == false then return nil end
      if not s then fs_error(code, why, p) end
      return { type = s.type, size = s.size }
    end,
    ["fs.remove"] = function(args)
      if not write then read_only() end
      local p = path_arg(args)
      local ok, code, why = core.fs_remove(root, p)
      if not ok then fs_error(code, why, p) end
      return true
    end,
  }
end


return M
