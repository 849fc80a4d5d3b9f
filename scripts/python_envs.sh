#!/usr/bin/env bash
# The Python environments of `make deps` and `make test`, all outside the
# source tree.
#
#   python_envs.sh deps VENV PYTHON REQUIREMENTS
#     The environment of current PyTorch: made once with PYTHON's venv and
#     pip install -r REQUIREMENTS, and made again only when REQUIREMENTS
#     changes (its sha256 is kept in VENV/.reshard-requirements, which also
#     marks VENV as made here). A VENV made otherwise is never changed; it is
#     used when it holds the version every name==version line of
#     REQUIREMENTS pins.
#   python_envs.sh test DIR WHEEL TORCH1_PYTHON TORCH2_VENV
#     Two new environments, DIR/torch1 and DIR/torch2 (DIR is removed first),
#     with the wheel installed into each and nothing else of their own:
#     torch1 from TORCH1_PYTHON, seeing its system packages (Debian's torch
#     1.13 and pytest); torch2 from TORCH2_VENV's interpreter, reaching
#     TORCH2_VENV's packages (torch 2.x, vLLM, pytest) through a .pth file,
#     so nothing is downloaded again. Prints the interpreters as the CMake
#     list RESHARD_TEST_PYTHONS takes: torch1=...;torch2=...
set -euo pipefail

fail() { echo "python_envs.sh: $*" >&2; exit 1; }

# check_pins VENV REQUIREMENTS: VENV holds every pinned version.
check_pins() {
    "$1/bin/python" - "$2" <<'EOF' || exit 1
import importlib.metadata as md
import re
import sys

req = sys.argv[1]
wrong = []
for line in open(req):
    m = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)", line.split("#")[0].strip())
    if m is None:
        continue
    try:
        have = md.version(m[1])
    except md.PackageNotFoundError:
        have = None
    if have is None or have.split("+")[0] != m[2]:
        wrong.append(f"{m[1]}: {have or 'not installed'}, {req} pins {m[2]}")
if wrong:
    sys.exit(f"python_envs.sh: {sys.prefix} was not made by make deps and "
             "is left as it is, but it does not match:\n  " +
             "\n  ".join(wrong))
EOF
}

deps() {
    local venv=$1 python=$2 req=$3
    [ -f "$req" ] || fail "no requirements file $req"
    local want stamp=$venv/.reshard-requirements
    want=$(sha256sum <"$req" | cut -d' ' -f1)
    if [ -f "$stamp" ]; then
        if [ "$(cat "$stamp")" = "$want" ]; then
            echo "python environment $venv: up to date with $req"
            return
        fi
        echo "python environment $venv: $req changed, making it again"
        rm -rf "$venv"
    elif [ -e "$venv" ]; then
        check_pins "$venv" "$req"
        echo "python environment $venv: made elsewhere, holds what $req pins"
        return
    fi
    echo "python environment $venv: making it from $req (pip downloads" \
         "what its cache does not hold: PyTorch and vLLM are several GB)"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
    # Marks it as made here before anything is installed, so a run cut
    # short is made again rather than taken as made elsewhere.
    echo incomplete >"$stamp"
    "$venv/bin/python" -m pip install -q -r "$req"
    echo "$want" >"$stamp"
}

site_packages() {
    "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

test_envs() {
    local dir=$1 wheel=$2 torch1=$3 torch2=$4
    [ -f "$wheel" ] || fail "no wheel $wheel"
    [ -x "$torch2/bin/python" ] || fail "no environment $torch2 (make deps)"
    rm -rf "$dir"
    mkdir -p "$dir"
    "$torch1" -m venv --without-pip --system-site-packages "$dir/torch1"
    "$torch2/bin/python" -m venv --without-pip "$dir/torch2"
    echo "import site; site.addsitedir('$(site_packages "$torch2/bin/python")')" \
        >"$(site_packages "$dir/torch2/bin/python")/reshard-torch2-deps.pth"
    local env
    for env in torch1 torch2; do
        "$torch1" -m pip --python "$dir/$env/bin/python" install -q \
            --no-deps --no-index "$wheel" >&2
    done
    echo "torch1=$dir/torch1/bin/python;torch2=$dir/torch2/bin/python"
}

case "${1:-}" in
    deps) [ $# = 4 ] || fail "usage: deps VENV PYTHON REQUIREMENTS"
          deps "$2" "$3" "$4" ;;
    test) [ $# = 5 ] || fail "usage: test DIR WHEEL TORCH1_PYTHON TORCH2_VENV"
          test_envs "$2" "$3" "$4" "$5" ;;
    *) fail "usage: python_envs.sh deps|test ..." ;;
esac
