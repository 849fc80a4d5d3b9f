"""Megatron-Core parameters published under Hugging Face names, in one call.

`register_model(publisher, model.named_parameters(), hf_config, state)`
maps every parameter of one Megatron-Core rank (GPT decoder naming:
embedding.word_embeddings, decoder.layers.N.self_attention.linear_qkv /
linear_proj, mlp.linear_fc1 / linear_fc2, MoE routers and experts,
decoder.final_layernorm, output_layer) onto the Hugging Face tensors it
holds boxes of, and registers them with the publisher's own calls (views
of the parameters, nothing copied). The rank's place comes from
`ParallelState`: tensor-parallel rank and size, the first global layer of
its pipeline stage, expert-parallel rank and size, expert tensor-parallel
rank and size. Every parameter is checked against the config's shapes
before anything is registered.
"""
import re
from dataclasses import dataclass

from .hf_config import model_shape
from .layouts import LayoutError

_MODULE_PREFIX = "module."


@dataclass(frozen=True)
class ParallelState:
    """Where one Megatron rank sits: its tensor-parallel rank and size,
    the global index of its pipeline stage's first decoder layer, its
    expert-parallel rank and size (routed experts split into equal
    contiguous blocks) and its expert tensor-parallel rank and size."""
    tp_rank: int = 0
    tp_size: int = 1
    layer_offset: int = 0
    ep_rank: int = 0
    ep_size: int = 1
    etp_rank: int = 0
    etp_size: int = 1

    def check(self):
        for rank, size, what in ((self.tp_rank, self.tp_size, "tp"),
                                 (self.ep_rank, self.ep_size, "ep"),
                                 (self.etp_rank, self.etp_size, "etp")):
            if size < 1 or not 0 <= rank < size:
                raise LayoutError(f"megatron: {what}_rank {rank} is outside "
                                  f"{what}_size {size}")
        if self.layer_offset < 0:
            raise LayoutError(f"megatron: layer_offset {self.layer_offset} "
                              "is negative")


