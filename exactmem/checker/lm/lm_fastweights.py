"""The bound weights decoded in bulk with NumPy integer operations: the checker's fast path
for :func:`lm_weights.exact` (docs/checker.md, "Fast path").

Only integer arithmetic on 64-bit words: each value's bits are split into sign, biased
exponent and significand with shifts and masks, exactly as :func:`lm_weights.exact` does on
Python integers, and the numerators ``significand * 2**shift`` are formed in int64 only when
every one has at most :data:`WIDE` bits (checked before the shift); otherwise each numerator
is formed as a Python integer from the same exact parts.  No float is formed, nothing is
rounded, so the result is the same list of integers and the same scale, and the same
failures (NaN, infinity, scale, numerator width) with the same texts.  Without NumPy, or with
``check --reference``, :func:`lm_weights.exact` runs alone.
"""

from __future__ import annotations

from typing import Any

from ..verdict import Unusable

try:
    import numpy as np
except ImportError:  # the standard-library path runs
    np = None  # type: ignore[assignment]

WIDE = 62  # the most bits of a numerator formed in int64 (a sign bit and one spare left)
WORDS = {8: "<u8", 4: "<u4", 2: "<u2"}  # little-endian unsigned words of each size


def available() -> bool:
    """Whether the fast path can run (NumPy importable)."""
    return np is not None


def index(k: int, shape: list[int]) -> list[int]:
    """The multi-index of the ``k``-th value (row-major) of a tensor of ``shape``."""
    out = []
    for d in reversed(shape):
        k, r = divmod(k, d) if d else (k, 0)
        out.append(r)
    return out[::-1]


def _bits(v: Any) -> Any:
    """The bit length of each non-negative int64 of ``v`` (integer operations only)."""
    out = np.zeros(v.shape, dtype=np.int64)
    for b in (32, 16, 8, 4, 2, 1):
        step = (v >> b != 0) * np.int64(b)  # b where v has more than b bits, else 0
        out += step
        v = v >> step
    return out + (v > 0)


def _zeros(v: Any) -> Any:
    """The trailing zero bits of each positive int64 of ``v`` (integer operations only)."""
    return _bits(v & -v) - 1


def exact(raw: memoryview, ebits: int, mbits: int, size: int, where: str,
          shape: list[int], max_scale: int, max_bits: int) -> tuple[list[list[int]], int]:
    """:func:`lm_weights.exact` on the words of ``raw`` (``ebits`` exponent and ``mbits``
    significand bits, ``size`` bytes each), with its limits and its failure texts."""
    words = np.frombuffer(raw, dtype=WORDS[size]).astype(np.uint64)
    top, emask, low = ebits + mbits, (1 << ebits) - 1, (1 << mbits) - 1
    exps = ((words >> np.uint64(mbits)) & np.uint64(emask)).astype(np.int64)
    mant = (words & np.uint64(low)).astype(np.int64)
    neg = (words >> np.uint64(top)).astype(bool)
    del words
    bad = np.flatnonzero(exps == emask)
    if bad.size:
        k = int(bad[0])
        raise Unusable(f"{where}: {'NaN' if mant[k] else 'an infinity'} at index "
                       f"{index(k, shape)}")
    sig = np.where(exps > 0, mant | (low + 1), mant)  # value = sig * 2**(t - bias - mbits)
    t = np.maximum(exps, 1)
    nz = sig != 0
    if nz.any():  # the least scale: -min(t + trailing zeros) over the non-zero values
        e = max((1 << (ebits - 1)) - 1 + mbits - int((t[nz] + _zeros(sig[nz])).min()), 0)
    else:
        e = 0
    if e > max_scale:
        raise Unusable(f"{where}: a scale of {e} bits exceeds the limit of {max_scale}")
    s = np.where(nz, t - ((1 << (ebits - 1)) - 1 + mbits) + e, 0)  # sig * 2**s, s >= -zeros
    width = np.where(nz, _bits(sig) + s, 0)
    most = int(width.max(initial=0))
    if most > max_bits:
        k = int(np.flatnonzero(width > max_bits)[0])
        raise Unusable(f"{where}: at index {index(k, shape)} a numerator of "
                       f"{int(width[k])} bits exceeds the limit of {max_bits} "
                       "bits (MAX_VALUE_BITS)")
    cols = (shape[1] if len(shape) == 2 else int(sig.size)) or 1
    if most <= WIDE:
        p = np.where(s >= 0, sig << np.maximum(s, 0), sig >> np.maximum(-s, 0))
        return np.where(neg, -p, p).reshape(-1, cols).tolist(), e
    nums = [-(g << h if h >= 0 else g >> -h) if n else (g << h if h >= 0 else g >> -h)
            for g, h, n in zip(sig.tolist(), s.tolist(), neg.tolist())]
    return [nums[i:i + cols] for i in range(0, len(nums), cols)], e
