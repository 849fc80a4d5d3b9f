#!/usr/bin/env bash
# Memory that fits, on the command line:
# - `reshard run` under a small --staging-budget runs its staged boxes in
#   rounds and installs the same bytes as an unbounded run (both checked
#   against tests/cli/run_data.py's ground truth), holding no more staging
#   than the budget (the stage record says how much, and in how many rounds);
# - `reshard pull --dry-run` of a model whose parameters exceed the process's
#   address-space limit (ulimit -v, 256 MiB against 0.5 GiB of parameters a
#   rank) plans and reports, its figures equal to `reshard simulate`'s for
#   the same tables; the directory holds only tables (no publisher, no shard
#   byte anywhere);
# - a real pull that cannot fit is refused before it allocates, naming what
#   it needs and what there is (RLIMIT_AS, or RESHARD_MEMORY_AVAILABLE for
#   exact figures), and takes no lease;
# - a box above an explicit budget, and bad budgets, are refused.
# usage: bash test_memory_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_memory_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_memory_cli.sh <reshard-binary> <source-dir>}
RD="$SRC/tests/cli/run_data.py"
TINY="$SRC/examples/models/tiny-llama.json"
LIB="$(dirname "$BIN")/libreshard.so"
. "$(dirname "$0")/lib.sh"

# A sanitized build reserves terabytes of shadow address space, so an
# address-space limit cannot apply to it: those checks are left to the
# plain build. Its library needs its runtime preloaded into python.
SAN_RT=$(ldd "$LIB" 2>/dev/null | awk '/libasan|libtsan|clang_rt/ {print $3; exit}')

# py NAME FILE CODE: a python check over a JSON file (as `d`).
py() {
    local name=$1 file=$2 code=$3
    if python3 - "$file" "$TMP/sim.json" >"$TMP/pyout" 2>&1 <<PYEOF
import json, os, sys
d = json.load(open(sys.argv[1]))
sim = json.load(open(sys.argv[2])) if os.path.exists(sys.argv[2]) else None
$code
PYEOF
    then ok "$name"; else bad "$name"; sed 's/^/       /' "$TMP/pyout" | tail -5; fi
}

# ---- reshard run in rounds: byte-exact, staging under the budget ------------

"$BIN" simulate --model "$TINY" --train fsdp:2 --infer vllm:tp=2 \
    --emit "$TMP/tiny" --json --no-progress >"$TMP/tiny.json" 2>"$TMP/err"
rc=$?
expect_rc "simulate --emit tiny-llama fsdp:2 -> vllm:tp=2" 0
for s in 0 1; do
    python3 "$RD" make "$TMP/tiny/sources/$s.json" "$TMP/data" \
        --digests "$TMP/src$s.json" || bad "run_data.py make $s"
done
for t in local "local-mt --threads 3"; do
    for budget in unbounded 16KiB 64KiB; do
        name="run $t --staging-budget $budget"
        out="$TMP/out-${t%% *}-$budget"
        # shellcheck disable=SC2086 # $t is the transport and its options
        "$BIN" run --capture "$TMP/tiny/captures/0.json" \
            --sources "$TMP/src0.json" --sources "$TMP/src1.json" \
            --data "$TMP/data" --transport $t --verify --json \
            --staging-budget "$budget" --out "$out" >"$TMP/out" 2>"$TMP/err"
        rc=$?
        expect_rc "$name" 0
        if python3 "$RD" expect "$TMP/tiny/captures/0.json" "$TMP/src0.json" \
            "$TMP/src1.json" "$out" >"$TMP/pyout" 2>&1; then
            ok "$name: byte-exact"
        else bad "$name: not byte-exact"; tail -3 "$TMP/pyout"; fi
        case $budget in
            unbounded) limit=0 ;; 16KiB) limit=16384 ;; 64KiB) limit=65536 ;;
        esac
        py "$name: staging under the budget" "$TMP/out" "
st = d['stage']
limit = $limit
assert st['ok'], st
held, every, rounds = (st['staging_bytes'], st['staging_unbounded_bytes'],
                       st['staging_rounds'])
assert every > 65536, f'the plan stages only {every} bytes'
if limit:
    assert held <= limit and rounds > 1, (held, rounds)
else:
    assert held == every and rounds == 1, (held, every, rounds)
assert st['shards_verified'] > 0"
    done
done
if diff -r "$TMP/out-local-unbounded" "$TMP/out-local-16KiB" >/dev/null; then
    ok "run: 16 KiB rounds install the unbounded run's bytes"
else bad "run: 16 KiB rounds differ from the unbounded run"; fi

"$BIN" run --capture "$TMP/tiny/captures/0.json" --sources "$TMP/src0.json" \
    --sources "$TMP/src1.json" --data "$TMP/data" --staging-budget 4KiB \
    --out "$TMP/out-small" >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "run: a box above the budget" 2
expect_in "run: a box above the budget" "$TMP/err" \
    "staging budget of 4.00 KiB (4096 bytes) is below the staged read of copy" \
    "raise the staging budget to at least"
if [ ! -e "$TMP/out-small" ]; then ok "run: a box above the budget: no --out"
else bad "run: a box above the budget wrote --out"; fi
for v in 0 -1 12XB ""; do
    "$BIN" run --capture "$TMP/tiny/captures/0.json" --sources "$TMP/src0.json" \
        --data "$TMP/data" --staging-budget "$v" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_rc "run --staging-budget '$v'" 2
    expect_in "run --staging-budget '$v'" "$TMP/err" "--staging-budget must be"
