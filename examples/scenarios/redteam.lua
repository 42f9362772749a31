-- redteam.lua -- a table of escape attempts from guest code under the default
-- (untrusted) policy. Each must fail the way it is listed: the guest sees nil or
-- an error, the effect is denied, or the run is killed by a limit.
--   lua5.4 examples/scenarios/redteam.lua        (AIRLOCK_BUILD=build/san for another build)
local build = os.getenv("AIRLOCK_BUILD") or "build"
package.cpath = build .. "/lib/?.so;" .. package.cpath
local airlock = require "airlock"

-- expect: the causes allowed. A guest that returns "ESCAPED" (or anything at
-- all with cause ok, unless ok_value is given) has got out.
local attempts = {
  { name = "open a host file with io",
    guest = [[return io.open("/etc/passwd"):read("a")]], expect = { error = true } },
  { name = "run a shell with os.execute",
    guest = [[return os.execute("id")]], expect = { error = true } },
  { name = "popen a shell",
    guest = [[return io.popen("id"):read("a")]], expect = { error = true } },
  { name = "load the LuaJIT FFI with require",
    guest = [[local ffi = require "ffi" return "ESCAPED"]], expect = { denied = true, error = true } },
  { name = "load a C module with package.loadlib",
    guest = [[return package.loadlib("/lib/x86_64-linux-gnu/libc.so.6", "system")]], expect = { error = true } },
  { name = "dump a function's bytecode with string.dump",
    guest = [[return string.dump(function() return 1 end)]], expect = { error = true } },
  -- Real bytecode, made by the host (string.dump) and handed in as the input.
  { name = "load a binary (bytecode) chunk",
    guest = [[
      local f, err = load((...), "x", "b")
      if f then return f() end
      return err
    ]], input = string.dump(function() return "ESCAPED" end),
    expect = { ok = true }, ok_match = "binary" },
  { name = "load bytecode with the default mode",
    guest = [[
      local f, err = load((...))
      if f then return f() end
      return err
    ]], input = string.dump(function() return "ESCAPED" end),
    expect = { ok = true }, ok_match = "binary" },
  { name = "ask for an effect the policy does not grant",
    guest = [[return host.call("fs.read", { path = "/etc/shadow" })]], expect = { denied = true } },
  { name = "ask for a network effect",
    guest = [[return host.call("http.get", { url = "http://169.254.169.254/" })]], expect = { denied = true } },
  { name = "loop forever",
    -- stopped by its CPU budget (1 s), or by the wall-clock deadline (5 s)
    -- when a loaded machine gives it less than 1 s of CPU in 5 s: both stop it
    guest = [[local n = 0 while true do n = n + 1 end]], expect = { instructions = true, cpu = true, deadline = true } },
  { name = "hog memory",
    guest = [[local t = {} for i = 1, 1e9 do t[i] = ("x"):rep(4096) .. i end]], expect = { memory = true } },
  { name = "reach the debug library",
    guest = [[return debug.getregistry()]], expect = { error = true } },
  { name = "reach the host's globals through the environment",
    guest = [[for k in pairs(_G) do if k == "airlock" then return "ESCAPED" end end return nil]],
    expect = { ok = true }, ok_value = nil },
}

local failures = 0
print(string.format("%-52s %-13s %s", "attempt", "cause", "message"))
for _, a in ipairs(attempts) do
  local res, err = airlock.run { guest = a.guest, name = "redteam", input = a.input }
  local cause = res and res.cause or "not started"
  local good = res ~= nil and a.expect[cause] == true
  if good and cause == "ok" then
    if a.ok_match then good = type(res.value) == "string" and res.value:find(a.ok_match, 1, true) ~= nil
    else good = res.value == a.ok_value end
  end
  if res and res.value == "ESCAPED" then good = false end
  local msg = res and (res.message ~= "" and res.message or tostring(res.value)) or tostring(err)
  print(string.format("%-52s %-13s %s%s", a.name, cause, msg:sub(1, 70), good and "" or "   <-- NOT CONTAINED"))
  if not good then failures = failures + 1 end
end

if failures > 0 then
  io.stderr:write(string.format("redteam: FAIL: %d of %d attempts were not contained\n", failures, #attempts))
  os.exit(1)
end
print(string.format("redteam: ok: all %d escape attempts contained", #attempts))
