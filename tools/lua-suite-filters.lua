-- lua-suite-filters.lua -- what tools/lua-suite.lua removes from the Lua 5.4.4
-- test suite before running a file, under lua5.4 and as a guest alike: only
-- lines that need io, debug, package or string.dump, which a guest does not
-- have (lines in branches that run only with the test library T are left:
-- they never run). A rule is a Lua pattern on one line ("lines": each line it
-- matches) or a block { first, last } (from a line matching first to the
-- next matching last). A dropped line becomes "--", so line numbers stay.
return {
  -- The files, in all.lua's order where it runs them.
  order = {
    "gc.lua", "calls.lua", "strings.lua", "literals.lua", "tpack.lua", "attrib.lua", "gengc.lua",
    "locals.lua", "constructs.lua", "code.lua", "big.lua", "cstack.lua", "nextvar.lua", "pm.lua",
    "utf8.lua", "api.lua", "events.lua", "vararg.lua", "closure.lua", "coroutine.lua", "goto.lua",
    "errors.lua", "math.lua", "sort.lua", "bitwise.lua", "verybig.lua", "files.lua", "db.lua", "main.lua",
  },
  -- Modules the files require (answered by module.load from the work folder).
  modules = { "tracegc", "bwcoercion" },
  -- Whole files that are about what a guest does not have, or that do not
  -- run by themselves under lua5.4 either.
  skip = {
    ["db.lua"] = "the debug library, throughout",
    ["main.lua"] = "runs the lua program itself (os.execute, io.popen, files)",
    ["attrib.lua"] = "require and package: searchers, paths and C libraries from files (libs/)",
    ["big.lua"] = "needs all.lua's coroutine around it (fails alone under lua5.4)",
  },
  -- Dropped from every file.
  every = {
    "^%s*local debug%s*=%s*require%s*['\"(]debug['\")]%s*$",
  },
  files = {
    -- The progress dots go to io.stderr: the one line that names it and the
    -- one that writes are rewritten (a dropped import would leave a global
    -- read after _ENV = nil).
    ["tracegc.lua"] = { replace = { { "setmetatable, io%.stderr, collectgarbage", "setmetatable, nil, collectgarbage" },
                                    { "^  stderr:write'%.'", "  --" } } },
    ["calls.lua"] = {
      lines = { "^assert%(debug%.getinfo%(a%)%.source == \"modname\"%)" },
      blocks = {   -- string.dump and what it made
        { "^f = load%(string%.dump%(function %(%) return 1 end%)", "^assert%(type%(f%) == \"function\" and f%(%) == 1%)" },
        { "^do   %-%- another bug %(in 5%.4%.0%)", "^end" },
        { "^x = string%.dump%(load%(\"x = 1; return x\"%)%)", "^assert%(not pcall%(string%.dump, print%)%)" },
        { "^%-%- load when _ENV is not first upvalue", "^assert%(x%(%) == 123%)" },
        { "^%-%- repeat the test loading a binary chunk", "^assert%(a%(%)%(2%)%(3%)%(10%) == 15%)" },
        { "^%-%- test for dump/undump with upvalues", "^assert%(x%(%) == 24%)" },
        { "^%-%- test for dump/undump with many upvalues", "^end" },
        { "^print%(\"testing binary chunks\"%)", "^end" },
      },
    },
  },
  -- Output that differs by design: the guest's math.random is seeded from
  -- the run's seed, so what a file prints about its random numbers differs.
  volatile = { "random seeds: %d+, %d+", "with %d+ comparisons", "random range in %d+ calls: %b[]" },
  -- The files both runs agree on today, which spec/worker/lua_suite_spec.lua holds to.
  agree = {
    "tpack.lua", "code.lua", "pm.lua", "utf8.lua", "api.lua", "vararg.lua", "sort.lua", "math.lua",
    "cstack.lua", "gc.lua", "gengc.lua",
  },
}
