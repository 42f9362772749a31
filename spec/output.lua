-- spec/output.lua -- busted's utfTerminal output, then one line per skipped
-- case: "skipped: FILE:LINE: NAME -- REASON", and one per failed or erroring
-- case: "failed: FILE:LINE: NAME -- FIRST LINE OF THE MESSAGE". A skip is pending("reason")
-- inside the case, said when a control finds the machine lacks what the case
-- needs; spec/run gathers these lines, and counts a skip without a reason as
-- a failure (a case that skips without saying why is a defect). With
-- AIRLOCK_SPEC_NOW set, each case's "FILE:LINE: NAME" is written to that file
-- as it starts, so spec/run can name the case a suite was stopped in.
return function(options)
  local busted = require("busted")
  local handler = require("busted.outputHandlers.utfTerminal")(options)
  local subscribe = handler.subscribe
  function handler:subscribe(opts)
    subscribe(self, opts)
    local now = os.getenv("AIRLOCK_SPEC_NOW")
    if now and now ~= "" then
      busted.subscribe({ "test", "start" }, function(element)
        local f = io.open(now, "w")
        if f then
          local t = element.trace
          f:write(string.format("%s:%s: %s\n", t and t.short_src or "?", t and tostring(t.currentline) or "?",
            handler.getFullName(element)))
          f:close()
        end
        return nil, true
      end)
    end
    busted.subscribe({ "suite", "end" }, function()
      for _, p in ipairs(handler.pendings) do
        local where = p.trace and (p.trace.short_src .. ":" .. tostring(p.trace.currentline)) or "?"
        local reason = type(p.message) == "string" and p.message or ""
        reason = reason:gsub("^[^\n:]+:%d+: ", ""):gsub("%s*\n%s*", " ")
        if reason == "" then reason = "(no reason given)" end
        io.write(string.format("skipped: %s: %s -- %s\n", where, p.name, reason))
      end
      for _, list in ipairs({ handler.failures, handler.errors }) do
        for _, f in ipairs(list) do
          local where = f.trace and (f.trace.short_src .. ":" .. tostring(f.trace.currentline)) or "?"
          local msg = type(f.message) == "string" and f.message or tostring(f.message)
          msg = (msg:match("[^\n]*[^%s\n][^\n]*") or ""):gsub("^%s+", "")
          io.write(string.format("failed: %s: %s -- %s\n", where, f.name or "?", msg:sub(1, 300)))
        end
      end
      io.flush()
      return nil, true
    end)
  end
  return handler
end
