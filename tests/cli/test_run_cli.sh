#!/usr/bin/env bash
# CLI tests of `reshard run`: every transport moves byte-exact parameters
# (checked against tests/cli/run_data.py's independent ground truth), digest
# verification, missing and short data files, incomplete plans, the coverage
# gate, the throughput ceiling, bad usage and the JSON records.
# usage: bash test_run_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_run_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_run_cli.sh <reshard-binary> <source-dir>}
RD="$SRC/tests/cli/run_data.py"
. "$(dirname "$0")/lib.sh"

# run ARGS...: runs `reshard run`, leaving stdout, stderr and the exit code.
run() { "$BIN" run "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?; }

# expect_no_out NAME DIR: nothing was installed (DIR absent or empty).
expect_no_out() {
    if [ ! -e "$2" ] || [ -z "$(ls -A "$2")" ]; then ok "$1: nothing written to --out"
    else bad "$1: --out holds $(ls "$2" | head -3 | tr '\n' ' ')"; fi
}

# expect_exact NAME CAPTURE SOURCES OUT [--only GLOB]: byte-exact parameters.
expect_exact() {
    local name=$1
    shift
    if python3 "$RD" expect "$@" >"$TMP/pyout" 2>&1; then ok "$name: byte-exact"
    else bad "$name: not byte-exact"; sed 's/^/       /' "$TMP/pyout" | tail -3; fi
}

# py NAME CODE: a python check over the --json output (as `rec`).
py() {
    local name=$1 code=$2
    if python3 - "$TMP/out" >"$TMP/pyout" 2>&1 <<PYEOF
import json, sys
rec = json.load(open(sys.argv[1]))
stage, cov = rec["stage"], rec["coverage"]
$code
PYEOF
    then ok "$name"; else bad "$name"; sed 's/^/       /' "$TMP/pyout" | tail -5; fi
}

# mutate IN OUT CODE: writes OUT = IN (JSON, as `d`) after running CODE on it.
mutate() {
    python3 - "$1" "$2" <<PYEOF
import json, sys
d = json.load(open(sys.argv[1]))
blobs = d if isinstance(d, list) else [d]
$3
json.dump(d, open(sys.argv[2], "w"))
PYEOF
}

TRANSPORTS=("local" "local-mt --threads 1" "local-mt --threads 3" "cma")

# setup NAME DIR: shard files and digested shard tables for an example.
setup() {
    mkdir -p "$TMP/$1"
    python3 "$RD" make "$2/sources.json" "$TMP/$1/data" \
        --digests "$TMP/$1/sources.json" || { echo "cannot make data for $1"; exit 1; }
}

TINY=$SRC/examples/tiny
FUSED=$SRC/tests/data/run/fused
setup tiny "$TINY"
setup fused "$FUSED"

# --- every transport, byte-exact -------------------------------------------
n=0
for ex in tiny fused fused-fullpull; do
    case $ex in
    tiny) dir=$TINY; d=tiny; extra=() ;;
    fused) dir=$FUSED; d=fused; extra=() ;;
    fused-fullpull) dir=$FUSED; d=fused; extra=(--max-segments-per-copy 1) ;;
    esac
    for tr in "${TRANSPORTS[@]}"; do
        n=$((n + 1))
        # shellcheck disable=SC2086
        run --capture "$dir/capture.json" --sources "$dir/sources.json" \
            --data "$TMP/$d/data" --transport $tr "${extra[@]}" --out "$TMP/out$n"
        expect_rc "$ex via $tr" 0
        expect_exact "$ex via $tr" "$dir/capture.json" "$dir/sources.json" "$TMP/out$n"
    done
done

run --capture "$FUSED/capture.json" --sources "$FUSED/sources.json" \
    --data "$TMP/fused/data" --phased --out "$TMP/out-phased"
expect_rc "fused --phased" 0
expect_exact "fused --phased" "$FUSED/capture.json" "$FUSED/sources.json" "$TMP/out-phased"

