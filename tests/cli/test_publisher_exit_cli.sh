#!/usr/bin/env bash
# CLI test of publishers leaving once their versions are released, as the
# README runs them: two ranks of tiny-llama publish versions 1 and 2 over
# UCX, one pull reads both and releases each (--versions 2 --release; the
# second reuses the tables the first parsed); every
# publisher must then exit 0, never abort while tearing UCX down. Run a
# fixed number of times over shared memory, tcp and UCX's default choice.
# usage: bash test_publisher_exit_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_publisher_exit_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_publisher_exit_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
ROUNDS=${RESHARD_EXIT_ROUNDS:-4}
. "$(dirname "$0")/lib.sh"

for tls in sm tcp default; do
    if [ "$tls" = default ]; then unset UCX_TLS; else export UCX_TLS=$tls; fi
    for round in $(seq "$ROUNDS"); do
        name="$tls round $round"
        dir="$TMP/dir-$tls-$round"
        mkdir -p "$dir"
        pub=()
        for r in 0 1; do
            "$BIN" publish --directory "file:$dir" --model m --version 1 \
                --versions 2 --rank "$r" --world 2 --layout megatron:tp=2 \
                --model-config "$TINY" --backend ucx --timeout 60 \
                >"$dir/pub$r.out" 2>"$dir/pub$r.err" &
            pub+=("$!")
            pids+=("$!")
        done
        "$BIN" pull --directory "file:$dir" --model m --version 1 --rank 0 \
            --layout vllm:tp=1 --model-config "$TINY" --backend ucx \
            --versions 2 --release --timeout 60 --json >"$dir/pull.out" \
            2>"$TMP/err"
        rc=$?
        expect_rc "$name: pull --versions 2 --release" 0
        # version 2 took its digests into the tables version 1 parsed
        tail -n 1 "$dir/pull.out" >"$dir/pull2.json"
        expect_in "$name: version 2 reused the parsed tables" \
            "$dir/pull2.json" '"tables_parsed":0,"tables_reused":2'
        head -n 1 "$dir/pull.out" >"$dir/pull1.json"
        expect_in "$name: version 1 parsed the tables" \
            "$dir/pull1.json" '"tables_parsed":2,"tables_reused":0'
        for r in 0 1; do
            wait "${pub[$r]}"
            rc=$?
            if [ "$rc" -eq 0 ]; then ok "$name: publisher $r exits 0"
            else
                bad "$name: publisher $r exits $rc"
                sed 's/^/       /' "$dir/pub$r.err" | tail -5
            fi
        done
    done
done

cli_done
