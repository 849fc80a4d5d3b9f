#!/usr/bin/env bash
# CLI tests of `reshard demo`, `reshard publish` and `reshard pull`: the demo
# on a tiny model over ucx and cma exits 0 with its summary (also with
# --changed-fraction, its contents changing a share of elements per version)
# and leaves no process and no file behind (also when interrupted); publish
# + pull by hand through a file: directory pass --check; a version holding another
# version's bytes fails --check although its digests match; an unpublished
# version times out with exit 1; bad usage exits 2.
# usage: bash test_demo_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_demo_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_demo_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
QWEN="$SRC/examples/models/qwen2.5-0.5b.json"
. "$(dirname "$0")/lib.sh"

# expect_clean NAME DIR: no process mentions DIR and DIR is empty.
expect_clean() {
    local left
    left=$(pgrep -f -- "$2" || true)
    if [ -z "$left" ]; then ok "$1: no process left"
    else bad "$1: processes left: $(echo $left)"; pkill -KILL -f -- "$2"; fi
    if [ -z "$(ls -A "$2")" ]; then ok "$1: no file left in TMPDIR"
    else bad "$1: files left: $(ls -A "$2" | head -3 | tr '\n' ' ')"; fi
}

# ---- the demo -----------------------------------------------------------

# Arenas by default on both backends; the other stagings once each.
for run in "ucx arena" "cma arena" "ucx in_place" "cma caller"; do
    set -- $run
    backend=$1 staging=$2
    opt=()
    [ "$staging" != arena ] && opt=(--staging "$staging")
    T="$TMP/tmpdir-$backend-$staging"
    mkdir -p "$T"
    TMPDIR="$T" "$BIN" demo --model-config "$TINY" --train megatron:tp=2 \
        --infer vllm:tp=2 --backend "$backend" --timeout 60 "${opt[@]}" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_rc "demo $backend $staging" 0
    expect_in "demo $backend $staging" "$TMP/out" \
        "2 processes (megatron:tp=2), \`reshard publish --staging $staging\`" \
        "415 KiB" "version 1, cold" "version 2, warm" "byte-exact" "x memcpy" \
        "every parameter of 2 inference ranks byte-exact for 2 versions; $backend backend, $staging staging"
    # two rank rows per version, each byte-exact with digests checked, the
    # rate beside memcpy's
    rows=$(grep -cE '^ +[01] +[0-9.]+ (B|KiB|MiB|GiB) +[0-9]+ .* GB/s +[0-9]+\.[0-9]+ +[1-9][0-9]* +byte-exact$' "$TMP/out")
    if [ "$rows" -eq 4 ]; then ok "demo $backend $staging: 4 rank rows, digests and check"
    else bad "demo $backend $staging: $rows good rank rows, want 4"; fi
    if grep -qE '^  [0-9]+\.[0-9]+ [KMGT]?B/s\.$' "$TMP/out"; then
        ok "demo $backend $staging: memcpy measured"
    else bad "demo $backend $staging: no memcpy figure"; fi
    expect_clean "demo $backend $staging" "$T"
done

# Contents changing 2 % of the elements a version: publish and every pull
# --check get the same F (a pull checking other contents than those
# published fails), and the share is printed.
T="$TMP/tmpdir-changed"
mkdir -p "$T"
TMPDIR="$T" "$BIN" demo --model-config "$TINY" --train megatron:tp=2 \
    --infer vllm:tp=2 --backend cma --timeout 60 --changed-fraction 0.02 \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "demo --changed-fraction 0.02" 0
expect_in "demo --changed-fraction 0.02" "$TMP/out" \
    "each version changes about 2 % of every tensor's elements (--changed-fraction 0.02)" \
    "byte-exact for 2 versions; cma backend, arena staging; changed share 0.02"
rows=$(grep -cE ' byte-exact$' "$TMP/out")
if [ "$rows" -eq 4 ]; then ok "demo --changed-fraction 0.02: 4 rank rows byte-exact"
else bad "demo --changed-fraction 0.02: $rows byte-exact rank rows, want 4"; fi
expect_clean "demo --changed-fraction 0.02" "$T"
"$BIN" demo --changed-fraction 1.5 >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "demo --changed-fraction 1.5" 2
expect_in "demo --changed-fraction 1.5" "$TMP/err" "--changed-fraction must be a decimal number above 0 and at most 1" "got '1.5'"

"$BIN" demo --staging copy >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "demo --staging copy" 2
expect_in "demo --staging copy" "$TMP/err" "--staging takes arena, in_place or caller, got 'copy'"
"$BIN" publish --directory file:/nonexistent --model m --version 1 --rank 0 \
    --world 1 --layout fsdp:1 --model-config "$TINY" --staging heap \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "publish --staging heap" 2
expect_in "publish --staging heap" "$TMP/err" "--staging takes caller, in_place or arena, got 'heap'"

# Interrupted mid-run (Qwen2.5-0.5B takes seconds): children killed and
# reaped, the temporary folder removed, a non-zero exit.
T="$TMP/tmpdir-int"
mkdir -p "$T"
# Started from / with no --model-config: the bundled default
# (Qwen2.5-0.5B) is found from any working directory.
(cd / && exec env TMPDIR="$T" "$BIN" demo --backend cma --timeout 60) \
    >"$TMP/out" 2>"$TMP/err" &
