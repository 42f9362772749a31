-- airlock.learn.cli -- `airlock run --learn FILE GUEST.lua` (run_main,
-- airlock.learn.guest) and `airlock exec --learn FILE [--workspace DIR] [--env
-- NAME=VALUE] [--timeout DURATION] -- PROGRAM ...`: each run (learning and
-- proof) ends at the timeout when one is given; the learning run passes the program's output
-- through; the draft goes to FILE; the proof run is captured, and what it
-- shows is said on stderr. Exit status: 0 when the program exited 0 in the
-- learning run and the draft ran it with no violation and the same ending;
-- 1 when not (the differences are listed); 125 when learning could not be done.
local learn = require "airlock.learn.tool"
local learn_guest = require "airlock.learn.guest"
local json = require "airlock.json"

local M = {}

function M.main(opts)
  for _, k in ipairs { "policy", "rootfs", "capture", "ledger", "durability", "observe" } do
    if opts[k] ~= nil then
      io.stderr:write("airlock exec: --learn takes --workspace, --env and --timeout, not --", k,
        " (the learning run's policy is the stock tool policy made permissive; docs/TOOLS.md, \"Learn mode\")\n")
      return 125
    end
  end
  local rep, err = learn.learn { argv = opts.argv, out = opts.learn, workspace = opts.workspace, env = opts.env,
                                 timeout = opts.timeout, output = "inherit", stdin_inherit = opts.stdin_inherit }
  if not rep then
    io.stderr:write("airlock exec: ", tostring(err), "\n")
    return 125
  end
  local p = rep.plan
  local asked = 0
  for _, c in ipairs(p.effects or {}) do if c.denied > 0 then asked = asked + 1 end end
  io.stderr:write(string.format("airlock exec: learned %d read, %d write and %d exec grants, %d network " ..
    "patterns; %d secrets or home-directory files flagged, not granted; %d effects asked for that the base " ..
    "policy does not grant; draft written to %s\n",
    #p.read, #p.write, #p.exec, #p.network, #p.flagged, asked, rep.draft))
  if rep.runs then
    io.stderr:write("airlock exec: the draft ran again with no violation and the same ending\n")
    if not rep.learned_ok then
      local l = rep.learned
      io.stderr:write(string.format("airlock exec: but the program failed in the learning run too (%s%s): " ..
        "the draft covers a failing run\n", l.cause, l.exit_code and (", exit " .. l.exit_code) or ""))
      return 1
    end
    return 0
  end
  io.stderr:write("airlock exec: the draft did not run as the learning run did:\n")
  for _, d in ipairs(rep.differences) do io.stderr:write("  ", d, "\n") end
  return 1
end

--- run_main(opts, pos, usage_error): `airlock run --learn FILE [--policy
--- BASE] [--input JSON] GUEST.lua`. Exit 0 when the guest succeeded and the
--- draft ran it the same; 1 when not (the differences listed); 2 on bad usage.
function M.run_main(opts, pos, usage_error)
  if #pos ~= 1 or pos[1] == "-" then return usage_error("run: --learn takes one guest file", "run") end
  local input
  if opts.input then
    local ok, v = pcall(json.decode, opts.input)
    if not ok then return usage_error("run: --input is not JSON: " .. tostring(v), "run") end
    input = v
  end
  local rep, err = learn_guest.learn { guest = pos[1], out = opts.learn, policy = opts.policy,
                                                          input = input }
  if not rep then
    io.stderr:write("airlock: run: ", tostring(err), "\n")
    return 2
  end
  local u = rep.used
  io.stderr:write(string.format("airlock: learned: cpu %d ms, peak resident %d KiB, %d bytes printed, %d " ..
    "modules, %d effects not granted; draft written to %s\n", u.cpu_ms, u.rss_kb, u.output, #u.modules,
    #u.denied, rep.draft))
  if rep.runs and rep.learned_ok then
    io.stderr:write("airlock: the draft ran the guest again the same way\n")
    return 0
  end
  if rep.runs then
    io.stderr:write(string.format("airlock: the draft ran it the same way, but the guest failed in the learning " ..
      "run too (%s: %s)\n", rep.learned.cause, tostring(rep.learned.message)))
    return 1
  end
  io.stderr:write("airlock: the draft did not run the guest as the learning run did:\n")
  for _, d in ipairs(rep.differences) do io.stderr:write("  ", d, "\n") end
  return 1
end

return M
