"""Rigorous evaluation of networks with softmax attention: an interval forward pass.

``exp`` of a non-zero rational is irrational, so a softmax layer with non-zero scores has no
exact rational output.  This module carries, for every activation, a *midpoint-radius*
interval with rational endpoints, ``[mid - rad, mid + rad]`` (integer numerators ``mid``,
``rad >= 0`` over one shared denominator per layer):

* exact layers (affine maps, ReLU, uniform attention) act on intervals exactly
  (``W x``: ``mid -> W mid``, ``rad -> |W| rad``; ReLU maps endpoints);
* a softmax head encloses every attention row with :func:`exactmem.arith.softmax_enclosure`
  (rigorous Taylor bounds of ``exp``), rounds the weights outward to a fixed dyadic grid and
  multiplies intervals (``|a b - a0 b0| <= |a0| rb + ra |b0| + ra rb``);
* the readout is *certified* when the label is forced by the bounds: argmax - the label's
  lower bound beats every other class's upper bound; scalar - ``|out - label| <= epsilon``
  on the whole interval (``epsilon = None`` demands an exact point).  It is *refuted* when
  the bounds exclude the label, and *undecided* otherwise.

The verdict at each read position and the precision ladder are
:mod:`exactmem.model.interval_verdict`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from exactmem.arith import ScaledMatrix, softmax_enclosure
from exactmem.errors import SpecError
from exactmem.model.dataset import Dataset
from exactmem.model.forward import (
    Progress,
    State,
    Tick,
    apply_attention,
    initial_state,
    needed_positions,
    query_groups,
    ticker,
)
from exactmem.model.spec import Affine, Attention, FeedForward, Linear, NetworkSpec

DEFAULT_PRECISIONS: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)


class Undecided(Exception):
    """A comparison inside the network (hardmax on intervals) cannot be decided."""


@dataclass(slots=True)
class IState:
    """Activations ``[mid - rad, mid + rad] / den`` on a table of columns (see ``State``)."""

    mid: np.ndarray  # (dim, M) object ints
    rad: np.ndarray  # (dim, M) object ints >= 0
    den: int
    index: np.ndarray  # (N, n)

    def exact(self) -> bool:
        return not self.rad.any()


def has_softmax_scores(spec: NetworkSpec) -> bool:
    """True when some softmax head has non-zero scores (the exact pass cannot run it)."""
    return any(isinstance(la, Attention) and la.kind == "softmax"
               and not all(h.scores_are_zero() for h in la.heads) for la in spec.layers)


def _obj(m: ScaledMatrix) -> np.ndarray:
    return np.array(m.num, dtype=object).reshape(m.shape)


def _zeros_like(a: np.ndarray) -> np.ndarray:
    return np.zeros(a.shape, dtype=object)


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def _rescale(mid: np.ndarray, rad: np.ndarray, den: int, new: int) -> tuple[np.ndarray, np.ndarray]:
    f = new // den
    return (mid, rad) if f == 1 else (mid * f, rad * f)


def _add(a: tuple[np.ndarray, np.ndarray, int], b: tuple[np.ndarray, np.ndarray, int],
         ) -> tuple[np.ndarray, np.ndarray, int]:
    den = _lcm(a[2], b[2])
    am, ar = _rescale(a[0], a[1], a[2], den)
    bm, br = _rescale(b[0], b[1], b[2], den)
    return am + bm, ar + br, den


def _reduce(mid: np.ndarray, rad: np.ndarray, den: int) -> tuple[np.ndarray, np.ndarray, int]:
    g = den
    for v in (*mid.flat, *rad.flat):
        g = math.gcd(g, int(v))
        if g == 1:
            return mid, rad, den
    return mid // g, rad // g, den // g


def affine_interval(aff: Affine, mid: np.ndarray, rad: np.ndarray, den: int,
                    ) -> tuple[np.ndarray, np.ndarray, int]:
    """``W x + b`` on interval columns: ``mid -> W mid + b``, ``rad -> |W| rad`` (exact)."""
    w = _obj(aff.weight)
    out_m = w.dot(mid)
    out_r = np.abs(w).dot(rad) if rad.any() else _zeros_like(out_m)
    out_den = aff.weight.den * den
    if aff.bias is not None:
        b = _obj(aff.bias)
        res = _add((out_m, out_r, out_den), (np.repeat(b, mid.shape[1], axis=1),
                                             _zeros_like(out_m), aff.bias.den))
        out_m, out_r, out_den = res
    return _reduce(out_m, out_r, out_den)


def _relu(mid: np.ndarray, rad: np.ndarray, den: int) -> tuple[np.ndarray, np.ndarray, int]:
    lo = np.where(mid - rad > 0, mid - rad, 0).astype(object)
    hi = np.where(mid + rad > 0, mid + rad, 0).astype(object)
    return _reduce(lo + hi, hi - lo, 2 * den)


def _weights_grid(lo: Fraction, hi: Fraction, bits: int) -> tuple[int, int]:
    """Outward rounding of ``[lo, hi]`` to the grid ``2^-bits``: (mid, rad) over ``2^(bits+1)``."""
    a = (lo.numerator << bits) // lo.denominator
    b = -((-(hi.numerator << bits)) // hi.denominator)
    return a + b, b - a


def _scores(km: np.ndarray, kr: np.ndarray, qm: np.ndarray, qr: np.ndarray,
            ) -> tuple[np.ndarray, np.ndarray]:
    """Score intervals ``k . q`` for (s, N, K) keys and (s, N, P) queries -> (N, K, P)."""
    mid = (km[:, :, :, None] * qm[:, :, None, :]).sum(axis=0)
    if not kr.any() and not qr.any():
        return mid, _zeros_like(mid)
    rad = (np.abs(km)[:, :, :, None] * qr[:, :, None, :]
           + kr[:, :, :, None] * np.abs(qm)[:, :, None, :]
           + kr[:, :, :, None] * qr[:, :, None, :]).sum(axis=0)
    return mid, rad


def _attention_weights(att: Attention, smid: np.ndarray, srad: np.ndarray, sden: int,
                       precision: int, stats: dict[str, int], tick: Tick | None = None,
                       ) -> tuple[np.ndarray, np.ndarray, int]:
    """Interval attention weights (N, K, P) as (mid, rad) over ``2^(bits+1)``; ``tick()``
    once per sequence."""
    N, K, P = smid.shape
    bits = precision + 8
    wm = np.empty((N, K, P), dtype=object)
    wr = np.empty((N, K, P), dtype=object)
    for i in range(N):
        if tick is not None:
            tick()
        for p in range(P):
            col_m = [int(x) for x in smid[i, :, p]]
            col_r = [int(x) for x in srad[i, :, p]]
            if att.kind == "softmax":
                lo_s = [Fraction(m - r, sden) for m, r in zip(col_m, col_r, strict=True)]
                exact = not any(col_r)
                hi_s = None if exact else [Fraction(m + r, sden)
                                           for m, r in zip(col_m, col_r, strict=True)]
                enc = softmax_enclosure(lo_s, hi_s, precision)
                stats["order"] = max(stats.get("order", 0), enc.order)
                for j in range(K):
                    wm[i, j, p], wr[i, j, p] = _weights_grid(enc.lower[j], enc.upper[j], bits)
            else:  # hardmax on intervals: only a unique, strictly separated winner is decided
                lows = [m - r for m, r in zip(col_m, col_r, strict=True)]
                highs = [m + r for m, r in zip(col_m, col_r, strict=True)]
                top = max(range(K), key=lambda j: lows[j])
                if any(highs[j] >= lows[top] for j in range(K) if j != top):
                    raise Undecided(f"hardmax winner of sequence {i} is not separated")
                for j in range(K):
                    wm[i, j, p] = (2 << bits) if j == top else 0
                    wr[i, j, p] = 0
    return wm, wr, 2 << bits


def _scored(att: Attention) -> int:
    """Heads whose weights are computed per sequence (non-zero scores)."""
    return 0 if att.kind == "uniform" else sum(not h.scores_are_zero() for h in att.heads)


def interval_units(spec: NetworkSpec, N: int) -> int:
    """Units of progress of :func:`interval_forward`: one per affine map, per head without
    scores, and per sequence of each head with scores."""
    total = 0
    for layer in spec.layers:
        if isinstance(layer, FeedForward):
            total += len(layer.layers)
        elif isinstance(layer, Attention):
            scored = _scored(layer)
            total += len(layer.heads) - scored + scored * N
        elif isinstance(layer, Linear):
            total += 1
    return total


def attention_interval(att: Attention, st: IState, queries: list[int], precision: int,
                       stats: dict[str, int], tick: Tick | None = None) -> IState:
    """Column-wise attention (spec eq. 2) on interval activations at ``queries``; ``tick()``
    per head without scores and per sequence of a head with scores."""
    def step() -> None:
        if tick is not None:
            tick()

    if st.exact() and (att.kind != "softmax" or all(h.scores_are_zero() for h in att.heads)):
        cols = st.mid
        ex = apply_attention(att, State(cols, st.den, st.index), queries)
        for _ in range(len(att.heads) - _scored(att) + _scored(att) * st.index.shape[0]):
            step()
        mid = np.asarray(ex.cols).astype(object)
        return IState(mid, _zeros_like(mid), ex.den, ex.index)
    n = st.index.shape[1]
    groups = query_groups(att, n, queries)
    needed = sorted({p for keys, _ in groups for p in keys})
    if (st.index[:, needed] < 0).any() or (st.index[:, queries] < 0).any():
        raise SpecError("attention needs positions that an earlier stage dropped")
    total: tuple[np.ndarray, np.ndarray, int] | None = None
    N, P = st.index.shape[0], len(queries)
    for head in att.heads:
        ov = head.output.matmul(head.value)
        vm, vr, vden = affine_interval(Affine(ov), st.mid, st.rad, st.den)
        scored = not (head.scores_are_zero() or att.kind == "uniform")
        if scored:
            qm, qr, qden = affine_interval(Affine(head.query, head.query_bias), st.mid, st.rad,
                                           st.den)
            km, kr, kden = affine_interval(Affine(head.key, head.key_bias), st.mid, st.rad,
                                           st.den)
        pieces = []
        for keys, slots in groups:
            qs = [queries[j] for j in slots]
            V_m, V_r = vm[:, st.index[:, keys]], vr[:, st.index[:, keys]]  # (m, N, K)
            if not scored:
                out_m = np.repeat(V_m.sum(axis=2)[:, :, None], len(qs), axis=2)
                out_r = np.repeat(V_r.sum(axis=2)[:, :, None], len(qs), axis=2)
                pieces.append((slots, out_m, out_r, vden * len(keys)))
                continue
            smid, srad = _scores(km[:, st.index[:, keys]], kr[:, st.index[:, keys]],
                                 qm[:, st.index[:, qs]], qr[:, st.index[:, qs]])
            sden = qden * kden
            if head.scale != 1:  # scores times the scale, exactly
                smid, srad = smid * head.scale.numerator, srad * head.scale.numerator
                sden *= head.scale.denominator
            wm, wr, wden = _attention_weights(att, smid, srad, sden, precision, stats,
                                              step if slots == groups[0][1] else None)
            # sum_j w_j v_j with w >= 0:  mid = sum wm vm;  rad = sum wm vr + wr |vm| + wr vr
            out_m = (V_m[:, :, :, None] * wm[None]).sum(axis=2)
            out_r = (V_r[:, :, :, None] * wm[None] + np.abs(V_m)[:, :, :, None] * wr[None]
                     + V_r[:, :, :, None] * wr[None]).sum(axis=2)
            pieces.append((slots, out_m, out_r, vden * wden))
        if not scored:
            step()
        pden = 1
        for *_, d in pieces:
            pden = _lcm(pden, d)
        out_m = np.zeros((ov.shape[0], N, P), dtype=object)
        out_r = np.zeros((ov.shape[0], N, P), dtype=object)
        for slots, pm, pr, d in pieces:
            out_m[:, :, slots] = pm * (pden // d)
            out_r[:, :, slots] = pr * (pden // d)
        part = (out_m, out_r, pden)
        shift = head.constant()
        if shift is not None:
            sm = np.repeat(np.repeat(_obj(shift)[:, :, None], N, axis=1), P, axis=2)
            part = _add(part, (sm, _zeros_like(sm), shift.den))
        total = part if total is None else _add(total, part)
    assert total is not None
    tm, tr, tden = total
    if att.residual:
        bm = st.mid[:, st.index[:, queries]]
        br = st.rad[:, st.index[:, queries]]
        tm, tr, tden = _add((tm, tr, tden), (bm, br, st.den))
    m = tm.shape[0]
    flat_m = tm.reshape(m, N * P)
    flat_r = tr.reshape(m, N * P)
    index = np.full(st.index.shape, -1, dtype=np.int64)
    index[:, queries] = np.arange(N * P, dtype=np.int64).reshape(N, P)
    flat_m, flat_r, tden = _reduce(flat_m, flat_r, tden)
    return IState(flat_m, flat_r, tden, index)


def interval_forward(spec: NetworkSpec, ds: Dataset, precision: int,
                     progress: Progress | None = None) -> tuple[IState, dict[str, int]]:
    """Interval outputs of every layer's needed positions; ``stats['order']`` = the largest
    Taylor order used by the exp bounds.  ``progress(f"forward at {precision} bits", done,
    total)`` is called as it advances (see :func:`interval_units`)."""
    tick = ticker(progress, f"forward at {precision} bits", interval_units(spec, ds.N))
    st0, start = initial_state(spec, ds)
    mid = np.asarray(st0.cols).astype(object)
    st = IState(mid, _zeros_like(mid), st0.den, st0.index)
    need = needed_positions(spec)
    stats: dict[str, int] = {"order": 0}
    for i in range(start, len(spec.layers)):
        layer = spec.layers[i]
        if isinstance(layer, Linear):
            m, r, d = affine_interval(layer.map, st.mid, st.rad, st.den)
            st = IState(m, r, d, st.index)
            tick()
        elif isinstance(layer, FeedForward):
            m, r, d = st.mid, st.rad, st.den
            for j, aff in enumerate(layer.layers):
                if j:
                    m, r, d = _relu(m, r, d)
                m, r, d = affine_interval(aff, m, r, d)
                tick()
            if layer.residual:
                m, r, d = _add((m, r, d), (st.mid, st.rad, st.den))
            st = IState(m, r, d, st.index)
        elif isinstance(layer, Attention):
            st = attention_interval(layer, st, need[i], precision, stats, tick)
        else:
            raise SpecError(f"layer {i}: an embedding may only be the first layer")
    return st, stats
