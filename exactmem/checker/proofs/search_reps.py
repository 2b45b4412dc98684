"""One grid point per function: scalar heads and hidden units (``d_model = head_dim = 1``).

With one-dimensional streams many b-bit weight tuples compute the same map, and a SAT
refutation has to rule out each copy.  :mod:`.search_encode` keeps one
*representative* per function and excludes the others; every network then has a copy of
the same function built from representatives only, so excluding the rest loses no
function (an UNSAT answer is still about every b-bit network of the shape).

* **A head** ``(Q, K, V, O)``: its scores are ``(QK) x_q x_k``, and hardmax (Kajitsuka &
  Sato eq. (1)) sees only their order, which depends on ``sign(QK)`` (``QK = 0``: every
  key tied); its output is ``OV`` times the tie-set average.  So the head's function is
  fixed by :func:`head_key` ``= (sign(QK), OV)``.
* **A hidden unit** ``(W1, b1, W2)`` adds ``W2 ReLU(W1 x + b1 s)`` (``s > 0`` the stream's
  scale): zero when ``W2 = 0`` or ``W1 = 0, b1 <= 0``; the constant ``W2 b1 s`` when
  ``W1 = 0 < b1``; else ``W2 |W1| ReLU(sign(W1) x + (b1 / |W1|) s)`` (``ReLU(cz) = c ReLU(z)``
  for ``c > 0``).  :func:`unit_key` is that description.

The representative of a key is its grid point with the fewest nonzero weights, then the
smallest absolute values, then the smallest tuple (any fixed choice would do).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from fractions import Fraction

MAX_COMBOS = 4096  # grid tuples enumerated per head or unit (b <= 3)


def grid_values(bits: int) -> list[int]:
    """The b-bit two's-complement integers."""
    return list(range(-(2 ** (bits - 1)), 2 ** (bits - 1)))


def head_key(q: int, k: int, v: int, o: int) -> Hashable:
    """The function of a scalar head: ``(sign(QK), OV)``."""
    return ((q * k > 0) - (q * k < 0), o * v)


def unit_key(w1: int, b1: int, w2: int) -> Hashable:
    """The function of a scalar hidden unit ``x -> W2 ReLU(W1 x + b1 s)``."""
    if w2 == 0 or (w1 == 0 and b1 <= 0):
        return "zero"
    if w1 == 0:
        return ("constant", w2 * b1)
    return ("ramp", (w1 > 0) - (w1 < 0), Fraction(b1, abs(w1)), w2 * abs(w1))


def representatives(bits: int, arity: int, key: Callable[..., Hashable]
                    ) -> dict[Hashable, tuple[int, ...]]:
    """Per key, the grid point kept."""
    out: dict[Hashable, tuple[int, ...]] = {}
    for vals in sorted(itertools.product(grid_values(bits), repeat=arity),
                       key=lambda t: (sum(x != 0 for x in t), [abs(x) for x in t], t)):
        out.setdefault(key(*vals), vals)
    return out


def excluded(bits: int, arity: int, key: Callable[..., Hashable]
             ) -> list[tuple[int, ...]]:
    """The grid points that are not their key's representative."""
    keep = representatives(bits, arity, key)
    return [vals for vals in itertools.product(grid_values(bits), repeat=arity)
            if keep[key(*vals)] != vals]


def applies(d_model: int, head_dim: int, bits: int) -> bool:
    """Scalar heads and units, and a grid small enough to enumerate."""
    return d_model == 1 and head_dim == 1 and (2 ** bits) ** 4 <= MAX_COMBOS
