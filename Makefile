# The README's two commands: `make demo` and `make test`. Each installs missing Debian
# packages, configures, builds, then runs.
PRESET ?= release
BUILD := build/$(PRESET)
JOBS ?= $(shell nproc)
FIXTURES := ../shared/fixtures

.PHONY: deps configure build demo test test-all bench clean

deps:
	@scripts/install_deps.sh

configure: deps
	@cmake --preset $(PRESET) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Serves both demo models on 127.0.0.1:8000 and prints example requests (Ctrl-C stops it).
demo: build
	@scripts/demo.sh $(BUILD)/ferry

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE "slow|gpu" --timeout 600

test-all: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE gpu --timeout 1800

clean:
	rm -rf build
