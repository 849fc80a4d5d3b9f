#!/usr/bin/env bash
# CLI tests of digest verification and of how a pull from a dead publisher
# ends: `reshard pull` verifies by default (no flag) and `--no-verify`
# turns it off; tables published without digests (`publish --no-digests`)
# fail a verifying pull and `run --verify`, naming the tensor and shard,
# and pass with verification off (byte-exact under --check); a pull whose
# publishers were killed over UCX tcp fails with one line naming the
# publisher and its slot, and no line of UCX's own.
# usage: bash test_verify_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_verify_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_verify_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
. "$(dirname "$0")/lib.sh"

# pub DIR VERSION RANK BACKEND [publish options...]
pub() {
    local dir=$1 version=$2 rank=$3 backend=$4
    shift 4
    mkdir -p "$dir" # receivers never create it; a pull may start first
    "$BIN" publish --directory "file:$dir" --model m --version "$version" \
        --rank "$rank" --world 2 --layout megatron:tp=2 --model-config "$TINY" \
        --backend "$backend" --timeout 60 "$@" \
        >"$TMP/pub$rank.out" 2>"$TMP/pub$rank.err" &
    pids+=("$!")
}
# pull DIR BACKEND [pull options...]
pull() {
    local dir=$1 backend=$2
    shift 2
    "$BIN" pull --directory "file:$dir" --model m --layout vllm:tp=2 \
        --model-config "$TINY" --backend "$backend" --timeout 20 "$@" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

# ---- verification is on by default ---------------------------------------

D="$TMP/digests"
pub "$D" 1 0 cma
pub "$D" 1 1 cma
pull "$D" cma --version 1 --rank 0
expect_rc "pull, no flags" 0
expect_in "pull, no flags" "$TMP/out" "shards verified"
if grep -qE ', [1-9][0-9]* shards verified' "$TMP/out"; then
    ok "pull, no flags: shards were verified"
else bad "pull, no flags: no shard verified"; fi
pull "$D" cma --version 1 --rank 0 --json
if grep -qE '"shards_verified":[1-9]' "$TMP/out"; then
    ok "pull --json, no flags: shards were verified"
else bad "pull --json, no flags: no shard verified"; fi
pull "$D" cma --version 1 --rank 1 --no-verify --json --check
expect_rc "pull --no-verify" 0
expect_in "pull --no-verify" "$TMP/out" '"check":true' '"shards_verified":0'

# ---- the keys of `pull --json`, in order (a contract: docs/formats.md) -----

# json_keys FILE: the keys of every object on FILE's first line, depth
# first, one "path: key key ..." line per object.
json_keys() {
    python3 -c '
import json, sys
def walk(path, v):
    if isinstance(v, dict):
        print((path + ": " + " ".join(v)).rstrip())
        for k, x in v.items():
            walk(path + "." + k, x)
walk("", json.loads(open(sys.argv[1]).readline()))' "$1"
}
# expect_keys NAME FILE WANT...: FILE's key lines are exactly WANT...
expect_keys() {
    local name=$1 file=$2
    shift 2
    printf '%s\n' "$@" >"$TMP/want"
    json_keys "$file" >"$TMP/keys" 2>&1
    if diff "$TMP/want" "$TMP/keys" >"$TMP/keys.diff"; then
        ok "$name: keys as documented"
    else
        bad "$name: keys differ"
        sed 's/^/       /' "$TMP/keys.diff" | head -12
    fi
}
COVERAGE=".coverage: schema params_total params_installed params_partial params_missing bytes_total bytes_covered bytes_multi_written percent missing_params partial_params uncovered_count uncovered_copies fallback_causes"
STAGE=".stage: schema stages_s bytes descriptors full_pulls converts fallback shards_verified wire_GB_per_s ok run_s waves threads staging_bytes staging_unbounded_bytes staging_rounds"
expect_keys "pull --json --check --no-verify" "$TMP/out" \
    ": version rank ok replanned failovers failures failed_publishers tables_parsed tables_reused table_bytes_read stage coverage discover_s plan_s wall_s check check_s" \
    "$STAGE" ".stage.stages_s: prepare descriptors wire install" \
    "$COVERAGE" ".coverage.fallback_causes:"
pull "$D" cma --version 1 --rank 0 --json --release
expect_rc "pull --json --release" 0
expect_keys "pull --json --release" "$TMP/out" \
    ": version rank ok replanned failovers failures failed_publishers tables_parsed tables_reused table_bytes_read stage coverage discover_s plan_s wall_s released" \
    "$STAGE" ".stage.stages_s: prepare descriptors wire verify install" \
    "$COVERAGE" ".coverage.fallback_causes:"

# ---- tables without digests -------------------------------------------------

N="$TMP/nodigests"
pub "$N" 1 0 cma --no-digests
pub "$N" 1 1 cma --no-digests
pull "$N" cma --version 1 --rank 0
expect_rc "pull of tables without digests" 1
expect_in "pull of tables without digests" "$TMP/err" "tensor '" \
    "shard of session 'trainer-" "without a digest"
expect_not_in "pull of tables without digests" "$TMP/err" "malformed"
pull "$N" cma --version 1 --rank 0 --json
expect_rc "pull --json of tables without digests" 1
expect_in "pull --json of tables without digests" "$TMP/out" \
    '"ok":false,"failure":"digest","waves":0,"threads":1,"staging_bytes":0,"staging_unbounded_bytes":0,"staging_rounds":0}'
expect_keys "pull --json of tables without digests" "$TMP/out" \
    ": version rank ok replanned failovers failures failed_publishers tables_parsed tables_reused table_bytes_read stage coverage discover_s plan_s wall_s error" \
    ".stage: schema stages_s bytes descriptors full_pulls converts fallback shards_verified ok failure waves threads staging_bytes staging_unbounded_bytes staging_rounds" \
    ".stage.stages_s: prepare descriptors" \
    "$COVERAGE" ".coverage.fallback_causes:"
pull "$N" cma --version 1 --rank 0 --no-verify --check
expect_rc "pull --no-verify of tables without digests" 0
expect_in "pull --no-verify of tables without digests" "$TMP/out" "byte-exact"

# `run --verify` on the bundled example, whose tables carry empty digests.
python3 "$SRC/tests/cli/run_data.py" make "$SRC/examples/tiny/sources.json" \
    "$TMP/tiny-data" >/dev/null 2>"$TMP/err"
"$BIN" run --capture "$SRC/examples/tiny/capture.json" \
    --sources "$SRC/examples/tiny/sources.json" --data "$TMP/tiny-data" \
    --verify >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "run --verify without digests" 1
expect_in "run --verify without digests" "$TMP/err" "tensor 'model.layers.0." \
    "shard of session 'trainer-" "at addr" "without a digest"
expect_not_in "run --verify without digests" "$TMP/err" "malformed digest"
"$BIN" run --capture "$SRC/examples/tiny/capture.json" \
    --sources "$SRC/examples/tiny/sources.json" --data "$TMP/tiny-data" \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
expect_rc "run without --verify, no digests" 0

# ---- publishers killed: one line in reshard's words --------------------------

K="$TMP/killed"
export UCX_TLS=tcp UCX_NET_DEVICES=lo
unset UCX_LOG_LEVEL
pub "$K" 1 0 ucx
k0=$!
pub "$K" 1 1 ucx
k1=$!
for _ in $(seq 200); do [ -e "$K/m/1/READY" ] && break; sleep 0.1; done
if [ -e "$K/m/1/READY" ]; then ok "ucx publishers: version 1 READY"
else bad "ucx publishers: version 1 never READY"; fi
kill -KILL "$k0" "$k1"
wait "$k0" "$k1" 2>/dev/null
pull "$K" ucx --version 1 --rank 0
expect_rc "pull from killed publishers" 1
expect_in "pull from killed publishers" "$TMP/err" "reshard pull: rank 0 version 1:" \
    "trainer-" ", slot "
# UCX logs to stdout unless told otherwise.
for f in "$TMP/out" "$TMP/err"; do
    expect_not_in "pull from killed publishers" "$f" "UCX  ERROR"
    expect_not_in "pull from killed publishers" "$f" "UCX  WARN"
done
lines=$(wc -l <"$TMP/err")
if [ "$lines" -eq 1 ]; then ok "pull from killed publishers: one line on stderr"
else bad "pull from killed publishers: $lines lines on stderr"; fi

cli_done