run --capture "$TINY/capture.json" --sources "$TINY/sources.json" \
    --data "$TMP/tiny/data" --only 'model.layers.0.mlp.*' --out "$TMP/out-only"
expect_rc "tiny --only mlp" 0
expect_exact "tiny --only mlp (others stay 0xEE)" "$TINY/capture.json" \
    "$TINY/sources.json" "$TMP/out-only" --only 'model.layers.0.mlp.*'

# --- JSON records -----------------------------------------------------------
run --capture "$TINY/capture.json" --sources "$TINY/sources.json" \
    --data "$TMP/tiny/data" --json
expect_rc "tiny --json" 0
py "tiny --json: schemas, wire stage, absent stages, counts" '
assert stage["schema"] == "reshard.stage.v2", stage["schema"]
assert cov["schema"] == "reshard.coverage.v1", cov["schema"]
st = stage["stages_s"]
assert "wire" in st and st["wire"] >= 0, st
assert "plan" in st and "convert" in st, st
# the cost model stages the transposed copies of the tiny example: replays run
# exactly when the plan has staged reads
assert ("replay" in st) == (stage["full_pulls"] > 0), st
assert "verify" not in st, "verify ran without --verify: %r" % st
assert stage["converts"] == 1, stage
assert stage["ok"] is True and "failure" not in stage, stage
assert cov["params_total"] == 4 and cov["params_installed"] == 4, cov
assert cov["bytes_total"] == 144 and cov["bytes_covered"] == 144, cov
assert cov["percent"] == 100.0, cov'

run --capture "$FUSED/capture.json" --sources "$FUSED/sources.json" \
    --data "$TMP/fused/data" --max-segments-per-copy 1 --json
expect_rc "fused full pull --json" 0
py "fused full pull --json: replay stage present, 5 full pulls" '
assert "replay" in stage["stages_s"] and "wire" in stage["stages_s"], stage["stages_s"]
assert stage["full_pulls"] == 5, stage
assert stage["bytes"] > 0 and stage["descriptors"] > 0, stage'

# --- digests ------------------------------------------------------------------
for ex in tiny fused; do
    case $ex in tiny) dir=$TINY ;; fused) dir=$FUSED ;; esac
    for tr in "${TRANSPORTS[@]}"; do
        # shellcheck disable=SC2086
        run --capture "$dir/capture.json" --sources "$TMP/$ex/sources.json" \
            --data "$TMP/$ex/data" --transport $tr --verify --max-segments-per-copy 1 --json
        expect_rc "$ex --verify via $tr" 0
        py "$ex --verify via $tr: shards verified, verify stage" '
assert stage["shards_verified"] > 0, stage
assert "verify" in stage["stages_s"], stage["stages_s"]'
    done
done

