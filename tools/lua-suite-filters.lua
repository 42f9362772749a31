-- lua-suite-filters.lua -- what tools/lua-suite.lua removes from the Lua 5.4.4
-- test suite before running a file, under lua5.4 and as a guest alike: only
-- lines that need io, debug, package, string.dump or an os function past
-- time, clock, date and difftime, which a guest does not have (lines in
-- branches that run only with the test library T are left: they never run),
-- and a file's last "return" of a value that is not data, which lua5.4 FILE
-- ignores but a guest's run would have to send. A rule is a Lua pattern on one
-- line ("lines": each line it matches), a block { first, last } (from a line
-- matching first to the next matching last), or, for the rare line that
-- cannot go, a replacement { pattern, text } (the part it matches becomes
-- text, taken literally). A dropped line becomes "--", so line numbers stay.
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
    ["strings.lua"] = {
      lines = { "^  assert%(string%.format%(\"%%p\", io%.stdin%)" },
      blocks = { { "^if not _port then$", "^end$" } },   -- os.setlocale, which os has not
    },
    ["literals.lua"] = {
      blocks = { { "^if os%.setlocale%(\"pt_BR\"%)", "^end$" } },   -- os.setlocale, as in strings.lua
      lines = { "^return require\"debug\"%.getinfo%(1%)%.currentline$" },   -- in a chunk as a string
      replace = {   -- the lines are debug's; what the chunks return stays checked
        { "^(%s*', )require\"debug\"%.getinfo%(1%)%.currentline', ''%)%)$", "            ', nil', ''))" },
        { "^  assert%(s == y and l == n%)$", "  assert(s == y)" },
        { "^  assert%(dostring%(prog%) == nn%)$", "  dostring(prog)" },
      },
    },
    ["locals.lua"] = {
      lines = {
        "^assert%(getenv%(",   -- getenv (dropped below) is debug.getupvalue's
        "^%s*assert%(debug%.getinfo%(2%)%.name == ",
        "^  assert%(string%.find%(msg, \"in metamethod 'close'\"%)%)$",   -- a traceback's
      },
      blocks = {
        { "^local function getenv %(f%)$", "^end$" },
        { "^do   %-%- '__close' vs%. return hooks in Lua functions$", "^end$" },
      },
      replace = { { "^  local st, msg = xpcall%(foo, debug%.traceback%)$", "  local st, msg = pcall(foo)" } },
    },
    ["constructs.lua"] = { lines = { "^  assert%(debug%.getinfo%(1, \"n\"%)%.name == 'F'%)$" } },
    ["nextvar.lua"] = {
      lines = { "^    %[io%.stdin%] = 9,%s+%-%- userdata$" },
      blocks = { { "^do   %-%- clear global table$", "^end$" } },   -- which spares what package.loaded holds
      replace = { { "^  local b = {}; for i = 1, 10 do b%[i%] = true end$",   -- 9 keys now, not 10
                    "  local b = {}; for i = 1, 10 do b[i] = i ~= 9 or nil end" } },
    },
    ["events.lua"] = {
      lines = { "^assert%(not pcall%(rawlen, io%.stdin%)%)$" },
      blocks = { { "^%-%- testing metatables for basic types$", "^debug%.setmetatable%(nil, {}%)$" } },
    },
    ["closure.lua"] = {
      blocks = { { "^%-%- test for debug manipulation of upvalues$",
                   "^assert%(not pcall%(debug%.upvaluejoin, foo1, 1, print, 1%)%)$" } },
    },
    ["goto.lua"] = {   -- what debug.upvalueid says of the closures; foo's own checks stay
      blocks = { { "^%-%- all functions share same 'a'$", "^%-%- testing if x goto optimizations$" } },
    },
    ["bitwise.lua"] = {   -- bit32 through package.preload: the same loader, called directly
      replace = {
        { "^package%.preload%.bit32 = function %(%)", "local bit32_loader = function ()" },
        { "^local bit32 = require'bit32'$", "local bit32 = bit32_loader()" },
      },
    },
    ["verybig.lua"] = {   -- the big chunk is written to a temporary file and run by dofile: built in memory instead
      lines = { "^io%.output%(file%)$", "^io%.close%(%)$", "^assert%(os%.remove%(file%)%)$" },
      replace = {
        { "io%.write%(", "write(" },
        { "^file = os%.tmpname%(%)$", "local buf = {} function write (...) for i = 1, select('#', ...) do " ..
          "local v = select(i, ...) buf[#buf + 1] = math.type(v) == 'float' and string.format('%.14g', v) " ..
          "or tostring(v) end end" },
        { "^result = dofile%(file%)$", "result = assert(load(table.concat(buf)))()" },
      },
    },
    ["coroutine.lua"] = {
      lines = {
        "^      Y = debug%.getinfo%(2%)$",
        "^  assert%(debug%.getinfo%([12]%)%.currentline == debug%.getinfo%(%a+%)%.linedefined",
      },
      blocks = {
        { "^do   %-%- testing single trace of coroutines$", "^end$" },
        { "^%-%- getuptable & setuptable$", "^assert%(g%.k%.AAA == 11%)$" },
      },
      replace = { { "^  assert%(X == 43 and Y%.what == \"C\"%)$", "  assert(X == 43)" } },   -- Y was getinfo's
    },
    ["errors.lua"] = {
      lines = {
        "^%s*checkmessage%(\"[^\"]*%f[%w]io%.%a",   -- messages about io's FILE* values
        "^  local l = debug%.getinfo%(1, \"l\"%)%.currentline %+ 1$",   -- for the block below
      },
      blocks = {
        { "^_G%.D = debug$", "^_G%.D = nil$" },
        { "^%-%- errors in functions without debug info$", "^end$" },   -- string.dump(f, true)
        { "^  %-%- error lines in stack overflow$", "^  assert%(i > 15%)$" },   -- a traceback's lines
      },
      replace = {   -- the message still has to name a line
        { "^  assert%(tonumber%(line%) == debug%.getinfo%(1, \"l\"%)%.currentline %- 2%)$", "  assert(tonumber(line))" },
      },
    },
    ["files.lua"] = {   -- io throughout, but for its date and time section at the end, which runs
      lines = { "^io%.output%(io%.stdout%)$", "^io%.write%(string%.format%(" },
      blocks = {
        { "^assert%(type%(os%.getenv\"PATH\"%) == \"string\"%)$", "^assert%(io%.output%(io%.stdout%) == io%.stdout%)$" },
        { "^%-%- cannot close standard files$", "^end %-%-}$" },
      },
    },
    ["calls.lua"] = {
      lines = {
        "^assert%(debug%.getinfo%(a%)%.source == \"modname\"%)",
        -- lua file.lua ignores a script's value; a guest's is the run's, and a
        -- function is no data (README: the guest's world)
        "^return deep$",
      },
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
  volatile = { "random seeds: %d+, %d+", "with %d+ comparisons", "random range in %d+ calls: %b[]",
               "short%-circuit optimizations %(%d%)" },
  -- The files both runs agree on today, which spec/worker/lua_suite_spec.lua holds to.
  agree = {
    "tpack.lua", "code.lua", "pm.lua", "utf8.lua", "api.lua", "vararg.lua", "sort.lua", "math.lua",
    "cstack.lua", "gc.lua", "gengc.lua", "calls.lua", "strings.lua", "literals.lua", "locals.lua",
    "constructs.lua", "nextvar.lua", "events.lua", "closure.lua", "goto.lua", "bitwise.lua", "verybig.lua",
    "coroutine.lua", "errors.lua", "files.lua",
  },
}
