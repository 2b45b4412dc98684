"""Z3 proofs that the ReLU gadgets of ``exactmem.constructions._gadgets`` are exact on their
whole domains (Kajitsuka & Sato 2025, Lemmas G.2, G.4, G.5, G.6).

Each lemma translates the *built* network (the same functions the constructions call) into
linear real arithmetic: one fresh variable per unit, ``h = If(z > 0, z, 0)`` per ReLU, and
asks Z3 for an input in the domain where the claim fails.  ``unsat`` proves the claim for
every input; a model is a counterexample; a timeout is reported as ``unknown``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from exactmem.constructions._gadgets import (
    Program,
    indicator_from_ramps,
    indicator_ramps,
    label_select,
    tent_bit_program,
    threshold_bit_program,
    unit_interval_test,
)
from exactmem.model.spec import FeedForward

from .framework import Lemma, Outcome, advance, expect

MAX_BITS = 32
QUICK_BITS = 12  # exactmem prove --quick: bit lengths n = 1..12
TIMEOUT_MS = 120_000


def _z3() -> Any:
    import z3

    return z3


def encode(ff: FeedForward, inputs: Sequence[Any], solver: Any, tag: str) -> list[Any]:
    """Add the network's semantics to ``solver``; return the output expressions."""
    z3 = _z3()
    vals = list(inputs)
    for li, aff in enumerate(ff.layers):
        if li:
            relu = []
            for i, v in enumerate(vals):
                h = z3.Real(f"{tag}_r{li}_{i}")
                solver.add(h == z3.If(v > 0, v, 0))
                relu.append(h)
            vals = relu
        wden = aff.weight.den
        bias = aff.bias
        out = []
        for i, row in enumerate(aff.weight.num):
            terms = [z3.Q(w, wden) * vals[j] if wden != 1 else w * vals[j]
                     for j, w in enumerate(row) if w]
            if bias is not None and bias.num[i][0]:
                terms.append(z3.Q(bias.num[i][0], bias.den))
            y = z3.Real(f"{tag}_a{li}_{i}")
            solver.add(y == (z3.Sum(terms) if terms else z3.RealVal(0)))
            out.append(y)
        vals = out
    return vals


def _verdict(solver: Any, what: str) -> Outcome:
    z3 = _z3()
    solver.set("timeout", TIMEOUT_MS)
    res = solver.check()
    if res == z3.unsat:
        return Outcome("proved", what)
    if res == z3.sat:
        return Outcome("failed", f"counterexample: {solver.model()}")
    return Outcome("unknown", f"z3: {solver.reason_unknown()}")


def step_check(aff: Any, before: Sequence[Any], after: Sequence[Any], domain: Sequence[Any],
               relu: bool) -> Outcome:
    """One map: ``aff(relu(before)) == after`` for every input in ``domain`` (Z3, unsat)."""
    z3 = _z3()
    s = z3.Solver()
    s.add(*domain)
    vals = [z3.If(v > 0, v, 0) for v in before] if relu else list(before)
    bad = []
    for i, row in enumerate(aff.weight.num):
        terms = [z3.Q(w, aff.weight.den) * vals[j] for j, w in enumerate(row) if w]
        if aff.bias is not None and aff.bias.num[i][0]:
            terms.append(z3.Q(aff.bias.num[i][0], aff.bias.den))
        bad.append((z3.Sum(terms) if terms else z3.RealVal(0)) != after[i])
    s.add(z3.Or(bad))
    return _verdict(s, "")


def threshold_chain(n: int) -> Outcome:
    """Bit extraction for n bits, proved map by map: after map q the channels hold exactly
    ``u mod 2^(n-q)``, ``u mod 2^(n-q) - 2^(n-1-q) + 1``, ``... - 2^(n-1-q)`` and bits < q."""
    z3 = _z3()
    beta = [z3.Int(f"beta{q}") for q in range(n)]  # u = sum beta_q 2^(n-1-q): every n-bit u
    domain = [z3.And(x >= 0, x <= 1) for x in beta]
    prog = threshold_bit_program(n)

    def rem(q: int) -> Any:  # u mod 2^(n-q), linear in the bits
        return z3.ToReal(z3.Sum([beta[j] * 2 ** (n - 1 - j) for j in range(q, n)] or [0]))

    def value(name: str, q: int) -> Any:
        if name == "u":
            return rem(q)
        if name in ("h1", "h2"):
            return rem(q) - 2 ** (n - 1 - q) + (1 if name == "h1" else 0)
        return z3.ToReal(beta[int(name[1:])])

    return prove_maps(prog, [rem(0)], value, domain, n)


