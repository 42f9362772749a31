-- write_if_changed.lua -- the generators' one way to write a file: rewritten
-- only when its text changes, so make does not rebuild what depends on it.
-- Usage (from a generator in tools/): local write_if_changed = dofile("tools/write_if_changed.lua")
return function(path, text)
  local f = io.open(path, "rb")
  local old = f and f:read("a")
  if f then f:close() end
  if old ~= text then
    f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
  end
end
