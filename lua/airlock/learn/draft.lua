-- airlock.learn.draft -- a learning run's observations -> the smallest tool
-- policy that covers them, as the text of a policy file:
-- policy.extend("tool", {tool = {grant = ..., network = ...}}), each grant
-- commented with the first path that needed it. Pure: the caller gives what
-- was seen and how to look at the host (stat), so it is tested on tables.
--
-- The rules, in order, for each path seen (first record wins for "why"):
--   * already covered by the base policy (its Landlock paths, the workspace,
--     /tmp, /proc, airlock's own programs): nothing to grant;
--   * missing on the host: counted as looked for, never granted;
--   * a secret (keys, tokens, credentials) or a file in a home directory:
--     written as a commented-out grant with a warning, never granted;
--   * run ('x'): its directory in grant.exec;
--   * written, made or removed ('w', 'd'): the file itself when it existed,
--     else its directory, in grant.write;
--   * read or looked at ('r', 's'): its group in grant.read: /etc/FILE alone,
--     /etc/DIR, /var/lib/DIR, /var/cache/DIR, /usr/local/DIR, /opt/DIR,
--     /srv/DIR, /sys/DIR, else the file's own directory; a group holding a
--     secret is granted file by file instead.
-- A path that is only a strict ancestor of something covered or granted
-- (a stat of /var on the way to /var/lib/apt) needs nothing of its own.
local M = {}

-- Home directories, and the patterns that make a path a secret, with the
-- word the warning uses.
local HOME_ROOTS = { "/root", "/home" }
local SECRETS = {
  { "/%.ssh/", "ssh keys" }, { "/%.ssh$", "ssh keys" }, { "/%.gnupg/", "GnuPG keys" }, { "/%.gnupg$", "GnuPG keys" },
  { "/%.aws/", "cloud credentials" }, { "/%.aws$", "cloud credentials" }, { "/%.azure/", "cloud credentials" },
  { "/%.config/gcloud/", "cloud credentials" }, { "/%.kube/", "cluster credentials" },
  { "/%.docker/config%.json$", "registry credentials" }, { "/%.netrc$", "passwords (.netrc)" },
  { "/%.git%-credentials$", "git credentials" }, { "/%.npmrc$", "a registry token (.npmrc)" },
  { "/%.pypirc$", "a registry token (.pypirc)" }, { "%.pem$", "a key or certificate (.pem)" },
  { "%.key$", "a private key (.key)" }, { "/id_[%w_]+$", "an ssh key" }, { "[Tt]oken", "a token" },
  { "[Ss]ecret", "a secret" }, { "/etc/shadow", "password hashes" }, { "/etc/gshadow", "password hashes" },
  { "/private/", "private keys" }, { "/%.password%-store/", "passwords" },
}

local function beneath(p, root)
  return p == root or (p:sub(1, #root) == root and (root:sub(-1) == "/" or p:sub(#root + 1, #root + 1) == "/"))
end

--- secret(path) -> what kind of secret the path looks like, or nil.
function M.secret(path)
  for _, s in ipairs(SECRETS) do if path:find(s[1]) then return s[2] end end
  return nil
end

--- home(path, homes) -> true when the path lies in a home directory.
function M.home(path, homes)
  for _, h in ipairs(homes or HOME_ROOTS) do if beneath(path, h) then return true end end
  return false
end

local function dir_of(p) return p:match("^(.*)/[^/]*$") or "/" end
local function parts(p) local t = {} for c in p:gmatch("[^/]+") do t[#t + 1] = c end return t end

-- The group a read path is granted by: a package's directory where the
-- file system has them (/etc/DIR, /opt/DIR, /var/lib/DIR ...), else nil (the
-- path's own directory, chosen by the caller, which can tell files from
-- directories).
local TOP2 = { etc = true, opt = true, srv = true, sys = true, snap = true, nix = true }
local VAR3 = { lib = true, cache = true, log = true, spool = true }
local function group(p)
  local c = parts(p)
  local depth
  if TOP2[c[1]] then depth = 2
  elseif (c[1] == "var" and VAR3[c[2]]) or (c[1] == "usr" and c[2] == "local") then depth = 3
  else return nil end
  if #c <= depth then return p end
  return "/" .. table.concat(c, "/", 1, depth)
end

--- records(observed) -> records {kind, view, path} from result.observed.
function M.records(observed)
  local out = {}
  for line in (observed or ""):gmatch("[^\n]+") do
    local k, v, p = line:match("^([rwxsd])([%+%-%?]) (/.*)$")
    if k then out[#out + 1] = { kind = k, view = v, path = p } end
  end
  return out
end

--- plan(seen, ctx) -> the draft as data: {read, write, exec = {{path, why, flag}...},
--- flagged = {...}, missing = n, network = {{pattern, why}...}, refused = {...}}.
--- seen: {records = {kind, view, path}..., network = result.network, refused = result.refused}
--- ctx: covered = {paths}, stat = function(path) -> "dir" | "file" | nil, homes = {dirs}
function M.plan(seen, ctx)
  local stat, covered = ctx.stat, ctx.covered or {}
  local function is_covered(p)
    for _, c in ipairs(covered) do if beneath(p, c) then return true end end
    return false
  end
  local d = { read = {}, write = {}, exec = {}, flagged = {}, missing = 0, missing_paths = {}, network = {},
              refused = {} }
  local by = { read = {}, write = {}, exec = {} }
  local flagged_at = {}
  local secret_groups = {}
  local wanted = {}   -- read groups in order: {group, first path}
  local function add(list, path, why)
    if by[list][path] then return end
    by[list][path] = true
    d[list][#d[list] + 1] = { path = path, why = why }
  end
  local function flag(path, why, what)
    if flagged_at[path] then return end
    flagged_at[path] = true
    d.flagged[#d.flagged + 1] = { path = path, why = why, what = what }
  end
  local KIND = { r = "read", w = "written", x = "run", s = "looked up", d = "made or removed" }
  local candidates = {}
  for _, r in ipairs(seen.records or {}) do
    local p = r.path
    if not is_covered(p) then
      local t = stat(p)
      local why = string.format("%s (%s)", p, KIND[r.kind])
      if t == nil and r.kind ~= "d" and r.kind ~= "w" then
        if not d.missing_paths[p] then d.missing_paths[p] = true; d.missing = d.missing + 1 end
      else
        local s = M.secret(p)
        if s then
          flag(p, why, s)
          secret_groups[group(p) or dir_of(p)] = true
        elseif M.home(p, ctx.homes) then
          flag(p, why, "a home-directory file")
        else
          candidates[#candidates + 1] = { r = r, t = t, why = why }
        end
      end
    end
  end
  for _, c in ipairs(candidates) do
    local r, p = c.r, c.r.path
    if r.kind == "x" then
      add("exec", dir_of(p), c.why)
    elseif r.kind == "w" or r.kind == "d" then
      local target = (c.t and r.kind == "w") and p or dir_of(p)
      if not is_covered(target) then
        if stat(target) then add("write", target, c.why) end
      end
    else
      wanted[#wanted + 1] = { p = p, why = c.why }
    end
  end
  -- Grants that another grant holds, and ancestors of what is covered or granted, go.
  local function held(p, self_list)
    for _, list in ipairs { "exec", "write" } do
      for _, g in ipairs(d[list]) do
        if beneath(p, g.path) and not (list == self_list and g.path == p) then return true end
      end
    end
    return false
  end
  local function ancestor(p)
    if p == "/" then return true end
    local pre = p .. "/"
    for _, c in ipairs(covered) do if c:sub(1, #pre) == pre then return true end end
    for _, list in ipairs { "exec", "write" } do
      for _, g in ipairs(d[list]) do if g.path:sub(1, #pre) == pre then return true end end
    end
    for _, w in ipairs(wanted) do if w.p:sub(1, #pre) == pre then return true end end
    return false
  end
  for _, w in ipairs(wanted) do
    if not held(w.p) and not (stat(w.p) == "dir" and ancestor(w.p)) then
      local g = group(w.p) or (stat(w.p) == "dir" and w.p or dir_of(w.p))
      if secret_groups[g] or is_covered(g) or stat(g) == nil then g = w.p end
      add("read", g, w.why)
    end
  end
  -- a read grant beneath another read grant goes
  local keep = {}
  for _, g in ipairs(d.read) do
    local inner = held(g.path)
    for _, o in ipairs(d.read) do if o ~= g and beneath(g.path, o.path) and o.path ~= g.path then inner = true end end
    if not inner then keep[#keep + 1] = g end
  end
  d.read = keep
  local seen_net = {}
  for _, c in ipairs(seen.network or {}) do
    if c.host and c.port then
      local host = c.host:find(":", 1, true) and ("[" .. c.host .. "]") or c.host
      local pat = host .. ":" .. c.port
      if not seen_net[pat] then
        seen_net[pat] = true
        d.network[#d.network + 1] = { pattern = pat, why = c.what or pat, port = c.port,
                                      refused = c.decision == "deny" }
      end
    end
  end
  for _, r in ipairs(seen.refused or {}) do d.refused[#d.refused + 1] = r end
  return d
end

local function quote(s) return string.format("%q", s) end

--- text(d, about) -> the policy file: about = {argv, base ("tool")}; d.effects
--- (optional) = {{effect, n, denied}...}, the effects the program asked for
--- with `airlock call`: each the base refused is a commented-out line (no
--- draft can write its handler).
function M.text(d, about)
  local o = {}
  local function w(...) o[#o + 1] = table.concat({ ... }) end
  w("-- A draft policy from one learning run (airlock exec --learn) of:")
  w("--   ", (table.concat(about.argv or {}, " "):gsub("\n", " ")))
  w("-- Each grant names the first path that needed it. Lines starting \"-- NOT GRANTED\"")
  w("-- are secrets or home-directory files the program touched: grant one only if the")
  w("-- program must have it. Check the draft with: airlock exec --policy THIS_FILE -- PROGRAM ...")
  if d.missing > 0 then
    w(string.format("-- %d paths the program looked for did not exist on the host; none is granted.", d.missing))
  end
  for _, r in ipairs(d.refused) do
    local n = r.count or 1
    w(string.format("-- The program called %s, which tool.confine.seccomp refuses (%s, %s); " ..
      "the draft cannot grant it.", r.syscall, r.errno, n == 1 and "once" or (n .. " times")))
  end
  w("local policy = require \"airlock.policy\"")
  w("")
  w("return policy.extend(", quote(about.base or "tool"), ", {")
  w("  name = \"draft\",")
  w("  tool = {")
  w("    grant = {")
  for _, list in ipairs { "read", "write", "exec" } do
    w("      ", list, " = {")
    for _, g in ipairs(d[list]) do w("        ", quote(g.path), ",   -- why: first needed by ", g.why) end
    if list == "read" then
      for _, f in ipairs(d.flagged) do
        w("        -- NOT GRANTED (", f.what, "): ", quote(f.path), ",   -- first needed by ", f.why)
      end
    end
    w("      },")
  end
  w("    },")
  if #d.network > 0 then
    w("    network = {")
    w("      allow = {")
    for _, n in ipairs(d.network) do w("        ", quote(n.pattern), ",   -- why: first needed by ", n.why) end
    w("      },")
    w("    },")
  end
  w("  },")
  local asked = {}
  for _, c in ipairs(d.effects or {}) do if c.denied > 0 then asked[#asked + 1] = c end end
  if #asked > 0 then
    w("  effects = {")
    for _, c in ipairs(asked) do
      w(string.format("    -- NOT GRANTED: [%q] = <a handler>,   -- the program asked for it %s (airlock call); " ..
        "the base policy does not grant it", c.effect, c.n == 1 and "once" or (c.n .. " times")))
    end
    w("  },")
  end
  w("})")
  return table.concat(o, "\n") .. "\n"
end

return M
