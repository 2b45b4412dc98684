"""Rigorous evaluation of an :class:`~exactmem.model.lm_spec.LMSpec` with ball arithmetic
(python-flint ``arb`` / ``arb_mat``): which positions provably have the label as unique
argmax.

Every stored weight enters exactly (a binary float is an ``arb`` of radius 0).  Matrix products
run as ``arb_mat`` products over all positions of all sequences at once; LayerNorm, GELU and
softmax run per entry with arb's rigorous ``rsqrt``, ``tanh``, ``erf`` and ``exp``.  A
position is proved when its label's logit ball lies strictly above every other logit ball.
This is the producer's decision only: the certificate is re-proved by the stdlib checker
(``exactmem/checker/lm_forward.py``), which shares no code with this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import flint
import numpy as np

from exactmem.model.lm_spec import LMSpec

OnLogits = Callable[[int, np.ndarray, np.ndarray], None]

PREC = 128  # bits of the ball midpoints (as the checker carries)


@dataclass(frozen=True, slots=True)
class PositionBounds:
    """Per sequence: the positions proved, and for the others the float margin of the label
    (midpoint logit of the label minus the best other midpoint; < 0: not even the float
    argmax)."""

    proved: tuple[tuple[int, ...], ...]
    failed: tuple[tuple[tuple[int, float], ...], ...]

    @property
    def count(self) -> int:
        return sum(map(len, self.proved))


def _float64(x: flint.arb, down: bool) -> float:
    """The exact point ``x`` (an arb of radius 0) rounded to float64 downward or upward."""
    man, exp = x.man_exp()
    exact = Fraction(int(man)) * Fraction(2) ** int(exp)
    f = float(exact)  # nearest
    if down and Fraction(f) > exact:
        f = math.nextafter(f, -math.inf)
    if not down and Fraction(f) < exact:
        f = math.nextafter(f, math.inf)
    return f


def _mat(rows: list[list[float]]) -> flint.arb_mat:
    return flint.arb_mat(rows)


def _layernorm(rows: list[list[flint.arb]], g: list[float], b: list[float],
               eps: flint.arb) -> list[list[flint.arb]]:
    out = []
    d = len(g)
    for x in rows:
        mu = sum(x) / d
        c = [v - mu for v in x]
        s = (sum(v * v for v in c) / d + eps).rsqrt()
        out.append([v * s * gi + bi for v, gi, bi in zip(c, g, b, strict=True)])
    return out


def _affine(rows: list[list[flint.arb]], w: flint.arb_mat,
            b: list[float]) -> list[list[flint.arb]]:
    prod = (flint.arb_mat(rows) * w).tolist()
    return [[v + bi for v, bi in zip(r, b, strict=True)] for r in prod]


def _relu(x: flint.arb) -> flint.arb:
    if x >= 0:
        return x
    if x <= 0:
        return flint.arb(0)
    h = (x.upper() / 2).mid()  # [0, upper] as the ball h +- h (radius rounded up)
    return flint.arb(h, h)


def _gelu(rows: list[list[flint.arb]], kind: str) -> list[list[flint.arb]]:
    if kind == "relu":
        return [[_relu(x) for x in r] for r in rows]
    half = flint.arb(1) / 2
    if kind == "gelu_tanh":
        c = (2 / flint.arb.pi()).sqrt()
        a = flint.arb(flint.fmpq(44715, 10 ** 6))
        return [[half * x * (1 + (c * (x + a * x * x * x)).tanh()) for x in r] for r in rows]
    s = flint.arb(2).sqrt()
    return [[half * x * (1 + (x / s).erf()) for x in r] for r in rows]


def _attention(rows: list[list[flint.arb]], heads: int, n: int) -> list[list[flint.arb]]:
    """Causal softmax attention on the q|k|v rows of consecutive sequences of length n."""
    d = len(rows[0]) // 3
    dh = d // heads
    scale = 1 / flint.arb(dh).sqrt()
    out: list[list[flint.arb]] = [[] for _ in rows]
    for s0 in range(0, len(rows), n):
        seq = rows[s0:s0 + n]
        for h in range(heads):
            q = flint.arb_mat([r[h * dh:(h + 1) * dh] for r in seq])
            k = flint.arb_mat([r[d + h * dh:d + (h + 1) * dh] for r in seq])
            v = flint.arb_mat([r[2 * d + h * dh:2 * d + (h + 1) * dh] for r in seq])
            scores = (q * k.transpose()).tolist()
            att = []
            for p, srow in enumerate(scores):
                s = [x * scale for x in srow[:p + 1]]
                top = max(x.mid() for x in s)
                e = [(x - top).exp() for x in s]
                total = sum(e)
                att.append([x / total for x in e] + [flint.arb(0)] * (n - p - 1))
            o = (flint.arb_mat(att) * v).tolist()
            for p in range(n):
                out[s0 + p].extend(o[p])
    return out


def prove_positions(spec: LMSpec, sequences: Sequence[Sequence[int]],
                    labels: Sequence[Sequence[int]],
                    progress: Callable[[str, int, int], None] | None = None,
                    batch: int = 64, on_logits: OnLogits | None = None,
                    producer: str = "fast") -> PositionBounds:
    """Rigorous logit balls for every position; the positions whose label is provably the
    unique argmax.  ``batch`` sequences are evaluated together (memory vs speed).

    ``producer``: ``"fast"`` (float64 numpy norm balls, :mod:`exactmem.model.lm_norm`),
    ``"arb"`` (python-flint at 128 bits, below: the slower reference) or ``"hybrid"`` (fast,
    then arb on the sequences with a position fast leaves unproved although the float argmax
    is right; the union of both proofs).  ``on_logits(i, lo, hi)``, called once per sequence
    ``i``, receives float64 arrays ``[n, vocab]`` with ``lo <= logit <= hi`` at every position
    (with ``"hybrid"``, fast's bounds; each arb ball end is rounded outward), e.g. for the
    code length of :mod:`exactmem.model.lm_codelength`."""
    if producer not in ("fast", "hybrid", "arb"):
        raise ValueError(f"producer: expected 'fast', 'hybrid' or 'arb', found {producer!r}")
    if producer != "arb":
        from exactmem.model.lm_norm import prove_fast

        got, miss = prove_fast(spec, sequences, labels, progress, batch, on_logits)
        again = [i for i, row in enumerate(miss) if any(m > 0 for _, m in row)]
        if producer == "fast" or not again:
            return PositionBounds(tuple(got), tuple(miss))
        ref = prove_positions(spec, [sequences[i] for i in again], [labels[i] for i in again],
                              progress, batch, producer="arb")
        for j, i in enumerate(again):  # both are proofs: the union is proved
            got[i] = tuple(sorted(set(got[i]) | set(ref.proved[j])))
            miss[i] = tuple((p, m) for p, m in ref.failed[j] if p not in got[i])
        return PositionBounds(tuple(got), tuple(miss))
    old = flint.ctx.prec
    flint.ctx.prec = PREC
    try:
        eps = flint.arb(flint.fmpq(*spec.eps_fraction().as_integer_ratio()))
        post = not spec.norm_first
        w = {name: _mat(spec.get(name).tolist()) for name in spec.shapes()
             if len(spec.shapes()[name]) == 2 and name not in ("wte", "wpe", "head")}
        vec = {name: spec.get(name).tolist() for name in spec.shapes()
               if len(spec.shapes()[name]) == 1}
        head = _mat(spec.get("wte" if spec.tied_head else "head").T.tolist())
        wte, wpe = spec.get("wte").tolist(), spec.get("wpe").tolist()
        proved: list[tuple[int, ...]] = []
        failed: list[tuple[tuple[int, float], ...]] = []
        for b0 in range(0, len(sequences), batch):
            chunk = sequences[b0:b0 + batch]
            n = len(chunk[0])
            x = [[flint.arb(a) + flint.arb(p) for a, p in zip(wte[t], wpe[k], strict=True)]
                 for seq in chunk for k, t in enumerate(seq)]
            for i in range(spec.layers):
                p = f"h{i}."
                h = x if post else _layernorm(x, vec[p + "ln1.weight"], vec[p + "ln1.bias"], eps)
                o = _attention(_affine(h, w[p + "attn.weight"], vec[p + "attn.bias"]),
                               spec.heads, n)
                o = _affine(o, w[p + "attn.proj.weight"], vec[p + "attn.proj.bias"])
                x = [[a + c for a, c in zip(r, s, strict=True)] for r, s in zip(x, o, strict=True)]
                if post:
                    x = _layernorm(x, vec[p + "ln1.weight"], vec[p + "ln1.bias"], eps)
                h = x if post else _layernorm(x, vec[p + "ln2.weight"], vec[p + "ln2.bias"], eps)
                h = _gelu(_affine(h, w[p + "mlp.fc.weight"], vec[p + "mlp.fc.bias"]),
                          spec.activation)
                o = _affine(h, w[p + "mlp.proj.weight"], vec[p + "mlp.proj.bias"])
                x = [[a + c for a, c in zip(r, s, strict=True)] for r, s in zip(x, o, strict=True)]
                if post:
                    x = _layernorm(x, vec[p + "ln2.weight"], vec[p + "ln2.bias"], eps)
            h = (_layernorm(x, vec["lnf.weight"], vec["lnf.bias"], eps) if spec.final_norm
                 else x)
            logits = (flint.arb_mat(h) * head).tolist()
            for j in range(len(chunk)):
                if on_logits is not None:
                    rows = logits[j * n:(j + 1) * n]
                    lo64 = np.array([[_float64(v.lower(), True) for v in r] for r in rows])
                    hi64 = np.array([[_float64(v.upper(), False) for v in r] for r in rows])
                    on_logits(b0 + j, lo64, hi64)
                ok, bad = [], []
                for k in range(n):
                    row, y = logits[j * n + k], labels[b0 + j][k]
                    lo = row[y].lower()
                    if all(lo > v.upper() for c, v in enumerate(row) if c != y):
                        ok.append(k)
                    else:
                        mids = [float(v.mid()) for v in row]
                        best = max(m for c, m in enumerate(mids) if c != y)
                        bad.append((k, mids[y] - best))
                proved.append(tuple(ok))
                failed.append(tuple(bad))
            if progress is not None:
                progress("bounds", min(b0 + batch, len(sequences)), len(sequences))
        return PositionBounds(tuple(proved), tuple(failed))
    finally:
        flint.ctx.prec = old
