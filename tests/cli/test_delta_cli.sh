#!/usr/bin/env bash
# CLI tests of deltas end to end (docs/delta.md): two `reshard publish
# --staging arena --changed-fraction 0.02` ranks serve three versions and
# `reshard pull --delta --check --changed-fraction 0.02 --versions 3`
# checks every byte of each: the first read whole, the next two mostly from
# deltas, for under a fifth of the full bytes on the wire (tiny-llama,
# descriptors priced at 1 ns so that its small reads take deltas), the
# parsed tables reused (only the version's digests and deltas read); the
# same with publisher-side FP8 copies (tiny-deepseek-fp8 --quantize: the
# FP8 codes and scales served as deltas too); --delta-keep 0 serves none.
# Deltas are on by default (the bf16 pull gives no flag), patched in place
# in the shadows with no copy held; --no-delta reads every version whole.
# The FP8 rank's reads that land in staging (coalesced boxes) are patched
# in place there when the staging is one round (the default budget here),
# kept from one pull to the next; with staging in rounds (the boxes share
# the buffer) they keep copies only within --delta-budget: none by
# default, all with 'unbounded', and with half of those copies' bytes
# about half, the reads that gain most per byte: fewer runs by delta, more
# bytes whole, the copies within the budget. The stage record's `delta` object gives the same figures as the
# pull's. Bad flag combinations are refused naming the flag.
# usage: bash test_delta_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_delta_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_delta_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
FP8="$SRC/examples/models/tiny-deepseek-fp8.json"
. "$(dirname "$0")/lib.sh"

# pub NAME CONFIG LAYOUT [publish options...]: ranks 0 and 1 publishing
# versions 5..7 of F = 0.02 into $TMP/NAME.
pub() {
    local name=$1 config=$2 layout=$3 r
    shift 3
    mkdir -p "$TMP/$name"
    for r in 0 1; do
        "$BIN" publish --directory "file:$TMP/$name" --model m --version 5 \
            --versions 3 --rank "$r" --world 2 --layout "$layout" \
            --model-config "$config" --backend cma --timeout 60 \
            --changed-fraction 0.02 "$@" \
            >"$TMP/$name-$r.out" 2>"$TMP/$name-$r.err" &
        pids+=("$!")
        last_pid=$!
    done
}

# pull NAME CONFIG [pull options...]: rank 0 of vllm:tp=2 pulls versions
# 5..7 with deltas, every byte checked; one JSON line per version.
pull() {
    local name=$1 config=$2
    shift 2
    "$BIN" pull --directory "file:$TMP/$name" --model m --version 5 \
        --versions 3 --rank 0 --layout vllm:tp=2 --model-config "$config" \
        --backend cma --timeout 30 --check --changed-fraction 0.02 --release \
        --descriptor-ns 1 --no-announce --json "$@" \
        >"$TMP/$name.json" 2>"$TMP/err"
    rc=$?
}

# figures NAME: per version "V runs refused wire full checked reused held
# in_place" (no `delta` object: every byte whole, "V 0 0 full full checked
# reused 0 0"); the stage record's `delta` must say what the pull's does.
figures() {
    python3 - "$TMP/$1.json" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    x, s = d.get("delta"), d["stage"].get("delta")
    assert (x is None) == (s is None), (x, s)
    if x is None:
        x = {"runs": 0, "refused": 0, "bytes": 0,
             "whole_bytes": d["stage"]["bytes"], "held_bytes": 0,
             "in_place_bytes": 0}
    else:
        for k in ("runs", "bytes", "full_bytes", "whole_runs", "whole_bytes",
                  "refused", "held_bytes", "in_place_bytes"):
            assert s[k] == x[k], (k, s, x)
        assert s["wire_bytes"] == x["bytes"] + x["whole_bytes"], s
    print(d["version"], x["runs"], x["refused"], x["bytes"] + x["whole_bytes"],
          d["stage"]["bytes"], int(d.get("check", False)), d["tables_reused"],
          x["held_bytes"], x["in_place_bytes"])
EOF
}

