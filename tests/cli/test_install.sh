#!/usr/bin/env bash
# Using reshard from outside its source tree: `cmake --install` of the
# build that holds the CLI into a scratch prefix; the installed headers
# compile on their own (without the layout simulator's model.h and
# layout.h, which stay behind); examples/c/refit_pair.c builds with nothing
# but `pkg-config --cflags --libs reshard`, against the shared library and
# against the static one (Libs.private, Requires.private), and through a
# CMake project calling find_package(reshard); each build moves its tensors
# between forked trainer and inference processes over UCX and exits 0
# only when byte-exact. The installed CLI finds its library by RUNPATH.
# usage: bash test_install.sh <reshard-binary> <source-dir>
set -u
BIN=${1:?usage: test_install.sh <reshard-binary> <source-dir>}
SRC=${2:?usage: test_install.sh <reshard-binary> <source-dir>}
. "$(dirname "$0")/lib.sh"
BUILD=$(cd "$(dirname "$BIN")" && pwd)
PREFIX="$TMP/prefix"
EXAMPLE="$SRC/examples/c/refit_pair.c"

# A sanitized build's library needs its runtime in every program.
SAN=""
grep -q '^RESHARD_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" && SAN="-fsanitize=address,undefined"
grep -q '^RESHARD_TSAN:BOOL=ON' "$BUILD/CMakeCache.txt" && SAN="-fsanitize=thread"
# The programs are built by the tree's own compiler: one sanitizer runtime
# per process. clang's is shared (-shared-libasan) where the tree's is.
CC=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
[ -n "$CC" ] || CC=cc
if [ -n "$SAN" ] && [ "$SAN" != "-fsanitize=thread" ] &&
   "$CC" --version 2>/dev/null | grep -q clang; then
    RT=$("$CC" -print-file-name=libclang_rt.asan-x86_64.so)
    SAN="$SAN -shared-libasan -Wl,-rpath,$(dirname "$RT")"
fi

cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.out" 2>"$TMP/err"
rc=$?; expect_rc "cmake --install $BUILD" 0

PC=$(find "$PREFIX" -name reshard.pc -path '*/pkgconfig/*' | head -1)
LIBDIR=$(dirname "$(dirname "$PC")")
missing=""
for f in "$LIBDIR/libreshard.so" "$LIBDIR/libreshard.a" "$PREFIX/bin/reshard" \
         "$PREFIX/include/reshard/reshard.h" "$PREFIX/include/reshard/memory.h" \
         "$PREFIX/include/reshard/refit.h" "$LIBDIR/cmake/reshard/reshardConfig.cmake" \
         "$LIBDIR/cmake/reshard/reshardConfigVersion.cmake" "$PC"; do
    [ -e "$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then ok "installed: libraries, headers, CLI, reshard.pc, CMake package"
else bad "not installed:$missing"; fi
if [ -e "$PREFIX/include/reshard/model.h" ] || [ -e "$PREFIX/include/reshard/layout.h" ]; then
    bad "the layout simulator's headers are installed"
else ok "model.h and layout.h are not installed"; fi

# Every installed header compiles alone, C11, warnings as errors.
hdr_bad=""
for h in "$PREFIX"/include/reshard/*.h; do
    echo "#include <reshard/$(basename "$h")>" >"$TMP/one.c"
    cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$PREFIX/include" \
        "$TMP/one.c" 2>>"$TMP/err" || hdr_bad="$hdr_bad $(basename "$h")"
done
if [ -z "$hdr_bad" ]; then ok "every installed header compiles on its own"
else bad "headers that do not compile alone:$hdr_bad"; fi

pc() { PKG_CONFIG_PATH="$(dirname "$PC")" pkg-config "$@" reshard; }
FLAGS=$(pc --cflags --libs)
rc=$?; expect_rc "pkg-config --cflags --libs reshard" 0
case "$FLAGS" in
    *"$SRC"*|*"$BUILD"*) bad "pkg-config flags point into the source or build tree: $FLAGS" ;;
    *) ok "pkg-config flags stay inside the prefix" ;;
esac

# run_pair NAME PROGRAM [env...]: the example exits 0, byte-exact.
run_pair() {
    local name=$1 prog=$2 dir
    shift 2
    dir=$(mktemp -d "$TMP/dir.XXXXXX")
    env "$@" timeout 120 "$prog" "$dir" >"$TMP/pair.out" 2>"$TMP/err"
    rc=$?; expect_rc "$name: refit_pair" 0
    expect_in "$name" "$TMP/pair.out" "over ucx from 2 trainers" "every byte matches"
}

# shellcheck disable=SC2086 # FLAGS and SAN are lists of words
"$CC" -std=c11 -Wall -Wextra -Werror $SAN -o "$TMP/pair_shared" "$EXAMPLE" $FLAGS 2>"$TMP/err"
rc=$?; expect_rc "cc refit_pair.c \$(pkg-config --cflags --libs reshard)" 0
if ldd "$TMP/pair_shared" | grep -q "$LIBDIR/libreshard.so"; then
    bad "resolved libreshard without LD_LIBRARY_PATH"
else ok "libreshard comes only from the prefix"; fi
LD_LIBRARY_PATH="$LIBDIR" ldd "$TMP/pair_shared" >"$TMP/ldd.out" 2>&1
expect_in "shared" "$TMP/ldd.out" "$LIBDIR/libreshard.so"
run_pair shared "$TMP/pair_shared" LD_LIBRARY_PATH="$LIBDIR"

# The static library, with its private dependencies from reshard.pc.
STATIC_LIBS=$(pc --static --libs | sed 's/-lreshard\b//')
# shellcheck disable=SC2086
"$CC" -std=c11 -Wall -Wextra -Werror $SAN -o "$TMP/pair_static" "$EXAMPLE" \
    $(pc --cflags) "$LIBDIR/libreshard.a" $STATIC_LIBS 2>"$TMP/err"
rc=$?; expect_rc "cc refit_pair.c libreshard.a \$(pkg-config --static --libs reshard)" 0
if ldd "$TMP/pair_static" | grep -q libreshard; then bad "static build links libreshard.so"
else ok "static build needs no libreshard.so"; fi
run_pair static "$TMP/pair_static"

# A CMake project: find_package(reshard) and reshard::reshard.
mkdir -p "$TMP/consumer"
cat >"$TMP/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(reshard 0.1 REQUIRED)
add_executable(refit_pair "$EXAMPLE")
target_compile_options(refit_pair PRIVATE $SAN)
target_link_options(refit_pair PRIVATE $SAN)
target_link_libraries(refit_pair PRIVATE reshard::reshard)
CMAKE
cmake -S "$TMP/consumer" -B "$TMP/consumer/build" -DCMAKE_PREFIX_PATH="$PREFIX" \
    -DCMAKE_C_COMPILER="$CC" \
    >"$TMP/consumer.out" 2>"$TMP/err" &&
    cmake --build "$TMP/consumer/build" >>"$TMP/consumer.out" 2>>"$TMP/err"
rc=$?; expect_rc "CMake consumer with find_package(reshard)" 0
run_pair cmake "$TMP/consumer/build/refit_pair"

# The installed CLI finds the installed library on its own.
env -u LD_LIBRARY_PATH "$PREFIX/bin/reshard" --version >"$TMP/version.out" 2>"$TMP/err"
rc=$?; expect_rc "installed reshard --version" 0
expect_in "installed CLI" "$TMP/version.out" "reshard 0.1"
cli_done
