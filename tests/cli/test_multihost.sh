#!/usr/bin/env bash
# A refit across hosts: network namespaces this test creates stand in for
# machines. Two trainer hosts each run `reshard publish` (megatron:tp=2), an
# inference host runs `reshard pull --check` (vllm:tp=1), Redis runs on a
# host of its own, and UCX reads over tcp on the hosts' veths. Scenarios: a
# clean refit, byte-exact; a publisher killed mid-wire, a publisher leaving
# mid-wire through its own exit path and a trainer's link set down mid-wire
# (the pull fails in bounded time naming the publisher, installs nothing,
# leaves no process); Redis stopped (SIGSTOP) for longer than its client
# timeout during discovery and during the wire stage (the refit still
# completes byte-exact, the publishers survive, their notices naming rank
# and replica); replicas of rank 0 on the other trainer host: one that
# joins mid-wire, after the pull read the slot, is read from once
# trainer-0 dies, and trainer-0 frozen (SIGSTOP) mid-wire is failed over
# to its replica by the stall bound; both pulls byte-exact, their JSON
# naming trainer-0 as the failed publisher and why. A table of outcomes
# ends the output. Needs root and `ip netns`; exits 77 (skipped) without them.
# docs/testing.md, "Across hosts, in network namespaces", explains the set-up
# (and how to build it by hand), the rate limit that stretches the wire
# stage, and the per-host settings that make the faults bite.
#
# RESHARD_MULTIHOST_ONLY="link-down ..." runs only those scenarios (after the
# baseline); RESHARD_MULTIHOST_RATE changes the trainer links' rate.
#
# usage: bash test_multihost.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_multihost.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_multihost.sh <reshard-binary> <source-dir>}
SKIP=77
CONFIG="$SRC/examples/models/tiny-llama.json"
TRAIN=megatron:tp=2
INFER=vllm:tp=1

