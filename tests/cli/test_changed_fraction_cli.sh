#!/usr/bin/env bash
# CLI tests of the demo contents with a changed fraction
# (docs/formats.md, "Demo contents"): every shard `reshard publish
# --changed-fraction F` serves at two versions has the digest of the bytes
# an independent Python implementation of the formula computes
# (changed_fraction.py), and without the flag the plain contents as before;
# between the two versions exactly the elements whose epoch moved change,
# about F of them (F = 0.02, 0.3, 1); `pull --check --changed-fraction F`
# passes at both versions and fails, naming the parameter, when the checker
# assumes another F or none; bad values are refused naming the flag.
# usage: bash test_changed_fraction_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_changed_fraction_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_changed_fraction_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
LIB="$(dirname "$BIN")/libreshard.so"
REF="$SRC/tests/cli/changed_fraction.py"
. "$(dirname "$0")/lib.sh"
# A sanitized build's library needs its runtime preloaded into python.
SAN_RT=$(ldd "$LIB" 2>/dev/null | awk '/libasan|libtsan|clang_rt/ {print $3; exit}')

# pub NAME DIR V K [publish options...]: trainer ranks 0 and 1 of
# megatron:tp=2 publishing versions V..V+K-1; output $TMP/NAME-R.out.
pub() {
    local name=$1 dir=$2 v=$3 k=$4
    shift 4
    mkdir -p "$dir"
    for r in 0 1; do
        "$BIN" publish --directory "file:$dir" --model m --version "$v" \
            --versions "$k" --rank "$r" --world 2 --layout megatron:tp=2 \
            --model-config "$TINY" --backend cma --timeout 60 "$@" \
            >"$TMP/$name-$r.out" 2>"$TMP/$name-$r.err" &
        pids+=("$!")
        last_pid=$!
    done
}
# both NAME V: both ranks published version V.
both() {
    local r
    for r in 0 1; do published "$1-$r" "$2" || return 1; done
}
# pull DIR V [pull options...]: a checked pull of vllm:tp=1.
pull() {
    local dir=$1 v=$2
    shift 2
    "$BIN" pull --directory "file:$dir" --model m --version "$v" --rank 0 \
        --layout vllm:tp=1 --model-config "$TINY" --backend cma --timeout 30 \
        --check "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}
# ref CMD DIR V F NAME: changed_fraction.py CMD over the tables of version V.
ref() {
    local out
    out=$(LD_PRELOAD="$SAN_RT" \
          ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 \
          python3 "$REF" "$1" "$LIB" "file:$2" m "$3" 2 "$4" 2>&1)
    if [ $? -eq 0 ]; then ok "$5: $out"; else bad "$5: $out"; fi
}

# ---- without the flag: the plain contents, unchanged -----------------------

D="$TMP/plain"
pub plain "$D" 3 1
if both plain 3; then
    ref digests "$D" 3 none "plain contents of version 3"
    pull "$D" 3 --release
    expect_rc "plain: pull --check" 0
fi
wait_pub() { # the publishers started last end with exit 0
    local r p n=${#pids[@]}
    for r in 0 1; do
        p=${pids[$((n - 2 + r))]}
        if wait "$p"; then ok "$1: publisher $r exits 0"
        else bad "$1: publisher $r did not exit 0"; fi
    done
}
wait_pub "plain"

# ---- F = 0.02, 0.3, 1 over versions 5 and 6 ---------------------------------

for F in 0.02 0.3 1; do
    D="$TMP/f$F"
    pub "f$F" "$D" 5 2 --changed-fraction "$F"
    both "f$F" 5 || continue
    ref digests "$D" 5 "$F" "F=$F: served bytes of version 5"
    ref share "$D" 5 "$F" "F=$F: elements changed from version 5 to 6"
    pull "$D" 5 --changed-fraction "$F" --release
    expect_rc "F=$F: pull --check of version 5" 0
    expect_in "F=$F: pull --check of version 5" "$TMP/out" "byte-exact"
    both "f$F" 6 || continue
    ref digests "$D" 6 "$F" "F=$F: served bytes of version 6"
    # a checker that assumes another fraction, or none, finds wrong bytes
    other=$([ "$F" = 0.3 ] && echo 0.02 || echo 0.3)
    pull "$D" 6 --changed-fraction "$other"
    expect_rc "F=$F: pull --check assuming F=$other" 1
    expect_in "F=$F: pull --check assuming F=$other" "$TMP/err" \
        "check failed: parameter '" "bytes differ"
    pull "$D" 6
    expect_rc "F=$F: pull --check assuming no fraction" 1
    expect_in "F=$F: pull --check assuming no fraction" "$TMP/err" \
        "check failed: parameter '"
    pull "$D" 6 --changed-fraction "$F" --release
    expect_rc "F=$F: pull --check of version 6" 0
    wait_pub "F=$F"
done

# F's decimal text is read exactly, all 18 decimals of it
D="$TMP/long"
pub long "$D" 1 1 --changed-fraction 0.123456789012345678
if both long 1; then
    ref digests "$D" 1 0.123456789012345678 "F=0.123456789012345678"
    pull "$D" 1 --changed-fraction 0.123456789012345678 --release
    expect_rc "F=0.123456789012345678: pull --check" 0
fi

# ---- bad values ----------------------------------------------------------------

for bad_f in 0 0.0 1.5 2 -0.5 abc "" 0.5x 1e-2 0.0000000001 \
        0.1234567890123456789; do
    run publish --directory "file:$TMP/bad" --model m --version 1 --rank 0 \
        --world 1 --layout fsdp:1 --model-config "$TINY" \
        --changed-fraction "$bad_f"
    expect_input_error "publish --changed-fraction '$bad_f'" \
        "--changed-fraction" "got '$bad_f'"
    run pull --directory "file:$TMP/bad" --model m --version 1 --rank 0 \
        --layout vllm:tp=1 --model-config "$TINY" --check \
        --changed-fraction "$bad_f"
    expect_input_error "pull --changed-fraction '$bad_f'" \
        "--changed-fraction" "got '$bad_f'"
done
run pull --directory "file:$TMP/bad" --model m --version 1 --rank 0 \
    --layout vllm:tp=1 --model-config "$TINY" --changed-fraction 0.5
expect_input_error "pull --changed-fraction without --check" \
    "--changed-fraction" "needs --check"
for verb in publish pull; do
    "$BIN" $verb --help >"$TMP/out" 2>&1
    expect_in "$verb --help" "$TMP/out" "--changed-fraction F" "0 < F <= 1"
done
# the reference parser agrees on what is refused and on the fixed point
for f in 0 1.5 abc 0.0000000001 0.1234567890123456789; do
    [ "$(python3 "$REF" q "$f")" = refused ] && ok "reference refuses '$f'" ||
        bad "reference accepts '$f'"
done
[ "$(python3 "$REF" q 0.02)" = 85899345 ] && [ "$(python3 "$REF" q 1)" = 4294967296 ] &&
    ok "reference: q(0.02) = 85899345, q(1) = 2^32" || bad "reference fixed point"

cli_done
