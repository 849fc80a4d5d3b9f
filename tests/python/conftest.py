"""Fixtures of the Python tests: where the package and library are, private
directories (file: in a temporary folder, a redis-server on a free port),
and the UCX settings every process of a test shares."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from under_test import package_paths  # noqa: E402

sys.path[:0] = package_paths()

# One machine: UCX over loopback tcp, never an emulated device transport.
os.environ.setdefault("UCX_TLS", "tcp")
if package_paths():
    os.environ.setdefault("PYTHONPATH", os.pathsep.join(package_paths()))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_redis(port, proc, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not answer PING")


class RedisServer:
    """A private redis-server (no persistence), stopped at teardown."""

    def __init__(self, workdir):
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (make deps)")
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        _wait_redis(self.port, self.proc)
        self.url = f"redis://127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server):
    return redis_server.url


@pytest.fixture
def file_dir(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    return f"file:{d}"


@pytest.fixture(params=["file", "redis"])
def directory(request, tmp_path):
    if request.param == "file":
        d = tmp_path / "dir"
        d.mkdir()
        yield f"file:{d}"
        return
    server = RedisServer(tmp_path)
    try:
        yield server.url
    finally:
        server.stop()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "newest_torch: a multi-process test of the library's own behaviour; "
        "`make test` runs it with the newest torch of its suites only")
