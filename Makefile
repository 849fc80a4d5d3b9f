# Thin wrapper around CMake. `make test` and `make demo` are all a fresh
# Debian machine needs: they install missing packages (as root), build, run.
BUILD       ?= build
ASAN_BUILD  ?= build-asan
TSAN_BUILD  ?= build-tsan
CLANG_BUILD ?= build-clang
FUZZ_BUILD  ?= build-fuzz
RELEASE_BUILD ?= build-release
TYPES_BUILD ?= build-types
BUILD_TYPES = Release Debug RelWithDebInfo MinSizeRel
FUZZ_SECONDS ?= 300
FUZZ_RUNS   ?= 20000
FUZZ_SEED   ?= 1
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
DEB_PACKAGES = build-essential cmake pkg-config libjansson-dev libcmocka-dev \
               python3 libucx-dev ucx-utils redis-server libhiredis-dev \
               clang clang-tidy cppcheck libclang-rt-14-dev \
               iproute2 procps python3-torch python3-pytest python3-venv \
               python3-pip python3-pytest-xdist

# The Python environments (scripts/python_envs.sh), all outside the tree.
# TORCH1_PYTHON: Debian's python3 with its torch 1.13. TORCH2_VENV: current
# PyTorch and vLLM from the package index, made by `make deps` from
# TORCH2_REQUIREMENTS with TORCH2_PYTHON, and made again only when that
# file changes; point it at an environment made otherwise to use that one
# (it is checked, never changed). TEST_VENVS: where `make test` makes the
# two environments it installs the wheel into, new each run, one per
# source tree.
RESHARD_CACHE ?= $(HOME)/.cache/reshard
TORCH1_PYTHON ?= /usr/bin/python3
TORCH2_PYTHON ?= python3
TORCH2_VENV   ?= $(RESHARD_CACHE)/venv-torch2
TORCH2_REQUIREMENTS = tests/python/requirements-torch2.txt
TEST_VENVS    ?= $(RESHARD_CACHE)/test-venvs/$(notdir $(CURDIR))-$(shell \
                 printf %s '$(CURDIR)' | sha256sum | cut -c1-8)
WHEEL_DIR      = $(RELEASE_BUILD)/dist

# The tests that start threads: the worker pool, local-mt and the executor
# over it, the publisher's heartbeat and UCX progress threads, the
# directory's racing publishers, the receiver's lease renewal during
# failovers, the executor's stage pool in pipelined runs and the
# receiver's install copy, the arenas' exposers.
# The TSan tree builds only these programs (and what they link); test_lease
# and test_transport run as ctest tests per part (tests/CMakeLists.txt), and
# of test_transport only the parts that start threads (api opens local-mt;
# local and cma read on the caller's thread, so ASan covers them whole).
TSAN_PROGRAMS = test_arena test_pool test_transport test_exec test_fused_digest test_pipeline \
                test_refit test_dir test_lease test_stage test_plan_threads \
                test_unregister test_memory_types test_replicas test_dry_run \
                test_install_copy
TSAN_TESTS = ^(test_arena|test_pool|test_transport_(api|local-mt-.+)|test_exec|test_fused_digest|test_pipeline|test_refit|test_dir|test_lease_.+|test_stage|test_plan_threads|test_unregister|test_memory_types|test_replicas|test_dry_run|test_install_copy)$$
# UCX's memory hooks (libucm) intercept madvise() as glibc frees a finished
# thread's stack, after TSan has torn down that thread's state, and crash
# there. We do not use UCX memory events (buffers are registered explicitly),
# so the hooks are off under TSan.
TSAN_ENV = TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
           UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none

# Static analysis (docs/hardening.md, "Static analysis"). cppcheck sees the
# configuration we build (gcc, x86-64 Linux); clang-tidy reads .clang-tidy
# and the ASan tree's (clang) compile_commands.json.
CPPCHECK_FLAGS = --enable=warning,performance,portability --error-exitcode=1 \
                 --inline-suppr --quiet -j $(JOBS) -D__GNUC__ -D__x86_64__ \
                 -D__linux__ -D_GNU_SOURCE -I include -I src

.PHONY: all deps deps-debian deps-torch2 build build-asan build-tsan \
        build-clang test test-asan test-tsan analyze cppcheck tidy fuzz \
        fuzz-gate demo bench clean build-release build-release-gate \
        build-types layers wheel test-venvs mutate

all: build

# Everything the builds and the tests need: Debian's packages, then the
# environment of current PyTorch (the first time on a machine pip downloads
# PyTorch and vLLM, several GB, about seven minutes).
deps: deps-debian deps-torch2

deps-debian:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing Debian packages:$$missing (run as root or install them)"; exit 1; fi; \
	fi

deps-torch2: deps-debian
	bash scripts/python_envs.sh deps $(TORCH2_VENV) $(TORCH2_PYTHON) \
	  $(TORCH2_REQUIREMENTS)

