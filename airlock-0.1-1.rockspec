-- airlock-0.1-1.rockspec -- `luarocks make` in the checkout builds airlock with
-- its own Makefile (premake4, gcc, Debian's libraries: `make deps` installs
-- what is missing) and installs into the luarocks tree: the Lua module
-- (airlock.so), the worker and airlock-init beside it (the module finds them
-- there), and the airlock command. Nothing is fetched: the rock is this
-- checkout.
rockspec_format = "3.0"
package = "airlock"
version = "0.1-1"
source = { url = "git+file://." }
description = {
  summary = "Run untrusted code in disposable confined processes, with Lua policy",
  detailed = [[
A C core (spawn, confine, broker, ledger) and a Lua 5.4 module: every run of
untrusted code gets its own child process confined by seccomp, Landlock,
namespaces, rlimits and cgroups; everything it asks of the world is an effect
a Lua policy decides, recorded in a hash-chained ledger.]],
}
dependencies = { "lua >= 5.4, < 5.5" }
build = {
  type = "make",
  build_target = "build",
  install_target = "install-rock",
  install_variables = {
    ROCK_LIBDIR = "$(LIBDIR)",
    ROCK_BINDIR = "$(BINDIR)",
  },
}