# corrupt CASE EX PLAN_ARGS TENSOR: copies EX's data, flips a byte the plan
# reads (of TENSOR if given), then checks --verify fails naming it.
corrupt() {
    local name=$1 ex=$2 dir=$3 tensor=$4
    shift 4
    rm -rf "$TMP/bad" && cp -r "$TMP/$ex/data" "$TMP/bad"
    "$BIN" plan --capture "$dir/capture.json" --sources "$TMP/$ex/sources.json" \
        "$@" --json >"$TMP/plan.json" 2>/dev/null
    local what
    what=$(python3 "$RD" corrupt "$TMP/plan.json" "$TMP/$ex/sources.json" \
           "$TMP/bad" ${tensor:+"$tensor"}) || { bad "$name: cannot corrupt"; return; }
    local t=${what%%$'\t'*} rest=${what#*$'\t'}
    local s=${rest%%$'\t'*}
    for tr in "${TRANSPORTS[@]}"; do
        rm -rf "$TMP/out-bad"
        # shellcheck disable=SC2086
        run --capture "$dir/capture.json" --sources "$TMP/$ex/sources.json" \
            --data "$TMP/bad" --transport $tr --verify "$@" --out "$TMP/out-bad"
        expect_rc "$name via $tr" 1
        expect_err "$name via $tr" "digest" "$t" "$s"
        expect_no_out "$name via $tr" "$TMP/out-bad"
    done
}
corrupt "tiny, corrupt layernorm shard" tiny "$TINY" model.layers.0.input_layernorm.weight
corrupt "fused full pull, corrupt a q_proj shard" fused "$FUSED" \
    layers.0.attn.q_proj.weight --max-segments-per-copy 1
corrupt "fused exact, corrupt a k_proj shard" fused "$FUSED" layers.0.attn.k_proj.weight
# The k shard of tiny is reassembled whole inside a read that spans the
# back-to-back q, k and v shards: it must be verified all the same.
corrupt "tiny, corrupt k_proj shard (read spans q,k,v)" tiny "$TINY" \
    model.layers.0.self_attn.k_proj.weight

rm -rf "$TMP/bad" && cp -r "$TMP/fused/data" "$TMP/bad"
"$BIN" plan --capture "$FUSED/capture.json" --sources "$FUSED/sources.json" \
    --max-segments-per-copy 1 --json >"$TMP/plan.json" 2>/dev/null
python3 "$RD" corrupt "$TMP/plan.json" "$FUSED/sources.json" "$TMP/bad" >/dev/null
run --capture "$FUSED/capture.json" --sources "$TMP/fused/sources.json" \
    --data "$TMP/bad" --verify --max-segments-per-copy 1 --json
expect_rc "digest mismatch --json" 1
py "digest mismatch --json: stage record says why" '
assert stage["ok"] is False and stage["failure"] == "digest", stage'

# Row 1 of gate_up_proj is read by neither gate_even's copy (rows 0, 2, 4,
# 6) nor, with descriptors nearly free, by a staged read: a corrupt byte
# there is outside what --verify checks (the shard is read only in part) but
# --verify-partial pulls the shard whole and must catch it. (With every
# copy, the cost model pulls gate_up_proj whole: its copies overlap, and
# the full pull reads fewer bytes than their exact runs.)
rm -rf "$TMP/bad" && cp -r "$TMP/fused/data" "$TMP/bad"
python3 - "$TMP/fused/sources.json" "$TMP/bad" <<'PYEOF'
import json, os, sys
for blob in json.load(open(sys.argv[1])):
    for t in blob["tensors"]:
        if t["name"] == "layers.0.mlp.gate_up_proj.weight":
            for sh in t["shards"]:
                if sh["shard_offset"] == [0, 0]:
                    p = os.path.join(sys.argv[2], sh["agent_name"], "%d.bin" % sh["addr"])
                    b = bytearray(open(p, "rb").read())
                    b[16] ^= 0x01  # element (1, 0)
                    open(p, "wb").write(b)
PYEOF
GATE_EVEN=layers.0.mlp.gate_even.weight
for tr in "${TRANSPORTS[@]}"; do
    # shellcheck disable=SC2086
    run --capture "$FUSED/capture.json" --sources "$TMP/fused/sources.json" \
        --data "$TMP/bad" --transport $tr --verify --descriptor-ns 0.001 \
        --only "$GATE_EVEN" --out "$TMP/out-unread-$n"
    expect_rc "unread byte corrupt, --verify via $tr" 0
    expect_exact "unread byte corrupt, --verify via $tr" "$FUSED/capture.json" \
        "$FUSED/sources.json" "$TMP/out-unread-$n" --only "$GATE_EVEN"
    n=$((n + 1))
    # shellcheck disable=SC2086
    run --capture "$FUSED/capture.json" --sources "$TMP/fused/sources.json" \
        --data "$TMP/bad" --transport $tr --verify --verify-partial \
        --descriptor-ns 0.001 --only "$GATE_EVEN" --out "$TMP/out-vp"
    expect_rc "unread byte corrupt, --verify-partial via $tr" 1
    expect_err "unread byte corrupt, --verify-partial via $tr" "digest" \
        "layers.0.mlp.gate_up_proj.weight"
    expect_no_out "unread byte corrupt, --verify-partial via $tr" "$TMP/out-vp"
done

# --- missing and short data files ----------------------------------------
rm -rf "$TMP/bad" && cp -r "$TMP/tiny/data" "$TMP/bad"
rm "$TMP/bad/trainer-1/2097280.bin"
run --capture "$TINY/capture.json" --sources "$TINY/sources.json" --data "$TMP/bad" \
    --out "$TMP/out-missing"
expect_rc "missing data file" 2
expect_err "missing data file" "trainer-1/2097280.bin"
expect_no_out "missing data file" "$TMP/out-missing"

rm -rf "$TMP/bad" && cp -r "$TMP/tiny/data" "$TMP/bad"
truncate -s -1 "$TMP/bad/trainer-0/1048672.bin"
run --capture "$TINY/capture.json" --sources "$TINY/sources.json" --data "$TMP/bad" \
    --out "$TMP/out-short"
expect_rc "short data file" 2
expect_err "short data file" "trainer-0/1048672.bin"
expect_no_out "short data file" "$TMP/out-short"

# --- incomplete plans -------------------------------------------------------
mutate "$TINY/sources.json" "$TMP/no-v.json" '
for b in blobs:
    b["tensors"] = [t for t in b["tensors"] if t["name"] != "model.layers.0.self_attn.v_proj.weight"]'
run --capture "$TINY/capture.json" --sources "$TMP/no-v.json" --data "$TMP/tiny/data" \
    --out "$TMP/out-nov"
expect_rc "sources missing a tensor" 1
expect_err "sources missing a tensor" "model.layers.0.self_attn.v_proj.weight"
expect_no_out "sources missing a tensor" "$TMP/out-nov"

mutate "$TINY/sources.json" "$TMP/gap.json" '
for t in blobs[1]["tensors"]:
    if t["name"] == "model.layers.0.mlp.up_proj.weight":
        t["shards"] = []'
run --capture "$TINY/capture.json" --sources "$TMP/gap.json" --data "$TMP/tiny/data" \
    --out "$TMP/out-gap"
expect_rc "sources with a gap" 1
expect_err "sources with a gap" "incomplete refit"
expect_no_out "sources with a gap" "$TMP/out-gap"
run --capture "$TINY/capture.json" --sources "$TMP/gap.json" --data "$TMP/tiny/data" --json
expect_rc "sources with a gap --json" 1
py "sources with a gap --json: coverage names the uncovered copy" '
assert cov["uncovered_count"] == 1, cov
u = cov["uncovered_copies"][0]
assert u["src"] == "model.layers.0.mlp.up_proj.weight" and u["copy"] == 3, u
assert u["missing_elements"] == 8, u
assert stage["ok"] is False, stage'

# --- coverage gate ------------------------------------------------------------
mutate "$TINY/capture.json" "$TMP/partial.json" '
d["params"]["model.layers.0.mlp.up_proj.weight"]["shape"] = [8, 4]
for c in d["copies"]:
    if c["param"] == "model.layers.0.mlp.up_proj.weight":
        c["dest_stride"] = [4, 1]
d["params"]["model.layers.0.extra.weight"] = {"shape": [64], "dtype": "bf16"}'
run --capture "$TMP/partial.json" --sources "$TINY/sources.json" --data "$TMP/tiny/data" \
    --require-full-coverage --out "$TMP/out-req"
expect_rc "partial capture --require-full-coverage" 1
expect_err "partial capture --require-full-coverage" "incomplete refit"
expect_no_out "partial capture --require-full-coverage" "$TMP/out-req"
run --capture "$TMP/partial.json" --sources "$TINY/sources.json" --data "$TMP/tiny/data" \
    --out "$TMP/out-part"
expect_rc "partial capture without --require-full-coverage" 0
expect_exact "partial capture (unwritten bytes 0xEE)" "$TMP/partial.json" \
    "$TINY/sources.json" "$TMP/out-part"
run --capture "$TMP/partial.json" --sources "$TINY/sources.json" --data "$TMP/tiny/data" --json
py "partial capture --json: coverage counts" '
assert cov["params_total"] == 5 and cov["params_installed"] == 3, cov
assert cov["params_partial"] == 1 and cov["params_missing"] == 1, cov
assert cov["partial_params"] == ["model.layers.0.mlp.up_proj.weight"], cov
assert cov["missing_params"] == ["model.layers.0.extra.weight"], cov
assert cov["bytes_total"] == 304 and cov["bytes_covered"] == 144, cov
assert abs(cov["percent"] - 100.0 * 144 / 304) < 1e-9, cov
assert cov["bytes_multi_written"] == 0, cov'

# --- throughput ceiling -------------------------------------------------------
run --capture "$TINY/capture.json" --sources "$TINY/sources.json" --data "$TMP/tiny/data" \
    --max-gbps 0.000001 --out "$TMP/out-gbps"
expect_rc "--max-gbps 0.000001" 1
expect_err "--max-gbps 0.000001" "throughput" "above the ceiling of 0.0000001"
if grep -qE '0\.0 G|[0-9]e[-+][0-9]' "$TMP/err"; then
    bad "--max-gbps 0.000001: a rate printed as 0.0 or in scientific notation"
else ok "--max-gbps 0.000001: rates in GB/s with their digits"; fi
expect_no_out "--max-gbps 0.000001" "$TMP/out-gbps"
run --capture "$TINY/capture.json" --sources "$TINY/sources.json" --data "$TMP/tiny/data" \
    --max-gbps 0.000001 --json
py "--max-gbps --json: stage record says why" '
assert stage["ok"] is False and stage["failure"] == "throughput", stage'

# --- a model mismatch: refused before any byte moves -------------------------
mutate "$TINY/capture.json" "$TMP/mismatch.json" '
d["sources"]["model.layers.0.mlp.down_proj.weight"]["shape"] = [4, 16]'
run --capture "$TMP/mismatch.json" --sources "$TINY/sources.json" --data "$TMP/tiny/data" \
    --out "$TMP/out-mismatch"
expect_rc "capture assuming another shape" 1
expect_err "capture assuming another shape" "model mismatch" \
    "tensor 'model.layers.0.mlp.down_proj.weight'" "[4, 16] bf16" "published [4, 8] bf16"
expect_no_out "capture assuming another shape" "$TMP/out-mismatch"
run --capture "$TMP/mismatch.json" --sources "$TINY/sources.json" --data "$TMP/tiny/data" --json
py "mismatch --json: nothing read, nothing installed" '
assert stage["ok"] is False and stage["failure"] == "mismatch", stage
assert stage["bytes"] == 0 and "install" not in stage["stages_s"], stage'

# --- bad usage ----------------------------------------------------------------
run --capture "$TINY/capture.json" --sources "$TINY/sources.json" --data "$TMP/tiny/data" \
    --transport carrier-pigeon
expect_rc "unknown transport" 2
expect_err "unknown transport" "carrier-pigeon"
run --capture "$TINY/capture.json" --sources "$TINY/sources.json"
expect_rc "missing --data" 2
expect_err "missing --data" "--data"
run --capture "$TINY/capture.json" --sources "$TINY/sources.json" --data "$TMP/tiny/data" \
    --transport local-mt --threads 0
expect_rc "--threads 0" 2
expect_err "--threads 0" "--threads"
run --capture "$TMP/nonexistent.json" --sources "$TINY/sources.json" --data "$TMP/tiny/data"
expect_rc "missing capture file" 2
expect_err "missing capture file" "nonexistent.json"

echo "$((checks - failures)) of $checks checks passed"
[ "$failures" -eq 0 ]
