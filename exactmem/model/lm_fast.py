"""The fast rigorous producer for language models: the function of an
:class:`~exactmem.model.lm_spec.LMSpec` evaluated on whole batches of sequences in float64
numpy ball arithmetic (:mod:`exactmem.model.lm_interval`), every logit enclosed.

Same semantics as :mod:`exactmem.model.lm_bounds` (the python-flint ``arb`` reference, kept
as ``--producer arb``) and the checker: LayerNorm with the population variance, causal
softmax attention with the real ``1/sqrt(d_head)``, GELU in its tanh or erf form.  Matrix
products are BLAS products of midpoints plus one product of non-negative matrices bounding
radius and rounding together; the non-linear steps are whole-array operations.  A position is
proved when the lower end of its label's logit is above the upper end of every other logit.
As with the arb producer, this is the producer's decision only: certify-model re-proves the
certificate with the stdlib checker before writing it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from exactmem.model import lm_interval as I
from exactmem.model.lm_interval import Ball, exact
from exactmem.model.lm_spec import LMSpec

OnLogits = Callable[[int, np.ndarray, np.ndarray], None]


def layernorm(x: Ball, g: np.ndarray, b: np.ndarray, eps: float) -> Ball:
    """``(x - mean) / sqrt(var + eps) * g + b`` over the last axis (``d`` entries).

    The centred value ``c_i = x_i - mean(x)`` is within ``r_i + mean(r) + |mean(m) - mu| +
    |fl(m_i - mu) - (m_i - mu)|`` of ``cm_i = fl(m_i - mu)``, ``mu`` the float mean of the
    midpoints (``|mean(m) - mu| <= (2d + 4) u mean|m|``); the variance lies between the
    means of the least and the largest ``c_i^2`` over the balls; ``1/sqrt`` is decreasing,
    and ``sqrt`` and ``/`` are correctly rounded."""
    d = x[0].shape[-1]
    m, r = x
    mu = m.mean(-1, keepdims=True)
    cm = m - mu
    acm = np.abs(cm)
    cr = I.up(r + r.mean(-1, keepdims=True) + (2 * d + 4) * I.U * np.abs(m).mean(-1, keepdims=True)
              + 2 * I.U * acm, d + 10)
    big = acm + cr
    small = I.down(acm - cr, 1)
    vhi = I.up((big * big).mean(-1, keepdims=True), d + 6)
    vlo = I.down((small * small).mean(-1, keepdims=True), d + 6)
    s_hi = I.up(1.0 / np.sqrt(I.down(vlo + eps, 1)), 4)
    s_lo = I.down(1.0 / np.sqrt(I.up(vhi + eps, 1)), 4)
    y = I.mul((cm, cr), I.from_interval(s_lo, s_hi))
    return I.add_exact(I.scale(y, g), b)


def attention(qkv: Ball, heads: int) -> Ball:
    """Causal multi-head softmax attention on ``q|k|v`` balls ``[B, n, 3d]``.

    Scores are ball products scaled by a ball around ``1/sqrt(d_head)``; ``e^{s_j - M}`` (``M``
    a float, which cancels exactly) is enclosed at the end points of each score; weight ``j``
    lies in ``[lo_j / sum_k hi_k, hi_j / sum_k lo_k]``; future positions weigh exactly 0."""
    bsz, n, d3 = qkv[0].shape
    d = d3 // 3
    dh = d // heads

    def split(j: int) -> Ball:
        return tuple(t[..., j * d:(j + 1) * d].reshape(bsz, n, heads, dh).transpose(0, 2, 1, 3)
                     for t in qkv)  # type: ignore[return-value]

    q, k, v = split(0), split(1), split(2)
    scores = I.matmul(q, (k[0].transpose(0, 1, 3, 2), k[1].transpose(0, 1, 3, 2)))
    inv = 1.0 / np.sqrt(np.float64(dh))  # sqrt and / correctly rounded: within 3u
    scores = I.mul(scores, I.const(float(inv), 3))
    lo, hi = I.lohi(scores)
    future = np.triu(np.ones((n, n), dtype=bool), 1)
    top = np.where(future, -np.inf, scores[0]).max(-1, keepdims=True)
    a = lo - top  # fl(v) is within u|v| <= 2u|fl(v)| (+ eta) of v
    a_lo = I.lohi((a, 2 * I.U * np.abs(a)))[0]
    a = hi - top
    a_hi = I.lohi((a, 2 * I.U * np.abs(a)))[1]
    e_lo, e_hi = I.exp_interval(a_lo, a_hi)
    e_lo = np.where(future, 0.0, e_lo)
    e_hi = np.where(future, 0.0, e_hi)
    s_lo = I.down(e_lo.sum(-1, keepdims=True), n + 2)
    s_hi = I.up(e_hi.sum(-1, keepdims=True), n + 2)
    w_lo = I.down(e_lo / s_hi, 1)
    w_hi = np.minimum(I.up(e_hi / s_lo, 1), 1.0)
    w = I.from_interval(w_lo, w_hi)
    w = (w[0], np.where(future, 0.0, w[1]))  # w[0] is exactly 0 there
    o = I.matmul(w, v)
    return tuple(t.transpose(0, 2, 1, 3).reshape(bsz, n, d) for t in o)  # type: ignore[return-value]


def gelu(x: Ball, kind: str) -> Ball:
    """``x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))`` or ``x/2 (1 + erf(x/sqrt 2))``:
    enclosed at the midpoint (a point, so only rounding widens it), then widened by a bound
    of ``|GELU'|`` times the radius.  Erf form: ``GELU' = Phi(x) + x phi(x)``, ``0 <= Phi <=
    1`` and ``|x phi(x)| <= phi(1) < 0.25``, so ``|GELU'| <= 1.25``.  Tanh form, ``z = c(x +
    a x^3)``: ``GELU' = (1 + t)/2 + x z' sech^2(z) / 2`` with ``0 <= x z' <= 3 z`` for ``x >=
    0`` (odd symmetry for ``x < 0``) and ``|z| sech^2(z) < 0.45``, so ``|GELU'| <= 1.68 <
    1.75``."""
    p = exact(x[0])
    if kind == "gelu_tanh":
        c = I.const(float(np.sqrt(2.0 / np.pi)), 4)
        a = I.const(0.044715, 1)  # the nearest float to the decimal
        inner = I.add(p, I.mul(a, I.mul(p, I.mul(p, p))))
        t = I.tanh_ball(I.mul(c, inner))
        lip = 1.75
    else:
        t = I.erf_ball(I.mul(p, I.const(float(np.sqrt(0.5)), 2)))
        lip = 1.25
    g = I.scale(I.mul(p, I.add_exact(t, 1.0)), 0.5)
    return g[0], I.up(g[1] + lip * x[1], 3)


class _Weights:
    """The spec's tensors as float64 arrays with their absolute values, read once."""

    def __init__(self, spec: LMSpec) -> None:
        self.spec = spec
        self.t = {name: spec.get(name) for name in spec.shapes()}
        head = self.t["wte" if spec.tied_head else "head"]
        self.t["head.T"] = np.ascontiguousarray(head.T)
        self.abs = {name: np.abs(w) for name, w in self.t.items() if w.ndim == 2}

    def affine(self, x: Ball, name: str) -> Ball:
        y = I.matmul_exact(x, self.t[name + ".weight"], self.abs[name + ".weight"])
        return I.add_exact(y, self.t[name + ".bias"])

    def ln(self, x: Ball, name: str) -> Ball:
        return layernorm(x, self.t[name + ".weight"], self.t[name + ".bias"],
                         self.spec.layer_norm_eps)


