#!/usr/bin/env bash
# CLI tests of what a cluster does to a directory: a private redis-server
# stopped (SIGSTOP) for longer than its timeout while publishers serve (they
# report the outage once when it begins and once when it ends, survive, and
# a later pull is byte-exact), during a receiver's discovery (it retries
# and succeeds once the server resumes, or fails naming the outage when it
# does not) and while publishers start (publishing waits for it); stale
# versions skipped by --version -1 and an explicit stale version failing
# with its stale slots; `reshard release` and --abandon; a
# refused --release reported with exit 1; a mistyped file: directory never
# created by a receiver; a Redis password never printed (wrong password,
# unreachable server, RESHARD_REDIS_PASSWORD and password_file).
# Every server and process is killed and every file removed on exit.
# usage: bash test_cluster_cli.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_cluster_cli.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_cluster_cli.sh <reshard-binary> <source-dir>}
TINY="$SRC/examples/models/tiny-llama.json"
. "$(dirname "$0")/lib.sh"
redis_pids=()
cli_cleanup_hook() {
    for p in "${redis_pids[@]}"; do kill -CONT "$p"; kill -KILL "$p"; done
}
unset RESHARD_REDIS_PASSWORD

# expect_count NAME FILE NEEDLE N: NEEDLE appears on exactly N lines.
expect_count() {
    local n
    n=$(grep -cF -- "$3" "$2")
    if [ "$n" -eq "$4" ]; then ok "$1: '$3' on $4 line(s)"
    else bad "$1: '$3' on $n lines, want $4"; sed 's/^/       /' "$2" | head -8; fi
}

