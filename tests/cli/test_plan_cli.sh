#!/usr/bin/env bash
# CLI tests of `reshard plan`: exit codes and error messages for bad usage and
# bad input, the JSON plan of the tiny example (shape, byte-exact execution),
# incomplete plans (among them a capture assuming another source shape or
# dtype than published), --only and --max-segments-per-copy.
# usage: bash test_plan_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_plan_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_plan_cli.sh <reshard-binary> <source-dir>}
CAP=$SRC/examples/tiny/capture.json
SOURCES=$SRC/examples/tiny/sources.json
EXEC=$SRC/tests/cli/plan_exec.py
. "$(dirname "$0")/lib.sh"

# py NAME CODE: runs a python check over $TMP/out (as `plan`), prints result.
py() {
    local name=$1 code=$2
    if python3 - "$TMP/out" >"$TMP/pyout" 2>&1 <<PYEOF
import json, sys
plan = json.load(open(sys.argv[1]))
$code
PYEOF
    then ok "$name"; else bad "$name"; sed 's/^/       /' "$TMP/pyout" | tail -5; fi
}

# mutate IN OUT CODE: writes OUT = IN (JSON, as `d`) after running CODE on it.
mutate() {
    python3 - "$1" "$2" <<PYEOF
import json, sys
d = json.load(open(sys.argv[1]))
$3
json.dump(d, open(sys.argv[2], "w"))
PYEOF
}

# Descriptors nearly free: the tiny example's runs are so short that the
# default cost model stages them; these checks are about the exact plan.
plan_ok() { run plan --capture "$1" --sources "${2:-$SOURCES}" --descriptor-ns 0.001 "${@:3}"; }

# ---- help, version, usage --------------------------------------------------
run --help; expect_rc "reshard --help" 0
grep -q "plan" "$TMP/out" && ok "reshard --help lists plan" || bad "reshard --help lists plan"
run --version; expect_rc "reshard --version" 0
grep -qE "^reshard [0-9]+\.[0-9]+\.[0-9]+" "$TMP/out" && ok "--version prints a version" \
    || bad "--version prints a version"
run plan --help; expect_rc "reshard plan --help" 0
missing=""
for opt in --capture --sources --max-segments-per-copy --only --salt --json --help; do
    grep -qF -- "$opt" "$TMP/out" || missing="$missing $opt"
done
[ -z "$missing" ] && ok "plan --help explains every option" || bad "plan --help lacks$missing"
run; expect_input_error "no command" "usage"
run frobnicate; expect_input_error "unknown command" "frobnicate" "--help"
run --frobnicate; expect_input_error "unknown top-level option" "--frobnicate"
run plan --capture "$CAP" --sources "$SOURCES" --frobnicate
expect_input_error "unknown plan option" "--frobnicate" "--help"
run plan --sources "$SOURCES"; expect_input_error "missing --capture" "--capture"
run plan --capture "$CAP"; expect_input_error "missing --sources" "--sources"
run plan --capture "$CAP" --sources "$SOURCES" stray
expect_input_error "stray argument" "stray"
run plan --capture "$CAP" --sources; expect_input_error "option without argument" "--sources"
for v in 0 -3 abc 12x "" 99999999999999999999999; do
    run plan --capture "$CAP" --sources "$SOURCES" --max-segments-per-copy "$v"
    expect_input_error "--max-segments-per-copy '$v'" "--max-segments-per-copy"
done
run plan --capture "$CAP" --sources "$SOURCES" --salt -1
expect_input_error "--salt -1" "--salt"
for opt in --nic-gbps --descriptor-ns; do
    for v in 0 -1 abc 5x "" nan inf 1e999; do
        run plan --capture "$CAP" --sources "$SOURCES" "$opt" "$v"
        expect_input_error "$opt '$v'" "$opt"
    done
done

# ---- bad input files -------------------------------------------------------
run plan --capture "$TMP/nonexistent.json" --sources "$SOURCES"
expect_input_error "missing capture file" "nonexistent.json"
run plan --capture "$CAP" --sources "$TMP/absent_sources.json"
expect_input_error "missing sources file" "absent_sources.json"

