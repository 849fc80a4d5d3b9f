"""Worker processes (trainer and engine ranks) that never outlive the run.

Each worker runs in its own process group and dies with its launcher
(PR_SET_PDEATHSIG); `kill` ends every group at once. `supervise` waits for
all of them and stops the rest at the first failure or at the deadline. A
launcher that does work of its own instead (the benchmark's engine, which
may then be blocked inside a library wait for a version that will never
come) starts a watchdog thread that does the same and exits the process.
"""
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time


def die_with_parent():
    """Run in the child before exec (Linux; elsewhere `kill` has to do)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Workers:
    """commands: {name: argv}; timeout: seconds for the whole run;
    on_abort: cleanup the watchdog runs before it exits with status 1."""

    def __init__(self, commands, timeout, prog="refit", on_abort=None,
                 stdout=None):
        self.commands = commands
        self.timeout = timeout
        self.prog = prog
        self.on_abort = on_abort
        self.stdout = stdout
        self.procs = {}
        self.deadline = None
        self.done = threading.Event()

    def start(self, watchdog=False):
        self.deadline = time.monotonic() + self.timeout
        for name, cmd in self.commands.items():
            self.procs[name] = subprocess.Popen(
                cmd, start_new_session=True, preexec_fn=die_with_parent,
                stdout=self.stdout)
        if watchdog:
            threading.Thread(target=self._watch, daemon=True).start()

    def _problem(self):
        """Why the run must stop now, or None."""
        failed = [f"{n} exited with {p.returncode}"
                  for n, p in self.procs.items() if p.poll() not in (None, 0)]
        if failed:
            return ", ".join(failed)
        if time.monotonic() > self.deadline:
            return f"not done after {self.timeout:g} s"
        return None

    def supervise(self):
        """0 when every worker exited 0 in time; else 1, the others
        killed."""
        while any(p.poll() is None for p in self.procs.values()):
            why = self._problem()
            if why:
                break
            time.sleep(0.05)
        why = self._problem()
        self.kill()
        if why:
            print(f"{self.prog}: {why}; stopped", file=sys.stderr,
                  flush=True)
            return 1
        return 0

    def _watch(self):
        while not self.done.wait(0.1):
            why = self._problem()
            if why:
                print(f"{self.prog}: {why}; stopping", file=sys.stderr,
                      flush=True)
                self.kill()
                if self.on_abort is not None:
                    self.on_abort()
                os._exit(1)

    def kill(self):
        self.done.set()
        # Every group first, then the waits: a rank that outlives its peer
        # only prints the broken collective's traceback.
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs.values():
            p.wait()
