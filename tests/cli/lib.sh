# Shared by the CLI tests (sourced after BIN is set): a scratch folder, a
# list of background processes, and typed checks that count themselves.
# On exit every process in `pids` is resumed and killed, `cli_cleanup_hook`
# runs if the test defines one, and the scratch folder is removed
# (KEEP_TMP=1 keeps it). End a test with `cli_done`.
TMP=$(mktemp -d)
pids=()
failures=0
checks=0

cli_cleanup() {
    exec 2>/dev/null # no "Killed" job notices
    if declare -F cli_cleanup_hook >/dev/null; then cli_cleanup_hook; fi
    for p in "${pids[@]}"; do kill -CONT "$p"; kill -KILL "$p"; done
    wait
    if [ -n "${KEEP_TMP:-}" ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cli_cleanup EXIT

ok() { checks=$((checks + 1)); echo "ok   - $1"; }
bad() {
    checks=$((checks + 1)); failures=$((failures + 1))
    echo "FAIL - $1"
    [ -s "$TMP/err" ] && sed 's/^/       stderr: /' "$TMP/err" | head -8
}

# expect_rc NAME CODE: the last command's exit code ($rc) is CODE.
expect_rc() {
    if [ "$rc" -eq "$2" ]; then ok "$1: exit $2"; else bad "$1: exit $rc, want $2"; fi
}

# expect_in NAME FILE NEEDLE...: FILE holds every needle (fixed strings).
expect_in() {
    local name=$1 file=$2 needle missing=""
    shift 2
    for needle in "$@"; do
        grep -qF -- "$needle" "$file" || missing="$missing '$needle'"
    done
    if [ -z "$missing" ]; then ok "$name: $(basename "$file") names$(printf " '%s'" "$@")"
    else bad "$name: $(basename "$file") lacks$missing"; sed 's/^/       /' "$file" | head -8; fi
}

# expect_not_in NAME FILE NEEDLE: FILE does not hold NEEDLE.
expect_not_in() {
    if grep -qF -- "$3" "$2"; then bad "$1: $(basename "$2") holds '$3'"
    else ok "$1: $(basename "$2") has no '$3'"; fi
}

# run ARGS...: runs the binary, leaving stdout in $TMP/out, stderr in
# $TMP/err and the exit code in $rc.
run() { "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?; }

# expect_err NAME NEEDLE...: stderr names every needle (case-insensitive).
expect_err() {
    local name=$1 needle missing=""
    shift
    for needle in "$@"; do
        grep -qiF -- "$needle" "$TMP/err" || missing="$missing '$needle'"
    done
    if [ -z "$missing" ]; then ok "$name: stderr names$(printf " '%s'" "$@")"
    else bad "$name: stderr lacks$missing"; fi
}

# expect_input_error NAME NEEDLE...: exit 2, nothing on stdout, and stderr
# naming every needle (case-insensitive).
expect_input_error() {
    local name=$1
    shift
    expect_rc "$name" 2
    if [ -s "$TMP/out" ]; then bad "$name: printed on stdout on bad input"; fi
    expect_err "$name" "$@"
}

# await_line FILE NEEDLE PID: waits (up to 20 s, while PID lives) for FILE
# to hold NEEDLE: 0 once it does, 1 otherwise.
await_line() {
    for _ in $(seq 200); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || break
        sleep 0.1
    done
    return 1
}

# published NAME V: waits (up to 20 s) for the line of version V of the
# publisher started last ($last_pid), whose output is $TMP/NAME.out and
# .err; fails the test with its stderr when the line never comes.
published() {
    await_line "$TMP/$1.out" "published version $2 " "$last_pid" && return 0
    bad "$1 did not publish version $2: $(cat "$TMP/$1.err")"
    return 1
}

# stage FILE KEY: KEY of the stage record of a pull's JSON line in FILE.
stage() {
    python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["stage"][sys.argv[2]])' "$1" "$2" 2>/dev/null
}

# Prints the count and exits 0 only when every check passed.
cli_done() {
    echo "$checks checks, $failures failures"
    [ "$failures" -eq 0 ]
    exit
}
