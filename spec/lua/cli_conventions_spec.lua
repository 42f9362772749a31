-- cli_conventions_spec.lua -- what command-line users expect of `airlock`:
-- --help on every command (its own usage, exit 0, nothing run), --version, an
-- inline guest (-e CODE) and one from stdin (-), as lua takes them, and
-- messages with one prefix naming what failed.
local H = require "helper"
require "airlock"
local core = require "airlock.core"
-- The command's own modules are built into the command, not into airlock.so:
-- the usage table is read from its source, which the command embeds.
local usage = dofile("lua/airlock/cli/usage.lua")

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")

local function run(args, stdin)
  local cmd = (stdin and ("printf '%s' '" .. stdin .. "' | ") or "") .. AIRLOCK .. " " .. args
  return H.sh(cmd)   -- stdout and stderr, and the exit status
end

describe("airlock --help", function()
  for _, c in ipairs(usage.COMMANDS) do
    it("airlock " .. c.name .. " --help prints its own usage and exits 0", function()
      local out, rc = run(c.name .. " --help")
      assert.are.equal(0, rc, out)
      assert.are.equal(usage.command(c.name), out)
      assert.matches("^usage: airlock " .. c.name:gsub("%p", "%%%0"), out)
    end)
  end

  it("runs nothing: demo --help and repl --help only print", function()
    local out, rc = run("demo --help")
    assert.are.equal(0, rc)
    assert.are.equal(usage.command("demo"), out)   -- the usage alone: no guest ran
    out, rc = run("repl --help", "print('ran')\n")
    assert.are.equal(0, rc)
    assert.are.equal(usage.command("repl"), out)
  end)

  it("exec's --help is exec's until its program starts: after it, it is the program's", function()
    local out, rc = run("exec --workspace /tmp --help")
    assert.are.equal(0, rc)
    assert.matches("^usage: airlock exec", out)
    local ws = H.tmpdir()
    out, rc = run("exec --workspace " .. ws .. " -- sh -c 'echo got $1' sh --help")
    os.execute("rm -rf " .. ws)
    assert.are.equal(0, rc, out)
    assert.are.equal("got --help\n", out)
  end)

  it("--version and version print the version; a typo says where the list is", function()
    assert.are.equal("airlock 0.1\n", (run("--version")))
    assert.are.equal("airlock 0.1\n", (run("version")))
    local out, rc = run("rnu x.lua")
    assert.are.equal(2, rc)
    assert.matches("unknown command 'rnu'", out)
    assert.matches("airlock %-%-help", out)
    -- A usage error shows the usage of the command it is about, not the whole list.
    out, rc = run("replay")
    assert.are.equal(2, rc)
    assert.matches("^airlock: replay: expected one ledger directory\nusage: airlock replay ", out)
  end)
end)

describe("the module and the command", function()
  it("airlock.so holds the library; the command line, REPL, demo and bench are the command's", function()
    for _, m in ipairs { "cli.main", "cli.exec", "cli.usage", "cli.repl", "cli.demo", "cli.bench", "cli.bench_exec" } do
      assert.is_nil(package.preload["airlock." .. m], m)
      assert.is_false((pcall(require, "airlock." .. m)), m)
    end
    for _, m in ipairs { "policy", "policy.schema", "session", "ledger", "json", "exec", "probe" } do
      assert.is_function(package.preload["airlock." .. m], m)
    end
    -- Control: the command has them (a subcommand from each).
    local out, rc = run("help --man exec")
    assert.are.equal(0, rc, out)
    assert.matches("airlock\\%-exec", out)
  end)
end)

describe("airlock run with an inline guest", function()
  it("takes -e CODE and -, as lua does", function()
    assert.are.equal("2\n", (run("run -e 'return 1+1'")))
    assert.are.equal("2\n", H.sh("lua5.4 -e 'print(1+1)'"))   -- the peer
    assert.are.equal("42\n", (run("run -", "return 6*7")))
    local out, rc = run("run -e")
    assert.are.equal(2, rc)
    assert.matches("%-e needs the guest's code", out)
    out, rc = run("run -e 'return 1' other.lua")
    assert.are.equal(2, rc)
    assert.matches("not more than one", out)
  end)
end)

describe("airlock exec's messages", function()
  it("name what failed once, and say what a bare number lacks", function()
    local out, rc = run("exec --timeout 10 -- true")
    assert.are.equal(125, rc)
    assert.matches("^airlock exec: %-%-timeout 10 needs a unit: 10s", out)
    local ws = H.tmpdir()
    out, rc = run("exec --workspace " .. ws .. " -- no-such-program-x")
    os.execute("rm -rf " .. ws)
    assert.are.equal(127, rc)
    assert.matches("^airlock exec: 'no%-such%-program%-x' not found", out)
    out = run("exec --workspace /nonexistent-dir -- true")
    assert.matches("^airlock exec: workspace: /nonexistent%-dir is not an existing directory\n", out)
    out = run("exec --policy /nonexistent.lua -- true")
    assert.is_nil(out:find("policy: policy:", 1, true), out)
    assert.is_nil(out:find("exec: exec:", 1, true), out)
  end)
end)

