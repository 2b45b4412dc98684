"""Rigorous bounds of ``pi``, ``cos`` and ``sin`` for rotary positions (standard library only).

Numbers are scaled integers, as in :mod:`lm_bounds`: ``X`` stands for ``X / 2**F``, and every
function returns ``(lo, hi)`` with ``lo <= 2**F * value <= hi``; nothing uses binary floating
point.

- ``pi`` by Machin's formula (:func:`lm_bounds.pi_bounds`);
- ``cos(a)`` and ``sin(a)`` of an exact rational angle ``a = P / 2**S`` (:func:`cos_sin`):
  range reduction ``a = n pi/2 + t`` with the integer ``n`` nearest ``a / (pi/2)`` and the
  interval of ``t`` from ``pi``'s bounds at ``bits(a) + W`` bits (so ``|t| <= pi/4`` up to
  ``2**-W``, below 1); the Taylor series of ``cos`` and ``sin`` at the midpoint of ``t``'s
  interval (one floor chain ``l_i = floor(floor(l_{i-1} x) / i)`` of the terms ``x**i / i!``,
  ``x = |t| <= 1``: each ``l_i`` lies in ``[x**i / i! - 2, x**i / i!]`` units, and once
  ``l_N = 0`` the tail ``sum_{i >= N} x**i / i!`` is at most ``2 (l_N + 2) = 4``, the ratio of
  consecutive terms being at most 1/2), widened by the interval's half-width (``cos`` and
  ``sin`` are 1-Lipschitz); then the quadrant ``n mod 4`` maps ``(cos t, sin t)`` to
  ``(cos a, sin a)``.
"""

from .lm_bounds import cdiv, pi_bounds

GUARD = 32  # bits carried beyond the requested precision


def _taylor(x: int, w: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Bounds at ``2**-w`` of ``(cos(x / 2**w), sin(x / 2**w))`` for ``|x| <= 2**w``."""
    p = w + 8
    ax = abs(x) << 8  # |x| at 2**-p, exactly
    term = 1 << p
    sums = [term, 0]  # even terms (cos), odd terms (sin)
    i = 0
    while term:
        i += 1
        term = ((term * ax) >> p) // i
        sums[i & 1] += -term if i & 2 else term
    err = 2 * i + 4  # i + 1 chained terms off by at most 2 each, and the tail
    (c, s) = sums
    c_lo, c_hi = (c - err) >> 8, cdiv(c + err, 1 << 8)
    s_lo, s_hi = (s - err) >> 8, cdiv(s + err, 1 << 8)
    if x < 0:  # sin is odd
        s_lo, s_hi = -s_hi, -s_lo
    return (c_lo, c_hi), (s_lo, s_hi)


def cos_sin(num: int, scale: int, f: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Bounds at ``2**-f`` of ``cos(a)`` and ``sin(a)`` for ``a = num / 2**scale`` exactly
    (module docstring), each within ``[-2**f, 2**f]``."""
    w = f + GUARD
    q = w + max(num.bit_length() - scale, 0) + 8
    pl, ph = pi_bounds(q)  # pi/2 in [pl, ph] / 2**(q+1)
    # n: the integer nearest a / (pi/2) up to pi's rounding (any n is sound)
    n = ((num << (q + 2)) + (pl << scale)) // (pl << (scale + 1))
    sh = q + 1 - w
    a_lo, a_hi = (num << w) >> scale, cdiv(num << w, 1 << scale)
    ends = (n * pl, n * ph)  # n pi/2 lies between these (at 2**-(q+1)), either order
    t_lo = a_lo - cdiv(max(ends), 1 << sh)
    t_hi = a_hi - (min(ends) >> sh)
    t = (t_lo + t_hi) >> 1
    e = t_hi - t  # |t_real - t| <= e at 2**-w
    one = 1 << w
    if abs(t) > one:  # not reached (|t| <= pi/4 up to 2**-w); cos, sin lie in [-1, 1]
        return (-(1 << f), 1 << f), (-(1 << f), 1 << f)
    (c_lo, c_hi), (s_lo, s_hi) = _taylor(t, w)
    c_lo, c_hi, s_lo, s_hi = c_lo - e, c_hi + e, s_lo - e, s_hi + e
    quadrant = n & 3  # a = t + n pi/2
    if quadrant == 1:  # cos a = -sin t, sin a = cos t
        (c_lo, c_hi), (s_lo, s_hi) = (-s_hi, -s_lo), (c_lo, c_hi)
    elif quadrant == 2:
        (c_lo, c_hi), (s_lo, s_hi) = (-c_hi, -c_lo), (-s_hi, -s_lo)
    elif quadrant == 3:  # cos a = sin t, sin a = -cos t
        (c_lo, c_hi), (s_lo, s_hi) = (s_lo, s_hi), (-c_hi, -c_lo)
    g, top = w - f, 1 << f
    return ((max(c_lo >> g, -top), min(cdiv(c_hi, 1 << g), top)),
            (max(s_lo >> g, -top), min(cdiv(s_hi, 1 << g), top)))
