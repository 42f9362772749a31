-- bench_spec.lua -- `airlock bench --quick --json` produces every row, with
-- positive numbers. No timing is asserted: ratios are reported, never judged here.
local H = require "helper"
local dk = require "dkjson"

local AIRLOCK = H.bin .. "/airlock"

local function positive(x, what)
  assert(type(x) == "number" and x > 0 and x == x and x < math.huge,
    string.format("%s: expected a positive number, got %s", what, tostring(x)))
end

-- Runs the quick bench once for the whole file: name -> row, in order.
local rows, order, status, stderr
local function bench()
  if rows then return rows end
  local errf = os.tmpname()
  local p = io.popen(AIRLOCK .. " bench --quick --json 2>" .. errf)
  local out = p:read("a")
  local _, _, code = p:close()
  status = code
  local f = io.open(errf)
  stderr = f and f:read("a") or ""
  if f then f:close() end
  os.remove(errf)
  rows, order = {}, {}
  for line in out:gmatch("[^\n]+") do
    local t = assert(dk.decode(line), "not a JSON line: " .. line)
    rows[t.bench] = t
    order[#order + 1] = t.bench
  end
  return rows
end

-- A measured row: positive median and p99, and against its baseline a
-- positive baseline median and ratio.
local function measured(name, baseline)
  local r = bench()[name]
  assert(r, "no row '" .. name .. "' (rows: " .. table.concat(order, ", ") .. ")")
  assert.is_nil(r.skipped, name .. " was skipped: " .. tostring(r.skipped))
  positive(r.median_us, name .. ".median_us")
  positive(r.p99_us, name .. ".p99_us")
  assert.is_true(r.p99_us >= r.median_us, name .. ": p99 below the median")
  if baseline then
    assert.equal(baseline, r.baseline)
    positive(r.baseline_median_us, name .. ".baseline_median_us")
    positive(r.ratio, name .. ".ratio")
  end
  return r
end

-- A row that may be skipped on this machine (no root, no bubblewrap), but then
-- must say why; measured otherwise. Skipped rows are noted in skipped_rows,
-- for the case to end pending with them rather than pass.
local skipped_rows = {}
local function measured_or_skipped(name, baseline)
  local r = bench()[name]
  assert(r, "no row '" .. name .. "'")
  if r.skipped then
    assert.is_string(r.skipped)
    assert.is_true(#r.skipped > 0)
    skipped_rows[#skipped_rows + 1] = name .. " (" .. r.skipped .. ")"
    return r
  end
  return measured(name, baseline)
end

-- Ends the case pending when a row it checked was skipped on this machine.
local function pending_if_skipped()
  if #skipped_rows > 0 then
    local list = table.concat(skipped_rows, ", ")
    skipped_rows = {}
    pending("rows skipped on this machine: " .. list)
  end
end

local function is_root()
  return (H.slurp("/proc/self/status") or ""):match("\nUid:%s*(%d+)") == "0"
end

describe("airlock bench --quick --json", function()
  it("exits 0 and prints only JSON lines", function()
    bench()
    assert.equal(0, status, stderr)
    assert.is_true(#order > 0)
  end)

  it("keeps the existing rows and their baselines", function()
    measured("spawn-done", "fork-exec /bin/true")
    measured("effect-roundtrip", "raw socketpair ping-pong")
    positive(measured("effect-roundtrip").per_sec, "effect-roundtrip.per_sec")
    local rss = bench()["parent-rss-per-run"]
    assert.is_table(rss)
    assert.is_number(rss.kb)
    positive(rss.runs, "parent-rss-per-run.runs")
  end)

  it("says what a round trip costs in CPU on each side, beside the raw ping-pong's", function()
    local c = bench()["roundtrip-cpu"]
    assert.is_table(c, "no roundtrip-cpu row")
    for _, k in ipairs { "cpu_host_us", "cpu_worker_us", "raw_parent_us", "raw_child_us" } do positive(c[k], k) end
  end)

  it("runs five CPU-bound programs as guests and under lua5.4, in the same run", function()
    local programs, n = {}, 0
    for _, name in ipairs(order) do
      local r = bench()[name]
      if r.program then
        n = n + 1
        programs[r.program] = true
        assert.is_nil(r.skipped, name .. ": " .. tostring(r.skipped))
        positive(r.guest_s, name .. ".guest_s")
        positive(r.lua_s, name .. ".lua_s")
        assert.near(r.lua_s / r.guest_s, r.speed, 1e-9)
      end
    end
    for _, p in ipairs { "alloc", "float", "calls", "strings", "arrays" } do
      assert.is_true(programs[p], "no row for " .. p)
    end
    assert.equal(15, n)   -- each under three policies
  end)

  it("times a pooled start against a raw pre-forked child and fork+exec, from the same run", function()
    local first = measured("warm-first-instruction", "raw prefork wake")
    assert.equal(100, first.target_us)
    assert.is_boolean(first.met)
    assert.equal(first.median_us <= 100, first.met)
    local vs_fe = measured("warm-first/fork-exec", "fork-exec /bin/true")
    assert.equal(first.median_us, vs_fe.median_us)   -- the same samples, another baseline
    assert.equal(bench()["spawn-done"].baseline_median_us, vs_fe.baseline_median_us)
    local burst = measured("warm-first-burst", "raw prefork wake")
    assert.equal(100, burst.target_us)
    assert.is_boolean(burst.met)
    local effect = measured("warm-first-effect", "raw prefork round")
    local done = measured("warm-done", "fork-exec /bin/true")
    local result = measured("spawn-done-warm", "spawn-done")
    -- Each later point of the same runs comes no earlier than the one before it.
    assert.is_true(first.median_us <= effect.median_us, "first instruction after the first effect")
    assert.is_true(effect.median_us <= done.median_us, "first effect after the done frame")
    assert.is_true(done.median_us <= result.median_us, "done frame after the result")
  end)

  it("measures confined against unconfined, with the target", function()
    measured("spawn-unconfined", "fork-exec /bin/true")
    local r = measured("confined/unconfined", "spawn-unconfined")
    assert.equal("<= 1.5", r.target)
    assert.is_boolean(r.met)
    -- the same measurement as spawn-done, divided by unconfined from the same rounds
    assert.equal(bench()["spawn-done"].median_us, r.median_us)
    assert.equal(bench()["spawn-unconfined"].median_us, r.baseline_median_us)
  end)

  it("measures confined against bubblewrap, or says bwrap is not installed", function()
    local bw = bench()["bwrap-true"]
    local r = bench()["confined/bwrap"]
    assert.is_table(bw)
    assert.is_table(r)
    assert.equal("< 1", r.target)
    local installed = io.open("/usr/bin/bwrap") ~= nil
    if bw.skipped then
      assert.is_false(installed and bw.skipped == "bwrap not installed")
      assert.equal(bw.skipped, r.skipped)
      pending("bubblewrap row skipped on this machine: " .. bw.skipped)
    else
      measured("bwrap-true", "fork-exec /bin/true")
      measured("confined/bwrap", "bwrap-true")
      assert.equal(bw.median_us, r.baseline_median_us)
    end
  end)

  it("breaks the cost down by layer, against unconfined", function()
    -- Without root some groups cannot be had alone (a namespace needs a user
    -- namespace, dropping the bounding set needs CAP_SETPCAP): those say why.
    local check = is_root() and measured or measured_or_skipped
    for _, name in ipairs { "layer-namespaces", "layer-namespaces-ownnet", "layer-ns-user", "layer-ns-pid",
                            "layer-ns-net", "layer-ns-net-shared", "layer-ns-ipc", "layer-ns-uts",
                            "layer-ns-mount", "layer-ns-cgroup", "layer-rlimits",
                            "layer-capabilities", "layer-no_new_privs",
                            "layer-landlock", "layer-seccomp" } do
      local r = check(name, "spawn-unconfined")
      if not r.skipped then assert.is_number(r.delta_us) end
    end
    check("layer-seccomp+pidns", "layer-ns-pid")
    check("confined-ownnet", "spawn-done")
    pending_if_skipped()
  end)

  it("times a fresh net namespace and joining a pre-made one", function()
    local check = is_root() and measured or measured_or_skipped
    check("netns-clone-newnet", "clone")
    check("netns-unshare-newnet", "clone")
    check("netns-setns-shared", "clone")
    measured("netns-newuser-newnet", "clone-newuser")
    pending_if_skipped()
  end)
end)

describe("airlock bench exec", function()
  it("times airlock exec against fork+exec, bubblewrap and firejail, in one run", function()
    local errf = os.tmpname()
    local p = io.popen(AIRLOCK .. " bench exec --quick --json 2>" .. errf)
    local out = p:read("a")
    local ok = p:close()
    local err = H.slurp(errf) or ""
    os.remove(errf)
    assert.is_true(ok, out .. err)
    local got = {}
    for line in out:gmatch("[^\n]+") do
      local t = assert(dk.decode(line), "not a JSON line: " .. line)
      got[t.bench] = t
    end
    -- airlock says nothing on stderr but the warning its own connect baseline
    -- earns (it adds the inet promise to the tool policy, less than the stock
    -- one); a sanitizer build's runtime may add lines of its own
    for line in err:gmatch("[^\n]+") do
      if line:match("^airlock") then
        assert.matches("^airlock: WARNING: policy 'tool%-bench%-connect' runs programs WITHOUT confinement %(less " ..
          "than the stock 'tool': tool%.confine%.seccomp%)$", line)
      end
    end
    for _, name in ipairs { "fork-exec", "exec-inproc", "exec-command", "exec-inproc-nocg", "exec-command-nocg" } do
      assert(got[name], "no row " .. name)
      positive(got[name].median_us, name)
    end
    -- learn mode's observation: per call, against the same calls unobserved
    -- (the baseline program runs confined: a sanitizer build's cannot, and
    -- the row says why instead)
    local sc = got["stat-confined"]
    if sc.skipped then
      assert.is_true(type(sc.skipped) == "string" and #sc.skipped > 0)
      pending("stat rows skipped on this build: " .. sc.skipped)
    else
      positive(sc.median_us, "stat-confined")
    end
    local so = got["stat-observed"]
    if so.skipped then
      assert.is_true(type(so.skipped) == "string" and #so.skipped > 0)
    else
      assert.equal("stat-confined", so.baseline)
      positive(so.ratio, "stat-observed.ratio")
    end
    positive(got["exec-inproc"].ratio, "exec-inproc.ratio")
    assert.equal("fork-exec", got["exec-inproc"].baseline)
    assert.equal("< 3", got["exec-inproc"].target)
    assert.is_boolean(got["exec-inproc"].met)
    local bw = got["bwrap-true"]
    if bw.skipped then
      assert.is_true(type(bw.skipped) == "string" and #bw.skipped > 0)
      pending("bubblewrap row skipped on this machine: " .. bw.skipped)
    end
    positive(got["exec-inproc/bwrap"].ratio, "exec-inproc/bwrap.ratio")
    assert.equal("<= 1.5", got["exec-command/bwrap"].target)
    assert.is_boolean(got["exec-command/bwrap"].met)
    -- firejail: measured beside the others when it is installed, else a
    -- row that says why not (and the ratio row says the same).
    local fj, vs_fj = assert(got["firejail-true"], "no row firejail-true"),
      assert(got["exec-command/firejail"], "no row exec-command/firejail")
    if fj.skipped then
      assert.is_true(type(fj.skipped) == "string" and #fj.skipped > 0)
      assert.equal(fj.skipped, vs_fj.skipped)
      assert.is_nil(vs_fj.ratio)
      if not os.execute("command -v firejail >/dev/null 2>&1") then assert.equal("firejail not installed", fj.skipped) end
      pending("firejail row skipped on this machine: " .. fj.skipped)
    else
      positive(fj.median_us, "firejail-true")
      assert.equal("fork-exec", fj.baseline)
      positive(vs_fj.ratio, "exec-command/firejail.ratio")
      assert.equal("firejail-true", vs_fj.baseline)
      assert.equal("< 1", vs_fj.target)
      assert.is_boolean(vs_fj.met)
    end
  end)
end)

describe("airlock bench ledger --quick --json", function()
  it("takes --quick like the other benches and reports every mode against SQLite", function()
    local out, rc = H.sh(AIRLOCK .. " bench ledger --quick --json")
    assert.are.equal(0, rc, out)
    local r = assert(dk.decode(out:match("^[^\n]+")), out)
    assert.are.equal(0.5, r.seconds)   -- what --quick means here: half-second rounds
    for _, mode in ipairs { "none", "batch", "always" } do positive(r[mode].records_per_s, mode) end
    positive(r.sqlite.inserts_per_s, "sqlite")
    positive(r.verify.mb_per_s, "verify")
    positive(r.ratios.batch_over_sqlite, "batch/sqlite")
    -- the ledger process against its baselines of the same run
    positive(r.process_batch_queued.records_per_s, "process queued")
    positive(r.batch_interleaved.records_per_s, "in-process batch, interleaved")
    positive(r.process_always.records_per_s, "process always")
    positive(r.fdatasync.per_s, "fdatasync alone")
    -- the floor of a ledger in its own process: a raw child that syncs and answers
    positive(r.boundary.per_s, "fdatasync behind a raw process boundary")
    positive(r.ratios.always_over_boundary, "always over the raw boundary")
    positive(r.ratios.boundary_over_fdatasync, "the raw boundary over fdatasync alone")
    for _, k in ipairs { "process_over_batch", "process_over_sqlite", "always_over_fdatasync" } do
      positive(r.ratios[k], k)
      assert.is_boolean(r.met[k], k)
    end
    assert.are.equal(0.8, r.targets.process_over_batch)
    assert.are.equal(1.2, r.targets.always_over_fdatasync)
    -- the worst waits across seals, beside the same appends never sealed
    assert.is_true(r.seal_stall.seals >= 1, "the seal stall run sealed nothing")
    assert.equal(0, r.no_seal.seals)
    for _, k in ipairs { "seal_stall", "no_seal" } do
      assert.equal(12000, r[k].appends)
      positive(r[k].p50_ms, k .. ".p50_ms")
      assert.is_true(r[k].p99_ms >= r[k].p50_ms and r[k].max_ms >= r[k].p99_ms, k)
    end
  end)
end)

describe("airlock bench scale --json", function()
  it("times N guests x K effects a frame against the raw C epoll loop of the same frames", function()
    local out, rc = H.sh(AIRLOCK .. " bench scale --quick --guests 4 --effects 3 --json")
    assert.are.equal(0, rc, out)
    local r = assert(dk.decode(out:match("^[^\n]+")), out)
    assert.are.equal("scale-calls", r.bench, out)
    assert.is_nil(r.skipped, r.skipped)
    assert.are.equal(4, r.guests)
    assert.are.equal(3, r.effects)
    positive(r.median_us, "median")
    positive(r.effects_per_sec, "effects/s")
    positive(r.baseline_effects_per_sec, "raw effects/s")
    positive(r.ratio, "ratio")
    positive(r.cpu_host_us, "host CPU per effect")
    positive(r.baseline_cpu_parent_us, "the raw loop's parent CPU per effect")
    assert.is_true(r.fps > 0 and r.p99_us >= r.median_us)
    -- A bad option is a usage error, not a run.
    local _, bad = H.sh(AIRLOCK .. " bench scale --guests 0")
    assert.are.equal(2, bad)
  end)
end)

describe("airlock bench net --json", function()
  it("times an HTTP request through a program's egress proxy against the same request made directly", function()
    local out, rc = H.sh(AIRLOCK .. " bench net --quick --json")
    assert.are.equal(0, rc, out)
    local r = assert(dk.decode(out:match("^[^\n]+")), out)
    assert.are.equal("net-request", r.bench)
    assert.is_nil(r.skipped, r.skipped)
    positive(r.median_us, "proxied")
    positive(r.baseline_median_us, "direct")
    positive(r.sandboxed_median_us, "no network")
    positive(r.ratio, "ratio")
    assert.are.equal("<= 1.3", r.target)
    assert.is_boolean(r.met)
  end)
end)

describe("airlock bench warm --json", function()
  it("times only the pooled starts, against the raw pre-forked child and fork+exec from the same run", function()
    local out, rc = H.sh(AIRLOCK .. " bench warm --quick --json")
    assert.are.equal(0, rc, out)
    local got = {}
    for line in out:gmatch("[^\n]+") do
      local r = assert(dk.decode(line), "not a JSON line: " .. line)
      got[#got + 1] = r.bench
      assert.is_nil(r.skipped, r.skipped)
      positive(r.median_us, r.bench .. ".median_us")
      assert.is_true(r.p99_us >= r.median_us, r.bench .. ": p99 below the median")
      positive(r.baseline_median_us, r.bench .. ".baseline_median_us")
      if r.target_us then assert.equal(r.median_us <= r.target_us, r.met) end
    end
    assert.are.same({ "warm-first-instruction", "warm-first/fork-exec", "warm-first-burst", "warm-first-effect",
                      "warm-done" }, got)
    -- Control: "warm" is a mode only as the first word.
    local _, bad = H.sh(AIRLOCK .. " bench --quick warm")
    assert.are.equal(2, bad)
  end)
end)
