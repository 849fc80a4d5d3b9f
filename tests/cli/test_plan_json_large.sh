#!/usr/bin/env bash
# The streaming JSON writer on a plan larger than its buffer: thousands of
# segments, names longer than the buffer, names needing escapes. The output
# must parse, and executing it must give the ground-truth bytes.
# usage: bash test_plan_json_large.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_plan_json_large.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_plan_json_large.sh <reshard-binary> <source-dir>}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0

ok() { echo "ok   - $1"; }
bad() { failures=$((failures + 1)); echo "FAIL - $1"; }

# Eight [512, 64] bf16 tensors row-sharded over four sessions; the capture
# reads a column half of each (512 runs of 64 B per tensor). One tensor and
# its param have 70,000-character names; one unsupported source has a long
# name full of characters JSON must escape.
python3 - "$TMP" <<'PYEOF'
import json, sys
tmp = sys.argv[1]
long_name = "L" * 70000
names = ["layer.%d.w" % i for i in range(7)] + [long_name]
blobs = []
for r in range(4):
    tensors = []
    for i, n in enumerate(names):
        tensors.append({"name": n, "dtype": "bf16", "elsize": 2, "full_shape": [512, 64],
                        "shards": [{"agent_name": "rank-%d" % r, "device_id": r,
                                    "addr": (r + 1) * 2**40 + i * 128 * 64 * 2,
                                    "shard_offset": [128 * r, 0], "shape": [128, 64]}]})
    blobs.append({"schema": "mx.reshard.shard_table.v1", "agent_name": "rank-%d" % r,
                  "tensors": tensors})
json.dump(blobs, open(tmp + "/sources.json", "w"))
cap = {"schema": "reshard.capture.v1", "params": {}, "copies": [],
       "unsupported": {'q"\\\n\t\u0002' * 20000: "odd name"}}
for n in names:
    p = n + ".half"
    cap["params"][p] = {"shape": [512, 32], "dtype": "bf16"}
    cap["copies"].append({"src": n, "ops": [["narrow", 1, 32, 32]], "param": p,
                          "dest_offset": 0, "dest_shape": [512, 32],
                          "dest_stride": [32, 1], "dest_dtype": "bf16"})
json.dump(cap, open(tmp + "/capture.json", "w"))
PYEOF

"$BIN" plan --capture "$TMP/capture.json" --sources "$TMP/sources.json" --json \
    --max-segments-per-copy 100000 --descriptor-ns 0.001 >"$TMP/plan.json" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 1 ] && ok "large plan: exit 1 (one unsupported source)" \
    || { bad "large plan: exit $rc, want 1"; head -3 "$TMP/err"; }
size=$(wc -c <"$TMP/plan.json")
[ "$size" -gt 400000 ] && ok "large plan: $size bytes of JSON" || bad "large plan: only $size bytes"
if python3 - "$TMP/plan.json" <<'PYEOF'
import json, sys
plan = json.load(open(sys.argv[1]))
assert len(plan["segments"]) == 8 * 512, len(plan["segments"])
assert plan["fallback"] == ['q"\\\n\t\u0002' * 20000]
assert ("L" * 70000 + ".half") in {s["param"] for s in plan["segments"]}
assert plan["stats"]["sessions"] == ["rank-0", "rank-1", "rank-2", "rank-3"]
assert plan["stats"]["bytes_planned"] == 8 * 512 * 32 * 2
PYEOF
then ok "large plan parses with every segment and exact long names"
else bad "large plan parses with every segment and exact long names"; fi
if python3 "$SRC/tests/cli/plan_exec.py" "$TMP/plan.json" "$TMP/capture.json" \
    "$TMP/sources.json" >"$TMP/exec" 2>&1
then ok "large plan executes byte-exact"
else bad "large plan executes byte-exact"; head -5 "$TMP/exec"; fi

"$BIN" plan --capture "$TMP/capture.json" --sources "$TMP/sources.json" \
    >"$TMP/summary" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 1 ] && tail -n 1 "$TMP/summary" | grep -q "INCOMPLETE" \
    && ok "large plan summary: exit 1, INCOMPLETE" || bad "large plan summary (exit $rc)"

echo "# $failures failed"
[ "$failures" -eq 0 ]
