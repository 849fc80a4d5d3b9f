#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (RESHARD_FUZZ=ON) and runs each on
# a scratch copy of its seed corpus and saved regressions (the repo's
# folders are never written). Prints executions per target and in total;
# exits non-zero on any crash, leak, hang or sanitizer report, keeping the
# reproducer in BUILD_DIR/fuzz-artifacts/<target>/.
#
# Two modes:
#   run.sh --runs N [--seed S] [BUILD_DIR]   the gate (make test): every
#       corpus and regression input replayed, then exactly N mutations per
#       target (N/5 for the slow fuzz_dir) from seed S (default 1). Same commit,
#       same inputs, same verdict.
#   run.sh [--seconds] SECONDS [BUILD_DIR]   open-ended search (make fuzz,
#       the pre-release step): each target for SECONDS, seeded by the clock.
set -u

MODE=seconds
SECONDS_PER_TARGET=30
RUNS=0
SEED=1
BUILD_DIR=build-fuzz
positional=()
while [ $# -gt 0 ]; do
    case $1 in
        --runs) MODE=runs; RUNS=${2:?--runs needs a count}; shift 2 ;;
        --seed) SEED=${2:?--seed needs a number}; shift 2 ;;
        --seconds) SECONDS_PER_TARGET=${2:?--seconds needs a number}; shift 2 ;;
        -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
        *) positional+=("$1"); shift ;;
    esac
done
# Old form: run.sh SECONDS [BUILD_DIR]; a lone non-number is the build dir.
if [ ${#positional[@]} -ge 1 ]; then
    case ${positional[0]} in
        *[!0-9]*) BUILD_DIR=${positional[0]} ;;
        *) SECONDS_PER_TARGET=${positional[0]}
           [ ${#positional[@]} -ge 2 ] && BUILD_DIR=${positional[1]} ;;
    esac
fi
for n in "$RUNS" "$SEED" "$SECONDS_PER_TARGET"; do
    case $n in ''|*[!0-9]*) echo "run.sh: '$n' is not a whole number" >&2; exit 2 ;; esac
done
SRC_DIR=$(cd "$(dirname "$0")/../.." && pwd)
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$SRC_DIR/$BUILD_DIR ;; esac
TARGETS="fuzz_capture fuzz_sources fuzz_cuts fuzz_geom fuzz_plan fuzz_dir fuzz_quant fuzz_delta"
# The order they start in: the longest first (in the gate, fuzz_sources
# takes about four times fuzz_capture's time), so two at a time end
# together.
START_ORDER="fuzz_sources fuzz_plan fuzz_dir fuzz_geom fuzz_capture fuzz_cuts fuzz_quant fuzz_delta"
if [ "$(printf '%s\n' $TARGETS | sort)" != "$(printf '%s\n' $START_ORDER | sort)" ]; then
    echo "run.sh: START_ORDER must list exactly the TARGETS" >&2
    exit 2
fi
JOBS=$(nproc 2>/dev/null || echo 2)
if [ "$MODE" = runs ]; then
    # What runs is fixed by the seed and the count, not by the clock:
    # -reload=0 stops the once-a-second rereading of the corpus folder, and
    # -use_cmp=0 keeps compared values (stack addresses among them, which
    # ASLR moves) out of the mutations, and -detect_leaks=0 drops the
    # per-input leak rerun, whose trigger (more mallocs than frees in one
    # input) follows one-time allocations in libc and jansson rather than
    # the input. Leaks are still fatal: LeakSanitizer checks the whole run
    # at exit (ASAN_OPTIONS below). -timeout only guards against a hang;
    # no input comes near it. The targets are built without stack-depth
    # coverage, which follows where the kernel put the stack
    # (tests/fuzz/CMakeLists.txt).
    LIMITS="-runs=$RUNS -seed=$SEED -reload=0 -use_cmp=0 -detect_leaks=0 -timeout=600"
    echo "fuzz gate: corpus and regressions replayed, then $RUNS runs per target, seed $SEED"
else
    LIMITS="-max_total_time=$SECONDS_PER_TARGET -timeout=10"
    echo "fuzz search: $SECONDS_PER_TARGET s per target"
fi

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

# One target on its scratch corpus; its exit status goes to $log.rc. The
# targets share nothing but the read-only build (fuzz_dir's directory is
# named by its pid), so they run side by side, JOBS at a time: each is a
# single-threaded libFuzzer process, and what it runs depends only on its
# corpus, seed and count.
run_target() {
    local t=$1 corpus=$scratch/corpus-$1 artifacts=$BUILD_DIR/fuzz-artifacts/$1
    local log=$BUILD_DIR/fuzz-artifacts/$1.log limits=$LIMITS start=$SECONDS
    mkdir -p "$corpus" "$artifacts"
    rm -f "$log.rc"
    cp "$SRC_DIR"/tests/fuzz/corpus/$t/* "$corpus"/ 2>/dev/null
    cp "$SRC_DIR"/tests/fuzz/regressions/$t/* "$corpus"/ 2>/dev/null
    # fuzz_dir writes a version directory's files and decodes transport
    # blobs for every input, some hundred times slower than the parsers:
    # the gate gives it a fifth of the runs, so it costs what the others do.
    if [ "$MODE" = runs ] && [ "$t" = fuzz_dir ]; then
        limits=${LIMITS/-runs=$RUNS/-runs=$((RUNS / 5))}
    fi
    (cd "$scratch" && "$BUILD_DIR/tests/fuzz/$t" $limits \
        -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1)
    echo "$? $((SECONDS - start))" >"$log.rc"
}

running=0
for t in $START_ORDER; do
    if [ $running -ge "$JOBS" ]; then
        wait -n
        running=$((running - 1))
    fi
    run_target "$t" &
    running=$((running + 1))
done
wait

# The report, in TARGETS order whatever order they finished in.
for t in $TARGETS; do
    log=$BUILD_DIR/fuzz-artifacts/$t.log
    read -r rc secs <"$log.rc" 2>/dev/null || { rc=2; secs=0; }
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    execs=${execs:-0}
    total=$((total + execs))
    if [ "$rc" -ne 0 ]; then
        repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        printf '%-14s %10s executions  FAILED (exit %d)\n' "$t" "$execs" "$rc"
        grep -m 3 -E 'ERROR|runtime error|fuzz_[a-z]+: ' "$log" | sed 's/^/    /'
        echo "    reproducer: ${repro:-none written}"
        echo "    log: $log"
        echo "    replay: $BUILD_DIR/tests/fuzz/$t ${repro:-<input>}"
        failed="$failed $t"
    else
        cov=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+')
        printf '%-14s %10s executions  ok  %-22s %4d s\n' "$t" "$execs" "$cov" "$secs"
    fi
done
printf '%-14s %10s executions\n' total "$total"
if [ -n "$failed" ]; then
    echo "failed:$failed"
    exit 1
fi
exit 0
