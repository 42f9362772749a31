-- spec/lua/exec_spec.lua -- airlock.exec, the tool tier, proved with real
-- programs from the system under the stock `tool` policy: what they may do
-- (read the system, write the workspace and a private /tmp, ask for effects on
-- fd 3) and what they may not (write elsewhere, open sockets, reach the host's
-- network, gain privileges, outgrow their process, time and output limits).
local H = require "helper"
local airlock = require "airlock"
local lfs = require "lfs"
local policy = require "airlock.policy"

local function exec(argv, extra)
  -- The timeout is a guard against a hang, never what a case measures.
  local opts = { argv = argv, workspace = extra and extra.workspace or H.ws, timeout = H.GUARD_S .. "s" }
  for k, v in pairs(extra or {}) do opts[k] = v end
  local res, err, code = airlock.exec(opts)
  assert(res, "exec refused: " .. tostring(err) .. " (" .. tostring(code) .. ")")
  return res
end

local function sh(script, extra) return exec({ "sh", "-c", script }, extra) end

local function mount_count() return select(2, (H.slurp("/proc/self/mountinfo") or ""):gsub("\n", "")) end

describe("airlock.exec under the stock tool policy", function()
  setup(function()
    H.root = H.tmpdir()
    H.ws = H.root .. "/ws"
    assert(os.execute("mkdir -p " .. H.ws))
  end)
  teardown(function() os.execute("rm -rf " .. H.root) end)

  it("runs a program that reads the system: cat /etc/hostname", function()
    local res = exec { "cat", "/etc/hostname" }
    assert.are.equal("ok", res.cause, res.message)
    assert.are.equal(0, res.exit_code)
    assert.are.equal(H.slurp("/etc/hostname"), res.stdout)
    assert.are.equal("tool", res.policy)
    assert.are.equal(H.ws, res.workspace)
  end)

  it("refuses writes to the system: echo x > /etc/x", function()
    local res = sh "echo x > /etc/airlock-exec-x"
    assert.are.equal("exit", res.cause)
    assert.are_not.equal(0, res.exit_code)
    -- everything outside the workspace is a read-only mount, under Landlock's rules
    assert.matches("Read%-only file system", res.stderr)
    assert.is_nil(io.open("/etc/airlock-exec-x"))
  end)

  it("writes inside the workspace, and nowhere beside it", function()
    local beside = "/var/tmp/airlock-exec-beside-" .. H.pid()
    local res = sh("echo inside > note.txt && echo beside > " .. beside)
    assert.are.equal("exit", res.cause)
    assert.matches("Directory nonexistent", res.stderr)   -- /var/tmp is not in the program's view
    assert.are.equal("inside\n", H.slurp(H.ws .. "/note.txt"))
    assert.is_nil(io.open(beside))
    -- The workspace's parent is under /tmp here: the program sees the private
    -- /tmp there, so what it writes beside the workspace never reaches the host.
    res = sh "echo beside > ../outside.txt && cat ../outside.txt"
    assert.are.equal("beside\n", res.stdout)
    assert.is_nil(io.open(H.root .. "/outside.txt"))
    -- HOME is the workspace when the caller's home holds no git or shell
    -- configuration, and the host's own environment is not passed on.
    local bare = H.root .. "/bare-home"
    assert(os.execute("mkdir -p " .. bare))
    local env = exec({ "env" }, { env = { EXTRA = "given" }, home = bare })
    assert.matches("\nHOME=" .. H.ws:gsub("%p", "%%%0") .. "\n", "\n" .. env.stdout)
    assert.matches("\nEXTRA=given\n", "\n" .. env.stdout)
    assert.matches("\nPATH=/usr/local/bin:/usr/bin:/bin:", "\n" .. env.stdout)
    assert.is_nil(env.stdout:find("BUSTED", 1, true))
    assert.is_nil(env.stdout:find("\nUSER=", 1, true))
  end)

  it("compiles a C program with gcc and runs what it built; without workspace_exec, not", function()
    H.write(H.ws .. "/hello.c", '#include <stdio.h>\nint main(void) { puts("built and ran"); return 0; }\n')
    local res = sh "gcc -O2 -o hello hello.c && ./hello"
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.are.equal("built and ran\n", res.stdout)
    res = sh("./hello", { policy = { tool = { workspace_exec = false } } })
    assert.are.equal("exit", res.cause)
    assert.matches("Permission denied", res.stderr)
    -- Locked off, it cannot be turned back on: false -> true loosens.
    local policy = require "airlock.policy"
    local strict = policy.extend("tool", { locked = policy.append { "tool.workspace_exec" },
                                           tool = { workspace_exec = false } })
    local ok, err = pcall(policy.extend, strict, { tool = { workspace_exec = true } })
    assert.is_false(ok)
    assert.matches("tool.workspace_exec is locked", err)
  end)

  it("gives a private, empty /tmp that the host never sees", function()
    local marker = "/tmp/airlock-exec-private-" .. H.pid()
    local host = "/tmp/airlock-exec-host-" .. H.pid()
    H.write(host, "host\n")
    local res = sh("ls -A /tmp; echo secret > " .. marker .. " && cat " .. marker .. " && echo $TMPDIR",
      { workspace = H.ws })
    os.remove(host)
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    -- Only the mount point of the workspace (under /tmp here) is in it, and
    -- that of the airlock command's directory when this build is under /tmp.
    local tops = { [H.ws:match("^/tmp/([^/]+)")] = true }
    local cmd = require("airlock.core").fs_realpath(H.bin .. "/airlock")
    if cmd:match("^/tmp/") then tops[cmd:match("^/tmp/([^/]+)")] = true end
    local listed = {}
    for name in pairs(tops) do listed[#listed + 1] = name end
    table.sort(listed)
    assert.are.equal(table.concat(listed, "\n") .. "\nsecret\n/tmp\n", res.stdout)
    assert.is_nil(io.open(marker))
  end)

  it("keeps a workspace that lies under /tmp visible beneath the private /tmp", function()
    local ws = H.tmpdir()
    assert.matches("^/tmp/", ws)
    local res = sh("echo kept > kept.txt && pwd", { workspace = ws })
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.are.equal(ws .. "\n", res.stdout)
    assert.are.equal("kept\n", H.slurp(ws .. "/kept.txt"))
    os.execute("rm -rf " .. ws)
  end)

  it("gives a program that opens a socket an errno it handles, naming the call", function()
    local res = exec { "/usr/bin/python3", "-c",
      "import socket\ntry:\n  socket.socket()\nexcept OSError as e:\n  print('refused', e.errno)" }
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.are.equal("refused 97\n", res.stdout)   -- EAFNOSUPPORT
    assert.are.same({ { syscall = "socket", errno = "EAFNOSUPPORT", count = 1 } }, res.refused)
    -- The control: unconfined, the same program gets its socket.
    assert.are.equal("", H.sh("/usr/bin/python3 -c \"import socket\ntry:\n  socket.socket()\n" ..
      "except OSError as e:\n  print('refused', e.errno)\""))
  end)

  it("kills the run instead under a policy that says refuse = \"kill\"", function()
    local pol = policy.extend("tool", { tool = { confine = { seccomp = {
      promises = "stdio rpath wpath cpath fattr proc exec tty id unix", refuse = "kill" } } } })
    local res = exec({ "/usr/bin/python3", "-c", "print(1, flush=True)\nimport socket; socket.socket()" },
      { policy = pol })
    assert.are.equal("seccomp", res.cause)
    assert.matches("system call socket", res.message)
    assert.are.equal("1\n", res.stdout)
  end)

  it("leaves even a program allowed sockets with no network: 127.0.0.1 is unreachable", function()
    -- A real listener on the host's loopback, which the program must not reach.
    local srv = io.popen("exec /usr/bin/python3 -c 'import socket,time,os\n" ..
      "s=socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(1); print(s.getsockname()[1], os.getpid(), flush=True); time.sleep(600)'")
    local port, pid = srv:read("n", "n")
    assert(port and pid, "the listener did not start")
    -- The control: it is there, and reachable from the host (killed below, not timed out).
    assert.are.equal("connected\n", H.sh("env -u LD_PRELOAD python3 -c 'import socket\n" ..
      "socket.create_connection((\"127.0.0.1\", " .. port .. "), timeout=60); print(\"connected\")'"))
    local pol = { unconfined = true,   -- inet and a port: more than the stock tool grants
                  tool = { confine = { seccomp = { promises = "stdio rpath wpath cpath fattr proc exec tty inet" },
                                       landlock = { connect = { port } } } } }
    local res = exec({ "/usr/bin/python3", "-c",
      "import socket\ns=socket.socket()\ntry:\n  s.connect(('127.0.0.1', " .. port .. "))\n  print('connected')\n" ..
      "except OSError as e:\n  print('refused', e.errno)" }, { policy = pol })
    os.execute("kill " .. math.tointeger(pid))
    srv:close()
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.matches("^refused %d+", res.stdout)
    assert.is_nil(res.stdout:find("connected", 1, true))
  end)

  it("contains a fork bomb with the pids limit; the shell and the host stay responsive", function()
    -- The bomb runs until its cgroup has refused forks (the kernel's own
    -- pids.events) and the host has started programs of its own meanwhile;
    -- then the host tells the shell beside the bomb to finish (a file in the
    -- workspace), and the run ends with it. Nothing here waits on a clock.
    local base = assert(require("airlock.core").pids_cgroup())
    local out, go = os.tmpname(), H.ws .. "/go"
    os.remove(go)
    local bomb = io.popen(H.bin .. "/airlock exec --json --timeout " .. H.GUARD_S .. "s --workspace " .. H.ws ..
      " -- bash -c '( :(){ :|:& };: ) & echo alive; until [ -e go ]; do :; done; echo still' > " .. out ..
      " 2>&1 & echo $!; wait $!; echo done")
    local pid = math.tointeger(tonumber(bomb:read("l")))
    H.wait_until("the bomb's pids cgroup to refuse a fork", function()
      for name in lfs.dir(base) do
        if name:match("^" .. pid .. "%-") then
          local n = tonumber((H.slurp(base .. "/" .. name .. "/pids.events") or ""):match("max (%d+)"))
          if n and n > 0 then return true end
        end
      end
    end)
    for i = 1, 20 do assert(os.execute("true"), "the host could not start program " .. i) end
    H.write(go, "")
    assert.are.equal("done", bomb:read("l"))
    bomb:close()
    os.remove(go)
    local res = assert(require("dkjson").decode(H.read(out)))
    os.remove(out)
    assert.are.equal("ok", res.cause, res.message)   -- the shell's own end, not the guard's
    assert.are.equal("alive\nstill\n", res.stdout)  -- the shell went on working beside it
    assert.are.equal(128, res.usage.pids_peak)     -- held at the limit
    assert.is_true(res.usage.pids_refused > 0)
    -- Nothing of it survives, and the next program starts and runs.
    assert.are.equal(0, #H.children())
    local nxt = exec { "true" }
    assert.are.equal("ok", nxt.cause)
  end)

  it("ends sleep 100 at the timeout with cause deadline", function()
    local res = exec({ "sleep", "100" }, { timeout = "1s" })
    assert.are.equal("deadline", res.cause)
    assert.matches("deadline of 1000 ms", res.message)   -- sleep 100 itself would end ok
    assert.is_true(res.usage.wall_ms >= 1000, res.usage.wall_ms)
  end)

  it("cuts yes at the capture limit and kills it at the deadline, the parent's memory flat", function()
    local before = H.rss_kb()
    local res = exec({ "yes" }, { timeout = "1s", capture = "64K" })
    assert.are.equal("deadline", res.cause)
    assert.are.equal(65536, #res.stdout)
    assert.is_true(res.stdout_truncated)
    assert.matches("^y\ny\n", res.stdout)
    assert.is_true(H.rss_kb() - before < 8 * 1024, "RSS grew by " .. (H.rss_kb() - before) .. " KiB")
  end)

  it("passes a declared secret and shows only its redaction", function()
    H.write(H.root .. "/token", "s3cr3t-value-9f8e\n")
    local pol = { secrets = { token = { file = H.root .. "/token" } }, tool = { secrets = { TOKEN = "token" } } }
    local res = sh("echo \"token=$TOKEN\"; echo \"$TOKEN\" >&2", { policy = pol })
    assert.are.equal("ok", res.cause, res.message)
    assert.are.equal("token=[redacted:token]\n", res.stdout)
    assert.are.equal("[redacted:token]\n", res.stderr)
    -- Streamed lines are redacted too.
    local streamed = {}
    res = sh("printf '%s\\n' \"$TOKEN\" \"$TOKEN\"", {
      policy = pol, stream = function(which, line) streamed[#streamed + 1] = which .. ":" .. line end })
    assert.are.same({ "stdout:[redacted:token]", "stdout:[redacted:token]" }, streamed)
  end)

  it("refuses to make a user namespace or mount (unshare -U, mount, a setuid binary gains nothing)", function()
    -- A refused call fails with EPERM, named in the result; the run goes on.
    local res = sh "unshare -U true; echo rc=$?"
    assert.are.equal("ok", res.cause, res.message)
    assert.matches("rc=1", res.stdout)
    assert.matches("Operation not permitted", res.stderr)
    local named = {}
    for _, r in ipairs(res.refused) do named[r.syscall] = r.errno end
    assert.are.equal("EPERM", named.unshare)
    -- The control: unconfined, unshare -U works.
    assert.are.equal("rc=0\n", H.sh("unshare -U true; echo rc=$?"))
    -- mount and su are setuid root: no_new_privs makes exec grant nothing, so
    -- they run as uid 65534 without a capability, and the filter stops them.
    assert.is_truthy(H.sh("test -u /usr/bin/mount && test -u /usr/bin/su && echo setuid"):find("setuid"))
    res = sh "mount -t tmpfs none /tmp; echo rc=$?"
    assert.matches("rc=[1-9]", res.stdout)
    named = {}
    for _, r in ipairs(res.refused) do named[r.syscall] = r.errno end
    assert.is_truthy(named.mount or named.setuid or named.fsopen, res.stderr)
    res = sh "su -c 'id -u' root"
    assert.is_nil(res.stdout:find("0\n", 1, true))
    assert.are.equal("65534\n", exec({ "id", "-u" }).stdout)
    -- And with the filter off (a policy without seccomp), the kernel itself says no.
    res = sh("mount -t tmpfs none /tmp; echo rc=$?", { policy = { unconfined = true, tool = { confine = { seccomp = false } } } })
    assert.are.equal("ok", res.cause, res.message)
    assert.matches("rc=[1-9]", res.stdout)
  end)

  it("feeds stdin from a string and from a file", function()
    local big = string.rep("0123456789", 100000)   -- 1 MB: more than a pipe holds
    local res = exec({ "wc", "-c" }, { stdin = big })
    assert.are.equal("1000000\n", res.stdout)
    H.write(H.root .. "/in.txt", "from a file\n")
    res = exec({ "cat" }, { stdin_file = H.root .. "/in.txt" })
    assert.are.equal("from a file\n", res.stdout)
    local _, err = airlock.exec { argv = { "cat" }, workspace = H.ws, stdin_file = "/nonexistent/x" }
    assert.matches("^stdin: /nonexistent/x: No such file", err)
  end)

  it("streams output line by line while the program runs", function()
    -- The program prints its second line only once the first has reached
    -- the callback (which makes "seen" in the workspace): were the lines
    -- collected until the end, it would say "not streamed" instead.
    -- The third waits for the second the same way, so the order the
    -- callback sees never depends on which pipe is read first.
    local got = {}
    os.remove(H.ws .. "/seen")
    os.remove(H.ws .. "/seen2")
    local wait = function(f)
      return "i=0; until [ -e " .. f .. " ] || [ $i -ge " .. H.GUARD_S * 20 .. " ]; do sleep 0.05; i=$((i+1)); done; "
    end
    local res = sh("echo one; " .. wait("seen") .. "[ -e seen ] && echo two >&2 || echo not streamed >&2; " ..
      wait("seen2") .. "printf three", {
      stream = function(which, line)
        got[#got + 1] = { which, line }
        if line == "one" then H.write(H.ws .. "/seen", "") end
        if line == "two" then H.write(H.ws .. "/seen2", "") end
      end })
    os.remove(H.ws .. "/seen")
    os.remove(H.ws .. "/seen2")
    assert.are.equal("ok", res.cause)
    assert.are.same({ { "stdout", "one" }, { "stderr", "two" }, { "stdout", "three" } }, got)
  end)

  it("ends the program when a stream callback raises, and passes the error on", function()
    local ok, err = pcall(airlock.exec, { argv = { "sh", "-c", "echo first; sleep 30" }, workspace = H.ws,
      stream = function() error("callback broke") end })
    assert.is_false(ok)
    assert.matches("callback broke", err)
    collectgarbage()
    assert.are.equal(0, #H.children())
  end)

  it("lets a program ask for effects on fd 3 with `airlock call`, under the same policy and ledger", function()
    local dir = H.root .. "/ledger"
    local res = sh("airlock call log '{\"text\":\"from a tool\"}' && airlock call nope '{}'; echo rc=$?",
      { ledger = dir })
    assert.are.equal("ok", res.cause, res.message)
    assert.matches("^true\nrc=3\n$", res.stdout)
    assert.matches("nope", res.stderr)
    assert.are.equal("from a tool", res.log)
    assert.are.equal(2, res.usage.effects)
    local v = assert(airlock.ledger.verify(dir))
    assert.is_true(v.ok)
    local out = H.sh(H.bin .. "/airlock ledger show " .. dir)
    assert.matches("call%s+run 1%s+log", out)
    assert.matches("argv=", out)
  end)

  it("holds a program of a user who may not make cgroups with RLIMIT_NPROC instead", function()
    -- As uid 65534 the pids hierarchy is not writable; the program's own user
    -- namespace makes RLIMIT_NPROC count its processes (root would be exempt).
    local nobody = H.NOBODY
    local cmd = require("airlock.core").fs_realpath(H.bin .. "/airlock")
    local probe = H.sh(nobody .. cmd .. " version 2>&1; echo rc=$?")
    if not probe:match("rc=0") then
      pending("skipped: uid 65534 cannot run " .. cmd .. " here: " .. probe)
      return
    end
    local ws = H.tmpdir()
    assert(os.execute("chmod 777 " .. ws))
    -- The program's processes carry a mark of their own (bash's $0), so what
    -- is left over is counted by it, not by whatever else runs as uid 65534.
    local mark = "airlock-nproc-" .. H.pid() .. "-" .. math.random(1, 1 << 30)
    local function marked()
      local n = 0
      for pid in lfs.dir("/proc") do
        if pid:match("^%d+$") and (H.slurp("/proc/" .. pid .. "/cmdline") or ""):find(mark, 1, true) then n = n + 1 end
      end
      return n
    end
    -- The bomb runs until this host sees a hundred of its processes (by the
    -- mark), then the shell beside it is told to finish (a file in the
    -- workspace) and the run ends with it: no clock decides anything.
    local outf = os.tmpname()
    local bomb = io.popen("cd " .. ws .. " && " .. nobody .. cmd .. " exec --json --timeout " .. H.GUARD_S ..
      "s --workspace " .. ws .. " -- bash -c '( :(){ :|:& };: ) & echo alive; until [ -e go ]; do :; done; " ..
      "echo still' " .. mark .. " > " .. outf .. " 2>&1; echo done")
    H.wait_until("the bomb to grow", function() return marked() >= 100 end)
    H.write(ws .. "/go", "")
    assert.are.equal("done", bomb:read("l"))
    bomb:close()
    os.execute("rm -rf " .. ws)
    local out = H.read(outf)
    os.remove(outf)
    local res = assert(require("dkjson").decode(out), out)
    assert.are.equal("ok", res.cause, res.message)
    assert.are.equal("alive\nstill\n", res.stdout)
    assert.matches("^skipped: pids: cannot create cgroups in .*RLIMIT_NPROC=128", res.confinement.cgroup)
    assert.matches("memory %(cannot create cgroups in .*%): bounded per process by rlimits instead", res.confinement.cgroup)
    assert.matches("nproc=128", res.confinement.rlimits)
    -- Nothing of it is left (read from /proc: procps hangs under the ASan preload).
    local left = marked()
    -- control: the mark is findable in a process that has it (one process,
    -- alive until killed)
    local p = io.popen("env -u LD_PRELOAD /usr/bin/python3 -c 'import signal; signal.pause()' " .. mark .. " & echo $!")
    local ctl = p:read("l")
    p:close()
    -- (a process in the middle of its exec shows an empty command line for a
    -- moment: the control is looked for until it has settled)
    local found = pcall(H.wait_until, "the marked control", function() return marked() == 1 end, 30)
    os.execute("kill " .. ctl)
    assert.is_true(found, "the mark did not find the control process")
    assert.are.equal(0, left)
  end)

  it("fails closed when the cgroups cannot be had, and runs without them only when told", function()
    -- (--ceiling memory=0: lifting tool.limits.memory is a budget past the default memory ceiling)
    local pretend = "AIRLOCK_TEST_PRETEND_ABSENT=cgroup " .. H.bin .. "/airlock exec --ceiling memory=0 --workspace " ..
      H.ws
    local out = H.sh(pretend .. " -- true 2>&1; echo rc=$?")
    assert.matches("confinement: the pids limit", out)
    assert.matches("rc=125", out)
    -- Each bound that needs a cgroup is refused in turn until it is lifted by name.
    local limits = {}
    for _, bound in ipairs { "pids", "memory", "cpu" } do
      limits[#limits + 1] = bound .. " = 0"
      H.write(H.root .. "/lifted.lua", 'return require("airlock.policy").extend("tool", { tool = { limits = { ' ..
        table.concat(limits, ", ") .. ' } } })\n')
      out = H.sh(pretend .. " --policy " .. H.root .. "/lifted.lua --json -- true 2>&1; echo rc=$?")
      if bound ~= "cpu" then
        assert.matches("rc=125", out)
        assert.matches("confinement: the " .. (bound == "pids" and "memory" or "cpu") .. " limit", out)
      end
    end
    assert.matches("rc=0", out)
    assert.matches("skipped: tool.limits.pids is 0", out)
  end)

  it("serves the Python client of examples/tool-effects the same way", function()
    assert(os.execute("cp examples/tool-effects/airlock_effects.py " .. H.ws .. "/"))
    local res = exec { "/usr/bin/python3", "-c", table.concat({
      "import sys; sys.path.insert(0, '.')",
      "from airlock_effects import call, Denied",
      "print(call('clock.now')['time'] > 0)",
      "call('log', {'text': 'from python'})",
      "try:\n  call('fs.write', {'path': 'x'})\nexcept Denied as e:\n  print('denied')",
    }, "\n") }
    assert.are.equal("ok", res.cause, res.message .. res.stderr)
    assert.are.equal("True\ndenied\n", res.stdout)
    assert.are.equal("from python", res.log)
  end)

  it("says when a copy earlier on PATH is passed over (a shim outside the view) and which runs instead", function()
    local shims = H.root .. "/shims"
    assert(os.execute("mkdir -p " .. shims))
    H.write(shims .. "/cat", "#!/bin/sh\necho shim\n")
    assert(os.execute("chmod +x " .. shims .. "/cat"))
    -- Control: unconfined, the shim is the one a shell finds first.
    assert.are.equal("shim\n", (H.sh("PATH=" .. shims .. ":/usr/bin:/bin cat /dev/null")))
    local res = exec({ "cat", "/etc/hostname" }, { env = { PATH = shims .. ":/usr/bin:/bin" } })
    assert.are.equal(H.slurp("/etc/hostname"), res.stdout)
    assert.are.equal("/usr/bin/cat", res.program)
    assert.matches("^'cat' at " .. (shims .. "/cat"):gsub("%p", "%%%0") .. " is outside what the policy lets " ..
      "programs run; ran /usr/bin/cat instead %(tool = { grant = { exec = { \"" .. shims:gsub("%p", "%%%0") ..
      "\" } } } would grant its directory%)$", res.path_passed)
    -- Nothing passed over: nothing said.
    assert.is_nil(exec({ "cat", "/etc/hostname" }, { env = { PATH = "/usr/bin:/bin" } }).path_passed)
    -- The command says it on one stderr line.
    local out = H.sh("PATH=" .. shims .. ":/usr/bin:/bin " .. H.bin ..
      "/airlock exec --no-tty --workspace " .. H.ws .. " -- cat /dev/null")
    assert.matches("^airlock exec: 'cat' at [^\n]* ran /usr/bin/cat instead [^\n]*\n$", out)
  end)

  describe("HOME", function()
    -- A caller's home outside /tmp (a private /tmp would hide it), holding
    -- git's configuration and a file of its own that must stay hidden.
    local home = "/var/tmp/airlock-spec-home-" .. H.pid()
    setup(function()
      assert(os.execute("mkdir -p " .. home .. "/.ssh"))
      H.write(home .. "/.gitconfig", "[user]\n\tname = Spec Person\n\temail = spec@example.invalid\n")
      H.write(home .. "/.ssh/id_spec", "not a real key\n")
      assert(os.execute("chmod -R a+rX " .. home))
    end)
    teardown(function() os.execute("rm -rf " .. home) end)

    local script = "echo \"$HOME\"; git init -q repo && cd repo && echo a > f && git add f && " ..
      "git commit -qm one && git log --format='%an <%ae>'; cat " .. home .. "/.ssh/id_spec >/dev/null 2>&1 || " ..
      "echo key-hidden; git config --global x.y z 2>/dev/null || echo global-refused"

    it("is the workspace, and git commits as the caller: its git configuration shown read-only", function()
      -- Control: unconfined, the caller's files are in plain view: git commits
      -- as the caller and the key is readable.
      local ctl = H.sh("cd " .. H.tmpdir() .. " && HOME=" .. home .. " sh -c 'echo \"$HOME\"; git init -q repo && " ..
        "cd repo && echo a > f && git add f && git commit -qm one && git log --format=\"%an <%ae>\" && " ..
        "cat \"$HOME/.ssh/id_spec\"'")
      assert.are.equal(home .. "\nSpec Person <spec@example.invalid>\nnot a real key\n", ctl)
      local ws = H.tmpdir()
      local res = sh(script, { workspace = ws, home = home })
      assert.are.equal(ws .. "\nSpec Person <spec@example.invalid>\nkey-hidden\nglobal-refused\n", res.stdout,
        res.stderr)
      assert.is_nil(io.open(ws .. "/.gitconfig"))        -- --global wrote nothing into the workspace
      assert.is_nil(io.open(ws .. "/repo/.gitconfig"))   -- nor into the repository
      assert.are.equal("[user]\n\tname = Spec Person\n\temail = spec@example.invalid\n", H.slurp(home .. "/.gitconfig"))
      -- The home directory the program sees is the view's, not the host's (a
      -- watch or a lock on it reaches nothing of the caller's): another inode.
      local host_id = H.sh("stat -c %d:%i " .. home)
      assert.are.equal(host_id, H.sh("sh -c 'stat -c %d:%i " .. home .. "'"))   -- control: the same, unconfined
      local inside = sh("stat -c %d:%i " .. home, { workspace = H.tmpdir(), home = home })
      assert.are.equal(0, inside.exit_code, inside.stderr)
      assert.matches("^%d+:%d+\n$", inside.stdout)
      assert.are_not.equal(host_id, inside.stdout)
      -- A caller with no git configuration: nothing named, git asks who it is.
      local bare = H.tmpdir()
      res = sh(script, { workspace = H.tmpdir(), home = bare })
      assert.matches("Author identity unknown", res.stderr)
    end)

    it("is the caller's under tool.home = \"caller\": read-only, its git and shell configuration alone", function()
      local ws = H.tmpdir()
      local res = sh(script .. "; ls -a \"$HOME\" >/dev/null 2>&1 || echo home-unlisted",
        { workspace = ws, home = home, policy = policy.extend("tool", { tool = { home = "caller" } }) })
      assert.are.equal(home .. "\nSpec Person <spec@example.invalid>\nkey-hidden\nglobal-refused\nhome-unlisted\n",
        res.stdout, res.stderr)
    end)
  end)

  it("is a command: airlock exec prints the output and exits with the program's status", function()
    local base = H.bin .. "/airlock exec --workspace " .. H.ws
    local out = H.sh(base .. " -- sh -c 'echo out; echo err >&2; exit 7' 2>&1; echo rc=$?")
    assert.matches("out\n", out)
    assert.matches("err\n", out)
    assert.matches("rc=7\n$", out)
    out = H.sh(base .. " --timeout 300ms -- sleep 5 2>&1; echo rc=$?")
    assert.matches("airlock exec: deadline: deadline of 300 ms passed", out)
    assert.matches("rc=124", out)
    out = H.sh(base .. " -- cat /root/.airlock-spec-absent 2>&1; echo rc=$?")
    assert.matches("rc=1\n$", out)   -- /root is not in the view: cat fails, exit 1
    -- /proc is the run's own: airlock-init (1), sh (2), ls and grep; nothing of the host's.
    out = H.sh(base .. " -- sh -c 'ls /proc | grep -c \"^[0-9]*$\"; cat /proc/1/comm'")
    assert.are.equal("4\nairlock-init\n", out)
    out = H.sh(base .. " --bogus -- true 2>&1; echo rc=$?")
    assert.matches("unknown option %-%-bogus", out)
    assert.matches("rc=125", out)
    out = H.sh(base .. " 2>&1; echo rc=$?")
    assert.matches("no program given", out)
    -- --json: the whole result; --stdin -: the command's own stdin; --env.
    local dk = require "dkjson"
    out = H.sh("printf 'in' | " .. base .. " --json --stdin - --env GREETING=hi -- sh -c 'cat; echo \" $GREETING\"'")
    local r = assert(dk.decode(out))
    assert.are.equal("ok", r.cause)
    assert.are.equal("in hi\n", r.stdout)
    assert.are.equal(H.ws, r.workspace)
    -- --stream: lines come out as they are printed.
    out = H.sh(base .. " --stream -- sh -c 'echo a; echo b' ")
    assert.are.equal("a\nb\n", out)
  end)

  it("runs programs from two brokers at once, each in a pids cgroup of its own", function()
    -- Each broker numbers its runs from 1: the second exec starts (on a broker
    -- of its own) while the first one's program is still running.
    local inner
    local outer = exec({ "sh", "-c", "echo started; sleep 0.3; echo done" }, {
      stream = function(_, line)
        if line == "started" then inner = exec { "sh", "-c", "echo inner" } end
      end })
    assert.are.equal("ok", outer.cause, outer.message)
    assert.are.equal("started\ndone\n", outer.stdout)
    assert.are.equal("ok", inner.cause, inner.message)
    assert.are.equal("inner\n", inner.stdout)
    assert.are.equal(1, outer.run)
    assert.are.equal(1, inner.run)
  end)

  it("ends a program that abuses fd 3 with cause protocol, the host unharmed", function()
    -- A 4 GiB length header: refused before anything is allocated.
    -- (it then sleeps past the guard: only the header can end it as protocol)
    local res = exec { "/usr/bin/python3", "-c", "import os, time; os.write(3, b'\\xff\\xff\\xff\\xff'); time.sleep(600)" }
    assert.are.equal("protocol", res.cause)
    assert.matches("exceeds the limit", res.message)
    -- A kind only workers may send.
    res = exec { "/usr/bin/python3", "-c", table.concat({
      "import os, struct, msgpack, time",
      "b = msgpack.packb({'t': 'ready', 'v': 1, 'confined': {}})",
      "os.write(3, struct.pack('>I', len(b)) + b); time.sleep(600)" }, "\n") }
    assert.are.equal("protocol", res.cause)
    assert.matches("may only send 'call' frames", res.message)
  end)

  it("reports every layer it applied", function()
    local res = exec { "true" }
    for _, layer in ipairs { "namespaces", "rlimits", "capabilities", "no_new_privs", "landlock", "seccomp", "tmp", "cgroup" } do
      assert.matches("^applied", res.confinement[layer], layer)
    end
  end)

  it("says clearly what is wrong with bad input", function()
    assert.has_error(function() airlock.exec { argv = "ls" } end, "exec: 'argv' must be a list {program, args...} of strings")
    assert.has_error(function() airlock.exec { argv = { "ls" }, bogus = 1 } end, "exec: unknown option 'bogus'")
    local _, err, code = airlock.exec { argv = { "no-such-program-here" }, workspace = H.ws }
    assert.are.equal("exec", code)
    assert.matches("not found in PATH", err)
    _, err, code = airlock.exec { argv = { "true" }, workspace = H.root .. "/missing" }
    assert.are.equal("workspace", code)
    assert.matches("not an existing directory", err)
    for _, ws in ipairs { "/", "/usr", "/etc" } do
      _, err, code = airlock.exec { argv = { "true" }, workspace = ws }
      assert.are.equal("workspace", code)
      assert.matches(ws == "/" and "/ cannot be a workspace" or "which the policy keeps read%-only", err)
    end
    _, err, code = airlock.exec { argv = { "true" }, workspace = H.ws, policy = { tool = { tmp = "shared" } } }
    assert.are.equal("policy", code)
    assert.matches("tool.tmp", err)
    _, err = airlock.exec { argv = { "true" }, workspace = H.ws, timeout = "10m" }
    assert.matches("over the policy's tool.limits.deadline_ms", err)
  end)

  it("leaves no zombie, fd, mount or cgroup behind after 200 execs", function()
    exec { "true" }
    local fds, mounts = H.fd_count(), mount_count()
    for _ = 1, 200 do
      local res = exec { "true" }
      assert.are.equal("ok", res.cause, res.message)
    end
    assert.are.equal(fds, H.fd_count())
    assert.are.equal(mounts, mount_count())
    assert.are.equal(0, #H.children())
    local left = H.sh("ls " .. require("airlock.core").pids_cgroup() .. " 2>/dev/null | grep -c '^" .. H.pid() .. "-' || true")
    assert.are.equal("0", left:match("%d+"))
  end)

  it("gives a program on a terminal one of its own, relayed; the caller's terminal stays the caller's", function()
    H.write(H.ws .. "/tty.py", "import os, sys\ntry:\n  os.tcsetpgrp(0, os.getpgrp()); print('took it')\n" ..
      "except OSError as e:\n  print('refused', e.errno)\nprint('leader', os.getsid(0) == os.getpid())\n" ..
      "print('tty', os.ttyname(0) if os.isatty(0) else None)\n" ..
      "try:\n  open('/dev/tty', 'w').write('via /dev/tty\\n'); print('dev tty ok')\n" ..
      "except OSError as e:\n  print('dev tty', e.errno)\n")
    local log = os.tmpname()
    local function on_tty(cmd, input)
      H.sh((input and ("printf '" .. input .. "' | ") or "") .. "timeout -k 5 " .. H.GUARD_S .. " script -qec '" ..
        cmd .. "' " .. log .. " >/dev/null")
      return H.read(log)
    end
    -- (script answers its own stdin's end by typing the terminal's EOF
    -- character, which an inner terminal may echo: hence no "^" anchors.)
    -- The control: the same program, unconfined, on the same kind of terminal.
    local control = on_tty("cd " .. H.ws .. " && tty && /usr/bin/python3 tty.py")
    assert.matches("took it", control)
    local caller_tty = control:match("(/dev/pts/%d+)")
    local cmd = require("airlock.core").fs_realpath(H.bin .. "/airlock")
    local base = cmd .. " exec --workspace " .. H.ws .. " -- "
    -- Its own terminal: it may take its foreground and open /dev/tty, and
    -- that terminal is a new one, not the caller's.
    local out = on_tty("cd " .. H.ws .. " && " .. base .. "/usr/bin/python3 tty.py")
    assert.matches("took it", out)
    assert.matches("leader True", out)
    assert.matches("via /dev/tty", out)
    assert.matches("dev tty ok", out)
    local inner = out:match("tty (/dev/pts/%d+)")
    assert.is_truthy(inner, out)
    assert.are_not.equal(caller_tty, inner)
    -- Input typed on the caller's terminal reaches it through the relay.
    out = on_tty(base .. "sh -c \"read x; echo got \\$x\"", "hello\\n")
    assert.matches("got hello", out)
    -- With --no-tty it is handed the caller's terminal as it is, in a session
    -- of its own: it cannot take the foreground (ENOTTY: not its controlling terminal).
    out = on_tty("cd " .. H.ws .. " && " .. cmd .. " exec --no-tty --workspace " .. H.ws .. " -- /usr/bin/python3 tty.py")
    os.remove(log)
    assert.matches("refused 25", out)
    assert.matches("leader True", out)
  end)

  it("refuses a workspace that holds the airlock installation", function()
    local core = require "airlock.core"
    -- The worker in use, and the command beside it that exec puts inside.
    local worker = core.fs_realpath(os.getenv("AIRLOCK_WORKER") or core.worker_path())
    local dir = worker:match("^(.*)/[^/]+$")
    local _, err, code = airlock.exec { argv = { "true" }, workspace = dir }
    assert.are.equal("workspace", code)
    assert.matches("part of the airlock installation", err)
    assert.are.equal("ok", exec({ "true" }).cause)   -- the control: a workspace of its own
  end)
end)

describe("what a run of airlock exec loads and digests", function()
  -- OpenSSL's libcrypto is opened on first use (core/sha256.c): a plain
  -- `airlock exec` hashes nothing, so it never loads it; --json shows the
  -- policy's digest, so it does. The dynamic loader says what it loads
  -- (LD_DEBUG=files); the program's environment is the policy's, so only the
  -- command's own loads are seen.
  local root
  setup(function() root = H.tmpdir() end)
  local function command(flags)
    return H.sh(string.format("LD_DEBUG=files %s/airlock exec --no-tty --workspace %s %s -- /bin/true", H.bin, root,
      flags))
  end

  it("does not load libcrypto for a plain run", function()
    local out, rc = command("")
    assert.equal(0, rc, out)
    assert.truthy(out:find("file=libc.so.6", 1, true), out)   -- the loader did speak
    assert.falsy(out:find("libcrypto", 1, true), out)
  end)

  it("loads it when the result shows the policy's digest (the control)", function()
    local out, rc = command("--json")
    assert.equal(0, rc, out)
    assert.truthy(out:find("libcrypto", 1, true), out)
    assert.truthy(out:match('"digest":"%x+"'), out)
  end)

  it("takes the digest unless asked not to, and always for a ledger", function()
    local function run(extra)
      local opts = { argv = { "/bin/true" }, workspace = root, timeout = H.GUARD_S .. "s" }
      for k, v in pairs(extra) do opts[k] = v end
      return assert(airlock.exec(opts))
    end
    local full = run({})
    assert.truthy(full.ok)
    assert.equal(64, #full.digest)
    assert.equal(full.digest, airlock.policy.digest(airlock.policy.load("tool")))
    local none = run({ digest = false })
    assert.truthy(none.ok)
    assert.is_nil(none.digest)
    local recorded = run({ digest = false, ledger = H.tmpdir() .. "/ledger" })
    assert.equal(full.digest, recorded.digest)
    assert.has_error(function() airlock.exec { argv = { "/bin/true" }, digest = "no" } end,
      "exec: 'digest' must be a boolean")
  end)
end)
