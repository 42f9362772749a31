-- workspace_spec.lua -- airlock.handlers.workspace from real guest runs: every
-- way out of the workspace (.., absolute paths, symlinks pointing out, a
-- symlink flipped mid-call, /proc magic links, NUL bytes, over-long names, a
-- FIFO, sockets and devices) is refused and nothing outside is read or
-- written; writes are atomic.
local H = require "helper"
local airlock = require "airlock"
local handlers = require "airlock.handlers"

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok, "command failed: " .. cmd)
end

local slurp = H.slurp

local spit = H.write

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- A snapshot of a directory tree: every entry with its type, size and content digest.
local function snapshot(dir)
  local p = io.popen("cd '" .. dir .. "' && find . -printf '%p %y %s\\n' | sort && " ..
                     "find . -type f -exec sha256sum {} + | sort")
  local s = p:read("a")
  p:close()
  return s
end

local function run(guest, effects, limits)
  local res, err = airlock.run { guest = guest, policy = { effects = effects, limits = limits } }
  assert(res, err)
  return res
end

-- Waits for a file another process makes when it is ready (a guard, never a measure).
local function wait_for(path)
  return H.wait_until(path .. " to be made", function() return exists(path) end)
end

local SECRET = "SECRET-OUTSIDE-THE-WORKSPACE"

