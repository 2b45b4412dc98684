"""Lemma C.1 of Kajitsuka & Sato (ICLR 2025) — Vardi et al.'s memorizing ReLU network.

Given 1-D labelled points ``x_1 < ... < x_N`` (all >= 2, pairwise >= 2 apart, also from
every point that must map to 0) with labels ``y_i >= 1``, the emitted narrow network maps
``x_i -> y_i`` and every other point that is >= 2 away from all ``x_i`` to ``0``.

Stage II (Lemma G.3): the sorted points form ``m`` blocks of ``k`` consecutive points; block
``j`` owns the integers ``u_j`` (slot ``p`` holds ``floor(x_{jk+p})`` in ``rho`` bits) and
``w_j`` (slot ``p`` holds ``y_{jk+p}`` in ``c`` bits, eqs. 99-100).  One interval indicator
(Lemma G.2) per block adds ``w_j I_j(x)`` and ``u_j I_j(x)`` to two accumulators; the
indicators are pipelined, one ReLU layer per block.

Stage III (Lemma G.6, with the rho/c assignment corrected: ``rho`` = bits of a floor field,
``c`` = bits of a label field): the fields are peeled off the accumulators most significant
first by threshold bit extraction (one layer per bit, see :mod:`._gadgets`), and after each
field :func:`~._gadgets.label_select` adds the label field if ``floor(x)`` equals the floor
field.  Width <= 12 channels; ``m + k max(rho, c) + 4`` affine maps.

Deviations from the paper (exact, documented in docs/constructions/kajitsuka2025.md): bit
extraction by integer thresholds instead of the tent map (same interface, 1 layer per bit),
the G.5 test fused into the label selection, and pipelined indicator layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from exactmem.constructions._gadgets import (
    Expr,
    Program,
    bit_units,
    indicator_from_ramps,
    indicator_ramps,
    keep,
    select_ramps,
    select_term,
)
from exactmem.errors import ConstructionError


@dataclass(frozen=True, slots=True)
class Layout:
    """Block layout of one Lemma C.1 network: ``m`` blocks of ``k`` slots, field widths."""

    m: int
    k: int
    rho: int
    c: int

    @property
    def depth(self) -> int:
        """Affine maps emitted: ``m + 2`` (Stage II) and ``k max(rho, c) + 2`` (Stage III)."""
        return self.m + 2 + self.k * max(self.rho, self.c) + 2


def paper_block_size(n_points: int) -> int:
    """``k = ceil(N / ceil(sqrt(N log2 N)))`` (Lemma C.1: sqrt(N log N) blocks)."""
    if n_points <= 2:
        return 1
    m = math.ceil(math.sqrt(n_points * math.log2(n_points)))
    return max(1, math.ceil(n_points / m))


def layout(xs: Sequence[Fraction | int], labels: Sequence[int], block_size: int) -> Layout:
    k = max(1, min(block_size, len(xs)))
    m = math.ceil(len(xs) / k)
    rho = max(1, max(math.floor(x) for x in xs).bit_length())
    c = max(1, max(labels).bit_length())
    return Layout(m, k, rho, c)


@dataclass(frozen=True, slots=True)
class Grid:
    """Points ``keys[i] / den`` kept as integers over a common denominator (Lemma C.1 reads
    only their order, differences and floors, so any common denominator serves)."""

    keys: Sequence[int]
    den: int


def on_grid(*parts: Sequence[Fraction] | Grid) -> tuple[list[int], int]:
    """Integer keys of every point of ``parts``, in order, over one common denominator."""
    grids = [p if isinstance(p, Grid) else Grid(*over_one_denominator(p)) for p in parts]
    den = 1
    for g in grids:
        den = den * g.den // math.gcd(den, g.den)
    keys: list[int] = []
    for g in grids:
        keys += g.keys if g.den == den else [k * (den // g.den) for k in g.keys]
    return keys, den


def over_one_denominator(values: Sequence[Fraction | int]) -> tuple[list[int], int]:
    """Integer keys ``x * den`` over the least common denominator ``den`` of ``values``
    (exact: order, differences and floors are those of the fractions)."""
    den = 1
    for d in {x.denominator for x in values}:
        den = den * d // math.gcd(den, d)
    return [x.numerator * (den // x.denominator) for x in values], den


def _check_points(keys: Sequence[int], labels: Sequence[int], zero_keys: Sequence[int],
                  den: int) -> None:
    """Lemma C.1's conditions on the points ``keys / den`` and the zeros ``zero_keys / den``."""
    if not keys:
        raise ConstructionError("Lemma C.1 needs at least one labelled point")
    if len(keys) != len(labels):
        raise ConstructionError(f"{len(keys)} points but {len(labels)} labels")
    for i, y in enumerate(labels):
        if type(y) is not int or y < 1:
            raise ConstructionError(f"label {i} is {y!r}; Lemma C.1 needs labels >= 1 "
                                    f"(0 is the output for every other point)")
    allp = sorted([*keys, *zero_keys])
    if allp[0] < 2 * den:
        raise ConstructionError(f"Lemma C.1 needs points >= 2, found {Fraction(allp[0], den)}")
    two = 2 * den
    for a, b in zip(allp, allp[1:], strict=False):
        if b - a < two:
            raise ConstructionError(f"Lemma C.1 needs points >= 2 apart: {Fraction(a, den)} "
                                    f"and {Fraction(b, den)}")


def _add(*terms: tuple[int | Fraction, Expr]) -> dict[str, int | Fraction]:
    out: dict[str, int | Fraction] = {}
    for coef, expr in terms:
        for k, v in expr.items():
            out[k] = out.get(k, 0) + coef * v
    return {k: v for k, v in out.items() if v != 0}