printf '{"schema": "reshard.capture.v1", "params": {"w": {"shape": [2,' >"$TMP/truncated.json"
run plan --capture "$TMP/truncated.json" --sources "$SOURCES"
expect_input_error "malformed capture JSON" "truncated.json"
printf '[{"schema": "mx.reshard.shard_table.v1" "tensors": []}]' >"$TMP/nocomma.json"
run plan --capture "$CAP" --sources "$TMP/nocomma.json"
expect_input_error "malformed sources JSON" "nocomma.json"
printf '' >"$TMP/empty.json"
run plan --capture "$TMP/empty.json" --sources "$SOURCES"
expect_input_error "empty capture file" "empty.json"

mutate "$CAP" "$TMP/schema.json" 'd["schema"] = "reshard.capture.v9"'
run plan --capture "$TMP/schema.json" --sources "$SOURCES"
expect_input_error "wrong capture schema" "schema.json" "schema"
mutate "$SOURCES" "$TMP/srcschema.json" 'd[1]["schema"] = "mx.reshard.shard_table.v0"'
run plan --capture "$CAP" --sources "$TMP/srcschema.json"
expect_input_error "wrong sources schema" "srcschema.json" "schema"
mutate "$CAP" "$TMP/nocopies.json" 'del d["copies"]'
run plan --capture "$TMP/nocopies.json" --sources "$SOURCES"
expect_input_error "capture without copies" "nocopies.json" "copies"
mutate "$CAP" "$TMP/noparam.json" 'del d["copies"][2]["param"]'
run plan --capture "$TMP/noparam.json" --sources "$SOURCES"
expect_input_error "copy without param" "noparam.json" "copies[2]" "param"
mutate "$SOURCES" "$TMP/noaddr.json" 'del d[0]["tensors"][3]["shards"][0]["addr"]'
run plan --capture "$CAP" --sources "$TMP/noaddr.json"
expect_input_error "shard without addr" "noaddr.json" "addr"
mutate "$CAP" "$TMP/negshape.json" \
    'd["params"]["model.layers.0.mlp.up_proj.weight"]["shape"] = [-8, 2]'
run plan --capture "$TMP/negshape.json" --sources "$SOURCES"
expect_input_error "negative param shape" "negshape.json" "shape"
mutate "$CAP" "$TMP/bigshape.json" \
    'd["params"]["model.layers.0.mlp.up_proj.weight"]["shape"] = [4294967296, 4294967296]'
run plan --capture "$TMP/bigshape.json" --sources "$SOURCES"
expect_input_error "overflowing param shape" "bigshape.json" "shape"
mutate "$CAP" "$TMP/negdest.json" 'd["copies"][1]["dest_shape"] = [2, -4]'
run plan --capture "$TMP/negdest.json" --sources "$SOURCES"
expect_input_error "negative dest_shape" "negdest.json" "dest_shape"
mutate "$SOURCES" "$TMP/negfull.json" 'd[0]["tensors"][0]["full_shape"] = [-8, 4]'
run plan --capture "$CAP" --sources "$TMP/negfull.json"
expect_input_error "negative full_shape" "negfull.json" "full_shape"
mutate "$SOURCES" "$TMP/bigfull.json" \
    'd[0]["tensors"][0]["full_shape"] = [3037000500, 3037000500, 2]'
run plan --capture "$CAP" --sources "$TMP/bigfull.json"
expect_input_error "overflowing full_shape" "bigfull.json" "full_shape"
mutate "$SOURCES" "$TMP/negaddr.json" 'd[1]["tensors"][0]["shards"][0]["addr"] = -64'
run plan --capture "$CAP" --sources "$TMP/negaddr.json"
expect_input_error "negative addr" "negaddr.json" "addr"
sed 's/"addr": 2097152,/"addr": 18446744073709551616,/' "$SOURCES" >"$TMP/hugeaddr.json"
run plan --capture "$CAP" --sources "$TMP/hugeaddr.json"
expect_input_error "addr beyond 64 bits" "hugeaddr.json"
mutate "$SOURCES" "$TMP/outside.json" 'd[1]["tensors"][0]["shards"][0]["shard_offset"] = [6, 0]'
run plan --capture "$CAP" --sources "$TMP/outside.json"
expect_input_error "shard leaving its full shape" "outside.json" "q_proj"
mutate "$SOURCES" "$TMP/disagree.json" 'd[1]["tensors"][2]["full_shape"] = [4, 8]'
run plan --capture "$CAP" --sources "$TMP/disagree.json"
expect_input_error "tables disagreeing on full_shape" "v_proj" "full_shape"