# wait_for FILE NEEDLE: until FILE holds NEEDLE (bounded so a broken build
# cannot hang the test; not a timing check); a failed check if it never came.
wait_for() {
    local i
    for i in $(seq 1 600); do
        grep -qF -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    bad "$(basename "$1") never showed '$2'"
    sed 's/^/       /' "$1" | head -8
    return 1
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_redis NAME [PASSWORD]: a private server; sets REDIS_PID, REDIS_PORT.
start_redis() {
    local dir="$TMP/redis-$1" i
    mkdir -p "$dir"
    REDIS_PORT=$(free_port)
    local extra=()
    [ $# -ge 2 ] && extra=(--requirepass "$2")
    redis-server --save "" --appendonly no --port "$REDIS_PORT" \
        --bind 127.0.0.1 --dir "$dir" "${extra[@]}" >"$dir/log" 2>&1 &
    REDIS_PID=$!
    redis_pids+=("$REDIS_PID")
    for i in $(seq 1 100); do
        redis-cli -p "$REDIS_PORT" PING 2>/dev/null | grep -qE 'PONG|NOAUTH' && return 0
        sleep 0.05
    done
    echo "redis-server did not start on port $REDIS_PORT"; cat "$dir/log"
    return 1
}

# pub DIR VERSION RANK [publish options...]: a cma publisher of tiny-llama
# rank RANK of megatron:tp=2 in the background, its output in
# $TMP/pub<rank>.out and .err (the previous .err kept as .before-v<V>.err);
# its pid in PUB_PID.
pub() {
    local d=$1 v=$2 r=$3
    shift 3
    [ -e "$TMP/pub$r.err" ] && mv "$TMP/pub$r.err" "$TMP/pub$r.before-v$v.err"
    "$BIN" publish --directory "$d" --model m --version "$v" --rank "$r" \
        --world 2 --layout megatron:tp=2 --model-config "$TINY" \
        --backend cma --timeout 120 "$@" >"$TMP/pub$r.out" 2>"$TMP/pub$r.err" &
    PUB_PID=$!
    pids+=("$PUB_PID")
}

# pull DIR [pull options...]: one tiny-llama vllm:tp=2 rank, foreground.
pull() {
    local d=$1
    shift
    "$BIN" pull --directory "$d" --model m --layout vllm:tp=2 \
        --model-config "$TINY" --backend cma "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}

alive() { kill -0 "$1" 2>/dev/null; }

# ---- file: a mistyped directory is never created by a receiver ------------

pull "file:$TMP/no-such-dir" --version 1 --rank 0 --timeout 1
expect_rc "pull from a mistyped file: directory" 2
expect_in "pull from a mistyped file: directory" "$TMP/err" "no such directory" \
    "$TMP/no-such-dir"
if [ ! -e "$TMP/no-such-dir" ]; then ok "pull: mistyped directory not created"
else bad "pull: mistyped directory was created"; fi
"$BIN" release --directory "file:$TMP/no-such-dir" --model m --version 1 \
    >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "release in a mistyped file: directory" 2
expect_in "release in a mistyped file: directory" "$TMP/err" "no such directory"
if [ ! -e "$TMP/no-such-dir" ]; then ok "release: mistyped directory not created"
else bad "release: mistyped directory was created"; fi

# ---- file: stale versions, reshard release, a refused --release ------------

D="file:$TMP/dir"
pub "$D" 1 0; p0=$PUB_PID
pub "$D" 1 1; p1=$PUB_PID
wait_for "$TMP/pub0.out" "published version 1" && wait_for "$TMP/pub1.out" "published version 1"
# version 2: version 1's tables under another number, no publisher behind
# them (no heartbeat): stale
mkdir "$TMP/dir/m/2"
cp "$TMP/dir/m/1/meta" "$TMP/dir/m/1/"slot-* "$TMP/dir/m/1/READY" "$TMP/dir/m/2/"

pull "$D" --version -1 --rank 0 --check --json --timeout 20
expect_rc "pull -1 with a stale newest version" 0
expect_in "pull -1 with a stale newest version" "$TMP/out" '"version":1' '"check":true'
pull "$D" --version 2 --rank 0 --timeout 1
expect_rc "pull of a stale version" 1
expect_in "pull of a stale version" "$TMP/err" "version 2 of 'm' is READY but not every publisher" \
    "stale slots: 0 (no heartbeat), 1 (no heartbeat)"
pull "$D" --version -1 --rank 0 --timeout 1 --stale-after -1
expect_rc "pull --stale-after -1" 2
expect_in "pull --stale-after -1" "$TMP/err" "--stale-after"
pull "$D" --version -1 --rank 0 --timeout 1 --stale-after 0 --json
expect_rc "pull -1 --stale-after 0" 0
expect_in "pull -1 --stale-after 0 takes the newest READY" "$TMP/out" '"version":2'

# a lease nobody renews (its receiver died): release refused, abandon works
echo "$(( $(date +%s) + 600 )).000000" >"$TMP/dir/m/2/lease-ghost"
"$BIN" release --directory "$D" --model m --version 2 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "release of a leased version" 1
expect_in "release of a leased version" "$TMP/err" "cannot be released" "leased by 'ghost'" \
    "--abandon"
if [ ! -e "$TMP/dir/m/2/RELEASED" ]; then ok "refused release changed nothing"
else bad "refused release marked the version released"; fi
"$BIN" release --directory "$D" --model m --version 2 --abandon >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "release --abandon" 0
expect_in "release --abandon" "$TMP/out" "abandoned version 2 of 'm' (1 live lease dropped)"
if [ -e "$TMP/dir/m/2/RELEASED" ] && [ ! -e "$TMP/dir/m/2/lease-ghost" ]; then
    ok "abandon: RELEASED, lease dropped"
else bad "abandon: not RELEASED or lease left"; fi
"$BIN" release --directory "$D" --model m --version 2 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "release of a released version" 0
"$BIN" release --directory "$D" --model m --version 9 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "release of a version never created" 2
expect_in "release of a version never created" "$TMP/err" "version 9 of 'm'" "never created"
"$BIN" release --directory "$D" --model m >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "release without --version" 2
"$BIN" release --help >"$TMP/out" 2>&1; rc=$?
expect_rc "release --help" 0
expect_in "release --help" "$TMP/out" "--abandon" "--timeout" "exit status" "leased by"

# another receiver's live lease: the pull succeeds, its --release is refused
# and reported with exit 1; the publishers keep serving
echo "$(( $(date +%s) + 600 )).000000" >"$TMP/dir/m/1/lease-other-receiver"
pull "$D" --version 1 --rank 1 --check --release --timeout 20
expect_rc "pull --release refused" 1
expect_in "pull --release refused" "$TMP/err" "--release was refused" \
    "leased by 'other-receiver'"
expect_in "pull --release refused: still pulled" "$TMP/out" "byte-exact"
if alive "$p0" && alive "$p1"; then ok "publishers serve on after a refused release"
else bad "a publisher exited after a refused release"; fi
# a retried release succeeds once the lease is gone
( sleep 0.5; rm -f "$TMP/dir/m/1/lease-other-receiver" ) &
pids+=("$!")
"$BIN" release --directory "$D" --model m --version 1 --timeout 30 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "release --timeout after the lease ended" 0
expect_in "release --timeout" "$TMP/out" "released version 1 of 'm'"
wait "$p0"; rc=$?
expect_rc "publisher 0 after release" 0
wait "$p1"; rc=$?
expect_rc "publisher 1 after release" 0

# ---- redis: outages ---------------------------------------------------------

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "redis-server or redis-cli is not installed (Debian package redis-server): the Redis tests are skipped"
    echo "$checks checks, $failures failures"
    [ "$failures" -eq 0 ]
    exit
fi
start_redis outage || exit 1
RPID=$REDIS_PID
R="redis://127.0.0.1:$REDIS_PORT/?timeout=0.5"

# publishers serving while the server is stopped for longer than its timeout
pub "$R" 1 0; p0=$PUB_PID
pub "$R" 1 1; p1=$PUB_PID
wait_for "$TMP/pub0.out" "published version 1" && wait_for "$TMP/pub1.out" "published version 1"
kill -STOP "$RPID"
# a heartbeat fails only after the 0.5 s timeout: the outage outlasts it
wait_for "$TMP/pub0.err" "heartbeat of version 1 failed"
wait_for "$TMP/pub1.err" "heartbeat of version 1 failed"
kill -CONT "$RPID"
wait_for "$TMP/pub0.err" "reachable again"
wait_for "$TMP/pub1.err" "reachable again"
if alive "$p0" && alive "$p1"; then ok "publishers survive a stopped server"
else bad "a publisher exited during the outage"; fi
for r in 0 1; do
    expect_count "publisher $r outage report" "$TMP/pub$r.err" "heartbeat of version 1 failed" 1
    expect_count "publisher $r outage report" "$TMP/pub$r.err" "reachable again after" 1
    expect_in "publisher $r outage report" "$TMP/pub$r.err" "still serving" \
        "127.0.0.1:$REDIS_PORT" "no reply within the timeout"
done
pull "$R" --version 1 --rank 0 --check --timeout 30
expect_rc "pull after the outage" 0
expect_in "pull after the outage" "$TMP/out" "byte-exact"

# the server loses its data (as a restart without persistence does): the
# publishers publish their version again and a pull is byte-exact
redis-cli -p "$REDIS_PORT" FLUSHALL >/dev/null
# (told by whichever of the heartbeat and the release wait sees it first)
wait_for "$TMP/pub0.err" "publishing it again"
wait_for "$TMP/pub1.err" "publishing it again"
pull "$R" --version 1 --rank 0 --check --timeout 30
expect_rc "pull after the server lost its data" 0
expect_in "pull after the server lost its data" "$TMP/out" "byte-exact"
if alive "$p0" && alive "$p1"; then ok "publishers survive the data loss"
else bad "a publisher exited after the data loss"; fi

# a receiver's discovery while the server is stopped: it retries, reports,
# and succeeds once the server resumes
kill -STOP "$RPID"
"$BIN" pull --directory "$R" --model m --layout vllm:tp=2 --model-config "$TINY" \
    --backend cma --version 1 --rank 1 --check --timeout 60 \
    >"$TMP/disc.out" 2>"$TMP/disc.err" &
disc=$!
pids+=("$disc")
wait_for "$TMP/disc.err" "unreachable while waiting for version 1 of 'm'"
kill -CONT "$RPID"
wait "$disc"; rc=$?
expect_rc "discovery through an outage" 0
expect_in "discovery through an outage" "$TMP/disc.out" "byte-exact"
expect_in "discovery through an outage" "$TMP/disc.err" "reachable again after"

# not resumed within the receiver's deadline: a timeout naming the outage
kill -STOP "$RPID"
pull "$R" --version 1 --rank 1 --timeout 2
kill -CONT "$RPID"
expect_rc "discovery, server never back" 1
expect_in "discovery, server never back" "$TMP/err" "timed out after 2 s waiting for version 1 of 'm'" \
    "unreachable for the last" "127.0.0.1:$REDIS_PORT"

"$BIN" release --directory "$R" --model m --version 1 --timeout 30 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "release over redis" 0
wait "$p0"; rc=$?
expect_rc "publisher 0 after the outages" 0
wait "$p1"; rc=$?
expect_rc "publisher 1 after the outages" 0

# publishers started while the server is stopped: publishing waits for it
kill -STOP "$RPID"
pub "$R" 2 0; p0=$PUB_PID
pub "$R" 2 1; p1=$PUB_PID
wait_for "$TMP/pub0.err" "publishing version 2: directory unreachable"
wait_for "$TMP/pub1.err" "publishing version 2: directory unreachable"
kill -CONT "$RPID"
wait_for "$TMP/pub0.out" "published version 2" && wait_for "$TMP/pub1.out" "published version 2"
for r in 0 1; do
    expect_in "publisher $r started during an outage" "$TMP/pub$r.err" \
        "reachable again after" "version 2 published"
done
pull "$R" --version -1 --rank 1 --check --release --json --timeout 30
expect_rc "pull from publishers started during an outage" 0
expect_in "pull from publishers started during an outage" "$TMP/out" \
    '"version":2' '"check":true' '"released":true'
wait "$p0"; rc=$?
expect_rc "publisher 0 of version 2" 0
wait "$p1"; rc=$?
expect_rc "publisher 1 of version 2" 0

# ---- redis: the password is never printed -----------------------------------

PW="pw-Zq81-secret"
start_redis auth "$PW" || exit 1
APORT=$REDIS_PORT
pull "redis://:wrong-Zq81-pw@127.0.0.1:$APORT" --version 1 --rank 0 --timeout 1
expect_rc "pull with a wrong password" 1
expect_in "pull with a wrong password" "$TMP/err" "authentication refused" \
    "redis://:***@127.0.0.1:$APORT"
expect_not_in "pull with a wrong password" "$TMP/err" "wrong-Zq81-pw"
"$BIN" publish --directory "redis://:wrong-Zq81-pw@127.0.0.1:$APORT" --model m \
    --version 1 --rank 0 --world 2 --layout megatron:tp=2 --model-config "$TINY" \
    --backend cma >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "publish with a wrong password" 1
expect_not_in "publish with a wrong password" "$TMP/err" "wrong-Zq81-pw"
expect_in "publish with a wrong password" "$TMP/err" "redis://:***@"
NOPORT=$(free_port)
pull "redis://:$PW@127.0.0.1:$NOPORT/?timeout=0.5" --version 1 --rank 0 --timeout 1
expect_rc "pull from an unreachable server" 1
expect_in "pull from an unreachable server" "$TMP/err" "127.0.0.1:$NOPORT" "unreachable"
expect_not_in "pull from an unreachable server" "$TMP/err" "$PW"
"$BIN" release --directory "redis://user:$PW@127.0.0.1:$NOPORT" --model m \
    --version 1 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "release on an unreachable server" 1
expect_not_in "release on an unreachable server" "$TMP/err" "$PW"
# the right password from the environment and from a file: authenticated
# (the version is simply missing)
RESHARD_REDIS_PASSWORD="$PW" "$BIN" release --directory "redis://127.0.0.1:$APORT" \
    --model m --version 4 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "RESHARD_REDIS_PASSWORD" 2
expect_in "RESHARD_REDIS_PASSWORD" "$TMP/err" "version 4 of 'm' was never created"
RESHARD_REDIS_PASSWORD="wrong-Zq81-pw" "$BIN" release --directory "redis://127.0.0.1:$APORT" \
    --model m --version 4 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "wrong RESHARD_REDIS_PASSWORD" 1
expect_not_in "wrong RESHARD_REDIS_PASSWORD" "$TMP/err" "wrong-Zq81-pw"
printf '%s\n' "$PW" >"$TMP/pwfile"
"$BIN" release --directory "redis://127.0.0.1:$APORT?password_file=$TMP/pwfile" \
    --model m --version 4 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "password_file" 2
expect_in "password_file" "$TMP/err" "version 4 of 'm' was never created"
expect_not_in "password_file" "$TMP/err" "$PW"
"$BIN" release --directory "redis://127.0.0.1:$APORT?password_file=$TMP/none" \
    --model m --version 4 >"$TMP/out" 2>"$TMP/err"; rc=$?
expect_rc "missing password_file" 2
expect_in "missing password_file" "$TMP/err" "$TMP/none"

cli_done
