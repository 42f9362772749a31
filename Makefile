# Makefile -- thin wrapper: installs what is missing, generates with premake4, builds.
#   make demo   build everything and run the main demo under the default policy
#   make test   build (release and sanitizer builds) and run every test
#   make bench  run the benchmark (ratios against baselines measured in the same run)

DEBS = gcc make pkg-config lua5.4 liblua5.4-dev libseccomp-dev libmsgpack-dev \
       premake4 lua-busted lua-dkjson libreadline-dev strace \
       libssl-dev libsqlite3-dev bubblewrap
LUA_SRC = $(wildcard lua/airlock/*.lua) $(wildcard policies/*.lua)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all build build-san deps demo test bench clean

all: build

deps:
	@missing=""; for p in $(DEBS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

build/gen/embedded.c: tools/embed.lua $(LUA_SRC)
	@mkdir -p build/gen
	lua5.4 tools/embed.lua $@ $(LUA_SRC)

build/Makefile: premake5.lua $(wildcard core/*.c lua/*.c lua/binding/*.c worker/*.c spec/c/*.c spec/fixtures/*.c bench/*.c)
	premake4 --file=premake5.lua gmake >/dev/null

build: deps build/gen/embedded.c build/Makefile
	$(MAKE) -s -C build config=release -j$(JOBS)

build-san: deps build/gen/embedded.c build/Makefile
	$(MAKE) -s -C build config=sanitize -j$(JOBS)

demo: build
	build/bin/airlock demo

test: build build-san
	bash spec/run

bench: build
	build/bin/airlock bench

clean:
	rm -rf build
