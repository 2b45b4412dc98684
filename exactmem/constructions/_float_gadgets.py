"""Float-exact ReLU gadgets: every weight, bias and partial sum an integer far below ``2^P``.

The gadgets of :mod:`exactmem.constructions._gadgets` are exact in rational arithmetic but
form large cancelling sums (``T s(U - T + 1) - T s(U - T)``), which IEEE arithmetic may
round.  The gadgets here keep every sum of absolute values of the terms small: a step
``[U >= T]`` is first formed by two ReLUs and *clipped* by a third (``s(s(U-T+1) - s(U-T))``,
in ``{0, 1}``) before anything multiplies it.  Each gadget is a list of *steps* (affine maps
over named channels, a ReLU between two steps, see :class:`~._gadgets.Program`); gadgets for
parallel tables are merged step by step.  The bound on ``sum |terms|`` of each step is
stated in its docstring; ``tests/constructions/test_float_gadgets.py`` checks values and bounds.

* :func:`mod_steps` -- ``c -> 2 (c mod M)`` for integers ``lo <= c <= hi`` (3 steps);
* :func:`bank_steps` -- block bank: ``X = 2x -> (words of block x // F, 2 (x mod F))`` for
  ``0 <= x < Q F`` (3 steps, about ``7 + m`` nonzero parameters per block);
* :func:`select_steps` -- ``(w_0..w_{m-1}, 2r) -> (w_{r // f}, 2 (r mod f))`` (4 steps);
* :func:`extract_steps` -- field ``s`` (from the top) of a word of ``f`` fields of ``b`` bits
  (two steps per bit);
* :func:`mod_sum_steps` -- ``(a_0 + a_1 + a_2) mod L`` for ``0 <= a_j < L`` (3 steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from exactmem.constructions._gadgets import ONE, Expr

Steps = list[dict[str, Expr]]


def _add(*terms: tuple[Expr, int | Fraction]) -> dict[str, int | Fraction]:
    out: dict[str, int | Fraction] = {}
    for expr, coef in terms:
        for k, v in expr.items():
            out[k] = out.get(k, 0) + coef * v
    return {k: v for k, v in out.items() if v}


def merge(*parts: Steps) -> Steps:
    """Run gadgets side by side: step ``i`` of the result is the union of their steps ``i``."""
    if len({len(p) for p in parts}) > 1:
        raise ValueError(f"gadgets of different depths: {[len(p) for p in parts]}")
    out: Steps = []
    for steps in zip(*parts, strict=True):
        merged: dict[str, Expr] = {}
        for s in steps:
            if merged.keys() & s.keys():
                raise ValueError(f"channel names clash: {sorted(merged.keys() & s.keys())}")
            merged.update(s)
        out.append(merged)
    return out


def mod_steps(c: Expr, modulus: int, lo: int, hi: int, p: str) -> Steps:
    """``c -> X = 2 (c mod M)`` (channel ``p + "X"``) for an integer ``lo <= c <= hi``, ``lo >= 0``.

    Step 1: ``c``, ``u_k = c - kM + 1``, ``v_k = c - kM`` for the multiples ``kM`` in
    ``(lo, hi]``; step 2: ``c`` and the clipped steps ``s_k = u_k - v_k = [c >= kM]``; step 3:
    ``X = 2c - 2M (floor(lo / M) + sum s_k)``.  Largest ``sum |terms|``: ``4 hi``.
    """
    k0, k1 = lo // modulus, hi // modulus
    ks = range(k0 + 1, k1 + 1)
    one: dict[str, Expr] = {p + "c": c}
    two: dict[str, Expr] = {p + "c": {p + "c": 1}}
    for k in ks:
        one[f"{p}u{k}"] = _add((c, 1), ({ONE: 1 - k * modulus}, 1))
        one[f"{p}v{k}"] = _add((c, 1), ({ONE: -k * modulus}, 1))
        two[f"{p}s{k}"] = {f"{p}u{k}": 1, f"{p}v{k}": -1}
    three = {p + "c": 2, ONE: -2 * modulus * k0, **{f"{p}s{k}": -2 * modulus for k in ks}}
    return [one, two, {p + "X": {k: v for k, v in three.items() if v}}]


def bank_steps(X: str, words: Sequence[Sequence[int]], block: int, p: str) -> Steps:
    """Block bank: for ``X = 2x``, ``0 <= x < Q F`` (``F = block``), the channels
    ``p + "w{a}"`` = ``words[x // F][a]`` and ``p + "rr"`` = ``2 (x mod F)``.

    Step 1: ``g_q = X - 2qF + 1`` (``q >= 1``; ``s(g_q) >= 1`` iff ``x >= qF``); step 2: the
    block indicator ``ind_q = 2 - g_q + X - 2qF - g_{q+1}`` (``g_0 = X + 1``), which is 1 on
    block ``q`` and ``<= 0`` elsewhere; step 3: ``w_a = sum_q words[q][a] ind_q``,
    ``rr = X - sum_q 2qF ind_q``: one term is non-zero.  Largest ``sum |terms|``:
    ``8 Q F + 2`` (step 2) and ``max word`` (step 3).
    """
    Q, m = len(words), len(words[0])
    one: dict[str, Expr] = {p + "X": {X: 1}}
    for q in range(1, Q):
        one[f"{p}g{q}"] = {X: 1, ONE: 1 - 2 * q * block}
    two: dict[str, Expr] = {p + "X": {p + "X": 1}}
    for q in range(Q):
        e: dict[str, int | Fraction] = {ONE: 1} if q == 0 else \
            {ONE: 2 - 2 * q * block, f"{p}g{q}": -1, p + "X": 1}
        if q + 1 < Q:
            e[f"{p}g{q + 1}"] = -1
        two[f"{p}i{q}"] = e
    three: dict[str, Expr] = {}
    for a in range(m):
        three[f"{p}w{a}"] = {f"{p}i{q}": words[q][a] for q in range(Q) if words[q][a]}
    three[p + "rr"] = {p + "X": 1, **{f"{p}i{q}": -2 * q * block for q in range(1, Q)}}
    return [one, two, three]


def select_steps(ws: Sequence[str], rr: str, fields: int, word_bits: int, p: str) -> Steps:
    """``(w_0..w_{m-1}, rr = 2r) -> (p+"w" = w_{r // f}, p+"t" = 2 (r mod f))``, ``f = fields``,
    for ``0 <= w_a < 2^word_bits``, ``0 <= r < m f`` (``m >= 2``).

    Steps 1-2: the word indicator ``e_a = s(1 - s(2fa - rr) - s(rr - 2fa - 2f + 2))``; step 3:
    ``sel_a = w_a + 2^wb e_a - 2^wb`` (``w_a`` or ``<= 0``) and ``t = rr - sum_a 2fa e_a``;
    step 4: ``w = sum_a sel_a``.  Largest ``sum |terms|``: ``3 * 2^word_bits``.
    """
    m, big = len(ws), 1 << word_bits
    one: dict[str, Expr] = {w: {w: 1} for w in ws}
    one[p + "rr"] = {rr: 1}
    two: dict[str, Expr] = {w: {w: 1} for w in ws}
    two[p + "rr"] = {p + "rr": 1}
    for a in range(m):
        e: dict[str, int | Fraction] = {ONE: 1}
        if a > 0:
            one[f"{p}pa{a}"] = {rr: -1, ONE: 2 * fields * a}
            e[f"{p}pa{a}"] = -1
        if a < m - 1:
            one[f"{p}qa{a}"] = {rr: 1, ONE: -2 * fields * a - 2 * fields + 2}
            e[f"{p}qa{a}"] = -1
        two[f"{p}e{a}"] = e
    three: dict[str, Expr] = {f"{p}sel{a}": {ws[a]: 1, f"{p}e{a}": big, ONE: -big}
                              for a in range(m)}
    three[p + "t"] = {p + "rr": 1, **{f"{p}e{a}": -2 * fields * a for a in range(1, m)}}
    four: dict[str, Expr] = {p + "w": {f"{p}sel{a}": 1 for a in range(m)}, p + "t": {p + "t": 1}}
    return [one, two, three, four]


def extract_steps(w: str, t: str, fields: int, bits: int, p: str) -> tuple[Steps, Expr]:
    """Field ``s`` of ``w = sum_f v_f 2^(b (fields - 1 - f))`` (``0 <= v_f < 2^b``) given
    ``t = 2s``: returns the steps and the expression of the result (read by the next step).

    Bit ``k`` (from the top): step A holds ``u = W - 2^k + 1``, ``v = W - 2^k`` (``W`` the
    remainder), ``dp = t - 2f``, ``dm = 2f - t`` (``f`` the bit's field); step B the bit
    ``u - v`` and the gated bit ``u - v - dp - dm`` (the bit if ``s = f``, else ``<= 0``),
    which is added with weight ``2^(k mod b)`` to the accumulator.  Largest ``sum |terms|``:
    ``< 2^(b fields + 1) + 2 b fields + 2``.
    """
    steps: Steps = []
    W: Expr = {w: 1}
    acc: Expr | None = None
    total = fields * bits
    for k in range(total - 1, -1, -1):
        f = (total - 1 - k) // bits
        a: dict[str, Expr] = {p + "u": _add((W, 1), ({ONE: 1 - (1 << k)}, 1)),
                              p + "v": _add((W, 1), ({ONE: -(1 << k)}, 1)),
                              p + "dp": {t if k == total - 1 else p + "t": 1, ONE: -2 * f},
                              p + "dm": {t if k == total - 1 else p + "t": -1, ONE: 2 * f}}
        b: dict[str, Expr] = {p + "gb": {p + "u": 1, p + "v": -1, p + "dp": -1, p + "dm": -1}}
        if k > 0:
            a[p + "w"] = W
            a[p + "t"] = {t if k == total - 1 else p + "t": 1}
            b[p + "w"] = {p + "w": 1}
            b[p + "t"] = {p + "t": 1}
            b[p + "b"] = {p + "u": 1, p + "v": -1}
        if acc is not None:
            a[p + "acc"] = acc
            b[p + "acc"] = {p + "acc": 1}
        steps += [a, b]
        W = {p + "w": 1, p + "b": -(1 << k)}
        acc = _add(({p + "acc": 1} if acc is not None else {}, 1), ({p + "gb": 1 << (k % bits)}, 1))
    assert acc is not None
    return steps, acc


def mod_sum_steps(parts: Sequence[Expr], modulus: int, out: str) -> Steps:
    """``y = (sum of parts) mod L`` for a sum ``A`` in ``[0, 3L)``: ``A - L [A >= L] -
    L [A >= 2L]`` with clipped steps; the last step (no ReLU after it) is ``y``."""
    A = _add(*((e, 1) for e in parts))
    one: dict[str, Expr] = {"A": A}
    two: dict[str, Expr] = {"A": {"A": 1}}
    for i in (1, 2):
        one[f"mu{i}"] = _add((A, 1), ({ONE: 1 - i * modulus}, 1))
        one[f"mv{i}"] = _add((A, 1), ({ONE: -i * modulus}, 1))
        two[f"ms{i}"] = {f"mu{i}": 1, f"mv{i}": -1}
    return [one, two, {out: {"A": 1, "ms1": -modulus, "ms2": -modulus}}]
