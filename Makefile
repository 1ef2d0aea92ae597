# The README's two commands: `make demo` and `make test`. Each installs missing Debian
# packages, configures, builds, then runs.
PRESET ?= release
BUILD := build/$(PRESET)
JOBS ?= $(shell nproc)
FIXTURES := ../shared/fixtures

.PHONY: deps configure build demo test test-all bench clean fuzz fuzz-ci test-asan test-tsan

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

# libFuzzer targets with ASan + UBSan (clang), each run for FUZZ_SECONDS (tests/fuzz/README.md).
FUZZ_SECONDS ?= 1800
FUZZ_TARGETS := safetensors gguf engine_file tokenizer config routes http structured template

# Builds only the fuzz targets (and the libraries they link), not the test suite.
fuzz:
	@scripts/install_deps.sh fuzz
	@cmake --preset fuzz $(CMAKE_ARGS) >/dev/null
	@cmake --build build/fuzz -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	scripts/fuzz.sh build/fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# What CI runs after the tests: every target for 60 s on its corpus.
fuzz-ci:
	$(MAKE) fuzz FUZZ_SECONDS=60

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer. Every process writes
# its reports to build/asan/sanitizer-reports/, the ferry binaries that process tests start
# included, and any report fails the run even when its test passed. ASAN_CTEST_ARGS narrows
# the run (e.g. ASAN_CTEST_ARGS="-R ValueTest").
ASAN_REPORTS := $(CURDIR)/build/asan/sanitizer-reports
ASAN_CTEST_ARGS ?=
test-asan: deps
	@cmake --preset asan $(CMAKE_ARGS) >/dev/null
	@cmake --build build/asan -j $(JOBS)
	@rm -rf $(ASAN_REPORTS) && mkdir -p $(ASAN_REPORTS)
	cd build/asan || exit 1; rc=0; \
	  ASAN_OPTIONS=detect_leaks=1:log_path=$(ASAN_REPORTS)/asan \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(ASAN_REPORTS)/ubsan \
	  ctest --output-on-failure -j $(JOBS) -LE "slow|gpu" --timeout 1800 $(ASAN_CTEST_ARGS) || rc=$$?; \
	  if [ -n "$$(ls $(ASAN_REPORTS))" ]; then cat $(ASAN_REPORTS)/*; \
	    echo "sanitizer reports in $(ASAN_REPORTS)"; rc=1; fi; exit $$rc

# The scheduler and server tests under ThreadSanitizer.
test-tsan: deps
	@cmake --preset tsan $(CMAKE_ARGS) >/dev/null
	@cmake --build build/tsan -j $(JOBS) --target sched_test serve_test
	cd build/tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  ctest --output-on-failure -j $(JOBS) -L "unit|server" -R "^(Scheduler|EngineCore|ContinuousBatcher|DynamicBatcher|Server|Http|RateLimiter|OutputProcessor|SerialQueue|Metrics|ServerMetrics)" --timeout 1800

clean:
	rm -rf build
