-- readme_spec.lua -- the README's shell examples, run, and their output
-- compared with what the README shows, in shape: numbers that vary (times,
-- counts, random paths) become N or DIR, "..." in a sample stands for
-- anything, and rows printed in the order runs end are compared as a set.
-- The examples: `make demo` (its plugin-host game: the bots' final table),
-- `plugin-host --replay`, `airlock demo`, and the one-guest `airlock run`s.
local H = require "helper"
require "airlock"
local core = require "airlock.core"

local BIN = core.fs_realpath(H.bin)
local README = H.read("README.md")

-- Each "$ command" of a ```sh block, with the lines the README shows after it.
local function examples()
  local out = {}
  for block in README:gmatch("```sh\n(.-)```") do
    local cur
    for line in block:gmatch("([^\n]*)\n") do
      local cmd = line:match("^%$ (.*)$")
      if cmd then
        cur = { cmd = cmd:gsub("%s+#.*$", ""), expect = {} }
        out[#out + 1] = cur
      elseif cur then
        cur.expect[#cur.expect + 1] = line
      end
    end
  end
  return out
end

local function find(list, prefix)
  for _, e in ipairs(list) do if e.cmd:sub(1, #prefix) == prefix then return e end end
  error("the README has no example starting with '" .. prefix .. "'")
end

-- A line in shape: temporary paths, then (unless exact) numbers, then runs of blanks.
local function shape(line, exact)
  line = line:gsub("/tmp/[%w._%-/]+", "DIR")
  if not exact then line = line:gsub("%d+%.?%d*", "N") end
  return (line:gsub("%s+", " "):gsub("%s+$", ""))
end

-- A README sample line as a pattern for an output line: "..." matches anything.
local function matches(sample, line, exact)
  local pat = "^" .. shape(sample, exact):gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"):gsub("%%%.%%%.%%%.", ".-") .. "$"
  return shape(line, exact):match(pat) ~= nil
end

local function lines(text)
  local t = {}
  for l in text:gmatch("([^\n]*)\n") do t[#t + 1] = l end
  return t
end

local EX = examples()

describe("the README's examples", function()
  local dir
  before_each(function() dir = H.tmpdir() end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("airlock run: the one-guest examples print what the README shows", function()
    local ran = 0
    for _, e in ipairs(EX) do
      if e.cmd:match("^echo ") or e.cmd:match("^build/bin/airlock run ") then
        local out = H.sh("cd " .. dir .. " && " .. e.cmd:gsub("^build/bin/", BIN .. "/"))
        local got = lines(out)
        assert.are.equal(#e.expect, #got, e.cmd .. "\n" .. out)
        for i, want in ipairs(e.expect) do
          assert.is_true(matches(want, got[i], true), string.format("%s\nline %d: README shows\n  %s\nthe command printed\n  %s",
            e.cmd, i, want, tostring(got[i])))
        end
        ran = ran + 1
      end
    end
    assert.is_true(ran >= 3)
  end)

  it("airlock demo: one row per guest, each with the README's cause and message", function()
    local e = find(EX, "build/bin/airlock demo")
    local got = lines((H.sh(BIN .. "/airlock demo")))
    assert.are.equal(e.expect[1], got[1])   -- the header
    local function rows(list)
      local t = {}
      for i = 2, #list do
        local name, cause, msg = list[i]:match("^(%S+)%s+(%S+)%s+[%d.]+%s+(.*)$")
        if name then t[name] = cause .. " | " .. msg end
      end
      return t
    end
    assert.are.same(rows(e.expect), rows(got))
  end)

  it("make demo's game: the bots end as the README's table shows; plugin-host --replay says what it shows", function()
    local e = find(EX, "make demo")
    local out = H.sh(BIN .. "/plugin-host --ticks 30 --fps 20 --plain --ledgers " .. dir)
    local function table_rows(list)
      local t, on = {}, false
      for _, l in ipairs(list) do
        if l:match("^bot%s+cause") then on = true
        elseif on and l:match("^%S+%s+%a+%s+%d") then
          local name, cause = l:match("^(%S+)%s+(%S+)")
          t[name] = cause
        elseif on and l == "" then on = false end
      end
      return t
    end
    local want = table_rows(e.expect)
    assert.is_true(next(want) ~= nil, "the README's demo has no bot table")
    assert.are.same(want, table_rows(lines(out)))
    -- The replay example, on this game's ledgers.
    local r = find(EX, "build/bin/plugin-host --replay")
    local rep = lines((H.sh(BIN .. "/plugin-host --replay magpie --ledgers " .. dir)))
    assert.are.equal(#r.expect, #rep, table.concat(rep, "\n"))
    for i, w in ipairs(r.expect) do
      assert.is_true(matches(w, rep[i]), string.format("line %d: README shows\n  %s\nplugin-host printed\n  %s", i, w, rep[i]))
    end
  end)
end)
