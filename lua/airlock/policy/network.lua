-- airlock.policy.network -- host patterns of tool.network (allow, deny,
-- inject) and the address ranges a name may not resolve to unless the
-- address itself is named. Pure functions: the schema validates with them,
-- the egress proxy's handlers (airlock.egress) match with them.
--
-- A pattern is host[:port]: a DNS name ("pypi.org", "localhost"), a wildcard
-- "*.NAME" with at least two labels after the star ("*.pythonhosted.org";
-- never "*.com" or "*"), an IPv4 literal ("127.0.0.1") or an IPv6 literal in
-- brackets ("[::1]"). Without a port, an allow or inject pattern stands for
-- ports 80 and 443, and a deny pattern for every port (denying a host is
-- meant whole: deny = {"bad.example"} beside allow = {"*.example:8080"} keeps
-- bad.example:8080 out). A wildcard matches names below NAME, not NAME
-- itself, and never an address. A URL is not a pattern: the message says
-- which host to write.
local M = {}

M.DEFAULT_PORTS = { 80, 443 }

-- Where a program reaches its run's egress proxy (airlock.egress): this port
-- on its own loopback.
M.PORT = 3128

--- configured(net) -> true when a policy's tool.network grants anything.
function M.configured(net)
  if not net then return false end
  return (net.allow and #net.allow > 0) or net.connect ~= nil
end

--- env(port) -> the proxy variables a program is given (both spellings).
function M.env(port)
  local url = "http://127.0.0.1:" .. (port or M.PORT)
  local env = {}
  for _, k in ipairs { "http_proxy", "https_proxy", "all_proxy" } do
    env[k], env[k:upper()] = url, url
  end
  env.no_proxy, env.NO_PROXY = "", ""
  return env
end

local function ipv4(s)
  local a, b, c, d = s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if not a then return nil end
  local out = {}
  for i, x in ipairs { a, b, c, d } do
    if #x > 3 or (#x > 1 and x:sub(1, 1) == "0") then return nil end
    local n = tonumber(x)
    if n > 255 then return nil end
    out[i] = n
  end
  return out
end

-- An IPv6 literal -> its 8 groups (numbers), or nil. An embedded IPv4 tail
-- ("::ffff:10.0.0.1") becomes its two groups.
local function ipv6(s)
  if not s:match("^[%x:.]+$") or #s > 45 then return nil end
  local tail = s:match(":(%d+%.%d+%.%d+%.%d+)$")
  if tail then
    local v4 = ipv4(tail)
    if not v4 then return nil end
    s = s:sub(1, #s - #tail) .. string.format("%x:%x", v4[1] * 256 + v4[2], v4[3] * 256 + v4[4])
  end
  local head, rest = s:match("^(.-)::(.*)$")
  local function groups(part)
    local g = {}
    if part == "" then return g end
    for x in (part .. ":"):gmatch("([^:]*):") do
      if x == "" or #x > 4 then return nil end
      g[#g + 1] = tonumber(x, 16)
    end
    return g
  end
  local out
  if head then
    if rest:find("::", 1, true) then return nil end
    local h, r = groups(head), groups(rest)
    if not h or not r or #h + #r > 7 then return nil end
    out = {}
    for _, x in ipairs(h) do out[#out + 1] = x end
    for _ = 1, 8 - #h - #r do out[#out + 1] = 0 end
    for _, x in ipairs(r) do out[#out + 1] = x end
  else
    out = groups(s)
    if not out or #out ~= 8 then return nil end
  end
  return out
end

--- address(text) -> "v4", {a, b, c, d} | "v6", {8 groups} | nil: an IP literal.
function M.address(s)
  if type(s) ~= "string" then return nil end
  local v4 = ipv4(s)
  if v4 then return "v4", v4 end
  local v6 = ipv6(s)
  if v6 then return "v6", v6 end
  return nil
end

--- canonical(text) -> the one spelling of an address (IPv6 lower-case, every
--- group, so "::1" and "0:0::1" are one), or nil.
function M.canonical(s)
  local kind, p = M.address(s)
  if kind == "v4" then return table.concat(p, ".") end
  if kind == "v6" then
    local g = {}
    for i, x in ipairs(p) do g[i] = string.format("%x", x) end
    return table.concat(g, ":")
  end
end

--- special(address) -> the name of the range an address lies in when it is
--- not a public unicast one (loopback, private, link-local, ...), or nil.
function M.special(s)
  local kind, p = M.address(s)
  if kind == "v4" then
    local a, b = p[1], p[2]
    if a == 127 then return "loopback" end
    if a == 10 or (a == 172 and b >= 16 and b <= 31) or (a == 192 and b == 168) then return "private" end
    if a == 169 and b == 254 then return "link-local" end
    if a == 100 and b >= 64 and b <= 127 then return "shared (carrier-grade NAT)" end
    if a == 0 then return "this network (0.0.0.0/8)" end
    if a >= 224 then return "multicast or reserved" end
    if a == 192 and b == 0 and p[3] == 0 then return "IETF protocol assignments" end
    if (a == 198 and (b == 18 or b == 19)) then return "benchmarking" end
    return nil
  elseif kind == "v6" then
    local allzero = true
    for i = 1, 7 do if p[i] ~= 0 then allzero = false end end
    if allzero and (p[8] == 1) then return "loopback" end
    if allzero and p[8] == 0 then return "unspecified" end
    -- IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible: the IPv4 address decides.
    if p[1] == 0 and p[2] == 0 and p[3] == 0 and p[4] == 0 and p[5] == 0 and (p[6] == 0xffff or p[6] == 0) then
      local v4 = string.format("%d.%d.%d.%d", p[7] >> 8, p[7] & 255, p[8] >> 8, p[8] & 255)
      return M.special(v4) or (p[6] == 0 and "IPv4-compatible" or nil)
    end
    if p[1] & 0xffc0 == 0xfe80 then return "link-local" end
    if p[1] & 0xfe00 == 0xfc00 then return "private (unique local)" end
    if p[1] & 0xff00 == 0xff00 then return "multicast" end
    if p[1] == 0x64 and p[2] == 0xff9b then return "NAT64" end
    if p[1] == 0x2001 and p[2] == 0xdb8 then return "documentation" end
    if p[1] == 0x2002 then return "6to4" end
    return nil
  end
  return "not an address"
end

local function dns_name(s)
  if #s == 0 or #s > 253 then return nil end
  for label in (s .. "."):gmatch("([^.]*)%.") do
    if #label == 0 or #label > 63 or not label:match("^[%w%-]+$") or label:sub(1, 1) == "-" or label:sub(-1) == "-" then
      return nil
    end
  end
  return true
end

--- parse(text, opts) -> { host, wildcard (bool), address (canonical, for an
--- IP literal), port (nil: the default ports) }, or nil, why. opts.no_port:
--- a port is refused (inject's keys name hosts of plain-HTTP requests...).
function M.parse(s)
  if type(s) ~= "string" then return nil, "a host pattern must be a string" end
  local t = s:lower()
  local scheme, rest = t:match("^(%a[%w+.-]*)://([^/?#]*)")
  if scheme then
    local hint = rest ~= "" and rest:gsub("^[^@]*@", "") or "the host"
    return nil, string.format("'%s' is a URL; a pattern names a host and, if need be, a port: write %q", s, hint)
  end
  if t:find("[/?#]") then
    return nil, string.format("'%s' has a path; a pattern names a host and, if need be, a port: write %q", s,
      (t:match("^([^/?#]*)")))
  end
  local host, port = t, nil
  local v6, p6 = t:match("^%[([%x:.]+)%]:?(%d*)$")
  if v6 then
    host, port = v6, p6 ~= "" and p6 or nil
    if not M.address(host) then return nil, string.format("'%s' is not an IPv6 address", v6) end
  else
    local h, p = t:match("^([^:]+):(%d+)$")
    if h then host, port = h, p end
    if host:find(":", 1, true) then
      return nil, "an IPv6 address goes in brackets, with the port after them: \"[::1]:8080\""
    end
  end
  if port then
    port = tonumber(port)
    if not port or port < 1 or port > 65535 or port ~= math.floor(port) then
      return nil, string.format("'%s': the port must be 1 to 65535", s)
    end
    port = math.tointeger(port)
  end
  host = host:gsub("%.$", "")
  local out = { port = port }
  if M.address(host) then
    out.address = M.canonical(host)
    out.host = out.address
    return out
  end
  if host:match("^%d+[%d.]*$") then return nil, string.format("'%s' is neither a name nor an IPv4 address", s) end
  local rest = host:match("^%*%.(.+)$")
  if rest then
    if not dns_name(rest) then return nil, string.format("'%s': '%s' is not a host name", s, rest) end
    if not rest:find(".", 1, true) then
      return nil, string.format("'%s' would match every name under a top-level domain; name the domain " ..
        "(\"*.example.%s\")", s, rest)
    end
    out.wildcard, out.host = true, rest
    return out
  end
  if host:find("*", 1, true) then
    return nil, string.format("'%s': a wildcard is a leading \"*.\" before a domain (\"*.example.org\")", s)
  end
  if not dns_name(host) then return nil, string.format("'%s' is not a host name, an IPv4 address or [IPv6]", s) end
  out.host = host
  return out
end

--- The canonical spelling of a pattern (what the policy keeps).
function M.spell(p)
  local h = p.address and p.address:find(":", 1, true) and ("[" .. p.address .. "]") or
    ((p.wildcard and "*." or "") .. p.host)
  return p.port and (h .. ":" .. p.port) or h
end

--- The schema rule of a pattern list: a string or a list of strings.
function M.patterns(v)
  if type(v) == "string" then v = { v } end
  if type(v) ~= "table" then return nil, "a list of host patterns like {\"pypi.org\", \"*.pythonhosted.org:443\"}" end
  local out, seen = {}, {}
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  if n ~= #v then return nil, "a list of host patterns like {\"pypi.org\", \"*.pythonhosted.org:443\"}" end
  for i, s in ipairs(v) do
    local p, why = M.parse(s)
    if not p then return nil, "a list of host patterns", string.format("item %d: %s", i, why) end
    local c = M.spell(p)
    if not seen[c] then seen[c] = true; out[#out + 1] = c end
  end
  return out
end

--- The schema rule of one pattern (inject's keys).
function M.pattern(s)
  local p, why = M.parse(s)
  if not p then return nil, why end
  return true
end

local function port_ok(p, port, every_port)
  if p.port then return p.port == port end
  if every_port then return true end
  for _, d in ipairs(M.DEFAULT_PORTS) do if d == port then return true end end
  return false
end

--- matches(pattern text, host, port[, every_port]) -> true when the pattern
--- names host (lower-case, no trailing dot; an address in canonical form) at
--- port. every_port: a pattern without a port names every port (deny's).
function M.matches(pat, host, port, every_port)
  local p = type(pat) == "table" and pat or M.parse(pat)
  if not p or not port_ok(p, port, every_port) then return false end
  -- "localhost" and the loopback addresses are one host, whichever is written.
  if p.address then return M.canonical(host) == p.address or host == "localhost" and M.special(p.address) == "loopback" end
  if M.address(host) then   -- a name pattern never matches an address, but localhost its loopback
    return p.host == "localhost" and not p.wildcard and M.special(host) == "loopback"
  end
  if p.wildcard then return #host > #p.host + 1 and host:sub(-(#p.host + 1)) == "." .. p.host end
  return host == p.host
end

--- first(list, host, port[, every_port]) -> index, pattern of the first that
--- matches (M.matches), or nil.
function M.first(list, host, port, every_port)
  for i, s in ipairs(list or {}) do
    if M.matches(s, host, port, every_port) then return i, s end
  end
end

--- denied(deny list, host, port) -> index, pattern of the first deny pattern
--- naming host at port (one without a port names every port), or nil.
function M.denied(list, host, port) return M.first(list, host, port, true) end

--- ports(list) -> the sorted ports a list of patterns may reach (the
--- default ports for one without a port).
function M.ports(list)
  local set, out = {}, {}
  for _, s in ipairs(list or {}) do
    local p = M.parse(s)
    if p then
      if p.port then set[p.port] = true else for _, d in ipairs(M.DEFAULT_PORTS) do set[d] = true end end
    end
  end
  for k in pairs(set) do out[#out + 1] = k end
  table.sort(out)
  return out
end

return M
