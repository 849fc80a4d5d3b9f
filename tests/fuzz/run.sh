#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (RESHARD_FUZZ=ON) and runs each
# for a bounded time on a scratch copy of its seed corpus (the repo's corpus
# is never written). Prints executions per target and in total; exits
# non-zero on any crash, leak, timeout or sanitizer report, keeping the
# reproducer in BUILD_DIR/fuzz-artifacts/<target>/.
#
# usage: tests/fuzz/run.sh [SECONDS_PER_TARGET] [BUILD_DIR]
set -u

SECONDS_PER_TARGET=${1:-30}
BUILD_DIR=${2:-build-fuzz}
SRC_DIR=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$SRC_DIR/$BUILD_DIR ;; esac
TARGETS="fuzz_capture fuzz_sources fuzz_geom fuzz_plan fuzz_dir"
JOBS=$(nproc 2>/dev/null || echo 2)

if ! command -v clang >/dev/null; then
    echo "run.sh: clang is required (Debian: apt-get install clang libclang-rt-14-dev)" >&2
    exit 2
fi
CC=clang cmake -S "$SRC_DIR" -B "$BUILD_DIR" -DRESHARD_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 2
cmake --build "$BUILD_DIR" -j "$JOBS" --target $TARGETS >/dev/null || {
    echo "run.sh: build failed (cmake --build $BUILD_DIR for the errors)" >&2
    exit 2
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/reshard-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
total=0
failed=""
# Leaks matter (a receiver runs for days); UCX's own unused-variable
# warnings do not.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export UCX_WARN_UNUSED_ENV_VARS=n

for t in $TARGETS; do
    corpus=$scratch/corpus-$t
    artifacts=$BUILD_DIR/fuzz-artifacts/$t
    mkdir -p "$corpus" "$artifacts"
    cp "$SRC_DIR"/tests/fuzz/corpus/$t/* "$corpus"/ 2>/dev/null
    log=$BUILD_DIR/fuzz-artifacts/$t.log
    (cd "$scratch" && "$BUILD_DIR/tests/fuzz/$t" -max_total_time="$SECONDS_PER_TARGET" \
        -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1)
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    execs=${execs:-0}
    total=$((total + execs))
    if [ $rc -ne 0 ]; then
        repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        printf '%-14s %10s executions  FAILED (exit %d)\n' "$t" "$execs" "$rc"
        grep -m 3 -E 'ERROR|runtime error|fuzz_[a-z]+: ' "$log" | sed 's/^/    /'
        echo "    reproducer: ${repro:-none written}"
        echo "    log: $log"
        echo "    replay: $BUILD_DIR/tests/fuzz/$t ${repro:-<input>}"
        failed="$failed $t"
    else
        printf '%-14s %10s executions  ok\n' "$t" "$execs"
    fi
done
printf '%-14s %10s executions\n' total "$total"
if [ -n "$failed" ]; then
    echo "failed:$failed"
    exit 1
fi
exit 0
