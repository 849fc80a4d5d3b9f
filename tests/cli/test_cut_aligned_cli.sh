#!/usr/bin/env bash
# CLI tests of cut-aligned publishing over cma and a file: directory.
# `reshard cuts` writes the cuts of an inference layout (reshard.cuts.v1:
# tiny-llama's vllm:tp=2 cuts q_proj's rows and o_proj's columns in half)
# and refuses bad usage; `reshard publish --cut-aligned` (megatron:tp=1)
# serves version 1 whole (nobody announced yet), the two `reshard pull`
# ranks of vllm:tp=2 announce (records vllm-tp-2-rank0/1 appear) and pass
# --check, and version 2 is served as more sub-boxes and passes --check on
# both ranks with fewer descriptors or bytes (no more of either);
# `publish --cuts FILE` serves the file's cuts; --cut-aligned or --cuts
# with another staging exits 2.
# usage: bash test_cut_aligned_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_cut_aligned_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_cut_aligned_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
. "$(dirname "$0")/lib.sh"

# ---- reshard cuts --------------------------------------------------------
"$BIN" cuts --model-config "$TINY" --infer vllm:tp=2 -o "$TMP/tp2.cuts.json" \
    2>"$TMP/err"
rc=$?
expect_rc "cuts vllm:tp=2" 0
if python3 - "$TMP/tp2.cuts.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "reshard.cuts.v1", d.get("schema")
t = {e["name"]: e for e in d["tensors"]}
q = t["model.layers.0.self_attn.q_proj.weight"]
assert q["cuts"][0] == [q["shape"][0] // 2] and q["cuts"][1] == [], q
o = t["model.layers.0.self_attn.o_proj.weight"]
assert o["cuts"][0] == [] and o["cuts"][1] == [o["shape"][1] // 2], o
EOF
then ok "cuts: q_proj cut in rows, o_proj in columns, in half"
else bad "cuts: the file does not hold the tp=2 cuts"; fi

"$BIN" cuts --model-config "$TINY" >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "cuts without --infer" 2
expect_in "cuts without --infer" "$TMP/err" "--model-config and --infer go together"
"$BIN" cuts >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "cuts without input" 2
"$BIN" cuts --model-config "$TINY" --infer megatron:tp=2 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "cuts of a trainer layout" 2

# ---- publish --cut-aligned, pulls announce ---------------------------------
mkdir -p "$TMP/dir"
D="file:$TMP/dir"

# pub NAME ARGS...: `reshard publish` of rank 0 of megatron:tp=1 in the
# background, output in $TMP/NAME.out.
pub() {
    local name=$1
    shift
    "$BIN" publish --directory "$D" --model m --rank 0 --world 1 \
        --layout megatron:tp=1 --model-config "$TINY" --backend cma \
        --timeout 60 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
    pids+=("$!")
    last_pid=$!
}

# boxes NAME V: the sub-boxes the line of version V names.
boxes() {
    sed -n "s/.*published version $2 .*served as \([0-9]*\) sub-boxes.*/\1/p" \
        "$TMP/$1.out"
}

# pull RANK V ARGS...: a checked pull of vllm:tp=2, its JSON in $TMP/pullRANK-V.
pull() {
    local rank=$1 v=$2
    shift 2
    "$BIN" pull --directory "$D" --model m --version "$v" --rank "$rank" \
        --layout vllm:tp=2 --model-config "$TINY" --backend cma --timeout 20 \
        --check --json "$@" >"$TMP/pull$rank-$v" 2>"$TMP/err"
    rc=$?
}

pub aligned --version 1 --versions 2 --cut-aligned
if published aligned 1; then
    whole=$(boxes aligned 1)
    shards=$(sed -n 's/.*published version 1 (\([0-9]*\) shards.*/\1/p' "$TMP/aligned.out")
    [ -n "$whole" ] && [ "$whole" = "$shards" ] &&
        ok "version 1: served whole ($whole sub-boxes, one per shard)" ||
        bad "version 1: $whole sub-boxes for $shards shards"
    pull 0 1; expect_rc "pull rank 0 of version 1" 0
    pull 1 1 --release; expect_rc "pull rank 1 of version 1" 0
    for r in 0 1; do
        [ -f "$TMP/dir/m/cuts/vllm-tp-2-rank$r" ] &&
            ok "rank $r announced as vllm-tp-2-rank$r" ||
            bad "no cuts record of rank $r: $(ls "$TMP/dir/m" 2>&1)"
    done
    if published aligned 2; then
        cut=$(boxes aligned 2)
        [ -n "$cut" ] && [ "$cut" -gt "$whole" ] &&
            ok "version 2: cut into $cut sub-boxes (from $whole)" ||
            bad "version 2: $cut sub-boxes, not more than $whole"
        pull 0 2; expect_rc "pull rank 0 of version 2" 0
        pull 1 2 --release; expect_rc "pull rank 1 of version 2" 0
        # cut-aligned is no worse in bytes or descriptors, better in one
        for r in 0 1; do
            b=$(stage "$TMP/pull$r-1" descriptors); a=$(stage "$TMP/pull$r-2" descriptors)
            bb=$(stage "$TMP/pull$r-1" bytes); ab=$(stage "$TMP/pull$r-2" bytes)
            if [ -n "$a" ] && [ -n "$b" ] && [ -n "$ab" ] && [ -n "$bb" ] &&
               [ "$a" -le "$b" ] && [ "$ab" -le "$bb" ] &&
               { [ "$a" -lt "$b" ] || [ "$ab" -lt "$bb" ]; }; then
                ok "rank $r: $a descriptors, $ab bytes cut-aligned; $b, $bb before"
            else
                bad "rank $r: $a descriptors, $ab bytes cut-aligned; $b, $bb before"
            fi
        done
    fi
fi
wait "$last_pid"; rc=$?
expect_rc "publish --cut-aligned" 0

# ---- publish --cuts FILE -----------------------------------------------------
rm -rf "$TMP/dir/m"
pub fromfile --version 1 --cuts "$TMP/tp2.cuts.json"
if published fromfile 1; then
    [ "$(boxes fromfile 1)" = "$cut" ] &&
        ok "--cuts: the file's cuts ($cut sub-boxes)" ||
        bad "--cuts: $(boxes fromfile 1) sub-boxes, want $cut"
    pull 0 1 --no-announce; expect_rc "pull rank 0 of --cuts" 0
    pull 1 1 --no-announce --release; expect_rc "pull rank 1 of --cuts" 0
    [ ! -e "$TMP/dir/m/cuts" ] && ok "--no-announce: no record" ||
        bad "--no-announce: $(ls "$TMP/dir/m/cuts")"
fi
wait "$last_pid"; rc=$?
expect_rc "publish --cuts" 0

"$BIN" publish --directory "$D" --model m --version 1 --rank 0 --world 1 \
    --layout megatron:tp=1 --model-config "$TINY" --cut-aligned \
    --staging caller >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "--cut-aligned --staging caller" 2
expect_in "--cut-aligned --staging caller" "$TMP/err" "not with --staging caller"

cli_done
