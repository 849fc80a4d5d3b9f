#!/usr/bin/env bash
# The layer check (scripts/check_layers.py) passes on this tree and this
# build's objects, and fails, naming the file and the rule, on a planted
# upward #include, a public header including a private one, and an object
# calling a layer above its own.
#   test_layers.sh SOURCE_DIR BUILD_DIR
set -u
SRC=$1
BUILD=$2
CHECK="python3 scripts/check_layers.py"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect_fail WHAT PATTERN CMD...: CMD exits 1 and prints PATTERN.
expect_fail() {
    local what=$1 pattern=$2; shift 2
    local out
    out=$("$@" 2>&1); local rc=$?
    [ "$rc" = 1 ] || { echo "$out"; fail "$what: exit $rc, want 1"; }
    grep -qF -- "$pattern" <<<"$out" || { echo "$out"; fail "$what: no '$pattern'"; }
    echo "ok: $what"
}

(cd "$SRC" && $CHECK --build "$BUILD") || fail "the tree breaks its layers"
echo "ok: the tree and its objects"

# A copy of the tree to plant violations in.
mkdir -p "$TMP/tree"
cp -r "$SRC/src" "$SRC/include" "$SRC/tools" "$SRC/bench" "$SRC/scripts" "$TMP/tree/"
cd "$TMP/tree" || exit 1
$CHECK >/dev/null || fail "the copy is not clean"

# plant FILE HEADER WHAT PATTERN: with `#include "HEADER"` appended to
# FILE the check fails printing PATTERN (@LINE@: the planted line); FILE is
# restored after.
plant() {
    local file=$1 header=$2 what=$3 pattern=$4
    echo "#include \"$header\"" >>"$file"
    expect_fail "$what" "${pattern//@LINE@/$(wc -l <"$file")}" $CHECK
    cp "$SRC/$file" "$file"
}
plant src/core/status.c plan/planner.h "core includes plan" \
    'src/core/status.c:@LINE@: #include "plan/planner.h": plan header src/plan/planner.h: core may use only itself'
plant src/dir/entry.c reshard/refit.h "dir includes refit's public header" \
    'src/dir/entry.c:@LINE@: #include "reshard/refit.h": refit header include/reshard/refit.h: dir may use core, dir'
plant src/layout/spec.c plan/planner.h "layout includes plan's private header" \
    'plan header src/plan/planner.h: layout may use core, geom, model, layout and the public API'
plant include/reshard/status.h core/json.h "a public header includes a private one" \
    'include/reshard/status.h:@LINE@: #include "core/json.h": a public header includes only public headers'
plant tools/reshard/main.c core/clock.h "the CLI includes a private header" \
    'core header src/core/clock.h: tools may use only itself and the public API'
echo '#include "model/grid.h"' >>src/layout/spec.c
$CHECK >/dev/null || fail "layout may include model's private headers"
cp "$SRC/src/layout/spec.c" src/layout/spec.c

# Calls: a fake build tree whose core object calls into plan.
obj() { mkdir -p "$(dirname "$2")"; printf '%s\n' "$1" | cc -x c -c -o "$2" - || fail "cc"; }
B=$TMP/build/CMakeFiles
obj 'int rs__plan_step(void) { return 1; }' "$B/reshard_obj.dir/src/plan/step.c.o"
obj 'int rs__core_base(void) { return 2; }' "$B/reshard_core_obj.dir/src/core/base.c.o"
obj 'int rs__core_base(void); int rs__geom_up(void) { return rs__core_base(); }' \
    "$B/reshard_obj.dir/src/geom/up.c.o"
$CHECK --build "$TMP/build" >/dev/null || fail "geom may call core"
obj 'int rs__plan_step(void); int rs__core_up(void) { return rs__plan_step(); }' \
    "$B/reshard_core_obj.dir/src/core/up.c.o"
expect_fail "core calls plan" \
    "CMakeFiles/reshard_core_obj.dir/src/core/up.c.o: calls rs__plan_step, defined in plan (CMakeFiles/reshard_obj.dir/src/plan/step.c.o): core may use only itself" \
    $CHECK --build "$TMP/build"
echo "PASS"
