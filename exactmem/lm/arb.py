"""The language-model function on python-flint ``arb`` balls (the reference producer,
:func:`~exactmem.lm.positions.prove_positions` with ``producer="arb"``), one layer at a
time so that :mod:`exactmem.lm.split` can hand over to float64 norm balls part way.

Every stored weight enters exactly (a binary float is an ``arb`` of radius 0).  Matrix products
run as ``arb_mat`` products over all positions of all sequences at once; LayerNorm (or
RMSNorm), GELU and softmax run per entry with arb's rigorous ``rsqrt``, ``tanh``, ``erf`` and
``exp``.  A *state* is a list of rows (one per position, sequences of ``n`` positions one after
another), each row ``d_model`` arb balls that contain the exact residual-stream vector.  Call
with ``flint.ctx.prec`` set: :data:`PREC` bits or more, as
:class:`~exactmem.lm.arb_precision.ArbStates` chooses.

Rotary positions (:func:`rotary_tables`): the certified function uses the exact reals
``cos(p omega_j)`` and ``sin(p omega_j)``, ``omega_j`` the stored float ``rope.inv_freq[j]``
(the float32 value ``transformers`` computes, exactly) and ``p`` the position; the product
``p omega_j`` is exact at :data:`PREC` bits and arb's ``cos`` / ``sin`` enclose the values
rigorously.  (The model's own tables are the float32 roundings of cos and sin at the float32
rounding of ``p omega_j``: within ``2^-24 (1 + p omega_j)`` of these.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import cast

import flint
import numpy as np

from exactmem.lm import block
from exactmem.lm.block import Ops
from exactmem.lm.decoder import INV_FREQ, LMSpec, layer_of

PREC = 128  # bits of the ball midpoints (as the checker carries)
Rows = list[list[flint.arb]]


def float64(x: flint.arb, down: bool) -> float:
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


def _layernorm(rows: Rows, g: list[float], b: list[float], eps: flint.arb) -> Rows:
    out = []
    d = len(g)
    for x in rows:
        mu = sum(x) / d
        c = [v - mu for v in x]
        s = (sum(v * v for v in c) / d + eps).rsqrt()
        out.append([v * s * gi + bi for v, gi, bi in zip(c, g, b, strict=True)])
    return out


def _rmsnorm(rows: Rows, g: list[float], b: list[float], eps: flint.arb) -> Rows:
    """``x / sqrt(mean(x^2) + eps) * g + b`` per row (no centring)."""
    out = []
    d = len(g)
    for x in rows:
        s = (sum(v * v for v in x) / d + eps).rsqrt()
        out.append([v * s * gi + bi for v, gi, bi in zip(x, g, b, strict=True)])
    return out


def _affine(rows: Rows, wb: flint.arb_mat) -> Rows:
    """``x W + b`` as one product: ``[x, 1] [W; b]`` (``wb``: :func:`_augmented`)."""
    one = flint.arb(1)
    return (flint.arb_mat([r + [one] for r in rows]) * wb).tolist()


def _augmented(w: list[list[float]], b: list[float]) -> flint.arb_mat:
    """``[W; b]``: the weight rows, then the bias (exact floats)."""
    return _mat(w + [b])


def _relu(x: flint.arb) -> flint.arb:
    if x >= 0:
        return x
    if x <= 0:
        return flint.arb(0)
    h = (x.upper() / 2).mid()  # [0, upper] as the ball h +- h (radius rounded up)
    return flint.arb(h, h)


def _gelu(rows: Rows, kind: str) -> Rows:
    """GELU per entry.  Tanh form as ``x / (1 + e^{-2z})``, ``z = c (x + a x^3)`` (the same
    real function: ``(1 + tanh z) / 2 = 1 / (1 + e^{-2z})``), fewer arb operations."""
    if kind == "relu":
        return [[_relu(x) for x in r] for r in rows]
    one = flint.arb(1)
    if kind == "silu":
        return [[x / (one + (-x).exp()) for x in r] for r in rows]
    if kind == "gelu_tanh":
        c = (2 / flint.arb.pi()).sqrt()
        a = flint.arb(flint.fmpq(44715, 10 ** 6))
        m2c, m2ca = -2 * c, -2 * c * a
        return [[x / (one + (x * (m2c + m2ca * (x * x))).exp()) for x in r] for r in rows]
    half = one / 2
    s = flint.arb(2).sqrt()
    return [[half * x * (one + (x / s).erf()) for x in r] for r in rows]


def rotary_tables(inv_freq: Sequence[float], n: int) -> tuple[Rows, Rows]:
    """``cos(p omega_j)`` and ``sin(p omega_j)`` as arb balls, ``[n][r/2]``: ``p omega_j``
    is exact (an integer times a stored float, at :data:`PREC` bits for ``omega_j`` of at
    most 53 significant bits and ``p < 2^70``), cos and sin are arb's rigorous enclosures."""
    w = [flint.arb(x) for x in inv_freq]
    angles = [[flint.arb(p) * x for x in w] for p in range(n)]
    return [[a.cos() for a in r] for r in angles], [[a.sin() for a in r] for r in angles]