# ---- the tiny example ------------------------------------------------------
plan_ok "$CAP"; expect_rc "tiny example summary" 0
tail -n 1 "$TMP/out" | grep -qx "plan complete" && ok "summary ends with 'plan complete'" \
    || bad "summary ends with 'plan complete'"
grep -q "trainer-1" "$TMP/out" && ok "summary lists the sessions used" \
    || bad "summary lists the sessions used"

plan_ok "$CAP" "$SOURCES" --json; expect_rc "tiny example --json" 0
cp "$TMP/out" "$TMP/tiny_plan.json"
py "JSON parses with the reshard.plan.v2 key set" '
assert list(plan) == ["schema", "segments", "converts", "full_pulls", "fallback",
    "fallback_reasons", "unbounded_sources", "uncovered", "stats"], list(plan)
assert plan["schema"] == "reshard.plan.v2"
assert all(set(s) == {"session", "src_addr", "param", "dst_byte", "nbytes"} for s in plan["segments"])
assert set(plan["stats"]) == {"bytes_planned", "descriptor_count", "exact_descriptor_count",
    "exact_bytes", "descriptor_savings", "extra_wire_bytes", "needed_bytes", "est_seconds",
    "exact_est_seconds", "sessions", "session_bytes"}
assert 0 < plan["stats"]["est_seconds"] <= plan["stats"]["exact_est_seconds"]'
py "tiny plan: stats agree with the segments" '
st = plan["stats"]
# qkv 64 B + up 32 B + down 32 B + norm 8 B (bf16 staging of an f32 param)
assert st["bytes_planned"] == 136 and st["exact_bytes"] == 136, st
# staged reads that save descriptors without reading more may be chosen
segs = (plan["segments"] + [s for c in plan["converts"] for s in c["segments"]]
        + [s for p in plan["full_pulls"] for s in p["segments"]])
assert st["descriptor_count"] == len(segs), (st, len(segs))
assert st["needed_bytes"] == 136 and st["extra_wire_bytes"] == 0, st
assert st["sessions"] == ["trainer-0", "trainer-1"], st["sessions"]
assert sum(st["session_bytes"].values()) == 136, st["session_bytes"]
assert sum(s["nbytes"] for s in segs) == 136
for name in st["sessions"]:
    assert st["session_bytes"][name] == sum(s["nbytes"] for s in segs if s["session"] == name)
assert all(p["staging_bytes"] == sum(s["nbytes"] for s in p["segments"]) for p in plan["full_pulls"])
assert plan["fallback"] == [] and plan["uncovered"] == []'
py "tiny plan: the bf16 norm becomes one f32 convert" '
(c,) = plan["converts"]
assert c["copy"] == 5 and c["param"] == "model.layers.0.input_layernorm.weight", c
assert (c["src_dtype"], c["dest_dtype"]) == ("bf16", "f32"), c
assert c["dest_shape"] == [4] and c["dest_stride"] == [1] and c["dest_offset"] == 0, c
assert sum(s["nbytes"] for s in c["segments"]) == 8
assert all(set(s) == {"session", "src_addr", "dst_byte", "nbytes"} for s in c["segments"])'
if python3 "$EXEC" "$TMP/tiny_plan.json" "$CAP" "$SOURCES" >"$TMP/exec" 2>&1; then
    ok "tiny plan executes byte-exact"
else bad "tiny plan executes byte-exact"; sed 's/^/       /' "$TMP/exec" | head -8; fi

