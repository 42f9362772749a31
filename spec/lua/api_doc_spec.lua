-- api_doc_spec.lua -- every ```lua block of docs/API.md runs, so the reference's
-- examples cannot rot. Each block runs in its own lua5.4 process (some confine
-- the process they run in, for good) with package.cpath at the build under test
-- (H.build) and `airlock` already required; a block checks its own results
-- with assert, and fails the test by raising an error.
local H = require "helper"

local DOC = "docs/API.md"

-- The ```lua blocks of the document, each with the line it starts on and the
-- nearest heading above it.
local function blocks(text)
  local out, n, heading, cur = {}, 0, "(top)", nil
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if cur then
      if line:match("^```%s*$") then
        out[#out + 1] = cur
        cur = nil
      else
        cur.lines[#cur.lines + 1] = line
      end
    elseif line:match("^```lua%s*$") then
      cur = { line = n + 1, heading = heading, lines = {} }
    else
      heading = line:match("^#+%s+(.-)%s*$") or heading
    end
  end
  assert(cur == nil, DOC .. ": a ```lua block is not closed")
  return out
end

local function run_block(b)
  local path = os.tmpname() .. ".lua"
  local f = assert(io.open(path, "w"))
  -- Line numbers in errors point into docs/API.md: the prelude is one line and
  -- the block is padded to start where it starts in the document.
  f:write(string.format("package.cpath = %q .. package.cpath; airlock = require 'airlock'",
    H.build .. "/lib/?.so;"))
  f:write(string.rep("\n", b.line - 1))
  f:write(table.concat(b.lines, "\n"), "\n")
  f:close()
  local p = io.popen("lua5.4 " .. path .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("a")
  p:close()
  os.remove(path)
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  return rc, out:gsub("rc=%d+\n$", "")
end

local text = assert(H.slurp(DOC), "cannot read " .. DOC)
local all = blocks(text)

describe("docs/API.md", function()
  it("has an example for every public function", function()
    assert.is_true(#all >= 30, "only " .. #all .. " lua examples")
    local src = {}
    for _, b in ipairs(all) do src[#src + 1] = table.concat(b.lines, "\n") end
    src = table.concat(src, "\n")
    for _, name in ipairs {
      "airlock.run", "airlock.broker", ":start", ":step", ":reload", ":close", ":reply", ":fail",
      ":cancel", ":abort", ":id", ":pid", ":live", ":result", ":wait", "airlock.defer",
      "policy.new", "policy.load", "policy.extend", "policy.append", "policy.remove",
      "policy.digest", "policy.authority", "airlock.confine", "airlock.spawn", ":kill",
      "airlock.probe", "airlock.replay", "airlock.resume", "airlock.branch", "ledger.open",
      "ledger.records", "ledger.verify", "ledger.head", "ledger.show", "ledger.branch",
      "handlers.workspace", "handlers.kv", "handlers.clock", "handlers.random", "handlers.log",
      "handlers.modules", "handlers.http", "handlers.deny", "handlers.merge", "airlock.causes", ":nest",
      "policy.default", "policy.reference", "notify", ":pooled", "policy.ceilings",
    } do
      -- (examples may name the handlers table h)
      local alias = name:match("^handlers(%..*)") and "h" .. name:match("^handlers(%..*)")
      assert.is_truthy(src:find(name, 1, true) or (alias and src:find(alias .. "(", 1, true)),
        "no example uses " .. name)
    end
  end)

  for _, b in ipairs(all) do
    it(string.format("example at line %d (%s) runs", b.line, b.heading), function()
      local rc, out = run_block(b)
      assert(rc == 0, string.format("%s:%d (%s) failed (exit %s):\n%s", DOC, b.line, b.heading,
        tostring(rc), out))
    end)
  end
end)
