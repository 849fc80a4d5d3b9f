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
. "$(dirname "$0")/lib.sh"

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
need = ["schema", "model_type", "dtype", "quantization", "params_total",
        "bytes_total", "trainer_ranks", "inference_ranks", "plan_seconds",
        "device_memory_bytes", "fits", "ranks_not_fitting", "receivers",
        "sources", "imbalance", "redundant_bytes", "extra_wire_bytes",
        "needed_bytes", "padding_bytes", "unbounded_sources",
        "wire_lower_bound_s", "est_seconds", "nic_gbps", "coverage_ok"]
missing = [k for k in need if k not in rep]
assert not missing, f"missing keys {missing}"
assert rep["schema"] == "reshard.simulate.v1", rep["schema"]
assert rep["model_type"] == cfg["model_type"], rep["model_type"]
assert rep["dtype"] == "bf16" and rep["quantization"] is None, rep["dtype"]
assert rep["device_memory_bytes"] == 80 << 30, rep["device_memory_bytes"]

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
    for k in ("rank", "bytes", "needed_bytes", "descriptors", "sources",
              "unbounded_sources", "padding_bytes", "param_bytes",
              "staging_bytes", "memory_bytes"):
        assert isinstance(r[k], int) and r[k] >= 0, (r, k)
    assert r["bytes"] > 0 and r["descriptors"] > 0, r
    assert 1 <= r["sources"] <= ntrain, r
    # the wire carries at least what is needed; what is needed is what the
    # rank installs, padding aside
    assert r["needed_bytes"] <= r["bytes"], r
    assert r["needed_bytes"] == r["param_bytes"] - r["padding_bytes"], r
    assert r["memory_bytes"] == r["param_bytes"] + r["staging_bytes"], r
    assert r["fits"] == (r["memory_bytes"] <= rep["device_memory_bytes"]), r
    assert isinstance(r["est_seconds"], float) and r["est_seconds"] >= 0, r
    assert r["coverage_ok"] is True, r
assert rep["fits"] == all(r["fits"] for r in recv)
assert rep["ranks_not_fitting"] == [r["rank"] for r in recv if not r["fits"]]
assert rep["needed_bytes"] == sum(r["needed_bytes"] for r in recv)
assert rep["padding_bytes"] == sum(r["padding_bytes"] for r in recv)
assert rep["unbounded_sources"] == sum(r["unbounded_sources"] for r in recv)
assert rep["est_seconds"] == max(r["est_seconds"] for r in recv)
# wire bytes beyond the needed ones are the full pulls' extra bytes
assert rep["extra_wire_bytes"] == sum(r["bytes"] - r["needed_bytes"]
                                      for r in recv), rep["extra_wire_bytes"]
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
# Replicated megatron layouts (dp, or dense weights across ep) may too: a
# receiver whose exact runs crowd one replica may read a small tensor whole
# from another when the cost model estimates the plan faster that way.
replicated = any(k in sys.argv[6] for k in ("dp=", "ep="))
if not fsdp and not replicated:
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
    # descriptors nearly free: the checks below are about exact byte runs
    # (the cost model's choices are checked by the planner's tests)
    run simulate --model "$2" --train "$3" --infer "$4" --nic-gbps "$nic" \
        --descriptor-ns 0.001 --json
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
    "redundant bytes        0 B" "every rank complete" \
    "every rank fits in 80.0 GiB" "bf16 weights (no quantization_config)"; do
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
# (below 1.5 here: its receivers read some small replicated tensors whole
# from a second replica, by the cost model's choice, which no receiver
# coordinates with the others)
if python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["imbalance"] < 1.5' "$TMP/out"
then ok "tiny-moe dp=4 replicas: imbalance < 1.5"
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
    assert w["bytes"] > w["needed_bytes"] == c["needed_bytes"] == c["bytes"], (w, c)
PYEOF
then ok "--cut-aligned: every receiver pulls exactly its needed bytes (whole shards: more)"
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

# ---- the per-rank table, against the JSON and the emitted captures ----------

