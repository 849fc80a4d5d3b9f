"""Which reshard the Python tests run: python/ of this source tree with a
build tree's libreshard (the default), or, with RESHARD_TEST_INSTALLED=1
(`make test`), the package installed in this interpreter's environment
with the library bundled in it and its `reshard` command."""
import os
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
INSTALLED = os.environ.get("RESHARD_TEST_INSTALLED") == "1"


def package_paths():
    """What goes before the tests' own folder on a process's path: python/
    of the source tree, unless the installed package is under test."""
    return [] if INSTALLED else [str(ROOT / "python")]


def child_env(env=None):
    """A copy of env (default os.environ) for a Python child process of a
    test: it imports the same reshard and the tests' helper modules."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(
        package_paths() + [str(HERE), env.get("PYTHONPATH", "")])
    return env


def library_path():
    """The libreshard the package loads first (RESHARD_LIB, the bundled
    one, a build tree's), or None."""
    from reshard import _lib
    found = _lib._candidates()
    return found[0] if found else None


def cli_path():
    """The `reshard` command: the one installed with the package (in the
    environment's scripts folder), else the one beside a build tree's
    library."""
    if INSTALLED:
        return os.path.join(sysconfig.get_path("scripts"), "reshard")
    lib = library_path()
    return os.path.join(os.path.dirname(lib), "reshard") if lib else None