build: deps-debian
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# The tree `make test` runs last: -O3 without assertions, as a packager
# builds it.
build-release: deps-debian
	cmake -S . -B $(RELEASE_BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(RELEASE_BUILD) -j $(JOBS)

# What `make test` needs of the Release tree: the libraries and the CLI (the
# layer check reads their objects; the Python suite, the examples and the
# demo run them), the benches, and the kernel tests it runs there. The
# other test programs run in the sanitizer trees, which compile them with
# clang (ASan) and gcc (TSan) already.
RELEASE_GATE_TARGETS = reshard reshard_static reshard_layout reshard_cli \
                       release_gate_kernels \
                       $(notdir $(basename $(wildcard bench/*_bench.c)))

build-release-gate: deps-debian
	cmake -S . -B $(RELEASE_BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(RELEASE_BUILD) -j $(JOBS) --target $(RELEASE_GATE_TARGETS)

# Every standard CMake build type with gcc and with clang, -Werror (each
# optimization level warns differently: Release found a maybe-uninitialized
# that Debug never shows). Compiles only; about eight builds' time.
build-types: deps-debian
	@for cc in gcc clang; do for t in $(BUILD_TYPES); do \
	  echo "== $$cc $$t"; \
	  CC=$$cc cmake -S . -B $(TYPES_BUILD)/$$cc-$$t -DCMAKE_BUILD_TYPE=$$t >/dev/null && \
	  cmake --build $(TYPES_BUILD)/$$cc-$$t -j $(JOBS) >$(TYPES_BUILD)/$$cc-$$t.log 2>&1 || \
	  { cat $(TYPES_BUILD)/$$cc-$$t.log; exit 1; }; done; done

# The sanitizer trees are Debug (assertions on) at -O1, as the sanitizers'
# authors advise: every access is still checked, and the suite runs in about
# half the time -O0 takes.
SAN_FLAGS = -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1"

# clang builds the ASan+UBSan tree: the whole tree (library, CLI, every
# test and bench) is then also proven warning-free (-Wall -Wextra -Wshadow
# -Werror) under clang, whose UBSan checks more than gcc's (pointer
# arithmetic on null, for one), and its compile_commands.json feeds
# clang-tidy; gcc builds the Release and TSan trees.
build-asan: deps-debian
	CC=clang cmake -S . -B $(ASAN_BUILD) $(SAN_FLAGS) -DRESHARD_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)

build-tsan: deps-debian
	cmake -S . -B $(TSAN_BUILD) $(SAN_FLAGS) -DRESHARD_TSAN=ON >/dev/null
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_PROGRAMS)

# An unsanitized clang Debug tree, for debugging outside the sanitizers
# (the gate's clang tree is the ASan one).
build-clang: deps-debian
	CC=clang cmake -S . -B $(CLANG_BUILD) -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build $(CLANG_BUILD) -j $(JOBS)

# The ASan suite runs one test more than there are cores: its lease,
# directory and multi-process tests spend much of their time waiting on
# servers, children and lease clocks, which left a quarter of two cores
# idle at -j 2 (182 s there, 128 s at -j 3, the same verdict; no test
# asserts on time, and every wait is bounded far above what it needs).
ASAN_JOBS ?= $(shell echo $$(( $(JOBS) + 1 )))

test-asan: build-asan
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(ASAN_JOBS)

test-tsan: build-tsan
	cd $(TSAN_BUILD) && $(TSAN_ENV) ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)'

analyze: cppcheck tidy layers

# The layers (scripts/check_layers.py): every #include under src/, include/,
# tools/ and bench/, and every rs_/rs__ symbol the Release tree's objects
# need, must reach only down (core <- geom <- model <- plan <- exec; dir on
# core; refit over all; layout on model and the public API; the CLI on the
# public API). A few seconds after the build of what it reads.
layers: build-release-gate
	python3 scripts/check_layers.py --build $(RELEASE_BUILD)

# The wheel as `pip wheel .` builds it (build isolation: pip installs
# scikit-build-core into a new environment of its own), into $(WHEEL_DIR).
# Its CMake tree is the Release tree: the same compiler, build type and
# flags, so the library's objects are compiled once for both and the wheel
# adds the link of its static CLI. scikit-build-core clears a tree it last
# configured from another (isolated, so always new) environment; nothing in
# this project's configuration comes from that environment, so its record
# of the last one is dropped first and the tree is kept.
wheel: build-release-gate
	rm -rf $(WHEEL_DIR) $(RELEASE_BUILD)/.skbuild-info.json
	CMAKE_GENERATOR="$$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' \
	  $(RELEASE_BUILD)/CMakeCache.txt)" CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) \
	  $(TORCH1_PYTHON) -m pip wheel -q --no-deps -w $(WHEEL_DIR) \
	  --config-settings=build-dir=$(RELEASE_BUILD) \
	  --config-settings=cmake.define.RESHARD_TESTS=ON .

# Two new environments with the wheel installed, one per PyTorch
# (scripts/python_envs.sh test), and the Release tree's Python tests
# pointed at them (RESHARD_TEST_PYTHONS, tests/CMakeLists.txt): the suite
# and the examples run against the installed package, its bundled library
# and its `reshard` command, not python/. `cmake -S . -B $(RELEASE_BUILD)
# -DRESHARD_TEST_PYTHONS=` points them back at the source tree.
test-venvs: wheel deps-torch2
	envs=$$(bash scripts/python_envs.sh test $(TEST_VENVS) \
	  $$(ls $(WHEEL_DIR)/reshard-*.whl) $(TORCH1_PYTHON) $(TORCH2_VENV)) && \
	cmake -S . -B $(RELEASE_BUILD) -DRESHARD_TEST_PYTHONS="$$envs" >/dev/null

cppcheck: deps-debian
	cppcheck $(CPPCHECK_FLAGS) src tools

# Clean, and about a minute on two cores (after the ASan build), so
# `make test` runs it. .clang-tidy makes every finding an error
# (WarningsAsErrors), so any finding fails the target.
tidy: build-asan
	ls -S src/*/*.c src/*/*/*.c src/*/*/*/*.c tools/*/*.c | \
	  xargs -P $(JOBS) -n 1 clang-tidy -p $(ASAN_BUILD) --quiet || \
	  { echo "clang-tidy: findings above (fix them, or suppress one with" \
	         "// NOLINT(check): why)"; exit 1; }

# libFuzzer targets (tests/fuzz/). The gate (make test): every committed
# corpus and regression input, then FUZZ_RUNS mutations per target from
# FUZZ_SEED, so a commit always gets the same verdict. The search (make
# fuzz, the pre-release step): each target FUZZ_SECONDS (default five
# minutes) from a clock seed. Any crash, leak or hang fails and keeps its
# reproducer in $(FUZZ_BUILD)/fuzz-artifacts/.
fuzz-gate: deps-debian
	bash tests/fuzz/run.sh --runs $(FUZZ_RUNS) --seed $(FUZZ_SEED) $(FUZZ_BUILD)

fuzz: deps-debian
	bash tests/fuzz/run.sh --seconds $(FUZZ_SECONDS) $(FUZZ_BUILD)

# The whole suite: cppcheck, the sanitizer builds (ASan+UBSan, built by
# clang, on every C and CLI test; TSan on the threaded tests), clang-tidy
# over the ASan tree's commands, a fixed-seed, fixed-count run of every fuzz target, then the
# Release build, the layer check over it, the wheel installed into an
# environment per PyTorch, and the tests only the Release tree can run
# (label release: the Python suite and examples on torch 1.13 and 2.x,
# against the installed package and the libreshard it bundles, the docs'
# links, the layer check's own test, and the demo through the optimized
# CLI), whose CTest summary closes the output. Each test runs in the trees
# where it checks something the others do not (docs/testing.md, "The
# gate's time"); `ctest` in any tree still runs all of its tests.
test: deps cppcheck test-asan test-tsan tidy fuzz-gate \
      build-release-gate layers test-venvs
	cd $(RELEASE_BUILD) && env -u RESHARD_LIB -u PYTHONPATH \
	  ctest --output-on-failure -j $(JOBS) -L release

# The main job: trainer and inference processes move two versions of
# Qwen2.5-0.5B over UCX (UCX_TLS=sm unless set) and verify every byte.
demo: build
	./$(BUILD)/reshard demo

bench: build
	./$(BUILD)/bench/plan_bench

# The mutation gate (docs/testing.md, "Mutation gate"), a step before a
# release like `make fuzz`, not part of `make test`: every mutant of
# tests/mutate/mutants.txt applied in turn to a copy of the tree in
# $(MUTATE_BUILD) (its own Release tree, rebuilt incrementally), the tests
# that cover it run, and the score reported in
# $(MUTATE_BUILD)/mutate-report.md. Fails when a mutant survives that is
# not recorded as equivalent. universalmutator, which the list's `um`
# mutants come from, lives in MUTATE_VENV (made once, again only when
# tests/mutate/requirements.txt changes). MUTATE_ONLY=P01,V10 runs those.
MUTATE_BUILD ?= build-mutate
MUTATE_VENV  ?= $(RESHARD_CACHE)/venv-mutate
MUTATE_ONLY  ?=

mutate: deps-debian
	bash scripts/python_envs.sh deps $(MUTATE_VENV) $(TORCH1_PYTHON) \
	  tests/mutate/requirements.txt
	$(TORCH1_PYTHON) tests/mutate/run.py --build $(MUTATE_BUILD) \
	  --mutate-venv $(MUTATE_VENV) --jobs $(JOBS) \
	  $(if $(MUTATE_ONLY),--only $(MUTATE_ONLY))

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(CLANG_BUILD) $(FUZZ_BUILD) \
	  $(RELEASE_BUILD) $(TYPES_BUILD) build-wheel $(TEST_VENVS)
