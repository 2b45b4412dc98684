"""The steps of the norm balls (:mod:`exactmem.lm.normballs`) that read no weights of the
spec: rigorous 2-norm bounds of float64 vectors and matrices, the sum of two norm balls, a
gated MLP's product, the rotary rotation, and the spread of an attention output.

A norm ball ``(m, rho)`` holds every vector ``x`` with ``||x - m||_2 <= rho``.  The
bounds (docs/trained-models.md, "How the producer decides"):

- ``||e||_2`` of an entry-wise rounding radius ``e``, upward (:func:`norm_up`);
- ``||W||_2`` by repeated squaring of the Gram matrix in ball arithmetic
  (:func:`spectral_up`); ``diag(g) W`` formed exactly where float64 allows
  (:func:`gain_times`), so a norm's gain goes into the map it feeds;
- ``a * b`` entry-wise (SwiGLU's gate): ``max|mb| rho_a + max|ma| rho_b + rho_a rho_b``
  (:func:`product`);
- rotary positions: an exact rotation of each head's ``q`` and ``k`` (orthogonal: the
  radius stays), its midpoint enclosed with cos/sin balls (:func:`rotate`);
- ``sum_j w_j v_j`` for softmax weights known within a radius: centred on the output, so a
  weight's uncertainty costs the distance of its value from the output (:func:`centred_spread`).
"""

from __future__ import annotations

import numpy as np

from exactmem.lm import balls as I

NBall = tuple[np.ndarray, np.ndarray]  # (m [..., d], rho [...])


def norm_up(e: np.ndarray) -> np.ndarray:
    """A float ``>= ||e||_2`` over the last axis (``d`` squares and sums, then a correctly
    rounded ``sqrt``)."""
    d = e.shape[-1]
    return I.up(np.sqrt(I.up((e * e).sum(-1), 2 * d + 2)), 1)


def spectral_up(w: np.ndarray, squarings: int = 5) -> float:
    """A rigorous upper bound of ``||w||_2``.  With ``G = a^T a`` (``a`` = ``w`` scaled by a
    power of two to Frobenius norm at most 1, the smaller Gram matrix), ``||w||_2^2 =
    lambda_max(G)`` and ``lambda_max(G)^(2^j) = ||G^(2^j)||_2 <= ||G^(2^j)||_inf``; ``G^(2^j)``
    is enclosed by ball products, and the ``2^(j+1)``-th root taken by upward square roots.
    Over-estimates ``||w||_2`` by at most ``k^(1/2^(j+2))`` (``k`` the smaller dimension)."""
    a = w if w.shape[0] >= w.shape[1] else w.T
    fro = float(np.sqrt((a * a).sum()))
    if fro == 0.0:
        return 0.0
    s = int(np.ceil(np.log2(fro))) + 1
    scaled = np.ldexp(a, -s)  # |a|_F <= 1/2; exact unless an entry falls into subnormals
    if not np.array_equal(np.ldexp(scaled, s), a):  # then the Frobenius norm, upward
        return float(I.up(np.sqrt(I.up((a * a).sum(), 2 * a.size + 2)), 1))
    a = scaled
    g = I.matmul(I.exact(a.T), I.exact(a))
    for _ in range(squarings):
        g = I.matmul(g, g)
    x = float(I.up((np.abs(g[0]) + g[1]).sum(-1).max(), g[0].shape[0] + 2))
    for _ in range(squarings + 1):
        x = float(I.up(np.sqrt(x), 1))
    return float(I.up(np.ldexp(x, s), 1))


def _bits(x: np.ndarray) -> np.ndarray:
    """Significant bits of each float (0 for 0): the odd part of its 53-bit mantissa."""
    m = (np.frexp(np.abs(x))[0] * 2.0 ** 53).astype(np.int64)
    low = m & -m  # the lowest set bit
    return np.where(m == 0, 0, 53 - np.log2(np.maximum(low, 1)).astype(np.int64))


