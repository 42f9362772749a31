-- airlock -- the public Lua module: runs and brokers on top of airlock.core.
-- The C core spawns, relays frames and dispatches calls; this file turns a
-- policy and a guest into what the core needs, and results into tables.
local core = require "airlock.core"
local policy = require "airlock.policy"
local confine = require "airlock.confine"

local M = {
  policy = policy,
  causes = core.causes,
  defer = core.defer,
  protocol_version = core.protocol_version,
  _VERSION = "airlock 0.1",
}

local broker_methods, run_methods = core.broker_methods, core.run_methods
local states = setmetatable({}, { __mode = "k" })   -- broker -> serial -> per-run state

local START_KEYS = { guest = true, name = true, policy = true, input = true, seed = true, on_log = true }

-- A guest is Lua source, or the path of a .lua file.
local function load_guest(guest, name)
  if type(guest) ~= "string" then
    error("airlock: 'guest' must be Lua source or the path of a .lua file", 3)
  end
  if not guest:find("\n", 1, true) and guest:match("%.lua$") then
    local f, err = io.open(guest, "rb")
    if not f then return nil, "guest: cannot read " .. err end
    local src = f:read("a")
    f:close()
    return src, name or guest:match("([^/]+)$")
  end
  return guest, name or "guest"
end

local function resolve_policy(p)
  if p == nil then return policy.load(os.getenv("AIRLOCK_POLICY") or "untrusted") end
  if type(p) == "string" then return policy.load(p) end
  if type(p) == "table" then
    if policy.is_policy(p) then return p end
    -- A bare table is layered over the strict default, so it always has limits.
    local base, err = policy.load("untrusted")
    if not base then return nil, err end
    local ok, pol = pcall(policy.extend, base, p)
    if ok then return pol end
    return nil, pol
  end
  error("airlock: 'policy' must be a policy table, a stock policy name or a file path", 3)
end

-- Built-in effects every run has unless its policy refuses them with false.
local function builtin_handlers(st, limits)
  local max = limits.output or 65536
  return {
    log = function(args)
      local text = type(args) == "table" and args.text
      if type(text) ~= "string" then error("log: args.text must be a string", 0) end
      if st.on_log then st.on_log(text) end
      if st.log_bytes < max then
        text = text:sub(1, max - st.log_bytes)
        st.log_bytes = st.log_bytes + #text
        st.log[#st.log + 1] = text
      end
      return true
    end,
    ["clock.now"] = function()
      return { time = os.time(), clock = os.clock() }
    end,
  }
end

local function effect_list(handlers)
  local names = {}
  for name in pairs(handlers) do names[#names + 1] = name end
  table.sort(names)
  return names
end

--- b:start{guest = source_or_path, policy = table|name, input = any, name = str,
--- seed = int, on_log = function(text)} -> run, or nil, message, errno when the run cannot be
--- started (errno is the word "confinement" when a required layer cannot be applied here).
function broker_methods:start(opts)
  if type(opts) ~= "table" then error("start: expects a table {guest = ..., policy = ...}", 2) end
  for k in pairs(opts) do
    if not START_KEYS[k] then error(string.format("start: unknown option '%s'", tostring(k)), 2) end
  end
  local pol, perr = resolve_policy(opts.policy)
  if not pol then return nil, perr end
  local source, name = load_guest(opts.guest, opts.name)
  if not source then return nil, name end
  local limits = pol.limits or {}
  local argv = pol.worker and { table.unpack(pol.worker) }
  if not argv and os.getenv("AIRLOCK_WORKER") then argv = { os.getenv("AIRLOCK_WORKER") } end
  if not argv then
    local w, err, code = core.worker_path()
    if not w then return nil, err, code end
    argv = { w }
  end

  local plan, cerr = confine.plan(pol.confine)
  if not plan then return nil, cerr, "confinement" end

  local st = { log = {}, log_bytes = 0, policy = pol.name, on_log = opts.on_log, plan = plan }
  local handlers = builtin_handlers(st, limits)
  for k, v in pairs(pol.effects or {}) do handlers[k] = v or nil end

  local serial = (states[self] and states[self].n or 0) + 1
  local start = {
    argv = argv,
    init = {
      t = "init", v = core.protocol_version, run = serial,
      guest = { name = name, source = source },
      input = opts.input,
      seed = opts.seed or math.random(0, 2 ^ 31),
      limits = {
        instructions = limits.instructions or 0,
        memory = limits.memory or 0,
        output = limits.output or 65536,
      },
      effects = effect_list(handlers),
      confine = plan.init,
    },
    deadline_ms = limits.deadline_ms,
    max_frame = limits.max_frame,
    capture_max = limits.capture,
    handlers = handlers,
    ctx = { policy = pol.name },
  }
  for k, v in pairs(plan.start) do start[k] = v end
  local run, err, code = self:_start(start)
  local why = not run and start.namespaces and confine.namespace_failure(err)
  if why then
    -- No namespaces here: fall back unless the policy requires them.
    plan.layers.namespaces = "skipped: " .. why
    if plan.required.namespaces then
      return nil, "confinement: namespaces is required but skipped: " .. why, "confinement"
    end
    start.namespaces = nil
    start.init.confine.seccomp_program = nil   -- made for pid 1 of a pid namespace
    run, err, code = self:_start(start)
  end
  if not run then return nil, err, code end
  states[self] = states[self] or { n = 0 }
  states[self].n = serial
  states[self][run:id()] = st
  return run
end

--- b:step(timeout_ms) -> list of results of the runs that finished; handlers
--- for calls that arrived are run inside. timeout -1 waits, 0 polls.
function broker_methods:step(timeout)
  local done, err, code = self:_step(timeout)
  if not done then return nil, err, code end
  local per = states[self]
  for _, res in ipairs(done) do
    local st = per and per[res.run]
    if st then
      res.log = table.concat(st.log)
      res.policy = st.policy
      res.confinement = confine.report(st.plan, res.confinement)
      per[res.run] = nil
    end
  end
  return done
end

--- run:wait() -> result: steps the run's broker until this run has finished.
function run_methods:wait(b)
  while self:live() do
    local _, err = b:step(-1)
    if err then return nil, err end
  end
  return self:result()
end

M.broker = core.broker

--- airlock.probe() -> what this kernel and privilege level can enforce (see
--- airlock.probe for the fields); `airlock probe` prints it.
function M.probe() return require("airlock.probe").report() end

--- airlock.run{guest = ..., policy = ..., input = ...} -> result table, or nil,
--- message, errno when the run could not be started.
function M.run(opts)
  local b <close> = core.broker()
  local run, err, code = b:start(opts)
  if code == "confinement" then
    -- Refused before anything was spawned: a result like any other run's.
    return { ok = false, cause = "confinement", message = err, log = "", usage = {} }
  end
  if not run then return nil, err, code end
  return run:wait(b)
end

return M