# A descriptor-heavy transposed copy is staged when the bound is low (here
# its needed box: the cheapest staged read when descriptors cost nothing).
plan_ok "$CAP" "$SOURCES" --json --max-segments-per-copy 4
expect_rc "--max-segments-per-copy 4" 0
cp "$TMP/out" "$TMP/pull_plan.json"
py "low descriptor bound: down_proj is read through a staged read" '
pulls = {p["src"]: p for p in plan["full_pulls"]}
p = pulls["model.layers.0.mlp.down_proj.weight"]
assert p["copies"] == [4] and p["global_shape"] == [4, 8] and p["dtype"] == "bf16", p
assert p["box_shape"] == [4, 4] and p["kind"] == "coalesced", p
assert sum(s["nbytes"] for s in p["segments"]) == 32 and len(p["segments"]) <= 4, p
assert plan["stats"]["descriptor_count"] < plan["stats"]["exact_descriptor_count"]'
if python3 "$EXEC" "$TMP/pull_plan.json" "$CAP" "$SOURCES" >"$TMP/exec" 2>&1; then
    ok "full-pull plan executes byte-exact"
else bad "full-pull plan executes byte-exact"; sed 's/^/       /' "$TMP/exec" | head -8; fi

# Schema names: the reference reader takes v1 and v2. A v1 plan whose staged
# reads carry box_lo/box_shape is read as boxes; a v1 plan of the time
# before boxes (no box keys: whole-source pulls) at offset 0; a v2 plan
# without the box keys, a v1 entry with one of them, an unknown schema are
# refused.
# relabel NAME IN CODE: $TMP/relabelled.json = IN (as `d`) after CODE, then
# plan_exec over it; rc holds its exit status, $TMP/exec its output.
relabel() {
    python3 - "$2" "$TMP/relabelled.json" <<PYEOF
import json, sys
d = json.load(open(sys.argv[1]))
$3
json.dump(d, open(sys.argv[2], "w"))
PYEOF
    python3 "$EXEC" "$TMP/relabelled.json" "$CAP" "$SOURCES" >"$TMP/exec" 2>&1
    rc=$?
}
relabel "v1 with boxes" "$TMP/pull_plan.json" 'd["schema"] = "reshard.plan.v1"
assert any(p["box_shape"] != p["global_shape"] for p in d["full_pulls"])'
expect_rc "a v1 plan with boxes executes" 0
"$BIN" plan --capture "$CAP" --sources "$SOURCES" --json --max-segments-per-copy 1 \
    >"$TMP/whole_plan.json" 2>/dev/null
relabel "v1 before boxes" "$TMP/whole_plan.json" 'd["schema"] = "reshard.plan.v1"
assert d["full_pulls"] and all(p["kind"] == "full" for p in d["full_pulls"])
for p in d["full_pulls"]:
    del p["box_lo"], p["box_shape"]'
expect_rc "a v1 plan of whole-source pulls without box keys executes" 0
relabel "v2 without boxes" "$TMP/pull_plan.json" 'for p in d["full_pulls"]:
    del p["box_lo"], p["box_shape"]'
expect_rc "a v2 plan without box keys is refused" 1
grep -q "reshard.plan.v2 full_pulls entry of .* lacks box_lo/box_shape" "$TMP/exec" \
    && ok "the refusal names the v2 entry" || bad "the refusal names the v2 entry: $(cat "$TMP/exec")"
relabel "v1 half a box" "$TMP/pull_plan.json" 'd["schema"] = "reshard.plan.v1"
del d["full_pulls"][0]["box_lo"]'
expect_rc "a v1 entry with only box_shape is refused" 1
relabel "unknown schema" "$TMP/pull_plan.json" 'd["schema"] = "reshard.plan.v3"'
expect_rc "an unknown plan schema is refused" 1

RESHARD_MAX_SEGMENTS_PER_COPY=4 "$BIN" plan --capture "$CAP" --sources "$SOURCES" --json \
    >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "RESHARD_MAX_SEGMENTS_PER_COPY=4" 0
py "the environment variable sets the bound too" '
assert "model.layers.0.mlp.down_proj.weight" in [p["src"] for p in plan["full_pulls"]]'

