"""A weight-sync client over worker engines in this process: what vLLM's
worker does with each control-plane call (parse the dict, call the
engine), for a trainer colocated with its engine and for tests. No vLLM."""


class DirectClient:
    """Drives worker-side engines in this process, one call after the
    other on each (as a vLLM engine's `collective_rpc` does on its workers,
    but in sequence: ranks that commit as a group need a process each)."""

    def __init__(self, *engines):
        self.engines = list(engines)

    def init_weight_transfer_engine(self, init_info):
        for e in self.engines:
            e.init_transfer_engine(e.parse_init_info(init_info))

    def start_weight_update(self):
        for e in self.engines:
            e.start_weight_update()

    def update_weights(self, update_info):
        """`update_info`: one dict for every engine, or a list with one per
        engine (vLLM's per-rank form)."""
        infos = update_info if isinstance(update_info, list) else \
            [update_info] * len(self.engines)
        for e, info in zip(self.engines, infos, strict=True):
            e.update_weights(info)

    def finish_weight_update(self, weight_version=None):
        for e in self.engines:
            e.finish_weight_update()

    def shutdown_weight_transfer_engine(self):
        for e in self.engines:
            e.shutdown()
