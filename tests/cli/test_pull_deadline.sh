#!/usr/bin/env bash
# CLI test of `reshard pull --timeout S`: one deadline for the whole pull.
# A version that never becomes READY fails within the deadline with exit 1
# and a message naming the stage (discover) and the timeout; the same holds
# when --timeout is far below the 60 s a READY wait would otherwise take.
# usage: bash test_pull_deadline.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_pull_deadline.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_pull_deadline.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

check() { # NAME CONDITION...
    local name=$1
    shift
    if "$@"; then echo "ok   - $name"
    else echo "FAIL - $name"; sed 's/^/       stderr: /' "$TMP/err" | head -5
        failures=$((failures + 1)); fi
}

# An existing directory in which version 3 never becomes READY (receivers
# never create the directory itself).
mkdir -p "$TMP/dir"
for t in 1 0.5; do
    "$BIN" pull --directory "file:$TMP/dir" --model m --version 3 --rank 0 \
        --layout vllm:tp=2 --model-config "$TINY" --backend cma \
        --timeout "$t" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    check "--timeout $t: exit 1" test "$rc" -eq 1
    check "--timeout $t: names the stage" \
        grep -qF "deadline passed in the discover stage" "$TMP/err"
    check "--timeout $t: names the deadline" \
        grep -qF "version 3 of 'm' (timeout $t s)" "$TMP/err"
done
"$BIN" pull --help >"$TMP/out" 2>"$TMP/err"
check "help describes --timeout as the whole pull" \
    grep -qF "the whole pull of a version" "$TMP/out"
[ "$failures" -eq 0 ]