# Each rank's parameter bytes are the sum over its emitted capture's params
# (computed here from shapes and dtypes); its staging is the sum of what its
# plan stages, read from `reshard plan --json` of the same capture and salt
# (full pulls: the whole source's shape; converts: the destination box in
# the source dtype).
dir=$TMP/emit-mem
run simulate --model "$QWEN" --train fsdp:4 --infer vllm:tp=2,pp=2 --emit "$dir" --json
expect_rc "qwen2.5-0.5b fsdp:4 -> vllm:tp=2,pp=2 --emit --json" 0
cp "$TMP/out" "$TMP/mem.json"
for r in 0 1 2 3; do
    "$BIN" plan --capture "$dir/captures/$r.json" --salt "$r" --json \
        $(for f in "$dir"/sources/*.json; do printf -- '--sources %s ' "$f"; done) \
        >"$TMP/plan-$r.json" 2>"$TMP/err"
done
if python3 - "$TMP/mem.json" "$dir" "$TMP" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, math, sys
rep = json.load(open(sys.argv[1]))
size = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "bfloat16": 2, "float32": 4}
staged_any = False
for r in rep["receivers"]:
    cap = json.load(open(f"{sys.argv[2]}/captures/{r['rank']}.json"))
    want = sum(math.prod(p["shape"]) * size[p["dtype"]]
               for p in cap["params"].values())
    assert r["param_bytes"] == want, (r["rank"], r["param_bytes"], want)
    plan = json.load(open(f"{sys.argv[3]}/plan-{r['rank']}.json"))
    staged = sum(math.prod(f["global_shape"]) * size[f["dtype"]]
                 for f in plan.get("full_pulls", []))
    staged += sum(c["staging_bytes"] for c in plan.get("converts", []))
    assert r["staging_bytes"] == staged, (r["rank"], r["staging_bytes"], staged)
    staged_any |= staged > 0
# fsdp's dim-0 shards make some dim-1 slices full pulls: staging is not 0
assert staged_any, "no rank stages anything"
PYEOF
then ok "param_bytes = sum over the emitted capture's params; staging_bytes = the plan's full pulls and converts"
else bad "param and staging bytes"; sed 's/^/       /' "$TMP/pyout" | tail -3; fi

# The summary's table rows hold the min, median (the upper one of an even
# count) and max of the JSON's per-rank figures, formatted as sizes here.
run simulate --model "$QWEN" --train fsdp:4 --infer vllm:tp=2,pp=2
expect_rc "qwen2.5-0.5b fsdp:4 -> vllm:tp=2,pp=2 summary" 0
if python3 - "$TMP/mem.json" "$TMP/out" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, re, sys
rep = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
def size(b):
    if b < 1024:
        return f"{b} B"
    v, units = b / 1024, ["KiB", "MiB", "GiB", "TiB", "PiB"]
    u = 0
    while v >= 1024 and u + 1 < len(units):
        v /= 1024; u += 1
    return (f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:.0f}") + " " + units[u]
def count(n):
    return f"{n:,}"
rows = {"parameters held": ("param_bytes", size),
        "staging (peak)": ("staging_bytes", size),
        "memory needed": ("memory_bytes", size),
        "bytes needed": ("needed_bytes", size),
        "bytes on the wire": ("bytes", size),
        "descriptors": ("descriptors", count),
        "sources": ("sources", count)}
for label, (key, fmt) in rows.items():
    v = sorted(r[key] for r in rep["receivers"])
    want = [fmt(v[0]), fmt(v[len(v) // 2]), fmt(v[-1])]
    line = [l for l in text.splitlines() if l.strip().startswith(label + " ")]
    assert len(line) == 1, (label, line)
    got = re.split(r"\s{2,}", line[0].strip())[1:4]
    assert got == want, (label, got, want)
    assert len(re.split(r"\s{2,}", line[0].strip())) == 5, ("no meaning", line)
for needle in ["per inference rank", "min", "median", "max",
               "estimated transfer", "planning time", "unbounded sources",
               "extra wire bytes", "vocab padding", "redundant bytes",
               "estimated time         not estimated" if rep["est_seconds"] == 0
               else "estimated time"]:
    assert needle in text, needle
# every count a reader cannot interpret alone carries its meaning
for label in ["unbounded sources", "extra wire bytes", "vocab padding",
              "redundant bytes", "wire lower bound"]:
    line = [l for l in text.splitlines() if l.strip().startswith(label)][0]
    assert "(" in line, ("no explanation", line)
PYEOF
then ok "summary table: min/median/max of every per-rank figure, each row explained"
else bad "summary table"; sed 's/^/       /' "$TMP/pyout" | tail -3; fi

# ---- device memory ---------------------------------------------------------

# Llama-3.1-70B on one 80 GiB rank does not fit (131 GiB of bf16): exit 1
# and a message naming the rank and what it holds beyond the limit.
run simulate --model "$MODELS/llama-3.1-70b.json" --train megatron:tp=8 --infer vllm:tp=1
expect_rc "llama-3.1-70b on one 80 GiB rank" 1
if grep -qF "1 of 1 inference ranks do not fit in 80.0 GiB of device memory (--device-memory): rank 0;" "$TMP/err" &&
    grep -qE "the largest is rank 0 with [0-9.]+ GiB = 131 GiB parameters \+ [0-9.]+ [KMG]?i?B staging, [0-9.]+ GiB over" "$TMP/err" &&
    grep -qF "memory                 FAILED: 1 of 1 ranks do not fit in 80.0 GiB: rank 0" "$TMP/out"
then ok "llama-3.1-70b tp=1: stderr names rank 0 and how much it is over"
else bad "llama-3.1-70b tp=1: message"; cat "$TMP/err" | head -3; fi
cp "$TMP/out" "$TMP/llama70b.txt"

# Sizes, counts and times read without scientific notation at real sizes
# (Llama-3.1-70B: 131 GiB, ten million descriptors) and tiny ones.
run simulate --model "$MODELS/tiny-llama.json" --train fsdp:2 --infer vllm:tp=2
cp "$TMP/out" "$TMP/tiny.txt"
for f in llama70b tiny; do
    if ! grep -qE '[0-9]e[+-]?[0-9]' "$TMP/$f.txt" &&
        grep -qE 'parameters \([0-9.]+ (thousand|million|billion)\)' "$TMP/$f.txt"
    then ok "$f summary: no scientific notation"
    else bad "$f summary: scientific notation"; grep -E '[0-9]e[+-]?[0-9]' "$TMP/$f.txt" | head -3; fi
done
if grep -qE '^  descriptors ' "$TMP/llama70b.txt" &&
    ! grep -E '^  descriptors ' "$TMP/llama70b.txt" | grep -qE '[0-9]{4}'
then ok "llama70b: descriptor counts grouped by thousands"
else bad "llama70b: descriptors row"; grep -E '^  descriptors ' "$TMP/llama70b.txt"; fi

# A limit between the smallest and the largest rank: exactly the ranks above
# it are reported, in the JSON and on stderr, and the exit status is 1.
run simulate --model "$MODELS/tiny-llama.json" --train megatron:tp=2,pp=2 \
    --infer vllm:tp=2,pp=2,dp=2 --json
cp "$TMP/out" "$TMP/fit.json"
gib=$(python3 - "$TMP/fit.json" <<'PYEOF'
import json, sys
m = sorted({r["memory_bytes"] for r in json.load(open(sys.argv[1]))["receivers"]})
assert len(m) >= 2, m
print(repr((m[0] + m[-1]) / 2 / 2**30))
PYEOF
)
run simulate --model "$MODELS/tiny-llama.json" --train megatron:tp=2,pp=2 \
    --infer vllm:tp=2,pp=2,dp=2 --json --device-memory "$gib"
expect_rc "tiny-llama --device-memory $gib" 1
if python3 - "$TMP/fit.json" "$TMP/out" "$gib" "$TMP/err" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, sys
full = json.load(open(sys.argv[1]))
rep = json.load(open(sys.argv[2]))
limit = int(float(sys.argv[3]) * 2**30)
err = open(sys.argv[4]).read()
assert rep["device_memory_bytes"] == limit, (rep["device_memory_bytes"], limit)
want = [r["rank"] for r in full["receivers"] if r["memory_bytes"] > limit]
assert 0 < len(want) < len(full["receivers"]), want
assert rep["ranks_not_fitting"] == want, (rep["ranks_not_fitting"], want)
assert rep["fits"] is False
assert [r["fits"] for r in rep["receivers"]] == \
    [r["rank"] not in want for r in rep["receivers"]]
assert f"{len(want)} of {len(rep['receivers'])} inference ranks do not fit" in err, err
PYEOF
then ok "a limit between the ranks: exactly the ranks above it reported"
else bad "partial fit"; sed 's/^/       /' "$TMP/pyout" | tail -3; fi

for bad_gib in 0 -1 abc "" inf nan 1e30; do
    run simulate --model "$QWEN" --train fsdp:2 --infer vllm:tp=2 --device-memory "$bad_gib"
    expect_input_error "--device-memory '$bad_gib'" "--device-memory"
done

# ---- quantization_config ------------------------------------------------------

python3 - "$MODELS/tiny-deepseek.json" "$MODELS/deepseek-v3.json" "$TMP" <<'PYEOF'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["quantization_config"] = json.load(open(sys.argv[2]))["quantization_config"]
json.dump(cfg, open(sys.argv[3] + "/fp8.json", "w"))
cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, -1]}
json.dump(cfg, open(sys.argv[3] + "/fp8-bad.json", "w"))
cfg["quantization_config"] = {"quant_method": "awq", "bits": 4}
json.dump(cfg, open(sys.argv[3] + "/awq.json", "w"))
PYEOF
# DeepSeek-V3's 128x128 blocks on tiny-deepseek's 32-row q_a_proj, the
# first part of fused_qkv_a_proj: vLLM cannot load that, nor the layout.
run simulate --model "$TMP/fp8.json" --train megatron:tp=2,ep=4 --infer vllm:tp=1 --json
expect_input_error "tiny-deepseek with 128x128 FP8 blocks" "128x128" "fused_qkv_a_proj" "q_a_proj" "rows [0, 32)"
FP8=$MODELS/tiny-deepseek-fp8.json
run simulate --model "$FP8" --train megatron:tp=2,ep=4 --infer vllm:tp=4,ep=4
expect_input_error "tiny-deepseek-fp8 vllm:tp=4 cuts 16x16 blocks" \
    "q_b_proj.weight" "[96, 32]" "16x16" "whole number of blocks"

# FP8 target: the figures with publisher-side FP8 copies in the tables and
# with receiver-side quantization only, checked against what the emitted
# captures hold and what each path must read: the publisher path reads
# every parameter byte once (FP8 values and scales as installed), the
# receiver path the bf16 block boxes (2 bytes per FP8 value, no scales),
# which it stages.
run simulate --model "$FP8" --train megatron:tp=2,ep=4 --infer vllm:tp=2,ep=4,dp=2 --json --emit "$TMP/fp8emit"
expect_rc "tiny-deepseek-fp8 --json" 0
if python3 - "$TMP/out" "$TMP/fp8emit" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, sys
rep = json.load(open(sys.argv[1]))
q = rep["quantization"]
assert q == {"quant_method": "fp8", "fmt": "e4m3", "weight_dtype": "f8e4m3",
             "activation_scheme": "dynamic", "weight_block_size": [16, 16],
             "modules_not_converted": 0, "refit_dtype": "bf16",
             "quantized_refit": True}, q
f = rep["fp8"]
assert f["spec"] == "fp8_block:16x16:f8e4m3", f
size = {"f8e4m3": 1, "f32": 4, "bf16": 2}
fp8_sum = scale_sum = 0
for r in rep["receivers"]:
    cap = json.load(open("%s/captures/%d.json" % (sys.argv[2], r["rank"])))
    numel = lambda shape: eval("*".join(map(str, shape)) or "1")
    fp8 = sum(numel(p["shape"]) for p in cap["params"].values()
              if p["dtype"] == "f8e4m3")
    sc = sum(4 * numel(p["shape"]) for n, p in cap["params"].items()
             if n.endswith("_scale_inv"))
    assert (r["fp8_bytes"], r["scale_bytes"]) == (fp8, sc), (r, fp8, sc)
    assert fp8 > 0 and sc > 0
    quant = [c for c in cap["copies"] if "quant" in c]
    assert len(quant) == r["publisher_copies"] and r["receiver_copies"] == 0, r
    installed = r["param_bytes"] - r["padding_bytes"]
    assert r["bytes"] == installed, (r["bytes"], installed)
    rq = r["receiver_quant"]
    assert rq["bytes"] == installed + fp8 - sc, (rq, installed, fp8, sc)
    assert rq["staging_bytes"] == 2 * fp8, rq
    # the executor holds the boxes under the staging budget, in whole pages
    assert rq["memory_bytes"] == r["param_bytes"] + rq["staging_peak_bytes"]
    assert rq["staging_peak_bytes"] >= rq["staging_bytes"], rq
    assert rq["receiver_copies"] == len(quant)
    fp8_sum += fp8
    scale_sum += sc
assert (f["fp8_bytes"], f["scale_bytes"]) == (fp8_sum, scale_sum), f
recv = rep["receivers"]
for key, get in (("publisher_quant", lambda r: r), ("receiver_quant", lambda r: r["receiver_quant"])):
    p = f[key]
    mx = max(get(r)["bytes"] for r in recv)
    assert p["max_receiver_bytes"] == mx, (key, p)
    bound = max(mx, p["max_served_bytes"]) * 8 / (rep["nic_gbps"] * 1e9)
    assert abs(p["wire_lower_bound_s"] - bound) < 1e-6, (key, p, bound)
    assert abs(p["est_seconds"] - max(get(r)["est_seconds"] for r in recv)) < 1e-9
    assert p["complete"] is True
assert f["publisher_quant"]["max_receiver_bytes"] < f["receiver_quant"]["max_receiver_bytes"]
assert f["publisher_quant"]["wire_lower_bound_s"] == rep["wire_lower_bound_s"]
assert f["max_fp8_bytes"] == max(r["fp8_bytes"] for r in recv)
src = json.load(open(sys.argv[2] + "/sources/0.json"))
names = {t["name"] for t in src["tensors"]}
assert any(n.endswith("#fp8_block:16x16:f8e4m3") for n in names), sorted(names)[:5]
assert any(n.endswith("#fp8_block:16x16:f8e4m3#scale") for n in names)
PYEOF
then ok "FP8 report: fp8/scale bytes as the captures hold, publisher path reads each byte once, receiver path the bf16 boxes"
else bad "FP8 report"; sed 's/^/       /' "$TMP/pyout" | tail -4; fi
run simulate --model "$FP8" --train megatron:tp=2,ep=4 --infer vllm:tp=2,ep=4,dp=2 --json --no-publisher-quant
expect_rc "--no-publisher-quant" 0
cp "$TMP/out" "$TMP/nopub.json"
if python3 - "$TMP/nopub.json" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, sys
rep = json.load(open(sys.argv[1]))
f = rep["fp8"]
assert f["publisher_quant"] is None, f
for r in rep["receivers"]:
    assert r["publisher_copies"] == 0 and r["receiver_copies"] > 0, r
    assert "receiver_quant" not in r
    assert r["bytes"] == r["param_bytes"] - r["padding_bytes"] + r["fp8_bytes"] - r["scale_bytes"], r
    assert r["staging_bytes"] == 2 * r["fp8_bytes"], r
assert f["receiver_quant"]["wire_lower_bound_s"] == rep["wire_lower_bound_s"]
PYEOF
then ok "--no-publisher-quant: receivers quantize every block, from bf16 tables"
else bad "--no-publisher-quant"; sed 's/^/       /' "$TMP/pyout" | tail -4; fi
run simulate --model "$FP8" --train megatron:tp=2,ep=4 --infer vllm:tp=2,ep=4,dp=2
expect_rc "tiny-deepseek-fp8 summary" 0
if grep -qF "checkpoint             fp8 e4m3 weights, 16x16 scale blocks, dynamic activations (quantization_config)" "$TMP/out" &&
    grep -qF "the inference ranks load FP8 weights and scales" "$TMP/out" &&
    grep -qE "^  FP8 refit +fp8_block:16x16:f8e4m3: FP8 weights .* and scales " "$TMP/out" &&
    grep -qE "^  by the publishers .* [0-9]+ publisher, 0 receiver$" "$TMP/out" &&
    grep -qE "^  by the receivers .* 0 publisher, [0-9]+ receiver \(bf16 tables\)$" "$TMP/out"
then ok "summary: FP8 weights and scales, both paths compared"
else bad "fp8 summary"; grep -A4 "FP8 refit" "$TMP/out"; fi
run simulate --model "$TMP/fp8-bad.json" --train fsdp:2 --infer vllm:tp=2
expect_input_error "weight_block_size [128, -1]" "fp8-bad.json" \
    "quantization_config.weight_block_size[1]"
run simulate --model "$TMP/awq.json" --train fsdp:2 --infer vllm:tp=2
expect_input_error "quant_method awq" "awq.json" "quantization_config.quant_method" '"awq"'

# ---- progress ------------------------------------------------------------------

# --progress: one line per rank on stderr, in order, the report unchanged;
# by default stderr is not a terminal here, so nothing is printed.
run simulate --model "$MODELS/tiny-llama.json" --train fsdp:2 --infer vllm:tp=2,dp=2 --json --progress
expect_rc "--progress" 0
want=$(for k in 1 2 3 4; do echo "reshard simulate: planned inference rank $k of 4"; done)
if [ "$(cat "$TMP/err")" = "$want" ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$TMP/out"
then ok "--progress: a line per rank on stderr, JSON intact on stdout"
else bad "--progress: stderr"; head -5 "$TMP/err"; fi
for flag in "" --no-progress; do
    run simulate --model "$MODELS/tiny-llama.json" --train fsdp:2 --infer vllm:tp=2,dp=2 $flag
    if [ "$rc" -eq 0 ] && [ ! -s "$TMP/err" ]; then ok "progress '${flag:-default}': stderr empty off a terminal"
    else bad "progress '${flag:-default}': exit $rc, stderr not empty"; fi
done

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
