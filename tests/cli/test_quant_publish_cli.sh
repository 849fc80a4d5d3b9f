#!/usr/bin/env bash
# CLI tests of publisher-side quantization over cma and a file: directory,
# on tiny-deepseek-fp8 (an FP8 quantization_config of 16x16 blocks, so the
# vllm:tp=2 pulls load FP8 weights and scales). Two `reshard publish
# --quantize-wanted` ranks of megatron:tp=2 serve version 1 in bf16 only
# (nobody announced yet): both pulls pass --check quantizing themselves and
# announce their quantized copies; version 2 is served with FP8 copies
# (more entries) and both pulls pass --check reading fewer bytes. `publish
# --quantize GLOB=SPEC` from fsdp:2 serves the matching tensors quantized
# and both pulls pass --check reading fewer bytes than from bf16 tables;
# so does `publish --cuts FILE --quantize-wanted` with the file `reshard
# cuts` writes for vllm:tp=2 (its quantized copies listed), from version 1. A bad --quantize entry exits 2 naming it,
# and --quantize with another staging exits 2.
# usage: bash test_quant_publish_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_quant_publish_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_quant_publish_cli.sh <reshard-binary> <source-dir>}
FP8="$SRC/examples/models/tiny-deepseek-fp8.json"
. "$(dirname "$0")/lib.sh"

mkdir -p "$TMP/dir"
D="file:$TMP/dir"

# pub NAME RANK LAYOUT ARGS...: a publisher in the background, output in
# $TMP/NAME.out.
pub() {
    local name=$1 rank=$2 layout=$3
    shift 3
    "$BIN" publish --directory "$D" --model m --rank "$rank" --world 2 \
        --layout "$layout" --model-config "$FP8" --backend cma \
        --timeout 60 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    pids+=("$!")
    last_pid=$!
}

# entries NAME V: the table entries the line of version V names.
entries() {
    sed -n "s/.*published version $2 .*served as \([0-9]*\) entries.*/\1/p" \
        "$TMP/$1.out"
}

# pull RANK V ARGS...: a checked pull of vllm:tp=2, its JSON in $TMP/pullRANK-V.
pull() {
    local rank=$1 v=$2
    shift 2
    "$BIN" pull --directory "$D" --model m --version "$v" --rank "$rank" \
        --layout vllm:tp=2 --model-config "$FP8" --backend cma --timeout 30 \
        --check --json "$@" >"$TMP/pull$rank-$v" 2>"$TMP/err"
    rc=$?
}

# ---- --quantize-wanted: served from the version after the announcement ----
pub w0 0 megatron:tp=2 --version 1 --versions 2 --quantize-wanted
p0=$last_pid
pub w1 1 megatron:tp=2 --version 1 --versions 2 --quantize-wanted
p1=$last_pid
if published w0 1 && published w1 1; then
    plain=$(entries w0 1)
    pull 0 1; expect_rc "pull rank 0 of version 1 (bf16 tables)" 0
    pull 1 1 --release; expect_rc "pull rank 1 of version 1 (bf16 tables)" 0
    grep -q '"quantize"' "$TMP/dir/m/cuts/vllm-tp-2-rank0" 2>/dev/null &&
        ok "rank 0 announced its quantized copies" ||
        bad "rank 0's record lists no quantized copy"
    if published w0 2 && published w1 2; then
        quant=$(entries w0 2)
        [ -n "$quant" ] && [ -n "$plain" ] && [ "$quant" -gt "$plain" ] &&
            ok "version 2: $quant entries with the FP8 copies (from $plain)" ||
            bad "version 2: $quant entries, not more than $plain"
        pull 0 2; expect_rc "pull rank 0 of version 2 (FP8 served)" 0
        pull 1 2 --release; expect_rc "pull rank 1 of version 2 (FP8 served)" 0
        for r in 0 1; do
            b=$(stage "$TMP/pull$r-1" bytes); a=$(stage "$TMP/pull$r-2" bytes)
            [ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ] &&
                ok "rank $r: $a bytes with FP8 served, $b quantizing itself" ||
                bad "rank $r: $a bytes with FP8 served, $b quantizing itself"
        done
    fi
