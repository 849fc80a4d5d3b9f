"""examples/python/vllm_refit.py runs as docs/vllm.md shows: a
transformers trainer refits vLLM's own Qwen2 class twice through the
reshard backend, every byte checked against vLLM's loader. Needs vLLM."""
import importlib.util
import subprocess
import sys

import pytest

from under_test import ROOT, child_env

# The example runs in a process of its own: no need to import vLLM here.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM is not installed")


def test_example_vllm_refit():
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples/python/vllm_refit.py")],
        env=child_env(),
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("version")]
    assert len(lines) == 2 and all("byte-equal" in ln for ln in lines), \
        out.stdout
