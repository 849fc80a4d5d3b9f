#!/usr/bin/env bash
# Cut-aligned plans read what they need: every layout pair the layout refit
# test runs (read from tests/integration/test_layout_refit.c, so the two
# stay one list) is simulated with --cut-aligned in bf16 and in FP8 (the
# same config with an FP8 quantization_config of 8 x 8 blocks, which every
# tensor-parallel slice of these models falls on), and every inference
# rank's plan must read at most 1.01x the bytes it needs, cover every rank
# (exit 0), and, in FP8, take the publisher path for some copies wherever
# the trainer is megatron (so the bound is about the FP8 copies a
# cut-aligned publisher serves; fsdp's flat shards may cut every block).
# usage: bash test_simulate_bound_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_simulate_bound_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_simulate_bound_cli.sh <reshard-binary> <source-dir>}
. "$(dirname "$0")/lib.sh"

if python3 - "$BIN" "$SRC" "$TMP" >"$TMP/pyout" 2>&1 <<'PYEOF'
import json, os, re, subprocess, sys
BIN, SRC, TMP = sys.argv[1:4]
BOUND = 1.01
text = open(os.path.join(SRC, "tests/integration/test_layout_refit.c")).read()
pairs = []  # (config file, train, infer), in the test's order
for body in re.split(r"\nstatic void ", text):
    m = re.search(r'load_example\("([^"]+)"', body)
    if m is None:
        continue
    for t, i in re.findall(r'check_pair\(m, "([^"]+)", "([^"]+)"\)', body):
        pairs.append((m.group(1), t, i))
assert len(pairs) >= 19, f"only {len(pairs)} layout pairs found"
bad, checked = [], 0
for cfg_name, train, infer in pairs:
    cfg = json.load(open(os.path.join(SRC, "examples/models", cfg_name)))
    for fp8 in (False, True):
        c = dict(cfg)
        c.pop("quantization_config", None)
        if fp8:
            c["quantization_config"] = {
                "activation_scheme": "dynamic", "fmt": "e4m3",
                "quant_method": "fp8", "weight_block_size": [8, 8]}
        path = os.path.join(TMP, ("fp8-" if fp8 else "bf16-") + cfg_name)
        json.dump(c, open(path, "w"))
        what = f"{cfg_name} {'FP8' if fp8 else 'bf16'} {train} -> {infer}"
        r = subprocess.run([BIN, "simulate", "--model", path, "--train", train,
                            "--infer", infer, "--cut-aligned", "--json",
                            "--no-progress"], capture_output=True, text=True)
        if r.returncode != 0:
            bad.append(f"{what}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
            continue
        rep = json.loads(r.stdout)
        if fp8:
            pub = (rep.get("fp8") or {}).get("publisher_quant")
            # fsdp's flat shards may cut every block (fsdp:3 does): those
            # copies are quantized by their receivers, within the bound too
            if (not pub or pub["publisher_copies"] == 0) and \
                    not train.startswith("fsdp:"):
                bad.append(f"{what}: no copy on the publisher path")
        for x in rep["receivers"]:
            checked += 1
            if x["needed_bytes"] <= 0 or x["bytes"] > BOUND * x["needed_bytes"]:
                bad.append(f"{what}: rank {x['rank']} reads {x['bytes']} bytes "
                           f"for {x['needed_bytes']} needed "
                           f"({x['bytes'] / max(x['needed_bytes'], 1):.3f}x)")
assert not bad, "\n".join(bad)
print(f"{len(pairs)} pairs, bf16 and FP8: {checked} ranks within {BOUND}x")
PYEOF
then
    ok "every layout pair, bf16 and FP8, within 1.01x of needed bytes ($(tail -1 "$TMP/pyout"))"
else
    bad "cut-aligned bound: $(cat "$TMP/pyout")"
fi

echo "$checks checks, $failures failed"
[ "$failures" -eq 0 ]