class _Plan:
    """The registrations of one rank, collected and checked before any is
    made: (publisher method, args, the Hugging Face names it registers)."""

    def __init__(self, shape, state):
        self.shape, self.st = shape, state
        self.full = dict(shape.tensors())
        self.calls = []
        self.param = None   # the Megatron name being mapped, for messages

    def fail(self, what):
        raise LayoutError(f"megatron: parameter '{self.param}': {what}")

    def full_shape(self, hf):
        if hf not in self.full:
            self.fail(f"maps to '{hf}', which the config's checkpoint does "
                      "not have")
        return self.full[hf]

    def expect(self, t, shape, why):
        if tuple(t.shape) != tuple(shape):
            self.fail(f"shape {list(t.shape)}, the config gives "
                      f"{list(shape)} ({why})")

    def per_rank(self, size, world, what):
        if size % world:
            self.fail(f"{what} {size} does not divide over {world} ranks")
        return size // world

    def add(self, method, names, *args):
        self.calls.append((method, tuple(names), args))

    # -- the layouts ---------------------------------------------------
    def replicated(self, hf, t):
        self.expect(t, self.full_shape(hf), "replicated")
        self.add("register_replicated", (hf,), hf, t)

    def row(self, hf, t, rank, world):
        full = self.full_shape(hf)
        cols = self.per_rank(full[1], world, f"'{hf}' input dim")
        self.expect(t, (full[0], cols), f"'{hf}' split on dim 1")
        self.add("register_shard", (hf,), hf, t, full, 1, rank, world)

    def vocab(self, hf, t):
        """Megatron pads the vocabulary to a multiple of tp_size and gives
        each rank equal rows of the padded table; rows past the real
        vocabulary are padding, never published."""
        full = self.full_shape(hf)
        st = self.st
        if t.dim() != 2 or t.shape[1] != full[1] or \
                t.shape[0] * st.tp_size < full[0]:
            self.fail(f"shape {list(t.shape)} is not a tp_size "
                      f"{st.tp_size} shard of the padded vocabulary of "
                      f"'{hf}' {list(full)}")
        rows = t.shape[0]
        start = st.tp_rank * rows
        n = min(rows, full[0] - start)
        if n > 0:
            view = t if n == rows else t.narrow(0, 0, n)
            self.add("register", (hf,), hf, view, full, (start, 0))

    def gate_up(self, gate, up, t, rank, world):
        full = self.full_shape(gate)
        self.full_shape(up)
        rows = self.per_rank(full[0], world, f"'{gate}' dim 0")
        self.expect(t, (2 * rows,) + tuple(full[1:]),
                    f"[gate; up] rows of a {world}-way split")
        self.add("register_fused", (gate, up), (gate, up), t, full, rank,
                 world)

    def qkv(self, names, t):
        """linear_qkv: KV-head groups [q heads, k, v]. With more ranks than
        KV heads each rank holds one group's k and v whole (tp/kv ranks
        share it) and its own q heads; the group's first rank publishes k
        and v, so every element is published once."""
        sh, st = self.shape, self.st
        heads, kv, hd, tp = sh.num_heads, sh.num_kv_heads, sh.head_dim, \
            st.tp_size
        fulls = [self.full_shape(n) for n in names]
        rest = tuple(fulls[0][1:])
        q_rows = self.per_rank(heads, tp, "num_heads") * hd
        if kv % tp == 0:
            self.expect(t, ((heads + 2 * kv) // tp * hd,) + rest,
                        f"{kv // tp} KV-head groups per rank")
            self.add("register_fused_qkv", names, names, t, heads, kv, hd,
                     st.tp_rank, tp)
            return
        if tp % kv:
            self.fail(f"tp_size {tp} and {kv} KV heads do not divide one "
                      "another")
        self.expect(t, (q_rows + 2 * hd,) + rest,
                    f"{heads // tp} q heads and one shared KV head per rank")
        zeros = (0,) * len(rest)
        self.add("register", names[:1], names[0], t.narrow(0, 0, q_rows),
                 fulls[0], (st.tp_rank * q_rows,) + zeros)
        share = tp // kv
        if st.tp_rank % share == 0:
            g = st.tp_rank // share
            for j, name in enumerate(names[1:]):
                self.add("register", (name,), name,
                         t.narrow(0, q_rows + j * hd, hd), fulls[1 + j],
                         (g * hd,) + zeros)

    def expert_index(self, local):
        sh, st = self.shape, self.st
        per = self.per_rank(sh.num_experts, st.ep_size, "num_experts")
        if local >= per:
            self.fail(f"local expert {local} is outside the {per} experts "
                      f"of an ep rank")
        return st.ep_rank * per + local


# Megatron layer suffix -> (Hugging Face suffix, kind).
_LAYER = {
    "input_layernorm.weight": ("input_layernorm.weight", "rep"),
    "self_attention.linear_qkv.layer_norm_weight":
        ("input_layernorm.weight", "rep"),
    "pre_mlp_layernorm.weight": ("post_attention_layernorm.weight", "rep"),
    "mlp.linear_fc1.layer_norm_weight":
        ("post_attention_layernorm.weight", "rep"),
    "self_attention.q_layernorm.weight": ("self_attn.q_norm.weight", "rep"),
    "self_attention.k_layernorm.weight": ("self_attn.k_norm.weight", "rep"),
    "self_attention.linear_qkv.weight": ("weight", "qkv"),
    "self_attention.linear_qkv.bias": ("bias", "qkv"),
    "self_attention.linear_proj.weight": ("self_attn.o_proj.weight", "row"),
    "self_attention.linear_proj.bias": ("self_attn.o_proj.bias", "rep"),
    "mlp.linear_fc1.weight": ("weight", "gate_up"),
    "mlp.linear_fc1.bias": ("bias", "gate_up"),
    "mlp.linear_fc2.weight": ("mlp.down_proj.weight", "row"),
    "mlp.linear_fc2.bias": ("mlp.down_proj.bias", "rep"),
    "mlp.router.weight": (None, "router"),
}
_LAYER_RE = re.compile(r"decoder\.layers\.(\d+)\.(.+)")
# SequentialMLP and TEGroupedMLP name an expert's weights differently.
_EXPERT_RES = (
    re.compile(r"mlp\.experts\.local_experts\.(?P<e>\d+)\.linear_fc"
               r"(?P<fc>[12])\.weight"),
    re.compile(r"mlp\.experts\.linear_fc(?P<fc>[12])\.weight(?P<e>\d+)"),
)


def _layer_param(plan, layer, rest, t):
    st = plan.st
    for rx in _EXPERT_RES:
        m = rx.fullmatch(rest)
        if m:
            e = plan.expert_index(int(m["e"]))
            sh = plan.shape
            if m["fc"] == "1":
                plan.gate_up(sh.expert(layer, e, "gate"),
                             sh.expert(layer, e, "up"), t, st.etp_rank,
                             st.etp_size)
            else:
                plan.row(sh.expert(layer, e, "down"), t, st.etp_rank,
                         st.etp_size)
            return
    if rest in ("mlp.experts.weight1", "mlp.experts.weight2"):
        plan.fail("GroupedMLP holds every expert transposed in one tensor, "
                  "which no box of the Hugging Face experts can view; use "
                  "SequentialMLP or TEGroupedMLP")
    if rest not in _LAYER:
        plan.fail("is not a Megatron-Core decoder parameter this mapping "
                  "knows")
    hf, kind = _LAYER[rest]
    p = f"model.layers.{layer}."
    if kind == "rep":
        plan.replicated(p + hf, t)
    elif kind == "row":
        plan.row(p + hf, t, st.tp_rank, st.tp_size)
    elif kind == "router":
        plan.replicated(plan.shape.router(layer), t)
    elif kind == "qkv":
        plan.qkv(tuple(f"{p}self_attn.{x}_proj.{hf}" for x in "qkv"), t)
    else:
        plan.gate_up(f"{p}mlp.gate_proj.{hf}", f"{p}mlp.up_proj.{hf}", t,
                     st.tp_rank, st.tp_size)


def _param(plan, name, t):
    plan.param = name
    if not t.is_contiguous():
        plan.fail(f"is not contiguous (strides {list(t.stride())}); its "
                  "boxes would not be views of its storage")
    while name.startswith(_MODULE_PREFIX):
        name = name[len(_MODULE_PREFIX):]
    m = _LAYER_RE.fullmatch(name)
    if m:
        _layer_param(plan, plan.st.layer_offset + int(m[1]), m[2], t)
    elif name == "embedding.word_embeddings.weight":
        plan.vocab("model.embed_tokens.weight", t)
    elif name == "output_layer.weight":
        # A tied head (kept on the last stage as a copy of the embedding)
        # has no tensor of its own in the checkpoint.
        if not plan.shape.tie_word_embeddings:
            plan.vocab("lm_head.weight", t)
    elif name == "decoder.final_layernorm.weight":
        plan.replicated("model.norm.weight", t)
    else:
        plan.fail("is not a Megatron-Core GPT parameter this mapping knows")


def _state(parallel_state, kw):
    if parallel_state is None:
        st = ParallelState(**kw)
    elif isinstance(parallel_state, dict):
        st = ParallelState(**{**parallel_state, **kw})
    else:
        st = parallel_state
    st.check()
    return st


def plan_model(named_parameters, config, parallel_state=None, **state):
    """The registrations register_model makes, without a publisher:
    [(publisher method name, Hugging Face names, args)]. LayoutError naming
    the parameter for any that does not fit."""
    shape = model_shape(config)
    plan = _Plan(shape, _state(parallel_state, state))
    for name, t in named_parameters:
        _param(plan, name, t)
    return plan.calls


def register_model(publisher, named_parameters, config, parallel_state=None,
                   **state):
    """Registers one Megatron-Core rank's parameters with `publisher`
    under Hugging Face names; returns those names in registration order.

    named_parameters: (name, tensor) pairs, e.g. model.named_parameters()
    (a leading "module." of DDP wrappers is ignored). config: the Hugging
    Face config of the checkpoint (anything reshard.hf_config.model_shape
    reads, or a ModelShape). parallel_state: a ParallelState (or a dict of
    its fields); its fields may also be given as keywords. Every
    parameter is checked first (LayoutError naming it: unknown name, a
    shape the config and state do not give, heads or sizes that do not
    divide over the ranks), so a refused call registers nothing; a call
    the publisher refuses leaves none of this call's names registered."""
    calls = plan_model(named_parameters, config, parallel_state, **state)
    done = {}  # the names registered so far, in order
    try:
        for method, names, args in calls:
            getattr(publisher, method)(*args)
            done.update(dict.fromkeys(names))
    except BaseException:
        for name in done:
            publisher.unregister(name)
        raise
    return list(done)