def gain_times(g: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """``diag(g) w`` (``g`` scaling the rows of ``w``) when every product is exact in float64:
    the two significands fit in 53 bits together (two float32 numbers always do) and no
    product is subnormal or infinite; otherwise None."""
    p = g[:, None] * w
    small = (np.abs(p) < 2.0 ** -1000) & (g[:, None] != 0) & (w != 0)  # subnormal, or 0
    if (_bits(g)[:, None] + _bits(w) > 53).any() or not np.isfinite(p).all() or small.any():
        return None
    return p


def neg(a: I.Ball) -> I.Ball:
    return -a[0], a[1]


def add(a: NBall, b: NBall) -> NBall:
    m = a[0] + b[0]
    return m, I.up(a[1] + b[1] + norm_up(2 * I.U * np.abs(m)), 3)


def product(a: NBall, b: NBall) -> NBall:
    """``a * b`` entry-wise: ``a b - ma mb = da mb + ma db + da db``, in the 2-norm at most
    ``max|mb| rho_a + max|ma| rho_b + rho_a rho_b``, plus the midpoint's rounding."""
    pm, pr = I.mul(I.exact(a[0]), I.exact(b[0]))
    big_a, big_b = np.abs(a[0]).max(-1), np.abs(b[0]).max(-1)
    return pm, I.up(big_b * a[1] + big_a * b[1] + a[1] * b[1] + norm_up(pr), 6)


def rotate(q: np.ndarray, rho: np.ndarray, c: I.Ball, s: I.Ball) -> NBall:
    """Rotary positions on midpoints ``q [B, H, n, dh]`` with radii ``rho [B, H, n]``, given
    balls ``c``, ``s [n, r/2]`` of ``cos(p omega_j)`` and ``sin(p omega_j)`` (the first ``r``
    dims of each head rotate, pair ``(j, j + r/2)`` by angle ``p omega_j``): the exact
    rotation is orthogonal, so ``rho`` stays; the rotated midpoint is enclosed entry-wise,
    its radius added."""
    half = c[0].shape[-1]
    a, b = I.exact(q[..., :half]), I.exact(q[..., half:2 * half])
    lo = I.add(I.mul(a, c), neg(I.mul(b, s)))
    hi = I.add(I.mul(b, c), I.mul(a, s))
    m = np.concatenate([lo[0], hi[0], q[..., 2 * half:]], axis=-1)
    e = np.concatenate([lo[1], hi[1]], axis=-1)
    return m, I.up(rho + norm_up(e), 2)


def centred_spread(wm: np.ndarray, wr: np.ndarray, vm: np.ndarray,
                   om: np.ndarray) -> np.ndarray:
    """A float ``>= ||sum_j w_j vm_j - om_p||_2`` less the rounding of ``om``, for every real
    weight row ``w`` with ``|w_j - wm_j| <= wr_j`` and ``sum_j w_j = 1`` (softmax weights):
    ``sum_j w_j vm_j = sum_j wm_j vm_j + om_p (1 - sum_j wm_j) + sum_j (w_j - wm_j)(vm_j -
    om_p)``, so the part beyond the rounding is at most ``||om_p|| |1 - sum_j wm_j| + sum_j
    wr_j ||vm_j - om_p||``.  Centring on ``om_p`` pays for a weight's uncertainty with the
    distance of its value from the output, not the value's length (small where attention is
    peaked).  ``||vm_j - om_p||^2 = A_j + C_p - 2 G_pj`` from the float squared norms ``A``,
    ``C`` and products ``G`` (dot products of ``k`` terms within ``gamma_k |a||b| <=
    gamma_k (|a|^2 + |b|^2) / 2``), each within ``(4 dh + 40) u (A_j + C_p)`` in all.
    Shapes: ``wm, wr [B, H, n, n]``, ``vm, om [B, H, n, dh]``; returns ``[B, H, n]``."""
    dh = vm.shape[-1]
    n = wm.shape[-1]
    a = I.up((vm * vm).sum(-1), dh + 2)[..., None, :]  # [B, H, 1, n] (keys j)
    c = I.up((om * om).sum(-1), dh + 2)[..., :, None]  # [B, H, n, 1] (queries p)
    g = om @ vm.swapaxes(-1, -2)  # [B, H, n, n]
    d2 = I.up(np.maximum(a + c - 2.0 * g, 0.0) + (4 * dh + 40) * I.U * (a + c), 2)
    dist = I.up(np.sqrt(d2), 1)
    total = I.up(wm.sum(-1), n + 2)  # >= sum_j wm_j; the lower end by down()
    low = I.down(wm.sum(-1), n + 2)
    defect = np.maximum(I.up(total - 1.0, 1), I.up(1.0 - low, 1))
    return I.up(np.sqrt(c[..., 0]) * defect + (wr * dist).sum(-1), n + 4)