describe("handlers.workspace", function()
  local tmp, ws, outside, before

  before_each(function()
    local p = io.popen("mktemp -d /tmp/airlock-ws-XXXXXX")
    tmp = p:read("l")
    p:close()
    ws, outside = tmp .. "/ws", tmp .. "/outside"
    sh("mkdir -p " .. ws .. "/sub " .. ws .. "/realdir " .. outside)
    spit(outside .. "/secret.txt", SECRET)
    spit(ws .. "/inside.txt", "INSIDE")
    spit(ws .. "/realdir/secret.txt", "INSIDE-REALDIR")
    spit(ws .. "/sub/a.txt", "A")
    sh("ln -s ../outside/secret.txt " .. ws .. "/out_link")
    sh("ln -s " .. outside .. "/secret.txt " .. ws .. "/abs_link")
    sh("ln -s ../outside " .. ws .. "/dir_out")
    sh("ln -s /proc/self/root " .. ws .. "/proc_root")
    sh("ln -s /proc/self/fd " .. ws .. "/proc_fd")
    sh("ln -s inside.txt " .. ws .. "/in_link")
    sh("ln -s loop2 " .. ws .. "/loop1 && ln -s loop1 " .. ws .. "/loop2")
    sh("mkfifo " .. ws .. "/fifo")
    before = snapshot(outside)
  end)

  after_each(function()
    -- Nothing outside the workspace was written, created or removed.
    local after, secret = snapshot(outside), slurp(outside .. "/secret.txt")
    sh("rm -rf '" .. tmp .. "'")
    assert.equal(before, after)
    assert.equal(SECRET, secret)
  end)

  it("serves files, listings and stats inside the workspace", function()
    local res = run([[
      return {
        read = host.fs.read { path = "inside.txt" },
        nested = host.fs.read { path = "sub/a.txt" },
        dotted = host.fs.read { path = "./sub//a.txt" },
        via_link = host.fs.read { path = "in_link" },
        bare = host.fs.read("inside.txt"),
        list = host.fs.list {},
        sublist = host.fs.list { path = "sub" },
        stat = host.fs.stat { path = "inside.txt" },
        dstat = host.fs.stat { path = "sub" },
        missing = host.fs.stat { path = "nope" } == nil,
      }
    ]], handlers.workspace(ws))
    assert.equal("ok", res.cause, res.message)
    local v = res.value
    assert.equal("INSIDE", v.read)
    assert.equal("A", v.nested)
    assert.equal("A", v.dotted)
    assert.equal("INSIDE", v.via_link)
    assert.equal("INSIDE", v.bare)
    assert.same({ "abs_link", "dir_out", "fifo", "in_link", "inside.txt", "loop1", "loop2", "out_link",
                  "proc_fd", "proc_root", "realdir", "sub" }, v.list)
    assert.same({ "a.txt" }, v.sublist)
    assert.same({ type = "file", size = 6 }, v.stat)
    assert.equal("dir", v.dstat.type)
    assert.is_true(v.missing)
  end)

  it("refuses every path that leads out, and reads nothing outside", function()
    local attacks = {
      "../outside/secret.txt", "sub/../../outside/secret.txt", "..", "sub/..",
      "/etc/passwd", outside .. "/secret.txt", "//etc/passwd",
      "out_link", "abs_link", "dir_out/secret.txt", "dir_out",
      "proc_root/etc/passwd", "proc_root" .. outside .. "/secret.txt", "proc_root",
      "proc_fd/0", "loop1",
      "inside.txt\0", "a\0/../../outside/secret.txt",
      ("a"):rep(4096), ("a"):rep(256), ("a/"):rep(2048) .. "x", ("/"):rep(4096),
      "fifo",
    }
    local res = assert(airlock.run { guest = [[
      local attacks = ...
      local out = {}
      for i, p in ipairs(attacks) do
        for _, op in ipairs { "read", "stat", "list" } do
          local ok, v = pcall(host.fs[op], { path = p })
          out[#out + 1] = { path = p, op = op, ok = ok, v = v }
        end
      end
      return out
    ]], input = attacks, policy = { effects = handlers.workspace(ws) } })
    assert.equal("ok", res.cause, res.message)
    assert.equal(#attacks * 3, #res.value)
    for _, r in ipairs(res.value) do
      local what = r.op .. " " .. string.format("%q", r.path:sub(1, 40))
      local text = type(r.v) == "table" and table.concat(r.v, ",") or tostring(r.v)
      assert.is_nil(text:find(SECRET, 1, true), what .. " leaked the secret")
      assert.is_nil(text:find("root:", 1, true), what .. " leaked /etc/passwd")
      -- read/list of anything here is refused; stat of a directory that
      -- resolves inside (".." is refused before that) would be fine, but none does.
      assert.is_false(r.ok, what .. " was allowed: " .. text)
      assert.matches("^denied: ", r.v)
    end
  end)

  it("names the reason for each refusal", function()
    local ws_h = handlers.workspace(ws)
    local function why(p, op)
      local ok, err = pcall(ws_h["fs." .. (op or "read")], { path = p })
      assert.is_false(ok)
      return err
    end
    assert.matches("denied: path '../outside/secret.txt' has a '..' component", why("../outside/secret.txt"), 1, true)
    assert.matches("is absolute", why("/etc/passwd"))
    assert.matches("leads outside the workspace", why("out_link"))
    assert.matches("leads outside the workspace", why("abs_link"))
    assert.matches("leads outside the workspace", why("proc_root/etc/passwd"))
    assert.matches("goes through a /proc magic link or a symlink loop", why("loop1"))
    assert.matches("contains a NUL byte", why("inside.txt\0"))
    assert.matches("longer than 4095 bytes", why(("a/"):rep(2048) .. "x"))
    assert.matches("longer than 4095 bytes", why(("a"):rep(4096)))
    assert.matches("component longer than 255 bytes", why(("a"):rep(256)))
    assert.matches("denied: 'fifo' is a fifo", why("fifo"))
    assert.matches("no such file or directory: 'nope'", why("nope"))
    assert.matches("is a directory: 'sub'", why("sub"))
    assert.matches("not a directory: 'inside.txt'", why("inside.txt", "list"))
  end)

  it("refuses the /proc magic links of a workspace rooted in /proc", function()
    -- RESOLVE_NO_MAGICLINKS: root, cwd, exe and fd/N are not followed, though
    -- they sit beneath the root.
    local proc = handlers.workspace("/proc/self")
    for _, p in ipairs { "root/etc/passwd", "root", "cwd/README.md", "exe", "fd/0", "fd/1", "cwd" } do
      local ok, err = pcall(proc["fs.read"], { path = p })
      assert.is_false(ok, p)
      assert.matches("denied", err)
      assert.is_nil(tostring(err):find("root:", 1, true))
    end
    assert.matches("^Name:", proc["fs.read"] { path = "status" })   -- plain files there are fine
  end)

  it("refuses sockets and device files without opening them", function()
    sh("python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.bind('" .. ws .. "/sock')\"")
    local have_dev = os.execute("mknod " .. ws .. "/null c 1 3 2>/dev/null")
    local w = handlers.workspace(ws)
    local ok, err = pcall(w["fs.read"], { path = "sock" })
    assert.is_false(ok)
    assert.matches("denied: 'sock' is a socket", err)
    ok, err = pcall(w["fs.stat"], { path = "sock" })
    assert.is_false(ok)
    assert.matches("denied", err)
    -- A FIFO is never opened. A writer waits on it meanwhile, so a handler
    -- that did open it would read its line and answer, not refuse (nor hang).
    local writer = io.popen("env -u LD_PRELOAD timeout " .. H.GUARD_S .. " sh -c 'echo opened > " .. ws ..
      "/fifo' >/dev/null 2>&1 & echo $!")
    local wpid = writer:read("n")
    writer:close()
    ok, err = pcall(w["fs.read"], { path = "fifo" })
    os.execute("kill " .. math.tointeger(wpid) .. " 2>/dev/null")
    assert.is_false(ok, tostring(err))
    assert.matches("fifo", err)
    if not have_dev then pending("mknod is refused here: the device-file refusal needs a device node to try") end
    ok, err = pcall(w["fs.read"], { path = "null" })
    assert.is_false(ok)
    assert.matches("denied: 'null' is a character device", err)
  end)

  it("writes nothing outside: through .., symlinked directories or /proc", function()
    local res = assert(airlock.run { guest = [[
      local out = {}
      for _, p in ipairs(...) do
        local ok, v = pcall(host.fs.write, { path = p, data = "PWNED" })
        out[#out + 1] = { p = p, ok = ok, v = v }
        ok, v = pcall(host.fs.remove, { path = p })
        out[#out + 1] = { p = p, ok = ok, v = v, rm = true }
      end
      return out
    ]], input = { "../outside/new.txt", "dir_out/new.txt", "dir_out/secret.txt", outside .. "/new.txt",
                  "proc_root" .. outside .. "/new.txt", "sub/../../outside/new.txt", "x\0y",
                  "dir_out/deeper/new.txt" },
      policy = { effects = handlers.workspace(ws, { write = true }) } })
    assert.equal("ok", res.cause, res.message)
    for _, r in ipairs(res.value) do
      assert.is_false(r.ok, r.p)
      assert.matches("denied", r.v)
    end
    assert.is_false(exists(outside .. "/new.txt"))
    assert.is_false(exists(outside .. "/deeper"))
  end)

  it("replaces a symlink pointing out instead of writing through it", function()
    local w = handlers.workspace(ws, { write = true })
    assert.is_true(w["fs.write"] { path = "out_link", data = "mine" })
    assert.equal("mine", slurp(ws .. "/out_link"))
    assert.is_nil(H.readlink(ws .. "/out_link"))
    assert.is_true(w["fs.remove"] { path = "abs_link" })   -- removes the link, not its target
    assert.is_false(exists(ws .. "/abs_link"))
  end)

  it("holds against a symlink flipped in and out 1,000+ times while the guest reads and writes", function()
    -- The flipper swaps ws/flip between inside.txt and ../outside/secret.txt,
    -- and ws/flipdir between realdir and ../outside, atomically (rename), as
    -- fast as it can, for at least 1,000 flips and until the guest is done.
    local script = tmp .. "/flip.py"
    spit(script, [[
import os, sys
ws, stop, done = sys.argv[1:4]
pairs_ = [("flip", ["inside.txt", "../outside/secret.txt"]),
          ("flipdir", ["realdir", "../outside"])]
n = 0
open(done + ".started", "w").close()
while n < 1000 or not os.path.exists(stop):
    for name, targets in pairs_:
        tmp = os.path.join(ws, ".t-" + name)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os.symlink(targets[n % 2], tmp)
        os.replace(tmp, os.path.join(ws, name))
    n += 1
with open(done + ".tmp", "w") as f:
    f.write(str(n))
os.replace(done + ".tmp", done)   # whole, or not there at all
]])
    sh("ln -s inside.txt " .. ws .. "/flip && ln -s realdir " .. ws .. "/flipdir")
    local stop, done = tmp .. "/stop", tmp .. "/flips"
    sh(string.format("python3 %s %s %s %s >/dev/null 2>&1 &", script, ws, stop, done))
    assert.is_true(wait_for(done .. ".started"))
    local res = run([[
      local seen = { inside = 0, refused = 0, other = {} }
      local function note(ok, v, want)
        if ok and v == want then seen.inside = seen.inside + 1
        elseif not ok and (v:find("denied", 1, true) or v:find("no such file", 1, true)) then
          seen.refused = seen.refused + 1
        else seen.other[#seen.other + 1] = tostring(v) end
      end
      for i = 1, 1000 do
        local ok, v = pcall(host.fs.read, { path = "flip" })
        note(ok, v, "INSIDE")
        ok, v = pcall(host.fs.read, { path = "flipdir/secret.txt" })
        note(ok, v, "INSIDE-REALDIR")
        ok, v = pcall(host.fs.write, { path = "flipdir/new.txt", data = "W" .. i })
        note(ok, v, true)
      end
      return seen
    ]], handlers.workspace(ws, { write = true }), { deadline_ms = "60s" })
    print(string.format("\n  race: %d answered from inside, %d refused", res.value.inside, res.value.refused))
    spit(stop, "")
    assert.is_true(wait_for(done))
    local flips = tonumber(slurp(done))
    assert.equal("ok", res.cause, res.message)
    assert.same({}, res.value.other)
    assert.equal(3000, res.value.inside + res.value.refused)
    assert.is_true(flips >= 1000, "only " .. tostring(flips) .. " flips")
    -- Every write that succeeded landed inside; none outside.
    assert.is_false(exists(outside .. "/new.txt"))
    assert.is_true(exists(ws .. "/realdir/new.txt"))
  end)

  it("writes atomically: a concurrent reader sees the old file or the new one, never a part", function()
    local size = 4 << 20
    spit(ws .. "/big.bin", ("A"):rep(size))
    local script = tmp .. "/reader.py"
    spit(script, [[
import os, sys
path, stop, done, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
reads = bad = 0
seen = set()
open(done + ".started", "w").close()
while not os.path.exists(stop):
    with open(path, "rb") as f:
        data = f.read()
    reads += 1
    if len(data) != size or data.count(data[:1]) != size:
        bad += 1
    else:
        seen.add(data[:1])
with open(done + ".tmp", "w") as f:
    f.write("%d %d %d" % (reads, bad, len(seen)))
os.replace(done + ".tmp", done)   # whole, or not there at all
]])
    local stop, done = tmp .. "/stop", tmp .. "/reads"
    sh(string.format("python3 %s %s %s %s %d >/dev/null 2>&1 &", script, ws .. "/big.bin", stop, done, size))
    assert.is_true(wait_for(done .. ".started"))
    local res = assert(airlock.run { guest = [[
      local size = ...
      local a, b = string.rep("A", size), string.rep("B", size)
      for i = 1, 24 do host.fs.write { path = "big.bin", data = i % 2 == 1 and b or a } end
      return #host.fs.list {}
    ]], input = size, policy = {
      limits = { memory = "128M", deadline_ms = "60s" },   -- a budget: the address space follows it
      effects = handlers.workspace(ws, { write = true, max_bytes = "8M" }) } })
    spit(stop, "")
    assert.is_true(wait_for(done))
    assert.equal("ok", res.cause, res.message)
    local reads, bad, kinds = slurp(done):match("(%d+) (%d+) (%d+)")
    print(string.format("\n  atomic: %s whole reads of 4 MiB by a concurrent reader (%s versions seen), %s partial",
                        reads, kinds, bad))
    assert.equal("0", bad)
    assert.is_true(tonumber(reads) > 0)
    -- No temporary file is left behind.
    local p = io.popen("ls -A " .. ws)
    local listing = p:read("a")
    p:close()
    assert.is_nil(listing:find(".airlock-tmp", 1, true))
    assert.equal(("A"):rep(size), slurp(ws .. "/big.bin"))
    assert.is_true(tonumber(kinds) >= 1)
  end)

  it("creates parent directories, removes files and empty directories", function()
    local w = handlers.workspace(ws, { write = true })
    assert.is_true(w["fs.write"] { path = "a/b/c.txt", data = "deep" })
    assert.equal("deep", slurp(ws .. "/a/b/c.txt"))
    local ok, err = pcall(w["fs.remove"], { path = "a/b" })
    assert.is_false(ok)
    assert.matches("directory not empty", err)
    assert.is_true(w["fs.remove"] { path = "a/b/c.txt" })
    assert.is_true(w["fs.remove"] { path = "a/b" })
    ok, err = pcall(w["fs.remove"], { path = "" })
    assert.is_false(ok)
    assert.matches("denied: the workspace root cannot be removed", err)
    ok, err = pcall(w["fs.write"], { path = "inside.txt/x", data = "x" })
    assert.is_false(ok)
    assert.matches("not a directory", err)
    ok, err = pcall(w["fs.write"], { path = "sub", data = "x" })
    assert.is_false(ok)
    assert.matches("is a directory", err)
    local flat = handlers.workspace(ws, { write = true, mkdirs = false })
    ok, err = pcall(flat["fs.write"], { path = "q/r.txt", data = "x" })
    assert.is_false(ok)
    assert.matches("no such file", err)
  end)

  it("a read-only workspace refuses writes and removes", function()
    local res = run([[
      local ok1, e1 = pcall(host.fs.write, { path = "inside.txt", data = "x" })
      local ok2, e2 = pcall(host.fs.remove, { path = "inside.txt" })
      return { ok1, e1, ok2, e2, host.fs.read { path = "inside.txt" } }
    ]], handlers.workspace(ws))   -- write defaults to false
    assert.equal("ok", res.cause, res.message)
    assert.is_false(res.value[1])
    assert.equal("denied: read-only workspace", res.value[2])
    assert.is_false(res.value[3])
    assert.equal("denied: read-only workspace", res.value[4])
    assert.equal("INSIDE", res.value[5])
    assert.equal("INSIDE", slurp(ws .. "/inside.txt"))
  end)

  it("bounds reads, writes and listings", function()
    spit(ws .. "/big.txt", ("x"):rep(2000))
    local w = handlers.workspace(ws, { write = true, max_bytes = 1000, max_entries = 3 })
    local ok, err = pcall(w["fs.read"], { path = "big.txt" })
    assert.is_false(ok)
    assert.matches("larger than the workspace's max_bytes %(1000%)", err)
    ok, err = pcall(w["fs.write"], { path = "w.txt", data = ("y"):rep(1001) })
    assert.is_false(ok)
    assert.matches("larger than the workspace's max_bytes", err)
    assert.is_false(exists(ws .. "/w.txt"))
    ok, err = pcall(w["fs.list"], {})
    assert.is_false(ok)
    assert.matches("more than 3 entries", err)
    spit(ws .. "/ok.txt", ("x"):rep(1000))
    assert.equal(("x"):rep(1000), w["fs.read"] { path = "ok.txt" })
  end)

  it("checks the type of every argument", function()
    local w = handlers.workspace(ws, { write = true })
    local cases = {
      { "fs.read", 42, "expects a table" }, { "fs.read", {}, "args.path must be a string" },
      { "fs.read", { path = {} }, "args.path must be a string" },
      { "fs.write", { path = "x" }, "args.data must be a string" },
      { "fs.write", { path = "x", data = { 1 } }, "args.data must be a string" },
      { "fs.write", { data = "x" }, "args.path must be a string" },
      { "fs.write", "x", "expects a table" },
      { "fs.list", { path = 1 }, "args.path must be a string" },
      { "fs.stat", true, "expects a table" },
      { "fs.remove", { path = false }, "args.path must be a string" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(w[c[1]], c[2])
      assert.is_false(ok, c[1])
      assert.matches(c[3], err, 1, true)
    end
  end)

  it("an uncaught refusal ends the run with cause denied, the denial in its message", function()
    local res = run("return host.fs.read { path = '../outside/secret.txt' }", handlers.workspace(ws))
    assert.is_false(res.ok)
    assert.equal("denied", res.cause)
    assert.matches("denied: ", res.message)
    assert.is_nil(res.message:find(SECRET, 1, true))
  end)

  it("checks its own options", function()
    assert.has_error(function() handlers.workspace(tmp .. "/nope") end)
    assert.has_error(function() handlers.workspace(ws .. "/inside.txt") end)
    assert.has_error(function() handlers.workspace(ws, { wirte = true }) end, "workspace: unknown option 'wirte'")
    assert.has_error(function() handlers.workspace(ws, { max_bytes = "lots" }) end)
    assert.has_error(function() handlers.workspace(nil) end)
  end)
end)
