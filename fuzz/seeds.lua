-- fuzz/seeds.lua -- writes the seed corpora for the fuzz targets, generated
-- here rather than downloaded: valid protocol frames of every kind (and a few
-- near misses), msgpack values of every type, and a real journal recorded by
-- the airlock command.   usage: lua5.4 fuzz/seeds.lua OUTDIR [AIRLOCK]
local out, airlock = arg[1], arg[2] or "build/bin/airlock"
assert(out, "usage: lua5.4 fuzz/seeds.lua OUTDIR [AIRLOCK]")

-- A small msgpack encoder: enough for seeds (nil, booleans, integers, floats,
-- strings, arrays as {n = k, ...}, maps with sorted keys).
local function mp(v)
  local t = type(v)
  if v == nil then return "\xc0" end
  if t == "boolean" then return v and "\xc3" or "\xc2" end
  if math.type(v) == "integer" then
    if v >= 0 and v < 128 then return string.char(v) end
    if v < 0 and v >= -32 then return string.pack("b", v) end
    return "\xd3" .. string.pack(">i8", v)
  end
  if t == "number" then return "\xcb" .. string.pack(">d", v) end
  if t == "string" then
    if #v < 32 then return string.char(0xa0 + #v) .. v end
    return "\xdb" .. string.pack(">I4", #v) .. v
  end
  if v.n then   -- array
    local parts = { "\xdd" .. string.pack(">I4", v.n) }
    for i = 1, v.n do parts[#parts + 1] = mp(v[i]) end
    return table.concat(parts)
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = { "\xdf" .. string.pack(">I4", #keys) }
  for _, k in ipairs(keys) do parts[#parts + 1] = mp(k) .. mp(v[k]) end
  return table.concat(parts)
end

local function frame(body) return string.pack(">I4", #body) .. body end

local function write(dir, name, bytes)
  os.execute("mkdir -p '" .. dir .. "'")
  local f = assert(io.open(dir .. "/" .. name, "wb"))
  f:write(bytes)
  f:close()
end

local messages = {
  ready = { t = "ready", v = 1, confined = { seccomp = "applied: x", landlock = "applied: y" } },
  call = { t = "call", id = 1, effect = "fs.read", args = { path = "a.txt" } },
  call_deep = { t = "call", id = 2, effect = "e", args = { a = { b = { c = { d = { n = 3, 1, 2, 3 } } } } } },
  reply_ok = { t = "reply", id = 1, ok = { data = "hello", half = 1.5 } },
  reply_err = { t = "reply", id = 1, err = "nope", code = "denied" },
  done_ok = { t = "done", ok = { value = -7 } },
  done_err = { t = "done", err = { message = "boom", traceback = "x", cause = "error" } },
  pause = { t = "pause", prompt = "name?" },
  init = { t = "init", v = 1, run = 1, guest = { name = "g", source = "return 1" }, seed = 42,
           limits = { memory = 1048576 }, effects = { n = 2, "log", "clock.now" } },
  bad_kind = { t = "nope" },
  bad_id = { t = "call", id = -1, effect = "x" },
}
for name, m in pairs(messages) do
  write(out .. "/codec", name, mp(m))
  write(out .. "/convert", name, mp(m))
  -- frames: one per seed, and a stream of several, with a chunking byte first
  write(out .. "/frame", name, "\0" .. frame(mp(m)))
end
write(out .. "/frame", "stream", "\7" .. frame(mp(messages.ready)) .. frame(mp(messages.call)) ..
  frame(mp(messages.reply_ok)) .. frame(mp(messages.done_ok)))
write(out .. "/frame", "huge_header", "\1\255\255\255\255")
write(out .. "/convert", "types", mp({ n = 8, true, false, 1, -1, 2 ^ 53, "\xff\xfe", 0.5, { k = "v" } }))
-- A C host's input (codec_fuzz's second half): what a Lua value cannot be.
write(out .. "/codec", "input_nil_key", "\x81\xc0\x01")
write(out .. "/codec", "input_nan_key", "\x81\xcb\x7f\xf8\0\0\0\0\0\0\x01")
write(out .. "/codec", "input_ext", "\x92\x01\xd4\x01\x00")

-- A real journal: a recorded run with a few effects and a pause.
local tmp = os.tmpname()
os.remove(tmp)
local guest = tmp .. ".lua"
local f = assert(io.open(guest, "w"))
f:write([[print("a") local t = os.time() print("b") local x = host.input("?") return t]])
f:close()
os.execute(string.format("'%s' run '%s' --ledger '%s' >/dev/null 2>&1", airlock, guest, tmp))
local j = io.open(tmp .. "/journal", "rb")
if j then
  local bytes = j:read("a")
  j:close()
  write(out .. "/ledger", "journal", bytes)
  write(out .. "/ledger", "torn", bytes:sub(1, #bytes - 7))
else
  io.stderr:write("fuzz/seeds.lua: could not record a journal with ", airlock, "; ledger seeds skipped\n")
end
os.execute(string.format("rm -rf '%s' '%s'", tmp, guest))