done

# ---- a dry run of parameters the process could not hold ---------------------

python3 - "$TINY" "$TMP/big.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=2048, intermediate_size=8192, num_hidden_layers=8,
         num_attention_heads=16, num_key_value_heads=4, vocab_size=32000)
json.dump(c, open(sys.argv[2], "w"))
PYEOF
"$BIN" simulate --model "$TMP/big.json" --train fsdp:2 --infer vllm:tp=2 \
    --emit "$TMP/big" --json --no-progress >"$TMP/sim.json" 2>"$TMP/err"
rc=$?
expect_rc "simulate --emit of a 1 GiB model" 0
"$BIN" simulate --model "$TMP/big.json" --train fsdp:2 --infer vllm:tp=2 \
    --json --no-progress --staging-budget 64MiB >"$TMP/sim64.json" 2>"$TMP/err"
D="$TMP/dir"
mkdir -p "$D"
if LD_PRELOAD="$SAN_RT" ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 \
    python3 "$SRC/tests/cli/publish_tables.py" "$LIB" "file:$D" m 1 \
    "$TMP/big/sources/0.json" "$TMP/big/sources/1.json" 2>"$TMP/err"; then
    ok "tables of version 1 published (no publisher, no shard bytes)"
else bad "publishing the tables"; fi

# pull RANK [options...] under a 256 MiB address-space limit (none for a
# sanitized build)
LIMIT_KIB=262144
pull() {
    local rank=$1
    shift
    ([ -n "$SAN_RT" ] || ulimit -v $LIMIT_KIB
     exec "$BIN" pull --directory "file:$D" --model m --version 1 \
        --rank "$rank" --layout vllm:tp=2 --model-config "$TMP/big.json" \
        --backend cma --timeout 20 --stale-after 0 --no-announce "$@") \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

for r in 0 1; do
    pull "$r" --dry-run --json
    expect_rc "dry run rank $r under ulimit -v $LIMIT_KIB" 0
    py "dry run rank $r: what it reads and holds, as simulate says" "$TMP/out" "
x = sim['receivers'][$r]
assert x['param_bytes'] > 2 * $LIMIT_KIB * 1024, x['param_bytes']
want = {'bytes': x['bytes'], 'descriptors': x['descriptors'],
        'param_bytes': x['param_bytes'], 'shadow_bytes': x['param_bytes'],
        'staging_bytes': x['staging_peak_bytes'],
        'staging_rounds': x['staging_rounds']}
bad = {k: (d.get(k), v) for k, v in want.items() if d.get(k) != v}
assert not bad, bad
assert d['staging_unbounded_bytes'] >= x['staging_bytes'] > 0"
done
pull 0 --dry-run --json --staging-budget 64MiB
expect_rc "dry run --staging-budget 64MiB" 0
py "dry run --staging-budget 64MiB: simulate's staging under that budget" \
    "$TMP/out" "
x = json.load(open('$TMP/sim64.json'))['receivers'][0]
assert d['staging_bytes'] == x['staging_peak_bytes'] <= 64 << 20, (d, x)
assert d['staging_rounds'] == x['staging_rounds'] > 1, (d, x)"
pull 0 --dry-run
expect_rc "dry run, text" 0
expect_in "dry run, text" "$TMP/out" "would hold: parameters" "shadows" \
    "round(s)"
pull 0 --dry-run --staging-budget 4KiB
expect_rc "dry run: a box above the budget" 2
expect_in "dry run: a box above the budget" "$TMP/err" \
    "staging budget of 4.00 KiB (4096 bytes) is below"

# ---- a real pull that cannot fit: refused before allocating -----------------

if [ -z "$SAN_RT" ]; then
    pull 0
    expect_rc "pull under ulimit -v $LIMIT_KIB" 1
    expect_in "pull under ulimit -v $LIMIT_KIB" "$TMP/err" \
        "the parameters (" "and their shadows need" "RLIMIT_AS): nothing was allocated"
else ok "a sanitized build: the address-space limit checks are the plain build's"; fi
need=$(python3 -c 'import json,sys; print(2 * json.load(open(sys.argv[1]))["receivers"][0]["param_bytes"])' "$TMP/sim.json")
RESHARD_MEMORY_AVAILABLE=100MiB pull 0
expect_rc "pull with RESHARD_MEMORY_AVAILABLE=100MiB" 1
expect_in "pull with RESHARD_MEMORY_AVAILABLE=100MiB" "$TMP/err" \
    "($need bytes), and there is 100 MiB (104857600 bytes, RESHARD_MEMORY_AVAILABLE)"
RESHARD_MEMORY_AVAILABLE=plenty pull 0
expect_rc "pull with RESHARD_MEMORY_AVAILABLE=plenty" 2
expect_in "pull with RESHARD_MEMORY_AVAILABLE=plenty" "$TMP/err" \
    "RESHARD_MEMORY_AVAILABLE='plenty' is not a size"
if [ ! -e "$D/m/1/epoch" ] && ! ls "$D/m/1" | grep -q lease; then
    ok "refused pulls took no lease"
else bad "a refused pull left a lease: $(ls "$D/m/1" | grep -e lease -e epoch)"; fi

cli_done
