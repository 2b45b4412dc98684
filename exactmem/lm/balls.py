"""Rigorous midpoint-radius interval arithmetic in float64 numpy (the INTLAB / Rump approach)
for the language-model producer (:mod:`exactmem.lm.ball_steps`, :mod:`exactmem.lm.normballs`).

A *ball* is a pair of float64 arrays ``(m, r)``, ``r >= 0``: it stands for every real ``x``
with ``|x - m| <= r``, entrywise.  Each operation returns a ball that contains the exact real
result for every real input in the input balls; the floating-point rounding of computing the
new midpoint and radius is bounded, never estimated.  What is assumed (docs/trained-models.md,
"What the fast producer trusts"):

- IEEE 754 binary64 arithmetic, round to nearest (numpy's default): for ``+ - * /`` and
  ``sqrt``, ``|fl(z) - z| <= u |z| + eta`` with ``u = 2^-53`` and ``eta = 2^-1074`` (a
  flush-to-zero unit would lose ``2^-1022`` at most: covered by :data:`TINY` as well);
- a matrix product returns each entry as a sum of its ``k`` products in *some* order, each
  step rounded (FMA allowed, no Strassen-like algorithm), so (Higham, *Accuracy and
  Stability*, Thm 3.1 / eq. 3.5) ``|fl(A B) - A B| <= gamma_k |A| |B| + k eta`` with
  ``gamma_k = k u / (1 - k u)``, and a product of non-negative matrices is at least
  ``(1 - gamma_k) A B - k eta``;
- nothing of ``np.exp``, ``np.tanh`` or any library function: ``exp``, ``tanh`` and ``erf``
  are Taylor sums of basic operations with counted roundings (:func:`exp_point`,
  :func:`tanh_ball`, :func:`_erf_point`); ``tests/lm/test_lm_fast.py`` checks them against
  python-flint's arb.

The one lemma every radius uses: a non-negative quantity computed from non-negative floats by
``n`` rounded operations (a ``k``-term sum or dot product counting ``k``) is at least
``(1 - gamma_n)`` times the exact value of the same expression, less ``n eta``; and
:func:`up` ``(x, n)`` returns a float ``>= x (1 + 2 n u) + 2^-902``, which is above that exact
value divided by ``1 - gamma_n`` plus ``n eta`` (``2 n u >= gamma_n / (1 - gamma_n)`` for
``n u <= 1/4``).  :func:`down` is the mirror image.  Infinite or NaN results are never
proved (every comparison with them is false).
"""

from __future__ import annotations

from math import isqrt

import numpy as np

U = 2.0 ** -53
TINY = 2.0 ** -900
Ball = tuple[np.ndarray, np.ndarray]


def up(x: np.ndarray, n: int) -> np.ndarray:
    """A float ``>= x (1 + 2 n u) + 2^-902`` for finite ``x >= 0`` (``n < 2^40``).

    ``1 + (4n+4) u`` is exact; ``fl(x f) >= x f (1 - u) - eta`` and
    ``fl(y + TINY) >= (y + TINY)(1 - u)``, so the result is at least
    ``x (1 + (4n+4) u)(1 - u)^2 + TINY/2 - 2 eta >= x (1 + 2 n u) + 2^-902``."""
    return x * (1.0 + (4 * n + 4) * U) + TINY


def down(x: np.ndarray, n: int) -> np.ndarray:
    """A float in ``[0, max(x (1 - 2 n u) - 2^-902, 0)]`` for finite ``x`` (the mirror of
    :func:`up`: ``fl(x f) <= x f (1 + u) + eta``; a negative result becomes 0)."""
    return np.maximum(x * (1.0 - (4 * n + 4) * U) - TINY, 0.0)


def lohi(b: Ball) -> tuple[np.ndarray, np.ndarray]:
    """Float end points ``lo <= x <= hi`` for every ``x`` in the ball.  With
    ``R = up(r + 2u|m|, 2)`` (so ``R (1 - u) >= r + u |m| + eta``), ``fl(m - R)`` is at most
    ``m - R + u (|m| + R) + eta <= m - r``; the same for ``m + R``."""
    m, r = b
    big = up(r + 2 * U * np.abs(m), 2)
    return m - big, m + big


def from_interval(lo: np.ndarray, hi: np.ndarray) -> Ball:
    """The ball of midpoint ``fl((lo + hi) / 2)`` that contains ``[lo, hi]``."""
    m = 0.5 * (lo + hi)
    return m, up(np.maximum(np.maximum(hi - m, m - lo), 0.0), 1)