def prove_maps(prog: Any, before: list[Any], value: Callable[[str, int], Any],
               domain: Sequence[Any], n: int) -> Outcome:
    """Prove every map of ``prog`` in turn: from the channel values ``before`` (map 0's input),
    map ``m`` gives exactly ``value(name, m)`` on each of its output channels."""
    for m, (aff, names) in enumerate(zip(prog.maps, prog.names, strict=True)):
        after = [value(nm, m) for nm in names]
        res = step_check(aff, before, after, domain, relu=m > 0)
        advance()
        if res.status != "proved":
            return Outcome(res.status, f"n = {n}, map {m}: {res.detail}")
        before = after
    return Outcome("proved", "")


def all_bit_lengths(chain: Callable[[int], Outcome], program: Callable[[int], Any],
                    max_bits: int = MAX_BITS) -> Outcome:
    """``chain(n)`` for n = 1..max_bits; the first failure or unknown is the answer.
    Progress counts maps (``program(n)`` is the network that ``chain(n)`` proves)."""
    maps = sum(len(program(n).maps) for n in range(1, max_bits + 1))
    expect(maps)
    for n in range(1, max_bits + 1):
        res = chain(n)
        if res.status != "proved":
            return res
    return Outcome("proved", f"all n = 1..{max_bits}, {maps} maps")


def threshold_bits(max_bits: int = MAX_BITS) -> Outcome:
    """For n = 1..32: the threshold network returns bit q of every integer 0 <= u < 2^n."""
    return all_bit_lengths(threshold_chain, threshold_bit_program, max_bits)


def tent_chain(n: int) -> Outcome:
    """Tent-map bit extraction for n bits, map by map.  With ``u = sum beta_q 2^(n-1-q)``,
    ``z1 = (2u+1)/2^(n+1)``, ``z2 = (4u+1)/2^(n+2)``, the channels hold the tent iterates
    ``T^q(z) = 2 dist(2^(q-1) z, Z)`` in closed form, the steep steps give exactly
    ``P = [t1 > 1/2]`` and ``Q = [t1 < t2]``, and bit q is ``beta_q``."""
    z3 = _z3()
    beta = [z3.Int(f"beta{q}") for q in range(n)]
    domain = [z3.And(x >= 0, x <= 1) for x in beta]
    prog = tent_bit_program(n)

    def low(k: int) -> Any:  # u mod 2^k
        return z3.ToReal(z3.Sum([beta[j] * 2 ** (n - 1 - j) for j in range(max(n - k, 0), n)]
                                or [0]))

    def tent(q: int, which: int) -> Any:  # which = 1: T^q(z1); 2: T^q(z2)
        if q == 0:
            return (which * 2 * low(n) + 1) / z3.RealVal(2 ** (n + which))
        f = (which * 2 * low(n + 1 - q) + 1) / z3.RealVal(2 ** (n + 1 + which - q))
        return z3.If(beta[q - 1] == 0, 2 * f, 2 - 2 * f)

    def value(name: str, m: int) -> Any:
        if m == 0 or m == 3 * n + 1:
            return tent(0, int(name[1])) if name[0] == "t" else z3.ToReal(beta[int(name[1:])])
        q, phase = (m - 1) // 3, (m - 1) % 3
        t1, t2 = tent(q, 1), tent(q, 2)
        half = z3.Q(1, 2)
        table = {
            0: {"p1": 2 ** (n + 1) * (t1 - half), "p2": 2 ** (n + 1) * (t1 - half) - 1,
                "q1": 2 ** (n + 2) * (t2 - t1), "q2": 2 ** (n + 2) * (t2 - t1) - 1,
                "a1": 2 * t1, "a2": 4 * t1 - 2, "c1": 2 * t2, "c2": 4 * t2 - 2},
            1: {"x1": z3.If(t1 > half, 1, 0) - z3.If(t1 < t2, 1, 0),
                "x2": z3.If(t1 < t2, 1, 0) - z3.If(t1 > half, 1, 0),
                "t1": tent(q + 1, 1), "t2": tent(q + 1, 2)},
            2: {"t1": tent(q + 1, 1), "t2": tent(q + 1, 2)},
        }[phase]
        return table[name] if name in table else z3.ToReal(beta[int(name[1:])])

    return prove_maps(prog, [low(n)], value, domain, n)


