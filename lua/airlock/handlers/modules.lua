-- airlock.handlers.modules -- module.load, the source of the guest's
-- require(name) from directories of the host's.
local core = require "airlock.core"
local common = require "airlock.handlers.common"

local fail, refuse, show, options = common.fail, common.refuse, common.show, common.options
local size_opt, args_table, host_dir, fs_error = common.size_opt, common.args_table, common.host_dir, common.fs_error
local sfmt = string.format

local M = {}

local MODULES_OPTS = { max_bytes = true }

--- modules(path or {paths...}, {max_bytes = "256K"}) -> a handler for module.load,
--- answering {source = text} for the guest's require(name): name is
--- [%w_]+ components separated by dots (dots are directories), looked up as
--- name.lua then name/init.lua under each path, resolved like the workspace.
--- Binary chunks (first byte 0x1b) and files over max_bytes are refused.
function M.modules(paths, opts)
  if type(paths) == "string" then paths = { paths } end
  if type(paths) ~= "table" or #paths == 0 then error("modules: expects a directory path or a list of them", 2) end
  opts = options(opts, MODULES_OPTS, "modules")
  local max = size_opt(opts, "max_bytes", 256 << 10, "modules")
  local roots = {}
  for i, p in ipairs(paths) do
    if type(p) ~= "string" or p == "" then error("modules: paths must be strings", 2) end
    roots[i] = host_dir(p, "modules: path")
  end
  return function(args)
    args_table(args)
    local name = args.name
    if type(name) ~= "string" then fail("args.name must be a string") end
    if #name == 0 or #name > 200 then refuse("module name must be 1 to 200 bytes") end
    for comp in (name .. "."):gmatch("([^.]*)%.") do
      if not comp:match("^[%w_]+$") then refuse("module name " .. show(name) .. " is not [%w_]+ parts joined by dots") end
    end
    local base = name:gsub("%.", "/")
    for _, root in ipairs(roots) do
      for _, rel in ipairs { base .. ".lua", base .. "/init.lua" } do
        local src, code, why = core.fs_read(root, rel, max)
        if src then
          if src:byte(1) == 27 then refuse("module " .. show(name) .. " is a binary chunk") end
          return { source = src }
        end
        if code ~= "not_found" and code ~= "not_dir" then
          if code == "too_large" then fail(sfmt("module %s is larger than %d bytes", show(name), max)) end
          fs_error(code, why, rel, max)
        end
      end
    end
    fail("module " .. show(name) .. " not found")
  end
end

return M
