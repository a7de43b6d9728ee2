# The two commands a new user needs (see README.md):
#   make demo   bootstrap, build, then run the main job end to end on the CPU
#   make test   bootstrap, build, then run the whole test suite through ctest
BUILD_DIR ?= build
SBP_CUDA ?= AUTO
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)

.PHONY: demo test build bootstrap configure format format-check clean

bootstrap:
	@scripts/bootstrap

configure: bootstrap
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DSBP_CUDA=$(SBP_CUDA) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

demo: build
	@scripts/demo $(BUILD_DIR)

FORMAT_FILES = $(shell git ls-files '*.cc' '*.h' '*.cu' '*.cuh')

format:
	@clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES)

clean:
	@rm -rf $(BUILD_DIR)