# The default cost model: the tiny example's 4- and 8-byte runs cost more as
# descriptors than the gaps between them, so sources are read through
# staged reads; the plan is estimated faster than the exact one, reads the
# same needed bytes, and still lands every byte exactly.
run plan --capture "$CAP" --sources "$SOURCES" --json; expect_rc "default cost model" 0
cp "$TMP/out" "$TMP/cost_plan.json"
py "default cost model: staged reads, faster than exact, same needed bytes" '
st = plan["stats"]
assert plan["full_pulls"], plan
assert st["est_seconds"] < st["exact_est_seconds"], st
assert st["needed_bytes"] == 136 and st["bytes_planned"] >= 136, st
for p in plan["full_pulls"]:
    assert p["kind"] in ("full", "coalesced", "bound"), p
    n = 1
    for lo, ext, full in zip(p["box_lo"], p["box_shape"], p["global_shape"]):
        assert 0 <= lo and lo + ext <= full, p
        n *= ext
    assert p["staging_bytes"] == n * 2 and p["copies"], p
    assert sum(s["nbytes"] for s in p["segments"]) == p["staging_bytes"], p'
if python3 "$EXEC" "$TMP/cost_plan.json" "$CAP" "$SOURCES" >"$TMP/exec" 2>&1; then
    ok "default cost-model plan executes byte-exact"
else bad "default cost-model plan executes byte-exact"; sed 's/^/       /' "$TMP/exec" | head -8; fi
run plan --capture "$CAP" --sources "$SOURCES"; expect_rc "default cost model summary" 0
grep -q "estimated time" "$TMP/out" && grep -q "staged reads" "$TMP/out" \
    && ok "summary shows the estimate and the staged reads" \
    || bad "summary shows the estimate and the staged reads"
run plan --capture "$CAP" --sources "$SOURCES" --json --nic-gbps 100 --descriptor-ns 1e-3
py "near-free descriptors: no byte read beyond the needed ones" '
assert plan["stats"]["bytes_planned"] == 136, plan["stats"]'

# A full disk is an error, not a silent truncation.
if [ -w /dev/full ]; then
    for mode in --json ""; do
        "$BIN" plan --capture "$CAP" --sources "$SOURCES" $mode >/dev/full 2>"$TMP/err"; rc=$?
        : >"$TMP/out"
        expect_input_error "writing to a full disk ${mode:-summary}" "writing"
    done
fi

# ---- --only ----------------------------------------------------------------
plan_ok "$CAP" "$SOURCES" --json --only '*.qkv_proj.*'
expect_rc "--only qkv" 0
py "--only keeps just the matching param" '
assert plan["segments"], "no segments"
assert {s["param"] for s in plan["segments"]} == {"model.layers.0.self_attn.qkv_proj.weight"}
assert plan["converts"] == [] and plan["full_pulls"] == []
assert plan["stats"]["bytes_planned"] == 64, plan["stats"]'
plan_ok "$CAP" "$SOURCES" --json --only '*qkv*' --only '*layernorm*'
expect_rc "two --only patterns" 0
py "two --only patterns union their matches" '
assert {s["param"] for s in plan["segments"]} == {"model.layers.0.self_attn.qkv_proj.weight"}
assert [c["param"] for c in plan["converts"]] == ["model.layers.0.input_layernorm.weight"]
assert plan["stats"]["bytes_planned"] == 72, plan["stats"]'
# A pattern that selects nothing is a typo, not an empty success; one such
# pattern among good ones is still refused, by name.
run plan --capture "$CAP" --sources "$SOURCES" --json --only 'no.such.param'
expect_input_error "--only matching nothing" "--only pattern 'no.such.param'" \
    "matches no parameter"
run plan --capture "$CAP" --sources "$SOURCES" --only '*qkv_proj*' --only 'typo*'
expect_input_error "one of two --only patterns matching nothing" "'typo*'" \
    "matches no parameter"
run run --capture "$CAP" --sources "$SOURCES" --data "$TMP" --only 'nope'
expect_input_error "run --only matching nothing" "'nope'" "matches no parameter"

