"""Publisher-side pieces the Python tests share: a set of publisher ranks
(what every test's Trainers builds on), one publish-and-pull round trip
of full tensors, a receiver of whole tensors, and the backend a test
parameter names."""
import torch

import reshard


class TrainerRanks:
    """Publisher ranks of one model (`self.pubs`, filled by the subclass):
    each call goes to every rank; closed at the end of a `with`."""

    def __init__(self):
        self.pubs = []

    def publish(self, version):
        for p in self.pubs:
            p.publish(version)

    def wait_released(self, version):
        for p in self.pubs:
            p.wait_released(version, timeout_s=20)

    def close(self):
        for p in self.pubs:
            p.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def publish_and_pull(directory, cap, fulls, params, *, model, **kw):
    """Publish every full tensor of `fulls` the capture reads from one
    trainer rank over cma, pull version 1 of `model` into `params` with a
    Receiver over `cap` (keywords `kw`); returns the receiver's
    left_out."""
    pub = reshard.Publisher(directory, model, 0, 1, backend="cma")
    try:
        for name in cap.sources:
            pub.register(name, fulls[name].contiguous())
        pub.publish(1)
        with reshard.Receiver(directory, model, cap, params, backend="cma",
                              discover_timeout_s=20, **kw) as r:
            r.pull(1)
            return r.left_out
    finally:
        pub.close()


def whole_receiver(directory, specs, model="m"):
    """(Receiver, params): a cma Receiver of every tensor of `specs`
    ({name: (shape, dtype)}) whole, into zeroed parameters of the same
    name and dtype; its capture is a real one of a loader that copies each
    source into its parameter."""
    params = {n: torch.zeros(s, dtype=d) for n, (s, d) in specs.items()}

    def load(weights):
        for name, w in weights:
            params[name].copy_(w)
    cap = reshard.capture(sources=dict(specs), load=load, params=params)
    return reshard.Receiver(directory, model, cap, params, backend="cma",
                            discover_timeout_s=60), params


def backend(name, monkeypatch):
    """The backend of a test parameter: "ucx-<tls>" is ucx over that
    UCX_TLS (set for the test only), any other name is itself."""
    if name.startswith("ucx"):
        monkeypatch.setenv("UCX_TLS", name[4:])
        return "ucx"
    return name
