# Makefile -- thin wrapper: installs what is missing, generates with premake4, builds.
#   make demo   build everything and run the demos (examples/plugin-host, then airlock demo)
#   make test   build (release and sanitizer builds) and run every test
#   make bench  run the benchmark (ratios against baselines measured in the same run)

DEBS = gcc make pkg-config lua5.4 liblua5.4-dev libseccomp-dev libmsgpack-dev \
       premake4 lua-busted lua-dkjson libreadline-dev strace \
       libssl-dev libsqlite3-dev bubblewrap libcurl4-openssl-dev \
       tmux python3 python3-msgpack libc6-dev \
       busybox-static git sqlite3 curl wget xz-utils perl openssl luarocks \
       libzstd-dev
LUA_SRC = $(wildcard lua/airlock/*.lua) $(wildcard lua/airlock/*/*.lua) $(wildcard policies/*.lua)
# The command's own Lua (its command line, REPL, demo and benchmark) is built
# into the airlock command alone; airlock.so and other hosts get the library.
LUA_CLI = $(wildcard lua/airlock/cli/*.lua)
LUA_LIB = $(filter-out $(LUA_CLI),$(LUA_SRC))
EMBEDDED = build/gen/embedded.c build/gen/embedded_cli.c build/gen/init_fields.h
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

# make install [PREFIX=/usr/local] [DESTDIR=]: the C library (libairlock.a, the
# core: spawn, confine, broker, ledger; no Lua inside), its headers in
# include/airlock/, airlock.pc, the Lua 5.4 module, the worker and the command.
# The module and the command find the worker relative to themselves at run time
# (PREFIX/libexec/airlock/), so an installed tree works under any PREFIX.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
LIBEXECDIR ?= $(PREFIX)/libexec
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
LUA_CMOD_DIR ?= $(LIBDIR)/lua/5.4
MANDIR ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
MAN_PAGES = run exec ledger replay resume call probe bench
VERSION = 0.1
INSTALL ?= install
# In airlock.pc, directories under PREFIX are written relative to ${prefix}, so
# pkg-config --define-variable=prefix=... relocates them.
PC_LIBDIR = $(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))
PC_INCLUDEDIR = $(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))

.PHONY: all build build-san deps demo test bench fuzz lint clean install install-rock uninstall

all: build

deps:
	@missing=""; for p in $(DEBS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

build/gen/embedded.c: tools/embed.lua tools/drop_local_names.lua tools/write_if_changed.lua $(LUA_LIB)
	@mkdir -p build/gen
	lua5.4 tools/embed.lua $@ airlock_embedded_files $(LUA_LIB)

# The worker's table of init and start frame fields, from their one statement.
build/gen/init_fields.h: tools/init_fields.lua tools/write_if_changed.lua lua/airlock/launch/fields.lua
	@mkdir -p build/gen
	lua5.4 tools/init_fields.lua lua/airlock/launch/fields.lua $@

build/gen/embedded_cli.c: tools/embed.lua tools/drop_local_names.lua tools/write_if_changed.lua $(LUA_CLI)
	@mkdir -p build/gen
	lua5.4 tools/embed.lua $@ airlock_embedded_cli $(LUA_CLI)

build/Makefile: premake5.lua $(wildcard core/*.c init/*.c egress/*.c ledger/*.c lua/*.c lua/binding/*.c worker/*.c spec/c/*.c spec/fixtures/*.c bench/*.c)
	premake4 --file=premake5.lua gmake >/dev/null
	@# ar only adds members: a renamed or removed source would stay in the archives.
	rm -f build/lib/*.a build/san/lib/*.a

# The seccomp programs compiled at build time (tools/seccomp_stock.c), one per
# promise list: the stock tool policy's (policies/tool.lua), in the order the
# planner writes it. spec/lua/seccomp_stock_spec.lua checks that `airlock
# exec` under the stock policy takes its program from here.
SECCOMP_STOCK = "stdio rpath wpath cpath fattr unix proc exec id tty"

build: deps $(EMBEDDED) build/Makefile
	$(MAKE) -s -C build config=release -j$(JOBS) airlock-seccomp-stock
	build/bin/airlock-seccomp-stock build/gen/seccomp_stock.c $(SECCOMP_STOCK)
	$(MAKE) -s -C build config=release -j$(JOBS)

build-san: deps $(EMBEDDED) build/Makefile
	$(MAKE) -s -C build config=sanitize -j$(JOBS) airlock-seccomp-stock
	build/san/bin/airlock-seccomp-stock build/gen/seccomp_stock.c $(SECCOMP_STOCK)
	$(MAKE) -s -C build config=sanitize -j$(JOBS)

# The main demo: plugin-host (examples/plugin-host), a game host running seven
# bot mods, four of them hostile, for 30 ticks at 20 fps; then one run per cause.
demo: build
	build/bin/plugin-host --ticks 30 --fps 20
	@echo
	build/bin/airlock demo

test: build build-san
	bash spec/run

bench: build
	build/bin/airlock bench

# make docs: docs/POLICY.md, written from the policy schema (spec/lua/policy_doc_spec.lua
# fails when the file and the schema differ).
docs: build
	lua5.4 -e 'package.cpath = "build/lib/?.so;" .. package.cpath' \
	  -e 'io.write(require("airlock").policy.reference())' > docs/POLICY.md

# make fuzz [FUZZ_SECONDS=60]: every libFuzzer target (fuzz/*_fuzz.c, clang with
# ASan+UBSan) on seeds generated by fuzz/seeds.lua; fails on any crash or report.
FUZZ_SECONDS ?= 60
FUZZ_DEBS = clang libclang-rt-14-dev
fuzz: build
	@missing=""; for p in $(FUZZ_DEBS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	$(MAKE) -s -C build/fuzz CC=clang config=fuzz -j$(JOBS)
	lua5.4 fuzz/seeds.lua build/fuzz/corpus build/bin/airlock
	bash fuzz/run $(FUZZ_SECONDS)

# make lint: cppcheck and clang-tidy on core/, ledger/, lua/ and worker/, both clean, every
# C file in the style .clang-format states (clang-format --dry-run), and
# every C file compiled by clang with -Wall -Wextra -Werror (gcc builds them so).
# clang-tidy's set: bugprone-* without the checks that only flagged sound code
# here (sizeof of a pointer array's element, memcpy of length-counted text,
# widening, parameter order, reserved names, narrowing, assignment in if),
# misc-redundant-expression and cert-err34-c (unchecked string-to-number).
# The sources of airlock-ledgerd-crashpoints (a test program) are checked a
# second time with AIRLOCK_CRASH_POINTS, the code it alone has.
LINT_DEBS = cppcheck clang-tidy clang clang-format
TIDY_CHECKS = -*,bugprone-*,-bugprone-easily-swappable-parameters,-bugprone-reserved-identifier,\
-bugprone-narrowing-conversions,-bugprone-assignment-in-if-condition,\
-bugprone-implicit-widening-of-multiplication-result,-bugprone-sizeof-expression,\
-bugprone-not-null-terminated-result,misc-redundant-expression,cert-err34-c
LINT_SRC = core/*.c init/*.c egress/*.c ledger/*.c worker/*.c lua/*.c lua/binding/*.c tools/*.c
CRASH_SRC = ledger/segment.c ledger/main.c
lint: $(EMBEDDED)
	@missing=""; for p in $(LINT_DEBS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	cppcheck --quiet --std=c11 --enable=warning,performance,portability --inline-suppr \
	  --error-exitcode=1 --suppress=missingIncludeSystem --suppress=missingInclude \
	  -Icore -Iledger -Ilua -Ilua/binding -Ibuild/gen -D__x86_64__ core ledger lua/*.c lua/binding worker
	clang-tidy --quiet --warnings-as-errors='*' -checks='$(TIDY_CHECKS)' $(LINT_SRC) -- \
	  -std=gnu11 -D_GNU_SOURCE -Icore -Iledger -Ilua -Ilua/binding -Ibuild/gen -I/usr/include/lua5.4
	clang-tidy --quiet --warnings-as-errors='*' -checks='$(TIDY_CHECKS)' $(CRASH_SRC) -- \
	  -std=gnu11 -D_GNU_SOURCE -DAIRLOCK_CRASH_POINTS -Icore -Iledger -Ilua -Ilua/binding -Ibuild/gen
	@for f in $(LINT_SRC) spec/c/*.c spec/fixtures/*.c bench/*.c examples/*/*.c; do \
	  clang -fsyntax-only -std=gnu11 -Wall -Wextra -Werror -Icore -Iledger -Ilua -Ilua/binding \
	    -Ibuild/gen -I/usr/include/lua5.4 '-DPLUGIN_HOST_DIR="/x"' $$f || exit 1; \
	done
	@for f in $(CRASH_SRC); do \
	  clang -fsyntax-only -std=gnu11 -Wall -Wextra -Werror -DAIRLOCK_CRASH_POINTS -Icore -Iledger $$f || exit 1; \
	done
	@git ls-files '*.c' '*.h' | xargs clang-format --dry-run -Werror || \
	  { echo "lint: C code not in the style of .clang-format: run clang-format -i on the files named above"; exit 1; }
	@echo "lint: clean (cppcheck, clang-tidy, clang -Werror, clang-format)"

install: build
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/airlock \
	  $(DESTDIR)$(LIBEXECDIR)/airlock $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(LUA_CMOD_DIR)
	$(INSTALL) -m 644 build/lib/libairlock-core.a $(DESTDIR)$(LIBDIR)/libairlock.a
	$(INSTALL) -m 644 core/airlock.h core/confine.h core/ledger.h core/ledger_proc.h $(DESTDIR)$(INCLUDEDIR)/airlock/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(PC_LIBDIR)|g' -e 's|@INCLUDEDIR@|$(PC_INCLUDEDIR)|g' \
	  -e 's|@VERSION@|$(VERSION)|g' airlock.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/airlock.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/airlock.pc
	$(INSTALL) -m 755 build/lib/airlock.so $(DESTDIR)$(LUA_CMOD_DIR)/airlock.so
	$(INSTALL) -m 755 build/bin/airlock-worker $(DESTDIR)$(LIBEXECDIR)/airlock/airlock-worker
	$(INSTALL) -m 755 build/bin/airlock-init $(DESTDIR)$(LIBEXECDIR)/airlock/airlock-init
	$(INSTALL) -m 755 build/bin/airlock-egress $(DESTDIR)$(LIBEXECDIR)/airlock/airlock-egress
	$(INSTALL) -m 755 build/bin/airlock-ledgerd $(DESTDIR)$(LIBEXECDIR)/airlock/airlock-ledgerd
	$(INSTALL) -m 755 build/bin/airlock $(DESTDIR)$(BINDIR)/airlock
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(BASHCOMPDIR)
	build/bin/airlock help --man > $(DESTDIR)$(MANDIR)/man1/airlock.1
	for c in $(MAN_PAGES); do build/bin/airlock help --man $$c > $(DESTDIR)$(MANDIR)/man1/airlock-$$c.1 || exit 1; done
	chmod 644 $(DESTDIR)$(MANDIR)/man1/airlock*.1
	build/bin/airlock help --completion > $(DESTDIR)$(BASHCOMPDIR)/airlock
	chmod 644 $(DESTDIR)$(BASHCOMPDIR)/airlock

# luarocks make (airlock-0.1-1.rockspec) calls this with the rock's own
# directories: the module with the worker and airlock-init beside it, where
# the module looks first, and the command.
install-rock: build
	$(INSTALL) -d $(ROCK_LIBDIR) $(ROCK_BINDIR)
	$(INSTALL) -m 755 build/lib/airlock.so build/bin/airlock-worker build/bin/airlock-init build/bin/airlock-egress build/bin/airlock-ledgerd $(ROCK_LIBDIR)/
	$(INSTALL) -m 755 build/bin/airlock $(ROCK_BINDIR)/airlock

# make uninstall [PREFIX=...] [DESTDIR=]: removes what make install wrote.
uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libairlock.a $(DESTDIR)$(PKGCONFIGDIR)/airlock.pc \
	  $(DESTDIR)$(LUA_CMOD_DIR)/airlock.so $(DESTDIR)$(BINDIR)/airlock \
	  $(DESTDIR)$(LIBEXECDIR)/airlock/airlock-worker $(DESTDIR)$(LIBEXECDIR)/airlock/airlock-init \
	  $(DESTDIR)$(LIBEXECDIR)/airlock/airlock-egress \
	  $(DESTDIR)$(LIBEXECDIR)/airlock/airlock-ledgerd \
	  $(DESTDIR)$(INCLUDEDIR)/airlock/airlock.h $(DESTDIR)$(INCLUDEDIR)/airlock/confine.h \
	  $(DESTDIR)$(INCLUDEDIR)/airlock/ledger.h $(DESTDIR)$(INCLUDEDIR)/airlock/ledger_proc.h \
	  $(DESTDIR)$(MANDIR)/man1/airlock.1 \
	  $(DESTDIR)$(BASHCOMPDIR)/airlock
	for c in $(MAN_PAGES); do rm -f $(DESTDIR)$(MANDIR)/man1/airlock-$$c.1; done
	-rmdir $(DESTDIR)$(LIBEXECDIR)/airlock $(DESTDIR)$(INCLUDEDIR)/airlock 2>/dev/null

clean:
	rm -rf build
