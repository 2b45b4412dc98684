"""The operations of GPT-NeoX and LLaMA-style blocks on balls (standard library only):
rotary positions, SiLU, and the entry-wise product of a gated MLP.

A ball is, as in :mod:`lm_forward`, a vector of integer midpoints ``m`` and one radius ``r``
(``2**-F`` units): every real ``x`` with ``|x_i - m_i| <= r`` for all ``i``.

- Rotary positions (docs/trained-models.md, "Semantics"): in each head's first ``rot`` dims
  of ``q`` and ``k``, pair ``(j, j + rot/2)`` is rotated by the exact real angle
  ``p omega_j`` (``omega_j = num_j / 2**E`` the stored ``rope.inv_freq``):
  ``x'_j = x_j cos - x_{j+h} sin``, ``x'_{j+h} = x_{j+h} cos + x_j sin``, with ``cos`` and
  ``sin`` bounded by :func:`lm_trig.cos_sin` and held as balls ``(cm, cr)``, ``(sm, sr)``.
  ``|x_j c - m_j cm| <= r (|cm| + cr) + |m_j| cr`` (and likewise for the ``sin`` term), so
  the radius becomes ``r (|cm| + cr + |sm| + sr) + |m_j| cr + |m_{j+h}| sr`` plus 1 for the
  floored midpoint: it grows by the rotation's norm, at most ``|cos| + |sin|``, plus the
  rounding of ``cos`` and ``sin``.
- SiLU ``x s(x)``, ``s(x) = 1 / (1 + e**-x)``: at the midpoint, ``s`` from :func:`lm_bounds.exp`
  of a non-positive argument only (``1 / (1 + e**-m)`` for ``m >= 0``, ``1 - 1 / (1 + e**m)``
  for ``m < 0``, each monotone in the exponential), times ``m`` with directed rounding;
  widened by ``SILU_LIP`` times the radius (:data:`SILU_LIP`).
- The product ``a * b`` of two balls: ``|x y - a b| <= |a| rb + |b| ra + ra rb``.
"""

from . import lm_bounds, lm_trig
from .lm_bounds import SLACK, cdiv

Rows = list[list[int]]
Table = list[tuple[int, int, int, int]]  # per frequency: (cm, cr, sm, sr)

SILU_LIP = (142, 125)
"""``1.136 >= sup |SiLU'|``.  Proof: ``SiLU(x) - SiLU(-x) = x (s(x) + s(-x)) = x``, so
``g(x) + g(-x) = 1`` for ``g = SiLU'``.  For ``x >= 0`` with ``u = e**-x`` in ``(0, 1]``:
``g = s + x s (1 - s)`` with ``s = 1 / (1 + u)``, ``1 - s = u / (1 + u)``, so ``g >= s >= 1/2``
and ``g - 1 = u (x - 1 - u) / (1 + u)**2 <= max(0, (x - 1) e**-x) <= e**-2`` (the maximum of
``(x - 1) e**-x`` is at ``x = 2``).  Hence ``g`` lies in ``[1/2, 1 + e**-2]`` on
``x >= 0`` and, by ``g(-x) = 1 - g(x)``, in ``[-e**-2, 1/2]`` on ``x <= 0``:
``|g| <= 1 + e**-2 < 1.1354 < 142/125``.  (The supremum is about 1.0998.)"""


def rope_table(inv_freq: tuple[Rows, int], p: int, f: int) -> Table:
    """The balls of ``cos(p omega_j)`` and ``sin(p omega_j)`` at ``2**-f`` for every
    frequency ``omega_j`` of ``inv_freq = ([numerators], E)``."""
    (nums,), e = inv_freq
    out = []
    for num in nums:
        (clo, chi), (slo, shi) = lm_trig.cos_sin(p * num, e, f)
        cm, sm = (clo + chi) >> 1, (slo + shi) >> 1
        out.append((cm, chi - cm, sm, shi - sm))
    return out


def rotate(row: list[int], r: int, starts: range, table: Table, f: int) -> int:
    """Rotate, in place, the first ``2 len(table)`` dims of each head of ``row`` beginning at
    the offsets ``starts`` (module docstring); returns the radius of the whole row."""
    half = len(table)
    worst = 0
    for s0 in starts:
        for j, (cm, cr, sm, sr) in enumerate(table, s0):
            a, b = row[j], row[j + half]
            row[j] = (a * cm - b * sm) >> f
            row[j + half] = (b * cm + a * sm) >> f
            grow = r * (abs(cm) + cr + abs(sm) + sr) + max(abs(a), abs(b)) * (cr + sr)
            worst = max(worst, grow)
    return max(r, cdiv(worst, 1 << f) + 1)


def rotary(qkv: Rows, rads: list[int], heads: int, kv_heads: int, table: list[Table],
           f: int) -> list[int]:
    """Rotary positions on the queries (``heads`` heads from 0) and keys (``kv_heads`` heads
    after the queries) of every position ``p`` (``table[p]``), in place; returns the radii."""
    dh = len(qkv[0]) // (heads + 2 * kv_heads)
    q = range(0, heads * dh, dh)
    k = range(heads * dh, (heads + kv_heads) * dh, dh)
    out = []
    for p, (row, r) in enumerate(zip(qkv, rads)):
        r1 = rotate(row, r, q, table[p], f)
        out.append(max(r1, rotate(row, r, k, table[p], f)))
    return out


def _sigmoid(m: int, f: int) -> tuple[int, int]:
    """Bounds at ``2**-f`` of ``1 / (1 + e**-m)`` (``m`` at ``2**-f``)."""
    one = 1 << f
    one2 = one << f
    if m >= 0:
        elo, ehi = lm_bounds.exp(-m, f)  # s = 1 / (1 + e), decreasing in e
        return one2 // (one + ehi), cdiv(one2, one + elo)
    elo, ehi = lm_bounds.exp(m, f)  # s = 1 - 1 / (1 + e), increasing in e
    return one - cdiv(one2, one + elo), one - one2 // (one + ehi)


def silu(m: list[int], r: int, f: int) -> tuple[list[int], int]:
    """SiLU of every coordinate of the ball ``(m, r)`` (module docstring), at the precision
    the radius calls for: with ``g = bits(r) - SLACK - bits(|x|)`` (``|x|`` in units, so the
    sigmoid's rounding times ``x`` stays far below ``r``) the point ``x' = floor(x / 2**g)``
    (at ``2**-(f-g)``) is within ``2**g`` of ``x``, a distance the Lipschitz widening
    covers."""
    ln, ld = SILU_LIP
    out, rad = [], 0
    for x in m:
        g = max(min(r.bit_length() - SLACK - max(abs(x).bit_length() - f, 0), f - 24), 0)
        fw = f - g
        xg = x >> g
        slo, shi = _sigmoid(xg, fw)
        lo, hi = (xg * slo, xg * shi) if xg >= 0 else (xg * shi, xg * slo)
        lo, hi = (lo >> fw) << g, cdiv(hi, 1 << fw) << g
        mid = (lo + hi) >> 1
        out.append(mid)
        rad = max(rad, hi - mid + cdiv(ln * (r + (1 << g)), ld))
    return out, rad + 1


def product(a: tuple[list[int], int], b: tuple[list[int], int], f: int) -> tuple[list[int], int]:
    """The entry-wise product of two balls, floored (radius + 1)."""
    (am, ar), (bm, br) = a, b
    out = [(x * y) >> f for x, y in zip(am, bm)]
    rad = max(abs(x) * br + abs(y) * ar for x, y in zip(am, bm)) + ar * br
    return out, cdiv(rad, 1 << f) + 1