def exact(x: np.ndarray) -> Ball:
    """Floats taken as the exact reals they are."""
    return x, np.zeros_like(x)


def const(value: float, rel: int) -> Ball:
    """A float computed with relative error at most ``rel u`` (e.g. ``sqrt(2/pi)``), as the
    ball around it that contains the real constant."""
    v = np.float64(value)
    return np.asarray(v), np.asarray(up(np.abs(v) * (rel * U), 2))


def add(a: Ball, b: Ball) -> Ball:
    """``a + b``: ``|fl(s) - s| <= u|s| <= 2u|fl(s)| + eta``."""
    m = a[0] + b[0]
    return m, up(a[1] + b[1] + 2 * U * np.abs(m), 4)


def add_exact(a: Ball, v: np.ndarray | float) -> Ball:
    m = a[0] + v
    return m, up(a[1] + 2 * U * np.abs(m), 3)


def mul(a: Ball, b: Ball) -> Ball:
    """``a b``: ``|ab - ma mb| <= |ma| rb + ra |mb| + ra rb``, plus the midpoint's rounding."""
    m = a[0] * b[0]
    r = np.abs(a[0]) * b[1] + a[1] * np.abs(b[0]) + a[1] * b[1] + 2 * U * np.abs(m)
    return m, up(r, 8)


def scale(a: Ball, w: np.ndarray | float) -> Ball:
    """``a w`` with ``w`` exact floats."""
    m = a[0] * w
    return m, up(a[1] * np.abs(w) + 2 * U * np.abs(m), 4)


def matmul_exact(a: Ball, w: np.ndarray, absw: np.ndarray) -> Ball:
    """``a @ w`` with ``w`` exact ``[k, p]`` (``absw = |w|``): the exact product of the
    midpoints is within ``gamma_k |m| |w|``, the radius adds ``r |w|``; one product
    ``(r + c|m|) |w|`` with ``c = 2(k+1) u >= gamma_k`` bounds both."""
    k, p = w.shape
    shape = a[0].shape[:-1] + (p,)
    m = (a[0].reshape(-1, k) @ w).reshape(shape)  # 2-D: numpy calls BLAS once
    r = ((a[1] + (2 * (k + 1) * U) * np.abs(a[0])).reshape(-1, k) @ absw).reshape(shape)
    return m, up(r, 2 * k + 6)


def matmul(a: Ball, b: Ball) -> Ball:
    """``a @ b`` of two balls (batched on the leading axes, inner dimension ``k``):
    ``|AB - ma mb| <= (|ma| + ra) rb + ra |mb|`` plus ``gamma_k |ma| |mb|`` for the midpoint
    product, as one product with inner dimension ``3k``."""
    k = a[0].shape[-1]
    am = np.abs(a[0])
    bm = np.abs(b[0])
    m = a[0] @ b[0]
    left = np.concatenate([am + a[1], a[1], (2 * (k + 1) * U) * am], axis=-1)
    right = np.concatenate([b[1], bm, bm], axis=-2)
    return m, up(left @ right, 6 * k + 10)


LN2 = 0.6931471805599453  # the float nearest ln 2: within u ln 2 of it
SIXTEEN_OVER_LN2 = 23.083120654223414


def _pow2_sixteenths() -> tuple[np.ndarray, np.ndarray]:
    """Float bounds of ``2^(j/16)``, ``j = 0 .. 15``: ``floor(2^(60 + j/16))`` is four nested
    integer square roots of ``2^(960 + j)`` (``isqrt(isqrt(n)) = floor(n^(1/4))``)."""
    lo = []
    for j in range(16):
        v = 1 << (960 + j)
        for _ in range(4):
            v = isqrt(v)
        lo.append(v)
    return (down(np.ldexp(np.array(lo, dtype=np.float64), -60), 1),
            up(np.ldexp(np.array(lo, dtype=np.float64) + 1.0, -60), 1))


POW2_LO, POW2_HI = _pow2_sixteenths()


