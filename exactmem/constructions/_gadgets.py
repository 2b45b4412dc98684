"""Exact ReLU gadgets of Kajitsuka & Sato (ICLR 2025) App. G / Vardi et al. (ICLR 2022) App. A.

Narrow, deep ReLU networks are written as *programs over named channels*: every
:meth:`Program.step` is one affine map whose outputs are named channels; between two steps
the ReLU is applied (a :class:`~exactmem.model.spec.FeedForward` has no ReLU after its last
map).  A channel that carries a non-negative value passes through a ReLU unchanged, which
is how the constructions keep ``x``, accumulators and counters alive across layers.

The gadgets (each exact on the stated domain; ``proofs/lemma_gadgets.py`` proves them):

* :func:`interval_indicator` — Lemma G.2: ``I(x) = s(1 - s(2a - 2x) - s(2x - 2b))`` is 1 on
  ``[a, b]`` and 0 outside ``(a - 1/2, b + 1/2)``;
* :func:`unit_interval_test` — Lemma G.5: ``s(1 - s(2y - 2x) - s(2x - 2y - 2))`` is 1 for
  ``x in [y, y + 1]`` and 0 for ``x < y - 1/2`` or ``x > y + 3/2``;
* :func:`tent_bit_extraction` — Lemma G.4: bits of an ``n``-bit integer from the iterates of
  Telgarsky's tent map on ``u / 2^n + 2^-(n+1)`` and ``u / 2^n + 2^-(n+2)``;
* :func:`threshold_bit_extraction` — the same interface on the integer itself: bit ``q`` is
  ``s(U - T + 1) - s(U - T)`` with ``T = 2^(n-1-q)`` (exact because ``U`` is an integer),
  then ``U <- U - T * bit``; one ReLU layer per bit instead of three (used by default);
* :func:`label_select` — Lemma G.6's selection: ``s(v - 2^(c+1) (s(2r - 2x) + s(2x - 2r - 2)))``
  equals ``v`` if ``floor(x) = r`` and 0 if ``x < r - 1/2`` or ``x > r + 3/2`` (for
  ``0 <= v < 2^c``); this fuses G.5 and the final ``s(I 2^(c+1) - 2^(c+1) + v)`` of eq. (162);

Lemma C.2's projection is :mod:`exactmem.constructions._projection`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from exactmem.arith import ScaledMatrix
from exactmem.errors import ConstructionError
from exactmem.model.spec import Affine, FeedForward

ONE = "1"  # the key of the constant term in an expression
Expr = Mapping[str, int | Fraction]


def _matrix(rows: list[list[int | Fraction]], cols: int) -> ScaledMatrix:
    if all(type(x) is int for row in rows for x in row):
        return ScaledMatrix(tuple(tuple(int(x) for x in row) for row in rows), 1, cols)
    return ScaledMatrix.from_rows(rows, cols=cols)


class Program:
    """A deep ReLU network built step by step over named channels.

    ``Program(["x"])`` starts with one input channel; ``step({"y": {"x": 2, "1": -1}})``
    appends the affine map ``y = 2 x - 1``.  Outputs of every step but the last go through
    a ReLU before the next step reads them.
    """

    def __init__(self, inputs: Sequence[str]) -> None:
        if len(set(inputs)) != len(inputs) or not inputs:
            raise ConstructionError(f"program inputs must be distinct names: {list(inputs)}")
        self.inputs = tuple(inputs)
        self.channels = tuple(inputs)
        self.maps: list[Affine] = []
        self.names: list[tuple[str, ...]] = []  # output channel names of every map

    def step(self, exprs: Mapping[str, Expr]) -> None:
        """Append one affine map; ``exprs`` gives each output channel as a linear expression."""
        if not exprs:
            raise ConstructionError("a step needs at least one output channel")
        index = {c: j for j, c in enumerate(self.channels)}
        weights: list[list[int | Fraction]] = []
        bias: list[int | Fraction] = []
        for name, expr in exprs.items():
            row: list[int | Fraction] = [0] * len(self.channels)
            for key, coef in expr.items():
                if key == ONE:
                    continue
                if key not in index:
                    raise ConstructionError(f"step {len(self.maps)}: channel {key!r} of output "
                                            f"{name!r} does not exist; have {self.channels}")
                row[index[key]] += coef
            weights.append(row)
            bias.append(expr.get(ONE, 0))
        b = None if all(x == 0 for x in bias) else _matrix([[x] for x in bias], 1)
        self.maps.append(Affine(_matrix(weights, len(self.channels)), b))
        self.channels = tuple(exprs)
        self.names.append(self.channels)

    def feedforward(self) -> FeedForward:
        if not self.maps:
            raise ConstructionError("an empty program has no network")
        return FeedForward(tuple(self.maps), residual=False)


def keep(*names: str) -> dict[str, Expr]:
    """Pass-through expressions ``name = name`` (valid for non-negative channels)."""
    return {n: {n: 1} for n in names}


# ---- Lemma G.2 and G.5 ------------------------------------------------------------------
def indicator_ramps(x: str, a: int | Fraction, b: int | Fraction) -> tuple[Expr, Expr]:
    """The two hidden units of Lemma G.2: ``2a - 2x`` and ``2x - 2b`` (before the ReLU)."""
    return {x: -2, ONE: 2 * a}, {x: 2, ONE: -2 * b}


def indicator_from_ramps(g1: str, g2: str) -> Expr:
    """``1 - g1 - g2``: after a ReLU, the indicator of Lemma G.2 / G.5."""
    return {g1: -1, g2: -1, ONE: 1}


def interval_indicator(a: int | Fraction, b: int | Fraction) -> FeedForward:
    """Lemma G.2: ``R -> R``, 1 on ``[a, b]``, 0 outside ``(a - 1/2, b + 1/2)`` (``a < b``)."""
    if not a < b:
        raise ConstructionError(f"interval indicator needs a < b, found a = {a}, b = {b}")
    p = Program(["x"])
    g1, g2 = indicator_ramps("x", a, b)
    p.step({"g1": g1, "g2": g2})
    p.step({"i": indicator_from_ramps("g1", "g2")})
    p.step({"y": {"i": 1}})
    return p.feedforward()


def unit_interval_test() -> FeedForward:
    """Lemma G.5: ``(x, y) -> 1`` if ``y <= x <= y + 1``; ``-> 0`` if ``x < y - 1/2`` or
    ``x > y + 3/2``."""
    p = Program(["x", "y"])
    p.step({"g1": {"y": 2, "x": -2}, "g2": {"x": 2, "y": -2, ONE: -2}})
    p.step({"i": indicator_from_ramps("g1", "g2")})
    p.step({"out": {"i": 1}})
    return p.feedforward()


# ---- Lemma G.6: label selection -------------------------------------------------------------
def select_ramps(x: str, r: Expr) -> tuple[Expr, Expr]:
    """``2r - 2x`` and ``2x - 2r - 2`` for a field value given as an expression ``r``."""
    e1: dict[str, int | Fraction] = {k: 2 * v for k, v in r.items()}
    e1[x] = e1.get(x, 0) - 2
    e2: dict[str, int | Fraction] = {k: -2 * v for k, v in r.items()}
    e2[x] = e2.get(x, 0) + 2
    e2[ONE] = e2.get(ONE, 0) - 2
    return e1, e2


def select_term(v: str, e1: str, e2: str, c: int) -> Expr:
    """``v - 2^(c+1) (e1 + e2)``: after a ReLU, ``v`` on a match and 0 otherwise."""
    return {v: 1, e1: -(1 << (c + 1)), e2: -(1 << (c + 1))}


def label_select(c: int) -> FeedForward:
    """``(x, r, v) -> v`` if ``r <= x < r + 1`` and ``-> 0`` if ``x < r - 1/2`` or ``x > r + 3/2``.

    Valid for ``0 <= v < 2^c`` (Lemma G.6, with G.5 fused into the selection).
    """
    p = Program(["x", "r", "v"])
    e1, e2 = select_ramps("x", {"r": 1})
    p.step({"e1": e1, "e2": e2, "v": {"v": 1}})
    p.step({"t": select_term("v", "e1", "e2", c)})
    p.step({"out": {"t": 1}})
    return p.feedforward()


# ---- Lemma G.4: bit extraction ----------------------------------------------------------------
def bit_units(u: Expr, t: int) -> tuple[Expr, Expr]:
    """``U - T + 1`` and ``U - T``: after ReLUs their difference is ``[U >= T]`` for integer U."""
    return {**u, ONE: u.get(ONE, 0) + 1 - t}, {**u, ONE: u.get(ONE, 0) - t}


def threshold_bit_extraction(nbits: int) -> FeedForward:
    """``u -> (bit_0, ..., bit_{n-1})`` of an integer ``0 <= u < 2^n`` (bit 0 = most significant).

    Step ``q`` holds ``h1 = s(U - T + 1)``, ``h2 = s(U - T)`` with ``T = 2^(n-1-q)`` and the
    remainder ``U`` (already reduced by the previous bit); ``bit_q = h1 - h2``.
    """
    return threshold_bit_program(nbits).feedforward()


def threshold_bit_program(nbits: int) -> Program:
    """The program of :func:`threshold_bit_extraction` (channel names kept, for proofs)."""
    if nbits < 1:
        raise ConstructionError(f"bit extraction needs n >= 1, found {nbits}")
    p = Program(["u"])
    bits: list[str] = []
    prev: int | None = None
    for q in range(nbits):
        t = 1 << (nbits - 1 - q)
        u: dict[str, int | Fraction] = {"u": 1}
        if prev is not None:
            u.update({"h1": -prev, "h2": prev})
        h1, h2 = bit_units(u, t)
        out: dict[str, Expr] = {"u": u, "h1": h1, "h2": h2}
        if prev is not None:
            bits.append(f"b{q - 1}")
            out[bits[-1]] = {"h1": 1, "h2": -1}
        out.update(keep(*bits[:-1]))
        p.step(out)
        prev = t
    p.step({**{b: {b: 1} for b in bits}, f"b{nbits - 1}": {"h1": 1, "h2": -1}})
    return p


def _tent(z: str) -> tuple[Expr, Expr]:
    """Hidden units of ``psi(z) = s(s(2z) - s(4z - 2))`` (Telgarsky's tent map on [0, 1])."""
    return {z: 2}, {z: 4, ONE: -2}


def tent_bit_extraction(nbits: int) -> FeedForward:
    """Lemma G.4 with the tent map: ``u -> (bit_0, ..., bit_{n-1})`` for ``0 <= u < 2^n``.

    With ``t1 = T^k(u/2^n + 2^-(n+1))``, ``t2 = T^k(u/2^n + 2^-(n+2))``: ``P = [t1 > 1/2]``,
    ``Q = [t1 < t2]`` via steep ReLU steps of slope ``2^(n+1)``, ``2^(n+2)``; bit ``= P xor Q``.
    Three ReLU layers per bit (steps, xor / tent hidden units, tent output).
    """
    return tent_bit_program(nbits).feedforward()


def tent_bit_program(nbits: int) -> Program:
    """The program of :func:`tent_bit_extraction` (channel names kept, for proofs)."""
    if nbits < 1:
        raise ConstructionError(f"bit extraction needs n >= 1, found {nbits}")
    s1, s2 = 1 << (nbits + 1), 1 << (nbits + 2)
    p = Program(["u"])
    p.step({"t1": {"u": Fraction(1, 1 << nbits), ONE: Fraction(1, 1 << (nbits + 1))},
            "t2": {"u": Fraction(1, 1 << nbits), ONE: Fraction(1, 1 << (nbits + 2))}})
    bits: list[str] = []
    for q in range(nbits):
        # layer A: steep steps for P and Q, tent hidden units for t1 and t2
        a1, a2 = _tent("t1")
        c1, c2 = _tent("t2")
        p.step({"p1": {"t1": s1, ONE: -s1 // 2}, "p2": {"t1": s1, ONE: -s1 // 2 - 1},
                "q1": {"t2": s2, "t1": -s2}, "q2": {"t2": s2, "t1": -s2, ONE: -1},
                "a1": a1, "a2": a2, "c1": c1, "c2": c2, **keep(*bits)})
        # layer B: xor hidden units; tent outputs
        pq: dict[str, int | Fraction] = {"p1": 1, "p2": -1, "q1": -1, "q2": 1}
        p.step({"x1": pq, "x2": {k: -v for k, v in pq.items()},
                "t1": {"a1": 1, "a2": -1}, "t2": {"c1": 1, "c2": -1}, **keep(*bits)})
        bits.append(f"b{q}")
        p.step({bits[-1]: {"x1": 1, "x2": 1}, **keep("t1", "t2", *bits[:-1])})
    p.step({b: {b: 1} for b in bits})
    return p
