"""Random fronts by the million for one-dimensional streams (numpy, vectorized).

Where :func:`cheap_test_applies` (``d_model`` 1, residual,
argmax, two labels), a front can serve a labelling iff its streams pass
:func:`~exactmem.search.finders.transfer.tail_separates`: equal streams carry equal labels, and
along the sorted streams the label changes at most ``ff_width + 1`` times.  That test
depends on the front only through the order of the streams and their ties, so one pool
of fronts, drawn once per shape and sequence set, answers every labelling: this module
draws the fronts as arrays, runs the hardmax forward on all of them at once, and keeps
each front's sorted order and ties.

Every parameter is a small integer (value maps also halves and quarters), so the float64
arithmetic below is exact at these sizes up to the averages over tied keys (thirds...);
comparisons allow a relative slack of ``TOL`` so that those roundings do not split ties.
Nothing here is trusted.  The pool only
*proposes*: a proposed front is rebuilt with rational weights (:meth:`FrontPool.spec`),
its streams recomputed by the exact forward, tested again, its tail fitted by Z3 and
the network certified by the checker (:func:`~exactmem.search.finders.transfer.transfer`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec
from exactmem.search.question.shape import Shape

CHUNK = 20_000  # fronts drawn and run at a time
VALUE_DENOMINATORS = (1, 2, 4)  # of the head output maps, as in the exact random fronts
MAX_CELLS = 40_000_000  # kept sorted-order entries per pool (fronts x sequences)
TOL = 1e-9  # relative slack of the float comparisons (ties)


def _equal_or_above(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a >= b - TOL * (1.0 + np.abs(b))


class FrontPool:
    """Random fronts of a one-dimensional ``shape`` on ``ds``'s token sequences, drawn
    chunk by chunk as far as some caller has needed them (deterministic in ``seed``)."""

    def __init__(self, ds: Dataset, shape: Shape, seed: int = 0, span: int = 4) -> None:
        if shape.d_model != 1 or not shape.residual or ds.inputs != "token-ids":
            raise ValueError("the array pool needs d_model 1, residual, token ids")
        assert ds.vocab_size is not None
        self.shape, self.span, self.vocab = shape, span, ds.vocab_size
        self.tokens = np.array(ds.sequences, dtype=np.int64)  # (N, n)
        self.seed = seed
        self.order: list[np.ndarray] = []  # per chunk: (C, N) argsort of the streams
        self.tied: list[np.ndarray] = []  # per chunk: (C, N - 1) sorted neighbours equal

    @property
    def size(self) -> int:
        return CHUNK * len(self.order)

    def _draw(self, chunk: int, count: int = CHUNK) -> dict[str, np.ndarray]:
        """The parameters of chunk ``chunk``, name -> ``(count, rows, cols)`` (drawn again
        when a front is rebuilt: only the orders are kept)."""
        rng, span, sh = np.random.default_rng([self.seed, chunk]), self.span, self.shape

        def ints(*dims: int) -> np.ndarray:
            return rng.integers(-span, span + 1, size=(count, *dims)).astype(np.float64)

        out = {"embed": ints(1, self.vocab)}
        for layer in range(sh.layers):
            for h in range(sh.heads):
                p = f"att{layer}.{h}."
                den = rng.choice(np.array(VALUE_DENOMINATORS, dtype=np.float64),
                                 size=(count, 1, 1))
                # one-dimensional heads: only the sign of ``QK`` and the product ``OV`` count
                sign = rng.integers(-1, 2, size=(count, 1, 1)).astype(np.float64)
                out |= {p + "Q": sign, p + "K": np.ones_like(sign), p + "V": ints(1, 1),
                        p + "O": 1.0 / den}
            if sh.ff_width and layer < sh.layers - 1:
                q = sh.ff_width
                out |= {f"ff{layer}.W1": ints(q, 1), f"ff{layer}.b1": ints(q, 1),
                        f"ff{layer}.W2": ints(1, q), f"ff{layer}.b2": ints(1, 1)}
        return out

    def _streams(self, p: dict[str, np.ndarray]) -> np.ndarray:
        """The hardmax forward of every drawn front: the streams at the last position,
        ``(C, N)`` (non-causal heads; tied keys share the weight equally)."""
        sh = self.shape
        x = p["embed"][:, 0, :][:, self.tokens]  # (C, N, n)
        for layer in range(sh.layers):
            new = x.copy()
            for h in range(sh.heads):
                pre = f"att{layer}.{h}."
                a = (p[pre + "Q"] * p[pre + "K"])[:, 0, 0][:, None, None, None]
                b = (p[pre + "O"] * p[pre + "V"])[:, 0, 0][:, None, None]
                scores = a * x[:, :, :, None] * x[:, :, None, :]  # (C, N, query, key)
                tied = _equal_or_above(scores, scores.max(axis=3, keepdims=True))
                chosen = (tied * x[:, :, None, :]).sum(axis=3) / tied.sum(axis=3)
                new = new + b * chosen
            x = new
            if sh.ff_width and layer < sh.layers - 1:
                pre = f"ff{layer}."
                w1, b1 = p[pre + "W1"][:, None, None, :, 0], p[pre + "b1"][:, None, None, :, 0]
                w2, b2 = p[pre + "W2"][:, None, None, 0, :], p[pre + "b2"][:, None, 0, 0, None]
                hidden = np.maximum(w1 * x[..., None] + b1, 0.0)
                x = x + (hidden * w2).sum(axis=-1) + b2
        return x[:, :, -1]

    def _grow(self) -> None:
        ys = self._streams(self._draw(len(self.order)))
        order = np.argsort(ys, axis=1, kind="stable")
        ranked = np.take_along_axis(ys, order, axis=1)
        self.order.append(order.astype(np.int16))
        self.tied.append(_equal_or_above(ranked[:, :-1], ranked[:, 1:]))

    def candidates(self, labels: Sequence[int], count: int, limit: int) -> list[int]:
        """Indices (among the first ``count`` fronts) whose streams some tail of the
        shape can label as ``labels``, at most ``limit`` of them, smallest first."""
        y = np.array(labels, dtype=np.int8)
        count = min(count, MAX_CELLS // max(1, len(y)))
        found: list[int] = []
        for chunk in range((count + CHUNK - 1) // CHUNK):
            if chunk == len(self.order):
                self._grow()
            ranked = y[self.order[chunk]]
            change = ranked[:, 1:] != ranked[:, :-1]
            ok = ~(change & self.tied[chunk]).any(axis=1) & \
                (change.sum(axis=1) <= self.shape.ff_width + 1)
            hits = np.flatnonzero(ok)
            hits = hits[hits < count - chunk * CHUNK]
            found += [chunk * CHUNK + int(i) for i in hits[:limit - len(found)]]
            if len(found) >= limit:
                break
        return found

    def distance(self, labels: Sequence[int], count: int) -> int:
        """How far ``labels`` is from every front among the first ``count``: the least, over
        the fronts, of the tied neighbours with different labels plus the label changes
        beyond ``ff_width + 1`` (0 exactly when some front can serve it)."""
        y = np.array(labels, dtype=np.int8)
        count = min(count, MAX_CELLS // max(1, len(y)))
        best = len(y)
        for chunk in range((count + CHUNK - 1) // CHUNK):
            if chunk == len(self.order):
                self._grow()
            ranked = y[self.order[chunk]][: count - chunk * CHUNK]
            change = ranked[:, 1:] != ranked[:, :-1]
            excess = (change & self.tied[chunk][: len(ranked)]).sum(axis=1) + np.maximum(
                0, change.sum(axis=1) - (self.shape.ff_width + 1))
            best = min(best, int(excess.min()))
            if best == 0:
                break
        return best

    def spec(self, index: int, ds: Dataset) -> NetworkSpec:
        """Front ``index`` as a network of the shape with rational weights, zero tail."""
        from exactmem.arith import ScaledMatrix
        from exactmem.search.question.shape import output_dim, spec_of

        chunk, row = divmod(index, CHUNK)
        mats = {name: ScaledMatrix.from_rows([[Fraction(float(v)) for v in r]
                                              for r in arr[row]], cols=arr.shape[2])
                for name, arr in self._draw(chunk).items()}
        return spec_of(self.shape, ds.inputs, self.vocab, ds.n, output_dim(ds, self.shape),
                       mats)


@functools.lru_cache(maxsize=4)
def _cached(ds_key: str, shape: Shape, seed: int) -> FrontPool:
    from exactmem.model.dataset import dataset_from_json

    return FrontPool(dataset_from_json(json.loads(ds_key)), shape, seed)


def pool_for(ds: Dataset, shape: Shape, seed: int = 0) -> FrontPool:
    """The pool of ``ds``'s sequences (labels ignored), cached per process."""
    import dataclasses

    unlabelled = dataclasses.replace(ds, labels=tuple(0 for _ in ds.labels))
    return _cached(json.dumps(unlabelled.to_json(), sort_keys=True), shape, seed)


def applies(ds: Dataset, shape: Shape) -> bool:
    """Can this module's pool serve ``ds`` and ``shape``?"""
    return cheap_test_applies(shape, 2) and ds.inputs == "token-ids" and \
        all(y in (0, 1) for y in ds.labels)


def cheap_test_applies(shape: Shape, classes: int) -> bool:
    """Does :func:`~exactmem.search.finders.transfer.tail_separates` decide for this shape
    and number of labels?"""
    return shape.d_model == 1 and shape.residual and shape.readout == "argmax" \
        and classes <= 2
