"""Enumerate b-bit networks of a one-dimensional shape: which labellings do they realize?

For ``--bits`` shapes with ``d_model`` 1, residual, argmax readout over two labels and
token ids, the weight grid ``G = [-2^(b-1), 2^(b-1))`` (see :mod:`sat_encoding`) is small
enough to walk.  A network is a *front* (embedding, every attention layer, every
feed-forward layer but the last) and a *tail* (the last feed-forward layer and the
readout); the front fixes the streams that enter the tail, and every tail is tried on
them at once.

**Fronts.**  With ``d_model = head_dim = 1`` a head's scores are ``(QK) x_q x_k`` and its
output ``(OV) avg``: the head's function depends on ``sign(QK)`` and the product ``OV``
only, so one ``(Q, K, V, O)`` in ``G^4`` per pair ``(sign(QK), OV)`` is kept.  The product
of the parameter domains is walked in a seeded random order (every front when there are
at most ``max_fronts``, else ``max_fronts`` random ones).  Streams are computed in
integers ``X = sigma x`` (``sigma = M^L``, ``M = lcm(1..n)``: an average over ``|T|`` tied
positions times ``M`` is an integer), so ties are exact.

**Tails.**  A hidden unit ``(W1, b1, W2)`` in ``G^3`` adds ``W2 ReLU(W1 X + b1 sigma)``; a
tail adds ``q`` of them (a multiset: unit order does not matter) and ``b2 sigma``; the
readout's class-score difference is ``r x' + beta sigma`` with ``r = w_1 - w_0`` and
``beta = b_1 - b_0``, which reach every pair in ``[-(2^b - 1), 2^b - 1]^2``.  Label 1 where
it is positive, 0 where negative, no zero allowed (unique argmax).  ``r < 0`` gives the
complements of ``r > 0`` (same threshold), ``r = 0`` the two constant labellings.

Nothing here is trusted: a labelling found is rebuilt as a network (:meth:`GridPool.spec`)
and certified by the checker; one not found is asked to the SAT solver, whose refutation is
an LRAT proof checked by :mod:`exactmem.checker.proofs.lrat`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from math import gcd, lcm

import numpy as np

from exactmem.checker.proofs import search_reps as canonical
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec
from exactmem.search.question.shape import Shape

MAX_FRONTS = 200_000  # fronts walked per shape (all of them when there are fewer)
MAX_TAIL_ROWS = 200_000  # tail sums formed per front (the unit multisets are cut there)
MAX_N = 24  # labellings are kept as N-bit words
EXCESS_SAMPLE = 4096  # stream vectors that order the missed labellings


grid = canonical.grid_values  # the b-bit two's-complement integers


def applies(ds: Dataset, shape: Shape, bits: int | None) -> bool:
    """Can the grid pool serve ``ds``, ``shape`` and ``bits``?"""
    return bits is not None and bits >= 1 and shape.d_model == 1 and shape.residual \
        and shape.readout == "argmax" and ds.inputs == "token-ids" \
        and len(ds.sequences) <= MAX_N and all(y in (0, 1) for y in ds.labels) \
        and len({len(s) for s in ds.sequences}) == 1


def word_of(labels: Iterable[int]) -> int:
    """Labels as an integer, bit ``i`` the label of sequence ``i``."""
    return sum(int(y) << i for i, y in enumerate(labels))


@dataclass(frozen=True, slots=True)
class Tail:
    units: tuple[tuple[int, int, int], ...]  # (W1, b1, W2) per hidden unit
    b2: int
    r: int  # readout difference w_1 - w_0
    beta: int  # readout bias difference b_1 - b_0


class GridPool:
    """The b-bit networks of ``shape`` on ``ds``'s sequences (labels ignored)."""

    def __init__(self, ds: Dataset, shape: Shape, bits: int, seed: int = 0,
                 max_fronts: int = MAX_FRONTS) -> None:
        if not applies(ds, shape, bits):
            raise ValueError("the grid pool needs d_model 1, residual, argmax, two labels, "
                             f"token ids and at most {MAX_N} sequences")
        assert ds.vocab_size is not None
        self.shape, self.bits, self.vocab = shape, bits, ds.vocab_size
        self.g = grid(bits)
        self.tokens = np.array(ds.sequences, dtype=np.int64)  # (N, n)
        self.n_seq, self.n = self.tokens.shape
        self.m = lcm(*range(1, self.n + 1))
        self.scale = self.m ** shape.layers
        self.heads = self._head_options()
        self.units = [(w1, b1, w2) for w1 in self.g for b1 in self.g for w2 in self.g]
        # the front's parameter domains, in order: tokens, heads, non-last units and b2
        self.domains: list[tuple[str, int]] = [(f"embed.{t}", len(self.g))
                                               for t in range(self.vocab)]
        for layer in range(shape.layers):
            self.domains += [(f"att{layer}.{h}", len(self.heads)) for h in range(shape.heads)]
            if shape.ff_width and layer < shape.layers - 1:
                self.domains += [(f"ff{layer}.unit{j}", len(self.units))
                                 for j in range(shape.ff_width)]
                self.domains += [(f"ff{layer}.b2", len(self.g))]
        self.total = 1
        for _, size in self.domains:
            self.total *= size
        rng = np.random.default_rng(seed)
        if self.total <= max_fronts:
            self.order = rng.permutation(self.total)
        else:
            self.order = np.array([int(rng.integers(0, 2 ** 62)) % self.total
                                   for _ in range(max_fronts)], dtype=object)
        self.every_front = self.total <= max_fronts
        self.tails_cut = False  # some front had more unit multisets than MAX_TAIL_ROWS
        self.witness: dict[int, tuple[int, Tail]] = {}
        self.walked = 0
        self.seen: set[bytes] = set()  # stream vectors walked (all their tails tried)
        self.distinct: list[np.ndarray] = []  # the same vectors, in walk order

    @property
    def planned(self) -> int:
        """Fronts a full walk visits."""
        return len(self.order)

    def front_index(self, word: int) -> int:
        """The front of the network found for ``word``."""
        return self.witness[word][0]

    @property
    def exhaustive(self) -> bool:
        """Every front, and on each every tail, tried (by the last :meth:`cover`)?"""
        return self.every_front and not self.tails_cut

    def _head_options(self) -> list[tuple[int, ...]]:
        """One ``(Q, K, V, O)`` per distinct ``(sign(QK), OV)``: the representatives of
        :mod:`~exactmem.checker.proofs.search_reps`, which the SAT encoding keeps too."""
        return sorted(canonical.representatives(self.bits, 4, canonical.head_key).values())

    def _choices(self, index: int) -> list[int]:
        out = []
        for _, size in reversed(self.domains):
            index, c = divmod(index, size)
            out.append(c)
        return out[::-1]

    def _streams(self, fronts: list[int]) -> np.ndarray:
        """Integer streams ``sigma x`` at the last position, ``(len(fronts), N)``."""
        sh, g = self.shape, np.array(self.g, dtype=np.int64)
        ch = np.array([self._choices(int(f)) for f in fronts], dtype=np.int64)  # (F, D)
        heads = np.array(self.heads, dtype=np.int64)
        units = np.array(self.units, dtype=np.int64)
        col = 0
        emb = g[ch[:, col:col + self.vocab]]  # (F, V)
        col += self.vocab
        x = np.take_along_axis(emb[:, None, :].repeat(self.n_seq, axis=1),
                               self.tokens[None, :, :].repeat(len(fronts), axis=0), axis=2)
        scale = 1
        for layer in range(sh.layers):
            new = x * self.m
            for _ in range(sh.heads):
                q, k, v, o = (heads[ch[:, col], i][:, None, None] for i in range(4))
                col += 1
                s = (q * k)[..., None] * x[:, :, :, None] * x[:, :, None, :]  # (F, N, p, k)
                tied = s == s.max(axis=3, keepdims=True)
                size = tied.sum(axis=3)
                new = new + o * v * (tied * x[:, :, None, :]).sum(axis=3) * (self.m // size)
            x, scale = new, scale * self.m
            if sh.ff_width and layer < sh.layers - 1:
                for _ in range(sh.ff_width):
                    w1, b1, w2 = (units[ch[:, col], i][:, None, None] for i in range(3))
                    col += 1
                    x = x + w2 * np.maximum(w1 * x + b1 * scale, 0)
                x = x + g[ch[:, col]][:, None, None] * scale
                col += 1
        return np.asarray(x[:, :, -1])

    def _thresholds(self) -> list[tuple[int, int]]:
        """``(r, beta)`` with ``r > 0``, one per threshold ``-beta / r``."""
        top = 2 ** self.bits - 1
        seen: dict[tuple[int, int], tuple[int, int]] = {}
        for r in range(1, top + 1):
            for beta in range(-top, top + 1):
                d = gcd(r, beta)
                seen.setdefault((r // d, beta // d), (r, beta))
        return sorted(seen.values())

    def _tail_rows(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The streams after every tail feed-forward layer on the streams ``xs`` (``(N,)``):
        rows ``(C * |b2s|, N)`` (row ``c * |b2s| + j``: unit multiset ``c``, ``b2s[j]``),
        the unit indices of each multiset ``(C, q)`` and ``b2s``."""
        q, s = self.shape.ff_width, self.scale
        g = np.array(self.g, dtype=np.int64)
        units = np.array(self.units, dtype=np.int64)
        contrib = units[:, 2:3] * np.maximum(units[:, 0:1] * xs[None, :] +
                                             units[:, 1:2] * s, 0)  # (U, N)
        uniq, first = np.unique(contrib, axis=0, return_index=True)
        combos = []
        for c in itertools.combinations_with_replacement(range(len(uniq)), q):
            combos.append(c)
            if len(combos) * len(g) >= MAX_TAIL_ROWS:
                self.tails_cut = True
                break
        idx = np.array(combos, dtype=np.int64)  # (C, q)
        rows = xs[None, None, :] + uniq[idx].sum(axis=1)[:, None, :] + g[None, :, None] * s
        return rows.reshape(-1, self.n_seq), first[idx], g

    def _readout_words(self, rows: np.ndarray, wanted: np.ndarray
                       ) -> dict[int, tuple[int, int, int]]:
        """Wanted words that the readout ``r x' + beta sigma`` gives on some row of ``rows``
        ``(R, N)``, each with ``(row, r, beta)``."""
        full = (1 << self.n_seq) - 1
        powers = (1 << np.arange(self.n_seq, dtype=np.int64))
        out: dict[int, tuple[int, int, int]] = {}
        for r, beta in self._thresholds():
            diff = rows * r + beta * self.scale
            valid = ~(diff == 0).any(axis=1)
            words = ((diff > 0) * powers).sum(axis=1)
            for flip in (False, True):
                w = np.where(valid, words ^ full if flip else words, -1)
                for i in np.flatnonzero(np.isin(w, wanted)):
                    out.setdefault(int(w[i]), (int(i), -r if flip else r,
                                               -beta if flip else beta))
        return out

    def _new(self, xs: np.ndarray) -> bool:
        key = xs.tobytes()
        if key in self.seen:
            return False
        self.seen.add(key)
        self.distinct.append(xs)
        return True

    def excess(self, words: Iterable[int]) -> dict[int, int]:
        """Per word, how far the walked streams are from admitting it even with a real
        tail: the least, over the distinct stream vectors walked, of the label changes
        along the sorted streams beyond ``ff_width + 1`` (the bound of the segment clauses
        in :mod:`sat_encoding`), or ``N`` where equal streams carry different labels.  0:
        some walked front passes the real-tail test.  Only an ordering hint, computed on
        the first ``EXCESS_SAMPLE`` distinct vectors."""
        ws = np.array(list(words), dtype=np.int64)
        best = np.full(len(ws), self.n_seq, dtype=np.int64)
        limit = self.shape.ff_width + 1
        for xs in self.distinct[:EXCESS_SAMPLE]:
            order = np.argsort(xs, kind="stable")
            labels = (ws[:, None] >> order[None, :]) & 1  # (W, N), sorted by stream
            change = labels[:, 1:] != labels[:, :-1]
            tied = (xs[order][1:] == xs[order][:-1])[None, :]
            cost = np.where((change & tied).any(axis=1), self.n_seq,
                            np.maximum(0, (change & ~tied).sum(axis=1) - limit))
            best = np.minimum(best, cost)
        return {int(w): int(c) for w, c in zip(ws, best, strict=True)}

    def cover(self, wanted: Iterable[int], batch: int = 512,
              tick: Callable[[int], None] | None = None) -> set[int]:
        """Walk fronts until every word of ``wanted`` has a network or the fronts run out;
        the words still without one are returned.  ``tick(k)``: ``k`` more fronts walked."""
        left = {w for w in wanted if w not in self.witness}
        self.walked, self.seen, self.distinct = 0, set(), []  # walks from the first front
        self.tails_cut = False
        full = (1 << self.n_seq) - 1
        if left and len(self.order):  # the constant labellings: readout weight 0
            for word, beta in ((0, -1), (full, 1)):
                if word in left:
                    self.witness[word] = (int(self.order[0]), Tail(
                        ((0, 0, 0),) * self.shape.ff_width, 0, 0, beta))
                    left.discard(word)
        while left and self.walked < len(self.order):
            fronts = [int(f) for f in self.order[self.walked:self.walked + batch]]
            xs = self._streams(fronts)
            _, first = np.unique(xs, axis=0, return_index=True)
            # a stream vector met before gives nothing new (the tails depend on it only)
            first = np.array([i for i in np.sort(first) if self._new(xs[i])], dtype=np.int64)
            if not self.shape.ff_width:  # the readout alone: every front of the batch at once
                got = self._readout_words(xs[first], np.array(sorted(left), dtype=np.int64))
                for word, (row, r, beta) in got.items():
                    self.witness[word] = (fronts[int(first[row])], Tail((), 0, r, beta))
                left -= got.keys()
            else:  # a tail feed-forward layer: its unit multisets, one stream vector at a time
                for i in first:
                    rows, unit_ids, b2s = self._tail_rows(xs[i])
                    got = self._readout_words(rows, np.array(sorted(left), dtype=np.int64))
                    for word, (row, r, beta) in got.items():
                        c, j = divmod(row, len(b2s))
                        units = tuple(self.units[int(u)] for u in unit_ids[c])
                        self.witness[word] = (fronts[int(i)], Tail(units, int(b2s[j]), r, beta))
                    left -= got.keys()
                    if not left:
                        break
            self.walked += len(fronts)
            if tick is not None:
                tick(len(fronts))
        return left

    def spec(self, word: int, ds: Dataset) -> NetworkSpec:
        """The network found for ``word`` (exact integer weights)."""
        front, tail = self.witness[word]
        return self.network(front, tail, ds)

    def network(self, front: int, tail: Tail | None, ds: Dataset) -> NetworkSpec:
        """Front ``front`` with ``tail`` (``None``: zero units, readout ``x > 0``)."""
        from exactmem.arith import ScaledMatrix
        from exactmem.search.question.shape import spec_of

        tail = tail or Tail(((0, 0, 0),) * self.shape.ff_width, 0, 1, 0)
        sh, ch = self.shape, self._choices(front)
        vals: dict[str, list[list[int]]] = {"embed": [[self.g[c] for c in ch[:self.vocab]]]}
        col = self.vocab
        for layer in range(sh.layers):
            for h in range(sh.heads):
                q, k, v, o = self.heads[ch[col]]
                col += 1
                p = f"att{layer}.{h}."
                vals |= {p + "Q": [[q]], p + "K": [[k]], p + "V": [[v]], p + "O": [[o]]}
            if sh.ff_width:
                if layer < sh.layers - 1:
                    units = [self.units[ch[col + j]] for j in range(sh.ff_width)]
                    b2 = self.g[ch[col + sh.ff_width]]
                    col += sh.ff_width + 1
                else:
                    units = list(tail.units) or [(0, 0, 0)] * sh.ff_width  # constant
                    b2 = tail.b2
                p = f"ff{layer}."
                vals |= {p + "W1": [[u[0]] for u in units], p + "b1": [[u[1]] for u in units],
                         p + "W2": [[u[2] for u in units]], p + "b2": [[b2]]}
        w0, w1 = self._split(tail.r)
        c0, c1 = self._split(tail.beta)
        vals |= {"out.W": [[w0], [w1]], "out.b": [[c0], [c1]]}
        mats = {name: ScaledMatrix.from_rows([[Fraction(v) for v in row] for row in rows],
                                             cols=len(rows[0]))
                for name, rows in vals.items()}
        return spec_of(sh, ds.inputs, self.vocab, ds.n, 2, mats)

    def _split(self, diff: int) -> tuple[int, int]:
        """Grid values ``(a, b)`` with ``b - a = diff``."""
        for a in self.g:
            if a + diff in self.g:
                return a, a + diff
        raise ValueError(f"{diff} is not a difference of two {self.bits}-bit integers")
