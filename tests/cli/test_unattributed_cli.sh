#!/usr/bin/env bash
# CLI tests of a capture with unattributed writes (loader writes the capture
# could not tie to a source, such as a parameter rewritten after its copy):
# `reshard plan` and `reshard run` refuse it with exit 2 and the planner's
# one message, print no plan and install nothing, in every output mode; the
# same capture with the count at 0 plans and runs (the refusal is the
# count's doing). `reshard pull` builds its capture from the layout, and its
# receiver refuses with the same text (tests/unit/plan/
# test_plan_unattributed.c).
# usage: bash test_unattributed_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_unattributed_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_unattributed_cli.sh <reshard-binary> <source-dir>}
TINY=$SRC/examples/tiny
RD=$SRC/tests/cli/run_data.py
. "$(dirname "$0")/lib.sh"

MSG="the capture has 1 unattributed write(s) (loader writes not tied to a source); refusing it"

# capture N: the tiny example's capture with "unattributed": N.
capture() {
    python3 - "$TINY/capture.json" "$TMP/cap$1.json" "$1" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["unattributed"] = int(sys.argv[3])
json.dump(d, open(sys.argv[2], "w"))
PYEOF
}
capture 0
capture 1
python3 "$RD" make "$TINY/sources.json" "$TMP/data" || { echo "cannot make data"; exit 1; }

# run_cli ARGS...: runs the binary, leaving stdout, stderr and the exit code.
run_cli() { "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?; }

# refused NAME: exit 2, nothing on stdout, the message on stderr once.
refused() {
    expect_rc "$1" 2
    if [ -s "$TMP/out" ]; then bad "$1: printed on stdout: $(head -c 200 "$TMP/out")"
    else ok "$1: nothing on stdout"; fi
    expect_in "$1" "$TMP/err" "$MSG"
    local n
    n=$(grep -cF -- "unattributed" "$TMP/err")
    if [ "$n" -eq 1 ]; then ok "$1: said once"; else bad "$1: said $n times"; fi
}

for mode in "" --json; do
    run_cli plan --capture "$TMP/cap1.json" --sources "$TINY/sources.json" $mode
    refused "plan $mode"
    expect_in "plan $mode" "$TMP/err" "reshard plan: $MSG"
    expect_not_in "plan $mode" "$TMP/err" "plan complete"
done

for mode in "" --json --phased; do
    rm -rf "$TMP/out-run"
    run_cli run --capture "$TMP/cap1.json" --sources "$TINY/sources.json" \
        --data "$TMP/data" --out "$TMP/out-run" $mode
    refused "run $mode"
    expect_in "run $mode" "$TMP/err" "reshard run: $MSG"
    if [ ! -e "$TMP/out-run" ] || [ -z "$(ls -A "$TMP/out-run")" ]; then
        ok "run $mode: nothing installed"
    else bad "run $mode: --out holds $(ls "$TMP/out-run" | head -3 | tr '\n' ' ')"; fi
done

# The same capture without the count: a complete plan and an exact run.
run_cli plan --capture "$TMP/cap0.json" --sources "$TINY/sources.json"
expect_rc "plan, count 0" 0
run_cli run --capture "$TMP/cap0.json" --sources "$TINY/sources.json" \
    --data "$TMP/data" --out "$TMP/out0"
expect_rc "run, count 0" 0
if python3 "$RD" expect "$TMP/cap0.json" "$TINY/sources.json" "$TMP/out0" >"$TMP/py" 2>&1
then ok "run, count 0: byte-exact"; else bad "run, count 0: $(tail -2 "$TMP/py")"; fi

cli_done
