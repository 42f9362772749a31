-- exec_compat_spec.lua -- a compatibility corpus for `airlock exec`: everyday
-- programs (make, cc, coreutils, tar, git, python3, perl, sqlite3, ...) run
-- under `build/bin/airlock exec` and, in the same test, under bubblewrap with
-- the flags that give the same view (the system read-only, a private /tmp, one
-- writable workspace that is the cwd and HOME, no network, uid 65534, the
-- same environment). Their stdout, stderr and exit status must match.
--
-- Each case gets a fresh workspace for airlock and an identical fresh one for
-- bwrap (same files, different paths): scripts print relative paths, and the
-- workspace's path (and its name) are replaced by WS (WSNAME) in the output
-- before comparing. Where airlock differs on purpose (sockets, privilege),
-- the case asserts airlock's documented behaviour (docs/TOOLS.md) and
-- that its status is below 128: an errno the program handled, never a kill.
--
-- This file runs as root (as it does here: bwrap then gets --uid/--gid 65534,
-- the identity airlock gives a root caller's program). It is written to run
-- unprivileged too (airlock maps a caller who is not root to 65534 inside, and
-- bwrap gets the same --uid), but those runs happen elsewhere, not in this
-- file. A case whose program is not installed is skipped with pending() and
-- the reason; so is the whole corpus when bwrap is missing or cannot run here.
local H = require "helper"

local AIRLOCK = (H.sh("realpath " .. H.bin .. "/airlock")):gsub("\n$", "")
local BWRAP = "/usr/bin/bwrap"
local PATH = "/usr/local/bin:/usr/bin:/bin"
local ROOT = H.sh("id -u") == "0\n"
-- No case should take long: both sandboxes run under it, killed past it.
local LIMIT = "timeout -k 5 180 "

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function words(argv)
  local t = {}
  for i, a in ipairs(argv) do t[i] = q(a) end
  return table.concat(t, " ")
end
local function literal(s) return (s:gsub("%p", "%%%0")) end

-- What `bwrap` needs to give the view airlock's stock tool policy gives.
-- / here has bin, lib, lib64 and sbin as symbolic links into /usr.
local function bwrap_prefix(ws, home)
  local a = { BWRAP, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
    "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc" }
  for _, top in ipairs { "bin", "lib", "lib64", "sbin" } do
    local target = H.readlink("/" .. top)
    if target then
      for _, x in ipairs { "--symlink", target, "/" .. top } do a[#a + 1] = x end
    else
      for _, x in ipairs { "--ro-bind-try", "/" .. top, "/" .. top } do a[#a + 1] = x end
    end
  end
  for _, x in ipairs {
    "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--bind", ws, ws, "--chdir", ws,
    "--clearenv", "--setenv", "HOME", home and home.dir or ws, "--setenv", "PWD", ws, "--setenv", "TMPDIR", "/tmp",
    "--setenv", "PATH", PATH, "--setenv", "LANG", "C.UTF-8",
    -- airlock's identity for a root caller's program, and for anyone else's inside
    "--uid", "65534", "--gid", "65534" } do a[#a + 1] = x end
  -- The caller's configuration files, read-only, as airlock shows them in HOME.
  for _, name in ipairs(home and home.files or {}) do
    for _, x in ipairs { "--ro-bind", home.dir .. "/" .. name, home.dir .. "/" .. name } do a[#a + 1] = x end
  end
  a[#a + 1] = "--"
  return words(a)
end

-- (airlock passes its own stdin through as bwrap does; --stdin - says so)
local function airlock_prefix(ws, stdin_flag, home)
  return (home and ("HOME=" .. q(home.dir) .. " ") or "") .. words { AIRLOCK, "exec", "--workspace", ws } ..
    (stdin_flag and " --stdin -" or "") .. " --"
end

-- A fresh workspace holding the case's files (name -> content; a name ending
-- in "/" is an empty directory).
local function workspace(files)
  local ws = H.tmpdir()
  for name, content in pairs(files or {}) do
    local dir = name:match("^(.*)/[^/]*$")
    if dir then assert(os.execute("mkdir -p " .. q(ws .. "/" .. dir))) end
    if name:sub(-1) ~= "/" then H.write(ws .. "/" .. name, content) end
  end
  return ws
end

-- Runs one sandbox (prefix) on argv in ws, from ws, with a clean outer
-- environment; stdin from a file (or /dev/null), stdout through c.post (an
-- outer pipeline, e.g. "wc -c") when given. Returns {out, err, rc, ws}.
local function run(prefix, ws, argv, c, scratch, tag)
  local inf = scratch .. "/" .. tag .. ".in"
  H.write(inf, c.stdin or "")
  local out, err, rcf = scratch .. "/" .. tag .. ".out", scratch .. "/" .. tag .. ".err", scratch .. "/" .. tag .. ".rc"
  local cmd = "cd " .. q(ws) .. " && { " .. LIMIT .. "env -i PATH=" .. PATH .. " LANG=C.UTF-8 " .. prefix .. " " ..
    words(argv) .. " < " .. q(c.stdin and inf or "/dev/null") .. " 2> " .. q(err) .. "; echo $? > " .. q(rcf) ..
    "; } | " .. (c.post or "cat") .. " > " .. q(out)
  os.execute(cmd)
  local function norm(s)
    s = (s or ""):gsub(literal(ws), "WS")
    return (s:gsub(literal(ws:match("[^/]+$")), "WSNAME"))
  end
  return { out = norm(H.slurp(out)), err = norm(H.slurp(err)), rc = tonumber(H.slurp(rcf) or ""), ws = ws }
end

-- airlock's own line after a failed program, naming the calls its policy
-- refused (docs/TOOLS.md): the host's diagnostic, not the program's output.
local function without_refusals(s) return (s:gsub("airlock exec: the policy refused [^\n]*\n", "")) end

local function sh(script) return { "sh", "-c", script } end

-- Both failed with a status of their own (an errno they handled, never a
-- signal), and said the same.
local function cleanly_refused(a, b)
  for who, r in pairs { airlock = a, bwrap = b } do
    assert.is_true(r.rc ~= 0 and r.rc < 128, who .. " exited " .. tostring(r.rc))
  end
  assert.are.same({ out = b.out, err = b.err, rc = b.rc }, { out = a.out, err = a.err, rc = a.rc })
end

local C_SQ = [[
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  double x = argc > 1 ? atof(argv[1]) : 2.0;
  printf("sqrt(%g) = %.6f\n", x, sqrt(x));
  return 0;
}
]]

local PY_THREADS = [[
import threading, queue
q = queue.Queue()
def work(n): q.put(sum(range(n * 1000)))
ts = [threading.Thread(target=work, args=(i,)) for i in range(1, 9)]
for t in ts: t.start()
for t in ts: t.join()
print(sorted(q.get() for _ in ts)[-1], threading.active_count())
]]

local PY_ASYNC = [[
import asyncio, socket
async def main():
    a, b = socket.socketpair()
    r1, w1 = await asyncio.open_connection(sock=a)
    r2, w2 = await asyncio.open_connection(sock=b)
    w1.write(b"ping\n"); await w1.drain()
    w2.write((await r2.readline()).upper()); await w2.drain()
    print((await r1.readline()).decode().strip())
    await asyncio.sleep(0.01)
    for w in (w1, w2): w.close()
asyncio.run(main())
]]

local PY_SUBPROCESS = [[
import subprocess, sys
r = subprocess.run(["sh", "-c", "echo child; echo oops >&2; exit 3"], capture_output=True, text=True)
print(r.stdout.strip(), r.stderr.strip(), r.returncode)
print(subprocess.check_output([sys.executable, "-c", "print(6 * 7)"], text=True).strip())
k = subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
print("killed child:", k.returncode)
]]

local PY_TEMPFILE = [[
import os, tempfile
with tempfile.NamedTemporaryFile("w+", prefix="t") as f:
    f.write("kept"); f.flush(); f.seek(0)
    print(os.path.dirname(f.name), f.read())
d = tempfile.mkdtemp()
print(os.path.dirname(d), sorted(os.listdir(d)), tempfile.gettempdir())
os.rmdir(d)
]]

local PY_JSON = [[
import json
with open("in.json") as f: doc = json.load(f)
doc["total"] = sum(i["n"] for i in doc["items"])
with open("out.json", "w") as f: json.dump(doc, f, sort_keys=True)
print(json.dumps(json.load(open("out.json")), sort_keys=True, indent=1))
]]

-- The corpus. argv (or script, for sh -c) runs under both; bwrap_argv when
-- bwrap needs another form; stdin is given to both (else /dev/null);
-- expect names values both must show; check replaces the comparison where
-- airlock differs on purpose.
local CASES = {
  { name = "make: a Makefile that builds a C file with cc and runs it", needs = { "make", "cc" },
    files = { ["hello.c"] = '#include <stdio.h>\nint main(void) { puts("hello from make"); return 0; }\n',
              ["Makefile"] = "hello: hello.c\n\tcc -O2 -o hello hello.c\nrun: hello\n\t./hello\n" },
    script = "make run && make run",
    expect = { out = "cc -O2 -o hello hello.c\n./hello\nhello from make\n./hello\nhello from make\n", rc = 0 } },
  { name = "gcc: compile with -lm and run", needs = { "gcc" }, files = { ["sq.c"] = C_SQ },
    script = "gcc -Wall -O2 -o sq sq.c -lm && ./sq 2 && ./sq 81",
    expect = { out = "sqrt(2) = 1.414214\nsqrt(81) = 9.000000\n", err = "", rc = 0 } },
  { name = "cc: a failed compile's error on stderr and its status", needs = { "cc" },
    files = { ["bad.c"] = "int main(void) { return undeclared; }\n" },
    script = "cc -c bad.c; echo status=$?",
    check = function(a, b)
      assert.are.equal(b.out, a.out)
      assert.are.equal("status=1\n", a.out)
      assert.matches("undeclared", a.err)
      assert.are.equal(b.err, a.err)
    end },
  { name = "cp", needs = { "cp" }, files = { ["a.txt"] = "alpha\n" },
    script = "cp a.txt b.txt && cp -p a.txt c.txt && cat b.txt c.txt && ls",
    expect = { out = "alpha\nalpha\na.txt\nb.txt\nc.txt\n", rc = 0 } },
  { name = "cp -r", needs = { "cp", "find" },
    files = { ["d/x.txt"] = "x\n", ["d/sub/y.txt"] = "y\n", ["d/empty/"] = "" },
    script = "cp -r d e && find e | sort && cat e/sub/y.txt",
    expect = { out = "e\ne/empty\ne/sub\ne/sub/y.txt\ne/x.txt\ny\n", rc = 0 } },
  { name = "mv", needs = { "mv" }, files = { ["old.txt"] = "moved\n", ["dir/"] = "" },
    script = "mv old.txt new.txt && mv new.txt dir/ && ls . dir && cat dir/new.txt",
    expect = { out = ".:\ndir\n\ndir:\nnew.txt\nmoved\n", rc = 0 } },
  { name = "ln -s", needs = { "ln", "readlink" }, files = { ["target.txt"] = "through the link\n" },
    script = "ln -s target.txt link && readlink link && cat link && ln -s \"$PWD/target.txt\" abs && readlink abs",
    expect = { out = "target.txt\nthrough the link\nWS/target.txt\n", rc = 0 } },
  { name = "tar czf and tar xzf", needs = { "tar", "gzip" },
    files = { ["d/a.txt"] = "a\n", ["d/b/c.txt"] = "c\n" },
    script = "tar czf d.tgz d && tar tzf d.tgz | sort && mkdir out && tar xzf d.tgz -C out && cat out/d/b/c.txt",
    expect = { out = "d/\nd/a.txt\nd/b/\nd/b/c.txt\nc\n", rc = 0 } },
  { name = "gzip and gunzip", needs = { "gzip", "gunzip", "sha256sum" },
    files = { ["f.txt"] = string.rep("compress me\n", 500) },
    script = "gzip -n -k f.txt && sha256sum f.txt.gz && gunzip -c f.txt.gz | wc -l && rm f.txt && gunzip f.txt.gz && ls && wc -c f.txt",
    check = function(a, b)
      assert.are.same({ b.out, b.err, b.rc }, { a.out, a.err, a.rc })
      assert.matches("^%x+  f%.txt%.gz\n500\nf%.txt\n6000 f%.txt\n$", a.out)
    end },
  { name = "xz", needs = { "xz", "sha256sum" }, files = { ["f.txt"] = string.rep("xz data\n", 1000) },
    script = "xz -T1 -k f.txt && sha256sum f.txt.xz && xz -dc f.txt.xz | wc -c && xz -t f.txt.xz && echo tested",
    check = function(a, b)
      assert.are.same({ b.out, b.err, b.rc }, { a.out, a.err, a.rc })
      assert.matches("^%x+  f%.txt%.xz\n8000\ntested\n$", a.out)
    end },
  { name = "sed, and sed -i", needs = { "sed" }, files = { ["in.txt"] = "# header\na cat\nanother cat\n" },
    script = "sed -e 's/cat/dog/g' -e '/^#/d' in.txt && sed -i 's/a/A/' in.txt && cat in.txt",
    expect = { out = "a dog\nanother dog\n# heAder\nA cat\nAnother cat\n", err = "", rc = 0 } },
  { name = "awk", needs = { "awk" }, files = { ["data.csv"] = "a,1\nb,2\nc,39\n" },
    script = "awk -F, '{ s += $2; n[NR] = $1 } END { print NR, s, n[3] }' data.csv",
    expect = { out = "3 42 c\n", err = "", rc = 0 } },
  { name = "grep -r", needs = { "grep" },
    files = { ["a/one.txt"] = "needle here\nhay\n", ["a/b/two.txt"] = "hay\nneedle again\n", ["c.txt"] = "nothing\n" },
    script = "grep -rn needle . | sort; grep -rl needle a | sort; grep -r absent .; echo status=$?",
    expect = { out = "./a/b/two.txt:2:needle again\n./a/one.txt:1:needle here\na/b/two.txt\na/one.txt\nstatus=1\n", rc = 0 } },
  { name = "find", needs = { "find" },
    files = { ["x/1.txt"] = "1", ["x/y/2.txt"] = "22", ["x/y/3.log"] = "333" },
    script = "find . -name '*.txt' | sort; find x -type d | sort; find . -size +2c -type f",
    expect = { out = "./x/1.txt\n./x/y/2.txt\nx\nx/y\n./x/y/3.log\n", err = "", rc = 0 } },
  { name = "sort", needs = { "sort" }, files = { ["d"] = "b:10\na:2\nc:1\na:2\n" },
    script = "sort -t: -k2,2n d; sort -u d; sort -r d | head -1",
    expect = { out = "c:1\na:2\na:2\nb:10\na:2\nb:10\nc:1\nc:1\n", rc = 0 } },
  { name = "uniq", needs = { "sort", "uniq" }, files = { ["w"] = "x\ny\nx\nz\nx\ny\n" },
    script = "sort w | uniq -c | sort -rn; sort w | uniq -u",
    expect = { out = "      3 x\n      2 y\n      1 z\nz\n", rc = 0 } },
  { name = "wc", needs = { "wc" }, files = { ["t.txt"] = "one two\nthree\n" },
    script = "wc -l t.txt; wc -w < t.txt; wc -c t.txt",
    expect = { out = "2 t.txt\n3\n14 t.txt\n", rc = 0 } },
  { name = "head and tail", needs = { "head", "tail", "seq" },
    script = "seq 100 > n && head -3 n && tail -2 n && tail -n +99 n && head -c 4 n",
    expect = { out = "1\n2\n3\n99\n100\n99\n100\n1\n2\n", rc = 0 } },
  { name = "sha256sum and sha256sum -c", needs = { "sha256sum" }, files = { ["a"] = "abc", ["b"] = "" },
    script = "sha256sum a b > sums && cat sums && sha256sum -c sums",
    expect = { out = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  a\n" ..
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  b\na: OK\nb: OK\n", rc = 0 } },
  { name = "diff: differing files, status 1", needs = { "diff" },
    files = { ["a"] = "same\nold\nend\n", ["b"] = "same\nnew\nend\n" },
    script = "diff a b",
    expect = { out = "2c2\n< old\n---\n> new\n", err = "", rc = 1 } },
  { name = "git commit as the caller: the caller's .gitconfig shown read-only", needs = { "git" },
    home = { [".gitconfig"] = "[user]\n\tname = Home Person\n\temail = home@example.com\n" },
    script = "git -c init.defaultBranch=main init -q && echo a > f && git add f && git commit -q -m first && " ..
      "git log --format='%an <%ae> %s'",
    expect = { out = "Home Person <home@example.com> first\n", rc = 0 } },
  { name = "git init, add, commit, log in the workspace", needs = { "git" },
    files = { ["README"] = "hello git\n" },
    script = "export GIT_AUTHOR_DATE=2020-01-01T00:00:00Z GIT_COMMITTER_DATE=2020-01-01T00:00:00Z; " ..
      "git -c init.defaultBranch=main init && git add README && " ..
      "git -c user.name=Tester -c user.email=t@example.com commit -q -m first && " ..
      "git log --format='%h %an %s' && git status --short && echo clean",
    check = function(a, b)
      assert.are.same({ b.out, b.err, b.rc }, { a.out, a.err, a.rc })
      assert.matches("^Initialized empty Git repository in WS/%.git/\n%x+ Tester first\nclean\n$", a.out)
    end },
  { name = "python3: print", needs = { "python3" },
    argv = { "python3", "-c", "import sys; print('hello', 6 * 7); print('to stderr', file=sys.stderr)" },
    expect = { out = "hello 42\n", err = "to stderr\n", rc = 0 } },
  { name = "python3: json in and out of files", needs = { "python3" },
    files = { ["t.py"] = PY_JSON, ["in.json"] = '{"items": [{"n": 1}, {"n": 41}], "name": "x"}' },
    argv = { "python3", "t.py" },
    expect = { out = '{\n "items": [\n  {\n   "n": 1\n  },\n  {\n   "n": 41\n  }\n ],\n "name": "x",\n "total": 42\n}\n',
      err = "", rc = 0 } },
  { name = "python3: subprocess, and a child's -15", needs = { "python3" },
    files = { ["t.py"] = PY_SUBPROCESS }, argv = { "python3", "t.py" },
    expect = { out = "child oops 3\n42\nkilled child: -15\n", err = "", rc = 0 } },
  { name = "python3: threading", needs = { "python3" }, files = { ["t.py"] = PY_THREADS },
    argv = { "python3", "t.py" }, expect = { out = "31996000 1\n", err = "", rc = 0 } },
  { name = "python3: asyncio over a socketpair", needs = { "python3" }, files = { ["t.py"] = PY_ASYNC },
    argv = { "python3", "t.py" }, expect = { out = "PING\n", err = "", rc = 0 } },
  { name = "python3: os.kill(self, SIGTERM) exits 143", needs = { "python3" },
    argv = { "python3", "-c", "import os, signal; print('before', flush=True); os.kill(os.getpid(), signal.SIGTERM)" },
    expect = { out = "before\n", err = "", rc = 143 } },
  { name = "python3: tempfile in the private /tmp", needs = { "python3" }, files = { ["t.py"] = PY_TEMPFILE },
    argv = { "python3", "t.py" }, expect = { out = "/tmp kept\n/tmp [] /tmp\n", err = "", rc = 0 } },
  { name = "python3 -m venv, and its python", needs = { "python3" }, venv = true,
    script = "python3 -m venv v && v/bin/python -c 'import sys; print(sys.prefix, sys.prefix != sys.base_prefix)' " ..
      "&& v/bin/python -m pip --version | cut -d' ' -f1",
    expect = { out = "WS/v True\npip\n", rc = 0 } },
  { name = "perl one-liners", needs = { "perl" }, files = { ["f"] = "abc\nxyz\nbcd\n" },
    script = "perl -ne 'print uc if /b/' f && perl -e 'printf \"%.5f %s\\n\", atan2(1, 1) * 4, join(\",\", map { $_ * 2 } 1 .. 4)'",
    expect = { out = "ABC\nBCD\n3.14159 2,4,6,8\n", err = "", rc = 0 } },
  { name = "lua5.4 -e", needs = { "lua5.4" },
    argv = { "lua5.4", "-e", "print(_VERSION, 2^10, math.type(1), ('x'):rep(3)); io.stderr:write('e\\n'); os.exit(5)" },
    expect = { out = "Lua 5.4\t1024.0\tinteger\txxx\n", err = "e\n", rc = 5 } },
  { name = "sqlite3: a database file in the workspace", needs = { "sqlite3" },
    script = "sqlite3 db.sqlite 'create table t(x); insert into t values (1), (2), (39);' && " ..
      "sqlite3 db.sqlite 'select sum(x), count(*) from t;' && ls",
    expect = { out = "42|3\ndb.sqlite\n", err = "", rc = 0 } },
  { name = "openssl dgst", needs = { "openssl" }, files = { ["f.txt"] = "abc" },
    script = "openssl dgst -sha256 f.txt && printf abc | openssl dgst -md5",
    expect = { out = "SHA2-256(f.txt)= ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n" ..
      "MD5(stdin)= 900150983cd24fb0d6963f7d28e17f72\n", err = "", rc = 0 } },
  { name = "openssl rand", needs = { "openssl" },
    script = "openssl rand -hex 16 | tr -d '\\n' | wc -c && openssl rand 100000 | wc -c",
    expect = { out = "32\n100000\n", err = "", rc = 0 } },
  { name = "sh pipeline: seq 1 1000 | sort -n | tail -1", needs = { "seq", "sort", "tail" },
    script = "seq 1 1000 | sort -n | tail -1", expect = { out = "1000\n", err = "", rc = 0 } },
  { name = "sh -c 'kill -TERM $$' exits 143", script = "kill -TERM $$",
    expect = { out = "", err = "", rc = 143 } },
  { name = "sh -c 'exit 7'", script = "exit 7", expect = { out = "", err = "", rc = 7 } },
  { name = "stdout and stderr both, and a status", script = "echo to-out; echo to-err >&2; echo more-out; exit 3",
    expect = { out = "to-out\nmore-out\n", err = "to-err\n", rc = 3 } },
  { name = "stdin passed through: printf 'a\\nb\\n' | wc -l", needs = { "wc" },
    argv = { "wc", "-l" }, stdin = "a\nb\n", expect = { out = "2\n", err = "", rc = 0 } },
  { name = "stdin through airlock's explicit --stdin -: 400000 binary bytes", needs = { "wc" },
    argv = { "sh", "-c", "wc -c; echo done" }, stdin = string.rep("\0\1\255\n", 100000), stdin_flag = true,
    expect = { out = "400000\ndone\n", err = "", rc = 0 } },
  { name = "binary output: head -c 3000000 /dev/zero, piped outside to wc -c", needs = { "head" },
    argv = { "head", "-c", "3000000", "/dev/zero" }, post = "wc -c",
    expect = { out = "3000000\n", err = "", rc = 0 } },
  { name = "ps -e lists the run's few processes", needs = { "ps" }, argv = { "ps", "-e" },
    check = function(a, b)
      local function shape(r)
        local lines = {}
        for l in r.out:gmatch("[^\n]+") do lines[#lines + 1] = l end
        return { rc = r.rc, header = (lines[1] or ""):match("PID%s+TTY%s+TIME%s+CMD") ~= nil,
                 few = #lines >= 2 and #lines <= 6, ps_listed = r.out:match("%sps\n") ~= nil }
      end
      assert.are.same({ rc = 0, header = true, few = true, ps_listed = true }, shape(b))
      -- A known difference only if bwrap failed too; it did not (asserted above).
      assert.are.same(shape(b), shape(a), "airlock: rc=" .. tostring(a.rc) .. " stdout=" .. a.out .. " stderr=" .. a.err)
    end },
  { name = "id: uid and gid 65534", needs = { "id" }, script = "id -u; id -g; id -un; id -gn",
    expect = { out = "65534\n65534\nnobody\nnogroup\n", err = "", rc = 0 } },
  { name = "the workspace is the cwd and HOME; relative paths", files = { ["sub/f"] = "" },
    script = "pwd; echo \"$HOME\"; cd sub && pwd && ls .. && cd && pwd",
    expect = { out = "WS\nWS\nWS/sub\nsub\nWS\n", err = "", rc = 0 } },
  { name = "environment: the same variables but PATH and AIRLOCK",
    script = "env | grep -v -e '^PATH=' -e '^AIRLOCK=' | sort",
    expect = { out = "HOME=WS\nLANG=C.UTF-8\nPWD=WS\nTMPDIR=/tmp\n", err = "", rc = 0 } },
  { name = "PATH: the caller's, with airlock's directory last (for `airlock call`)",
    script = "echo \"$PATH\"; command -v sh",
    check = function(a, b)
      assert.are.same({ PATH .. "\n/usr/bin/sh\n", "", 0 }, { b.out, b.err, b.rc })
      assert.are.same({ PATH .. ":" .. AIRLOCK:match("^(.*)/") .. "\n/usr/bin/sh\n", "", 0 }, { a.out, a.err, a.rc })
    end },
  { name = "private /tmp: holds only the workspace's mount point; writable", needs = { "ls" },
    script = "ls -A /tmp; echo x > /tmp/f && cat /tmp/f && rm /tmp/f",
    check = function(a, b)
      assert.are.same({ out = "WSNAME\nx\n", err = "", rc = 0 }, { out = b.out, err = b.err, rc = b.rc })
      -- An airlock built or installed under /tmp is kept in the private /tmp
      -- too, at its own path, so `airlock call` runs inside (docs/TOOLS.md):
      -- its first directory there is the one entry bwrap's view lacks.
      local kept = AIRLOCK:match("^/tmp/([^/]+)/")
      local listed = {}
      for line in a.out:gmatch("[^\n]+") do
        if line ~= kept then listed[#listed + 1] = line end
      end
      assert.are.same({ "WSNAME", "x" }, listed)
      assert.are.same({ "", 0 }, { a.err, a.rc })
    end },
  { name = "files made in the workspace are owned by nobody inside", needs = { "stat" },
    script = "echo a > f && mkdir d && stat -c '%U %G %a %s %F' . f d",
    check = function(a, b)
      assert.are.same({ b.err, b.rc }, { a.err, a.rc })
      -- the directory sizes depend on the file system beneath; owners and modes do not
      local function strip(s) return (s:gsub(" %d+ directory", " directory")) end
      assert.are.equal(strip(b.out), strip(a.out))
      assert.are.equal("nobody nogroup 700 directory\nnobody nogroup 644 2 regular file\nnobody nogroup 755 directory\n",
        strip(a.out))
    end },
  { name = "writes outside the workspace fail: Read-only file system", needs = { "touch" },
    script = "echo x > /etc/airlock-compat-x; echo etc=$?; touch /usr/airlock-compat-x; echo usr=$?",
    expect = { out = "etc=2\nusr=1\n", rc = 0,
      err = "sh: 1: cannot create /etc/airlock-compat-x: Read-only file system\n" ..
            "touch: cannot touch '/usr/airlock-compat-x': Read-only file system\n" } },
  { name = "mount is refused: must be superuser", needs = { "mount" }, argv = { "mount", "-t", "tmpfs", "none", "/tmp" },
    expect = { rc = 32 } },
  { name = "bash: arrays and arithmetic", needs = { "bash" },
    argv = { "bash", "-c", "a=(x y z); echo ${#a[@]} ${a[1]} $((6 * 7)); [[ abc == a* ]] && echo glob" },
    expect = { out = "3 y 42\nglob\n", err = "", rc = 0 } },
  { name = "text tools: tr, cut, base64, xargs, date -u", needs = { "tr", "cut", "base64", "xargs", "date" },
    script = "echo hello | tr a-z A-Z; echo a:b:c | cut -d: -f2; printf hi | base64; echo aGk= | base64 -d; echo; " ..
      "printf '%s\\n' 1 2 3 | xargs -n2 echo; date -u -d @86400 +%F",
    expect = { out = "HELLO\nb\naGk=\nhi\n1 2\n3\n1970-01-02\n", err = "", rc = 0 } },
  { name = "a missing program under sh: sh -c nosuchprogram exits 127",
    script = "nosuchprogram", expect = { out = "", err = "sh: 1: nosuchprogram: not found\n", rc = 127 } },
  { name = "a missing program given directly: airlock exits 127, as sh -c nosuchprogram does",
    argv = { "nosuchprogram" }, bwrap_argv = sh "nosuchprogram",
    check = function(a, b)
      assert.are.equal(127, b.rc)   -- bwrap's own execvp failure would exit 1: compare with sh's 127
      assert.are.equal(b.rc, a.rc)
      assert.are.equal("", a.out)
      assert.matches("nosuchprogram", a.err)
      assert.matches("not found", a.err)
    end },
  -- Differences on purpose: no network at all, sockets refused with an errno,
  -- no new namespaces. Each is an errno the program handles, never a kill.
  { name = "curl http://example.com fails cleanly: no network", needs = { "curl" },
    argv = { "curl", "-sS", "--max-time", "20", "http://example.com" },
    check = function(a, b) cleanly_refused(a, b) end },
  { name = "wget http://example.com fails cleanly: no network", needs = { "wget" },
    argv = { "wget", "-q", "-T", "20", "-t", "1", "-O-", "http://example.com" },
    check = function(a, b) cleanly_refused(a, b) end },
  { name = "python3 socket(): airlock refuses with EAFNOSUPPORT (bwrap grants one)", needs = { "python3" },
    argv = { "python3", "-c", "import socket\ntry:\n  socket.socket(); print('socket')\n" ..
      "except OSError as e:\n  print('refused', e.errno)" },
    check = function(a, b)
      assert.are.same({ "socket\n", "", 0 }, { b.out, b.err, b.rc })
      assert.are.same({ "refused 97\n", "", 0 }, { a.out, a.err, a.rc })
    end },
  { name = "unshare -r: airlock refuses a new namespace with EPERM (bwrap allows it)", needs = { "unshare" },
    argv = { "unshare", "-r", "id", "-u" },
    check = function(a, b)
      assert.are.same({ "0\n", 0 }, { b.out, b.rc })
      assert.are.equal("", a.out)
      assert.matches("Operation not permitted", a.err)
      assert.is_true(a.rc ~= 0 and a.rc < 128, "airlock exited " .. tostring(a.rc))
    end },
}

-- A program counts as installed when the sandboxes' PATH finds it on the host.
local function missing(progs)
  for _, p in ipairs(progs or {}) do
    if not os.execute("PATH=" .. PATH .. " command -v " .. q(p) .. " >/dev/null 2>&1") then return p end
  end
end

local bwrap_works = (function()
  if not os.execute("test -x " .. BWRAP) then return false, BWRAP .. " is not installed" end
  local ws = H.tmpdir()
  local out, rc = H.sh("cd " .. q(ws) .. " && " .. bwrap_prefix(ws) .. " true")
  os.execute("rm -rf " .. q(ws))
  if rc ~= 0 then return false, "bwrap cannot run here: " .. out end
  return true
end)

describe("airlock exec runs everyday programs as bubblewrap does (" .. (ROOT and "as root" or "unprivileged") .. ")",
function()
  local scratch, usable, why
  setup(function()
    scratch = H.tmpdir()
    usable, why = bwrap_works()
  end)
  teardown(function() os.execute("rm -rf " .. q(scratch)) end)

  it("has a corpus of at least 40 cases", function()
    assert.is_true(#CASES >= 40, #CASES .. " cases")
  end)

  for i, c in ipairs(CASES) do
    it(c.name, function()
      if not usable then
        pending("skipped: " .. why)
        return
      end
      local gone = missing(c.needs)
      if gone then
        pending("skipped: " .. gone .. " is not installed")
        return
      end
      if c.venv and not os.execute("PATH=" .. PATH .. " python3 -c 'import ensurepip, venv' 2>/dev/null") then
        pending("skipped: python3 has no ensurepip/venv (python3-venv is not installed)")
        return
      end
      local argv = c.argv or sh(c.script)
      local wa, wb = workspace(c.files), workspace(c.files)
      -- The caller's home, when the case has one: outside /tmp (both give the program a private /tmp).
      local home
      if c.home then
        home = { dir = "/var/tmp/airlock-compat-home-" .. H.pid() .. "-" .. i, files = {} }
        for name, text in pairs(c.home) do
          assert(os.execute("mkdir -p " .. q((home.dir .. "/" .. name):match("^(.*)/"))))
          H.write(home.dir .. "/" .. name, text)
          home.files[#home.files + 1] = name
        end
        assert(os.execute("chmod -R a+rX " .. q(home.dir)))
      end
      local a = run(airlock_prefix(wa, c.stdin_flag, home), wa, argv, c, scratch, i .. "a")
      -- a rebuild under way replaces the binary mid-run: try once more
      if (a.rc == 126 or a.rc == 127) and a.err:find(AIRLOCK, 1, true) then
        os.execute("rm -rf " .. q(wa))
        wa = workspace(c.files)
        a = run(airlock_prefix(wa, c.stdin_flag, home), wa, argv, c, scratch, i .. "a")
      end
      local b = run(bwrap_prefix(wb, home), wb, c.bwrap_argv or argv, c, scratch, i .. "b")
      os.execute("rm -rf " .. q(wa) .. " " .. q(wb) .. (home and (" " .. q(home.dir)) or ""))
      a.err = without_refusals(a.err)
      local say = string.format("\nairlock: rc=%s\n--stdout\n%s--stderr\n%s\nbwrap: rc=%s\n--stdout\n%s--stderr\n%s",
        tostring(a.rc), a.out, a.err, tostring(b.rc), b.out, b.err)
      if c.check then
        local ok, err = pcall(c.check, a, b)
        if not ok then error(tostring(err) .. say, 0) end
        return
      end
      for _, r in ipairs { { "bwrap", b }, { "airlock", a } } do
        local who, res = r[1], r[2]
        for _, k in ipairs { "out", "err", "rc" } do
          if c.expect and c.expect[k] ~= nil then
            assert.are.equal(c.expect[k], res[k], who .. "'s " .. k .. say)
          end
        end
      end
      assert.are.same({ out = b.out, err = b.err, rc = b.rc }, { out = a.out, err = a.err, rc = a.rc }, say)
    end)
  end
end)