# expect_deltas NAME: version 5 whole, 6 and 7 by deltas under a fifth of
# the bytes, every version checked.
expect_deltas() {
    local name=$1 v runs refused wire full checked reused held in_place
    while read -r v runs refused wire full checked reused held in_place; do
        [ "$checked" = 1 ] && ok "$name: version $v byte-exact" ||
            bad "$name: version $v not checked"
        [ "$refused" = 0 ] || bad "$name: version $v refused $refused deltas"
        if [ "$v" = 5 ]; then
            [ "$runs" = 0 ] && [ "$wire" = "$full" ] &&
                ok "$name: version 5 read whole ($wire bytes)" ||
                bad "$name: version 5: $runs delta runs, $wire of $full bytes"
        else
            [ "$runs" -gt 0 ] && [ $((wire * 5)) -lt "$full" ] &&
                ok "$name: version $v: $runs runs by delta, $wire of $full bytes" ||
                bad "$name: version $v: $runs delta runs, $wire of $full bytes"
            # the deltas are values of the split tables: parsed tables reused
            [ "$reused" = 2 ] && ok "$name: version $v: both tables reused" ||
                bad "$name: version $v: $reused tables reused, not 2"
        fi
    done < <(figures "$name")
    [ "$(figures "$name" | wc -l)" = 3 ] || bad "$name: not 3 versions pulled"
}

pub bf16 "$TINY" megatron:tp=2 --staging arena
pull bf16 "$TINY"
expect_rc "bf16: pull (deltas by default) of versions 5..7" 0
expect_deltas bf16
# by default in place: every version holds no copy, 6 and 7 patch the
# shadows
[ "$(figures bf16 | awk '$8 == 0 && ($1 == 5 || $9 > 0)' | wc -l)" = 3 ] &&
    ok "bf16: deltas patched in place, no copy held" ||
    bad "bf16: held or not in place: $(figures bf16)"

pub fp8 "$FP8" fsdp:2 --quantize '*proj.weight=fp8_block:16x16:f8e4m3' \
    --quantize '*_mqa.weight=fp8_block:16x16:f8e4m3'
# staging in rounds (7 of 64 KiB): boxes share the buffer, so their reads
# take deltas only through copies
pull fp8 "$FP8" --delta --delta-budget unbounded --staging-budget 65536
expect_rc "fp8: pull --delta of versions 5..7" 0
expect_deltas fp8
read -r _ runs_all _ wire_all _ _ _ held_all _ < <(figures fp8 | sed -n 3p)
[ "$held_all" -gt 0 ] && ok "fp8: $held_all bytes of staged reads held" ||
    bad "fp8: no copies held: $(figures fp8)"
# the default budget, staging in rounds: staged reads whole, the reads
# into the shadows by delta in place
pub fp8d "$FP8" fsdp:2 --quantize '*proj.weight=fp8_block:16x16:f8e4m3' \
    --quantize '*_mqa.weight=fp8_block:16x16:f8e4m3'
pull fp8d "$FP8" --staging-budget 65536
expect_rc "fp8: pull of versions 5..7, default budget, staging in rounds" 0
read -r v runs _ wire full checked _ held in_place < <(figures fp8d | sed -n 3p)
[ "$checked" = 1 ] && [ "$held" = 0 ] && [ "$runs" -lt "$runs_all" ] &&
    [ "$wire" -gt "$wire_all" ] && [ "$wire" -lt "$full" ] &&
    ok "fp8, default budget, staging in rounds: no copies, $runs runs by delta in place ($in_place bytes), $wire bytes of $full (unbounded: $wire_all)" ||
    bad "fp8, default budget, staging in rounds: held $held, runs $runs of $runs_all, wire $wire of $full (unbounded $wire_all), checked $checked"
in_place_rounds=$in_place
# the default budget and staging (one round, kept from one pull to the
# next): the staged reads are patched in place too, no copy held, every
# piece by delta as with unbounded copies
pub fp8s "$FP8" fsdp:2 --quantize '*proj.weight=fp8_block:16x16:f8e4m3' \
    --quantize '*_mqa.weight=fp8_block:16x16:f8e4m3'
