#!/usr/bin/env bash
# CLI tests of `reshard simulate --changed-fraction F` (docs/simulator.md,
# deltas): on a tiny bf16 model and a tiny FP8 one, the JSON report's delta
# figures add up (the receivers' sums are the totals, a run read as a delta
# or in full), nothing changed reads only headers and indexes, everything
# changed reads every run in full with the full bound, the bound and the
# bytes grow with F, the FP8 shares follow the measured table or
# --changed-fraction-fp8, --no-delta turns it off, the human report names
# the figures, and bad values are refused naming the flag.
# usage: bash test_simulate_delta_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_simulate_delta_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_simulate_delta_cli.sh <reshard-binary> <source-dir>}
MODELS=$SRC/examples/models
. "$(dirname "$0")/lib.sh"

# sim NAME CONFIG TRAIN INFER F [ARGS...]: the JSON report of one F into
# $TMP/<NAME>-<F>.json (1 ns a descriptor, so that the tiny models' short
# runs can pay for a delta's two extra reads).
sim() {
    local name=$1 cfg=$2 train=$3 infer=$4 f=$5
    shift 5
    "$BIN" simulate --model "$MODELS/$cfg" --train "$train" --infer "$infer" \
        --descriptor-ns 1 --json --no-progress --changed-fraction "$f" "$@" \
        >"$TMP/$name-$f.json" 2>"$TMP/err"
    rc=$?
    expect_rc "$name F=$f" 0
}

FS="0 0.001 0.0213 0.13 0.462 0.9 1"
for f in $FS; do
    sim bf16 tiny-llama.json megatron:tp=2,pp=2 vllm:tp=2 "$f"
    sim fp8 tiny-deepseek-fp8.json megatron:tp=2,ep=2 vllm:tp=2 "$f"
done
sim fp8g tiny-deepseek-fp8.json megatron:tp=2,ep=2 vllm:tp=2 0.0213 \
    --changed-fraction-fp8 0.5

if python3 - "$TMP" $FS >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, sys
tmp, fs = sys.argv[1], sys.argv[2:]
def load(name, f):
    return json.load(open(f"{tmp}/{name}-{f}.json"))
for name in ("bf16", "fp8"):
    prev = None
    for f in fs:
        rep = load(name, f)
        d, recv = rep["delta"], rep["receivers"]
        what = f"{name} F={f}"
        assert d["changed_fraction"] == float(f), what
        # the totals are the receivers' sums (each rounded to a byte from
        # expected sizes); a run is a delta or full
        assert abs(d["wire_bytes"] - sum(x["delta_wire_bytes"] for x in recv)) <= len(recv), what
        assert abs(d["delta_bytes"] - sum(x["delta_bytes"] for x in recv)) <= len(recv), what
        assert d["full_wire_bytes"] == sum(x["bytes"] for x in recv), what
        assert d["runs"] == sum(x["runs"] for x in recv), what
        assert d["delta_runs"] == sum(x["delta_runs"] for x in recv), what
        assert d["max_receiver_bytes"] == max(x["delta_wire_bytes"] for x in recv), what
        assert abs(d["full_wire_bound_seconds"] - rep["wire_lower_bound_s"]) < 1e-6, what
        nic = rep["nic_gbps"] * 1e9 / 8
        worst = max(d["max_receiver_bytes"], d["max_served_bytes"])
        assert abs(d["wire_bound_seconds"] - worst / nic) < 1e-9, what
        for x in recv:
            assert x["delta_bytes"] <= x["delta_wire_bytes"] <= x["bytes"], what
            assert 0 <= x["delta_runs"] <= x["runs"] > 0, what
        if f == "0":
            # nothing changed: a delta is its header and index entries,
            # at most a few hundred bytes a run on these shards
            assert d["delta_runs"] > 0, what
            assert d["delta_bytes"] <= d["delta_runs"] * 2000, what
            assert d["wire_bound_seconds"] < d["full_wire_bound_seconds"], what
        if f == "1":
            # everything changed: every run in full, the full bound
            assert d["delta_runs"] == 0 and d["delta_bytes"] == 0, what
            assert d["wire_bytes"] == d["full_wire_bytes"], what
            assert d["wire_bound_seconds"] == d["full_wire_bound_seconds"], what
        if prev is not None:
            assert d["wire_bytes"] >= prev["wire_bytes"], what
            assert d["wire_bound_seconds"] >= prev["wire_bound_seconds"], what
        prev = d
# the measured shares (docs/delta.md) give the FP8 ones at F = 2.13 %;
# --changed-fraction-fp8 sets them
d = load("fp8", "0.0213")["delta"]
assert abs(d["changed_fraction_fp8_codes"] - 0.00199) < 1e-12, d
assert abs(d["changed_fraction_fp8_scales"] - 0.00082) < 1e-12, d
g = load("fp8g", "0.0213")["delta"]
assert g["changed_fraction_fp8_codes"] == 0.5 == g["changed_fraction_fp8_scales"], g
assert g["wire_bytes"] > d["wire_bytes"], (g, d)
print("ok")
PYEOF
then ok "delta figures add up, F=0 and F=1 edges, monotone in F, FP8 shares"
else bad "delta figures: $(tail -3 "$TMP/pyout")"; fi

# off: no delta figures
run simulate --model "$MODELS/tiny-llama.json" --train megatron:tp=2 \
    --infer vllm:tp=2 --json --no-progress --changed-fraction 0.02 --no-delta
expect_rc "--no-delta" 0
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["delta"] is None and "delta_runs" not in d["receivers"][0]' "$TMP/out"
then ok "--no-delta: \"delta\": null"; else bad "--no-delta: delta figures printed"; fi

# the human report
run simulate --model "$MODELS/tiny-deepseek-fp8.json" --train megatron:tp=2,ep=2 \
    --infer vllm:tp=2 --no-progress --changed-fraction 0.0213
expect_rc "human report" 0
expect_in "human report" "$TMP/out" "with deltas            changed share 2.13 % of bf16 elements, 0.199 % of FP8 codes, 0.082 % of scales" \
    "wire bound, deltas" "delta bytes" "runs take a delta"
run simulate --model "$MODELS/tiny-llama.json" --train megatron:tp=2 \
    --infer vllm:tp=2 --no-progress
expect_not_in "without F" "$TMP/out" "with deltas"

# bad values, named
for v in -0.1 1.5 abc "" 0.5x nan; do
    run simulate --model "$MODELS/tiny-llama.json" --train megatron:tp=2 \
        --infer vllm:tp=2 --changed-fraction "$v"
    expect_rc "--changed-fraction '$v'" 2
    expect_err "--changed-fraction '$v'" "--changed-fraction must be a number from 0 to 1" "'$v'"
done
run simulate --model "$MODELS/tiny-llama.json" --train megatron:tp=2 \
    --infer vllm:tp=2 --changed-fraction 0.02 --changed-fraction-fp8 2
expect_rc "--changed-fraction-fp8 2" 2
expect_err "--changed-fraction-fp8 2" "--changed-fraction-fp8 must be a number from 0 to 1" "'2'"
for flag in --delta "--changed-fraction-fp8 0.01"; do
    run simulate --model "$MODELS/tiny-llama.json" --train megatron:tp=2 \
        --infer vllm:tp=2 $flag
    expect_rc "$flag without --changed-fraction" 2
    expect_err "$flag without --changed-fraction" "need --changed-fraction"
done

cli_done
