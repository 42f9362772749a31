-- airlock.learn.cli -- `airlock exec --learn FILE [--workspace DIR] [--env
-- NAME=VALUE] -- PROGRAM ...`: the learning run passes the program's output
-- through; the draft goes to FILE; the proof run is captured, and what it
-- shows is said on stderr. Exit status: 0 when the program exited 0 in the
-- learning run and the draft ran it with no violation and the same ending;
-- 1 when not (the differences are listed); 125 when learning could not be done.
local learn = require "airlock.learn.tool"

local M = {}

function M.main(opts)
  local rep, err = learn.learn { argv = opts.argv, out = opts.learn, workspace = opts.workspace, env = opts.env,
                                 output = "inherit", stdin_inherit = opts.stdin_inherit }
  if not rep then
    io.stderr:write("airlock exec: ", tostring(err), "\n")
    return 125
  end
  local p = rep.plan
  io.stderr:write(string.format("airlock exec: learned %d read, %d write and %d exec grants, %d network " ..
    "patterns; %d secrets or home-directory files flagged, not granted; draft written to %s\n",
    #p.read, #p.write, #p.exec, #p.network, #p.flagged, rep.draft))
  if rep.runs then
    io.stderr:write("airlock exec: the draft ran again with no violation and the same ending\n")
    if not rep.learned_ok then
      io.stderr:write(string.format("airlock exec: but the program failed in the learning run too (%s, exit %s): " ..
        "the draft covers a failing run\n", rep.learned.cause, tostring(rep.learned.exit_code)))
      return 1
    end
    return 0
  end
  io.stderr:write("airlock exec: the draft did not run as the learning run did:\n")
  for _, d in ipairs(rep.differences) do io.stderr:write("  ", d, "\n") end
  return 1
end

return M
