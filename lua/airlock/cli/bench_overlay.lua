-- airlock.cli.bench_overlay -- the overlay rows of `airlock bench exec`: what
-- tool.overlay (a bounded copy-on-write workspace, its change set applied at
-- the end) costs against the plain bind mode, timed in the same run in
-- interleaved rounds, for two everyday commands:
--   overlay-make        `make -B` of a small C project (12 files, each built
--                       again every time), its objects and program applied
--   overlay-git-commit  `git add -A && git commit` of one changed file in a
--                       repository of 3000 files, the new objects and index applied
-- Each row's baseline is the same command in the bind mode (exec-make-bind,
-- exec-git-commit-bind), the two modes taking turns within each round; the
-- first round is not timed (caches, the page cache); the target is a ratio
-- of at most 1.2. A third row each, overlay-make-ledger and
-- overlay-git-commit-ledger, is the overlaid command recording into a new
-- session (its change set's records and its kept contents: the new files and
-- the pre-images, docs/LEDGER.md "Kept contents") against the overlaid
-- command without one, taking turns in the same rounds; its target is at
-- most 1.3.
local airlock = require "airlock"
local core = require "airlock.core"
local policy = require "airlock.policy"
local bench = require "airlock.cli.bench"

local M = {}

local function sh(cmd) return os.execute(cmd) == true end

-- A workspace holding a small C project, or nil, why.
local function make_project(dir)
  local f = assert(io.open(dir .. "/Makefile", "w"))
  f:write("SRC := $(wildcard *.c)\nprog: $(SRC:.c=.o)\n\t$(CC) -o $@ $^\n%.o: %.c\n\t$(CC) -O1 -c -o $@ $<\n")
  f:close()
  for i = 1, 12 do
    local c = assert(io.open(string.format("%s/m%d.c", dir, i), "w"))
    if i == 1 then
      c:write("#include <stdio.h>\n")
      for k = 2, 12 do c:write(string.format("int f%d(int);\n", k)) end
      c:write("int main(void) { int s = 0;\n")
      for k = 2, 12 do c:write(string.format("  s += f%d(%d);\n", k, k)) end
      c:write("  printf(\"%d\\n\", s); return 0; }\n")
    else
      c:write(string.format("int f%d(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * %d; return s; }\n",
        i, i))
    end
    c:close()
  end
  return true
end

-- A workspace holding a git repository of 3000 files with one commit.
local function git_repo(dir)
  return sh("cd " .. dir .. " && git init -q . && git config user.email bench@airlock && " ..
    "git config user.name bench && mkdir -p d && for i in $(seq 1 30); do mkdir d/$i; " ..
    "for k in $(seq 1 100); do echo $i.$k > d/$i/$k; done; done && git add -A && git commit -qm base")
end

--- rows(quick) -> the overlay rows and their bind baselines, each as
--- `airlock bench exec` prints them.
function M.rows(quick)
  local rounds, per = quick and 2 or 6, quick and 2 or 4   -- the first round warms up, untimed
  local out = {}
  if not bench.which("make") or not bench.which("cc") or not bench.which("git") then
    out[#out + 1] = { bench = "overlay-make", skipped = "make, cc or git not installed" }
    return out
  end
  local overlaid = policy.extend("tool", { name = "tool-overlay",
    tool = { overlay = { max_bytes = "1G", max_files = 100000, commit = "always" } } })
  local cases = {
    { name = "make", setup = make_project, argv = { "make", "-B", "-s" } },
    { name = "git-commit", setup = git_repo,
      argv = { "sh", "-c", "date +%s%N >> d/1/1 && git add -A && git commit -qm change" } },
  }
  for _, case in ipairs(cases) do
    local ws = os.tmpname()
    os.remove(ws)
    assert(os.execute("mkdir -p " .. ws))
    local ok = case.setup(ws)
    local times = { bind = {}, overlay = {}, ledger = {} }
    local sessions = os.tmpname()   -- outside the workspace, one new session a run
    os.remove(sessions)
    assert(os.execute("mkdir -p " .. sessions))
    local why, n = nil, 0
    for r = 1, ok and rounds or 0 do
      for _, mode in ipairs { "bind", "overlay", "ledger" } do
        for _ = 1, per do
          n = n + 1
          local t0 = core.now_ms()
          local res, err = airlock.exec { argv = case.argv, workspace = ws, output = "capture",
                                          policy = mode ~= "bind" and overlaid or nil,
                                          ledger = mode == "ledger" and sessions .. "/s" .. n or nil }
          local dt = (core.now_ms() - t0) * 1000
          if not res or res.exit_code ~= 0 or (mode ~= "bind" and res.overlay.applied == 0) then
            why = string.format("%s in the %s mode failed: %s", case.name, mode,
              tostring(res and (res.stderr ~= "" and res.stderr or res.message) or err))
            break
          end
          if r > 1 then times[mode][#times[mode] + 1] = dt end
        end
        if why then break end
      end
      if why then break end
    end
    os.execute("rm -rf " .. ws .. " " .. sessions)
    if not ok or why then
      out[#out + 1] = { bench = "overlay-" .. case.name, skipped = why or "could not set up the workspace" }
    else
      local b = { median_us = bench.percentile(times.bind, 0.5), p99_us = bench.percentile(times.bind, 0.99) }
      local o = { median_us = bench.percentile(times.overlay, 0.5), p99_us = bench.percentile(times.overlay, 0.99) }
      out[#out + 1] = { bench = "exec-" .. case.name .. "-bind", median_us = b.median_us, p99_us = b.p99_us,
                        n = #times.bind }
      local ratio = o.median_us / b.median_us
      out[#out + 1] = { bench = "overlay-" .. case.name, median_us = o.median_us, p99_us = o.p99_us,
                        n = #times.overlay, baseline = "exec-" .. case.name .. "-bind",
                        baseline_median_us = b.median_us, ratio = ratio, target = "<= 1.2", met = ratio <= 1.2 }
      local l = { median_us = bench.percentile(times.ledger, 0.5), p99_us = bench.percentile(times.ledger, 0.99) }
      local lratio = l.median_us / o.median_us
      out[#out + 1] = { bench = "overlay-" .. case.name .. "-ledger", median_us = l.median_us, p99_us = l.p99_us,
                        n = #times.ledger, baseline = "overlay-" .. case.name, baseline_median_us = o.median_us,
                        ratio = lratio, target = "<= 1.3", met = lratio <= 1.3 }
    end
  end
  return out
end

return M
