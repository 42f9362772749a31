-- airlock.launch.run_handlers -- the handlers step of a start: the effects a
-- run has (the built-ins, then its policy's), their answers redacted, and the
-- sink that tells of a handler that failed on a note.
local secrets = require "airlock.secrets"
local init_map = require "airlock.launch.init_map"

local M = {}

--- builtin(record, limits) -> the built-in effects every run has unless its
--- policy refuses them with false: log (collected into the record), clock.now
--- and clock.cpu.
function M.builtin(st, limits)
  local max = limits.output or init_map.OUTPUT_DEFAULT
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
    -- os.clock: the worker's own CPU time, which the kernel counts and the
    -- parent reads from outside (never a number the child reports). Recorded
    -- like every answer, so a replay sees the same clock.
    ["clock.cpu"] = function(_, ctx)
      local s, err = ctx.handle:cpu_time()
      if not s then error(err, 0) end
      return s
    end,
  }
end

--- names(handlers) -> the effect names, sorted.
function M.names(handlers)
  local names = {}
  for name in pairs(handlers) do names[#names + 1] = name end
  table.sort(names)
  return names
end

--- of(record, the run's policy) -> handlers (the built-ins, then the
--- policy's effects; answers redacted), and the built-in log handler; or
--- nil, message when the policy's notify names an effect it does not grant.
function M.of(st, rp)
  local handlers = M.builtin(st, rp.limits)
  local collect_log = handlers.log
  for k, v in pairs(rp.policy.effects or {}) do handlers[k] = v or nil end
  -- Notifications: each must be an effect the run has.
  for _, name in ipairs(rp.policy.notify or {}) do
    if not handlers[name] then
      return nil, string.format("policy: notify names '%s', which the policy does not grant " ..
        "(effects[\"%s\"])", name, name)
    end
  end
  -- What a handler answers reaches the guest with every secret redacted.
  if rp.redact then
    for k, h in pairs(handlers) do handlers[k] = secrets.guard(h, rp.redact) end
  end
  return handlers, collect_log
end

--- note_error_sink(record) -> ctx.on_note_error: a handler that failed on a
--- note is told in the result (note_errors, the first 16, a line each).
function M.note_error_sink(st)
  return function(effect, msg)
    st.note_errors = st.note_errors or {}
    if #st.note_errors < 16 then
      st.note_errors[#st.note_errors + 1] = string.format("%s: %s", effect, tostring(msg):match("^[^\n]*"))
    end
  end
end

return M
