"""The trainer's weights as reshard registrations: a (name, tensor) source
read again every round, each tensor registered once and registered again
only when the source hands out another tensor for its name. No vLLM."""
import torch

from ..errors import InvalidArgument


def pairs_of(source):
    """A function returning a fresh iterator of (name, tensor) over
    `source`: a vLLM WeightSource (its full tensors), a torch module (its
    parameters, DTensors as they are), a dict, a list of pairs, or a
    function returning pairs. One-shot iterators are refused: every round
    reads the source again."""
    if callable(getattr(source, "iter_full", None)) and \
            hasattr(source, "metadata"):
        return source.iter_full
    if isinstance(source, torch.nn.Module):
        return source.named_parameters
    if isinstance(source, dict):
        return lambda: iter(source.items())
    if isinstance(source, (list, tuple)):
        return lambda: iter(source)
    if callable(source):
        return source
    raise InvalidArgument(
        f"reshard trainer: source must be a WeightSource, a module, a dict, "
        f"a list of (name, tensor) or a function returning them, got "
        f"{type(source).__name__} (an iterator is read once, a source every "
        f"round)")


def specs_of(source, pairs):
    """{name: (full shape, dtype)} of every tensor, in source order: the
    WeightSource's metadata when it has one (it declares the whole model),
    else the tensors' own (a DTensor's shape is its full shape)."""
    metadata = getattr(source, "metadata", None)
    if metadata is not None and not isinstance(source, torch.nn.Module):
        return {m.name: (tuple(m.shape), m.dtype) for m in metadata}
    return {n: (tuple(t.shape), t.dtype) for n, t in pairs()}


def _is_dtensor(t):
    return callable(getattr(t, "full_tensor", None)) and \
        hasattr(t, "placements")


class Registrations:
    """What one publisher serves of the source: `refresh(publisher)`
    registers each (name, tensor) of the round with the publisher, keeping
    a registration that serves the source's own tensor when the round hands
    out the same object (the publisher follows its storage) and replacing
    the others. A registration that serves a copy (a strided tensor made
    contiguous, a gathered DTensor) is made again every round: the copy
    holds the bytes of the round it was taken in."""

    def __init__(self, pairs):
        self._pairs = pairs
        self._held = {}   # name -> the tensor object registered for it

    def refresh(self, publisher):
        seen = set()
        for name, tensor in self._pairs():
            if name in seen:
                raise InvalidArgument(f"reshard trainer: the source yields "
                                      f"'{name}' twice in one round")
            seen.add(name)
            self._one(publisher, name, tensor)
        for name in [n for n in self._held if n not in seen]:
            publisher.unregister(name)
            del self._held[name]

    def _one(self, publisher, name, tensor):
        if self._held.get(name) is tensor:
            return
        if name in self._held:
            publisher.unregister(name)
            del self._held[name]
        if _is_dtensor(tensor) and hasattr(publisher, "register_dtensor"):
            publisher.register_dtensor(name, tensor)
            self._held[name] = tensor
            return
        served = tensor.full_tensor() if _is_dtensor(tensor) else tensor
        if not served.is_contiguous():
            served = served.contiguous()
        publisher.register(name, served)
        # Only a registration of the source's own tensor follows it; a
        # copy is taken again next round (and receivers replan).
        self._held[name] = tensor if served is tensor else None
