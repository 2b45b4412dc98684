"""GELU, tanh form, of one row of balls on float64 IEEE-754 basic operations with outward
rounding: the checker's fast path for its per-coordinate work (docs/checker.md, "Fast path").

The result is a ball that contains ``GELU(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``
for every ``x`` of every input ball; it is *not* the ball of :func:`lm_forward.gelu` (it is
wider: its grid is ``2**-K``, ``K`` = 40), so it is sound by its own bounds, not by equality.
It runs only on balls of radius at least ``2**(GATE - K)`` (``2**-30``), where the grid and
the rounding add about a thousandth to the radius; tighter balls take the standard path.


- the ends of each input ball are rounded outward to the grid ``2**-K`` (integer shifts), so
  every float below is an integer times ``2**-K`` or a result of the operations below; for
  ``|x| > XMAX`` the row returns None and :func:`lm_forward.gelu` runs;
- each ``+ - * /`` is IEEE-754 binary64 with round-to-nearest: the exact result lies within
  half an ulp of the computed one, so :func:`_dn` / :func:`_up` (the next float below /
  above) are a lower / an upper bound of it.  Every value stays in the normal range (nonzero
  inputs are at least ``2**-40`` in absolute value, ``e**-t`` is used only for ``t <= 40``),
  so flushing subnormals to zero changes nothing;
- the inner argument ``u(x)`` is increasing, so its bounds come from the ends, each product
  rounded toward the side its sign asks for (the constants' float bounds from their integer
  bounds);
- ``tanh(u) = (1 - E) / (1 + E)`` with ``E = e**-2|u|`` for ``u >= 0``, ``tanh(-u) = -tanh u``;
  ``e**-t`` for ``t <= 40`` as ``(1 / e**s)**(2**j)`` with ``s = t / 2**j < 1/4`` (exact
  scaling, ``j <= 8``), ``e**s`` by its Taylor polynomial of degree 13 (all terms positive,
  so rounding every step down gives a lower bound and up an upper bound, plus the remainder
  ``s**14 e**s / 14! < 2**-60``), each squaring rounded outward; ``e**-t <= 2**-57`` for
  ``t > 40``;
- ``x (1 + t) / 2`` over ``x`` in ``[xlo, xhi]`` and ``1 + t`` in ``[p, q]``, ``0 <= p <= q``:
  the least product is ``xlo p`` or ``xlo q`` by the sign of ``xlo``, the largest ``xhi q``
  or ``xhi p`` (as :func:`lm_forward.gelu`), rounded outward; halving is exact.

The ends are rounded outward to ``2**-K`` integers (exact: ``|value| <= 2**(10+K) < 2**53``),
the midpoint floored and the radius taken from the upper end.  Trusted: IEEE-754 binary64
``+ - * /`` with round-to-nearest, ``nextafter``, exact ``floor`` / ``ceil`` / ``ldexp`` and
int64 conversion of integers below ``2**53``; no library exp or tanh.
"""

from __future__ import annotations

from math import factorial
from typing import Any

try:
    import numpy as np
except ImportError:  # the standard-library path runs
    np = None  # type: ignore[assignment]

K = 40  # fractional bits of the grid
GATE = 10  # run only on balls of radius >= 2**(GATE - K): the grid adds < 2**-GATE of it
XMAX = 1 << 10  # the largest |x| handled here
TERMS = 13  # degree of the Taylor polynomial of e**s, 0 <= s < 1/4
REMAINDER = 2.0 ** -60  # > s**14 e**s / 14! for 0 <= s < 1/4 (about 2**-64)
T_MAX = 40.0  # e**-t <= 2**-57 for t > 40
GELU_A = (44715, 10 ** 6)


def _dn(x: Any) -> Any:
    return np.nextafter(x, -np.inf)


def _up(x: Any) -> Any:
    return np.nextafter(x, np.inf)


def _bounds(num: int, den: int, bits: int) -> tuple[Any, Any]:
    """Floats ``lo <= num / den <= hi`` on the grid ``2**-bits`` (``0 <= num / den``, both
    ends integers below ``2**53`` times ``2**-bits``, so exact)."""
    q = (num << bits) // den
    if not 0 <= q < (1 << 53) - 1:
        raise ValueError(f"lm_fastgelu: {num}/{den} does not fit {bits} bits")
    lo = np.ldexp(np.float64(q), -bits)
    return lo, np.ldexp(np.float64(q + ((num << bits) % den != 0)), -bits)


def constants(c: tuple[int, int], f: int) -> dict[str, Any] | None:
    """The float constants for the precision ``f`` from ``c = (clo, chi)``, the integer bounds
    of ``sqrt(2/pi)`` at ``2**-f``; None without NumPy."""
    if np is None or f < 64:
        return None
    clo, chi = c
    coeffs = [_bounds(1, factorial(j), 51 + factorial(j).bit_length())  # 1/j!: 52 bits
              for j in range(TERMS + 1)]
    return {"c": (_bounds(clo, 1 << f, 52)[0], _bounds(chi, 1 << f, 52)[1]),
            "a": _bounds(*GELU_A, 56), "lo": np.array([x for x, _ in coeffs]),
            "hi": np.array([x for _, x in coeffs])}