def logit_balls(w: _Weights, tokens: np.ndarray) -> Ball:
    """Balls ``[B, n, vocab]`` around the exact logits of the sequences ``tokens [B, n]``."""
    spec = w.spec
    n = tokens.shape[1]
    x = I.add_exact(I.exact(w.t["wte"][tokens]), w.t["wpe"][:n][None])
    for i in range(spec.layers):
        p = f"h{i}."
        o = attention(w.affine(w.ln(x, p + "ln1"), p + "attn"), spec.heads)
        x = I.add(x, w.affine(o, p + "attn.proj"))
        h = gelu(w.affine(w.ln(x, p + "ln2"), p + "mlp.fc"), spec.activation)
        x = I.add(x, w.affine(h, p + "mlp.proj"))
    h = w.ln(x, "lnf")
    return I.matmul_exact(h, w.t["head.T"], w.abs["head.T"])


def prove_fast(spec: LMSpec, sequences: Sequence[Sequence[int]],
               labels: Sequence[Sequence[int]],
               progress: Callable[[str, int, int], None] | None = None, batch: int = 64,
               on_logits: OnLogits | None = None
               ) -> tuple[list[tuple[int, ...]], list[tuple[tuple[int, float], ...]]]:
    """``(proved, failed)`` per sequence, as :class:`~exactmem.model.lm_bounds.PositionBounds`
    holds them; ``on_logits(i, lo, hi)`` receives float bounds ``lo <= logit <= hi``
    ``[n, vocab]`` of every sequence ``i``."""
    w = _Weights(spec)
    proved: list[tuple[int, ...]] = []
    failed: list[tuple[tuple[int, float], ...]] = []
    with np.errstate(all="ignore"):  # an overflow is an infinite radius: never proved
        for b0 in range(0, len(sequences), batch):
            toks = np.asarray(sequences[b0:b0 + batch], dtype=np.int64)
            ys = np.asarray(labels[b0:b0 + batch], dtype=np.int64)
            mid, rad = logit_balls(w, toks)
            lo, hi = I.lohi((mid, rad))
            ix = np.indices(ys.shape)
            lab_lo = lo[ix[0], ix[1], ys]
            others = hi.copy()
            others[ix[0], ix[1], ys] = -np.inf
            ok = lab_lo > others.max(-1)
            mids = mid.copy()
            lab_mid = mids[ix[0], ix[1], ys]
            mids[ix[0], ix[1], ys] = -np.inf
            margin = lab_mid - mids.max(-1)
            for j in range(len(toks)):
                proved.append(tuple(int(p) for p in np.flatnonzero(ok[j])))
                failed.append(tuple((int(p), float(margin[j, p]))
                                    for p in np.flatnonzero(~ok[j])))
                if on_logits is not None:
                    on_logits(b0 + j, lo[j], hi[j])
            if progress is not None:
                progress("bounds", min(b0 + batch, len(sequences)), len(sequences))
    return proved, failed
