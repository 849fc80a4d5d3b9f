#!/usr/bin/env bash
# `reshard pull --dry-run`: tiny-llama published by `reshard publish`
# (megatron:tp=2, two ranks, cma) into a file: directory. For each inference
# rank of vllm:tp=2 the dry run's bytes, descriptors and per-session bytes
# equal what `reshard plan --salt R` says for the same capture (from
# `reshard simulate --emit`) and the directory's own tables; the dry run
# leaves the directory as it found it (no lease or lease epoch, which a real
# pull leaves); with its publishers
# killed a dry run still succeeds while a real pull fails (so it read no
# byte); a mismatched model config exits 1; bad usage exits 2.
# usage: bash test_dry_run_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_dry_run_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_dry_run_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
. "$(dirname "$0")/lib.sh"

D="$TMP/dir"
mkdir -p "$D" # receivers never create a file: directory
for r in 0 1; do
    "$BIN" publish --directory "file:$D" --model m --version 1 --rank "$r" \
        --world 2 --layout megatron:tp=2 --model-config "$TINY" \
        --backend cma --timeout 60 >"$TMP/pub$r.out" 2>"$TMP/pub$r.err" &
    pids+=("$!")
done
pub_pids=("${pids[@]}")

# dry RANK [options...]
dry() {
    local rank=$1
    shift
    "$BIN" pull --directory "file:$D" --model m --version 1 --rank "$rank" \
        --layout vllm:tp=2 --model-config "$TINY" --backend cma --timeout 20 \
        --dry-run "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

for _ in $(seq 200); do [ -e "$D/m/1/READY" ] && break; sleep 0.1; done
if [ -e "$D/m/1/READY" ]; then ok "publishers: version 1 READY"
else bad "publishers: version 1 never READY"; fi

"$BIN" simulate --model "$TINY" --train megatron:tp=2 --infer vllm:tp=2 \
    --emit "$TMP/sim" >/dev/null 2>"$TMP/err"
rc=$?
expect_rc "simulate --emit" 0

# compare DRY.json PLAN.json: the dry run's figures are the plan's.
compare() {
    python3 - "$1" "$2" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))
s = p["stats"]
want = {"bytes": s["bytes_planned"], "descriptors": s["descriptor_count"],
        "sessions": len(s["session_bytes"]), "session_bytes": s["session_bytes"],
        "complete": True, "dry_run": True, "version": 1, "tables": 2}
bad = [f"{k}: dry run {d.get(k)!r}, plan {v!r}" for k, v in want.items()
       if d.get(k) != v]
if d["bytes"] <= 0 or sum(d["session_bytes"].values()) != d["bytes"]:
    bad.append(f"bytes {d['bytes']} vs per-session {d['session_bytes']}")
print("; ".join(bad))
sys.exit(1 if bad else 0)
PYEOF
}

for r in 0 1; do
    (cd "$D/m/1" && ls -A | sort | grep -v -e '^hb-' -e '^\.tmp-[0-9]*-[0-9]*-hb-') >"$TMP/before"
    dry "$r" --json
    expect_rc "dry run rank $r --json" 0
    cp "$TMP/out" "$TMP/dry$r.json"
    expect_in "dry run rank $r: a fresh receiver parses both tables" \
        "$TMP/out" '"tables_parsed":2,"tables_reused":0,"table_bytes_read":'
    (cd "$D/m/1" && ls -A | sort | grep -v -e '^hb-' -e '^\.tmp-[0-9]*-[0-9]*-hb-') >"$TMP/after"
    if cmp -s "$TMP/before" "$TMP/after"; then
        ok "dry run rank $r: the directory is unchanged (no lease)"
    else bad "dry run rank $r: the directory changed: $(diff "$TMP/before" "$TMP/after" | tr '\n' ' ')"; fi
    expect_not_in "dry run rank $r" "$TMP/after" "lease-"
    expect_not_in "dry run rank $r" "$TMP/after" "epoch" # left by any lease
    # a publisher's entry is split (docs/formats.md, "Split entries"): the
    # table is its geometry document with the entry's insertions spliced in
    for s in 0 1; do
        python3 - "$D/m/1/slot-$s@trainer-$s" "$D/m/geometry/slot-$s@trainer-$s" \
            >"$TMP/table$s.json" <<'PYEOF'
import sys
lines = open(sys.argv[1], 'rb').read().split(b'\n')
assert lines[0].endswith(b' split'), lines[0]
doc = open(sys.argv[2], 'rb').read().split(b'\n', 1)[1]
out, at = [], 0
for line in lines[2:]:
    if line:
        off, text = line.split(b' ', 1)
        out += [doc[at:int(off)], text]
        at = int(off)
sys.stdout.buffer.write(b''.join(out) + doc[at:])
PYEOF
    done
    "$BIN" plan --capture "$TMP/sim/captures/$r.json" \
        --sources "$TMP/table0.json" --sources "$TMP/table1.json" \
        --salt "$r" --json >"$TMP/plan$r.json" 2>"$TMP/err"
    rc=$?
    expect_rc "plan rank $r" 0
    if msg=$(compare "$TMP/dry$r.json" "$TMP/plan$r.json"); then
        ok "dry run rank $r: bytes, descriptors and sessions equal the plan's"
    else bad "dry run rank $r: $msg"; fi
done

dry 0
expect_rc "dry run rank 0, text" 0
bytes=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes"])' "$TMP/dry0.json")
expect_in "dry run rank 0, text" "$TMP/out" "rank 0 version 1: would read" \
    "($bytes bytes)" "from 2 sessions" "plan complete" "session trainer-0:" \
    "session trainer-1:"

# ---- a mismatched model: the plan is incomplete -----------------------------

python3 - "$TINY" "$TMP/tiny-llama-2x.json" <<'PYEOF'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["intermediate_size"] *= 2
json.dump(cfg, open(sys.argv[2], "w"))
PYEOF
"$BIN" pull --directory "file:$D" --model m --version 1 --rank 0 \
    --layout vllm:tp=2 --model-config "$TMP/tiny-llama-2x.json" \
    --backend cma --timeout 20 --dry-run --json >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "dry run of a mismatched model" 1
expect_in "dry run of a mismatched model" "$TMP/out" '"complete":false'
expect_in "dry run of a mismatched model" "$TMP/err" "incomplete"

# ---- usage -------------------------------------------------------------------

dry 0 --check
expect_rc "dry run with --check" 2
expect_in "dry run with --check" "$TMP/err" "--dry-run"
"$BIN" pull --directory "file:$TMP/nowhere" --model m --version 1 --rank 0 \
    --layout vllm:tp=2 --model-config "$TINY" --backend cma --dry-run \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "dry run of a directory that does not exist" 2

# ---- no byte read: the publishers are gone ------------------------------------

kill -KILL "${pub_pids[@]}"
wait "${pub_pids[@]}" 2>/dev/null
dry 1 --json --stale-after 0
expect_rc "dry run with the publishers killed" 0
if msg=$(compare "$TMP/out" "$TMP/plan1.json"); then
    ok "dry run with the publishers killed: the same figures"
else bad "dry run with the publishers killed: $msg"; fi
"$BIN" pull --directory "file:$D" --model m --version 1 --rank 1 \
    --layout vllm:tp=2 --model-config "$TINY" --backend cma --timeout 20 \
    --stale-after 0 >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "a real pull with the publishers killed" 1
# The control for the lease checks above: a pull's lease leaves its epoch.
if [ -e "$D/m/1/epoch" ]; then ok "a real pull took a lease (epoch file)"
else bad "a real pull left no epoch file: the lease checks prove nothing"; fi

cli_done
