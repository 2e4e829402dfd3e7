# Starling: the two commands of the README, and a few conveniences.
#   make demo   install what is missing, build, run the federated demo
#   make test   install what is missing, build, check style, run the tests
# PRESET selects a CMake preset (default, release, asan, aarch64, armhf).
PRESET ?= default
ARCH_DEPS = $(if $(filter aarch64,$(PRESET)),arm64,$(if $(filter armhf,$(PRESET)),armhf,))

.PHONY: all deps build test demo style clean

all: build

deps:
	@bash deploy/install-deps.sh $(ARCH_DEPS)

build: deps
	cmake --preset $(PRESET)
	cmake --build --preset $(PRESET)

style:
	@bash .ci/style.sh

test: build style
	ctest --preset $(PRESET)

demo: build
	@bash deploy/demo.sh build/$(PRESET)

clean:
	rm -rf build
