"""Rigorous bounds for the irrational steps of a trained language model (standard library only).

Numbers are scaled integers: ``X`` stands for the real ``X / 2**F``.  Every function returns
``(lo, hi)`` with ``lo <= 2**F * f(x) <= hi`` for the real function ``f``: each rounding is
directed (floor for a lower bound, ceiling for an upper one) and every truncated series adds a
bound on its remainder.  Nothing here uses binary floating point.

- ``exp``: range reduction ``e**u = (e**(u / 2**k)) ** (2**k)`` with ``u / 2**k < 2**-12``,
  the Taylor series of a non-negative argument (all terms positive: one floor chain and a
  bound on its rounding error), the remainder ``<= 2 t**N / N!``; ``e**-u = 1 / e**u``.
  A negative argument at working precision ``f <= TABLE_P - 16`` (every call of the forward
  pass) is split instead as ``u = j1/64 + j2/4096 + t``, ``0 <= t < 2**-12``:
  ``e**-u = e**-(j1/64) e**-(j2/4096) / e**t``, the first two factors from tables of bounds
  computed once at ``2**-TABLE_P`` by the series above, ``e**t`` by the same series with no
  squaring; one directed product and one directed division.
- ``tanh(z) = (1 - e**-2z) / (1 + e**-2z)`` for ``z >= 0``, odd.
- ``erf(y) = 2/sqrt(pi) e**-y^2 sum_n 2^n y^(2n+1) / (1*3*...*(2n+1))`` (all terms positive for
  ``y >= 0``: one floor chain and a bound on its rounding error; the tail bounded by a
  geometric series), ``1 - erfc(y)`` with
  ``erfc(y) <= e**-y^2 < 2**-F`` for ``y^2 >= 0.7 F``; odd.
- ``1/sqrt(v)`` and ``sqrt(c)`` with :func:`math.isqrt`; ``pi`` from its first 50 decimals
  up to 150 bits, by Machin's formula beyond (:func:`pi_bounds`).

:func:`at_radius` evaluates tanh / erf / exp at the precision a ball's radius calls for;
:func:`ball` turns bounds into a midpoint and a radius.
"""

from collections.abc import Callable
from math import isqrt

PI_DIGITS = 314159265358979323846264338327950288419716939937510  # pi * 10**50, truncated
PI_SCALE = 10 ** 50  # so PI_DIGITS / PI_SCALE < pi < (PI_DIGITS + 1) / PI_SCALE
GUARD = 40  # extra bits carried inside exp
Bounds = tuple[int, int]  # (lo, hi)
SLACK = 12  # bits between a ball's radius and the working precision of tanh / erf on it


