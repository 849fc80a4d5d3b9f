#!/usr/bin/env bash
# A mismatched model never installs: tiny-llama published by `reshard publish`
# (megatron:tp=2, two ranks, cma) and pulled by `reshard pull` with a config
# whose intermediate_size is doubled. Every rank's pull exits 1 naming the
# tensor and both shapes, reads no byte and installs nothing; the same
# version then pulls byte-exact with the right config (so the publishers were
# healthy), and the publishers exit 0 once it is released.
# usage: bash test_model_mismatch_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_model_mismatch_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_model_mismatch_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
. "$(dirname "$0")/lib.sh"

python3 - "$TINY" "$TMP/tiny-llama-2x.json" <<'PYEOF'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["intermediate_size"] *= 2
json.dump(cfg, open(sys.argv[2], "w"))
PYEOF

# Receivers never create a file: directory; the publishers may not have
# made it yet when the first pull starts.
mkdir -p "$TMP/dir"
D="file:$TMP/dir"
for r in 0 1; do
    "$BIN" publish --directory "$D" --model m --version 1 --rank "$r" \
        --world 2 --layout megatron:tp=2 --model-config "$TINY" \
        --backend cma --timeout 60 >"$TMP/pub$r.out" 2>"$TMP/pub$r.err" &
    pids+=("$!")
done

pull() {
    "$BIN" pull --directory "$D" --model m --version 1 --layout vllm:tp=2 \
        --backend cma --timeout 20 "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# rank 0's narrows fit the published tensors: without the declared shapes
# this pull installed wrong bytes with exit 0
GATE=model.layers.0.mlp.gate_proj.weight
for r in 0 1; do
    pull --rank "$r" --model-config "$TMP/tiny-llama-2x.json" --verify --json
    expect_rc "rank $r, intermediate_size doubled" 1
    expect_in "rank $r, intermediate_size doubled" "$TMP/err" "model mismatch" \
        "tensor '$GATE': capture assumes shape [256, 64] bf16, published [128, 64] bf16"
    if python3 - "$TMP/out" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, sys
rec = json.loads(open(sys.argv[1]).read())
assert rec["ok"] is False, rec
st = rec["stage"]
assert st["ok"] is False and st["failure"] == "mismatch", st
assert st["bytes"] == 0 and st["descriptors"] == 0, st
assert "wire" not in st["stages_s"] and "install" not in st["stages_s"], st
assert "model mismatch" in rec["error"], rec["error"]
PYEOF
    then ok "rank $r: no byte read, nothing installed (stage record)"
    else bad "rank $r: stage record"; sed 's/^/       /' "$TMP/pyout" | tail -5; fi
done

pull --rank 0 --model-config "$TMP/tiny-llama-2x.json"
expect_rc "doubled, without --json" 1
expect_in "doubled, without --json" "$TMP/err" "reshard pull: rank 0 version 1" \
    "[256, 64] bf16" "[128, 64] bf16"
if [ -s "$TMP/out" ]; then bad "doubled, without --json: printed a pull record"
else ok "doubled, without --json: no pull record printed"; fi

# The same publishers, the right config: byte-exact, then released.
pull --rank 0 --model-config "$TINY" --check --verify
expect_rc "rank 0, the published config" 0
expect_in "rank 0, the published config" "$TMP/out" "byte-exact"
pull --rank 1 --model-config "$TINY" --check --verify --release
expect_rc "rank 1, the published config, --release" 0
for r in 0 1; do
    wait "${pids[$r]}"; rc=$?
    expect_rc "publisher $r after release" 0
done
pids=()

cli_done