def _exp_neg(t: Any, k: dict[str, Any]) -> tuple[Any, Any]:
    """Bounds ``(lo, hi)`` of ``e**-t`` for ``t >= 0`` (an array)."""
    big = t > T_MAX
    t = np.where(big, 0.0, t)
    _, e = np.frexp(t)  # t = m 2**e, 1/2 <= m < 1 (e = 0 for t = 0)
    j = np.maximum(e + 2, 0)
    s = np.ldexp(t, -j)  # exact: 0 <= s < 1/4
    plo, phi = np.full_like(s, k["lo"][TERMS]), np.full_like(s, k["hi"][TERMS])
    for i in range(TERMS - 1, -1, -1):
        plo = _dn(_dn(plo * s) + k["lo"][i])
        phi = _up(_up(phi * s) + k["hi"][i])
    phi = _up(phi + REMAINDER)
    lo, hi = _dn(1.0 / phi), _up(1.0 / plo)
    for it in range(int(j.max()) if j.size else 0):
        more = j > it
        lo, hi = np.where(more, _dn(lo * lo), lo), np.where(more, _up(hi * hi), hi)
    return np.where(big, 0.0, lo), np.where(big, 2.0 ** -57, hi)


def _tanh(u: Any, k: dict[str, Any]) -> tuple[Any, Any]:
    """Bounds ``(lo, hi)`` of ``tanh(u)`` (an array)."""
    elo, ehi = _exp_neg(2.0 * np.abs(u), k)  # E = e**-2|u|, doubling exact
    num = _dn(1.0 - ehi)
    alo = np.where(num >= 0, _dn(num / _up(1.0 + ehi)), 0.0)  # tanh|u| >= 0
    ahi = np.minimum(_up(_up(1.0 - elo) / _dn(1.0 + elo)), 1.0)
    pos = u >= 0
    return np.where(pos, alo, -ahi), np.where(pos, ahi, -alo)


def _inner(x: Any, k: dict[str, Any], upper: bool) -> Any:
    """A lower (``upper`` False) or upper bound of ``sqrt(2/pi) (x + a x**3)``."""
    rd = _up if upper else _dn
    ax = np.abs(x)
    cube = np.where(x >= 0, rd(rd(x * x) * x), -(_dn if upper else _up)(
        (_dn if upper else _up)(ax * ax) * ax))  # |x|**3 rounded against the sign
    alo, ahi = k["a"]
    w = rd(x + rd(cube * np.where((cube >= 0) != upper, alo, ahi)))
    clo, chi = k["c"]
    return rd(w * np.where((w >= 0) != upper, clo, chi))


def gelu_tanh(m: list[int], r: int, k: dict[str, Any], f: int
              ) -> tuple[list[int], int] | None:
    """The GELU (tanh form) ball of the balls ``(m[i], r)`` at ``2**-f``, or None when a
    value lies beyond :data:`XMAX` or the radius is below ``2**(GATE - K)`` (then
    :func:`lm_forward.gelu` runs: its ball is as tight as the radius calls for, and balls grow
    through the layers, so a coarse ball early costs far more than its own width later)."""
    top = XMAX << f
    if not m or r < 1 << (f - K + GATE) or max(m) + r > top or min(m) - r < -top:
        return None
    sh = f - K
    xs = np.array(m, dtype=object)
    xlo = np.ldexp(((xs - r) >> sh).astype(np.int64).astype(np.float64), -K)
    xhi = np.ldexp((-((-(xs + r)) >> sh)).astype(np.int64).astype(np.float64), -K)
    n = len(m)
    tlo, thi = _tanh(np.concatenate([_inner(xlo, k, False), _inner(xhi, k, True)]), k)
    tlo, thi = tlo[:n], thi[n:]  # tanh(u(xlo)) from below, tanh(u(xhi)) from above
    p, q = np.maximum(_dn(1.0 + tlo), 0.0), np.minimum(_up(1.0 + thi), 2.0)
    lo = 0.5 * np.where(xlo >= 0, _dn(xlo * p), _dn(xlo * q))
    hi = 0.5 * np.where(xhi >= 0, _up(xhi * q), _up(xhi * p))
    ilo = np.floor(np.ldexp(lo, K)).astype(np.int64)
    ihi = np.ceil(np.ldexp(hi, K)).astype(np.int64)
    mid = (ilo + ihi) >> 1
    rad = int((ihi - mid).max())
    return (mid.astype(object) << sh).tolist(), rad << sh