describe("airlock run --json", function()
  local dk = require "dkjson"
  it("is one JSON object whatever happens: a result, or why the run could not start", function()
    local out, rc = run("run no-such-guest.lua --json")
    assert.are.equal(2, rc)
    local r = assert(dk.decode(out), out)
    assert.are.same({ ok = false, cause = "usage" }, { ok = r.ok, cause = r.cause })
    assert.matches("cannot read guest", r.message)
    r = assert(dk.decode((run("run -e 'return 1' --json --policy no-such-policy"))))
    assert.are.equal("policy", r.cause)
    r = assert(dk.decode((run("run -e 'return 1' --json --input '{bad'"))))
    assert.are.equal("usage", r.cause)
    -- A run that ended ok names its policy digest and run id, and no signal:
    -- the parent's hang-up of a finished worker is not how it ended.
    r = assert(dk.decode((run("run -e 'return 1' --json"))))
    assert.are.equal("ok", r.cause)
    assert.matches("^%x+$", r.digest)
    assert.are.equal(1, r.run)
    assert.is_nil(r.signal)
  end)

  it("is one JSON object for a usage error too, on every command that takes --json", function()
    for _, args in ipairs { "run --json --no-such-option", "run --json a.lua b.lua", "probe --json --nope",
                            "ledger verify --json", "exec --json", "exec --policy tool --json --nope",
                            "exec --json --timeout 10 -- true" } do
      local out, rc = run(args)
      assert.is_true(rc == 2 or rc == 125, args .. ": " .. tostring(rc))
      local r = assert(dk.decode(out), args .. ": " .. out)
      assert.are.same({ ok = false, cause = "usage" }, { ok = r.ok, cause = r.cause }, args)
      assert.is_string(r.message)
    end
    -- Control: without --json the same error is text on stderr with the usage.
    local out = run("run --no-such-option")
    assert.matches("^airlock: run: unknown option %-%-no%-such%-option\nusage: airlock run", out)
  end)

  it("is valid UTF-8 whatever bytes the guest or the program returns", function()
    -- A cut multi-byte sequence and a lone 0xff: each bad byte is U+FFFD, good text is kept.
    local out = run([[run --json -e 'return "caf\xc3\xa9 \xff ok \xe2\x82"']])
    assert.is_truthy(utf8.len(out), out)
    local r = assert(dk.decode(out), out)
    assert.are.equal("caf\u{e9} \u{FFFD} ok \u{FFFD}\u{FFFD}", r.value)
    local ws = H.tmpdir()
    out = run("exec --json --workspace " .. ws .. [[ -- printf 'a\377\303b']])
    os.execute("rm -rf " .. ws)
    assert.is_truthy(utf8.len(out), out)
    r = assert(dk.decode(out), out)
    assert.are.equal("a\u{FFFD}\u{FFFD}b", r.stdout)
  end)
end)

describe("airlock repl", function()
  it("completes globals, fields and methods with Tab, on a terminal", function()
    local log = os.tmpname()
    -- The last key is Ctrl-D on an empty line, which ends the REPL as at a
    -- terminal: script(1) does not pass the pipe's end on to its terminal, so
    -- without it the session could wait for input forever. timeout: a guard.
    H.sh("printf 'airlock.pol\\t.lo\\t\\nb = airlock.broker()\\nb:cl\\t()\\n\\004' | timeout -k 5 " ..
      H.GUARD_S .. " script -qec '" .. AIRLOCK .. " repl' " .. log .. " >/dev/null")
    local out = H.read(log):gsub("\27%[[%d?;]*%a", ""):gsub("\r", "")
    os.remove(log)
    assert.matches("airlock> airlock%.policy%.load\n", out)
    assert.matches("airlock> b:close%(%)\n", out)
    -- And the completer itself, on a plain environment.
    local repl = dofile("lua/airlock/cli/repl.lua")   -- the command's module, from its source
    local env = setmetatable({ airlock = require "airlock", mine = { alpha = 1, beta = 2 } }, { __index = _G })
    assert.are.same({ "mine.alpha" }, repl.complete(env, "mine.al"))
    assert.are.same({ "airlock.policy" }, repl.complete(env, "airlock.poli"))
    assert.are.same({ "while" }, repl.complete(env, "whil"))
    assert.are.same({}, repl.complete(env, "nothing.here"))
  end)

  it("shows tracebacks of the user's code without the REPL's own frames", function()
    local out = H.sh("printf 'local function f() error(\"deep\") end f()\\n' | " .. AIRLOCK .. " repl")
    assert.matches("repl:1: deep", out)
    assert.matches("in local 'f'", out)
    assert.is_nil(out:find("airlock/repl.lua", 1, true), out)
    assert.is_nil(out:find("xpcall", 1, true), out)
  end)
end)

describe("airlock ledger --json", function()
  it("is one JSON object when there is no journal to read, and the message names what failed once", function()
    local dk = require "dkjson"
    for _, sub in ipairs { "verify", "show", "checkpoint" } do
      local out, rc = run("ledger " .. sub .. " /nonexistent-ledger --json")
      assert.are.equal(2, rc)
      local r = assert(dk.decode(out), out)
      assert.are.same({ ok = false, cause = "ledger" }, { ok = r.ok, cause = r.cause })
      assert.matches("cannot open /nonexistent%-ledger/journal", r.message)
    end
    local out = run("ledger verify /nonexistent-ledger")
    assert.matches("^airlock: ledger verify: cannot open /nonexistent%-ledger/journal", out)
    -- The errno by name beside its text, as everywhere.
    assert.matches("No such file or directory %(ENOENT%)", out)
  end)
end)
