-- spec/output.lua -- busted's utfTerminal output, then one line per skipped
-- case: "skipped: FILE:LINE: NAME -- REASON". A skip is pending("reason")
-- inside the case, said when a control finds the machine lacks what the case
-- needs; spec/run gathers these lines, and counts a skip without a reason as
-- a failure (a case that skips without saying why is a defect).
return function(options)
  local busted = require("busted")
  local handler = require("busted.outputHandlers.utfTerminal")(options)
  local subscribe = handler.subscribe
  function handler:subscribe(opts)
    subscribe(self, opts)
    busted.subscribe({ "suite", "end" }, function()
      for _, p in ipairs(handler.pendings) do
        local where = p.trace and (p.trace.short_src .. ":" .. tostring(p.trace.currentline)) or "?"
        local reason = type(p.message) == "string" and p.message or ""
        reason = reason:gsub("^[^\n:]+:%d+: ", ""):gsub("%s*\n%s*", " ")
        if reason == "" then reason = "(no reason given)" end
        io.write(string.format("skipped: %s: %s -- %s\n", where, p.name, reason))
      end
      io.flush()
      return nil, true
    end)
  end
  return handler
end
