"""reshard as a vLLM weight-transfer backend named "reshard" (docs/vllm.md).

`register()` adds the worker-side and trainer-side engines to vLLM's two
factories (vLLM calls it through its `vllm.general_plugins` entry point).
Importing this package imports no vLLM; the engine classes load with it.
"""
from .client import DirectClient

NAME = "reshard"

_LAZY = {
    "ReshardWeightTransferEngine": "worker", "ReshardInitInfo": "worker",
    "ReshardUpdateInfo": "worker",
    "ReshardTrainerWeightTransferEngine": "trainer",
    "ReshardTrainerInitInfo": "trainer",
}

__all__ = ["register", "DirectClient", "NAME", *_LAZY]


def register():
    """Registers backend "reshard" with vLLM's worker-side and trainer-side
    factories, by module path (the engines load when first created).
    Calling it again does nothing."""
    from vllm.distributed.weight_transfer.factory import (
        WeightTransferEngineFactory, WeightTransferTrainerFactory)
    for factory, module, cls in (
            (WeightTransferEngineFactory, "worker",
             "ReshardWeightTransferEngine"),
            (WeightTransferTrainerFactory, "trainer",
             "ReshardTrainerWeightTransferEngine")):
        try:
            factory.register_engine(NAME, f"{__name__}.{module}", cls)
        except ValueError:
            # The factories refuse a name registered before (by an earlier
            # call: this one registers only by module path and class name).
            pass


def __getattr__(name):
    if name in _LAZY:
        import importlib
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