def emit(prog: Program, xs: Sequence[Fraction] | Grid, labels: Sequence[int],
         zeros: Sequence[Fraction] | Grid = (), block_size: int | None = None,
         carry: Sequence[str] = (), pending: Expr | None = None, acc: str = "acc",
         ) -> tuple[Layout, Expr]:
    """Append Lemma C.1 (stages II and III) on channel ``"x"`` of ``prog``.

    ``carry`` channels (non-negative) pass through unchanged.  ``pending`` is an expression
    to store into channel ``acc`` at the first step (a running total of earlier networks).
    Returns the layout and the expression of ``acc + this network's output``, to be used by
    the caller's next step (the network's last term is still linear at that point).
    """
    keys, den = on_grid(xs, zeros)
    points = len(xs.keys) if isinstance(xs, Grid) else len(xs)
    _check_points(keys[:points], labels, keys[points:], den)
    order = sorted(range(points), key=keys.__getitem__)
    floors = [keys[i] // den for i in order]  # floor(x) of the sorted points
    ys = [labels[i] for i in order]
    lay = layout(floors, ys, block_size or paper_block_size(len(floors)))
    m, k, rho, c = lay.m, lay.k, lay.rho, lay.c
    u_blocks: list[int] = []
    w_blocks: list[int] = []
    bounds: list[tuple[int, int]] = []
    for j in range(m):
        blk = floors[j * k:(j + 1) * k]
        lab = ys[j * k:(j + 1) * k]
        u = w = 0
        for p in range(k):
            u = (u << rho) | (blk[p] if p < len(blk) else 0)
            w = (w << c) | (lab[p] if p < len(blk) else 0)
        u_blocks.append(u)
        w_blocks.append(w)
        bounds.append((blk[0], blk[-1] + 1))
    carried = keep(*carry)
    total: dict[str, Expr] = {}
    if pending:
        total = {acc: pending}

    # Stage II: pipelined interval indicators (Lemma G.2 / G.3)
    for t in range(m + 2):
        out: dict[str, Expr] = {"x": {"x": 1}, **carried, **total}
        if t >= 2:
            j = t - 2
            out["W"] = _add((1, {"W": 1} if j else {}), (w_blocks[j], {"I": 1}))
            out["U"] = _add((1, {"U": 1} if j else {}), (u_blocks[j], {"I": 1}))
        if 1 <= t <= m:
            out["I"] = indicator_from_ramps("g1", "g2")
        if t < m:
            out["g1"], out["g2"] = indicator_ramps("x", *bounds[t])
        prog.step(out)
        if pending:
            total = keep(acc)

    # Stage III: peel fields, select the label (Lemma G.4 / G.5 / G.6)
    steps = max(rho, c)
    ubit: tuple[int, int] | None = None  # (threshold, weight into r) of the bit in hu1/hu2
    wbit: tuple[int, int] | None = None
    have_r = have_v = have_out = False
    for p in range(k + 1):
        for tau in range(steps if p < k else 1):
            out = {"x": {"x": 1}, **carried, **total}
            u_now = _add((1, {"U": 1}), *(((-ubit[0], {"hu1": 1, "hu2": -1}),) if ubit else ()))
            w_now = _add((1, {"W": 1}), *(((-wbit[0], {"hw1": 1, "hw2": -1}),) if wbit else ()))
            r_now = _add(*(((1, {"r": 1}),) if have_r else ()),
                         *(((ubit[1], {"hu1": 1, "hu2": -1}),) if ubit else ()))
            v_now = _add(*(((1, {"v": 1}),) if have_v else ()),
                         *(((wbit[1], {"hw1": 1, "hw2": -1}),) if wbit else ()))
            if have_out:
                out["out"] = {"out": 1}
            if p > 0 and tau == 0:  # field p-1 complete: compare floor(x) with it
                out["e1"], out["e2"] = select_ramps("x", r_now)
                out["vh"] = v_now
                r_now, v_now = {}, {}
            if "t" in prog.channels:  # add the previous selection to the output
                out["out"] = _add((1, {"out": 1} if have_out else {}), (1, {"t": 1}))
                have_out = True
            if "e1" in prog.channels:
                out["t"] = select_term("vh", "e1", "e2", c)
            if p < k:
                if tau < rho:
                    tu = 1 << (rho * (k - p) - 1 - tau)
                    out["U"] = u_now
                    out["hu1"], out["hu2"] = bit_units(u_now, tu)
                    ubit = (tu, 1 << (rho - 1 - tau))
                else:
                    out["U"] = u_now
                    ubit = None
                if tau < c:
                    tw = 1 << (c * (k - p) - 1 - tau)
                    out["W"] = w_now
                    out["hw1"], out["hw2"] = bit_units(w_now, tw)
                    wbit = (tw, 1 << (c - 1 - tau))
                else:
                    out["W"] = w_now
                    wbit = None
                if r_now:
                    out["r"] = r_now
                if v_now:
                    out["v"] = v_now
                have_r, have_v = bool(r_now), bool(v_now)
            prog.step({key: val for key, val in out.items() if val or key in ("x",)})
    # after the compare step of the last field: one step computes t, the caller adds it
    out = {"x": {"x": 1}, **carried, **total, "t": select_term("vh", "e1", "e2", c)}
    if have_out:
        out["out"] = {"out": 1}
    if "t" in prog.channels:
        out["out"] = _add((1, {"out": 1} if have_out else {}), (1, {"t": 1}))
        have_out = True
    prog.step(out)
    result = _add((1, {"t": 1}), *(((1, {"out": 1}),) if have_out else ()),
                  *(((1, {acc: 1}),) if pending else ()))
    return lay, result
