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

DEMO_PASSAGE := Comfort ye, comfort ye my people, saith your God. Speak ye comfortably to Jerusalem, and cry unto her, that her warfare is accomplished, that her iniquity is pardoned: for she hath received of the LORD's hand double for all her sins.

demo: build
	@echo "== kjv-decoder: ferry generate (greedy) =="
	$(BUILD)/ferry generate --model models/demo/kjv-decoder --prompt "And the LORD said unto" --max-tokens 48 --temperature 0
	@echo "== kjv-decoder: ferry generate (temperature 0.8, top-p 0.95, seed 7) =="
	$(BUILD)/ferry generate --model models/demo/kjv-decoder --prompt "And the LORD said unto" --max-tokens 48 --temperature 0.8 --top-p 0.95 --seed 7
	@echo "== kjv-classifier: ferry classify on a held-out passage (Isaiah 40:1-2, Major Prophets) =="
	$(BUILD)/ferry classify --model models/demo/kjv-classifier --text "$(DEMO_PASSAGE)"

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE "slow|gpu" --timeout 600

test-all: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE gpu --timeout 1800

clean:
	rm -rf build