def tent_bits(max_bits: int = MAX_BITS) -> Outcome:
    """For n = 1..32: the tent-map network returns bit q of every integer 0 <= u < 2^n."""
    return all_bit_lengths(tent_chain, tent_bit_program, max_bits)


def interval_indicator_symbolic() -> Outcome:
    """Lemma G.2 for symbolic a < b: 1 on [a, b], 0 off (a - 1/2, b + 1/2), in [0, 1] between."""
    z3 = _z3()
    a, b, x = z3.Reals("a b x")
    p = Program(["x"])
    g1, g2 = indicator_ramps("x", 0, 0)
    p.step({"g1": g1, "g2": g2})
    p.step({"i": indicator_from_ramps("g1", "g2")})
    p.step({"y": {"i": 1}})
    s = z3.Solver()
    # the gadget's weights do not depend on a, b (checked below); its biases are 2a, -2b
    # and 1, so the network is encoded with symbolic biases
    g1v = z3.If(2 * a - 2 * x > 0, 2 * a - 2 * x, 0)
    g2v = z3.If(2 * x - 2 * b > 0, 2 * x - 2 * b, 0)
    pre = 1 - g1v - g2v
    y = z3.If(pre > 0, pre, 0)
    half = z3.Q(1, 2)
    claim = z3.And(z3.Implies(z3.And(a <= x, x <= b), y == 1),
                   z3.Implies(z3.Or(x <= a - half, x >= b + half), y == 0),
                   y >= 0, y <= 1)
    s.add(a < b, z3.Not(claim))
    out = _verdict(s, "all real a < b and x")
    # and the gadget's weights are exactly the ones encoded above
    w = [[r[0] for r in p.maps[0].weight.num], [r for r in p.maps[1].weight.num[0]]]
    if w != [[-2, 2], [-1, -1]]:
        return Outcome("failed", f"gadget weights changed: {w}")
    return out


def unit_interval_lemma() -> Outcome:
    """Lemma G.5: 1 for y <= x <= y + 1, 0 for x < y - 1/2 or x > y + 3/2 (all reals)."""
    z3 = _z3()
    x, y = z3.Reals("x y")
    s = z3.Solver()
    (out,) = encode(unit_interval_test(), [x, y], s, "g5")
    half = z3.Q(1, 2)
    claim = z3.And(z3.Implies(z3.And(y <= x, x <= y + 1), out == 1),
                   z3.Implies(z3.Or(x < y - half, x > y + 3 * half), out == 0))
    s.add(z3.Not(claim))
    return _verdict(s, "all real x, y")


def label_selection() -> Outcome:
    """Lemma G.6 selection, c = 1..32: v if floor(x) = r, 0 if x < r - 1/2 or x > r + 3/2."""
    z3 = _z3()
    for c in range(1, MAX_BITS + 1):
        x = z3.Real("x")
        r, v = z3.Ints("r v")
        s = z3.Solver()
        (out,) = encode(label_select(c), [x, z3.ToReal(r), z3.ToReal(v)], s, f"s{c}")
        half = z3.Q(1, 2)
        claim = z3.And(z3.Implies(z3.And(r <= x, x < r + 1), out == z3.ToReal(v)),
                       z3.Implies(z3.Or(x < r - half, x > r + 3 * half), out == 0))
        s.add(v >= 0, v < 2 ** c, z3.Not(claim))
        res = _verdict(s, "")
        if res.status != "proved":
            return Outcome(res.status, f"c = {c}: {res.detail}")
    return Outcome("proved", f"all c = 1..{MAX_BITS}, real x, integer r, 0 <= v < 2^c")


LEMMAS = [
    Lemma("gadget.G4.threshold-bit-extraction",
          "for n <= 32 the threshold network returns bit q of every n-bit integer", threshold_bits,
          quick=lambda: threshold_bits(QUICK_BITS)),
    Lemma("gadget.G4.tent-bit-extraction",
          "for n <= 32 the tent-map network returns bit q of every n-bit integer", tent_bits,
          quick=lambda: tent_bits(QUICK_BITS)),
    Lemma("gadget.G2.interval-indicator",
          "s(1 - s(2a - 2x) - s(2x - 2b)) is 1 on [a, b] and 0 off (a - 1/2, b + 1/2)",
          interval_indicator_symbolic),
    Lemma("gadget.G5.unit-interval", "the x in [y, y+1] test is exactly 0/1 off its ramps",
          unit_interval_lemma),
    Lemma("gadget.G6.label-selection",
          "s(v - 2^(c+1)(s(2r - 2x) + s(2x - 2r - 2))) selects v iff floor(x) = r",
          label_selection),
]