fi
wait "$p0"; rc=$?
expect_rc "publish --quantize-wanted rank 0" 0
wait "$p1"; rc=$?
expect_rc "publish --quantize-wanted rank 1" 0

# ---- --quantize GLOB=SPEC from fsdp:2 ------------------------------------
rm -rf "$TMP/dir/m"
G1='*proj.weight=fp8_block:16x16:f8e4m3'
G2='*_mqa.weight=fp8_block:16x16:f8e4m3'
pub g0 0 fsdp:2 --version 1 --quantize "$G1" --quantize "$G2"
p0=$last_pid
pub g1 1 fsdp:2 --version 1 --quantize "$G1" --quantize "$G2"
p1=$last_pid
cp "$TMP/pull0-1" "$TMP/plain0"
cp "$TMP/pull1-1" "$TMP/plain1"
if published g0 1 && published g1 1; then
    pull 0 1 --no-announce; expect_rc "pull rank 0 of fsdp:2 --quantize" 0
    pull 1 1 --no-announce --release
    expect_rc "pull rank 1 of fsdp:2 --quantize" 0
    for r in 0 1; do
        b=$(stage "$TMP/plain$r" bytes); a=$(stage "$TMP/pull$r-1" bytes)
        [ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ] &&
            ok "rank $r: $a bytes from fsdp:2's FP8 copies, $b from bf16" ||
            bad "rank $r: $a bytes from fsdp:2's FP8 copies, $b from bf16"
    done
fi
wait "$p0"; rc=$?
expect_rc "publish --quantize rank 0" 0
wait "$p1"; rc=$?
expect_rc "publish --quantize rank 1" 0

# ---- --cuts FILE --quantize-wanted: the file's requests from version 1 ----
rm -rf "$TMP/dir/m"
"$BIN" cuts --model-config "$FP8" --infer vllm:tp=2 -o "$TMP/tp2.cuts.json" \
    2>"$TMP/err"
rc=$?
expect_rc "cuts vllm:tp=2 of the FP8 config" 0
expect_in "cuts vllm:tp=2 of the FP8 config" "$TMP/tp2.cuts.json" \
    '"quantize": [' '"spec": "fp8_block:16x16:f8e4m3"'
pub f0 0 megatron:tp=2 --version 1 --cuts "$TMP/tp2.cuts.json" --quantize-wanted
p0=$last_pid
pub f1 1 megatron:tp=2 --version 1 --cuts "$TMP/tp2.cuts.json" --quantize-wanted
p1=$last_pid
if published f0 1 && published f1 1; then
    pull 0 1 --no-announce; expect_rc "pull rank 0 of --cuts FILE" 0
    pull 1 1 --no-announce --release; expect_rc "pull rank 1 of --cuts FILE" 0
    for r in 0 1; do
        b=$(stage "$TMP/plain$r" bytes); a=$(stage "$TMP/pull$r-1" bytes)
        [ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ] &&
            ok "rank $r: $a bytes with the file's FP8 copies, $b from bf16" ||
            bad "rank $r: $a bytes with the file's FP8 copies, $b from bf16"
    done
fi
wait "$p0"; rc=$?
expect_rc "publish --cuts --quantize-wanted rank 0" 0
wait "$p1"; rc=$?
expect_rc "publish --cuts --quantize-wanted rank 1" 0

# ---- refusals ----------------------------------------------------------------
"$BIN" publish --directory "$D" --model m --version 1 --rank 0 --world 2 \
    --layout megatron:tp=2 --model-config "$FP8" --backend cma \
    --quantize "$G1" --quantize '*=fp8_block:16:f8e4m9' >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "a bad --quantize entry" 2
expect_in "a bad --quantize entry" "$TMP/err" "quantize entry 1 '*=fp8_block:16:f8e4m9'"
"$BIN" publish --directory "$D" --model m --version 1 --rank 0 --world 2 \
    --layout megatron:tp=2 --model-config "$FP8" --quantize "$G1" \
    --staging caller >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "--quantize --staging caller" 2
expect_in "--quantize --staging caller" "$TMP/err" "not with --staging caller"
"$BIN" publish --help >"$TMP/out" 2>&1
expect_in "publish --help" "$TMP/out" "--quantize GLOB=SPEC" "--quantize-wanted"

cli_done
