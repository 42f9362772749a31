-- airlock.egress -- network for a program (tool.network), through one egress
-- proxy per run: airlock-egress (egress/main.c), a confined program of its
-- own beside the run, started on the same broker. The program's net
-- namespace is its own and empty but for its loopback, where the spawner
-- listens on 127.0.0.1:PORT and hands the listener to the parent, which hands
-- it to the proxy (HTTP_PROXY and the others point there). The proxy holds no
-- authority: it asks these handlers about every connection, by name first
-- (nothing is resolved for a name the policy refuses), then by the addresses
-- the name resolved to (it connects to the one address named in the answer,
-- so a name cannot resolve again to another), and reports how it ended.
-- Every attempt is a record in result.network; every refusal a violation
-- (result.violations) naming the field that would allow it; both go to the
-- run's ledger when it is recorded.
local core = require "airlock.core"
local network = require "airlock.policy.network"
local program = require "airlock.program"
local confine = require "airlock.confine"
local grants = require "airlock.policy.grants"

local M = {}

-- Where the program reaches its proxy, and whether a policy grants any
-- network: airlock.policy.network's (the planner reads them there too).
M.PORT = network.PORT
M.configured = network.configured
M.env = network.env
M.MAX_RECORDS = 256    -- kept in the result (the ledger has them all)

-- The airlock-egress program beside the worker (as airlock-init is).
local function proxy_program()
  local w = os.getenv("AIRLOCK_WORKER") or core.worker_path()
  local dir = w and w:match("^(.*)/[^/]+$")
  return dir and core.fs_realpath(dir .. "/airlock-egress")
end

local function quoted(s) return string.format("%q", s) end

-- ------------------------------------------------------------ decisions

local function hostport(host, port)
  return (host:find(":", 1, true) and ("[" .. host .. "]") or host) .. ":" .. port
end

-- The name check: true, rule; or false, reason, rule (the field that would allow it).
local function decide_name(net, a, ctx)
  local host, port = a.host, a.port
  local hp = hostport(host, port)
  for pat in pairs(net.inject or {}) do
    if network.matches(pat, host, port) and a.kind == "connect" then
      return false, string.format("tool.network.inject[%s] adds a credential to plain-HTTP requests to %s; " ..
        "a CONNECT tunnel (https) would carry them without it, so the proxy refuses it (use http://, " ..
        "or drop the inject rule)", quoted(pat), hp), "tool.network.inject"
    end
  end
  local i, pat = network.denied(net.deny, host, port)
  if i then
    return false, string.format("tool.network.deny[%d] (%s) refuses %s", i, quoted(pat), hp), "tool.network.deny"
  end
  i, pat = network.first(net.allow, host, port)
  if i then return true, string.format("tool.network.allow[%d] (%s)", i, quoted(pat)) end
  if net.connect then
    local ok, v, why = pcall(net.connect, { host = host, port = port, kind = a.kind, method = a.method }, ctx)
    if ok and v == true then return true, "tool.network.connect" end
    local reason = not ok and (core.denial(v) or tostring(v)) or why or "tool.network.connect refused it"
    return false, string.format("%s: %s", hp, reason), "tool.network.connect"
  end
  local literal = network.address(host) and " (an address is allowed only when a pattern names it)" or ""
  return false, string.format("no pattern of tool.network.allow names %s%s; add %s to tool.network.allow",
    hp, literal, quoted(hp)), "tool.network.allow"
end

-- The address check: the first address that may be reached, or nil, reason.
local function decide_address(net, host, port, addrs)
  local why
  for _, text in ipairs(addrs) do
    local addr = network.canonical(text)
    if addr then
      local i, pat = network.denied(net.deny, addr, port)
      local special = network.special(addr)
      if i then
        why = why or string.format("%s resolves to %s, which tool.network.deny[%d] (%s) refuses", host, addr, i,
          quoted(pat))
      elseif special and not network.first(net.allow, addr, port) then
        why = why or string.format("%s resolves to %s (%s), which is reached only when tool.network.allow " ..
          "names the address itself: add %s", host, addr, special, quoted(hostport(addr, port)))
      else
        return addr
      end
    end
  end
  return nil, why or string.format("%s resolved to no address", host)
end

-- ------------------------------------------------------------ the proxy's run

