-- learn_spec.lua -- `airlock exec --learn`: the draft writer's rules on
-- tables (airlock.learn.draft), then real programs learned, each against a
-- control: the same command unconfined succeeds, and under the stock tool
-- policy alone it fails (its file lies outside the view), so the test can
-- fail; the draft must then run it. A secret the program reads is flagged,
-- never granted: the proof run shows the difference. --observe names the
-- grant for a path outside the view and a refused write; a hostile program
-- hands the listener a bad pointer, an overlong path and a path another
-- thread rewrites, and runs as it does unconfined; the setuid file it makes
-- unconfined is refused when observed. Run as root and as uid
-- 65534 (setpriv). Last, a corpus of everyday commands: the note printed
-- says how many got a draft that ran first time; a command whose tool or
-- network is absent is skipped with the reason.
local H = require "helper"
require "airlock"
local core = require "airlock.core"
local draft = require "airlock.learn.draft"

local AIRLOCK = core.fs_realpath(H.bin .. "/airlock")
local NOBODY = H.NOBODY

local function run(cmd) return H.sh(cmd .. " 2>&1; echo rc=$?") end
local function have(cmd) return H.sh("command -v " .. cmd .. " >/dev/null 2>&1 && echo yes") == "yes\n" end

-- A directory outside /tmp (the run's /tmp is its own) and outside the stock
-- view, readable by uid 65534: where fixtures the program must be granted live.
local function outside_dir()
  local p = io.popen("mktemp -d /var/tmp/airlock-learn-XXXXXX")
  local d = p:read("l")
  p:close()
  assert(os.execute("chmod 755 " .. d))
  return d
end

describe("airlock.learn.draft", function()
  local function stat_of(t) return function(p) return t[p] end end

  it("groups reads into directories, runs into their directory, and skips what the base covers", function()
    local d = draft.plan({ records = {
      { kind = "r", view = "+", path = "/var/lib/apt/lists/deb_Release" },
      { kind = "s", view = "+", path = "/var/lib/apt/lists/lock" },
      { kind = "s", view = "+", path = "/var" },
      { kind = "r", view = "+", path = "/etc/passwd" },
      { kind = "x", view = "+", path = "/opt/tool/bin/run" },
      { kind = "r", view = "+", path = "/opt/tool/lib/x.so" },
      { kind = "s", view = "-", path = "/nonexistent/probe" },
      { kind = "w", view = "+", path = "/srv/out/log.txt" },
    } }, { covered = { "/etc", "/usr" }, stat = stat_of {
      ["/var/lib/apt/lists/deb_Release"] = "file", ["/var/lib/apt/lists/lock"] = "file", ["/var"] = "dir",
      ["/var/lib/apt"] = "dir", ["/etc/passwd"] = "file", ["/opt/tool/bin/run"] = "file",
      ["/opt/tool/bin"] = "dir", ["/opt/tool/lib/x.so"] = "file", ["/opt/tool"] = "dir",
      ["/srv/out/log.txt"] = "file", ["/srv/out"] = "dir",
    } })
    assert.are.same({ "/var/lib/apt", "/opt/tool" }, { d.read[1].path, d.read[2].path })
    assert.are.equal(2, #d.read)
    assert.are.equal("/opt/tool/bin", d.exec[1].path)
    assert.are.equal("/srv/out/log.txt", d.write[1].path)
    assert.are.equal(1, d.missing)
    assert.matches("first needed by", draft.text(d, { argv = { "apt-get" } }))
  end)

  it("flags secrets and home-directory files as commented-out lines, never grants", function()
    local d = draft.plan({ records = {
      { kind = "r", view = "-", path = "/root/.ssh/id_ed25519" },
      { kind = "r", view = "-", path = "/home/ann/notes.txt" },
      { kind = "r", view = "+", path = "/srv/app/server.pem" },
      { kind = "r", view = "+", path = "/srv/app/config.ini" },
    } }, { covered = {}, stat = function() return "file" end })
    assert.are.equal(3, #d.flagged)
    assert.are.equal(1, #d.read)
    assert.are.equal("/srv/app/config.ini", d.read[1].path)   -- its group holds a secret: file by file
    local text = draft.text(d, { argv = { "x" } })
    for line in text:gmatch("[^\n]+") do
      if line:find("id_ed25519", 1, true) or line:find("server.pem", 1, true) then
        assert.matches("^%s*%-%- NOT GRANTED", line)
      end
    end
    assert.is_truthy(load(text))   -- the draft is Lua
  end)
end)

for _, caller in ipairs { { name = "root", prefix = "" }, { name = "uid 65534", prefix = NOBODY } } do
  describe("airlock exec --learn run by " .. caller.name, function()
    local ws, fx
    before_each(function()
      ws = outside_dir()
      assert(os.execute("chmod 777 " .. ws))
      fx = outside_dir()
    end)
    after_each(function() os.execute("rm -rf " .. ws .. " " .. fx) end)

    it("drafts the grant a program needs outside the view, and the draft runs it", function()
      H.write(fx .. "/data.txt", "learned\n")
      assert(os.execute("chmod 644 " .. fx .. "/data.txt"))
      local cmd = "sh -c 'cat " .. fx .. "/data.txt'"
      assert.are.equal("learned\nrc=0\n", run(caller.prefix .. cmd))   -- the control: unconfined
      local stock = run(caller.prefix .. AIRLOCK .. " exec --workspace " .. ws .. " -- " .. cmd)
      assert.is_nil(stock:find("^learned"))                            -- outside the stock view
      local out = ws .. ".draft.lua"
      local res = run(caller.prefix .. AIRLOCK .. " exec --workspace " .. ws .. " --learn " .. out .. " -- " .. cmd)
      assert.matches("draft ran again with no violation", res)
      assert.matches("rc=0\n$", res)
      local text = H.read(out)
      assert.matches("\"" .. fx:gsub("%p", "%%%0") .. "\",   %-%- why: first needed by " ..
        fx:gsub("%p", "%%%0") .. "/data.txt", text)
      local again = run(caller.prefix .. AIRLOCK .. " exec --workspace " .. ws .. " --policy " .. out .. " -- " .. cmd)
      assert.are.equal("learned\nrc=0\n", again)
      os.remove(out)
    end)

    it("flags a secret the program reads and does not grant it: the proof run shows the difference", function()
      os.execute("mkdir -p " .. fx .. "/.ssh && chmod 755 " .. fx .. "/.ssh")
      H.write(fx .. "/.ssh/id_ed25519", "not a real key\n")
      assert(os.execute("chmod 644 " .. fx .. "/.ssh/id_ed25519"))
      local cmd = "cat " .. fx .. "/.ssh/id_ed25519"
      assert.are.equal("not a real key\nrc=0\n", run(caller.prefix .. cmd))   -- the control
      local out = ws .. ".draft.lua"
      local res = run(caller.prefix .. AIRLOCK .. " exec --workspace " .. ws .. " --learn " .. out .. " -- " .. cmd)
      assert.matches("1 secrets or home%-directory files flagged", res)
      assert.matches("did not run as the learning run did", res)
      assert.matches("rc=1\n$", res)
      local text = H.read(out)
      assert.matches("%-%- NOT GRANTED %(ssh keys%)", text)
      for line in text:gmatch("[^\n]+") do
        if line:find("id_ed25519", 1, true) then assert.matches("^%s*%-%-", line) end
      end
      os.remove(out)
    end)

    it("lists the effects a program asked for that the base refuses, commented out, never granted", function()
      local out = ws .. ".draft.lua"
      local cmd = "sh -c 'airlock call log \"{\\\"text\\\":\\\"hi\\\"}\"; airlock call kv.get \"{}\"; " ..
        "airlock call kv.get \"{}\"; echo done'"
      local res = run(caller.prefix .. AIRLOCK .. " exec --workspace " .. ws .. " --learn " .. out .. " -- " .. cmd)
      assert.matches("1 effects asked for that the base policy does not grant", res)
      assert.matches("draft ran again with no violation", res)
      local text = H.read(out)
      assert.matches('\n    %-%- NOT GRANTED: %["kv%.get"%] = <a handler>,   %-%- the program asked for it 2 times', text)
      assert.is_nil(text:find('"log"', 1, true), text)   -- the control: log, which the base grants, is not listed
      local p = assert(loadfile(out))   -- the draft is a policy file all the same
      assert.is_table(p())
      os.remove(out)
    end)

    it("ends each run at --timeout: a program that hangs is stopped while learning and in the proof run", function()
      local out = ws .. ".draft.lua"
      local res = run(caller.prefix .. AIRLOCK .. " exec --workspace " .. ws .. " --timeout 1s --learn " .. out ..
        " -- sleep 600")
      assert.matches("failed in the learning run too %(deadline", res)
      assert.matches("rc=1\n$", res)
      assert.is_truthy(H.slurp(out), res)   -- the draft was written all the same
      os.remove(out)
      -- a timeout without a unit is refused, as for a plain run
      assert.matches("needs a unit", run(AIRLOCK .. " exec --timeout 1 --learn " .. out .. " -- true"))
    end)
  end)
end

for _, caller in ipairs { { name = "root", prefix = "" }, { name = "uid 65534", prefix = NOBODY } } do
  describe("airlock exec --observe run by " .. caller.name, function()
    local ws, fx
    before_each(function()
      ws = outside_dir()
      assert(os.execute("chmod 777 " .. ws))
      fx = outside_dir()
    end)
    after_each(function() os.execute("rm -rf " .. ws .. " " .. fx) end)

    it("records a program started from a file descriptor (fexecve), as it records one started by path", function()
      local py = "/usr/bin/python3"
      if not core.fs_realpath(py) then pending("skipped: " .. py .. " is not installed") return end
      -- python's os.execve takes a descriptor and runs it with fexecve
      -- (execveat of "" with AT_EMPTY_PATH); /bin/echo then prints
      local script = "import os\nfd = os.open('/bin/echo', os.O_RDONLY)\nos.execve(fd, ['echo', 'from fd'], {})\n"
      H.write(ws .. "/fx.py", script)
      assert(os.execute("chmod 644 " .. ws .. "/fx.py"))
      assert.are.equal("from fd\nrc=0\n", run("cd " .. ws .. " && " .. caller.prefix .. py .. " fx.py"))   -- the control
      local out = run(caller.prefix .. AIRLOCK .. " exec --observe --json --workspace " .. ws .. " -- " .. py .. " fx.py")
      local res = assert(require("dkjson").decode(out:match("^[^\n]+")), out)
      assert.are.equal("from fd\n", res.stdout)
      local echo = core.fs_realpath("/bin/echo")
      assert.is_truthy(res.observed:find("x+ " .. echo .. "\n", 1, true) or
        res.observed:find("x+ /bin/echo\n", 1, true), res.observed)
    end)

    it("names the field that would grant a path outside the view or a write refused, as violations", function()
      H.write(fx .. "/data.txt", "there\n")
      assert(os.execute("chmod 644 " .. fx .. "/data.txt"))
      -- the control: unconfined, the file is there and a writable directory takes the write
      local cmd = "sh -c 'cat " .. fx .. "/data.txt; echo x > " .. fx .. "/out.txt; echo y > made.txt'"
      if caller.prefix == "" then
        assert.are.equal("there\nrc=0\n", run("cd " .. ws .. " && " .. cmd))
        os.remove(fx .. "/out.txt")
      end
      local out = run(caller.prefix .. AIRLOCK .. " exec --observe --workspace " .. ws .. " -- " .. cmd)
      local q = fx:gsub("%p", "%%%0")
      assert.matches("refused " .. q .. "/data.txt: outside the program's view[^\n]*%(tool.grant.read%)", out)
      assert.matches("refused " .. q .. "/out.txt: [^\n]*%(tool.grant.write%)", out)
      assert.is_nil(out:find("made.txt", 1, true))   -- its own workspace: no violation
      -- without --observe, the same run says nothing of paths
      local plain = run(caller.prefix .. AIRLOCK .. " exec --workspace " .. ws .. " -- " .. cmd)
      assert.is_nil(plain:find("tool.grant.read", 1, true))
    end)
  end)
end

for _, caller in ipairs { { name = "root", prefix = "" }, { name = "uid 65534", prefix = NOBODY } } do
describe("airlock exec --observe run by " .. caller.name .. " against hostile path arguments", function()
  it("records nothing false and lets the kernel answer a bad pointer or an overlong path", function()
    local py = "/usr/bin/python3"
    if H.sh("test -x " .. py .. " && echo yes") ~= "yes\n" then pending("skipped: /usr/bin/python3 is not installed") return end
    -- openat with a pointer to unmapped memory, with a path past PATH_MAX,
    -- and one that is changed by another thread while the call waits
    local script = "import ctypes, os, threading\n" ..
      "libc = ctypes.CDLL(None, use_errno=True)\n" ..
      "def call(p):\n" ..
      "    r = libc.syscall(257, -100, p, 0, 0)\n" ..
      "    return ctypes.get_errno() if r < 0 else 0\n" ..
      "print(call(ctypes.c_void_p(8)))\n" ..
      "print(call(b'/' + b'a' * 5000))\n" ..
      "try:\n    os.close(os.open('suid', os.O_CREAT | os.O_WRONLY, 0o4755)); print('made')\n" ..
      "except OSError as e:\n    print(e.errno)\n" ..
      "buf = ctypes.create_string_buffer(b'/etc/hostname', 64)\n" ..
      "stop = []\n" ..
      "def flip():\n" ..
      "    while not stop:\n" ..
      "        buf.value = b'/nonexistent-x'; buf.value = b'/etc/hostname'\n" ..
      "t = threading.Thread(target=flip); t.start()\n" ..
      "for _ in range(200): call(buf)\n" ..
      "stop.append(1); t.join(); print('done')\n"
    local ws = outside_dir()
    H.write(ws .. "/hostile.py", script)
    assert(os.execute("chmod 777 " .. ws .. " && chmod 644 " .. ws .. "/hostile.py"))
    assert.are.equal("14\n36\nmade\ndone\nrc=0\n", run("cd " .. ws .. " && " .. caller.prefix .. py .. " hostile.py"))   -- the control
    os.remove(ws .. "/suid")
    local out = run(caller.prefix .. AIRLOCK .. " exec --observe --json --workspace " .. ws .. " -- " .. py .. " hostile.py")
    os.execute("rm -rf " .. ws)
    local res = assert(require("dkjson").decode(out:match("^[^\n]+")), out)
    assert.are.equal("14\n36\n1\ndone\n", res.stdout)   -- a setuid file is refused (EPERM) when observed too
    assert.are.equal("ok", res.cause)
    assert.are.equal(0, res.exit_code)
    -- the overlong path (past PATH_MAX) is not recorded; the changing one may be either
    assert.is_string(res.observed)
    assert.is_nil(res.observed:find("aaaaaaaaaaaaaaaa", 1, true))
    assert.is_truthy(res.observed:find("r+ /etc/hostname\n", 1, true))
  end)
end)
end

-- The corpus: each entry makes its fixture, says why it must be skipped (or
-- nil), and gives the command. Learned as root, through airlock.learn.tool.
describe("learn mode's corpus of everyday commands", function()
  local learn = require "airlock.learn.tool"
  local results = {}
  local fx
  setup(function() fx = outside_dir() end)
  teardown(function()
    os.execute("rm -rf " .. fx)
    local tried, ran, names = 0, 0, {}
    for _, r in ipairs(results) do
      if r.tried then
        tried = tried + 1
        if r.ran then ran = ran + 1 else names[#names + 1] = r.name end
      end
    end
    io.stderr:write(string.format("\nnote: learn mode corpus: %d of %d commands got a draft that ran first " ..
      "time%s\n", ran, tried, #names > 0 and (" (not: " .. table.concat(names, ", ") .. ")") or ""))
  end)

  local function case(name, prepare)
    it(name, function()
      local why, argv, opts = prepare()
      if why then
        results[#results + 1] = { name = name }
        pending("skipped: " .. why)
        return
      end
      local ws = outside_dir()
      assert(os.execute("chmod 777 " .. ws))
      opts = opts or {}
      local rep, err = learn.learn { argv = argv, out = ws .. ".draft.lua", workspace = ws, ports = opts.ports,
                                     env = opts.env, timeout = H.GUARD_S * 1000 }
      os.execute("rm -rf " .. ws .. " " .. ws .. ".draft.lua")
      assert.is_truthy(rep, err)
      results[#results + 1] = { name = name, tried = true, ran = rep.runs and rep.learned_ok }
      assert.is_true(rep.learned_ok, name .. ": the learning run failed: " .. tostring(rep.learned.stderr))
      assert.is_true(rep.runs, name .. ": " .. table.concat(rep.differences, "; "))
      -- The private /tmp is the run's own: nothing there is ever a grant (a
      -- compiler's temporary file is not there yet when its open is seen).
      for _, list in ipairs { "read", "write", "exec" } do
        for _, g in ipairs(rep.plan[list]) do
          assert.is_false(g.path == "/tmp" or g.path:sub(1, 5) == "/tmp/", name .. ": grants " .. g.path)
        end
      end
    end)
  end

  case("git clone of a local repository", function()
    if not have("git") then return "git is not installed" end
    local repo = fx .. "/repo"
    assert(os.execute("git init -q " .. repo .. " && git -C " .. repo ..
      " -c user.name=a -c user.email=a@b commit -q --allow-empty -m one && chmod -R a+rX " .. repo))
    return nil, { "git", "clone", "-q", repo, "copy" }
  end)

  case("make and cc of a small project", function()
    if not have("make") or not have("cc") then return "make or cc is not installed" end
    local src = fx .. "/proj"
    os.execute("mkdir -p " .. src)
    H.write(src .. "/main.c", "#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n")
    H.write(src .. "/Makefile", "hi: main.c\n\tcc -o $@ main.c\n")
    os.execute("chmod -R a+rX " .. src)
    return nil, { "sh", "-c", "cp " .. src .. "/main.c " .. src .. "/Makefile . && make -s && ./hi" }
  end)

  case("python3 behind a pyenv-style shim", function()
    -- the system's python3 (not one behind the caller's own shims, in a home directory)
    local real
    for _, p in ipairs { "/usr/bin/python3", "/usr/local/bin/python3" } do
      if not real and core.fs_realpath(p:match("^(.*)/") ) and H.sh("test -x " .. p .. " && echo yes") == "yes\n" then
        real = p
      end
    end
    if not real then return "python3 is not installed in /usr/bin or /usr/local/bin" end
    -- a shim: a directory with a python3 script that execs the real one (pyenv's shims do much the same)
    local shims = fx .. "/shims"
    os.execute("mkdir -p " .. shims)
    H.write(shims .. "/python3", "#!/bin/sh\nexec " .. real .. " \"$@\"\n")
    os.execute("chmod -R a+rx " .. shims)
    return nil, { shims .. "/python3", "-c", "print(1)" }
  end)

  case("curl to an allowed local host", function()
    if not have("curl") or not have("python3") then return "curl or python3 is not installed" end
    -- a local server on a free port (found by binding port 0), serving one file
    local port = tonumber((H.sh("python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); " ..
      "print(s.getsockname()[1])'")))
    local site = fx .. "/site"
    os.execute("mkdir -p " .. site)
    H.write(site .. "/index.html", "hello\n")
    os.execute("cd " .. site .. " && (python3 -m http.server " .. port ..
      " --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > " .. fx .. "/server.pid)")
    H.wait_until("the local server", function()
      return H.host("curl -s -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:" .. port .. "/index.html") == "200"
    end)
    finally(function() os.execute("kill $(cat " .. fx .. "/server.pid)") end)
    -- its port is none the learning run starts with: learned again with it allowed
    return nil, { "curl", "-sf", "http://127.0.0.1:" .. port .. "/index.html" }
  end)

  case("apt-get download from the mirror", function()
    if not have("apt-get") then return "apt-get is not installed" end
    local probe = H.host("curl -s -m 20 -o /dev/null -w '%{http_code}' http://deb.debian.org/debian/ 2>&1")
    if probe ~= "200" then return "the Debian mirror is unreachable from here (control: " .. probe .. ")" end
    if H.sh("apt-cache show hello >/dev/null 2>&1 && echo yes") ~= "yes\n" then
      return "the package lists do not know 'hello' (apt-get update has not run)"
    end
    return nil, { "apt-get", "download", "-q", "hello" }
  end)

  case("npm pack", function()
    if not have("npm") then return "npm is not installed" end
    local pkg = fx .. "/pkg"
    os.execute("mkdir -p " .. pkg)
    H.write(pkg .. "/package.json", '{"name":"learn-fixture","version":"1.0.0","files":["index.js"]}\n')
    H.write(pkg .. "/index.js", "module.exports = 1\n")
    os.execute("chmod -R a+rX " .. pkg)
    return nil, { "sh", "-c", "cp " .. pkg .. "/package.json " .. pkg .. "/index.js . && npm pack --silent" }
  end)

  case("pip install of a local wheel into a venv", function()
    if H.sh("python3 -c 'import venv, ensurepip' 2>/dev/null && echo yes") ~= "yes\n" then
      return "python3 has no venv or ensurepip module"
    end
    -- a minimal wheel made by hand (a zip with its metadata), so no index is needed
    local whl = fx .. "/learn_fixture-1.0-py3-none-any.whl"
    H.write(fx .. "/mkwheel.py", "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1], 'w')\n" ..
      "z.writestr('learn_fixture.py', 'X = 1\\n')\n" ..
      "z.writestr('learn_fixture-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: learn-fixture\\nVersion: 1.0\\n')\n" ..
      "z.writestr('learn_fixture-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n" ..
      "z.writestr('learn_fixture-1.0.dist-info/RECORD', '')\nz.close()\n")
    assert(os.execute("python3 " .. fx .. "/mkwheel.py " .. whl))
    os.execute("chmod a+r " .. whl)
    return nil, { "sh", "-c", "python3 -m venv v && v/bin/pip install -q --no-index " .. whl ..
      " && v/bin/python -c 'import learn_fixture'" }
  end)
end)
