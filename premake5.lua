-- premake5.lua -- build description for airlock.
-- Written in the subset Debian's premake4 also reads:
--   premake4 --file=premake5.lua gmake && make -C build config=release
-- Configurations: release (build/bin, build/lib) and sanitize (ASan+UBSan, build/san/).

local LUA_INC = "/usr/include/lua5.4"
local WARN = { "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fPIC" }

solution "airlock"
  configurations { "release", "sanitize" }
  location "build"
  language "C"
  includedirs { "core", "ledger", "lua", "lua/binding", "build/gen", LUA_INC }
  buildoptions(WARN)

  configuration "release"
    buildoptions { "-O2", "-g" }
    objdir "build/obj/release"
  configuration "sanitize"
    buildoptions { "-O1", "-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                   "-fno-sanitize-recover=undefined" }
    linkoptions { "-fsanitize=address,undefined" }
    objdir "build/obj/sanitize"
  configuration {}

-- Output folders per configuration: binaries in bin/, the module and libraries in lib/.
local function outdirs(bin)
  configuration "release"
    targetdir(bin and "build/bin" or "build/lib")
  configuration "sanitize"
    targetdir(bin and "build/san/bin" or "build/san/lib")
  configuration {}
end

-- core/: the C library (no Lua inside).
project "airlock-core"
  kind "StaticLib"
  files { "core/*.c" }
  outdirs(false)

-- lua/: value conversion shared by the module and the worker.
project "airlock-convert"
  kind "StaticLib"
  files { "lua/convert.c" }
  outdirs(false)

-- The binding and the library's embedded Lua sources (lua/airlock/*.lua,
-- lua/airlock/*/*.lua, policies/*.lua but the command's own, turned into
-- build/gen/embedded.c by tools/embed.lua before premake runs; the command's
-- CLI, REPL, demo and benchmark go to build/gen/embedded_cli.c).
-- build/gen/seccomp_stock.c: the stock policies' seccomp programs, compiled
-- when airlock is built (tools/seccomp_stock.c, run by the Makefile first).
local BINDING = { "lua/binding/*.c", "build/gen/embedded.c", "build/gen/seccomp_stock.c" }

-- airlock.so: the Lua 5.4 module (require "airlock"); the host provides liblua.
project "airlock-module"
  kind "SharedLib"
  targetname "airlock"
  targetprefix ""
  files(BINDING)
  links { "airlock-convert", "airlock-core", "msgpackc", "seccomp", "dl" }
  outdirs(false)

-- airlock: a Lua 5.4 host with the module built in, plus subcommands. Lua is
-- linked in from liblua5.4.a, as for the worker below: the shared library
-- cost each start its loading and a symbol lookup at the first call of each
-- Lua API function; -E exports the API to the C modules a REPL may load.
-- readline is opened only by the REPL at a terminal (lua/repl_readline.c).
project "airlock"
  kind "ConsoleApp"
  files(BINDING)
  files { "lua/main.c", "lua/repl_readline.c", "build/gen/embedded_cli.c" }
  links { "airlock-convert", "airlock-core", ":liblua5.4.a", "msgpackc", "seccomp", "m", "dl" }
  linkoptions { "-Wl,-E" }
  outdirs(true)

-- airlock-worker: the disposable child that hosts one guest.
-- Lua is linked in from liblua5.4.a, as /usr/bin/lua5.4 has it, not from
-- the shared library: calls and data inside the interpreter are then direct,
-- not through the PLT and GOT, and CPU-bound guest code runs at lua5.4's
-- speed (about a tenth faster on floating point: airlock bench guest). The
-- coroutine library's lua_resume and lua_resetthread are wrapped (the CPU
-- budgets' hook follows the running coroutine: worker/limits.c).
project "airlock-worker"
  kind "ConsoleApp"
  files { "worker/*.c" }
  links { "airlock-convert", "airlock-core", ":liblua5.4.a", "msgpackc", "seccomp", "m", "dl" }
  linkoptions { "-Wl,--wrap=lua_resume", "-Wl,--wrap=lua_resetthread" }
  outdirs(true)

-- The journal engine (ledger/journal.h: the writer, the reader and verify,
-- sealed segments, branch), which only airlock-ledgerd runs; not part of
-- libairlock. Its test and benchmark programs link it too.
local JOURNAL = { "ledger/journal.c", "ledger/journal_read.c", "ledger/segment.c" }
project "airlock-journal"
  kind "StaticLib"
  files(JOURNAL)
  outdirs(false)

-- airlock-ledgerd: one session's ledger in a confined process of its own
-- (ledger/main.c, inbox.c, zstd.c); hosts start it through core/ledger_proc.c.
local LEDGERD = { "ledger/main.c", "ledger/inbox.c", "ledger/zstd.c" }
project "airlock-ledgerd"
  kind "ConsoleApp"
  files(LEDGERD)
  links { "airlock-journal", "airlock-core", "msgpackc", "crypto", "seccomp", "zstd" }
  outdirs(true)

-- airlock-ledgerd-crashpoints: a test program, never installed (make install
-- and install-rock copy airlock-ledgerd alone). The same sources, the journal
-- engine's included, compiled with AIRLOCK_CRASH_POINTS: its ledger/segment.c
-- has the seal's crash points (ledger/journal_int.h), so
-- AIRLOCK_LEDGER_CRASH_AT=PHASE stops it there (spec/lua/ledger_seal_spec.lua).
project "airlock-ledgerd-crashpoints"
  kind "ConsoleApp"
  defines { "AIRLOCK_CRASH_POINTS" }
  files(LEDGERD)
  files(JOURNAL)
  links { "airlock-core", "msgpackc", "crypto", "seccomp", "zstd" }
  outdirs(true)

-- airlock-init: PID 1 of a program's pid namespace (init/main.c). Static, so
-- it runs in any root file system, and without a C library (init/sys.h: the
-- C library's own start was half its cost); never sanitized (a static link cannot
-- carry the sanitizer runtime, and it makes a handful of system calls).
project "airlock-init"
  kind "ConsoleApp"
  files { "init/*.c" }
  configuration "sanitize"
    buildoptions { "-fno-sanitize=all" }
    linkoptions { "-fno-sanitize=all" }
  configuration {}
  -- No C library (init/sys.h): its own _start, raw system calls.
  buildoptions { "-ffreestanding", "-fno-stack-protector", "-fno-pic" }
  linkoptions { "-static", "-nostdlib", "-no-pie" }
  outdirs(true)

-- airlock-egress: one run's egress proxy (egress/main.c), a confined program
-- of its own that asks the parent's policy about every connection.
project "airlock-egress"
  kind "ConsoleApp"
  files { "egress/*.c" }
  links { "airlock-core", "msgpackc", "seccomp" }
  outdirs(true)

-- Writes build/gen/seccomp_stock.c (the Makefile runs it before the rest).
project "airlock-seccomp-stock"
  kind "ConsoleApp"
  files { "tools/seccomp_stock.c" }
  links { "airlock-core", "seccomp" }
  outdirs(true)

-- Test and benchmark programs.
local function tool(name, srcs, libs)
  project(name)
    kind "ConsoleApp"
    files(srcs)
    links(libs or {})
    outdirs(true)
end
tool("test-codec", { "spec/c/test_codec.c" }, { "airlock-core", "msgpackc" })
tool("test-convert", { "spec/c/test_convert.c" }, { "airlock-convert", "airlock-core", "lua5.4", "msgpackc", "m" })
tool("test-confine", { "spec/c/test_confine.c" }, { "airlock-core", "seccomp" })
tool("test-broker-loop", { "spec/c/test_broker_loop.c" }, { "airlock-core", "msgpackc", "seccomp" })
tool("test-confine-prepare", { "spec/c/test_confine_prepare.c" }, { "airlock-core", "seccomp" })
tool("test-spawn-mount", { "spec/c/test_spawn_mount.c" }, { "airlock-core", "msgpackc", "seccomp" })
tool("test-helpers", { "spec/c/test_helpers.c" }, { "airlock-core" })
tool("attack", { "spec/fixtures/attack.c" }, { "airlock-core", "seccomp" })
tool("hostile-worker", { "spec/fixtures/hostile_worker.c" }, { "airlock-core", "msgpackc", "seccomp" })
tool("c-defaults", { "spec/fixtures/c_defaults.c" }, { "airlock-core", "msgpackc", "seccomp" })
tool("airlock-baseline", { "bench/baseline.c" }, { "msgpackc" })
tool("airlock-netns", { "bench/netns.c" })
tool("test-ledger", { "spec/c/test_ledger.c", "ledger/zstd.c" }, { "airlock-journal", "airlock-core", "msgpackc", "crypto", "zstd" })
tool("airlock-ledger-bench", { "bench/ledger_bench.c", "ledger/zstd.c" }, { "airlock-journal", "airlock-core", "msgpackc", "crypto", "seccomp", "sqlite3", "zstd" })

-- Examples (examples/): plugin-host, a game-style C host embedding Lua 5.4 and
-- the binding the way the airlock command does (its Lua part, host.lua, is read
-- from the example's directory, compiled in here); c-embed, a C-only host.
project "plugin-host"
  kind "ConsoleApp"
  files(BINDING)
  files { "examples/plugin-host/main.c" }
  buildoptions { "'-DPLUGIN_HOST_DIR=\"" .. path.getabsolute("examples/plugin-host") .. "\"'" }
  links { "airlock-convert", "airlock-core", "lua5.4", "msgpackc", "seccomp", "m", "dl" }
  linkoptions { "-Wl,-E" }
  outdirs(true)
tool("c-embed", { "examples/c-embed/main.c" }, { "airlock-core", "msgpackc", "seccomp" })

-- Fuzzing (make fuzz): libFuzzer targets in their own solution, built with
-- clang (make -C build/fuzz CC=clang config=fuzz); each links the core it tests.
solution "airlock-fuzz"
  configurations { "fuzz" }
  location "build/fuzz"
  language "C"
  includedirs { "core", "lua", LUA_INC }
  buildoptions { "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g", "-O1",
                 "-fsanitize=fuzzer,address,undefined", "-fno-omit-frame-pointer" }
  linkoptions { "-fsanitize=fuzzer,address,undefined" }
  objdir "build/fuzz/obj"
  targetdir "build/fuzz/bin"
  for _, t in ipairs { "frame", "codec", "convert" } do
    project(t .. "_fuzz")
      kind "ConsoleApp"
      files { "fuzz/" .. t .. "_fuzz.c", "core/*.c", "lua/convert.c" }
      links { "msgpackc", "seccomp", "crypto", "lua5.4", "m" }
  end
  -- the journal engine's reader and writer
  project "ledger_fuzz"
    kind "ConsoleApp"
    includedirs { "ledger" }
    files { "fuzz/ledger_fuzz.c", "core/*.c", "lua/convert.c" }
    files(JOURNAL)
    links { "msgpackc", "seccomp", "crypto", "lua5.4", "m" }
  -- the sealed-segment block decoder, with the zstd codec the ledger process uses
  project "segment_fuzz"
    kind "ConsoleApp"
    includedirs { "ledger" }
    files { "fuzz/segment_fuzz.c", "core/*.c", "ledger/zstd.c" }
    files(JOURNAL)
    links { "msgpackc", "seccomp", "crypto", "zstd" }
