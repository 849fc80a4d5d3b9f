#!/usr/bin/env bash
# CLI tests of group commit (`reshard pull --group`): two trainer ranks of
# megatron:tp=2 publish version 1 over cma; the two ranks of a vllm:tp=2
# engine pulled as one group both install it and pass --check; a rank
# pulled alone in a group of two waits for its peer, then fails (exit 1)
# naming the rank that never staged, with nothing installed; bad usage of
# the group flags exits 2.
# usage: bash test_group_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_group_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_group_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
. "$(dirname "$0")/lib.sh"

mkdir -p "$TMP/dir"
D="file:$TMP/dir"

for r in 0 1; do
    "$BIN" publish --directory "$D" --model m --version 1 --rank "$r" \
        --world 2 --layout megatron:tp=2 --model-config "$TINY" \
        --backend cma --timeout 120 >"$TMP/pub$r.out" 2>"$TMP/pub$r.err" &
    pids+=("$!")
done

# pull RANK OUT [ARGS]: one engine rank's pull of version 1.
pull() {
    local r=$1 out=$2
    shift 2
    "$BIN" pull --directory "$D" --model m --version 1 --rank "$r" \
        --layout vllm:tp=2 --model-config "$TINY" --backend cma \
        --timeout 30 "$@" >"$TMP/$out.out" 2>"$TMP/$out.err"
}

pull 0 g0 --check --group engine0 --group-size 2 &
p0=$!
pull 1 g1 --check --group engine0 --group-size 2 &
p1=$!
pids+=("$p0" "$p1")
wait "$p0"; rc=$?
expect_rc "group rank 0" 0
expect_in "group rank 0" "$TMP/g0.out" "byte-exact"
wait "$p1"; rc=$?
expect_rc "group rank 1" 0
expect_in "group rank 1" "$TMP/g1.out" "byte-exact"

pull 0 lone --group engine1 --group-size 2 --group-timeout 1
rc=$?
cp "$TMP/lone.err" "$TMP/err"
expect_rc "a rank whose peer never comes" 1
expect_in "a rank whose peer never comes" "$TMP/lone.err" \
    "group 'engine1'" "rank(s) 1 to stage" "nothing was installed"

pull 0 u1 --group engine2
rc=$?
cp "$TMP/u1.err" "$TMP/err"
expect_rc "--group without --group-size" 2
expect_in "--group without --group-size" "$TMP/u1.err" "needs --group-size"
pull 0 u2 --group engine2 --group-size 2 --group-rank 2
rc=$?
cp "$TMP/u2.err" "$TMP/err"
expect_rc "--group-rank outside the group" 2
expect_in "--group-rank outside the group" "$TMP/u2.err" \
    "must be below --group-size"

cli_done
