"""The package as it is installed: one version for the library, the wheel,
the package and the `reshard` command; the library RESHARD_LIB names, else
the one the wheel bundles, from any working directory; every module of
python/reshard in the installed package. The tests marked installed run
under `make test` (RESHARD_TEST_INSTALLED=1), against the package pip
installed from the wheel into this interpreter's environment."""
import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import reshard
import under_test
from reshard import _lib, _version

installed = pytest.mark.skipif(
    not under_test.INSTALLED,
    reason="the installed package is tested with RESHARD_TEST_INSTALLED=1 "
           "(make test)")

PROBE = ("import reshard, reshard._lib as l; l.lib(); "
         "print(reshard.__file__); print(l.lib()._name)")


def _header_version():
    return _version._from_header(under_test.ROOT / "include" / "reshard" /
                                 "version.h")


def _loaded_libreshard():
    """The libreshard files mapped into this process."""
    with open("/proc/self/maps") as f:
        return {line.split(None, 5)[5].strip() for line in f
                if len(line.split(None, 5)) == 6 and
                os.path.basename(line.split()[-1]).startswith("libreshard")}


def _probe(cwd, **env):
    """(package file, library path) a new interpreter imports and loads,
    started in cwd with env (None values unset)."""
    full = dict(os.environ)
    for k, v in env.items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, env=full,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")[:2]


def test_one_version_for_package_library_and_header():
    assert reshard.__version__ == _header_version()
    assert reshard.library_version() == reshard.__version__


def test_the_header_version_is_read_exactly(tmp_path):
    h = tmp_path / "version.h"
    h.write_text("#define RS_VERSION_MAJOR 12\n#define RS_VERSION_MINOR 0\n"
                 "#define RS_VERSION_PATCH 7\n")
    assert _version._from_header(h) == "12.0.7"
    h.write_text("#define RS_VERSION_MAJOR 1\n#define RS_VERSION_PATCH 7\n")
    with pytest.raises(RuntimeError, match="RS_VERSION_MINOR"):
        _version._from_header(h)


def test_the_command_reports_the_same_version(tmp_path):
    cli = under_test.cli_path()
    assert cli and os.path.exists(cli), f"no reshard command at {cli}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "RESHARD_LIB")}
    out = subprocess.run([cli, "--version"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, f"reshard {reshard.__version__}\n")
    out = subprocess.run([cli, "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "usage" in out.stdout.lower()


def test_reshard_lib_overrides_the_library(tmp_path):
    copy = tmp_path / "libreshard-copy.so"
    shutil.copyfile(under_test.library_path(), copy)
    _, lib = _probe(tmp_path, RESHARD_LIB=str(copy))
    assert lib == str(copy)


@installed
def test_installed_version_is_the_wheels():
    assert importlib.metadata.version("reshard") == reshard.__version__
    from reshard import _wheel_version
    assert _wheel_version.version == reshard.__version__


@installed
def test_installed_package_and_bundled_library_are_loaded():
    assert sys.prefix != sys.base_prefix, "not a virtual environment"
    site = {Path(sysconfig.get_paths()[k]).resolve()
            for k in ("purelib", "platlib")}
    pkg = Path(reshard.__file__).resolve().parent
    assert pkg.parent in site, f"reshard imported from {pkg}, not {site}"
    assert under_test.ROOT not in pkg.parents
    assert "RESHARD_LIB" not in os.environ
    bundled = pkg / "lib" / "libreshard.so"
    assert _lib.lib()._name == str(bundled)
    assert _loaded_libreshard() == {str(bundled)}


@installed
def test_installed_package_loads_its_library_from_any_directory(tmp_path):
    pkg, lib = _probe(tmp_path, RESHARD_LIB=None, PYTHONPATH=None)
    assert pkg == reshard.__file__
    assert lib == str(Path(reshard.__file__).parent / "lib" / "libreshard.so")


@installed
def test_installed_command_is_in_the_environment():
    cli = Path(under_test.cli_path())
    assert cli.parent == Path(sys.prefix) / "bin"
    # linked with the static library: it needs no libreshard to run
    needed = subprocess.run(["ldd", str(cli)], capture_output=True,
                            text=True, timeout=60).stdout
    assert "libreshard" not in needed, needed


@installed
def test_installed_package_holds_every_module():
    def modules(root):
        return {p.relative_to(root).as_posix() for p in root.rglob("*.py")}
    src = modules(under_test.ROOT / "python" / "reshard")
    got = modules(Path(reshard.__file__).parent)
    assert src - got == set()
    assert got - src == {"_wheel_version.py"}



@installed
def test_vllm_finds_the_backend_through_the_wheels_entry_point():
    """vLLM loads its general plugins as entry_points(group=...) and calls
    each one's load(); the wheel's must be reshard.vllm.register."""
    import reshard.vllm
    eps = [ep for ep in importlib.metadata.entry_points(
        group="vllm.general_plugins") if ep.name == "reshard"]
    assert [ep.value for ep in eps] == ["reshard.vllm:register"]
    assert eps[0].load() is reshard.vllm.register
