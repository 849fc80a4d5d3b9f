#!/usr/bin/env bash
# CLI test of a publisher whose process died: over UCX on tcp, on shared
# memory and with the default transports, two ranks publish tiny-llama, a
# pull reads it, rank 1 is killed (SIGKILL) and the next pull fails (exit 1)
# saying once that the publisher of that session is gone, UCX's own line
# at most once, and prints no stage record.
# usage: bash test_dead_publisher_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_dead_publisher_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_dead_publisher_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
. "$(dirname "$0")/lib.sh"

declare -A pid

# pub NAME RANK: a publisher of version 1 in the background.
pub() {
    "$BIN" publish --directory "$D" --model m --version 1 --rank "$2" \
        --world 2 --layout megatron:tp=2 --model-config "$TINY" \
        --backend ucx --timeout 60 >"$TMP/$1-pub$2.out" 2>"$TMP/$1-pub$2.err" &
    pid[$2]=$!
    pids+=("$!")
}

# published NAME RANK: waits (up to 20 s) for its "published" line.
published() {
    await_line "$TMP/$1-pub$2.out" "published version 1" "${pid[$2]}" &&
        return 0
    bad "$1: rank $2 did not publish: $(cat "$TMP/$1-pub$2.err")"
    return 1
}

pull() {
    "$BIN" pull --directory "$D" --model m --version 1 --rank 0 \
        --layout vllm:tp=1 --model-config "$TINY" --backend ucx \
        --timeout 10 --stale-after 0 >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# count NEEDLE FILE: how many times NEEDLE occurs in FILE.
count() { grep -oF -- "$1" "$2" | wc -l; }

for tls in tcp sm default; do
    if [ "$tls" = default ]; then unset UCX_TLS; else export UCX_TLS=$tls; fi
    mkdir -p "$TMP/dir-$tls"
    D="file:$TMP/dir-$tls"
    pub "$tls" 0; pub "$tls" 1
    published "$tls" 0 && published "$tls" 1 || continue
    pull
    expect_rc "$tls: pull with both publishers" 0
    kill -KILL "${pid[1]}"; wait "${pid[1]}" 2>/dev/null
    pull
    expect_rc "$tls: pull with rank 1 killed" 1
    expect_in "$tls: pull with rank 1 killed" "$TMP/err" \
        "(trainer-1, slot 1): the publisher is gone or unreachable"
    n=$(count "gone or unreachable" "$TMP/err")
    if [ "$n" -eq 1 ]; then ok "$tls: said once"; else bad "$tls: said $n times"; fi
    n=$(count "UCX: " "$TMP/err")
    if [ "$n" -le 1 ]; then ok "$tls: UCX's line at most once"
    else bad "$tls: UCX's line $n times: $(cat "$TMP/err")"; fi
    expect_not_in "$tls: no stage record" "$TMP/out" '"ok": true'
    kill -KILL "${pid[0]}"; wait "${pid[0]}" 2>/dev/null
done

cli_done
