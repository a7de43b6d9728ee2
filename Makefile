# The two commands a new user needs (see README.md):
#   make demo   bootstrap, build the three programs the demo runs (no tests; CUDA
#               only when a GPU is visible), then run the main job end to end
#   make test   bootstrap, build everything, then run the whole test suite through ctest
BUILD_DIR ?= build
SBP_CUDA ?= AUTO
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)

# The demo's programs, and its CUDA setting: AUTO (CUDA when nvcc is found)
# only where a GPU is visible, else OFF, so that a CPU machine compiles no
# CUDA objects for a CPU demo.
# Its own build directory, compiled as a unity build (16 sources of a target
# per compiler run: the headers are parsed once per batch, about 4x less
# compile time on 2 cores); `make test` builds $(BUILD_DIR) one source at a time.
DEMO_TARGETS = sbp sbp-coordinator sbp-worker
DEMO_CUDA ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo AUTO || echo OFF)
DEMO_BUILD_DIR ?= build-demo

.PHONY: demo demo-build test build bootstrap configure format format-check clean

bootstrap:
	@scripts/bootstrap

configure: bootstrap
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DSBP_CUDA=$(SBP_CUDA) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

demo-build:
	@scripts/bootstrap --demo
	@cmake -S . -B $(DEMO_BUILD_DIR) -G Ninja -DSBP_CUDA=$(DEMO_CUDA) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 >/dev/null
	@cmake --build $(DEMO_BUILD_DIR) -j $(JOBS) --target $(DEMO_TARGETS)

demo: demo-build
	@scripts/demo $(DEMO_BUILD_DIR)

FORMAT_FILES = $(shell git ls-files '*.cc' '*.h' '*.cu' '*.cuh')

format:
	@clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES)

clean:
	@rm -rf $(BUILD_DIR)