class Degenerate(Exception):
    """A LayerNorm whose variance plus eps (an RMSNorm whose mean square plus eps) may be 0,
    or a score radius beyond 1: no finite bound exists."""


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for ``b > 0``."""
    return -((-a) // b)


def _exp_nonneg(u: int, f: int) -> Bounds:
    """Bounds of ``e**(u / 2**f) * 2**f`` for an integer ``u >= 0``.

    One floor chain ``lo_i = floor(lo_{i-1} t / i)`` (units ``2**-p``) gives
    ``t**i / i! - 3 <= lo_i <= t**i / i!`` by induction (the error is at most
    ``3 t / i + 1 <= 3``), so the Taylor sum lies in ``[lo, lo + 3 (n - 1) + 1]`` with the
    remainder ``sum_{i >= n} t**i / i! <= 2 t**n / n! < 2**-p``."""
    if u == 0:
        return 1 << f, 1 << f
    k = max(0, u.bit_length() - f + 12)  # t = u / 2**(f + k) < 2**-12
    p = f + GUARD + k
    t = u << GUARD  # t * 2**p, exactly
    n = p // 12 + 1  # t**n / n! < 2**(-12 n) < 2**-p / 2
    lo = term = 1 << p
    for i in range(1, n):
        term = ((term * t) >> p) // i
        lo += term
    hi = lo + 3 * (n - 1) + 1
    for _ in range(k):
        lo = (lo * lo) >> p
        hi = -((-hi * hi) >> p)
    return lo >> (p - f), -((-hi) >> (p - f))


TABLE_P = 272  # bits of the tables of e**-(j/64) and e**-(j/4096)
_TABLES: list[list[tuple[int, int]]] = []


def _tables() -> list[list[Bounds]]:
    """``(T1, T2)``: bounds at ``2**-TABLE_P`` of ``e**-(j/64)`` for ``j/64 < 0.7 TABLE_P``
    and of ``e**-(j/4096)`` for ``j < 64``, each as ``1 / e**(...)`` with directed
    division (computed on first use, about 0.1 s)."""
    if not _TABLES:
        one2 = 1 << (2 * TABLE_P)

        def neg(u: int) -> Bounds:
            lo, hi = _exp_nonneg(u, TABLE_P)
            return one2 // hi, cdiv(one2, lo)

        _TABLES.append([neg(j << (TABLE_P - 6)) for j in range(7 * TABLE_P * 64 // 10 + 1)])
        _TABLES.append([neg(j << (TABLE_P - 12)) for j in range(64)])
    return _TABLES


def _exp_neg_table(u: int, f: int) -> Bounds:
    """Bounds of ``e**-(u / 2**f) * 2**f`` for ``0 < u / 2**f < 0.7 f``, ``f <= TABLE_P - 16``.

    At ``p = f + 16`` bits, ``v = u * 2**16`` is exact; ``j = floor(v / 2**(p-12))`` and
    ``t = v - j 2**(p-12)`` (so ``t / 2**p < 2**-12``) give ``e**-u = e**-(j1/64)
    e**-(j2/4096) e**-t`` with ``j = 64 j1 + j2``.  The table bounds are shifted to ``2**-p``
    (floor / ceiling), multiplied with a floor / ceiling, and divided by the upper / lower
    bound of ``e**t`` (:func:`_exp_nonneg`'s chain, no squaring as ``t < 2**-12``); every
    step is monotone in its non-negative operands, so the bounds stay directed."""
    t1, t2 = _tables()
    p = f + 16
    v = u << 16
    j = v >> (p - 12)
    t = v - (j << (p - 12))
    sh = TABLE_P - p
    (a_lo, a_hi), (b_lo, b_hi) = t1[j >> 6], t2[j & 63]
    a_lo, a_hi = a_lo >> sh, -((-a_hi) >> sh)
    b_lo, b_hi = b_lo >> sh, -((-b_hi) >> sh)
    lo, hi = (a_lo * b_lo) >> p, -((-a_hi * b_hi) >> p)
    if t:
        n = p // 12 + 1  # t**n / n! < 2**(-12 n) < 2**-p / 2
        s = term = 1 << p
        for i in range(1, n):
            term = ((term * t) >> p) // i
            s += term
        lo, hi = (lo << p) // (s + 3 * (n - 1) + 1), cdiv(hi << p, s)
    return lo >> 16, -((-hi) >> 16)


def exp(x: int, f: int) -> Bounds:
    """Bounds of ``e**(x / 2**f) * 2**f``; ``f <= 700`` (below ``e**-512`` the lower bound
    is 0)."""
    if x >= 0:
        return _exp_nonneg(x, f)
    u = -x
    if 10 * u >= 7 * f << f:  # u / 2**f >= 0.7 f > f ln 2, so e**-u * 2**f < 1
        return 0, 1
    if f <= TABLE_P - 16:
        return _exp_neg_table(u, f)
    lo, hi = _exp_nonneg(u, f)
    one2 = 1 << (2 * f)
    return one2 // hi, cdiv(one2, lo)


def tanh(z: int, f: int) -> Bounds:
    """Bounds of ``tanh(z / 2**f) * 2**f`` (within ``[-2**f, 2**f]``)."""
    neg = z < 0  # tanh is odd
    u = -2 * z if neg else 2 * z
    one = 1 << f
    if 0 < u and 10 * u < 7 * f << f and f <= TABLE_P - 16:
        elo, ehi = _exp_neg_table(u, f)  # what exp(-u, f) returns, one call fewer
    else:
        elo, ehi = exp(-u, f)
    # tanh is decreasing in e = e**-2|z|
    lo = max(0, (one - ehi) * one // (one + ehi))
    hi = min(one, cdiv((one - elo) * one, one + elo))
    return (-hi, -lo) if neg else (lo, hi)


def sqrt_const(num: int, den: int, f: int) -> Bounds:
    """Bounds of ``sqrt(num / den) * 2**f`` for integers ``num >= 0``, ``den > 0``."""
    v = num << (2 * f)
    r = isqrt(v // den)
    return r, isqrt(cdiv(v, den)) + 1


PI_GUARD = 32  # bits Machin's sum carries beyond the requested precision
_PI: dict[int, Bounds] = {}


def _atan_inv(k: int, p: int) -> Bounds:
    """``(s, err)`` with ``|atan(1/k) 2**p - s| <= err`` for an integer ``k >= 2``."""
    u = (1 << p) // k  # floor(2**p / k**(2i+1)), exactly
    k2 = k * k
    s = i = 0
    while u:
        term = u // (2 * i + 1)
        s += -term if i & 1 else term
        i += 1
        u //= k2
    return s, i + 1  # i terms off by < 1 each, the tail below 1


def pi_bounds(q: int) -> Bounds:
    """``(lo, hi)`` with ``lo <= pi 2**q <= hi`` and ``hi - lo < 4`` (cached per ``q``), by
    Machin's formula ``pi = 16 atan(1/5) - 4 atan(1/239)``, ``atan(1/k) = sum_i (-1)**i /
    ((2i + 1) k**(2i+1))``: each term is the exact floor ``floor(2**P / (k**(2i+1) (2i +
    1)))`` (a floor of a floor of positive integers is the floor of the quotient), so it errs
    by less than 1; the series alternates with decreasing terms, so the tail after the last
    non-zero term is below 1."""
    if q not in _PI:
        p = q + PI_GUARD
        a, ea = _atan_inv(5, p)
        b, eb = _atan_inv(239, p)
        s, err = 16 * a - 4 * b, 16 * ea + 4 * eb  # err < 2**PI_GUARD for any p below 2**24
        _PI[q] = ((s - err) >> PI_GUARD, cdiv(s + err, 1 << PI_GUARD))
    return _PI[q]


def _pi(f: int) -> tuple[int, int, int]:
    """``(lo, hi, s)`` with ``lo / s < pi < hi / s``, within ``2**-(f + 16)``: the first 50
    decimals (``10**-50 < 2**-166``) up to ``f = 150``, Machin's formula beyond (so the
    constants of GELU and erf never cap a ball's radius below the working precision)."""
    if f <= 150:
        return PI_DIGITS, PI_DIGITS + 1, PI_SCALE
    lo, hi = pi_bounds(f + 16)
    return lo, hi, 1 << (f + 16)


def sqrt_two_over_pi(f: int) -> Bounds:
    """Bounds of ``sqrt(2 / pi) * 2**f``."""
    lo, hi, s = _pi(f)
    return sqrt_const(2 * s, hi, f)[0], sqrt_const(2 * s, lo, f)[1]


def two_over_sqrt_pi(f: int) -> Bounds:
    """Bounds of ``2 / sqrt(pi) * 2**f`` (``sqrt(4 / pi)``)."""
    lo, hi, s = _pi(f)
    return sqrt_const(4 * s, hi, f)[0], sqrt_const(4 * s, lo, f)[1]


def rsqrt(vlo: int, vhi: int, f: int) -> Bounds:
    """Bounds of ``2**f / sqrt(v / 2**(2f))`` for all ``v`` in ``[vlo, vhi]``, ``vlo > 0``
    (``v`` carries 2f fractional bits, so the root carries f)."""
    one2 = 1 << (2 * f)
    return one2 // (isqrt(vhi) + 1), cdiv(one2, isqrt(vlo))


def _erf_series(y: int, f: int) -> tuple[int, int, int]:
    """Bounds ``(lo, hi, p)`` of ``sum_n 2^n y^(2n+1) / (1*3*...*(2n+1)) * 2**p`` for
    ``y / 2**f >= 0``, ``p = f + GUARD``.

    One floor chain ``l_i = floor(l_{i-1} r_i)`` with the exact ratio ``r_i = 2y^2/(2i+1)``:
    ``t_i - l_i <= r_i (t_{i-1} - l_{i-1}) + 1``, tracked with ``c = ceil(2y^2)`` in place of
    ``2y^2`` as ``E_i = ceil(E_{i-1} c / (2i+1)) + 1``.  Once ``c / (2i+3) <= 1/2`` every later
    ratio is at most 1/2, so the tail after term ``i`` is at most ``t_i <= l_i + E_i``."""
    p = f + GUARD
    two_f = 2 * f
    y2 = 2 * y * y  # 2 y^2 * 2**2f, exactly
    c = -((-y2) >> two_f)
    term = total = y << GUARD
    err = errors = 0
    i = 0
    while True:
        i += 1
        term = ((term * y2) >> two_f) // (2 * i + 1)
        err = cdiv(err * c, 2 * i + 1) + 1
        total += term
        errors += err
        if 2 * c <= 2 * i + 3 and term < 2:
            break
    return total, total + errors + term + err, p


def erf(y: int, f: int) -> Bounds:
    """Bounds of ``erf(y / 2**f) * 2**f`` (within ``[-2**f, 2**f]``)."""
    if y < 0:
        lo, hi = erf(-y, f)
        return -hi, -lo
    one = 1 << f
    if 10 * y * y >= 7 * f << 2 * f:  # erfc(y) <= e**-y^2 <= e**-0.7f < 2**-f
        return one - 1, one
    g = f + 2 * ((y >> f) + 1) ** 2 + 8  # e**-y^2 * sum(...) cancels ~1.44 y^2 bits
    yg = y << (g - f)
    sq = yg * yg  # y^2 * 2**2g
    elo, ehi = exp(-cdiv(sq, 1 << g), g)[0], exp(-(sq >> g), g)[1]
    clo, chi = two_over_sqrt_pi(g)
    slo, shi, p = _erf_series(yg, g)
    lo = (clo * elo * slo) >> (2 * g + p - f)
    hi = cdiv(chi * ehi * shi, 1 << (2 * g + p - f))
    return max(0, lo), min(one, hi)


def ball(lo: int, hi: int) -> tuple[int, int]:
    """The ball ``(midpoint, radius)`` of the interval ``[lo, hi]``, midpoint floored."""
    m = (lo + hi) >> 1
    return m, hi - m


def at_radius(fn: Callable[[int, int], Bounds], z: int, zr: int, lip: int, f: int) -> Bounds:
    """Bounds ``(lo, hi)`` at ``2**-f`` of the increasing ``fn`` (``tanh``, ``erf`` or
    ``exp``, with Lipschitz constant at most ``lip``) at ``z``, computed at the working
    precision the radius ``zr`` calls for: ``g = bits(zr) - SLACK`` bits fewer than ``f``.
    With ``z' = floor(z / 2**g)``, ``z' <= z / 2**g < z' + 1``, so ``fn(z) >= fn(z')`` and
    ``fn(z) <= fn(z') + lip`` (units ``2**-(f-g)``); the error is below ``lip * 2**(g+1)``,
    at most ``lip * zr / 2**(SLACK-2)``, so the radius grows by at most 1/1024 of what it
    is anyway."""
    g = min(zr.bit_length() - SLACK, f - 24)
    if g <= 0:
        return fn(z, f)
    lo, hi = fn(z >> g, f - g)
    return lo << g, (hi + lip) << g
