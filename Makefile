# Thin wrapper around CMake. `make test` and `make demo` are all a fresh
# Debian machine needs: they install missing packages (as root), build, run.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
DEB_PACKAGES = build-essential cmake pkg-config libjansson-dev libcmocka-dev \
               python3 libucx-dev ucx-utils redis-server libhiredis-dev

.PHONY: all deps build build-asan test test-asan demo bench clean

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing Debian packages:$$missing (run as root or install them)"; exit 1; fi; \
	fi

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DRESHARD_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)

test-asan: build-asan
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS)

# The whole suite: the sanitizer build first, then the release build, whose
# CTest summary closes the output.
test: test-asan build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The main job: trainer and inference processes move two versions of
# Qwen2.5-0.5B over UCX (UCX_TLS=sm unless set) and verify every byte.
demo: build
	./$(BUILD)/reshard demo

bench: build
	./$(BUILD)/bench/plan_bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
