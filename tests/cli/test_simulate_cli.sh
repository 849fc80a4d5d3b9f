#!/usr/bin/env bash
# CLI tests of `reshard simulate`: the --json report on tiny configs and on
# Qwen2.5-0.5B (keys, parameter counts computed here from config.json,
# bytes that add up, the wire-time bound, coverage), replica balance with
# dp=4, --cut-aligned tables that serve exactly the bytes needed, --emit
# files that `reshard plan` plans completely (their captures
# declaring every source as published; captures emitted for another config
# refused by name), errors, --help.
# usage: bash test_simulate_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_simulate_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_simulate_cli.sh <reshard-binary> <source-dir>}
MODELS=$SRC/examples/models
QWEN=$MODELS/qwen2.5-0.5b.json
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
checks=0

ok() { checks=$((checks + 1)); echo "ok   - $1"; }
bad() {
    checks=$((checks + 1)); failures=$((failures + 1))
    echo "FAIL - $1"
    [ -s "$TMP/err" ] && sed 's/^/       stderr: /' "$TMP/err" | head -5
}

# run ARGS...: runs the binary, leaving stdout, stderr and the exit code.
run() { "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?; }

expect_rc() {
    if [ "$rc" -eq "$2" ]; then ok "$1: exit $2"; else bad "$1: exit $rc, want $2"; fi
}

# expect_input_error NAME NEEDLE...: exit 2, nothing on stdout, and stderr
# naming every needle (case-insensitive).
expect_input_error() {
    local name=$1 needle missing=""
    shift
    expect_rc "$name" 2
    if [ -s "$TMP/out" ]; then bad "$name: printed a report on bad input"; fi
    for needle in "$@"; do
        grep -qiF -- "$needle" "$TMP/err" || missing="$missing '$needle'"
    done
    if [ -z "$missing" ]; then ok "$name: stderr names$(printf " '%s'" "$@")"
    else bad "$name: stderr lacks$missing"; fi
}

# check_report NAME CONFIG TRAIN_RANKS INFER_SPEC NIC TRAIN_SPEC: checks the
# JSON report in $TMP/out against the config and the layout sizes.
check_report() {
    if python3 - "$TMP/out" "$2" "$3" "$4" "$5" "$6" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, sys
rep = json.load(open(sys.argv[1]))
cfg = json.load(open(sys.argv[2]))
ntrain, nic = int(sys.argv[3]), float(sys.argv[5])
infer = dict(kv.split("=") for kv in sys.argv[4].split(":")[1].split(","))
T, P, D = (int(infer.get(k, 1)) for k in ("tp", "pp", "dp"))
fsdp = sys.argv[6].startswith("fsdp:")
ninfer = T * P * D
need = ["params_total", "bytes_total", "trainer_ranks", "inference_ranks",
        "plan_seconds", "receivers", "sources", "imbalance",
        "redundant_bytes", "extra_wire_bytes", "wire_lower_bound_s",
        "coverage_ok"]
missing = [k for k in need if k not in rep]
assert not missing, f"missing keys {missing}"

# parameters of a dense llama/qwen2/qwen3 config, counted here
if cfg["model_type"] in ("llama", "qwen2", "qwen3"):
    H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    nh, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    I = cfg["intermediate_size"]
    bias = cfg["model_type"] == "qwen2"
    attn = H * nh * hd + 2 * H * kv * hd + nh * hd * H
    if bias:
        attn += nh * hd + 2 * kv * hd
    if cfg["model_type"] == "qwen3":
        attn += 2 * hd
    layer = attn + 3 * H * I + 2 * H
    want = V * H + L * layer + H + (0 if cfg["tie_word_embeddings"] else V * H)
    assert rep["params_total"] == want, (rep["params_total"], want)
# bf16 everywhere but deepseek's fp32 router bias
if cfg["model_type"] in ("deepseek_v3", "kimi_k2"):
    assert rep["bytes_total"] > 2 * rep["params_total"], "fp32 biases"
else:
    assert rep["bytes_total"] == 2 * rep["params_total"], "bf16 bytes"
assert rep["trainer_ranks"] == ntrain, rep["trainer_ranks"]
assert rep["inference_ranks"] == ninfer, rep["inference_ranks"]
assert rep["plan_seconds"] >= 0

recv = rep["receivers"]
assert [r["rank"] for r in recv] == list(range(ninfer)), "one per rank"
for r in recv:
    for k in ("rank", "bytes", "descriptors", "sources"):
        assert isinstance(r[k], int) and r[k] >= 0, (r, k)
    assert r["bytes"] > 0 and r["descriptors"] > 0, r
    assert 1 <= r["sources"] <= ntrain, r
src = rep["sources"]
names = [s["session"] for s in src]
assert sorted(names) == sorted(f"trainer-{k}" for k in range(ntrain)), names
for s in src:
    assert 0 <= s["receivers"] <= ninfer, s
    assert (s["bytes_served"] > 0) == (s["receivers"] > 0), s
assert sum(r["bytes"] for r in recv) == sum(s["bytes_served"] for s in src)
assert sum(r["sources"] for r in recv) == sum(s["receivers"] for s in src)

served = [s["bytes_served"] for s in src if s["bytes_served"] > 0]
imb = max(served) / (sum(served) / len(served))
assert abs(rep["imbalance"] - imb) < 1e-5, (rep["imbalance"], imb)
worst = max(max(r["bytes"] for r in recv), max(served))
wire = worst * 8 / (nic * 1e9)
assert abs(rep["wire_lower_bound_s"] - wire) <= 1e-6 + 1e-6 * wire, \
    (rep["wire_lower_bound_s"], wire)
# No destination byte is ever read twice. Megatron shards line up with
# vllm's slices; fsdp's dim-0 shards make dim-1 slices need a segment per
# row, which the planner may trade for a full pull of the tensor (bytes read
# beyond what is installed: extra_wire_bytes).
assert rep["redundant_bytes"] == 0, rep["redundant_bytes"]
if not fsdp:
    assert rep["extra_wire_bytes"] == 0, rep["extra_wire_bytes"]
total = sum(r["bytes"] for r in recv)
assert 0 <= rep["extra_wire_bytes"] < total, rep["extra_wire_bytes"]
assert rep["coverage_ok"] is True

# a dense model on one stage whose kv heads are not replicated reads every
# split tensor once per inference replica and its norms once per rank
if cfg["model_type"] in ("llama", "qwen2", "qwen3") and P == 1 and \
        cfg["num_key_value_heads"] >= T:
    norms = 2 * (2 * H * L + H)
    if cfg["model_type"] == "qwen3":
        norms += 2 * 2 * hd * L
    want = D * (rep["bytes_total"] + (T - 1) * norms)
    assert total - rep["extra_wire_bytes"] == want, (total, want)
print("imbalance", rep["imbalance"])
PYEOF
    then ok "$1"; else bad "$1"; sed 's/^/       /' "$TMP/pyout" | tail -5; fi
}

# simulate NAME CONFIG TRAIN INFER TRAIN_RANKS [NIC]
simulate() {
    local nic=${6:-400}
    run simulate --model "$2" --train "$3" --infer "$4" --nic-gbps "$nic" --json
    expect_rc "$1" 0
    check_report "$1: report" "$2" "$5" "$4" "$nic" "$3"
}

# ---- reports ------------------------------------------------------------

simulate "tiny-llama fsdp:4 -> vllm:tp=2" "$MODELS/tiny-llama.json" \
    fsdp:4 vllm:tp=2 4
simulate "tiny-llama megatron:tp=2,pp=2 -> vllm:tp=2,pp=2,dp=2" \
    "$MODELS/tiny-llama.json" megatron:tp=2,pp=2 vllm:tp=2,pp=2,dp=2 4 25
simulate "tiny-moe megatron:ep=4 -> vllm:tp=2,ep=2" "$MODELS/tiny-moe.json" \
    megatron:ep=4 vllm:tp=2,ep=2 4
simulate "tiny-moe megatron:tp=2,pp=2 -> vllm:tp=4" "$MODELS/tiny-moe.json" \
    megatron:tp=2,pp=2 vllm:tp=4 4
simulate "tiny-deepseek megatron:tp=2,ep=4 -> vllm:tp=2,ep=4,dp=2" \
    "$MODELS/tiny-deepseek.json" megatron:tp=2,ep=4 vllm:tp=2,ep=4,dp=2 4
simulate "qwen2.5-0.5b megatron:tp=2,pp=2 -> vllm:tp=2" "$QWEN" \
    megatron:tp=2,pp=2 vllm:tp=2 4 100
simulate "qwen2.5-0.5b fsdp:4 -> vllm:tp=2,dp=2" "$QWEN" \
    fsdp:4 vllm:tp=2,dp=2 4

run simulate --model "$QWEN" --train fsdp:2 --infer vllm:tp=2 --json
if python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["params_total"] == 494032768' "$TMP/out"
then ok "qwen2.5-0.5b: params_total 494032768"; else bad "qwen2.5-0.5b: params_total"; fi

# The human summary carries the same figures.
run simulate --model "$QWEN" --train megatron:tp=2 --infer vllm:tp=2
expect_rc "summary" 0
for needle in "494032768 parameters" "imbalance" "wire lower bound" \
    "redundant bytes            0" "every rank complete"; do
    if grep -qF -- "$needle" "$TMP/out"; then ok "summary: '$needle'"
    else bad "summary: lacks '$needle'"; fi
done

# ---- replicas: four trainer replicas share the load ----------------------

# Every shard exists on four dp replicas; the receivers' salts must spread
# the reads over them rather than all reading replica 0.
simulate "qwen2.5-0.5b megatron:tp=2,dp=4 -> vllm:tp=2,dp=4" "$QWEN" \
    megatron:tp=2,dp=4 vllm:tp=2,dp=4 8
if python3 - "$TMP/out" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, sys
rep = json.load(open(sys.argv[1]))
assert rep["imbalance"] < 1.3, rep["imbalance"]
assert all(s["bytes_served"] > 0 for s in rep["sources"]), rep["sources"]
PYEOF
then ok "dp=4 replicas: imbalance < 1.3, every replica serves"
else bad "dp=4 replicas: balance"; sed 's/^/       /' "$TMP/pyout" | tail -3; fi
simulate "tiny-moe megatron:tp=1,dp=4 -> vllm:tp=2,dp=2" "$MODELS/tiny-moe.json" \
    megatron:tp=1,dp=4 vllm:tp=2,dp=2 4
if python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["imbalance"] < 1.3' "$TMP/out"
then ok "tiny-moe dp=4 replicas: imbalance < 1.3"
else bad "tiny-moe dp=4 replicas: imbalance $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["imbalance"])' "$TMP/out")"; fi

# ---- --cut-aligned: trainer tables split at the inference ranks' cuts ------

# fsdp's dim-0 shards serve tensor-parallel column slices only by full
# pulls; split at the receivers' cuts they serve exactly the bytes needed,
# and the emitted tables and captures plan to the same exact bytes.
run simulate --model "$QWEN" --train fsdp:4 --infer vllm:tp=2 --json
cp "$TMP/out" "$TMP/whole.json"
run simulate --model "$QWEN" --train fsdp:4 --infer vllm:tp=2 --json \
    --cut-aligned --emit "$TMP/emit-cut"
expect_rc "qwen2.5-0.5b fsdp:4 -> vllm:tp=2 --cut-aligned" 0
if python3 - "$TMP/whole.json" "$TMP/out" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, sys
whole, cut = (json.load(open(f)) for f in sys.argv[1:3])
assert whole["extra_wire_bytes"] > 0, whole["extra_wire_bytes"]
assert cut["extra_wire_bytes"] == 0, cut["extra_wire_bytes"]
assert cut["coverage_ok"], cut
for w, c in zip(whole["receivers"], cut["receivers"]):
    assert c["bytes"] < w["bytes"], (w, c)
PYEOF
then ok "--cut-aligned: no extra wire bytes, fewer bytes per receiver than whole shards"
else bad "--cut-aligned: figures"; sed 's/^/       /' "$TMP/pyout" | tail -3; fi
run plan --capture "$TMP/emit-cut/captures/0.json" --json \
    $(for f in "$TMP"/emit-cut/sources/*.json; do printf -- '--sources %s ' "$f"; done)
if python3 - "$TMP/out" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, sys
st = json.load(open(sys.argv[1]))["stats"]
assert st["bytes_planned"] == st["exact_bytes"] > 0, st
PYEOF
then ok "--cut-aligned --emit: reshard plan reads exactly the bytes needed"
else bad "--cut-aligned --emit: plan"; sed 's/^/       /' "$TMP/pyout" | tail -3; fi

# ---- --emit: tables and captures that reshard plan accepts ----------------

emit_check() {
    local name=$1 model=$2 train=$3 infer=$4 ntrain=$5 ninfer=$6
    local dir=$TMP/emit-$ninfer-$ntrain
    rm -rf "$dir"
    run simulate --model "$model" --train "$train" --infer "$infer" --emit "$dir"
    expect_rc "$name: --emit" 0
    local ns nc
    ns=$(ls "$dir/sources" 2>/dev/null | wc -l)
    nc=$(ls "$dir/captures" 2>/dev/null | wc -l)
    if [ "$ns" -eq "$ntrain" ] && [ "$nc" -eq "$ninfer" ] &&
        [ -s "$dir/sources/0.json" ] && [ -s "$dir/captures/0.json" ]
    then ok "$name: $ntrain tables and $ninfer captures written"
    else bad "$name: $ns tables, $nc captures (want $ntrain, $ninfer)"; fi
    local r f srcargs=()
    for f in "$dir"/sources/*.json; do srcargs+=(--sources "$f"); done
    for ((r = 0; r < ninfer; r++)); do
        run plan --capture "$dir/captures/$r.json" "${srcargs[@]}"
        if [ "$rc" -ne 0 ]; then
            bad "$name: reshard plan of capture $r: exit $rc"
            return
        fi
    done
    ok "$name: reshard plan plans every emitted capture completely"
    if python3 - "$dir" >"$TMP/pyout" 2>&1 <<'PYEOF'
import glob, json, sys
short = {"bfloat16": "bf16", "float32": "f32", "float16": "f16"}
pub = {}
for f in glob.glob(sys.argv[1] + "/sources/*.json"):
    d = json.load(open(f))
    for b in d if isinstance(d, list) else [d]:
        for t in b["tensors"]:
            pub[t["name"]] = (t["full_shape"], short[t["dtype"].replace("torch.", "")])
for f in glob.glob(sys.argv[1] + "/captures/*.json"):
    cap = json.load(open(f))
    srcs = cap["sources"]
    for c in cap["copies"]:
        s = srcs[c["src"]]
        assert (s["shape"], s["dtype"]) == pub[c["src"]], (f, c["src"], s)
    assert set(srcs) == {c["src"] for c in cap["copies"]}, f
PYEOF
    then ok "$name: every emitted capture declares each source it reads as published"
    else bad "$name: declared sources"; sed 's/^/       /' "$TMP/pyout" | tail -3; fi
}
emit_check "tiny-moe megatron:tp=2,ep=4 -> vllm:tp=2,ep=2" \
    "$MODELS/tiny-moe.json" megatron:tp=2,ep=4 vllm:tp=2,ep=2 4 2
emit_check "tiny-deepseek fsdp:3 -> vllm:tp=2,pp=2" \
    "$MODELS/tiny-deepseek.json" fsdp:3 vllm:tp=2,pp=2 3 4
emit_check "qwen2.5-0.5b megatron:tp=2,pp=2 -> vllm:tp=2" "$QWEN" \
    megatron:tp=2,pp=2 vllm:tp=2 4 2
# The emitted captures are what simulate planned: planned with the rank as
# salt, every rank's plan moves the bytes and descriptors simulate reported.
dir=$TMP/emit-2-4
run simulate --model "$QWEN" --train megatron:tp=2,pp=2 --infer vllm:tp=2 --json
cp "$TMP/out" "$TMP/report.json"
for r in 0 1; do
    run plan --capture "$dir/captures/$r.json" --salt "$r" --json \
        $(for f in "$dir"/sources/*.json; do printf -- '--sources %s ' "$f"; done)
    if python3 - "$TMP/out" "$TMP/report.json" "$r" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, sys
stats = json.load(open(sys.argv[1]))["stats"]
rec = json.load(open(sys.argv[2]))["receivers"][int(sys.argv[3])]
assert stats["bytes_planned"] == rec["bytes"], (stats["bytes_planned"], rec)
assert stats["descriptor_count"] == rec["descriptors"], (stats, rec)
used = [k for k, v in stats["session_bytes"].items() if v > 0]
assert len(used) == rec["sources"], (used, rec)
PYEOF
    then ok "emitted rank $r: reshard plan agrees with simulate's figures"
    else bad "emitted rank $r: figures"; sed 's/^/       /' "$TMP/pyout" | tail -3; fi
done

# Captures emitted for another config than the tables (intermediate_size
# doubled): reshard plan refuses the MLP sources by name, exit 1.
python3 - "$MODELS/tiny-llama.json" "$TMP/llama-wide.json" <<'PYEOF'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["intermediate_size"] *= 2
json.dump(cfg, open(sys.argv[2], "w"))
PYEOF
run simulate --model "$MODELS/tiny-llama.json" --train megatron:tp=2 \
    --infer vllm:tp=2 --emit "$TMP/emit-narrow"
expect_rc "tiny-llama --emit" 0
run simulate --model "$TMP/llama-wide.json" --train megatron:tp=2 \
    --infer vllm:tp=2 --emit "$TMP/emit-wide"
expect_rc "tiny-llama, intermediate_size doubled: --emit" 0
run plan --capture "$TMP/emit-wide/captures/0.json" \
    --sources "$TMP/emit-narrow/sources/0.json" \
    --sources "$TMP/emit-narrow/sources/1.json"
expect_rc "doubled capture against the published tables" 1
if grep -qF "of which 12 model mismatch" "$TMP/out" &&
    grep -qF "tensor 'model.layers.0.mlp.gate_proj.weight': capture assumes shape [256, 64] bf16, published [128, 64] bf16" "$TMP/out"
then ok "doubled capture: the 12 MLP sources refused, naming both shapes"
else bad "doubled capture: summary"; sed 's/^/       /' "$TMP/out" | head -20; fi

# ---- errors -----------------------------------------------------------------

sed 's/"model_type": "qwen2"/"model_type": "gpt9"/' "$QWEN" >"$TMP/unknown.json"
run simulate --model "$TMP/unknown.json" --train fsdp:2 --infer vllm:tp=2
expect_input_error "unknown model_type" "gpt9" "model_type" "unknown.json"
grep -v '"hidden_size"' "$QWEN" >"$TMP/missing.json"
run simulate --model "$TMP/missing.json" --train fsdp:2 --infer vllm:tp=2
expect_input_error "missing key" "hidden_size" "missing.json"
run simulate --model "$TMP/nonexistent.json" --train fsdp:2 --infer vllm:tp=2
expect_input_error "missing config file" "nonexistent.json"
run simulate --model "$QWEN" --train fsdp:2 --infer vllm:tp=4
expect_input_error "vllm tp not dividing the heads" "heads" "tp (4)"
run simulate --model "$QWEN" --train megatron:tp=4 --infer vllm:tp=2
expect_input_error "megatron tp not dividing the heads" "heads" "megatron"
run simulate --model "$QWEN" --train megatron:tp=2,foo=3 --infer vllm:tp=2
expect_input_error "unknown layout key" "foo"
run simulate --model "$QWEN" --train bogus:3 --infer vllm:tp=2
expect_input_error "unknown layout kind" "bogus"
run simulate --model "$QWEN" --train fsdp:0 --infer vllm:tp=2
expect_input_error "fsdp:0" "fsdp"
run simulate --model "$QWEN" --train vllm:tp=2 --infer vllm:tp=2
expect_input_error "vllm given to --train" "--train" "vllm"
run simulate --model "$QWEN" --train fsdp:2 --infer megatron:tp=2
expect_input_error "megatron given to --infer" "--infer" "megatron"
run simulate --model "$MODELS/tiny-moe.json" --train fsdp:2 --infer vllm:tp=2,ep=3
expect_input_error "ep not dividing tp * dp" "ep (3)"
run simulate --model "$QWEN" --train fsdp:2 --infer vllm:tp=2 --nic-gbps 0
expect_input_error "--nic-gbps 0" "--nic-gbps"
run simulate --train fsdp:2 --infer vllm:tp=2
expect_input_error "no --model" "--model"
run simulate --model "$QWEN" --train fsdp:2 --infer vllm:tp=2 --bogus
expect_input_error "unknown option" "--bogus"

run simulate --help
expect_rc "--help" 0
if grep -q "usage: reshard simulate" "$TMP/out" && grep -q -- "--emit" "$TMP/out"
then ok "--help: usage on stdout"; else bad "--help: usage"; fi

echo "$checks checks, $failures failed"
[ "$failures" -eq 0 ]
