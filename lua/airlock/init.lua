-- airlock -- the public Lua module: runs and brokers on top of airlock.core.
-- The C core spawns, relays frames and dispatches calls; the launch package
-- (lua/airlock/launch/) turns a policy and a guest into what the core needs,
-- and results into tables. This file only exports: the API table, assembled
-- from the modules (requiring them installs the broker's and runs' methods).
local core = require "airlock.core"
local policy = require "airlock.policy"
local ledger = require "airlock.ledger"
local exec = require "airlock.exec"
local broker = require "airlock.launch.broker"
local process = require "airlock.launch.process"
require "airlock.launch.pool"   -- b:warm, b:pooled
require "airlock.launch.step"   -- b:step, run:reply, run:fail, run:wait

local M = {
  policy = policy,
  causes = core.causes,
  defer = core.defer,
  protocol_version = core.protocol_version,
  _VERSION = "airlock 0.1",
}

M.broker = core.broker

--- airlock.probe() -> what this kernel and privilege level can enforce (see
--- airlock.probe for the fields); `airlock probe` prints it.
--- (Loaded on first use, like replay, resume and branch: a host that never
--- calls them, and the command's exec, do not pay for loading them.)
function M.probe() return require("airlock.probe").report() end

M.run = broker.run
function M.replay(...) return require("airlock.launch.journal").replay(...) end
function M.resume(...) return require("airlock.launch.journal").resume(...) end
function M.branch(...) return require("airlock.launch.journal").branch(...) end

--- airlock.handlers: ready-made effect handlers (workspace, kv, clock, random,
--- log, modules, http, deny); see lua/airlock/handlers/ (one file per family). Loaded on first
--- use (an optional dependency: most hosts never touch it).
M.handlers = setmetatable({}, { __index = function(t, k)
  local mod = require "airlock.handlers"   -- optional: loaded on first use
  setmetatable(t, { __index = mod })
  return mod[k]
end })

M.ledger = ledger

--- airlock.confine(spec) -> { landlock = "applied: ...", seccomp = "applied: ..." }, or
--- nil, message, errno: confines the calling process for good (it and its future
--- children). spec = { landlock = { read = {paths}, write = {paths}, exec = {paths},
--- bind = {ports}, connect = {ports}, scope = true }, seccomp = { promises = "stdio rpath",
--- syscalls = {names}, mode = "allow" | "deny", refuse = "kill" | "EPERM" | ... },
--- no_new_privs = true }. Call it while single-threaded.
M.confine = core.confine

--- airlock.spawn{...} -> process: a plain program, started confined (airlock.launch.process).
M.spawn = process.spawn

--- airlock.exec{argv = {...}, policy = "tool", workspace = dir, ...} -> result:
--- a program run confined by the policy's tool authority (airlock.exec).
function M.exec(opts) return exec.exec(opts) end

return M
