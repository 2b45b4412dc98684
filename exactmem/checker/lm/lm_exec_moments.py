"""LayerNorm statistics by any tree of Welford steps and Chan merges, as torch computes them
(standard library only; docs/trained-models.md, "Execution claims").

torch's CPU kernel (``RowwiseMomentsImpl``) runs Welford per SIMD lane over chunks, merges
the chunks' moments in a cascade and the lanes one after another by Chan's update; its CUDA
kernels merge per-thread Welford moments across threads.  Every such computation of the
mean and of ``M2 = sum (x_i - mean)**2`` over ``d`` values is a binary tree: a leaf is one
value ``x`` (mean ``x``, ``M2 = 0``, exact), a node joins parts ``a`` and ``b``
(``n = n_a + n_b``) by

- ``delta = fl(mean_b - mean_a)``, ``mean = fl(mean_a + fl(delta rho))`` with ``rho`` a
  float within ``gamma_2`` of ``n_b / n`` (a rounded reciprocal, as Welford's ``1/k``, or a
  quotient), FMA or not;
- ``M2 = M2_a + M2_b + T`` (two additions, any order, FMA or not) with either Chan's term
  ``T = delta**2 w`` (``w = n_a n_b / n``, computed within ``gamma_5`` with the square) or,
  for ``n_b = 1`` (a Welford step), ``T = delta fl(x - mean)`` with the updated mean.

Each operation within one ulp (relative ``U``) plus ``TINY`` (flush-to-zero); ``|x_i| <= X``.
The bounds below hold for every such tree (any shape, chunking, lane count or orientation).

**Mean.**  A node's error is ``e = (1 - rho) e_a + rho e_b + l`` with the local error
``|l| <= gamma_4 rho |mean_b' - mean_a'| + U |mean'| <= (2 gamma_4 + U)(X + E)``
(``mean'`` the computed values, within ``X + E``), so the root's is
``sum_S (n_S / d) l_S``.  ``sum_S n_S`` over the ``d - 1`` nodes is at most
``(d - 1)(d + 2) / 2`` (the caterpillar), hence with ``c = (d + 2) gamma_9 / 2``
(``2 gamma_4 + U <= gamma_9``): ``E <= (c X + 3 (d + 2) TINY) / (1 - c)`` for every node.

**Sum of squares.**  The exact ``M2`` of a node is ``M2_a + M2_b + t``,
``t = delta**2 w`` (``delta`` the exact means' difference, ``w = n_a n_b / n``), and over
the tree the exact terms add up to the root's exact ``M2 = d var``.  With
``|delta' - delta| <= eps = 2 E + U (2 X + 2 E)`` and ``a = eps + 2 E``, Chan's term is
within ``w ((2 |delta| eps + eps**2)(1 + gamma_5) + gamma_5 delta**2)``; the Welford form
(``w = n_a / n >= 1/2``, ``x - mean = delta w``, the computed mean within ``E``) within
``w (|delta| a + 2 eps E) + gamma_2 (|delta| + eps)(|delta| + 2 E)``; both below
``w (2 |delta| (eps + E)(1 + gamma_5) + 2 gamma_5 delta**2 + k)``,
``k = (eps**2 + 2 eps E)(1 + gamma_5) + 2 gamma_5 a**2``.  By Cauchy-Schwarz
``sum w |delta| <= sqrt(sum w delta**2) sqrt(sum w) = sqrt(M2 W)``, and
``W = sum_S w_S <= (d / 4) log2 d`` (induction: ``n p (1 - p) <= (n / 4) H(p)``, the binary
entropy ``H(p) >= 4 p (1 - p)``), so per value the terms add at most
``Psi = 2 (eps + E)(1 + gamma_5) sqrt(var b / 4) + 2 gamma_5 var + k b / 4``
(``b = bits(d) >= log2 d``).  The two additions of a node are within ``gamma_2`` of
``M2_S + E2`` and the nodes of one depth are disjoint (``M2`` is superadditive), so over at
most ``d - 1`` depths the error per value is ``e2 <= (Psi + g var) / (1 - g) + 8 TINY``,
``g = gamma_{2d}``.  The variance ``M2 / d`` (a quotient, or a product by a rounded
``1/d``) is then within ``(1 + gamma_2) e2 + gamma_2 var``; ``var`` is bounded above by
``vhi``, the squared distance to any centre over ``d``.
"""

from fractions import Fraction
from math import isqrt

from .lm_exec_model import TINY, NotProved, U, gamma


def mean_error(d: int, xinf: Fraction) -> Fraction:
    """``E``: every node's mean within ``E`` of its exact mean (module docstring)."""
    c = (d + 2) * gamma(9) / 2
    if 2 * c >= 1:
        raise NotProved(f"LayerNorm over {d} values: a merge tree's mean error reaches 1/2")
    return (c * xinf + 3 * (d + 2) * TINY) / (1 - c)


def variance_error(d: int, xinf: Fraction, e: Fraction, vhi: Fraction) -> Fraction:
    """The computed variance's error for every tree, given every node's mean within ``e``
    (at least :func:`mean_error`) and the exact variance at most ``vhi`` (module
    docstring)."""
    eps = 2 * e + U * (2 * xinf + 2 * e)
    a = eps + 2 * e
    g5, g, g2 = gamma(5), gamma(2 * d), gamma(2)
    b = d.bit_length()
    k = (eps * eps + 2 * eps * e) * (1 + g5) + 2 * g5 * a * a
    psi = 2 * (eps + e) * (1 + g5) * _sqrt_up(vhi * b / 4) + 2 * g5 * vhi + k * b / 4
    e2 = (psi + g * vhi) / (1 - g) + 8 * TINY
    return (1 + g2) * e2 + g2 * vhi


def _sqrt_up(x: Fraction) -> Fraction:
    """An upper bound of ``sqrt(x)``, ``x >= 0``, within about ``2**-60`` relative."""
    scale = 1 << 64
    return Fraction(isqrt(x.numerator * scale * scale // x.denominator) + 1, scale)
