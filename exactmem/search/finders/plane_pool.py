"""Sample b-bit networks of a shape with a wide stream: which labelling classes do they realize?

The grid walk of :mod:`~exactmem.search.finders.grid_pool` needs ``d_model = 1``.  For one block
with ``d_model = m >= 2``, heads of size 1 and a feed-forward of width 0 or 1 (residual,
argmax readout over two labels, token ids) this pool draws *fronts* at random from the
b-bit grid ``G`` and, on the streams of each, tries every *tail* at once:

**Fronts.**  An embedding ``E`` in ``G^(m x V)`` and per head ``Q, K, V`` in ``G^(1 x m)``,
``O`` in ``G^(m x 1)``.  A head scores ``(Q x_q)(K x_k)``, attends hardmax (Kajitsuka & Sato
eq. (12): ties averaged) and adds ``O (V avg)``; streams are integers ``X = sigma x`` with
``sigma = lcm(1..n)``, so ties are exact.

**Tails.**  The class-score difference after a width-1 feed-forward and the readout is
``r x' + c ReLU(W1 x' + b1 sigma) + d sigma`` with ``r = w_1 - w_0`` in ``D^m``
(``D = [-(2^b - 1), 2^b - 1]``), ``c = r W2`` and ``d = r b2 + beta`` for ``W2, b2`` in
``G^m`` and ``beta`` in ``D``; width 0 leaves ``r x + beta sigma``.  Label 1 where it is
positive, 0 where negative, no zero allowed (unique argmax).

**Classes.**  Permuting the tokens that map the sequence set onto itself, and swapping the
two labels, are symmetries of the family (:mod:`~exactmem.search.question.labellings`): a front
that realizes a labelling realizes its whole orbit once its embedding columns are permuted
(and the readout rows swapped).  So each labelling a tail gives is reduced to its orbit,
and a wanted labelling is served by any member of its orbit.

**The sample.**  Fronts are drawn uniformly from the grid until one serves a wanted
labelling; from then on four in five are one of the last fronts that served one, with one
or two weights redrawn (the labellings left late are served by fronts near those that
served other late ones: on the 16 sequences of length 2 over 4 tokens, 2 bits, the 29
parameters of ``L1 H1 m2 s1 q1``, uniform draws leave 70 of 1,540 classes after 4,000
fronts, mutated ones 8).  The walk is never exhaustive: it stops after ``max_fronts``
fronts, or after ``patience`` fronts in a row that served no new wanted labelling (both
deterministic for a seed).  Nothing here is trusted: every labelling found is rebuilt as a network
(:meth:`PlanePool.spec`) and certified by the checker; the rest are asked to the SAT
solver.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from math import lcm
from typing import Any

import numpy as np

from exactmem.checker.proofs.search_reps import grid_values
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec
from exactmem.search.finders.plane_net import Front, Tail, plane_network, tail_values
from exactmem.search.question.labellings import token_symmetries
from exactmem.search.question.shape import Shape

MAX_N = 24  # labellings are kept as N-bit words
PATIENCE = 1024  # fronts in a row without a new wanted labelling end the walk
MAX_TAIL_CELLS = 20_000_000  # tail evaluations (tails x sequences) per front
TICK = 64  # fronts per progress update
MUTATE = 0.8  # share of the fronts drawn near one that served a wanted labelling
RECENT = 50  # how many of the last such fronts are mutated
TABLE_N = 16  # up to this many sequences the orbit of every word is tabulated


def applies(ds: Dataset, shape: Shape, bits: int | None) -> bool:
    """Can the plane pool serve ``ds``, ``shape`` and ``bits``?"""
    return bits is not None and bits >= 1 and shape.d_model >= 2 and shape.head_dim == 1 \
        and shape.layers == 1 and shape.ff_width <= 1 and shape.residual \
        and shape.readout == "argmax" and ds.inputs == "token-ids" \
        and len(ds.sequences) <= MAX_N and all(y in (0, 1) for y in ds.labels) \
        and len({len(s) for s in ds.sequences}) == 1 \
        and _tail_cells(bits, shape.d_model, len(ds.sequences)) <= MAX_TAIL_CELLS


def _tail_cells(bits: int, m: int, n_seq: int) -> int:
    """An upper estimate of the tail evaluations (tails x sequences) per front: readout
    differences up to sign, times hidden units times values of ``c = r W2`` (one row
    without a unit), times values of ``d = r b2 + beta``."""
    g, top = 2 ** bits, 2 ** bits - 1
    reach = m * top * 2 ** (bits - 1)  # |r W2| and |r b2| at most
    cs = min(g ** m, 2 * reach + 1)
    return ((2 * top + 1) ** m // 2) * (1 + g ** (m + 1) * cs) * (2 * (reach + top) + 1) \
        * n_seq


@dataclass(frozen=True, slots=True)
class Witness:
    front_index: int
    front: Front
    tail: Tail
    perm: tuple[int, ...]  # token t of the front's network becomes token perm[t]
    flip: bool  # the readout rows swapped


class PlanePool:
    """Random b-bit networks of ``shape`` on ``ds``'s sequences (labels ignored)."""

    def __init__(self, ds: Dataset, shape: Shape, bits: int, seed: int = 0,
                 max_fronts: int = 200_000, patience: int = PATIENCE,
                 mutate: float = MUTATE) -> None:
        if not applies(ds, shape, bits):
            raise ValueError("the plane pool needs one block, d_model >= 2, head_dim 1, "
                             "ff_width <= 1, residual, argmax, two labels, token ids and at "
                             f"most {MAX_N} sequences")
        assert ds.vocab_size is not None
        self.shape, self.bits, self.vocab = shape, bits, ds.vocab_size
        self.g = np.array(grid_values(bits), dtype=np.int64)
        top = 2 ** bits - 1
        self.diffs = np.arange(-top, top + 1, dtype=np.int64)
        self.seqs = [tuple(s) for s in ds.sequences]
        self.tokens = np.array(self.seqs, dtype=np.int64)  # (N, n)
        self.n_seq, self.n = self.tokens.shape
        self.scale = lcm(*range(1, self.n + 1))
        m = shape.d_model
        self.m = m
        self.total = len(self.g) ** (m * self.vocab + 4 * m * shape.heads)
        self.planned = min(max_fronts, self.total)
        self.patience, self.mutate = patience, mutate
        self.served: list[Front] = []  # fronts that served a wanted labelling, in order
        self.seeded: set[str] = set()  # keys of the records whose fronts were added
        self.rng = np.random.default_rng(seed)
        self.walked = 0
        self.exhaustive = False  # a sample: its misses are asked, never refuted here
        self.witness: dict[int, Witness] = {}
        self.seen: set[bytes] = set()
        sym = token_symmetries(self.seqs, self.vocab)
        self.images = np.array([image for image, _ in sym], dtype=np.int64)
        self.perms = [perm for _, perm in sym]
        self.powers = np.int64(1) << np.arange(self.n_seq, dtype=np.int64)
        vecs = [tuple(int(a) for a in v) for v in itertools.product(self.g, repeat=m)]
        units = [(w, int(b)) for w in vecs for b in self.g if any(w) or b > 0]
        self.unit_w1 = np.array([w for w, _ in units], dtype=np.int64).reshape(-1, m)
        self.unit_b1 = np.array([b for _, b in units], dtype=np.int64)
        # per readout difference r (one of r, -r: the label swap is a symmetry): the
        # values of c = r W2 and d = r b2 + beta, and a (W2) / (b2, beta) for each
        self.tables: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.c_parts: list[dict[int, tuple[int, ...]]] = []
        self.d_parts: list[dict[int, tuple[tuple[int, ...], int]]] = []
        for r in itertools.product((int(a) for a in self.diffs), repeat=m):
            if r <= (0,) * m:
                continue
            rv = np.array(r, dtype=np.int64)
            cs, dvs = tail_values(r, vecs, [int(a) for a in self.diffs], bool(shape.ff_width))
            self.tables.append((rv, np.array(sorted(cs), dtype=np.int64),
                                np.array(sorted(dvs), dtype=np.int64)))
            self.c_parts.append(cs)
            self.d_parts.append(dvs)
        self.table = self._canonical_table() if self.n_seq <= TABLE_N else None

    # orbits ----------------------------------------------------------------------------
    def _orbit_words(self, words: np.ndarray) -> np.ndarray:
        """``(K, S, 2)``: every word moved by every symmetry, labels kept or swapped."""
        bits = (words[:, None] >> np.arange(self.n_seq)) & 1  # (K, N)
        full = (1 << self.n_seq) - 1
        out = np.empty((len(words), len(self.images), 2), dtype=np.int64)
        for j, image in enumerate(self.images):
            moved = np.empty_like(bits)
            moved[:, image] = bits  # the label of sequence i moves to sequence image[i]
            w = moved @ self.powers
            out[:, j, 0], out[:, j, 1] = w, w ^ full
        return out

    def canonical(self, words: np.ndarray) -> np.ndarray:
        """The least word of each word's orbit."""
        words = np.asarray(words, dtype=np.int64)
        if self.table is not None:
            return np.asarray(self.table[words])
        return self._orbit_words(words).min(axis=(1, 2))

    def _canonical_table(self) -> np.ndarray:
        out = np.arange(1 << self.n_seq, dtype=np.int64)
        for lo in range(0, len(out), 1 << 16):
            out[lo:lo + (1 << 16)] = self._orbit_words(out[lo:lo + (1 << 16)]).min(axis=(1, 2))
        return out

    # forward ---------------------------------------------------------------------------
    def _draw(self) -> Front:
        """A front: uniform on the grid, or (with probability ``mutate``, once a front
        has served a wanted labelling) one of the last ``RECENT`` such fronts with one or
        two weights redrawn."""
        g, m, heads = self.g, self.m, self.shape.heads
        vec = self.rng.choice(g, m * self.vocab + 4 * m * heads)
        if self.served and self.rng.random() < self.mutate:
            base = self.served[-1 - int(self.rng.integers(0, min(len(self.served), RECENT)))]
            vec = self._flat(base)
            for _ in range(int(self.rng.integers(1, 3))):
                vec[int(self.rng.integers(0, len(vec)))] = self.rng.choice(g)
        return self._front(vec)

    def seed(self, network: dict[str, Any]) -> bool:
        """Add the front of a certified network of the shape (JSON, e.g. one the SAT solver
        found) to the fronts that are mutated; ``False`` when it has no such front."""
        from exactmem.certificate import spec_from_json
        from exactmem.errors import ExactmemError
        from exactmem.model.spec import Attention, Embedding

        def ints(mat: Any) -> np.ndarray:
            rows = mat.to_fractions()
            if any(v.denominator != 1 for row in rows for v in row):
                raise ValueError("off the integer grid")
            return np.array([[int(v) for v in row] for row in rows], dtype=np.int64)

        try:
            layers = spec_from_json(network).layers
            if len(layers) < 2 or not isinstance(layers[0], Embedding) or \
                    not isinstance(layers[1], Attention):
                return False
            embed = ints(layers[0].table)
            heads = tuple((ints(h.query)[0], ints(h.key)[0], ints(h.value)[0],
                           ints(h.output)[:, 0]) for h in layers[1].heads)
        except (ExactmemError, IndexError, KeyError, TypeError, ValueError):
            return False
        if embed.shape != (self.m, self.vocab) or len(heads) != self.shape.heads or \
                any(v.shape != (self.m,) for h in heads for v in h):
            return False
        self.served.append(Front(embed, heads))
        return True

    def _flat(self, front: Front) -> np.ndarray:
        return np.concatenate([front.embed.ravel()] + [np.concatenate(h) for h in front.heads])

    def _front(self, vec: np.ndarray) -> Front:
        """The front of a flat vector (embedding by rows, then per head Q, K, V, O)."""
        m, size = self.m, self.m * self.vocab
        embed, rest = vec[:size].reshape(m, self.vocab), vec[size:]
        return Front(embed, tuple((rest[4 * m * h:4 * m * h + m],
                                   rest[4 * m * h + m:4 * m * h + 2 * m],
                                   rest[4 * m * h + 2 * m:4 * m * h + 3 * m],
                                   rest[4 * m * h + 3 * m:4 * m * (h + 1)])
                                  for h in range(self.shape.heads)))

    def streams(self, fronts: list[Front]) -> np.ndarray:
        """Integer streams ``sigma x`` at the last position, ``(F, N, m)``."""
        emb = np.stack([f.embed for f in fronts])  # (F, m, V)
        x = emb[:, :, self.tokens].transpose(0, 2, 3, 1)  # (F, N, n, m)
        out = x[:, :, -1, :] * self.scale
        for h in range(self.shape.heads):
            q, k, v, o = (np.stack([f.heads[h][i] for f in fronts]) for i in range(4))
            qs = np.einsum("fnm,fm->fn", x[:, :, -1, :], q)
            ks = np.einsum("fnpm,fm->fnp", x, k)
            s = qs[:, :, None] * ks
            tied = s == s.max(axis=2, keepdims=True)
            size = tied.sum(axis=2)
            vs = np.einsum("fnpm,fm->fnp", x, v)
            total = (tied * vs).sum(axis=2) * (self.scale // size)  # (F, N)
            out = out + total[:, :, None] * o[:, None, :]
        return np.asarray(out)

    # tails -----------------------------------------------------------------------------
    def _tail_words(self, xs: np.ndarray) -> tuple[np.ndarray, Callable[[int], Tail]]:
        """Every word some tail gives on the streams ``xs`` ``(N, m)``, each once, and a
        function that rebuilds the tail of the ``i``-th word."""
        s = self.scale
        hid = np.zeros((0, self.n_seq), dtype=np.int64)
        first = np.zeros(0, dtype=np.int64)
        if self.shape.ff_width:
            hid = np.maximum(self.unit_w1 @ xs.T + self.unit_b1[:, None] * s, 0)  # (U, N)
            hid, first = np.unique(hid, axis=0, return_index=True)
            keep = hid.any(axis=1)
            hid, first = hid[keep], first[keep]
        found: list[np.ndarray] = []
        where: list[np.ndarray] = []
        for ri, (rv, cvals, dvals) in enumerate(self.tables):
            base = xs @ rv  # (N,)
            if self.shape.ff_width:
                v = (base[None, None, :] + cvals[:, None, None] * hid[None, :, :]
                     ).reshape(-1, self.n_seq)
                v = np.concatenate([base[None, :], v])  # row 0: no unit
            else:
                v = base[None, :]
            t = v[:, None, :] + dvals[None, :, None] * s  # (K, D, N)
            valid = ~(t == 0).any(axis=2)
            w = ((t > 0) * self.powers).sum(axis=2)[valid]
            flat = np.flatnonzero(valid)
            w, idx = np.unique(w, return_index=True)
            found.append(w)
            where.append(np.stack([np.full(len(w), ri), flat[idx]], axis=1))
        words = np.concatenate(found)
        places = np.concatenate(where)
        words, idx = np.unique(words, return_index=True)
        places = places[idx]

        def tail(i: int) -> Tail:
            ri, flat = (int(a) for a in places[i])
            rv, cvals, dvals = self.tables[ri]
            row, col = divmod(flat, len(dvals))
            b2, beta = self.d_parts[ri][int(dvals[col])]
            unit = None
            if row > 0:
                ci, hi = divmod(row - 1, len(hid))
                w1 = tuple(int(a) for a in self.unit_w1[int(first[hi])])
                b1 = int(self.unit_b1[int(first[hi])])
                unit = (w1, b1, self.c_parts[ri][int(cvals[ci])])
            return Tail(unit, b2, tuple(int(a) for a in rv), beta)

        return words, tail

    # the walk --------------------------------------------------------------------------
    def cover(self, wanted: Iterable[int], tick: Callable[[int], None] | None = None,
              limit: int | None = None) -> set[int]:
        """Draw fronts until every word of ``wanted`` has a network, ``patience`` fronts
        in a row served none, or ``limit`` more fronts (in all at most ``max_fronts``) were
        drawn; the words still without one are returned.  A second call goes on with the
        next fronts of the sample."""
        left = {int(w) for w in wanted if int(w) not in self.witness}
        if not left:
            return left
        order = sorted(left)
        want: dict[int, list[int]] = {}
        for w, c in zip(order, self.canonical(np.array(order)), strict=True):
            want.setdefault(int(c), []).append(w)
        full = (1 << self.n_seq) - 1
        for w in want.pop(0, []):  # the constant labellings: readout weight 0, bias -1
            zero = Front(np.zeros((self.m, self.vocab), dtype=np.int64),
                         ((np.zeros(self.m, dtype=np.int64),) * 4,) * self.shape.heads)
            self.witness[w] = Witness(-1, zero, Tail(None, (0,) * self.m, (0,) * self.m, -1),
                                      self._identity(), w == full)
            left.discard(w)
        stop = self.planned if limit is None else min(self.planned, self.walked + limit)
        idle, ticked = 0, self.walked
        while want and self.walked < stop and idle < self.patience:
            front = self._draw()  # one at a time: the next draw may mutate this one
            xs = self.streams([front])[0]
            key = xs.tobytes()
            served = 0
            if key not in self.seen:
                self.seen.add(key)
                words, tail = self._tail_words(xs)
                hits = np.flatnonzero(np.isin(self.canonical(words),
                                              np.array(list(want), dtype=np.int64)))
                for i in hits:
                    orbit = self._orbit_words(words[i:i + 1])[0]  # (S, 2)
                    for target in want.pop(int(orbit.min()), []):
                        j, flip = (int(a) for a in np.argwhere(orbit == target)[0])
                        self.witness[target] = Witness(self.walked, front, tail(int(i)),
                                                       self.perms[j], bool(flip))
                        left.discard(target)
                        served += 1
            if served:
                self.served.append(front)
            idle = 0 if served else idle + 1
            self.walked += 1
            if tick is not None and self.walked - ticked >= TICK:
                tick(self.walked - ticked)
                ticked = self.walked
        if tick is not None and self.walked > ticked:
            tick(self.walked - ticked)
        return left

    def front_index(self, word: int) -> int:
        """The front (its place in the sample) of the network found for ``word``."""
        return self.witness[word].front_index

    def _identity(self) -> tuple[int, ...]:
        return tuple(range(self.vocab))

    def excess(self, words: Iterable[int]) -> dict[int, int]:
        """No ordering hint (a sample of fronts says little about refutations): 0 each."""
        return {int(w): 0 for w in words}

    # networks --------------------------------------------------------------------------
    def spec(self, word: int, ds: Dataset) -> NetworkSpec:
        """The network found for ``word`` (exact integer weights)."""
        wit = self.witness[word]
        return self.network(wit.front, wit.tail, ds, wit.perm, wit.flip)

    def network(self, front: Front, tail: Tail | None, ds: Dataset,
                perm: tuple[int, ...] | None = None, flip: bool = False) -> NetworkSpec:
        """Front ``front`` with ``tail`` (``None``: no unit, readout ``x_0 > 0``), token
        ``t`` of the front renamed ``perm[t]``, the readout rows swapped with ``flip``."""
        return plane_network(self.shape, self.bits, ds, front, tail, perm, flip)