def exp_point(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float end points of ``e^p`` at float points ``p``, from basic operations only:
    ``p = k ln2 / 16 + r`` (``k`` the nearest integer to ``16 p / ln2``, ``r`` a ball with
    ``|r| < 0.022`` that contains ``p - k ln2 / 16``), ``e^r`` by its Taylor sum of 9 terms
    at the midpoint (each term at most 16 roundings, the sum 9 more, so the error is at most
    ``gamma_25 e^0.044 <= 27 u e^r``; the remainder is below ``10^-20``), widened by
    ``e^{+-rr}`` (``1 - rr``, ``1 + 2 rr``), times ``2^(j/16)`` (``j = k mod 16``, bounds
    from integer square roots) and ``2^((k - j)/16)`` (exact, or within ``TINY`` when the
    result is subnormal).  ``e^p < 2^-1000`` for ``p < -700``, ``e^p > 10^304`` for
    ``p > 700``."""
    x = np.clip(p, -800.0, 800.0)
    k = np.rint(x * SIXTEEN_OVER_LN2)
    kl = mul(exact(k), const(LN2 / 16, 1))
    rm, rr = add(exact(x), (-kl[0], kl[1]))
    t = np.ones_like(rm)
    s = np.ones_like(rm)
    for i in range(1, 9):
        t = t * rm / i
        s = s + t
    ki = k.astype(np.int64)
    j = ki & 15
    lo = down(POW2_LO[j] * s * (1.0 - rr), 40)
    hi = up(POW2_HI[j] * s * (1.0 + 2.0 * rr), 40)
    lo = down(np.ldexp(lo, ki >> 4), 0)
    hi = up(np.ldexp(hi, ki >> 4), 0)
    low, high = p < -700.0, p > 700.0
    return (np.where(low, 0.0, np.where(high, 1e304, lo)),
            np.where(low, 2.0 ** -1000, np.where(high, np.inf, hi)))


def exp_interval(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``e^x`` for ``x`` in ``[lo, hi]`` (exp is increasing)."""
    return exp_point(lo)[0], exp_point(hi)[1]


def tanh_ball(z: Ball) -> Ball:
    """``tanh`` on a ball: at the midpoint ``p``, ``tanh |p| = (1 - e) / (1 + e)`` with
    ``e = e^{-2|p|}`` enclosed by :func:`exp_point` (decreasing in ``e``; odd in ``p``),
    widened by the ball's radius (``|tanh'| <= 1``)."""
    a = np.abs(z[0])
    elo, ehi = exp_point(-2.0 * a)
    tl = down(down(1.0 - ehi, 1) / up(1.0 + ehi, 1), 1)
    th = np.minimum(up(up(1.0 - elo, 1) / down(1.0 + elo, 1), 1), 1.0)
    neg = z[0] < 0
    m, r = from_interval(np.where(neg, -th, tl), np.where(neg, -tl, th))
    return m, up(r + z[1], 2)


def _erf_point(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float end points of ``erf(p)`` at float points ``p``: for ``q = |p| <= 6`` the
    all-positive series ``erf(q) = 2/sqrt(pi) e^{-q^2} sum_n 2^n q^{2n+1} / (2n+1)!!``
    (Abramowitz-Stegun 7.1.6), ``N >= 2 q^2 + 55`` terms, so the terms after the last one
    shrink by at least half each and their sum is below the last term (added to the upper
    end); term ``n`` carries at most ``3n + 1`` roundings, the sum ``N`` more.  For ``q > 6``,
    ``0 <= 1 - erf(q) <= e^{-q^2} / (q sqrt(pi)) < 2^-55``."""
    q = np.minimum(np.abs(p), 6.0)
    q2 = q * q
    nterms = int(np.ceil(2.0 * float(q2.max(initial=0.0)))) + 55
    t = q.copy()
    s = q.copy()
    for n in range(nterms):
        t = t * (2.0 * q2) / (2 * n + 3)
        s = s + t
    rounds = 4 * nterms + 4
    elo, ehi = exp_point(-q2)  # q2 = q^2 (1 + d), |d| <= u, q^2 <= 36: a factor e^{+-37u}
    k = 2.0 / np.sqrt(np.pi)  # np.pi within u of pi: k within 4u
    hi = np.minimum(up(up(k, 4) * up(ehi, 64) * up(s + t, rounds), 4), 1.0)
    lo = down(down(k, 4) * down(elo, 64) * down(s, rounds), 4)
    far = np.abs(p) > 6.0
    lo = np.where(far, 1.0 - 2.0 ** -52, lo)
    hi = np.where(far, 1.0, hi)
    neg = p < 0
    return np.where(neg, -hi, lo), np.where(neg, -lo, hi)


def erf_ball(y: Ball) -> Ball:
    """``erf`` on a ball: rigorous at the midpoint, widened by ``|erf'| <= 2/sqrt(pi) <
    1.25`` times the radius."""
    lo, hi = _erf_point(y[0])
    m, r = from_interval(lo, hi)
    return m, up(r + 1.25 * y[1], 3)
