"""Test side of the end-to-end tests: trainer processes (started in their
own process group, driven over a pipe, stopped or killed on demand and
always reaped), the receiver's capture and live model, and the byte-exact
comparison with the ground truth.
"""
import dataclasses
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

import e2e_models
import reshard
from under_test import child_env

HERE = Path(__file__).resolve().parent
TRAINER = HERE / "e2e_trainer.py"
MODEL = "e2e"
# Bounds, never synchronization: a healthy step takes well under a second.
REPLY_TIMEOUT_S = 60.0
LIVE_FILL = 3.0   # what receiver parameters hold before the first apply


class TrainerError(RuntimeError):
    pass


class TrainerProc:
    """One trainer rank (or data-parallel replica) in its own process."""

    def __init__(self, directory, rank, world, backend, cfg, layout="tp",
                 replica=0, model=MODEL, script=TRAINER, staging=None):
        """`script` runs the rank (default e2e_trainer.py), given `cfg` as
        JSON (an e2e_models config, or already a JSON-able dict);
        `staging`: the Publisher's (None: its default)."""
        self.rank, self.replica = rank, replica
        if dataclasses.is_dataclass(cfg):
            cfg = e2e_models.to_json(cfg)
        args = dict(directory=directory, model=model, rank=rank, world=world,
                    replica=replica, backend=backend, layout=layout, cfg=cfg)
        if staging is not None:
            args["staging"] = staging
        env = child_env()
        self.proc = subprocess.Popen(
            [sys.executable, str(script), json.dumps(args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            start_new_session=True, text=True, bufsize=1)
        self.stopped = False

    @property
    def pid(self):
        return self.proc.pid

    def __repr__(self):
        return f"<trainer rank {self.rank} replica {self.replica}>"

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def read(self, timeout_s=REPLY_TIMEOUT_S):
        """The next reply line; TrainerError if it exits or says error."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not ready:
            raise TrainerError(f"{self!r}: no reply in {timeout_s} s")
        line = self.proc.stdout.readline()
        if not line:
            raise TrainerError(f"{self!r} exited ({self.proc.wait(10)})")
        msg = json.loads(line)
        if "error" in msg:
            raise TrainerError(f"{self!r}: {msg['error']}")
        return msg

    def request(self, **cmd):
        self.send(**cmd)
        return self.read()

    def signal(self, sig):
        os.killpg(self.proc.pid, sig)

    def freeze(self):
        self.signal(signal.SIGSTOP)
        self.stopped = True

    def thaw(self):
        self.signal(signal.SIGCONT)
        self.stopped = False

    def kill(self):
        """SIGKILL the process group and reap it."""
        if self.proc.poll() is None:
            try:
                self.signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)

    def close(self):
        """Asks it to quit; kills it if it does not within a bound."""
        if self.proc.poll() is None and not self.stopped:
            try:
                self.send(cmd="quit")
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


class Trainers:
    """A trainer world: `world` ranks, each with `replicas` data-parallel
    replicas, publishing one model. Versions are published rank by rank,
    replica 0 of every rank first, so the order in which publishers join
    a slot (and hence which one a receiver's salt picks) is fixed."""

    def __init__(self, directory, backend, cfg, world=2, replicas=1,
                 layout="tp", base_seed=1, model=MODEL, staging=None):
        self.cfg, self.base_seed = cfg, base_seed
        self.procs = []
        try:
            for k in range(replicas):
                for r in range(world):
                    self.procs.append(TrainerProc(directory, r, world, backend,
                                                  cfg, layout, k, model,
                                                  staging=staging))
            for p in self.procs:
                p.read()  # "ready": torch imported, tensors registered
        except BaseException:
            self.close()
            raise

    def proc(self, rank, replica=0):
        return next(p for p in self.procs
                    if p.rank == rank and p.replica == replica)

    def seed(self, version):
        return e2e_models.version_seed(self.base_seed, version)

    def fulls(self, version):
        """The full tensors version `version` publishes."""
        return e2e_models.full_tensors(self.cfg, self.seed(version))

    def publish(self, version):
        for p in self.procs:
            if p.proc.poll() is None:
                p.request(cmd="publish", version=version,
                          seed=self.seed(version))

    def wait_released(self, version, timeout_s=30):
        live = [p for p in self.procs if p.proc.poll() is None]
        for p in live:
            p.send(cmd="wait_released", version=version, timeout_s=timeout_s)
        for p in live:
            p.read(timeout_s + 10)

    def close(self):
        for p in self.procs:
            p.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- the receiver side -------------------------------------------------------
def capture(cfg, tp_rank, tp_size):
    """A live model rank and reshard's capture of its loader over
    placeholders of the published full tensors. Its parameters hold
    LIVE_FILL (no loader writes it) except the constants the loader writes
    (zeroed padding rows): a serving model was loaded once, so those bytes
    are what it holds there (and what the receiver installs with each
    version)."""
    model = e2e_models.build(cfg, tp_rank, tp_size, fill=LIVE_FILL)
    before = snapshot(model)
    cap = reshard.capture(model, e2e_models.sources(cfg))
    assert_equal(model, before, "capture touched the live model")
    write_fills(model, cap)
    return model, cap


def write_fills(model, cap):
    """Performs the capture's constant writes on the model."""
    params = params_of(model)
    with torch.no_grad():
        for f in cap.fills:
            p = params[f["param"]].detach()
            p.as_strided(f["dest_shape"], f["dest_stride"],
                         p.storage_offset() + f["dest_offset"]).fill_(
                             f["value"])


def params_of(model):
    return dict(model.named_parameters())


def snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_equal(model, want, what):
    """Every parameter byte-equal (torch.equal) to `want`."""
    got = params_of(model)
    assert set(got) == set(want), what
    bad = [n for n in want if not torch.equal(got[n].detach(), want[n])]
    assert not bad, f"{what}: parameters differ: {bad}"


def receiver(directory, backend, cap, model, salt=0, holder=None, **kw):
    kw.setdefault("discover_timeout_s", 20)
    kw.setdefault("timeout_s", 20)
    return reshard.Receiver(directory, MODEL, cap, params_of(model),
                            backend=backend, salt=salt, holder=holder, **kw)


# -- fault helpers -----------------------------------------------------------
def file_dir_path(directory):
    assert directory.startswith("file:"), directory
    return Path(directory[len("file:"):])


def wait_for(cond, timeout_s, what):
    """Polls cond() until true (a bound, not a synchronization: used only
    for events the library exposes no handshake for)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def redis_call(url, *args, timeout_s=5.0):
    """One command to a redis server (RESP); the reply's first line."""
    host, port = url[len("redis://"):].rsplit(":", 1)
    req = f"*{len(args)}\r\n" + "".join(
        f"${len(str(a).encode())}\r\n{a}\r\n" for a in args)
    with socket.create_connection((host, int(port)), timeout_s) as s:
        s.sendall(req.encode())
        return s.makefile("rb").readline().decode().strip()


def lease_taken(directory, version, holder):
    """True once `holder`'s lease on `version` is in the directory (the
    receiver takes it when its stage begins)."""
    if directory.startswith("redis://"):
        key = f"rs:{{{MODEL}}}:{version}:leases"
        return redis_call(directory, "HEXISTS", key, holder) == ":1"
    return (file_dir_path(directory) / MODEL / str(version)
            / f"lease-{holder}").exists()


class InThread:
    """Runs fn() in a thread; .result() re-raises what it raised."""

    def __init__(self, fn):
        self._out = {}
        self._t = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._t.start()

    def _run(self, fn):
        try:
            self._out["value"] = fn()
        except BaseException as e:  # handed back to the test
            self._out["error"] = e

    def done(self):
        return not self._t.is_alive()

    def result(self, timeout_s=REPLY_TIMEOUT_S):
        self._t.join(timeout_s)
        if self._t.is_alive():
            raise AssertionError(f"call still running after {timeout_s} s")
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]
