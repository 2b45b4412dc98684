"""Exact integer matrix products on float64 BLAS: the checker's fast path (docs/checker.md,
"Fast path").  The NumPy import is optional: without it (or with ``check --reference``) the
prepared model holds plain linear maps and :mod:`lm_forward` runs its standard-library
products; with it, the same integers come out of a BLAS product of small limbs.

**Why the products are exact.**  Every integer ``x`` is written in base ``2**b`` (``b = 8 B``)
as ``x = sum_i u_i 2**(b i)`` with limbs ``0 <= u_i < 2**b`` and a signed top limb
``-2**(b-1) <= u_top < 2**(b-1)`` (the two's-complement bytes of ``x``, ``B`` at a time), so
``|u| <= 2**b - 1`` for every limb.  For one pair of limb planes the product of an
``n x k`` and a ``k x m`` matrix of such limbs has entries ``sum_{t<k} u_t v_t``; every
partial sum of any subset of those ``k`` terms, in any order, is an integer of absolute value
at most ``k * umax * vmax``, which :func:`_blas_ok` asserts is ``<= 2**53`` before BLAS is
called (``umax``, ``vmax``: the largest limbs actually present).  Every integer of absolute
value ``<= 2**53`` is a float64, so each addition and each multiplication BLAS performs on
them, correctly rounded per IEEE 754, has an exactly representable result and is therefore
exact, and a fused multiply-add (one rounding of an exact ``a b + c``) is exact for the same
reason: whatever blocking, order, vectorisation or threading the library uses, each output is
the exact integer.  Trusted: that the library computes each output of a float64 matrix product
as a sum of the ``k`` products ``a_it b_tj`` (the classical algorithm: FLINT's
``fmpz_mat_mul_blas`` rests on the same), with IEEE-754 float64 addition and multiplication;
nothing else (no library exp, tanh or division).  The limb products are then recombined in
64-bit integers (sums of at most :data:`MAX_PAIRS` planes, each ``<= 2**53``: at most
``2**62``, a carry added still below ``2**63``), carried into base-``2**b`` digits, gathered
into 48-bit chunks and joined as Python integers.  A bound that does not hold (an inner
dimension beyond about ``2**37``, or a limb bound checked at run time) runs the
Python-integer product instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import mul
from typing import Any

try:
    import numpy as np
except ImportError:  # the standard-library path runs
    np = None  # type: ignore[assignment]

EXACT = 1 << 53  # every integer of at most this absolute value is a float64
CHUNK = 48  # bits of a chunk of digits (a multiple of 8, 16 and 24)
MAX_PAIRS = 512  # limb planes summed in int64: 512 * 2**53 = 2**62, carries included < 2**63
Rows = Sequence[Sequence[int]]


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for ``b > 0``."""
    return -((-a) // b)


def available() -> bool:
    """Whether the fast path can run (NumPy importable)."""
    return np is not None


def limb_bytes(k: int) -> int:
    """``B``: the most bytes per limb (``b = 8 B`` bits) with ``k (2**b - 1)**2 <= 2**53``
    (3 for ``k <= 32``, 2 for ``k`` up to about ``2**21``, 1 up to about ``2**37``); 0
    when none fits."""
    for nb in (3, 2, 1):
        if k * ((1 << 8 * nb) - 1) ** 2 <= EXACT:
            return nb
    return 0


def _blas_ok(k: int, umax: int, vmax: int) -> bool:
    """Every partial sum of ``k`` products of limbs ``|u| <= umax``, ``|v| <= vmax`` is an
    integer of absolute value ``<= 2**53`` (so a float64, exactly)."""
    return k * umax * vmax <= EXACT


def _bits(rows: Rows) -> int:
    """Bits of the largest absolute value in ``rows``."""
    return max((max(max(r), -min(r)).bit_length() for r in rows if len(r)), default=0)


class Limbs:
    """The limbs of the rows of an integer matrix (``count`` rows of ``k`` entries), ``B``
    bytes each: ``planes[l, p, t]`` is limb ``l`` of entry ``t`` of row ``p`` (a float64
    array), ``umax`` the largest absolute limb."""

    def __init__(self, rows: Rows, nb: int, bits: int) -> None:
        self.count, self.k, self.nb = len(rows), len(rows[0]), nb
        width = cdiv(bits + 1, 8 * nb) * nb  # bytes: the sign bit fits
        raw = b"".join(x.to_bytes(width, "little", signed=True) for r in rows for x in r)
        u8 = np.frombuffer(raw, dtype=np.uint8).reshape(self.count, self.k, width // nb, nb)
        limbs = u8[..., 0].astype(np.int64)
        for t in range(1, nb):
            limbs |= u8[..., t].astype(np.int64) << (8 * t)
        top = limbs[..., -1]
        top -= (top >> (8 * nb - 1)) << (8 * nb)  # the top limb is signed
        self.planes = np.ascontiguousarray(limbs.transpose(2, 0, 1)).astype(np.float64)
        self.umax = int(np.abs(limbs).max()) if limbs.size else 0
        self.bits = bits


def weights(cols: Rows) -> Limbs | None:
    """The limbs of a weight matrix given by its columns (once per prepared model); None
    when no limb size fits its inner dimension."""
    nb = limb_bytes(len(cols[0]))
    if np is None or nb == 0:
        return None
    w = Limbs(cols, nb, _bits(cols))
    w.planes = np.ascontiguousarray(w.planes.transpose(2, 0, 1))  # [t, l, j]
    return w


def product(rows: Rows, w: Limbs) -> Any:
    """``rows . cols`` (``cols`` the matrix ``w`` was made from) as an ``n x m`` NumPy array
    of Python integers; None when the limb bound fails (the caller then uses the integer
    product)."""
    k, nb = w.k, w.nb
    a = Limbs(rows, nb, _bits(rows))
    la, lw = a.planes.shape[0], w.planes.shape[1]
    if a.k != k or not _blas_ok(k, a.umax, w.umax) or min(la, lw) > MAX_PAIRS:
        return None
    n, m = a.count, w.count
    flat = a.planes.reshape(la * n, k) @ w.planes.reshape(k, lw * m)  # every entry exact
    planes = flat.reshape(la, n, lw, m).astype(np.int64)  # exact: integers <= 2**53
    sums = np.zeros((la + lw - 1, n, m), dtype=np.int64)
    for i in range(la):
        sums[i:i + lw] += planes[i].transpose(1, 0, 2)
    return _to_ints(sums, 8 * nb, k.bit_length() + a.bits + w.bits)


def _to_ints(sums: Any, b: int, bits: int) -> Any:
    """``sum_s sums[s] 2**(b s)`` (``|sums| < 2**62``; the value below ``2**bits`` in
    absolute value) as an array of Python integers: carried into base-``2**b`` digits, the
    digits gathered into 48-bit chunks (int64), the chunks joined as Python integers."""
    per = CHUNK // b
    digits = cdiv(max(len(sums), cdiv(bits + 1, b)), per) * per
    chunks = np.zeros((digits // per,) + sums.shape[1:], dtype=np.int64)
    carry = np.zeros(sums.shape[1:], dtype=np.int64)
    mask = (1 << b) - 1
    for s in range(digits):
        t = carry + sums[s] if s < len(sums) else carry
        chunks[s // per] |= (t & mask) << (b * (s % per))
        carry = t >> b
    if carry.size and (carry.min() < -1 or carry.max() > 0):  # |value| < 2**(b digits - 1)
        raise AssertionError("lm_limbs: a product exceeds its digits")
    chunks[-1] += carry << CHUNK  # the sign: value = sum_c chunks[c] 2**(48 c)
    out = chunks[-1].astype(object)
    for c in range(len(chunks) - 2, -1, -1):
        out = (out << CHUNK) + chunks[c].astype(object)
    return out


def reference_product(rows: Rows, cols: Rows) -> list[list[int]]:
    """``rows . cols`` with Python integers (the standard-library product)."""
    return [[sum(map(mul, r, c)) for c in cols] for r in rows]


def matmul_exact(rows: Rows, cols: Rows) -> list[list[int]]:
    """The exact integer product: entry ``[p][j]`` is ``sum_t rows[p][t] cols[j][t]`` (rows
    of the left factor, columns of the right one, every entry a Python ``int``), by float64
    BLAS on limbs when the bound holds, else with Python integers."""
    if not rows or not cols:
        return [[] for _ in rows] if not cols else []
    w = weights(cols)
    out = product(rows, w) if w is not None else None
    if out is None:
        return reference_product(rows, cols)
    return list(out.tolist())


class Linear(tuple[Any, ...]):
    """A linear map of :func:`lm_forward.linear` (``cols, bias, e, l1, bmax``) with the limbs
    of its weights: :func:`lm_forward.apply_all` then runs :func:`apply_all`."""

    limbs: Limbs


def shared(lin: tuple[Any, ...], old: tuple[Any, ...]) -> tuple[Any, ...]:
    """``lin`` with the limbs of ``old``, a map with the same columns (prepared at another
    precision: :func:`lm_forward.at_bias`), when ``old`` has them."""
    if not isinstance(old, Linear):
        return lin
    out = Linear(lin)
    out.limbs = old.limbs
    return out


def prepare(lin: tuple[Any, ...]) -> tuple[Any, ...]:
    """``lin`` with its weight limbs (:class:`Linear`), or ``lin`` itself when the fast
    path is not available for it."""
    w = weights(lin[0])
    if w is None:
        return lin
    out = Linear(lin)
    out.limbs = w
    return out


def apply_all(lin: Linear, ms: list[list[int]], rs: list[int], slack: int
              ) -> tuple[list[list[int]], list[int]]:
    """:func:`lm_forward.apply_all` (``slack``: its ``SLACK``) with the integer products of
    :func:`product`: the same drop of the bits below the radii, the same floors, so the same
    integers."""
    cols, bias, e, l1, _ = lin
    g = min(r.bit_length() for r in rs) - slack
    if g > 0:
        ms = [[x >> g for x in m] for m in ms]
        rs = [r + (1 << g) for r in rs]
    else:
        g = 0
    dots = product(ms, lin.limbs)
    if dots is None:
        dots = np.array(reference_product(ms, cols), dtype=object)
    if g <= e:  # floor((y 2**g + b) / 2**e) = floor((y + floor(b / 2**g)) / 2**(e - g))
        outs = (dots + np.array([b >> g for b in bias], dtype=object)) >> (e - g)
    else:  # = y 2**(g - e) + floor(b / 2**e)
        outs = (dots << (g - e)) + np.array([b >> e for b in bias], dtype=object)
    return outs.tolist(), [cdiv(r * l1, 1 << e) + 1 for r in rs]