demo=$!
pids+=("$demo")
sleep 1.5
kill -INT "$demo"
wait "$demo"
rc=$?
if [ "$rc" -ne 0 ]; then ok "demo interrupted: exit $rc"
else bad "demo interrupted: exit 0"; fi
expect_in "demo interrupted" "$TMP/err" "interrupted"
expect_clean "demo interrupted" "$T"
if grep -q "cannot open\|No such file" "$TMP/err"; then
    bad "demo from / found its default model config"
else ok "demo from / found its default model config"; fi

# ---- publish and pull by hand ---------------------------------------------

mkdir -p "$TMP/dir" # receivers never create it; a pull may start first
D="file:$TMP/dir"
pub() {
    "$BIN" publish --directory "$D" --model m --version "$1" --rank "$2" \
        --world 2 --layout megatron:tp=2 --model-config "$TINY" \
        --backend cma --timeout 30 >"$TMP/pub$2.out" 2>"$TMP/pub$2.err" &
    pids+=("$!")
}
pull() {
    "$BIN" pull --directory "$D" --model m --layout vllm:tp=2 \
        --model-config "$TINY" --backend cma "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

pub 1 0
pub1_0=$!
pub 1 1
pub1_1=$!
pull --version 1 --rank 0 --check --verify --json --timeout 20
expect_rc "pull rank 0" 0
expect_in "pull rank 0" "$TMP/out" '"version":1' '"ok":true' '"check":true' \
    '"replanned":true' '"schema":"reshard.stage.v2"' \
    '"schema":"reshard.coverage.v1"'
if grep -qE '"shards_verified":[1-9]' "$TMP/out"; then ok "pull rank 0: digests verified"
else bad "pull rank 0: no shard verified"; fi

# Version 2 made of version 1's tables: the bytes are version 1's, so the
# digests match but the independent check must fail. It has no heartbeats
# (stale), so these pulls turn the staleness check off.
mkdir "$TMP/dir/m/2"
cp "$TMP/dir/m/1/meta" "$TMP/dir/m/1/"slot-* "$TMP/dir/m/1/READY" "$TMP/dir/m/2/"
pull --version 2 --rank 1 --check --verify --timeout 5 --stale-after 0
expect_rc "pull of relabelled bytes" 1
expect_in "pull of relabelled bytes" "$TMP/err" "check failed: parameter" \
    "bytes differ"

pull --version -1 --rank 1 --check --verify --release --timeout 20 --stale-after 0
# -1 is the newest READY version: 2, the relabelled one, which fails again
expect_rc "pull newest (relabelled)" 1
pull --version 1 --rank 1 --check --verify --release --timeout 20
expect_rc "pull rank 1 with --release" 0
expect_in "pull rank 1" "$TMP/out" "reshard pull: rank 1 version 1" \
    "shards verified" "byte-exact" '"schema": "reshard.stage.v2"'
wait "$pub1_0"; rc=$?
expect_rc "publisher 0 after release" 0
wait "$pub1_1"; rc=$?
expect_rc "publisher 1 after release" 0
expect_in "publisher 0" "$TMP/pub0.out" "rank 0 published version 1"

pull --version 7 --rank 0 --timeout 1
expect_rc "pull of an unpublished version" 1
expect_in "pull of an unpublished version" "$TMP/err" "version 7" "1 s"

# ---- bad usage ------------------------------------------------------------

usage() {
    local name=$1
    shift
    "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_rc "$name" 2
}
usage "pull without options" pull
usage "pull --timeout -1" pull --directory "$D" --model m --version 1 --rank 0 \
    --layout vllm:tp=2 --model-config "$TINY" --timeout -1
usage "pull with a trainer layout" pull --directory "$D" --model m --version 1 \
    --rank 0 --layout megatron:tp=2 --model-config "$TINY"
expect_in "pull with a trainer layout" "$TMP/err" "--layout" "vllm"
usage "pull rank outside the layout" pull --directory "$D" --model m \
    --version 1 --rank 2 --layout vllm:tp=2 --model-config "$TINY"
usage "pull with a bad directory URL" pull --directory nowhere:x --model m \
    --version 1 --rank 0 --layout vllm:tp=2 --model-config "$TINY"
usage "publish world mismatch" publish --directory "$D" --model m --version 1 \
    --rank 0 --world 4 --layout megatron:tp=2 --model-config "$TINY"
expect_in "publish world mismatch" "$TMP/err" "--world 4" "2 ranks"
usage "publish bad backend" publish --directory "$D" --model m --version 1 \
    --rank 0 --world 2 --layout megatron:tp=2 --model-config "$TINY" \
    --backend tcp
usage "publish missing config" publish --directory "$D" --model m --version 1 \
    --rank 0 --world 2 --layout megatron:tp=2 --model-config "$TMP/none.json"
expect_in "publish missing config" "$TMP/err" "none.json"
usage "demo unknown option" demo --bogus
usage "demo bad inference layout" demo --model-config "$TINY" --infer fsdp:2
usage "demo bad backend" demo --backend rdma
"$BIN" demo --help >"$TMP/out" 2>&1; rc=$?
expect_rc "demo --help" 0
expect_in "demo --help" "$TMP/out" "--model-config" "--train" "--infer" \
    "--backend" "--directory" "UCX_TLS"
"$BIN" --help >"$TMP/out" 2>&1; rc=$?
expect_in "reshard --help" "$TMP/out" "publish" "pull" "demo"

cli_done
