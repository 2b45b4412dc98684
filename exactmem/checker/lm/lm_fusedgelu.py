"""GELU, tanh form, of one ball in one loop: the integers of :func:`lm_forward.gelu` with
fewer operations (standard library only; the checker's fast path for balls too tight for
:mod:`lm_fastgelu`, docs/checker.md "Fast path").

:func:`lm_forward.gelu` spends, per coordinate, a call of :func:`lm_bounds.at_radius`, of
:func:`lm_bounds.tanh` and of :func:`lm_bounds._exp_neg_table` (with their tuples, ``max``,
``min`` and ``cdiv`` calls) and one division of a 400-bit cube by ``10**6 2**2f``.  Here the
same steps run inline in one loop, on Python integers only, so every intermediate is the
integer of the standard-library path.  Two steps are written differently and give the same
integers by ``floor(floor(a / b) / c) = floor(a / (b c))`` for integers ``a`` and
``b, c > 0`` (Python's ``//`` and ``>>`` are floors for either sign):

- the cube term ``(a x**3) // (10**6 2**2f)`` as ``((a x**3) >> 2f) // 10**6``;
- the Taylor terms of ``e**t`` stop at the first term that is 0 (each later term is
  ``floor(0 t / 2**p) // i = 0``, so the sum is unchanged; the bound on the rounding error
  still counts every one of the ``n`` terms).

NumPy does not help here: these are 100- to 400-bit integers, one product per coordinate and
step, and int64 limb arithmetic (about 150 ns a coordinate for one 168-bit product on 24-bit
limbs) or NumPy arrays of Python integers (``dtype=object``, the same operations one element
at a time) measured no faster than the Python loop.  Used for ``f <= TABLE_P - 16``, where
:func:`lm_bounds.tanh` uses its tables; otherwise :func:`lm_forward.gelu` runs.
``tests/checker/test_lm_fusedgelu.py`` compares the two on random and edge balls.
"""

from typing import Any

from . import lm_bounds
from .lm_bounds import SLACK, TABLE_P

GELU_A = 44715  # 0.044715 = GELU_A / 10**6
MILLION = 10 ** 6


def available(f: int) -> bool:
    """Whether this loop computes :func:`lm_forward.gelu` at ``f`` fractional bits."""
    return f <= TABLE_P - 16


def gelu_tanh(m: list[int], r: int, consts: dict[str, Any], f: int) -> tuple[list[int], int]:
    """:func:`lm_forward.gelu` ("gelu_tanh", ``consts["c"]`` the bounds of ``sqrt(2/pi)``) of
    the ball ``(m, r)`` at ``2**-f`` (:func:`available`): the same midpoints and radius."""
    clo, chi = consts["c"]
    t1, t2 = lm_bounds._tables()
    f2, half, one, cap = 2 * f, f + 1, 1 << f, 1 << (f + 16)
    out = []
    rad = 0
    for x in m:
        xlo, xhi = x - r, x + r
        # the inner argument's bounds from the (clamped) ends, as lm_forward.gelu
        alo = xlo if -cap <= xlo <= cap else (cap if xlo > 0 else -cap)
        ahi = xhi if -cap <= xhi <= cap else (cap if xhi > 0 else -cap)
        wlo = alo + ((GELU_A * alo ** 3) >> f2) // MILLION
        whi = ahi - ((-GELU_A * ahi ** 3) >> f2) // MILLION
        zlo = (clo * wlo if wlo >= 0 else chi * wlo) >> f
        zhi = -((-(chi * whi if whi >= 0 else clo * whi)) >> f)
        zm = (zlo + zhi) >> 1
        zr = zhi - zm
        # lm_bounds.at_radius(tanh, zm, zr, 1, f): the precision fp = f - g
        g = zr.bit_length() - SLACK
        if g > f - 24:
            g = f - 24
        if g > 0:
            z, fp = zm >> g, f - g
        else:
            z, fp, g = zm, f, 0
        # lm_bounds.tanh(z, fp), e = e**-2|z| by lm_bounds._exp_neg_table
        neg = z < 0
        u = -2 * z if neg else 2 * z
        onep = 1 << fp
        if u == 0:
            elo = ehi = onep
        elif 10 * u >= (7 * fp) << fp:
            elo, ehi = 0, 1
        else:
            p = fp + 16
            v = u << 16
            j = v >> (p - 12)
            t = v - (j << (p - 12))
            sh = TABLE_P - p
            (a_lo, a_hi), (b_lo, b_hi) = t1[j >> 6], t2[j & 63]
            a_hi, b_hi = -((-a_hi) >> sh), -((-b_hi) >> sh)  # ceilings, as the table's
            lo = ((a_lo >> sh) * (b_lo >> sh)) >> p
            hi = -((-a_hi * b_hi) >> p)
            if t:
                n = p // 12 + 1
                s = term = 1 << p
                for i in range(1, n):
                    term = ((term * t) >> p) // i
                    if not term:
                        break
                    s += term
                lo, hi = (lo << p) // (s + 3 * (n - 1) + 1), -((-(hi << p)) // s)
            elo, ehi = lo >> 16, -((-hi) >> 16)
        tlo = (onep - ehi) * onep // (onep + ehi)
        if tlo < 0:
            tlo = 0
        thi = -((-(onep - elo) * onep) // (onep + elo))
        if thi > onep:
            thi = onep
        if neg:
            tlo, thi = -thi, -tlo
        if g:
            tlo, thi = tlo << g, (thi + 1) << g
        # x (1 + t) / 2 over the ends, as lm_forward.gelu
        lo = tlo - zr
        pp = one + (lo if lo > -one else -one)
        hi = thi + zr
        qq = one + (hi if hi < one else one)
        if xlo < -cap:
            pp = 0
        if xhi > cap:
            qq = 2 * one
        lo = (xlo * pp if xlo >= 0 else xlo * qq) >> half
        hi = -((-(xhi * qq if xhi >= 0 else xhi * pp)) >> half)
        mid = (lo + hi) >> 1
        out.append(mid)
        if hi - mid > rad:
            rad = hi - mid
    return out, rad
