-- airlock.handlers -- ready-made effect handlers for policies.
--
-- Each constructor returns a handler(args, ctx), or a table of them when it
-- serves several effects. args always come from the untrusted guest: every
-- field is checked for type and size, and a bad call raises an error the guest
-- sees as "handler for 'fs.read' failed: ...". A refusal on security grounds
-- is a denial (airlock.core.deny(reason), what refuse does here): the guest
-- sees "denied: reason"; other failures (a missing file, a full store) say
-- what went wrong.
--
--   local handlers = require "airlock.handlers"
--   effects = handlers.merge(
--     handlers.workspace("saves/", { write = true }),            -- fs.read, fs.write, fs.list, fs.stat, fs.remove
--     handlers.kv { dir = "state/" },                            -- kv.get, kv.put, kv.delete, kv.list
--     handlers.random(),                                         -- random.bytes, random.int
--     { ["clock.now"] = handlers.clock { mode = "virtual" },
--       ["module.load"] = handlers.modules("mods/"),
--       ["http.request"] = handlers.http { allow = { "api.example.com" } },
--       ["world.nuke"] = handlers.deny("not in this game") })
--
-- A table of handlers can also be the whole effects field
-- (effects = handlers.workspace(...)); merge refuses an effect given twice.
--
-- One file per family beside this one (workspace, kv with its value codec
-- kv_codec, clock, random, log, modules, http; common holds what they share);
-- this module is the public table.
local common = require "airlock.handlers.common"

local refuse = common.refuse
local sfmt = string.format

local M = {}

M._state = common.state

-- ------------------------------------------------------------------ deny

local decisions = setmetatable({}, { __mode = "k" })

--- deny(reason) -> a handler that refuses every call with "denied: <reason>".
function M.deny(reason)
  if reason ~= nil and type(reason) ~= "string" then error("deny: reason must be a string", 2) end
  reason = reason or "refused by the policy"
  local h = function() refuse(reason) end
  decisions[h] = { decision = "deny", reason = reason }
  return h
end

--- refuse(reason): from inside a handler, refuses the call: raises a denial
--- (airlock.core.deny), which the broker reads by its type: the guest gets
--- "denied: <reason>" and a run it ends is cause denied. An error whose text
--- merely starts with "denied: " is a failure like any other.
M.refuse = refuse

--- decision(handler) -> "deny", reason for a handler made by deny(), else nil.
--- (A ledger recorder can record such calls as decision "deny" without running them.)
function M.decision(h)
  local d = decisions[h]
  if d then return d.decision, d.reason end
  return nil
end

-- ------------------------------------------------------------------ merge

--- merge(t1, t2, ...) -> one table of effect handlers; an effect named twice is an error.
function M.merge(...)
  local out = {}
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if t ~= nil then
      if type(t) ~= "table" then error(sfmt("merge: argument %d must be a table of handlers", i), 2) end
      for k, v in pairs(t) do
        if type(k) ~= "string" then error(sfmt("merge: argument %d has a non-string effect name", i), 2) end
        if out[k] ~= nil then error(sfmt("merge: effect '%s' is given twice", k), 2) end
        out[k] = v
      end
    end
  end
  return out
end

M.workspace = require("airlock.handlers.workspace").workspace
M.kv = require("airlock.handlers.kv").kv
M.clock = require("airlock.handlers.clock").clock
M.random = require("airlock.handlers.random").random
M.log = require("airlock.handlers.log").log
M.modules = require("airlock.handlers.modules").modules
local http = require "airlock.handlers.http"
M.http = http.http
M._http_in_flight = http._http_in_flight   -- not API: how many of a broker's requests are in flight (for specs)

return M
