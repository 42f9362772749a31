-- airlock.policy.reference -- the policy reference (docs/POLICY.md), written
-- from the schema: every field with the value its rule takes, its default,
-- what loosens it and its one-line doc. The doc file is this text; a spec
-- compares the two, so the reference cannot drift from the schema.
local schema = require "airlock.policy.schema"
local looser = require "airlock.policy.looser"
local ceilings = require "airlock.policy.ceilings"

local M = {}

-- What a rule expects, from the rule itself (it answers nil, expected for a
-- value no rule takes).
local NOTHING = coroutine.create(function() end)   -- a thread: no rule takes one
local function expected(rule)
  local ok, val, what = pcall(rule, NOTHING, "")
  if ok and val == nil and type(what) == "string" then return what end
  return "see below"
end

local function shown(v)
  if v == nil then return "" end
  if type(v) == "string" then return '`"' .. v .. '"`' end
  if math.type(v) == "integer" and v >= 1024 and v % 1024 == 0 then
    local units, n = { "K", "M", "G" }, v
    local u = 0
    while n % 1024 == 0 and u < 3 do n, u = n // 1024, u + 1 end
    return string.format('`"%d%s"`', n, units[u])
  end
  return "`" .. tostring(v) .. "`"
end

local function cell(s) return (tostring(s or ""):gsub("|", "\\|"):gsub("\n", " ")) end

-- The "loosened by" cell of a field: its rule's words, and a budget's kind.
local function loosened_by(a)
  local words = a.looser and looser.WORDS[a.looser] or ""
  if a.budget then words = words .. (words ~= "" and "; " or "") .. "a budget (ceiling: " .. a.budget .. ")" end
  return cell(words)
end

-- The default ceilings, as the reference writes them.
local function defaults()
  local d, parts = ceilings.defaults(), {}
  for _, k in ipairs(ceilings.KINDS) do parts[#parts + 1] = k .. " " .. ceilings.shown(k, d[k] == 0 and looser.INF or d[k]) end
  return table.concat(parts, ", ")
end

-- The top level in the order a policy is usually written (tool before
-- ledger: the two share their confine fields, listed under the first).
local TOP = { name = 1, description = 2, worker = 3, unconfined = 4, locked = 5, limits = 6, effects = 7,
              notify = 8, confine = 9, secrets = 10, tool = 11, ledger = 12 }

local function sorted_keys(node)
  if node == schema.SCHEMA then
    local keys = {}
    for k in pairs(node) do if type(k) == "string" then keys[#keys + 1] = k end end
    table.sort(keys, function(a, b) return (TOP[a] or 99) < (TOP[b] or 99) or
      ((TOP[a] or 99) == (TOP[b] or 99) and a < b) end)
    return keys
  end
  local keys = {}
  for k in pairs(node) do if type(k) == "string" then keys[#keys + 1] = k end end
  table.sort(keys, function(a, b)
    if (a == "*") ~= (b == "*") then return b == "*" end
    return a < b
  end)
  return keys
end

--- The reference as Markdown text.
function M.text()
  local out = {
    "# Policy reference",
    "",
    "Every field a policy may hold, written from the schema",
    "(`lua/airlock/policy/schema.lua`; regenerate with `make docs`). *Value* is",
    "what the field takes; *default* what an absent field stands for (blank: not",
    "set, or unlimited); *loosened by* what an override of a `locked` field may",
    "not do (tightening is always allowed; a field without a rule loosens when",
    "it changes at all). `*` stands for any name. docs/CONFINEMENT.md and",
    "docs/TOOLS.md say how the layers work.",
    "",
    "A *budget* (how much a run may use, not what it can reach) says so in",
    "that column, with the ceiling of its kind: a lock on a `confine` section",
    "(isolation) does not hold it (`untrusted` locks `confine`, not its",
    "`rlimits.cpu`), a lock naming it or `limits` does; a policy may raise",
    "it past its tier's stock policy up to the host's",
    "ceiling (`airlock.policy.ceilings{...}`, the command's `--ceiling`;",
    "docs/API.md, \"Budgets and ceilings\"). The ceilings a process starts",
    "with:",
    "",
    defaults() .. ".",
  }
  local seen = {}
  local function walk(node, path)
    local about = schema.about(node) or {}
    out[#out + 1] = ""
    out[#out + 1] = "## " .. (path == "" and "top level" or "`" .. path .. "`")
    out[#out + 1] = ""
    out[#out + 1] = cell(about.doc):gsub("^%l", string.upper) .. "."
    if node[schema.LEAF] then
      out[#out + 1] = "Instead of a table: " .. cell(expected(node[schema.LEAF])) .. "."
    end
    if about.looser then out[#out + 1] = "Loosened by " .. loosened_by(about) .. "." end
    out[#out + 1] = ""
    out[#out + 1] = "| field | value | default | loosened by | |"
    out[#out + 1] = "|---|---|---|---|---|"
    local maps = {}
    for _, k in ipairs(sorted_keys(node)) do
      local child = node[k]
      local p = path == "" and k or path .. "." .. k
      local a = schema.about(child) or {}
      if type(child) == "table" then
        local again = seen[child]
        out[#out + 1] = string.format("| `%s` | %s | %s | %s | %s |", p,
          (child[schema.LEAF] and cell(expected(child[schema.LEAF])) .. ", or " or "") ..
            (again and ("the fields of `" .. again .. "`") or "a table (below)"), shown(a.default),
          loosened_by(a), cell(a.doc))
        if not again then seen[child] = p; maps[#maps + 1] = { child, p } end
      else
        out[#out + 1] = string.format("| `%s` | %s | %s | %s | %s |", p, cell(expected(child)),
          shown(a.default), loosened_by(a), cell(a.doc))
      end
    end
    for _, m in ipairs(maps) do walk(m[1], m[2]) end
  end
  seen[schema.SCHEMA] = "the policy"
  walk(schema.SCHEMA, "")
  return table.concat(out, "\n") .. "\n"
end

return M