def rotary_balls(inv_freq: Sequence[float], n: int
                 ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Float64 balls ``(mid, rad)`` ``[n, r/2]`` that contain ``cos(p omega_j)`` and ``sin(p
    omega_j)``, from arb once per (position, frequency) at :data:`PREC` bits: the midpoint is
    the float nearest arb's midpoint, the radius arb's ``|ball - midpoint|`` rounded upward."""
    old = flint.ctx.prec
    flint.ctx.prec = PREC
    try:
        out = []
        for table in rotary_tables(inv_freq, n):
            mid = [[float(v.mid()) for v in r] for r in table]
            rad = [[float64(abs(v - flint.arb(f)).upper(), False) for v, f in zip(r, mr,
                                                                                   strict=True)]
                   for r, mr in zip(table, mid, strict=True)]
            out.append((np.array(mid).reshape(n, -1), np.array(rad).reshape(n, -1)))
    finally:
        flint.ctx.prec = old
    return out[0], out[1]


def _rotate(v: list[flint.arb], c: list[flint.arb], s: list[flint.arb]) -> list[flint.arb]:
    """Rotary positions on one head's vector ``v`` (``rotate_half`` pairs ``j, j + r/2``)."""
    half = len(c)
    a, b = v[:half], v[half:2 * half]
    return ([x * ci - y * si for x, y, ci, si in zip(a, b, c, s, strict=True)]
            + [y * ci + x * si for x, y, ci, si in zip(a, b, c, s, strict=True)] + v[2 * half:])


def _attention(rows: Rows, spec: LMSpec, layer: int, n: int,
               tables: tuple[Rows, Rows] | None) -> Rows:
    """Causal softmax attention on the q|k|v rows of consecutive sequences of length n
    (rotary positions from ``tables``, grouped-query heads, the scores' divisor of block
    ``layer``)."""
    d, dh, heads = spec.d_model, spec.d_head, spec.heads
    kd, rep = spec.n_kv * dh, heads // spec.n_kv
    a_, b_ = spec.score_divisor(layer)
    scale = 1 / (flint.arb(a_).sqrt() * b_)
    out: Rows = [[] for _ in rows]
    for s0 in range(0, len(rows), n):
        seq = rows[s0:s0 + n]
        for h in range(heads):
            g = h // rep
            qr = [r[h * dh:(h + 1) * dh] for r in seq]
            kr = [r[d + g * dh:d + (g + 1) * dh] for r in seq]
            if tables is not None:
                qr = [_rotate(v, tables[0][p], tables[1][p]) for p, v in enumerate(qr)]
                kr = [_rotate(v, tables[0][p], tables[1][p]) for p, v in enumerate(kr)]
            q, k = flint.arb_mat(qr), flint.arb_mat(kr)
            v = flint.arb_mat([r[d + kd + g * dh:d + kd + (g + 1) * dh] for r in seq])
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


def _add(x: Rows, o: Rows) -> Rows:
    return [[a + c for a, c in zip(r, s, strict=True)] for r, s in zip(x, o, strict=True)]


class ArbNet(Ops[Rows]):
    """The operations of :mod:`exactmem.lm.block` on arb rows (``n``: the sequence length of
    the rows in hand).  A weight matrix becomes an ``arb_mat`` on its first use and is kept:
    a pass that stops after ``k`` blocks converts those ``k`` blocks only, and the head (the
    vocabulary's rows, the largest matrix) only when a sequence climbs to the logits; token
    and position rows are read from the spec's arrays per sequence (bounded memory for real
    vocabularies)."""

    def __init__(self, spec: LMSpec) -> None:
        self.spec = spec
        self.n = spec.context
        self.eps = flint.arb(flint.fmpq(*spec.eps_fraction().as_integer_ratio()))
        self._w: dict[str, flint.arb_mat] = {}
        self._vec: dict[str, list[float]] = {}
        self._head: flint.arb_mat | None = None
        self.tables: dict[tuple[int, int], tuple[Rows, Rows]] = {}  # by (n, precision)

    def vec(self, name: str) -> list[float]:
        """The 1-D tensor ``name`` as floats (read once)."""
        if name not in self._vec:
            self._vec[name] = self.spec.get(name).tolist()
        return self._vec[name]

    def weights(self, name: str) -> flint.arb_mat:
        """``[W; b]`` of the map ``name`` (:func:`_augmented`), converted on first use."""
        if name not in self._w:
            self._w[name] = _augmented(self.spec.get(name + ".weight").tolist(),
                                       self.spec.get(name + ".bias").tolist())
        return self._w[name]

    def head_mat(self) -> flint.arb_mat:
        """The head's ``d x V`` matrix (the token table when tied), converted on first use."""
        if self._head is None:
            self._head = _mat(self.spec.get("wte" if self.spec.tied_head else "head")
                              .T.tolist())
        return self._head

    def norm(self, x: Rows, name: str) -> Rows:
        """The norm ``name`` (LayerNorm, or RMSNorm when ``spec.norm`` says so)."""
        norm = _rmsnorm if self.spec.norm == "rmsnorm" else _layernorm
        return norm(x, self.vec(name + ".weight"), self.vec(name + ".bias"), self.eps)

    def linear(self, x: Rows, name: str) -> Rows:
        return _affine(x, self.weights(name))

    def attention(self, x: Rows, name: str) -> Rows:
        tables = None
        if self.spec.rotary_dims:
            key = (self.n, flint.ctx.prec)
            if key not in self.tables:
                self.tables[key] = rotary_tables(self.vec(INV_FREQ), self.n)
            tables = self.tables[key]
        return _attention(_affine(x, self.weights(name)), self.spec, layer_of(name), self.n, tables)

    def product(self, a: Rows, b: Rows) -> Rows:
        return [[x * y for x, y in zip(r, s, strict=True)] for r, s in zip(a, b, strict=True)]

    def activation(self, x: Rows) -> Rows:
        return _gelu(x, self.spec.activation)

    def residual(self, x: Rows, h: Rows, name: str) -> Rows:
        return _add(x, _affine(h, self.weights(name)))

    def head(self, x: Rows) -> Rows:
        return (flint.arb_mat(x) * self.head_mat()).tolist()

    def embed(self, chunk: Sequence[Sequence[int]]) -> Rows:
        """``wte[t_p] + wpe[p]`` for every position of every sequence of ``chunk``."""
        wte = self.spec.get("wte")
        if self.spec.rotary_dims:  # rotary positions: no position embedding
            return [[flint.arb(a) for a in wte[t].tolist()] for seq in chunk for t in seq]
        wpe = self.spec.get("wpe")
        return [[flint.arb(a) + flint.arb(p) for a, p in zip(wte[t].tolist(), wpe[k].tolist(),
                                                             strict=True)]
                for seq in chunk for k, t in enumerate(seq)]

    def layer(self, x: Rows, i: int, n: int) -> Rows:
        """Block ``i`` (:func:`~exactmem.lm.block.layer`) on sequences of ``n`` positions."""
        self.n = n
        return block.layer(self, x, i)

    def logits(self, x: Rows) -> Rows:
        """The final norm (when there is one) and the head: one row of logit balls a
        position."""
        return cast(Rows, block.logits(self, x))


def decide_rows(logits: Rows, labels: Sequence[int]) -> tuple[list[int], list[tuple[int, float]]]:
    """One sequence's logit ball rows: the positions whose label's ball lies strictly above
    every other, and the others with their float margins (label midpoint minus the best
    other midpoint)."""
    ok, bad = [], []
    for k, (row, y) in enumerate(zip(logits, labels, strict=True)):
        lo = row[y].lower()
        if all(lo > v.upper() for c, v in enumerate(row) if c != y):
            ok.append(k)
        else:
            mids = [float(v.mid()) for v in row]
            bad.append((k, mids[y] - max(m for c, m in enumerate(mids) if c != y)))
    return ok, bad
