#!/usr/bin/env python3
"""How much of a bf16 model changes per optimizer step, and what a delta of
each encoding would weigh.

A small causal LM with the shapes of a real one (LLaMA-style decoder
layers: RMSNorm, attention with q/k/v/o projections, a SiLU-gated MLP,
untied embeddings and LM head) is trained with the usual mixed-precision
scheme: fp32 master weights, AdamW on them, and after every step the
served bf16 weights are master.to(bfloat16). The forward and backward
passes run in float32 over those bf16 values (on a CPU, bf16 matmuls are
slower; what is measured, the bits of the bf16 copy after each step,
depends on the optimizer's updates, not on the compute precision). The
task is next-token prediction over a built-in text, batches drawn from a
seeded generator, so every run gives the same figures.

Per learning rate and step it reports, for the bf16 weights (overall and
per tensor kind: attention, MLP, embeddings, norms) and for their FP8
e4m3 codes and float32 scales under 128x128 block quantization
(reshard.quant.quantize_fp8, bit for bit libreshard's rs_quant_box), the
share of elements whose bits changed since the previous step, and the
size of a delta of the whole model under each candidate encoding, as a
fraction of the full bytes:

    list     changed positions (u16 within a chunk) + new values
    bitmap   a bit per element of a chunk + new values
    dirty    every chunk with a change, whole (raw)
    best     per chunk the smallest of unchanged, list, bitmap, raw
             (the codec's first four kinds), with its header and index;
             best@C for other chunk sizes C
    steps    per changed element a byte: the gap from the previous
             change (6 bits) and an op (new = old + 1 or - 1 as an
             integer of the element's bytes, or an exception), skip
             bytes (64 to 4096 elements each) before a longer gap; an
             exception is a signed byte step (-127 .. 127), or 0x80 and
             the full value (the codec's kind 4)
    stepmap  2 bits per element (same, +1, -1, exception) + the
             exceptions as in steps (kind 5)
    best+steps  per chunk the smallest of all six kinds (the codec of
             src/core/delta_encode.c); best+steps@C likewise;
             best+steps/fullexc with every exception as its full value

and the integer steps of the changed elements: new - old as an integer
of the element's bytes (modulo 2^(8E), signed), the share at +-1, +-2,
+-3 .. 127 and any other.

Every candidate is charged the codec's header (80 bytes) and index (16
bytes per chunk, plus one) per tensor.

    ~/.cache/reshard/venv-torch2/bin/python bench/python/delta_measure.py
        [--steps 16] [--lrs 1e-6,1e-5,1e-4] [--layers 2] [--vocab 8192]
        [--threads 1] [--quick] [--json FILE]

The defaults take about 10 minutes on two shared cores; --quick (2
layers, 6 steps, vocab 4096, one learning rate per run if --lrs says so)
about one.

Not a test: it asserts nothing and is run by hand.
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from reshard.quant import quantize_fp8  # noqa: E402

HEADER = 80       # bytes of the delta header (docs/delta.md)
ENTRY = 16        # bytes of one index entry
CHUNK = 4096      # elements per chunk of the codec
OTHER_CHUNKS = (1024, 16384, 65536)
STEP_CHUNKS = (16384,)  # best+steps at other chunks (FP8 codes: 16384)
GAP = 64                # a steps byte's gap field covers 0 .. 63
KINDS = ("attention", "mlp", "embeddings", "norms")

TEXT = """
A river starts as rain on a hill. The water runs down the slope, finds the
lowest path and joins other small streams. Together they cut a valley into
the rock over many thousands of years. Where the land is flat the river
slows, drops the sand it carried and spreads into wide bends. People built
towns on those bends because the soil was rich and the water was close.
They learned to count the seasons by the floods, to store grain for the dry
months and to trade with the towns upstream and downstream. A boat could
carry more than a cart, so the river became a road. Bridges came later,
first of wood, then of stone, and each one changed where the markets
stood. Today the river still runs the same way, but most of the water is
pumped, filtered and sent through pipes before it reaches the sea.
"""


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lrs", default="1e-6,1e-5,1e-4")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=2816)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--fp8-every", type=int, default=1,
                    help="quantize and compare FP8 every this many steps")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (1: the same sums on any "
                    "machine, and no spinning on a shared one)")
    ap.add_argument("--quick", action="store_true",
                    help="2 layers, 6 steps, vocab 4096: a smoke run")
    ap.add_argument("--json", help="also write every figure to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.layers, args.steps, args.vocab = 2, 6, 4096
    args.lrs = [float(x) for x in args.lrs.split(",")]
    return args


# ---------------------------------------------------------------- model

def init_params(a, gen):
    """Master weights (fp32), names as in Hugging Face LLaMA checkpoints."""
    h, i, v = a.hidden, a.intermediate, a.vocab

    def normal(*shape):
        return torch.randn(*shape, generator=gen) * 0.02

    p = {"model.embed_tokens.weight": normal(v, h)}
    for n in range(a.layers):
        pre = f"model.layers.{n}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            p[pre + f"self_attn.{proj}.weight"] = normal(h, h)
        p[pre + "mlp.gate_proj.weight"] = normal(i, h)
        p[pre + "mlp.up_proj.weight"] = normal(i, h)
        p[pre + "mlp.down_proj.weight"] = normal(h, i)
        p[pre + "input_layernorm.weight"] = torch.ones(h)
        p[pre + "post_attention_layernorm.weight"] = torch.ones(h)
    p["model.norm.weight"] = torch.ones(h)
    p["lm_head.weight"] = normal(v, h)
    return p


def kind_of(name):
    if "self_attn" in name:
        return "attention"
    if ".mlp." in name:
        return "mlp"
    if "embed_tokens" in name or "lm_head" in name:
        return "embeddings"
    return "norms"


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def rope(x, pos):
    d = x.shape[-1]
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


def forward(w, tokens, a):
    b, t = tokens.shape
    hd = a.hidden // a.heads
    pos = torch.arange(t)
    x = F.embedding(tokens, w["model.embed_tokens.weight"])
    for n in range(a.layers):
        pre = f"model.layers.{n}."
        y = rms_norm(x, w[pre + "input_layernorm.weight"])

        def heads(name):
            z = y @ w[pre + f"self_attn.{name}.weight"].t()
            return z.view(b, t, a.heads, hd).transpose(1, 2)
        q, k, v = rope(heads("q_proj"), pos), rope(heads("k_proj"), pos), \
            heads("v_proj")
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        att = att.transpose(1, 2).reshape(b, t, a.hidden)
        x = x + att @ w[pre + "self_attn.o_proj.weight"].t()
        y = rms_norm(x, w[pre + "post_attention_layernorm.weight"])
        g = F.silu(y @ w[pre + "mlp.gate_proj.weight"].t())
        u = y @ w[pre + "mlp.up_proj.weight"].t()
        x = x + (g * u) @ w[pre + "mlp.down_proj.weight"].t()
    x = rms_norm(x, w["model.norm.weight"])
    return x @ w["lm_head.weight"].t()


def tokenize(vocab):
    """Words to ids by a fixed string hash (no tokenizer to download)."""
    ids = []
    for word in TEXT.replace(".", " .").replace(",", " ,").split():
        hsh = 0
        for ch in word.lower():
            hsh = (hsh * 131 + ord(ch)) % 1000003
        ids.append(hsh % vocab)
    return torch.tensor(ids, dtype=torch.long)


def batch(ids, a, gen):
    starts = torch.randint(0, len(ids) - a.seq - 1, (a.batch,), generator=gen)
    rows = [ids[s:s + a.seq + 1] for s in starts.tolist()]
    data = torch.stack(rows)
    return data[:, :-1], data[:, 1:]


# ---------------------------------------------------------- measuring

def chunk_counts(changed, chunk):
    """Changed elements per chunk of a flat bool tensor, and chunk lengths."""
    n = changed.numel()
    nchunks = max(1, math.ceil(n / chunk))
    pad = nchunks * chunk - n
    flat = changed.reshape(-1).to(torch.int32)
    if pad:
        flat = torch.cat((flat, torch.zeros(pad, dtype=torch.int32)))
    counts = flat.view(nchunks, chunk).sum(1).to(torch.int64)
    lens = torch.full((nchunks,), chunk, dtype=torch.int64)
    lens[-1] = n - (nchunks - 1) * chunk
    return counts, lens


def encoding_sizes(changed, esize):
    """Bytes of a delta of one tensor under each candidate encoding."""
    out = {"full": changed.numel() * esize}
    counts, lens = chunk_counts(changed, CHUNK)
    fixed = HEADER + ENTRY * (len(counts) + 1)
    dirty = counts > 0
    lst = counts * (2 + esize)
    bmp = torch.where(dirty, (lens + 7) // 8 + counts * esize, 0)
    raw = lens * esize
    out["list"] = fixed + int(lst.sum())
    out["bitmap"] = fixed + int(bmp.sum())
    out["dirty"] = fixed + int(torch.where(dirty, raw, 0).sum())
    out["best"] = fixed + int(torch.minimum(torch.minimum(lst, bmp),
                                             raw).sum())
    for c in OTHER_CHUNKS:
        cc, ll = chunk_counts(changed, c)
        lst = cc * (2 + esize)
        bmp = torch.where(cc > 0, (ll + 7) // 8 + cc * esize, 0)
        best = torch.minimum(torch.minimum(lst, bmp), ll * esize)
        out[f"best@{c}"] = HEADER + ENTRY * (len(cc) + 1) + int(best.sum())
    return out


def int_steps(prev_bits, cur_bits, esize):
    """new - old of each element as an integer of esize bytes, modulo
    2^(8 esize), taken in -2^(8 esize - 1) .. 2^(8 esize - 1) - 1."""
    m = 1 << (8 * esize)
    d = (cur_bits.reshape(-1).to(torch.int64) -
         prev_bits.reshape(-1).to(torch.int64)) % m
    return torch.where(d >= m // 2, d - m, d)


def step_sizes(changed, d, esize, chunk, small):
    """Per chunk: the payload bytes of the steps kind and of the step map,
    and the chunk's changed count and length."""
    counts, lens = chunk_counts(changed, chunk)
    nch = len(counts)
    pos = changed.reshape(-1).nonzero().reshape(-1)
    dp = d[pos]
    exc = (dp.abs() != 1).to(torch.int64)
    if small:  # an exception as a signed byte step, or 0x80 + the value
        xcost = torch.where((dp >= -127) & (dp <= 127), 1, 1 + esize) * exc
    else:      # an exception as the full value
        xcost = exc * esize
    c = pos // chunk
    o = pos % chunk
    prev = torch.cat((torch.tensor([-1]), o[:-1]))
    newc = torch.cat((torch.tensor([True]), c[1:] != c[:-1]))
    p = torch.where(newc, torch.zeros_like(o), prev + 1)
    skips = ((o - p) // GAP + GAP - 1) // GAP  # a skip byte: 64 .. 4096
    per = torch.bincount(c, weights=(1 + skips + xcost).double(),
                         minlength=nch).to(torch.int64)
    xs = torch.bincount(c, weights=xcost.double(),
                        minlength=nch).to(torch.int64)
    smap = torch.where(counts > 0, (lens + 3) // 4 + xs, 0)
    return per, smap, counts, lens


def best_with_steps(changed, d, esize, chunk, small=True):
    steps, smap, cc, ll = step_sizes(changed, d, esize, chunk, small)
    lst = cc * (2 + esize)
    bmp = torch.where(cc > 0, (ll + 7) // 8 + cc * esize, 0)
    best = torch.minimum(torch.minimum(lst, bmp), ll * esize)
    best = torch.minimum(torch.minimum(best, steps), smap)
    fixed = HEADER + ENTRY * (len(cc) + 1)
    return fixed + int(best.sum()), fixed + int(steps.sum()), \
        fixed + int(smap.sum())


def step_sizes_all(changed, prev_bits, cur_bits, esize):
    """The new kinds' sizes, and the distribution of integer steps."""
    d = int_steps(prev_bits, cur_bits, esize)
    out = {}
    out["best+steps"], out["steps"], out["stepmap"] = best_with_steps(
        changed, d, esize, CHUNK)
    for c in STEP_CHUNKS:
        out[f"best+steps@{c}"] = best_with_steps(changed, d, esize, c)[0]
    out["best+steps/fullexc"] = best_with_steps(changed, d, esize, CHUNK,
                                                False)[0]
    dc = d[changed.reshape(-1)].abs()
    hist = {"step1": int((dc == 1).sum()), "step2": int((dc == 2).sum()),
            "step3_127": int(((dc > 2) & (dc <= 127)).sum()),
            "step_other": int((dc > 127).sum())}
    return out, hist


def add(acc, sizes):
    for k, v in sizes.items():
        acc[k] = acc.get(k, 0) + v


def bits(t):
    """A tensor's raw bits as an integer tensor of the same element size."""
    return t.view({1: torch.uint8, 2: torch.int16,
                   4: torch.int32}[t.element_size()])


def fp8_of(w):
    q, s = quantize_fp8(w, "fp8_block", block=(128, 128), fmt="f8e4m3")
    return q.view(torch.uint8), s


def measure_step(prev, cur, prev_q, cur_q):
    """Changed shares and delta sizes between two steps' bf16 weights (and
    FP8 codes and scales when both are given)."""
    rec = {"bf16": {}, "sizes": {}}
    tot_n = tot_c = 0
    per_kind = {k: [0, 0] for k in KINDS}
    for name, w in cur.items():
        changed = bits(w) != bits(prev[name])
        c = int(changed.sum())
        per_kind[kind_of(name)][0] += w.numel()
        per_kind[kind_of(name)][1] += c
        tot_n += w.numel()
        tot_c += c
        add(rec["sizes"].setdefault("bf16", {}), encoding_sizes(changed, 2))
        sz, hist = step_sizes_all(changed, bits(prev[name]), bits(w), 2)
        add(rec["sizes"]["bf16"], sz)
        add(rec.setdefault("steps", {}).setdefault("bf16", {}), hist)
    rec["bf16"]["all"] = tot_c / tot_n
    for k, (n, c) in per_kind.items():
        rec["bf16"][k] = c / n if n else 0.0
    if prev_q is not None:
        qn = qc = sn = sc = 0
        for name, (q, s) in cur_q.items():
            pq, ps = prev_q[name]
            changed_q = q != pq
            changed_s = bits(s) != bits(ps)
            qn += q.numel()
            qc += int(changed_q.sum())
            sn += s.numel()
            sc += int(changed_s.sum())
            add(rec["sizes"].setdefault("fp8_codes", {}),
                encoding_sizes(changed_q, 1))
            add(rec["sizes"].setdefault("fp8_scales", {}),
                encoding_sizes(changed_s, 4))
            sz, hist = step_sizes_all(changed_q, pq, q, 1)
            add(rec["sizes"]["fp8_codes"], sz)
            add(rec["steps"].setdefault("fp8_codes", {}), hist)
            sz, hist = step_sizes_all(changed_s, bits(ps), bits(s), 4)
            add(rec["sizes"]["fp8_scales"], sz)
            add(rec["steps"].setdefault("fp8_scales", {}), hist)
        rec["fp8_codes"] = qc / qn
        rec["fp8_scales"] = sc / sn
    return rec


def quantized(weights):
    return {n: fp8_of(w) for n, w in weights.items() if w.dim() == 2}


# ------------------------------------------------------------- training

def run_lr(lr, a):
    gen = torch.Generator().manual_seed(a.seed)
    master = init_params(a, gen)
    for t in master.values():
        t.requires_grad_(True)
    opt = torch.optim.AdamW(master.values(), lr=lr, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.01)
    ids = tokenize(a.vocab)
    data_gen = torch.Generator().manual_seed(a.seed + 1)
    served = {n: t.detach().to(torch.bfloat16) for n, t in master.items()}
    served_q = quantized(served)
    steps = []
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        x, y = batch(ids, a, data_gen)
        w = {n: t.float().requires_grad_(True) for n, t in served.items()}
        logits = forward(w, x, a)
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), y.reshape(-1))
        loss.backward()
        for n, t in master.items():
            t.grad = w[n].grad
        torch.nn.utils.clip_grad_norm_(master.values(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        new = {n: t.detach().to(torch.bfloat16) for n, t in master.items()}
        new_q = quantized(new) if step % a.fp8_every == 0 else None
        rec = measure_step(served, new, served_q if new_q is not None else None,
                           new_q)
        rec["step"], rec["loss"] = step, float(loss.detach())
        rec["seconds"] = time.perf_counter() - t0
        steps.append(rec)
        served = new
        if new_q is not None:
            served_q = new_q
        else:
            served_q = quantized(served) if (step + 1) % a.fp8_every == 0 \
                else served_q
        fp8 = (f" fp8 codes {rec['fp8_codes']:.4%} scales "
               f"{rec['fp8_scales']:.4%}" if "fp8_codes" in rec else "")
        best = rec["sizes"]["bf16"]
        print(f"lr {lr:g} step {step:3d} loss {rec['loss']:.3f} "
              f"bf16 changed {rec['bf16']['all']:.4%}{fp8} "
              f"bf16 delta/full {best['best'] / best['full']:.4f} "
              f"with steps {best['best+steps'] / best['full']:.4f} "
              f"({rec['seconds']:.1f} s)", flush=True)
    return steps


# ------------------------------------------------------------- summary

def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def summarize(lr, steps):
    half = steps[len(steps) // 2:]
    print(f"\n== lr {lr:g}: means over steps {half[0]['step']}.."
          f"{half[-1]['step']} (step 1 in brackets)")
    for key in ("all",) + KINDS:
        print(f"  bf16 changed {key:<11} {mean([s['bf16'][key] for s in half]):8.4%}"
              f"  [{steps[0]['bf16'][key]:.4%}]")
    q = [s for s in half if "fp8_codes" in s]
    if q:
        print(f"  fp8 codes changed       {mean([s['fp8_codes'] for s in q]):8.4%}")
        print(f"  fp8 scales changed      {mean([s['fp8_scales'] for s in q]):8.4%}")
    for what in ("bf16", "fp8_codes", "fp8_scales"):
        rows = [s["steps"][what] for s in half if what in s.get("steps", {})]
        if rows:
            tot = sum(sum(r.values()) for r in rows) or 1
            print(f"  {what:<10} integer steps of the changed: " + " ".join(
                f"{k} {sum(r[k] for r in rows) / tot:.4%}"
                for k in ("step1", "step2", "step3_127", "step_other")))
    for what in ("bf16", "fp8_codes", "fp8_scales"):
        rows = [s["sizes"][what] for s in half if what in s["sizes"]]
        if not rows:
            continue
        keys = [k for k in rows[0] if k != "full"]
        frac = {k: mean([r[k] / r["full"] for r in rows]) for k in keys}
        print(f"  {what:<10} delta/full " + " ".join(
            f"{k} {v:.4f}" for k, v in frac.items()))


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    nparams = sum(t.numel() for t in init_params(
        a, torch.Generator().manual_seed(a.seed)).values())
    print(f"model: {a.layers} layers, hidden {a.hidden}, intermediate "
          f"{a.intermediate}, heads {a.heads}, vocab {a.vocab}: "
          f"{nparams / 1e6:.1f} M parameters; batch {a.batch}x{a.seq} "
          f"tokens; {a.steps} steps per lr; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    results = {}
    for lr in a.lrs:
        results[lr] = run_lr(lr, a)
        summarize(lr, results[lr])
        if a.json:  # after each rate, so a long run leaves what it has
            with open(a.json, "w") as f:
                json.dump({"args": vars(a),
                           "results": {str(k): v
                                       for k, v in results.items()}},
                          f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