-- The proxy's confinement: its own user, pid, ipc, uts, mount and cgroup
-- namespaces (the host's network: it connects out), the system read-only
-- (its resolver reads /etc), nothing writable, TCP connect to the ports the
-- policy's patterns name (and 53, the resolver's), no privileges.
local function proxy_plan(path, ports)
  local function existing(list)
    local out = {}
    for _, p in ipairs(list) do if core.fs_realpath(p) then out[#out + 1] = p end end
    return out
  end
  local connect = { 53 }
  for _, p in ipairs(ports) do if p ~= 53 then connect[#connect + 1] = p end end
  local paths = grants.of_landlock({ read = existing { "/etc", "/usr", "/lib", "/lib64", "/dev/null" },
    write = { "/dev/null" }, exec = existing { "/usr", "/lib", "/lib64", path } }, "the egress proxy")
  return confine.plan {
    role = "program",
    confine = {
      namespaces = { "user", "pid", "ipc", "uts", "mount", "cgroup" },
      rlimits = { core = 0, nofile = 256, as = 1024 * 1024 * 1024, fsize = 1024 * 1024 },
      no_new_privs = true,
      landlock = { connect = connect, scope = true },
      seccomp = { promises = { "stdio", "rpath", "inet", "dns", "exec" }, refuse = "errno" },
    },
    grants = paths, limits = { pids = 0 }, tmp = "none", root = program.is_root(),
  }
end

--- start(b, run, opts) -> the egress state, or nil, message, cause: starts
--- the proxy for a program's run (started with the plan's egress_port) and
--- closes the run's own copy of the listener. opts: { policy (frozen), t0
--- (ms), recorder (the program's run's, or nil), secrets (values) }.
function M.start(b, run, opts)
  local net = opts.policy.tool.network
  local path = proxy_program()
  if not path then
    return nil, "exec: airlock-egress is missing beside the worker; rebuild or reinstall airlock " ..
      "(make build, make install)", "exec"
  end
  local fd = run:_egress_fd()
  if not fd then return nil, "exec: the run has no egress listener (tool.network)", "exec" end
  local plan, perr = proxy_plan(path, network.ports(net.allow))
  if not plan then
    run:_egress_close()
    return nil, perr, "confinement"
  end
  local st = { network = {}, violations = {}, total = 0, conns = {}, t0 = opts.t0 or core.now_ms(),
               recorder = opts.recorder, program = run }
  local ctx = { run = run:id(), policy = opts.policy.name }

  local function record(kind, fields)
    local rec = st.recorder
    if not rec then return true end
    return rec:append(kind, fields)
  end
  local function refuse(c, reason, rule)
    c.decision, c.reason, c.rule = "deny", reason, rule
    local v = { kind = "network", what = c.what, rule = rule, reason = reason,
                at = math.floor(core.now_ms() - st.t0) }
    if #st.violations < M.MAX_RECORDS then st.violations[#st.violations + 1] = v end
    st.violations_total = (st.violations_total or 0) + 1
    record("violation", { violation = v.kind, what = v.what, rule = rule, reason = reason, at = v.at,
                          host = c.host, port = c.port, address = c.address, conn = c.conn })
    core.deny(reason)
  end

  local handlers = {}
  handlers["egress.open"] = function(a)
    if type(a) ~= "table" or math.type(a.conn) ~= "integer" then error("egress.open: bad arguments", 0) end
    local c = { conn = a.conn, at = math.floor(core.now_ms() - st.t0) }
    st.total = st.total + 1
    if #st.network < M.MAX_RECORDS then st.network[#st.network + 1] = c end
    st.conns[a.conn] = c
    if a.error then
      c.what = "a request the proxy could not take: " .. tostring(a.error)
      return refuse(c, tostring(a.error), "the egress proxy's bounds (docs/TOOLS.md, \"Network\")")
    end
    if type(a.host) ~= "string" or math.type(a.port) ~= "integer" then error("egress.open: bad arguments", 0) end
    c.host, c.port, c.kind, c.method = a.host, a.port, a.kind, a.method
    c.what = a.kind == "connect" and ("CONNECT " .. hostport(a.host, a.port))
      or string.format("%s http://%s/", tostring(a.method), hostport(a.host, a.port))
    local ok, why, rule = decide_name(net, a, ctx)
    if not ok then return refuse(c, why, rule) end
    c.rule = why
    return { resolve = true }
  end
  handlers["egress.resolved"] = function(a)
    local c = type(a) == "table" and st.conns[a.conn]
    if not c or c.decision then error("egress.resolved: no such connection", 0) end
    if a.error or type(a.addrs) ~= "table" then
      c.decision, c.error = "error", tostring(a.error or "no address")
      record("net", { conn = c.conn, host = c.host, port = c.port, via = c.kind, decision = "error",
                      error = c.error })
      error(c.error, 0)
    end
    c.addresses = {}
    for i, s in ipairs(a.addrs) do if type(s) == "string" and i <= 8 then c.addresses[#c.addresses + 1] = s end end
    local addr, why = decide_address(net, c.host, c.port, c.addresses)
    if not addr then return refuse(c, why, "tool.network.allow") end
    c.address, c.decision = addr, "allow"
    -- Recorded before the proxy connects: a connection the ledger cannot
    -- admit is not made (fail closed).
    local ok, lerr = record("net", { conn = c.conn, host = c.host, port = c.port, via = c.kind,
                                     method = c.method, address = addr, decision = "allow", rule = c.rule })
    if not ok then
      c.decision, c.reason = "deny", "ledger: " .. tostring(lerr)
      core.deny("the ledger could not record the connection, so it is not made")
    end
    local headers
    if c.kind == "http" then
      for pat, inj in pairs(net.inject or {}) do
        if network.matches(pat, c.host, c.port) then
          local v = opts.secrets and opts.secrets[inj.secret]
          if not v then
            c.decision = "deny"
            core.deny(string.format("tool.network.inject[%s] names the secret '%s', which the policy's " ..
              "secrets section does not hold", quoted(pat), inj.secret))
          end
          headers = headers or {}
          headers[inj.header] = (inj.prefix or "") .. v
          c.injected = c.injected or {}
          c.injected[#c.injected + 1] = inj.header
        end
      end
    end
    return { addr = addr, headers = headers }
  end
  handlers["egress.close"] = function(a)
    local c = type(a) == "table" and st.conns[a.conn]
    if not c then return true end
    st.conns[a.conn] = nil
    c.bytes_up, c.bytes_down = math.tointeger(a.up) or 0, math.tointeger(a.down) or 0
    c.ms = type(a.ms) == "number" and math.floor(a.ms * 1000 + 0.5) / 1000 or nil
    if a.error and c.decision == "allow" then c.error = tostring(a.error) end
    if c.decision == "allow" then
      record("net.end", { conn = c.conn, up = c.bytes_up, down = c.bytes_down, ms = c.ms, error = c.error })
    end
    return true
  end

  local start = { argv = { "airlock-egress" }, path = path, program = true, channel = true, handlers = handlers,
                  ctx = {}, stdin_fd = fd, env = {}, capture_max = 64 * 1024 }
  for k, v in pairs(plan.start) do start[k] = v end
  local prun, err = b:_start(start)
  -- The proxy holds its own copy now (or failed to start): ours goes, so a
  -- proxy that dies makes the program's connections fail at once.
  run:_egress_close()
  if not prun then return nil, "exec: cannot start the egress proxy: " .. tostring(err), "confinement" end
  st.run, st.plan = prun, plan
  return st
end

--- finish(st, b, results) -> the proxy's result: ends the proxy (the
--- program's run is over) and steps the broker until it has ended.
--- results: a list of results already stepped out, where its may be.
function M.finish(st, b)
  if not st.result then
    if st.run:live() then st.run:cancel() end
    while not st.result do
      local done = b:step(-1)
      if not done then break end
      for _, r in ipairs(done) do if r.run == st.run:id() then st.result = r end end
    end
  end
  return st.result
end

--- report(st, res): result.network, result.violations (the network's first).
function M.report(st, res)
  res.network = st.network
  res.network_total = st.total
  local v = res.violations or {}
  for _, x in ipairs(st.violations) do v[#v + 1] = x end
  res.violations = v
  if st.result and st.result.cause ~= "cancelled" and st.result.cause ~= "ok" then
    res.egress = { cause = st.result.cause, message = st.result.message, stderr = st.result.stderr }
  end
end

return M