pull fp8s "$FP8"
expect_rc "fp8: pull of versions 5..7, defaults" 0
expect_deltas fp8s
read -r v runs _ wire full checked _ held in_place < <(figures fp8s | sed -n 3p)
[ "$checked" = 1 ] && [ "$held" = 0 ] && [ "$runs" = "$runs_all" ] &&
    [ "$wire" = "$wire_all" ] && [ "$in_place" -gt "$in_place_rounds" ] &&
    ok "fp8, defaults: staged reads in place, $runs runs by delta, $in_place bytes in place, $wire bytes of $full" ||
    bad "fp8, defaults: held $held, runs $runs of $runs_all, wire $wire of $full (copies: $wire_all), in place $in_place (in rounds $in_place_rounds), checked $checked"
pub keep0 "$TINY" megatron:tp=2 --staging arena --delta-keep 0
pull keep0 "$TINY"
expect_rc "delta-keep 0: pull --delta of versions 5..7" 0
[ "$(figures keep0 | awk '{s += $2} END {print s}')" = 0 ] &&
    ok "delta-keep 0: every version read whole" ||
    bad "delta-keep 0: deltas read: $(figures keep0)"

pub nodelta "$TINY" megatron:tp=2 --staging arena
pull nodelta "$TINY" --no-delta
expect_rc "pull --no-delta of versions 5..7" 0
[ "$(figures nodelta | awk '$2 == 0 && $4 == $5 && $6 == 1 && $8 == 0' |
     wc -l)" = 3 ] && ok "--no-delta: every version whole and checked" ||
    bad "--no-delta: $(figures nodelta)"

# half the bytes the unbounded copies held as the budget
half=$(( held_all / 2 ))
pub half "$FP8" fsdp:2 --quantize '*proj.weight=fp8_block:16x16:f8e4m3' \
    --quantize '*_mqa.weight=fp8_block:16x16:f8e4m3'
pull half "$FP8" --delta-budget "$half" --staging-budget 65536
expect_rc "pull --delta-budget $half of versions 5..7" 0
read -r v runs _ wire full checked _ held _ < <(figures half | sed -n 3p)
[ "$checked" = 1 ] && [ "$held" -le "$half" ] && [ "$held" -gt 0 ] &&
    [ "$runs" -gt 0 ] && [ "$runs" -lt "$runs_all" ] &&
    [ "$wire" -gt "$wire_all" ] && [ "$wire" -lt "$full" ] &&
    ok "--delta-budget $half: $held bytes held, $runs runs by delta (of $runs_all), $wire bytes of $full (unbounded: $wire_all)" ||
    bad "--delta-budget $half: held $held, runs $runs of $runs_all, wire $wire of $full (unbounded $wire_all), checked $checked"
wait

# ---- bad flags ---------------------------------------------------------------
run pull --directory "file:$TMP/bf16" --model m --version 5 --rank 0 \
    --layout vllm:tp=2 --model-config "$TINY" --delta --no-verify
expect_input_error "pull --delta --no-verify" "--delta" "--no-verify"
run pull --directory "file:$TMP/bf16" --model m --version 5 --rank 0 \
    --layout vllm:tp=2 --model-config "$TINY" --delta-budget lots
expect_input_error "pull --delta-budget lots" "--delta-budget" "lots"
run publish --directory "file:$TMP/bad" --model m --version 1 --rank 0 \
    --world 1 --layout fsdp:1 --model-config "$TINY" --delta-keep 17
expect_input_error "publish --delta-keep 17" "--delta-keep"
run publish --directory "file:$TMP/bad" --model m --version 1 --rank 0 \
    --world 1 --layout fsdp:1 --model-config "$TINY" --delta-keep 1 \
    --staging caller
expect_input_error "publish --delta-keep 1 --staging caller" "--delta-keep" \
    "--staging caller"

cli_done