# RESHARD_* values that do not parse are errors naming the variable, never
# a silent default.
for v in abc 0 -3 4x 1.5 99999999999999999999999; do
    RESHARD_MAX_SEGMENTS_PER_COPY=$v "$BIN" plan --capture "$CAP" \
        --sources "$SOURCES" >"$TMP/out" 2>"$TMP/err"; rc=$?
    expect_input_error "RESHARD_MAX_SEGMENTS_PER_COPY=$v" \
        "RESHARD_MAX_SEGMENTS_PER_COPY='$v'" "not a whole number"
done
RESHARD_JSON_MAX_BYTES=lots "$BIN" plan --capture "$CAP" --sources "$SOURCES" \
    >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_input_error "RESHARD_JSON_MAX_BYTES=lots" "RESHARD_JSON_MAX_BYTES='lots'"
RESHARD_MAX_SEGMENTS_PER_COPY= "$BIN" plan --capture "$CAP" --sources "$SOURCES" \
    >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "an empty RESHARD_MAX_SEGMENTS_PER_COPY means unset" 0

# ---- incomplete plans ------------------------------------------------------
mutate "$CAP" "$TMP/unpublished.json" '
d["params"]["model.layers.0.mlp.gate_proj.weight"] = {"shape": [8, 2], "dtype": "bf16"}
d["copies"].append({"src": "model.layers.0.mlp.gate_proj.weight", "ops": [["narrow", 1, 0, 2]],
    "param": "model.layers.0.mlp.gate_proj.weight", "dest_offset": 0, "dest_shape": [8, 2],
    "dest_stride": [2, 1], "dest_dtype": "bf16"})'
