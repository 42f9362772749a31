-- module_graph_spec.lua -- the Lua module graph stays layered: every
-- lua/airlock/**/*.lua is read, its requires found (those at the top level of
-- the file, and any inside a function body), and the graph checked: no cycle
-- among top-level requires, no require inside a function body but the
-- optional dependencies named below, no module reaching back up into the
-- launch package past its layer (lua/airlock/launch/start.lua's header),
-- and none of the old back-references (airlock._internal, nest.bind).

-- Requires allowed inside a function body: optional dependencies, loaded
-- when first used, each with why. (pcall(require, NAME) is optional by its
-- form and is not counted.)
local OPTIONAL = {
  -- What `airlock exec` never uses is loaded on first use: each module
  -- loaded is part of every command's start.
  ["airlock.init"] = { ["airlock.handlers"] = "airlock.handlers, loaded on first use of airlock.handlers",
                       ["airlock.probe"] = "airlock.probe(), loaded when called",
                       ["airlock.launch.journal"] = "replay, resume and branch, loaded when called" },
  ["airlock.cli.main"] = {
    -- The command's subcommands: each loaded when the command line names it.
    ["airlock.cli.repl"] = "subcommand", ["airlock.cli.bench"] = "subcommand",
    ["airlock.cli.bench_exec"] = "subcommand", ["airlock.cli.bench_scale"] = "subcommand",
    ["airlock.cli.bench_net"] = "subcommand", ["airlock.cli.bench_guest"] = "subcommand",
    ["airlock.cli.exec"] = "subcommand", ["airlock.cli.demo"] = "subcommand", ["airlock.cli.ledger"] = "subcommand",
    ["airlock.learn.cli"] = "learn mode, loaded when run --learn is given",
    ["airlock.probe"] = "the probe subcommand",
  },
  ["airlock.cli.bench"] = { ["airlock.cli.bench_guest"] = "the guest benchmark, run when asked" },
  -- `airlock exec` reads its options with the command's own parser, whose
  -- module loads this one when it is named.
  ["airlock.cli.exec"] = { ["airlock.cli.main"] = "the command's option parser (main loads this module)",
                         ["airlock.learn.cli"] = "learn mode, loaded when --learn is given" },
}

-- The launch package's layers (a module requires only lower ones), and the
-- layer of each module outside it that requires into it.
local LAYER = {
  ["airlock.launch.fields"] = 0,
  ["airlock.launch.registry"] = 1, ["airlock.launch.init_map"] = 1, ["airlock.launch.spec"] = 1,
  ["airlock.nest"] = 2, ["airlock.launch.run_handlers"] = 2, ["airlock.launch.resolve"] = 2,
  ["airlock.launch.recording"] = 3, ["airlock.launch.pool"] = 3,
  ["airlock.launch.start"] = 4, ["airlock.workspace.overlay"] = 4,
  ["airlock.launch.ending"] = 5, ["airlock.launch.broker"] = 5, ["airlock.launch.journal"] = 5,
  ["airlock.launch.process"] = 5, ["airlock.exec"] = 5,
  ["airlock.launch.step"] = 6,
  ["airlock.init"] = 7,
}

-- Lua source -> tokens (names, strings, one-character operators), with
-- comments and string contents set aside and line numbers kept.
local function tokens(src)
  local toks, i, n, line = {}, 1, #src, 1
  local function skip_to(e) for _ in src:sub(i, e):gmatch("\n") do line = line + 1 end i = e + 1 end
  while i <= n do
    local c = src:sub(i, i)
    local long = src:match("^%-%-%[(=*)%[", i) or (src:match("^%[(=*)%[", i))
    if c == "\n" then
      line = line + 1; i = i + 1
    elseif src:match("^%-%-%[=*%[", i) then
      skip_to(select(2, src:find("]" .. long .. "]", i, true)) or n)
    elseif src:match("^%-%-", i) then
      i = src:find("\n", i, true) or n + 1
    elseif long then
      local e = select(2, src:find("]" .. long .. "]", i, true)) or n
      toks[#toks + 1] = { "str", src:sub(i, e), line }
      skip_to(e)
    elseif c == '"' or c == "'" then
      local j = i + 1
      while j <= n do
        local d = src:sub(j, j)
        if d == "\\" then j = j + 2 elseif d == c or d == "\n" then break else j = j + 1 end
      end
      toks[#toks + 1] = { "str", src:sub(i + 1, j - 1), line }
      i = j + 1
    elseif c:match("[%a_]") then
      local w = src:match("^[%w_]+", i)
      toks[#toks + 1] = { "name", w, line }
      i = i + #w
    else
      if c:match("%S") then toks[#toks + 1] = { "op", c, line } end
      i = i + 1
    end
  end
  return toks
end

-- Lua source -> { top = {{name, line}}, inner = {{name, line}} }: its
-- requires of a string constant, at the top level or inside a function body
-- (blocks counted by their keywords: function, if, do (while, for), repeat).
local function requires(src)
  local toks = tokens(src)
  local stack, depth, top, inner = {}, 0, {}, {}
  for k, t in ipairs(toks) do
    local prev = toks[k - 1]
    local field = prev and prev[1] == "op" and (prev[2] == "." or prev[2] == ":")
    if t[1] == "name" and not field then
      local w = t[2]
      if w == "function" then stack[#stack + 1] = "f"; depth = depth + 1
      elseif w == "if" or w == "do" then stack[#stack + 1] = "b"
      elseif w == "repeat" then stack[#stack + 1] = "r"
      elseif w == "end" or w == "until" then
        if table.remove(stack) == "f" then depth = depth - 1 end
      elseif w == "require" then
        local a, b = toks[k + 1], toks[k + 2]
        local name = a and a[1] == "str" and a[2] or a and a[2] == "(" and b and b[1] == "str" and b[2] or nil
        if name then
          local list = depth > 0 and inner or top
          list[#list + 1] = { name = name, line = t[3] }
        end
      end
    end
  end
  assert(#stack == 0, "unbalanced blocks")
  return { top = top, inner = inner }
end

local function modname(path)
  local base = assert(path:match("^lua/airlock/(.+)%.lua$"))
  return base == "init" and "airlock.init" or "airlock." .. base:gsub("/", ".")
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- Every module: name -> { path, source, top, inner }.
local MODULES = {}
local find = assert(io.popen("find lua/airlock -name '*.lua' | sort"))
for path in find:lines() do
  local src = read(path)
  local ok, r = pcall(requires, src)
  assert(ok, path .. ": " .. tostring(r))
  MODULES[modname(path)] = { path = path, source = src, top = r.top, inner = r.inner }
end
find:close()   -- reaped now: the specs after this one check that no child is left
-- "airlock" is airlock.init, as the embedded module list names it.
local function target(name) return name == "airlock" and "airlock.init" or name end

describe("the Lua module graph", function()
  it("is read from every module (and the scanner finds requires where they are)", function()
    assert.truthy(MODULES["airlock.init"] and MODULES["airlock.launch.start"] and MODULES["airlock.policy.schema"])
    local r = requires('local a = require "x"\nlocal function f() return require("y") end\n' ..
      'if z then local b = require \'w\' end\nreturn { g = function() require "v" end }')
    assert.same({ "x", "w" }, { r.top[1].name, r.top[2].name })
    assert.same({ "y", "v" }, { r.inner[1].name, r.inner[2].name })
  end)

  it("has no require inside a function body but the named optional dependencies", function()
    local bad = {}
    for name, m in pairs(MODULES) do
      for _, r in ipairs(m.inner) do
        if not (OPTIONAL[name] and OPTIONAL[name][target(r.name)]) then
          bad[#bad + 1] = string.format("%s:%d requires %s inside a function", m.path, r.line, r.name)
        end
      end
    end
    table.sort(bad)
    assert.same({}, bad)
  end)

  it("has no cycle among the modules' top-level requires", function()
    local state, path, cycles = {}, {}, {}
    local function visit(name)
      if state[name] == "done" then return end
      if state[name] == "open" then
        local from
        for i, p in ipairs(path) do if p == name then from = i end end
        cycles[#cycles + 1] = table.concat(path, " -> ", from) .. " -> " .. name
        return
      end
      local m = MODULES[name]
      if not m then return end   -- airlock.core and the like: C, requiring nothing of these
      state[name] = "open"
      path[#path + 1] = name
      for _, r in ipairs(m.top) do visit(target(r.name)) end
      path[#path] = nil
      state[name] = "done"
    end
    local names = {}
    for name in pairs(MODULES) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do visit(name) end
    assert.same({}, cycles)
  end)

  it("reaches into the launch package only downward, by its layers", function()
    local bad = {}
    for name, m in pairs(MODULES) do
      for _, list in ipairs { m.top, m.inner } do
        for _, r in ipairs(list) do
          local to = target(r.name)
          local own, theirs = LAYER[name], LAYER[to]
          if to:match("^airlock%.launch%.") then
            assert(theirs, to .. " has no layer in this spec's LAYER table")
            if not own or own <= theirs then
              bad[#bad + 1] = string.format("%s (layer %s) requires %s (layer %d)", name, tostring(own), to, theirs)
            end
          end
          if own and theirs and own <= theirs and not to:match("^airlock%.launch%.") then
            bad[#bad + 1] = string.format("%s (layer %d) requires %s (layer %d)", name, own, to, theirs)
          end
        end
      end
    end
    for name in pairs(MODULES) do
      if name:match("^airlock%.launch%.") then assert(LAYER[name], name .. " has no layer in this spec's LAYER table") end
    end
    table.sort(bad)
    assert.same({}, bad)
  end)

  -- (A module below airlock.init requiring "airlock" itself is a cycle, above.)
  it("has no back-reference into the module that loads it", function()
    local bad = {}
    for _, m in pairs(MODULES) do
      for _, pat in ipairs { "_internal", "nest%.bind" } do
        local code = m.source:gsub("%-%-[^\n]*", "")
        if code:find(pat) then bad[#bad + 1] = m.path .. ": " .. pat end
      end
    end
    table.sort(bad)
    assert.same({}, bad)
  end)

  it("keeps confine and egress apart: neither requires the other both ways", function()
    local function needs(a, b)
      for _, list in ipairs { MODULES[a].top, MODULES[a].inner } do
        for _, r in ipairs(list) do if r.name == b then return true end end
      end
      return false
    end
    assert.is_false(needs("airlock.confine", "airlock.egress"))
  end)
end)
