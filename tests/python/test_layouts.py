"""Trainer layouts as boxes: every helper's boxes, written into zeroed full
tensors, rebuild the full tensors exactly (ground truth built by torch.chunk
and torch.cat, independently of the helpers); every box is a view into the
trainer's storage; bad layouts are refused naming the tensor."""
import pytest
import torch

import reshard
from reshard import layouts


def _rebuild(boxes, fulls):
    out = {n: torch.zeros_like(t) for n, t in fulls.items()}
    for b in boxes:
        region = out[b.name]
        for d, (o, s) in enumerate(zip(b.offset, b.view.shape)):
            region = region.narrow(d, o, s)
        region.copy_(b.view)
    return out


def _inside(view, storage_tensor):
    lo = storage_tensor.data_ptr()
    hi = lo + storage_tensor.numel() * storage_tensor.element_size()
    return lo <= view.data_ptr() < hi or view.numel() == 0


@pytest.mark.parametrize("n,world", [(8, 2), (7, 3), (5, 4), (3, 4)])
@pytest.mark.parametrize("dim", [0, 1])
def test_shard_matches_torch_chunk(n, world, dim):
    g = torch.Generator().manual_seed(n * 10 + world)
    full_shape = (n, 6) if dim == 0 else (6, n)
    full = torch.randn(full_shape, generator=g)
    pieces = list(torch.chunk(full, world, dim))
    boxes = []
    for r in range(world):
        piece = pieces[r].contiguous() if r < len(pieces) else \
            full.narrow(dim, 0, 0).contiguous()
        boxes += layouts.shard("w", piece, full_shape, dim, r, world)
    assert torch.equal(_rebuild(boxes, {"w": full})["w"], full)
    assert len(boxes) == len(pieces)


def test_chunk_range_is_torch_chunk():
    for size in range(0, 12):
        for world in range(1, 6):
            pieces = torch.arange(size).chunk(world) if size else ()
            for r in range(world):
                start, stop = reshard.chunk_range(size, r, world)
                want = pieces[r].tolist() if r < len(pieces) else []
                assert list(range(start, stop)) == want, (size, world, r)


@pytest.mark.parametrize("heads,kv,world", [(4, 2, 2), (8, 2, 1), (6, 3, 3),
                                            (8, 4, 2)])
@pytest.mark.parametrize("bias", [False, True])
def test_fused_qkv_megatron_groups(heads, kv, world, bias):
    hd, hidden = 4, 5
    g = torch.Generator().manual_seed(heads * 100 + kv * 10 + world)
    rest = () if bias else (hidden,)
    q = torch.randn((heads * hd,) + rest, generator=g)
    k = torch.randn((kv * hd,) + rest, generator=g)
    v = torch.randn((kv * hd,) + rest, generator=g)
    qpg = heads // kv
    boxes = []
    for r in range(world):
        groups = range(r * kv // world, (r + 1) * kv // world)
        fused = torch.cat([torch.cat([q[gi * qpg * hd:(gi + 1) * qpg * hd],
                                      k[gi * hd:(gi + 1) * hd],
                                      v[gi * hd:(gi + 1) * hd]])
                           for gi in groups])
        mine = layouts.fused_qkv(("q", "k", "v"), fused, heads, kv, hd, r,
                                 world)
        assert all(_inside(b.view, fused) for b in mine)
        assert len(mine) == 3 * len(groups)
        boxes += mine
    got = _rebuild(boxes, {"q": q, "k": k, "v": v})
    for n, t in (("q", q), ("k", k), ("v", v)):
        assert torch.equal(got[n], t), n


@pytest.mark.parametrize("ffn,world", [(8, 2), (6, 4), (5, 1)])
def test_fused_gate_up(ffn, world):
    g = torch.Generator().manual_seed(ffn + world)
    gate, up = torch.randn(ffn, 3, generator=g), torch.randn(ffn, 3, generator=g)
    boxes = []
    for r in range(world):
        gp, upp = list(gate.chunk(world)), list(up.chunk(world))
        parts = [p[r] for p in (gp, upp) if r < len(p)]
        if not parts:
            continue
        fused = torch.cat(parts)
        mine = layouts.fused(("gate", "up"), fused, (ffn, 3), r, world)
        assert all(_inside(b.view, fused) for b in mine)
        boxes += mine
    got = _rebuild(boxes, {"gate": gate, "up": up})
    assert torch.equal(got["gate"], gate) and torch.equal(got["up"], up)


def test_fused_order_is_explicit():
    gate, up = torch.zeros(4, 2), torch.ones(4, 2)
    fused = torch.cat([up, gate])
    boxes = layouts.fused(("up", "gate"), fused, (4, 2))
    got = _rebuild(boxes, {"gate": gate, "up": up})
    assert torch.equal(got["gate"], gate) and torch.equal(got["up"], up)


@pytest.mark.parametrize("call,needle", [
    (lambda: layouts.box("w.t", torch.zeros(3, 4).t()), "tensor 'w.t': is not contiguous"),
    (lambda: layouts.box("w", torch.zeros(3, 4), (4, 4), (2, 0)),
     "tensor 'w': shard [2, 5) of dim 0 is outside the full shape [4, 4]"),
    (lambda: layouts.box("w", torch.zeros(3, 4), (3, 4, 1)), "different ranks"),
    (lambda: layouts.shard("w", torch.zeros(3, 4), (8, 4), 0, 1, 2),
     "tensor 'w': rank 1 of 2 on dim 0 holds [4, 4], the tensor is [3, 4]"),
    (lambda: layouts.shard("w", torch.zeros(3, 4), (8, 4), 0, 2, 2), "outside a world"),
    (lambda: layouts.fused_qkv(("q", "k", "v"), torch.zeros(24, 4), 4, 2, 4, 0, 4),
     "2 KV-head groups do not divide over 4 ranks"),
    (lambda: layouts.fused_qkv(("q", "k", "v"), torch.zeros(24, 4), 5, 2, 4),
     "5 heads do not divide into 2 KV-head groups"),
    (lambda: layouts.fused_qkv(("q", "k", "v"), torch.zeros(20, 4), 4, 2, 4),
     "dim 0 is 20, 2 groups of 16 rows need 32"),
    (lambda: layouts.fused(("g", "u"), torch.zeros(7, 3), (4, 3)),
     "the fused tensor has 7"),
    (lambda: layouts.fused(("g", "u"), torch.zeros(8, 2), (4, 3)), "trailing dims"),
])
def test_bad_layouts_name_the_tensor(call, needle):
    with pytest.raises(reshard.LayoutError) as e:
        call()
    assert needle in str(e.value)
