#!/usr/bin/env bash
# The coverage gate of `reshard run --require-full-coverage` at its default
# floor (0.995) and one byte below it: a bf16 source of 1,990 elements
# (3,980 bytes) copied whole, beside an unwritten u8 parameter of 20 bytes
# (coverage 3,980 / 4,000 = 0.995 exactly: installed) or 21 bytes
# (3,980 / 4,001 = 0.99475: refused, nothing written). Without the flag the
# run below the floor installs.
# usage: bash test_coverage_floor_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_coverage_floor_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_coverage_floor_cli.sh <reshard-binary> <source-dir>}
RD="$SRC/tests/cli/run_data.py"
. "$(dirname "$0")/lib.sh"

# capture PAD_BYTES OUT: the capture with an unwritten u8 param of PAD_BYTES.
capture() {
    cat >"$2" <<JSON
{"schema": "reshard.capture.v1",
 "params": {"w": {"shape": [1990], "dtype": "bf16"},
            "pad": {"shape": [$1], "dtype": "u8"}},
 "sources": {"w": {"shape": [1990], "dtype": "bf16"}},
 "copies": [{"src": "w", "ops": [], "param": "w", "dest_offset": 0,
             "dest_shape": [1990], "dest_stride": [1], "dest_dtype": "bf16"}]}
JSON
}

cat >"$TMP/sources.json" <<JSON
[{"schema": "mx.reshard.shard_table.v1", "agent_name": "trainer-0",
  "metadata_endpoint": "10.0.0.1:5555", "agent_meta_b64": "",
  "tensors": [{"name": "w", "dtype": "torch.bfloat16", "elsize": 2,
               "full_shape": [1990], "shards": [{"agent_name": "trainer-0",
               "device_id": 0, "addr": 1048576, "shard_offset": [0],
               "shape": [1990], "digest": ""}]}]}]
JSON
python3 "$RD" make "$TMP/sources.json" "$TMP/data" || { echo "cannot make data"; exit 1; }
capture 20 "$TMP/at.json"
capture 21 "$TMP/below.json"

run run --capture "$TMP/at.json" --sources "$TMP/sources.json" --data "$TMP/data" \
    --require-full-coverage --out "$TMP/out-at" --json
expect_rc "coverage 0.995, at the floor" 0
if python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["coverage"]
assert c["bytes_covered"] == 3980 and c["bytes_total"] == 4000, c' "$TMP/out"
then ok "at the floor: 3980 of 4000 bytes covered"; else bad "at the floor: coverage record"; fi
if python3 "$RD" expect "$TMP/at.json" "$TMP/sources.json" "$TMP/out-at" >"$TMP/pyout" 2>&1
then ok "at the floor: byte-exact"; else bad "at the floor: not byte-exact"; fi

run run --capture "$TMP/below.json" --sources "$TMP/sources.json" --data "$TMP/data" \
    --require-full-coverage --out "$TMP/out-below"
expect_rc "coverage 0.99475, one byte below the floor" 1
expect_in "below the floor" "$TMP/err" "incomplete refit" "covers 0.9948" \
    "below the floor 0.9950"
if [ ! -e "$TMP/out-below" ] || [ -z "$(ls -A "$TMP/out-below")" ]
then ok "below the floor: nothing written"; else bad "below the floor: --out written"; fi

run run --capture "$TMP/below.json" --sources "$TMP/sources.json" --data "$TMP/data" \
    --out "$TMP/out-nogate"
expect_rc "below the floor without --require-full-coverage" 0

cli_done
