#!/usr/bin/env bash
# CLI tests of replicas (`reshard publish --replica K`): two replicas of
# each rank of megatron:tp=2 serve one file: directory over cma; a replica
# with another layout is refused as a conflicting geometry (exit 2); a pull whose
# chosen replica of slot 1 was killed fails over to the other and passes
# --check; with both replicas of slot 1 dead the pull fails naming both;
# rank 1 started again with the same --rank and --replica rejoins its slot
# of the same version and the next pull passes --check (reading slot 1
# from it once the dead trainer-1-r1, still fresh, fails); --json names
# each failed publisher and its error, also when the pull fails; bad usage
# exits 2.
# usage: bash test_replicas_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_replicas_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_replicas_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
. "$(dirname "$0")/lib.sh"

mkdir -p "$TMP/dir"
D="file:$TMP/dir"
declare -A pid

# pub RANK REPLICA [LAYOUT]: a publisher of version 1 in the background.
# The output of an earlier publisher of the same rank and replica goes
# first: its "published" line must not stand for the new one's.
pub() {
    local out="$TMP/pub$1-$2"
    rm -f "$out.out" "$out.err"
    "$BIN" publish --directory "$D" --model m --version 1 --rank "$1" \
        --replica "$2" --world 2 --layout "${3:-megatron:tp=2}" \
        --model-config "$TINY" --backend cma --timeout 60 \
        >"$out.out" 2>"$out.err" &
    pid[$1-$2]=$!
    pids+=("$!")
}

# published RANK REPLICA: waits (up to 20 s) for its "published" line.
published() {
    if await_line "$TMP/pub$1-$2.out" "published version 1" "${pid[$1-$2]}"
    then ok "rank $1 replica $2 published"
    else bad "rank $1 replica $2 did not publish: $(cat "$TMP/pub$1-$2.err")"; fi
}

gone() { kill -KILL "${pid[$1]}"; wait "${pid[$1]}" 2>/dev/null; }

pull() {
    "$BIN" pull --directory "$D" --model m --version 1 --rank 0 \
        --layout vllm:tp=1 --model-config "$TINY" --backend cma \
        --timeout 20 "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# Replica 0 of each rank first, then replica 1: the slots list them in
# that order, and pull rank 0 (salt 0) reads slot s from entry s mod 2,
# so slot 1 from replica 1 (trainer-1-r1).
pub 0 0; pub 1 0; published 0 0; published 1 0
pub 0 1; pub 1 1; published 0 1; published 1 1
expect_in "replica 1 of rank 1" "$TMP/pub1-1.out" "rank 1 replica 1 published version 1"

pub 1 2 fsdp:2
wait "${pid[1-2]}"
rc=$?
expect_rc "a replica with another layout" 2 # refused input
expect_in "a replica with another layout" "$TMP/pub1-2.err" \
    "slot 1: conflicting geometry from publisher 'trainer-1-r2'" \
    "published by 'trainer-1', 'trainer-1-r1'"

pull --check
expect_rc "pull from the replicas" 0
expect_in "pull from the replicas" "$TMP/out" "byte-exact"
expect_not_in "pull from the replicas" "$TMP/out" "failed over"

gone 1-1
pull --check --json
expect_rc "pull with trainer-1-r1 dead" 0
expect_in "pull with trainer-1-r1 dead" "$TMP/out" '"ok":true' '"check":true' \
    '"failovers":1' '"failures":1' \
    '"failed_publishers":[{"publisher":"trainer-1-r1","slot":1,"error":"'
pull --check
expect_rc "pull with trainer-1-r1 dead" 0
expect_in "pull with trainer-1-r1 dead" "$TMP/out" \
    "failed over: trainer-1-r1, slot 1 -> trainer-1" "byte-exact"

gone 1-0
pull --json
expect_rc "pull with slot 1's replicas dead" 1
expect_in "pull with slot 1's replicas dead" "$TMP/err" \
    "reading from each of its 2 publishers failed" \
    "trainer-1, slot 1: " "trainer-1-r1, slot 1: "
expect_in "pull with slot 1's replicas dead" "$TMP/out" '"ok":false' \
    '"failures":2' '{"publisher":"trainer-1","slot":1,"error":"' \
    '{"publisher":"trainer-1-r1","slot":1,"error":"' 

# rank 1 again, same --rank and --replica: a new process at new addresses
pub 1 0; published 1 0
pull --check
expect_rc "pull after rank 1 restarted" 0
expect_in "pull after rank 1 restarted" "$TMP/out" \
    "failed over: trainer-1-r1, slot 1 -> trainer-1" "byte-exact"

"$BIN" publish --directory "$D" --model m --version 1 --rank 0 --world 2 \
    --layout megatron:tp=2 --model-config "$TINY" --replica x \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "--replica x" 2
expect_in "--replica x" "$TMP/err" "--replica must be a non-negative integer"

pull --stall-after x
expect_rc "--stall-after x" 2
expect_in "--stall-after x" "$TMP/err" "--stall-after must be a number of seconds >= 0, got 'x'"

cli_done
