"""What a per-operation rounding proof can claim on a GPT-2 checkpoint: estimates, not proofs
(docs/trained-models.md, "Execution claims", "How far worst-case bounds reach").

Per position of self-labelled (or given) sequences, in float64 torch:

- the label's margin (the gap to the best other logit);
- one float32 run and one bfloat16 run (weights and every activation rounded to bfloat16,
  float32 accumulation): the largest logit error against float64 and the positions whose
  argmax changes;
- the **first-order worst case** of the execution model's per-operation bounds: every
  rounded value ``a`` (embedding sums, LayerNorm outputs, matrix products, scores, softmax
  weights, attention outputs, GELU, residual sums, logits) may move by its model bound
  ``b(a)`` (float32: ``(k + 3) U |x| |W|`` for a ``k``-term product, ``U = 2^-23``; bfloat16
  adds ``2^-8 |a|`` for the storage and ``2^-8 |x| |W|`` for the rounded weights), and the
  margin moves by at most ``sum |d margin / d a| b(a)`` to first order (one batched backward
  pass per sequence).  A proof from per-operation bounds, whatever its propagation, cannot
  claim a position whose first-order worst case exceeds its margin; a forward propagation
  (balls, per coordinate or per position) claims less;
- the per-coordinate forward propagation of those bounds (entry-wise ``|W| rho`` through the
  maps, ``|g| (rho_i + mean(rho)) / sigma + |g| |c_i| |rho|_2 / (sqrt(d) sigma^2)`` through
  LayerNorm, each softmax weight within ``e^(r_j + max_i r_i) - 1`` relative): its largest
  radius after each step of the first block and at the logits.

    python scripts/execution_estimates.py --standin /tmp/standin --sequences 16
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

U = 2.0 ** -23
BF = 2.0 ** -8


class Taps:
    """The forward pass of a pre-LN GPT-2 spec in float64 torch with every rounded value
    made a leaf of the graph (``tap``) beside its float32 and bfloat16 bounds."""

    def __init__(self, spec: Any, torch: Any, welford: bool = True, block: int = 0) -> None:
        self.spec, self.torch, self.welford, self.block = spec, torch, welford, block
        self.w = {k: torch.tensor(spec.get(k), dtype=torch.float64) for k in spec.shapes()}
        self.taps: list[tuple[Any, Any, Any, str]] = []

    def tap(self, a: Any, b32: Any, bbf: Any, kind: str) -> Any:
        delta = self.torch.zeros_like(a, requires_grad=True)  # the rounding at ``a``
        self.taps.append((delta, b32.detach(), (b32 + bbf).detach(), kind))
        return a + delta

    def ln(self, x: Any, name: str) -> Any:
        d = x.shape[-1]
        g, b = self.w[name + ".weight"], self.w[name + ".bias"]
        mu = x.mean(-1, keepdim=True)
        c = x - mu
        var = (c * c).mean(-1, keepdim=True)
        y = c / (var + self.spec.layer_norm_eps).sqrt() * g + b
        # two-pass gamma_{d+3}; Welford's running means within d U (|mu| + max|c|) each
        big = (mu.abs() + c.abs().amax(-1, keepdim=True)) * c.abs().amax(-1, keepdim=True)
        nu = ((d + 3) * U * var + (d * U * big if self.welford else 0)) / var
        return self.tap(y, (nu + 8 * U) * y.abs() + 8 * U * b.abs(), BF * y.abs(), "LayerNorm")

    def lin(self, x: Any, name: str) -> Any:
        w, b = self.w[name + ".weight"], self.w[name + ".bias"]
        mag = x.abs() @ w.abs() + b.abs()
        return self.tap(x @ w + b, (self.depth(w.shape[0]) + 3) * U * mag, 2 * BF * mag,
                        "products")

    def depth(self, k: int) -> int:
        """Roundings a term of a ``k``-term sum meets: ``k``, or with ``--block B`` (blocks
        of ``B`` summed in order, then the block sums) ``B + ceil(k / B)``."""
        return k if not self.block else self.block + -(-k // self.block)

    def forward(self, toks: Any) -> Any:
        torch, spec, w = self.torch, self.spec, self.w
        n, d, h = toks.shape[0], spec.d_model, spec.heads
        dh = d // h
        self.taps = []
        e, p = w["wte"][toks], w["wpe"][:n]
        x = self.tap(e + p, 2 * U * (e.abs() + p.abs()), 2 * BF * (e.abs() + p.abs()), "sums")
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        for i in range(spec.layers):
            q, k, v = (t.reshape(n, h, dh).transpose(0, 1)
                       for t in self.lin(self.ln(x, f"h{i}.ln1"), f"h{i}.attn").split(d, -1))
            s = q @ k.transpose(1, 2) / math.sqrt(dh)
            smag = q.abs() @ k.abs().transpose(1, 2) / math.sqrt(dh)
            s = self.tap(s, (dh + 4) * U * smag, BF * s.abs(), "scores")
            pr = torch.softmax(s.masked_fill(mask, -math.inf), -1)
            pr = self.tap(pr, 3 * (n + 8) * U * pr, BF * pr, "softmax")
            o = pr @ v
            o = self.tap(o, (n + 3) * U * (pr @ v.abs()), BF * o.abs(), "products")
            y = self.lin(o.transpose(0, 1).reshape(n, d), f"h{i}.attn.proj")
            x = self.tap(x + y, U * (x.abs() + y.abs()), BF * (x + y).abs(), "sums")
            a = self.lin(self.ln(x, f"h{i}.ln2"), f"h{i}.mlp.fc")
            a = torch.nn.functional.gelu(a, approximate="tanh"
                                         if spec.activation == "gelu_tanh" else "none")
            a = self.tap(a, 12 * U * a.abs(), BF * a.abs(), "GELU")
            y = self.lin(a, f"h{i}.mlp.proj")
            x = self.tap(x + y, U * (x.abs() + y.abs()), BF * (x + y).abs(), "sums")
        head = w["wte" if spec.tied_head else "head"]
        f = self.ln(x, "lnf")
        mag = f.abs() @ head.abs().T
        return self.tap(f @ head.T, (self.depth(d) + 3) * U * mag, 2 * BF * mag, "products")


def first_order(spec: Any, toks: np.ndarray, ys: np.ndarray, welford: bool = True,
                block: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """Per position: margin, first-order worst case (float32, bfloat16), and the float32
    worst case per kind of rounded value."""
    import torch

    net = Taps(spec, torch, welford, block)
    z = net.forward(torch.from_numpy(toks))
    n = len(toks)
    lab = torch.from_numpy(ys)
    other = z.detach().clone()
    other[torch.arange(n), lab] = -math.inf
    rival = other.argmax(-1)
    m = z[torch.arange(n), lab] - z[torch.arange(n), rival]
    leaves = [t[0] for t in net.taps]
    grads = torch.autograd.grad(m, leaves, grad_outputs=torch.eye(n, dtype=torch.float64),
                                is_grads_batched=True)
    pairs = list(zip(grads, net.taps, strict=True))
    b32 = sum((g.abs() * t[1]).reshape(n, -1).sum(-1) for g, t in pairs)
    bbf = sum((g.abs() * t[2]).reshape(n, -1).sum(-1) for g, t in pairs)
    kinds: dict[str, Any] = {}
    for g, t in pairs:
        kinds[t[3]] = kinds.get(t[3], 0) + (g.abs() * t[1]).reshape(n, -1).sum(-1).numpy()
    return m.detach().numpy(), b32.numpy(), bbf.numpy(), kinds


def _top(a: np.ndarray) -> float:
    """The largest entry, an overflow (NaN from ``inf * 0``) as infinity."""
    return float(np.nan_to_num(a, nan=np.inf).max())


def forward_radii(spec: Any, toks: np.ndarray) -> list[tuple[str, float]]:
    """The largest per-coordinate float32 execution radius after each step (the module
    docstring's forward propagation, in float64: an estimate of what per-coordinate balls
    reach, without their outward rounding)."""
    from exactmem.lm.float64 import _gelu

    w = spec.get
    n, d, h = toks.shape[-1], spec.d_model, spec.heads
    dh = d // h
    x = w("wte")[toks] + w("wpe")[:n]
    e = 2 * U * (np.abs(w("wte")[toks]) + np.abs(w("wpe")[:n]))
    out: list[tuple[str, float]] = [("embedding", _top(e))]

    def ln(x: np.ndarray, e: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
        g, b = w(name + ".weight"), w(name + ".bias")
        c = x - x.mean(-1, keepdims=True)
        var = (c * c).mean(-1, keepdims=True)
        sig = np.sqrt(var + spec.layer_norm_eps)
        y = c / sig * g + b
        e2 = np.sqrt((e * e).sum(-1, keepdims=True))
        cm = np.abs(c).max(-1, keepdims=True)
        nu = ((d + 3) * U * var + d * U * (np.abs(x.mean(-1, keepdims=True)) + cm) * cm) / var
        return y, (np.abs(g) * ((e + e.mean(-1, keepdims=True)) / sig
                                + np.abs(c) * e2 / (math.sqrt(d) * sig ** 2))
                   + (nu + 8 * U) * np.abs(y))

    def lin(x: np.ndarray, e: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
        wt, b = w(name + ".weight"), w(name + ".bias")
        g = (wt.shape[0] + 3) * U
        return x @ wt + b, (e + g * np.abs(x)) @ np.abs(wt) + g * np.abs(b)

    mask = np.triu(np.ones((n, n), dtype=bool), 1)
    with np.errstate(all="ignore"):
        for i in range(spec.layers):
            a, ea = lin(*ln(x, e, f"h{i}.ln1"), f"h{i}.attn")
            out.append((f"block {i} q|k|v", _top(ea)))
            q, k, v = (t.reshape(n, h, dh).transpose(1, 0, 2) for t in np.split(a, 3, -1))
            eq, ek, ev = (t.reshape(n, h, dh).transpose(1, 0, 2) for t in np.split(ea, 3, -1))
            c = 1 / math.sqrt(dh)
            s = c * q @ k.transpose(0, 2, 1)
            r = c * (np.abs(q) @ ek.transpose(0, 2, 1) + eq @ np.abs(k).transpose(0, 2, 1)
                     + eq @ ek.transpose(0, 2, 1)
                     + (dh + 4) * U * np.abs(q) @ np.abs(k).transpose(0, 2, 1))
            s[:, mask], r[:, mask] = -np.inf, 0.0
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            dp = p * (np.expm1(r + r.max(-1, keepdims=True)) + 3 * (n + 8) * U)
            o = (p @ v).transpose(1, 0, 2).reshape(n, d)
            eo = (p @ ev + dp @ np.abs(v) + (n + 3) * U * p @ np.abs(v)).transpose(
                1, 0, 2).reshape(n, d)
            out.append((f"block {i} attention", _top(eo)))
            y, ey = lin(o, eo, f"h{i}.attn.proj")
            x, e = x + y, e + ey + U * (np.abs(x) + np.abs(y))
            a, ea = lin(*ln(x, e, f"h{i}.ln2"), f"h{i}.mlp.fc")
            a, ea = _gelu(spec, a), 1.13 * ea + 12 * U * np.abs(a)
            y, ey = lin(a, ea, f"h{i}.mlp.proj")
            x, e = x + y, e + ey + U * (np.abs(x) + np.abs(y))
            out.append((f"block {i} output", _top(e)))
        f, ef = ln(x, e, "lnf")
        head = w("wte" if spec.tied_head else "head")
        out.append(("logits", _top(ef @ np.abs(head).T)))
    return out


def runs(model: Path, toks: np.ndarray) -> dict[str, np.ndarray]:
    """float64, float32 and bfloat16 logits of the checkpoint (transformers)."""
    import torch
    from transformers import GPT2LMHeadModel

    net = GPT2LMHeadModel.from_pretrained(str(model), attn_implementation="eager").eval()
    out = {}
    with torch.inference_mode():
        for name, dt in (("float64", torch.float64), ("float32", torch.float32),
                         ("bfloat16", torch.bfloat16)):
            out[name] = net.to(dt)(torch.from_numpy(toks)).logits.double().numpy()
    return out


def q(a: np.ndarray) -> str:
    return ", ".join(f"{k} {v:.2e}" for k, v in zip(
        ("min", "1%", "5%", "50%", "max"), np.quantile(a, [0, .01, .05, .5, 1]), strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model", nargs="?")
    ap.add_argument("data", nargs="?")
    ap.add_argument("--standin", metavar="DIR")
    ap.add_argument("--sequences", type=int, default=16)
    ap.add_argument("--two-pass", action="store_true",
                    help="LayerNorm statistics by the two-pass algorithm only (no Welford term)")
    ap.add_argument("--block", type=int, default=0, metavar="B",
                    help="a narrower model: the weight products summed in blocks of B")
    args = ap.parse_args()
    from exactmem.lm.checkpoints.gpt2 import load_gpt2

    if args.standin:
        from bench_execution import standin

        model, ds = standin(Path(args.standin), args.sequences)
    else:
        from exactmem.model.dataset import load_dataset

        model = Path(args.model)
        ds = load_dataset(args.data)
    spec = load_gpt2(model)
    toks = np.asarray(ds.sequences[:args.sequences], dtype=np.int64)
    ys = np.asarray(ds.labels[:args.sequences], dtype=np.int64)
    logits = runs(model, toks)
    for fmt in ("float32", "bfloat16"):
        err = np.abs(logits[fmt] - logits["float64"]).max()
        kept = (logits[fmt].argmax(-1) == ys).sum()
        print(f"{fmt} run: largest logit error {err:.2e}; label kept at {kept} of {ys.size}")
    radii = np.max([[r for _, r in forward_radii(spec, t)] for t in toks], axis=0)
    names = [name for name, _ in forward_radii(spec, toks[0])]
    print("per-coordinate forward radius (float32, largest): " + "; ".join(
        f"{name} {r:.2e}" for name, r in zip(names, radii, strict=True)))
    cols = [first_order(spec, t, y, not args.two_pass, args.block)
            for t, y in zip(toks, ys, strict=True)]
    m, b32, bbf = (np.concatenate([c[j] for c in cols]) for j in range(3))
    print(f"margin: {q(m)}")
    print(f"first-order worst case, float32: {q(b32)}; below the margin at "
          f"{(b32 < m).sum()} of {m.size}")
    print("float32 first-order worst case by kind of value (median): " + "; ".join(
        f"{k} {np.median(np.concatenate([c[3][k] for c in cols])):.2e}" for k in cols[0][3]))
    print(f"first-order worst case, bfloat16: {q(bbf)}; below the margin at "
          f"{(bbf < m).sum()} of {m.size}")


if __name__ == "__main__":
    main()
