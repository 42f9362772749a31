-- drop_local_names.lua -- a Lua 5.4 binary chunk (string.dump's) rewritten
-- without the names of local variables, everything else as it was: the
-- code, the constants, the line information (an error still says
-- file:line, a traceback still names its lines) and the upvalues' names
-- (the policy digest reads them: policy/digest.lua).
--
-- Why: loading the embedded bytecode is most of the command's start, and
-- the local names are an eighth of it by size and more by cost (each is a
-- string to intern); string.dump(f, true) would also drop the lines and
-- the upvalue names. What is lost: a runtime error in airlock's own code
-- says "attempt to index a nil value" where it said "(local 'x')", and
-- debug.getlocal names them "(temporary)".
--
-- Usage (from tools/embed.lua): dofile("tools/drop_local_names.lua")(chunk)
-- -> chunk. The format is lundump.c's for Lua 5.4; anything else is refused.
local HEADER = 4 + 1 + 1 + 6 + 3 + 8 + 8   -- signature, version, format, data, sizes, int, num

return function(s)
  assert(s:sub(1, 5) == "\27Lua\x54" and s:byte(6) == 0, "drop_local_names: not a Lua 5.4 binary chunk")
  local pos, out = 1, {}
  local function byte()
    local b = assert(s:byte(pos), "drop_local_names: truncated chunk")
    pos = pos + 1
    return b
  end
  local function size()   -- lundump.c's loadUnsigned: 7 bits a byte, the last has 0x80
    local x = 0
    repeat
      local b = byte()
      x = (x << 7) | (b & 0x7f)
    until b & 0x80 ~= 0
    return x
  end
  local function skip(n) pos = pos + n end
  local function string_() local n = size(); if n > 0 then skip(n - 1) end end
  local function keep(from) out[#out + 1] = s:sub(from, pos - 1) end
  local function func()
    local from = pos
    string_()                                   -- source
    size(); size(); skip(3)                     -- lines defined; params, vararg, stack
    skip(4 * size())                            -- code
    for _ = 1, size() do                        -- constants
      local t = byte()
      if t == 3 or t == 19 then skip(8)         -- integer, float
      elseif t == 4 or t == 20 then string_()   -- short, long string
      else assert(t == 0 or t == 1 or t == 17, "drop_local_names: constant of type " .. t) end
    end
    skip(3 * size())                            -- upvalues
    local nprotos = size()
    keep(from)
    for _ = 1, nprotos do func() end
    from = pos
    skip(size())                                -- lineinfo
    for _ = 1, size() do size(); size() end     -- abslineinfo
    keep(from)
    for _ = 1, size() do string_(); size(); size() end   -- local names: left out
    out[#out + 1] = "\x80"                      -- none
    from = pos
    for _ = 1, size() do string_() end          -- upvalue names
    keep(from)
  end
  skip(HEADER + 1)                              -- and the main function's upvalue count
  keep(1)
  func()
  assert(pos == #s + 1, "drop_local_names: bytes after the main function")
  return table.concat(out)
end