skip() { echo "SKIP: $*"; exit "$SKIP"; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
for tool in ip tc ss sysctl redis-server redis-cli; do
    command -v "$tool" >/dev/null || skip "$tool is not installed"
done
BIN=$(readlink -f "$BIN")

P="rsmh$$"                    # namespace prefix, unique to this run
HOSTS="t0 t1 inf redis"
declare -A ADDR=([t0]=10.77.0.10 [t1]=10.77.0.11 [inf]=10.77.0.20
                 [redis]=10.77.0.30)
REDIS_PORT=6379
WIRE_RATE=${RESHARD_MULTIHOST_RATE:-600kbit} # per trainer link, to the inference host
BOUND=60                      # a pull still running after this long hangs
MID=40000                     # wire bytes from a trainer: the fault lands here
TMP=$(mktemp -d)
made_ns=()
redis_pid=""

# ns_pids: every process in a namespace of this run. Only these are ever
# killed: a pid the shell has reaped may already belong to someone else.
ns_pids() {
    local ns
    for ns in "${made_ns[@]}"; do ip netns pids "$ns" 2>/dev/null; done
}

cleanup() {
    local ns p try
    exec 2>/dev/null # no job-status noise from the kills
    for try in 1 2 3 4 5 6 7 8 9 10; do
        p=$(ns_pids)
        [ -z "$p" ] && break
        kill -KILL $p
        sleep 0.1
    done
    wait
    for ns in "${made_ns[@]}"; do ip netns del "$ns"; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! ip netns add "$P-probe" 2>/dev/null; then
    skip "ip netns is unavailable here"
fi
made_ns+=("$P-probe")
ip -n "$P-probe" link add rsq0 type veth peer name rsq1 2>/dev/null ||
    skip "veth devices are unavailable here"
ip -n "$P-probe" link add rsbr type bridge 2>/dev/null ||
    skip "bridge devices are unavailable here"
ip netns exec "$P-probe" tc qdisc add dev rsq0 root handle 1: htb 2>/dev/null ||
    skip "the htb queueing discipline is unavailable here"
ip netns del "$P-probe"
made_ns=()

failures=0
checks=0
declare -a table=()
ok() { checks=$((checks + 1)); echo "ok   - $1"; }
bad() {
    checks=$((checks + 1)); failures=$((failures + 1))
    echo "FAIL - $1"
}
# show FILE: a file's tail, indented, for a failure's context.
show() { [ -s "$1" ] && sed 's/^/       '"$(basename "$1")"': /' "$1" | tail -6; }

# ---- the hosts --------------------------------------------------------------

# Every reshard process runs as `ip netns exec "$P-HOST" env "${UCX_ENV[@]}"
# reshard ...`, backgrounded as a simple command so that $! is the reshard
# process itself (ip and env exec, they do not fork). UCX reads over tcp on
# the host's veth; an idle connection to a peer that vanished is probed
# after 2 s and dropped after 3 unanswered probes, 1 s apart (UCX's
# defaults: 10 s, then the kernel's 9 probes 2 s apart). Without these
# settings and the inference host's tcp_retries2 a link down mid-wire is
# noticed only by the executor's wait timeout (RS_EXEC_DEFAULT_TIMEOUT_S,
# 60 s), whatever the pull's --timeout.
UCX_ENV=(UCX_TLS=tcp UCX_NET_DEVICES=eth0 UCX_TCP_KEEPIDLE=2s
         UCX_TCP_KEEPINTVL=1s UCX_TCP_KEEPCNT=3)

make_hosts() {
    local h
    ip netns add "$P-sw" || return 1
    made_ns+=("$P-sw")
    ip -n "$P-sw" link add br0 type bridge || return 1
    ip -n "$P-sw" link set br0 up || return 1
    for h in $HOSTS; do
        ip netns add "$P-$h" || return 1
        made_ns+=("$P-$h")
        ip -n "$P-sw" link add "p-$h" type veth peer name eth0 netns "$P-$h" ||
            return 1
        ip -n "$P-sw" link set "p-$h" master br0 up || return 1
        ip -n "$P-$h" addr add "${ADDR[$h]}/24" dev eth0 || return 1
        ip -n "$P-$h" link set eth0 up || return 1
        ip -n "$P-$h" link set lo up || return 1
    done
    # Small send buffers on the trainers: a publisher writes its replies to
    # the kernel only as the slow link drains them, so a publisher killed
    # mid-wire really leaves bytes unsent (with the default 4 MiB buffers it
    # would have handed the kernel everything at once, and the kernel
    # delivers what it holds after the process is gone).
    for h in t0 t1; do
        ip netns exec "$P-$h" sysctl -qw net.ipv4.tcp_wmem="4096 16384 16384" ||
            return 1
    done
    # The inference host gives a connection up after 3 retransmissions
    # (about 4 s here, 15 by default: some 15 minutes), so a trainer whose
    # link went down while a read request was unacknowledged is noticed by
    # TCP; UCX's keepalive (UCX_ENV) covers the idle case.
    ip netns exec "$P-inf" sysctl -qw net.ipv4.tcp_retries2=3 || return 1
}

# shape HOST: traffic from trainer HOST to the inference host goes through
# an htb class at WIRE_RATE (1:10); everything else through a fast one.
# Re-creating the classes zeroes their counters. RATE: WIRE_RATE unless given.
shape() {
    local h=$1 rate=${2:-$WIRE_RATE}
    ip netns exec "$P-$h" tc qdisc del dev eth0 root 2>/dev/null
    ip netns exec "$P-$h" tc qdisc add dev eth0 root handle 1: htb default 20 &&
    ip netns exec "$P-$h" tc class add dev eth0 parent 1: classid 1:10 htb \
        rate "$rate" ceil "$rate" burst 4kb &&
    ip netns exec "$P-$h" tc class add dev eth0 parent 1: classid 1:20 htb \
        rate 1gbit quantum 60000 &&
    ip netns exec "$P-$h" tc filter add dev eth0 parent 1: protocol ip u32 \
        match ip dst "${ADDR[inf]}/32" flowid 1:10
}

# wire_bytes HOST: bytes trainer HOST has sent to the inference host.
wire_bytes() {
    ip netns exec "$P-$1" tc -s class show dev eth0 classid 1:10 2>/dev/null |
        awk '/Sent/ { print $2; exit }'
}


# ---- waiting ------------------------------------------------------------------

# wait_for SECONDS CMD...: polls CMD every 50 ms until it succeeds (0) or
# SECONDS pass (1).
wait_for() {
    local limit=$1 t=0
    shift
    while ! "$@"; do
        t=$((t + 1))
        [ "$t" -ge $((limit * 20)) ] && return 1
        sleep 0.05
    done
}

wire_started() { [ "$(wire_bytes "$1")" -ge "$2" ] 2>/dev/null; }
# alive PID: PID runs in one of this run's namespaces (an exited process,
# reaped or not, has left it).
alive() { ns_pids | grep -qx -- "$1"; }
dead() { ! alive "$1"; }
# signal SIG PID: sends SIG to PID if it is still one of ours.
signal() { alive "$2" && kill -"$1" "$2"; }
in_file() { grep -qF -- "$2" "$1" 2>/dev/null; }

# reap PID VAR: waits for PID at most BOUND seconds; VAR gets its exit status,
# or 124 (and the process is killed) if it was still running.
reap() {
    local pid=$1
    if wait_for "$BOUND" dead "$pid"; then
        wait "$pid"
        printf -v "$2" '%s' "$?"
    else
        signal KILL "$pid"
        { wait "$pid"; } 2>/dev/null
        printf -v "$2" '%s' 124
    fi
}

# ---- Redis --------------------------------------------------------------------

# redis_ping [HOST]: Redis answers PING from HOST (default its own).
redis_ping() {
    ip netns exec "$P-${1:-redis}" redis-cli -h "${ADDR[redis]}" -p "$REDIS_PORT" \
        ping 2>/dev/null | grep -q PONG
}

start_redis() {
    ip netns exec "$P-redis" redis-server --bind "${ADDR[redis]}" \
        --port "$REDIS_PORT" --save '' --appendonly no --protected-mode no \
        --daemonize no --loglevel warning >"$TMP/redis.log" 2>&1 &
    redis_pid=$!
    wait_for 10 redis_ping
}

# redis_clients_from HOST: HOST holds an established connection to Redis.
redis_client_of() {
    ip netns exec "$P-$1" ss -Htn state established \
        "dst ${ADDR[redis]}:$REDIS_PORT" 2>/dev/null | grep -q .
}

# ---- the refit ------------------------------------------------------------------

# publish NAME RANK URL [WAIT]: trainer rank RANK on host tRANK serves
# version 1 of model NAME, waiting WAIT s (default 40) for its release; its
# pid goes to pub_pid[RANK], its output to TMP/NAME.pubRANK.*
declare -a pub_pid=()
publish() {
    local name=$1 r=$2 url=$3 wait=${4:-40}
    ip netns exec "$P-t$r" env "${UCX_ENV[@]}" "$BIN" publish --directory "$url" --model "$name" --version 1 \
        --rank "$r" --world 2 --layout "$TRAIN" --model-config "$CONFIG" \
        --timeout "$wait" >"$TMP/$name.pub$r.out" 2>"$TMP/$name.pub$r.err" &
    pub_pid[$r]=$!
}

# pull NAME URL [ARGS...]: the inference rank pulls version 1 in the
# background and checks every byte; its pid is pull_pid, its output
# TMP/NAME.pull.{out,err}.
pull_pid=""
pull() {
    local name=$1 url=$2
    shift 2
    ip netns exec "$P-inf" env "${UCX_ENV[@]}" "$BIN" pull --directory "$url" --model "$name" --version 1 \
        --rank 0 --layout "$INFER" --model-config "$CONFIG" --check \
        --release --json "$@" >"$TMP/$name.pull.out" 2>"$TMP/$name.pull.err" &
    pull_pid=$!
}

published() { in_file "$TMP/$1.pub$2.out" "published version 1"; }

# publish_replica NAME RANK REPLICA HOST URL: replica REPLICA of trainer
# rank RANK on host HOST, its pid pub_pid[2] (finish reaps it), its output
# TMP/NAME.pubRANK-REPLICA.*; waits for it to publish (a failed check when
# it does not within 30 s).
publish_replica() {
    local name=$1 r=$2 k=$3 h=$4 url=$5 out="$TMP/$1.pub$2-$3"
    ip netns exec "$P-$h" env "${UCX_ENV[@]}" "$BIN" publish --directory "$url" --model "$name" --version 1 \
        --rank "$r" --replica "$k" --world 2 --layout "$TRAIN" \
        --model-config "$CONFIG" --timeout 40 >"$out.out" 2>"$out.err" &
    pub_pid[2]=$!
    wait_for 30 in_file "$out.out" "published version 1" && return 0
    bad "$name: rank $r replica $k did not publish within 30 s"; show "$out.err"
    return 1
}

# start_publishers NAME URL: both trainers up and READY, or a failed check.
start_publishers() {
    publish "$1" 0 "$2"
    publish "$1" 1 "$2"
    if wait_for 30 published "$1" 0 && wait_for 30 published "$1" 1; then
        return 0
    fi
    bad "$1: publishers did not publish within 30 s"
    show "$TMP/$1.pub0.err"; show "$TMP/$1.pub1.err"
    return 1
}

# expect_exact NAME RC: the pull exited 0 and its check found every byte right.
expect_exact() {
    local name=$1 rc=$2 out="$TMP/$1.pull.out"
    if [ "$rc" -eq 0 ] && in_file "$out" '"ok":true' && in_file "$out" '"check":true' &&
       grep -qE '"shards_verified":[1-9]' "$out"; then
        ok "$name: pull exit 0, every parameter byte-exact, digests verified"
        return 0
    fi
    bad "$name: pull exit $rc, want 0 with a byte-exact check"
    show "$out"; show "$TMP/$name.pull.err"
    return 1
}

# expect_failed NAME RC PUBLISHER: the pull exited 1 (not hung, not killed)
# with an error naming PUBLISHER, and installed nothing (no stage record, no
# check: the error came before the check).
expect_failed() {
    local name=$1 rc=$2 who=$3 err="$TMP/$1.pull.err" out="$TMP/$1.pull.out"
    local good=1
    if [ "$rc" -eq 124 ]; then
        bad "$name: pull still running after $BOUND s (killed)"; good=0
    elif [ "$rc" -ne 1 ]; then
        bad "$name: pull exit $rc, want 1"; good=0
    else
        ok "$name: pull exit 1"
    fi
    if in_file "$err" "$who"; then ok "$name: the error names $who"
    else bad "$name: the error does not name $who"; show "$err"; good=0; fi
    if in_file "$out" '"check":true' || in_file "$out" '"ok":true' ||
       in_file "$err" "check failed"; then
        bad "$name: the pull reported installed parameters"; show "$out"; good=0
    else
        ok "$name: nothing installed (the pull stopped before install and check)"
    fi
    return $((1 - good))
}

# stray KNOWN PID: PID is neither a publisher in KNOWN (" pid pid ... ")
# nor a task one of them started, and it still exists. A publisher that
# is exiting may have a short-lived task of its own: under the sanitizers,
# the leak check at exit runs in a clone of the process (same name, the
# publisher its parent), gone with it.
stray() {
    local known=$1 p=$2 ppid
    [[ "$known" == *" $p "* ]] && return 1
    ppid=$(awk '/^PPid:/ { print $2 }' "/proc/$p/status" 2>/dev/null) || return 1
    [ -n "$ppid" ] || return 1
    [[ "$known" == *" $ppid "* ]] && return 1
    return 0
}

# finish NAME: the pull has been reaped; trainers still waiting for a
# release (the survivors of a failed pull) are the only processes left on
# the hosts. They are killed and reaped, and the hosts are then empty.
finish() {
    local name=$1 p h left="" known=" "
    for p in "${pub_pid[@]}"; do known="$known$p "; done
    for h in t0 t1 inf; do
        for p in $(ip netns pids "$P-$h" 2>/dev/null); do
            stray "$known" "$p" && left="$left $p($(cat /proc/$p/comm 2>/dev/null))"
        done
    done
    if [ -z "$left" ]; then ok "$name: no stray process on the hosts"
    else bad "$name: stray processes on the hosts:$left (publishers:$known)"; fi
    { # stderr off: bash reports each killed job there
        for h in t0 t1 inf; do
            for p in $(ip netns pids "$P-$h"); do kill -KILL "$p"; done
        done
        for p in "${pub_pid[@]}"; do wait "$p"; done
    } 2>/dev/null
    pub_pid=()
    pull_pid=""
}

# outcome NAME TEXT: one row of the closing table.
outcome() { table+=("$(printf '%-26s %s' "$1" "$2")"); }

# ---- the scenarios ----------------------------------------------------------------

URL="redis://${ADDR[redis]}:$REDIS_PORT"
FAST="$URL?timeout=1"          # a one-second client timeout

# expect_publishers NAME: both publishers exited 0 after the release.
expect_publishers() {
    local name=$1 r prc fine=0
    for r in 0 1; do
        reap "${pub_pid[$r]}" prc
        if [ "$prc" -eq 0 ]; then ok "$name: publisher $r exit 0 after the release"
        else bad "$name: publisher $r exit $prc, want 0"; show "$TMP/$name.pub$r.err"; fine=1; fi
    done
    return $fine
}

# expect_mid_wire NAME SENT: the fault landed while trainer 0 still had
# bytes to send (SENT of the baseline's TOTAL0).
expect_mid_wire() {
    if [ "$2" -ge "$MID" ] && [ "$2" -lt "$TOTAL0" ]; then
        ok "$1: the fault landed mid-wire ($2 of $TOTAL0 bytes sent)"
    else
        bad "$1: the fault did not land mid-wire ($2 of $TOTAL0 bytes sent)"
        return 1
    fi
}

# 1. A clean refit across the hosts. Its wire bytes per trainer tell the
# fault scenarios where the middle of the wire is.
TOTAL0=0
baseline() {
    local n=baseline rc fine=1
    shape t0 && shape t1
    start_publishers "$n" "$URL" || { outcome "$n" FAIL; finish "$n"; return; }
    pull "$n" "$URL" --verify --timeout 60
    reap "$pull_pid" rc
    expect_exact "$n" "$rc" || fine=0
    expect_publishers "$n" || fine=0
    TOTAL0=$(wire_bytes t0)
    echo "#    wire bytes to the inference host: trainer 0 $TOTAL0, trainer 1 $(wire_bytes t1)"
    finish "$n"
    [ "$TOTAL0" -gt $((2 * MID)) ] ||
        bad "$n: trainer 0 sent $TOTAL0 bytes, too few to land a fault mid-wire"
    [ "$fine" = 1 ] && outcome "$n" "ok: byte-exact" || outcome "$n" FAIL
}

# wire_fault NAME WHAT: starts the refit, waits for trainer 0's wire to
# pass MID bytes, then runs WHAT; the pull must fail naming trainer-0.
wire_fault() {
    local n=$1 what=$2 rc sent
    shape t0 && shape t1
    start_publishers "$n" "$URL" || { outcome "$n" FAIL; finish "$n"; return; }
    pull "$n" "$URL" --verify --timeout 20
    if ! wait_for 30 wire_started t0 "$MID"; then
        bad "$n: trainer 0 never sent $MID wire bytes"; show "$TMP/$n.pull.err"
        reap "$pull_pid" rc; finish "$n"; outcome "$n" FAIL; return
    fi
    local t0 t1
    $what
    t0=$(date +%s.%N)
    sent=$(wire_bytes t0)
    local fine=1
    expect_mid_wire "$n" "$sent" || fine=0
    reap "$pull_pid" rc
    t1=$(date +%s.%N)
    echo "#    the pull ended $(echo "$t0 $t1" | awk '{ printf "%.1f", $2 - $1 }') s after the fault"
    sed 's/^/#    pull: /' "$TMP/$n.pull.err" | tail -3
    expect_failed "$n" "$rc" trainer-0 || fine=0
    finish "$n"
    if [ "$fine" = 1 ]; then outcome "$n" "ok: exit 1 naming trainer-0, nothing installed"
    elif [ "$rc" = 124 ]; then outcome "$n" "FAIL: pull hung (killed after $BOUND s)"
    else outcome "$n" "FAIL: exit $rc: $(tail -1 "$TMP/$n.pull.err" | cut -c1-100)"; fi
}

# 2. Trainer 0's publisher is killed mid-wire.
kill_publisher() { { signal KILL "${pub_pid[0]}"; wait "${pub_pid[0]}"; } 2>/dev/null; }
# 3. Trainer 0's link goes down mid-wire (back up once the scenario is over).
link_down() { ip -n "$P-t0" link set eth0 down; }

# 2b. Trainer 0's publisher leaves mid-wire through its own exit path (its
# wait for the release times out after 3 s; it destroys its publisher and
# exits 1) rather than dying: the pull must fail the same way. The links
# run at a third of the rate here so that 3 s after publishing the wire is
# well under way and far from done. This pull does not ask for --verify:
# the reads themselves must fail (re-digesting would catch the missing
# bytes too, but a pull must not depend on it to refuse them).
publisher_exits() {
    local n=publisher-exits rc prc fine=1 sent
    shape t0 200kbit && shape t1 200kbit
    publish "$n" 0 "$URL" 3
    publish "$n" 1 "$URL"
    if ! wait_for 30 published "$n" 0 || ! wait_for 30 published "$n" 1; then
        bad "$n: publishers did not publish within 30 s"
        finish "$n"; outcome "$n" FAIL; return
    fi
    pull "$n" "$URL" --timeout 20
    if ! wait_for 30 wire_started t0 "$MID"; then
        bad "$n: trainer 0 never sent $MID wire bytes"; fine=0
    fi
    reap "${pub_pid[0]}" prc
    sent=$(wire_bytes t0)
    if [ "$prc" -eq 1 ] && in_file "$TMP/$n.pub0.err" "READY"; then
        ok "$n: publisher 0 gave up waiting for the release (exit 1)"
    else
        bad "$n: publisher 0 exit $prc, want 1 (release wait timed out)"
        show "$TMP/$n.pub0.err"; fine=0
    fi
    expect_mid_wire "$n" "$sent" || fine=0
    reap "$pull_pid" rc
    sed 's/^/#    pull: /' "$TMP/$n.pull.err" | tail -3
    expect_failed "$n" "$rc" trainer-0 || fine=0
    finish "$n"
    if [ "$fine" = 1 ]; then outcome "$n" "ok: exit 1 naming trainer-0, nothing installed"
    elif [ "$rc" = 124 ]; then outcome "$n" "FAIL: pull hung (killed after $BOUND s)"
    else outcome "$n" "FAIL: exit $rc: $(tail -1 "$TMP/$n.pull.err" | cut -c1-100)"; fi
}

# 4. Redis stops, for three times the pull's one-second client timeout,
# while the pull discovers the version; it resumes and the pull completes.
# The publishers keep the default five-second timeout, so only the pull
# sees the outage time out.
redis_stop_discovery() {
    local n=redis-stop-discovery rc fine=1
    shape t0 && shape t1
    start_publishers "$n" "$URL" || { outcome "$n" FAIL; finish "$n"; return; }
    signal STOP "$redis_pid"
    pull "$n" "$FAST" --verify --timeout 30
    if wait_for 10 redis_client_of inf; then
        sleep 3
        if alive "$pull_pid"; then ok "$n: the pull still waits after 3 s of stopped Redis"
        else bad "$n: the pull gave up while Redis was stopped"; fine=0; fi
    else
        bad "$n: the pull never connected to Redis"; fine=0
    fi
    signal CONT "$redis_pid"
    reap "$pull_pid" rc
    if expect_exact "$n" "$rc"; then expect_publishers "$n" || fine=0
    else fine=0; fi
    finish "$n"
    [ "$fine" = 1 ] && outcome "$n" "ok: byte-exact after SIGCONT" ||
        outcome "$n" "FAIL: exit $rc: $(tail -1 "$TMP/$n.pull.err" | cut -c1-100)"
}

# 5. Redis stops mid-wire, for four times everyone's one-second client
# timeout: the publishers' heartbeats and release waits and the pull's
# lease and install meet the outage. The publishers survive, the pull
# completes byte-exact once Redis resumes, the release reaches the
# publishers.
redis_stop_serving() {
    local n=redis-stop-serving rc fine=1
    shape t0 && shape t1
    start_publishers "$n" "$FAST" || { outcome "$n" FAIL; finish "$n"; return; }
    pull "$n" "$FAST" --verify --timeout 30
    if wait_for 30 wire_started t0 "$MID"; then
        signal STOP "$redis_pid"
        expect_mid_wire "$n" "$(wire_bytes t0)" || fine=0
        sleep 4
        if alive "${pub_pid[0]}" && alive "${pub_pid[1]}"; then
            ok "$n: both publishers alive after 4 s of stopped Redis"
        else
            bad "$n: a publisher exited while Redis was stopped"; fine=0
            show "$TMP/$n.pub0.err"; show "$TMP/$n.pub1.err"
        fi
        signal CONT "$redis_pid"
    else
        bad "$n: trainer 0 never sent $MID wire bytes"; fine=0
    fi
    reap "$pull_pid" rc
    if expect_exact "$n" "$rc"; then expect_publishers "$n" || fine=0
    else fine=0; fi
    # (the outage's start: its end is told by the next heartbeat, which
    # may come after the release ended the publisher)
    if in_file "$TMP/$n.pub0.err" "publisher rank 0 replica 0 (trainer-0): heartbeat of version 1 failed"; then
        ok "$n: the outage notices name rank, replica and session"
    else
        bad "$n: the outage notices do not name the replica"; show "$TMP/$n.pub0.err"; fine=0
    fi
    finish "$n"
    [ "$fine" = 1 ] && outcome "$n" "ok: publishers survived, byte-exact" ||
        outcome "$n" "FAIL: exit $rc: $(tail -1 "$TMP/$n.pull.err" | cut -c1-100)"
}

# The replica scenarios' trainer host 1 serves rank 1 and, after the
# failover, rank 0's replica too: its link is faster, so the pull that
# rereads every byte from it stays short.
REPLICA_RATE=8mbit

# expect_failed_over NAME TEXT: the pull replaced trainer-0 with its
# replica, its JSON naming trainer-0 of slot 0 as failed with TEXT.
expect_failed_over() {
    local out="$TMP/$1.pull.out"
    if in_file "$out" '"failovers":1' &&
       in_file "$out" '"failed_publishers":[{"publisher":"trainer-0","slot":0,"error":"' &&
       in_file "$out" "$2"; then
        ok "$1: failed over from trainer-0 ($2), recorded in --json"
        return 0
    fi
    bad "$1: no failover from trainer-0 ($2) in the JSON"; show "$out"
    return 1
}

# replica_fault NAME EARLY STRIKE TEXT DONE [PULL-ARGS...]: both trainers
# up, and rank 0's second replica on trainer host 1 before the pull when
# EARLY is 1; once trainer 0's wire passes MID, trainer-0 is frozen
# (SIGSTOP: the fault lands mid-wire) and STRIKE runs. The pull must
# complete byte-exact from the replica, its JSON naming trainer-0 as failed
# with TEXT; DONE is the outcome's text.
replica_fault() {
    local n=$1 early=$2 strike=$3 text=$4 done=$5 rc fine=1
    shift 5
    shape t0 && shape t1 "$REPLICA_RATE"
    start_publishers "$n" "$URL" || { outcome "$n" FAIL; finish "$n"; return; }
    if [ "$early" = 1 ]; then publish_replica "$n" 0 1 t1 "$URL" || fine=0; fi
    pull "$n" "$URL" --verify --timeout 30 "$@"
    if wait_for 30 wire_started t0 "$MID"; then
        signal STOP "${pub_pid[0]}"
        expect_mid_wire "$n" "$(wire_bytes t0)" || fine=0
        $strike "$n" || fine=0
    else
        bad "$n: trainer 0 never sent $MID wire bytes"; fine=0
    fi
    reap "$pull_pid" rc
    expect_exact "$n" "$rc" || fine=0
    expect_failed_over "$n" "$text" || fine=0
    finish "$n"
    [ "$fine" = 1 ] && outcome "$n" "ok: $done" ||
        outcome "$n" "FAIL: exit $rc: $(tail -1 "$TMP/$n.pull.err" | cut -c1-100)"
}

# 6. Rank 0's second replica starts once trainer 0's wire is under way,
# after the pull read the slot; then trainer-0 dies: the pull reads slot 0
# from the directory again, finds the newcomer, and completes from it.
late_replica() {
    local fine=0
    publish_replica "$1" 0 1 t1 "$URL" || fine=1
    kill_publisher
    return $fine
}
# 7. Trainer-0 frozen while its replica served from the start: after a
# second without progress (--stall-after 1) the pull counts it failed.
stay_frozen() { return 0; }

main() {
    make_hosts || { bad "setting up the namespaces"; return; }
    shape t0 && shape t1 || { bad "shaping the trainer links"; return; }
    start_redis || { bad "redis did not start"; show "$TMP/redis.log"; return; }
    redis_ping t0 && redis_ping t1 && redis_ping inf ||
        { bad "the hosts do not reach Redis across the bridge"; return; }
    ok "4 hosts on a bridge, trainer links at $WIRE_RATE"
    baseline
    want publisher-killed && wire_fault publisher-killed kill_publisher
    want publisher-exits && publisher_exits
    if want link-down; then
        wire_fault link-down link_down
        ip -n "$P-t0" link set eth0 up
    fi
    want redis-stop-discovery && redis_stop_discovery
    want redis-stop-serving && redis_stop_serving
    want replica-joins && replica_fault replica-joins 0 late_replica \
        "trainer-0, slot 0" "read from the late replica, byte-exact"
    want replica-frozen && replica_fault replica-frozen 1 stay_frozen \
        "no progress for 1 s" "stalled, failed over, byte-exact" \
        --stall-after 1
}

# want NAME: NAME is among RESHARD_MULTIHOST_ONLY (default: every scenario).
want() { [ -z "${RESHARD_MULTIHOST_ONLY:-}" ] || [[ " $RESHARD_MULTIHOST_ONLY " == *" $1 "* ]]; }

main
echo
echo "scenario                   outcome"
for row in "${table[@]}"; do echo "$row"; done
echo "$checks checks, $failures failures"
[ "$failures" -eq 0 ]
