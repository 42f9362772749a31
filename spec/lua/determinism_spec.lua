-- determinism_spec.lua -- a recorded guest replays exactly, whatever it does
-- with addresses and hashes: pairs order, tostring of tables and functions,
-- finalizers, the collector's count. Each guest of the corpus is recorded by
-- `airlock run --ledger` and replayed five times by `airlock replay`, each in
-- a fresh process with another environment and working directory, three of
-- them from a copy of the session directory; every
-- replay must be identical, with no live effect. The control run keeps
-- address randomisation (AIRLOCK_TEST_ASLR=1) and must diverge.
local H = require "helper"
require "airlock"
local core = require "airlock.core"

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")

local CORPUS = {
  pairs_strings = [[local t = {} for i = 1, 60 do t["k" .. i] = i end
    local o = {} for k in pairs(t) do o[#o + 1] = k end print(table.concat(o, ","))]],
  pairs_mixed = [[local t = { 1, 2, 3, x = 1, y = 2, [true] = 3, [2.5] = 4, ["7"] = 5 }
    for k, v in pairs(t) do print(tostring(k), v) end]],
  pairs_floats = [[local t = {} for i = 1, 40 do t[i / 7] = i end
    local o = {} for k in pairs(t) do o[#o + 1] = string.format("%.3f", k) end print(table.concat(o, " "))]],
  next_loop = [[local t = { a = 1, b = 2, c = 3, d = 4, e = 5 } local k = next(t)
    while k do print(k) k = next(t, k) end]],
  tostring_table = [[print(tostring({}), tostring({}), tostring(setmetatable({}, {})))]],
  tostring_function = [[print(tostring(function() end), tostring(print), tostring(string.format))]],
  tostring_coroutine = [[print(tostring(coroutine.create(function() end)))
    print(tostring(coroutine.running()))]],
  format_p = [[print(string.format("%p %p", {}, print))]],
  gc_finalizer = [[setmetatable({}, { __gc = function() print("finalized") end })
    local keep = setmetatable({}, { __gc = function() print("kept, finalized at the end") end })
    collectgarbage() print("after collect") return keep ~= nil]],
  gc_order = [[for i = 1, 5 do setmetatable({}, { __gc = function() print("gc", i) end }) end
    collectgarbage() collectgarbage()]],
  runtime_keys = [[local t = {} for i = 1, 50 do t[string.rep("x", i % 7) .. i] = true end
    local o = {} for k in pairs(t) do o[#o + 1] = k end print(table.concat(o, ","))]],
  sort_partial = [[local t = {} for i = 1, 30 do t[i] = { n = i % 4, id = i } end
    table.sort(t, function(a, b) return a.n < b.n end)
    local o = {} for i, v in ipairs(t) do o[i] = v.id end print(table.concat(o, ","))]],
  coroutines = [[local function w(n) return coroutine.wrap(function() for i = 1, 3 do print(n, i) coroutine.yield() end end) end
    local a, b = w("a"), w("b") for _ = 1, 3 do a() b() end]],
  os_clock = [[print(os.clock() >= 0)]],
  os_clock_busy = [[local t0 = os.clock() local x = 0 for i = 1, 3e6 do x = x + i end
    local t1 = os.clock() print(t0, t1, t1 - t0, x)]],
  os_clock_loop = [[local t0, n = os.clock(), 0 while os.clock() - t0 < 0.05 do n = n + 1 end print(n, os.clock())]],
  os_time = [[print(os.time())]],
  os_date = [[print(os.date("%Y-%m-%d %H:%M:%S"))]],
  random_unseeded = [[print(math.random(), math.random(1, 100), math.random(0))]],
  random_seeded = [[math.randomseed(42) print(math.random(1, 1000), math.random())]],
  error_address = [[print(select(2, pcall(error, tostring({}))))]],
  holes = [[local t = { 1, 2, nil, 4, nil, nil, 7 } print(#t) t[20] = 1 print(#t)]],
  gc_count = [[local t = {} for i = 1, 1000 do t[i] = { i } end print(collectgarbage("count"))]],
  table_keys = [[local t = {} for i = 1, 20 do t[{}] = i end
    local o = {} for _, v in pairs(t) do o[#o + 1] = v end print(table.concat(o, ","))]],
  function_keys = [[local t = {} for i = 1, 20 do t[function() return i end] = i end
    local o = {} for _, v in pairs(t) do o[#o + 1] = v end print(table.concat(o, ","))]],
  big_table = [[local t = {} for i = 1, 2000 do t["key" .. i * 7919 % 3001] = i end
    local n, h = 0, 0 for k, v in pairs(t) do n = n + 1 h = (h * 31 + v) % 1000003 end print(n, h)]],
  nested_tostring = [[local t = { inner = {} } print(tostring(t), tostring(t.inner))]],
  weak_table = [[local w = setmetatable({}, { __mode = "k" }) for i = 1, 10 do w[{}] = i end
    collectgarbage() local n = 0 for _ in pairs(w) do n = n + 1 end print(n)]],
  utf8_keys = [[local t = {} for _, w in ipairs { "é", "ü", "日本", "ß", "ø", "ñ", "λ" } do t[w] = #w end
    for k, v in pairs(t) do print(k, v) end]],
  sparse_ints = [[local t = { [1] = 1, [2] = 2, [100] = 3, [1000] = 4, [-5] = 5, [2 ^ 40] = 6 }
    for k in pairs(t) do print(k) end]],
  gsub_address = [[print((tostring({}):gsub("%x", "#")), (tostring({}):gsub("0x", "")))]],
  error_table = [[error(setmetatable({}, { __tostring = function(s) return "boom " .. rawlen(s) end }))]],
  string_keys_effects = [[local t = { north = 1, south = 2, east = 3, west = 4, up = 5, down = 6 }
    for k in pairs(t) do print(os.time() > 0, k) end]],
  gc_step = [[local n = 0 for i = 1, 200 do local _ = { i } if collectgarbage("step", 1) then n = n + 1 end end print(n)]],
}

local function sh(cmd)
  local out, rc = H.sh(cmd)
  return out, rc
end

local function record(name, source, env)
  local dir = H.tmpdir()
  local guest = dir .. "/" .. name .. ".lua"
  H.write(guest, source)
  local out = sh((env or "") .. " " .. AIRLOCK .. " run " .. guest .. " --ledger " .. dir .. "/s")
  return dir, out
end

-- What the test run itself depends on passes the cleared environment: the
-- worker it runs (the sanitizer pass uses the release one) and ASan's options.
local KEEP = ""
for _, name in ipairs { "AIRLOCK_WORKER", "ASAN_OPTIONS" } do
  if os.getenv(name) then KEEP = KEEP .. " " .. name .. "=" .. os.getenv(name) end
end

-- Five replays, each a fresh process with another environment and cwd; the
-- last three of a copy of the session, made elsewhere.
local function replays(dir, env)
  local results = {}
  assert(os.execute("cp -r " .. dir .. "/s " .. dir .. "/copy"))
  for i = 1, 5 do
    local cwd = i % 2 == 0 and "/" or dir
    local session = i > 2 and dir .. "/copy" or dir .. "/s"
    local out, rc = sh("cd " .. cwd .. " && env -i PATH=/usr/bin:/bin HOME=/nonexistent REPLAY_ROUND=" .. i ..
      string.rep(" PAD=x", i) .. KEEP .. " " .. (env or "") .. " " .. AIRLOCK .. " replay " .. session)
    results[i] = { out = out, rc = rc }
  end
  return results
end

describe("replay of a recorded guest", function()
  local names = {}
  for name in pairs(CORPUS) do names[#names + 1] = name end
  table.sort(names)
  assert(#names >= 30, "the corpus holds " .. #names .. " guests")

  for _, name in ipairs(names) do
    it("is identical five times over in fresh processes: " .. name, function()
      local dir = record(name, CORPUS[name])
      for i, r in ipairs(replays(dir)) do
        assert.are.equal(0, r.rc, name .. ", replay " .. i .. ": " .. r.out)
        assert.matches("identical", r.out, name .. ", replay " .. i)
        assert.matches(" 0 live effects", r.out, name .. ", replay " .. i)
      end
      os.execute("rm -rf " .. dir)
    end)
  end

  it("would not be without fixed addresses (control: AIRLOCK_TEST_ASLR=1 keeps randomisation)", function()
    local env = "AIRLOCK_TEST_ASLR=1"
    local dir = record("pairs_strings", CORPUS.pairs_strings, env)
    local differ = 0
    for _, r in ipairs(replays(dir, env)) do
      if r.rc ~= 0 then differ = differ + 1 end
    end
    os.execute("rm -rf " .. dir)
    assert.is_true(differ > 0, "all five replays matched with randomised addresses")
  end)
end)