plan_ok "$TMP/unpublished.json" "$SOURCES" --json
expect_rc "capture needing an unpublished tensor" 1
if [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "incomplete plan: 1 source(s) in fallback" "$TMP/err" \
    && grep -q "gate_proj" "$TMP/err"; then
    ok "--json, incomplete: one line on stderr says why"
else bad "--json, incomplete: one line on stderr says why"; fi
py "unpublished tensor: on fallback, the rest still planned" '
assert plan["fallback"] == ["model.layers.0.mlp.gate_proj.weight"], plan["fallback"]
assert plan["fallback_reasons"]["model.layers.0.mlp.gate_proj.weight"]
assert plan["stats"]["bytes_planned"] == 136, plan["stats"]'
plan_ok "$TMP/unpublished.json"
expect_rc "unpublished tensor, summary" 1
grep -q "INCOMPLETE" "$TMP/out" && ok "summary says INCOMPLETE" || bad "summary says INCOMPLETE"
grep -q "gate_proj" "$TMP/out" && ok "summary names the fallback source" \
    || bad "summary names the fallback source"

mutate "$SOURCES" "$TMP/gap.json" '
d[1]["tensors"] = [t for t in d[1]["tensors"] if t["name"] != "model.layers.0.mlp.up_proj.weight"]'
plan_ok "$CAP" "$TMP/gap.json" --json
expect_rc "a gap in the published shards" 1
cp "$TMP/out" "$TMP/gap_plan.json"
py "gap: the copy is uncovered with its missing element count" '
assert plan["uncovered"] == [{"copy": 3, "src": "model.layers.0.mlp.up_proj.weight",
    "param": "model.layers.0.mlp.up_proj.weight", "missing_elements": 8}], plan["uncovered"]
assert plan["fallback"] == []'
plan_ok "$CAP" "$TMP/gap.json"
expect_rc "gap, summary" 1
grep -q "uncovered copies *1 (8 elements missing)" "$TMP/out" && ok "summary counts missing elements" \
    || bad "summary counts missing elements"

# Names needing JSON escapes survive the round trip; equal reasons group.
mutate "$CAP" "$TMP/weird.json" '
d["unsupported"] = {"rotary \"inv_freq\"\\\t\u0001": "computed at load time",
                    "model.embed.scale": "computed at load time",
                    "lm_head.bias": "materializing copy"}'
plan_ok "$TMP/weird.json" "$SOURCES" --json
expect_rc "unsupported sources" 1
py "escaped names parse back exactly" '
assert "rotary \"inv_freq\"\\\t\u0001" in plan["fallback"], plan["fallback"]
assert plan["fallback_reasons"]["lm_head.bias"] == "materializing copy"
assert plan["stats"]["bytes_planned"] == 136'
plan_ok "$TMP/weird.json"
expect_rc "unsupported sources, summary" 1
grep -qE "^ +2 x computed at load time" "$TMP/out" && ok "summary groups fallback reasons" \
    || bad "summary groups fallback reasons"
grep -qF 'inv_freq"\\x09\x01' "$TMP/out" && ok "summary shows control bytes as \\xNN" \
    || bad "summary shows control bytes as \\xNN"

# ---- a model mismatch: the capture assumes another shape or dtype ----------
UP=model.layers.0.mlp.up_proj.weight
mutate "$CAP" "$TMP/mismatch.json" '
d["sources"]["model.layers.0.mlp.up_proj.weight"]["shape"] = [16, 4]'
plan_ok "$TMP/mismatch.json" "$SOURCES" --json
expect_rc "capture assuming another shape" 1
py "shape mismatch: refused with both shapes, the rest planned" '
up = "model.layers.0.mlp.up_proj.weight"
assert plan["fallback"] == [up], plan["fallback"]
assert plan["fallback_reasons"][up] == ("tensor \x27" + up + "\x27: capture assumes "
    "shape [16, 4] bf16, published [8, 4] bf16"), plan["fallback_reasons"]
assert all(s["param"] != up for s in plan["segments"]), plan["segments"]
assert plan["stats"]["bytes_planned"] == 136 - 32, plan["stats"]'
plan_ok "$TMP/mismatch.json"
expect_rc "shape mismatch, summary" 1
grep -qF "of which 1 model mismatch" "$TMP/out" && ok "summary counts the mismatch" \
    || bad "summary counts the mismatch"
grep -qF "tensor '$UP': capture assumes shape [16, 4] bf16, published [8, 4] bf16" "$TMP/out" \
    && ok "summary names the tensor and both shapes" \
    || bad "summary names the tensor and both shapes"
grep -q "plan INCOMPLETE" "$TMP/out" && ok "shape mismatch: plan INCOMPLETE" \
    || bad "shape mismatch: plan INCOMPLETE"

mutate "$CAP" "$TMP/mismatch_dtype.json" '
d["sources"]["model.layers.0.self_attn.q_proj.weight"]["dtype"] = "torch.float16"'
plan_ok "$TMP/mismatch_dtype.json" "$SOURCES" --json
expect_rc "capture assuming another dtype" 1
py "dtype mismatch: refused naming both dtypes" '
q = "model.layers.0.self_attn.q_proj.weight"
assert plan["fallback"] == [q], plan["fallback"]
assert plan["fallback_reasons"][q] == ("tensor \x27" + q + "\x27: capture assumes "
    "shape [8, 4] f16, published [8, 4] bf16"), plan["fallback_reasons"]'

mutate "$CAP" "$TMP/undeclared.json" 'del d["sources"]'
plan_ok "$TMP/undeclared.json" "$SOURCES" --json
expect_rc "capture without sources (older format)" 0
py "capture without sources plans as before" '
assert plan["fallback"] == [] and plan["stats"]["bytes_planned"] == 136, plan["stats"]'

mutate "$CAP" "$TMP/unused_source.json" '
d["sources"]["lm_head.weight"] = {"shape": [1000, 64], "dtype": "bf16"}'
plan_ok "$TMP/unused_source.json" "$SOURCES" --json
expect_rc "a declared source no copy reads" 0

mutate "$CAP" "$TMP/badsources.json" 'd["sources"] = [1, 2]'
run plan --capture "$TMP/badsources.json" --sources "$SOURCES"
expect_input_error "sources not an object" "badsources.json" "sources" "expected an object"
mutate "$CAP" "$TMP/negsource.json" '
d["sources"]["model.layers.0.mlp.up_proj.weight"]["shape"] = [8, -4]'
run plan --capture "$TMP/negsource.json" --sources "$SOURCES"
expect_input_error "negative source dim" "negsource.json" \
    'sources["model.layers.0.mlp.up_proj.weight"].shape[1]'

echo "# $checks checks, $failures failed"
[ "$failures" -eq 0 ]
