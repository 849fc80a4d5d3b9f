"""The trainer shard tables `reshard simulate --emit` writes for a model's
config.json and a trainer layout: the C simulator's view of what each
trainer rank publishes, a ground truth independent of the Python mapping."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from reshard import dtypes

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"


def _cli():
    lib = os.environ.get("RESHARD_LIB") or str(
        ROOT / "build-release" / "libreshard.so")
    cli = os.path.join(os.path.dirname(lib), "reshard")
    if not os.path.exists(cli):
        pytest.fail(f"reshard CLI not found next to the library ({cli})")
    return cli


def trainer_tables(model_json, spec, out):
    """Every trainer rank's shards, by rank: [(name, full shape, torch
    dtype, offset, shape)] in table order."""
    subprocess.run([_cli(), "simulate", "--model", str(model_json),
                    "--train", spec, "--infer", "vllm:tp=1",
                    "--device-memory", "1000000", "--emit", str(out)],
                   check=True, capture_output=True, timeout=120)
    ranks = []
    for path in sorted((Path(out) / "sources").glob("*.json"),
                       key=lambda p: int(p.stem)):
        table = json.loads(path.read_text())
        ranks.append([(t["name"], tuple(t["full_shape"]),
                       dtypes.from_name(t["dtype"]),
                       tuple(s["shard_offset"]), tuple(s["shape"]))
                      for t in table["tensors"] for s in t["shards"]])
    return ranks
