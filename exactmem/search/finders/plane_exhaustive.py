"""Every b-bit network of a one-head plane shape, for one labelling: one that memorizes it, or none.

The shape: one block, ``d_model = 2``, one head of size 1, a feed-forward of width 0 or
1, residual, argmax readout over two labels, token ids (the networks of
:mod:`~exactmem.search.finders.plane_pool`, whose sampled walk can miss a labelling that some
network memorizes).  Here every *front* (embedding ``E`` in ``G^(2 x V)``, ``Q, K, V`` in
``G^(1 x 2)``, ``O`` in ``G^(2 x 1)``, ``G`` the b-bit grid) is accounted for, pruned by
two facts about the margin, then every *tail* is tried on what is left:

**Lines.**  At the last position the stream is ``sigma x_b + T O`` with ``x_b`` the
embedding of the last token ``b`` and ``T = (sigma / |S|) sum_{p in S} V x_p`` over the
tied maximal keys ``S`` (Kajitsuka & Sato eq. (12), integers as in
:mod:`~exactmem.search.finders.plane_pool`): the sequences ending in ``b`` lie on the line through
``sigma x_b`` with direction ``O``.

**Convexity.**  The margin ``r x + c ReLU(w x + b1 sigma) + d sigma`` (see
:mod:`~exactmem.search.finders.plane_pool`) is convex when ``c >= 0`` and concave when
``c <= 0``.  For ``c >= 0`` the points of label 0 lie in the convex set where it is
negative, so (1) on each line no point of label 1 lies between two of label 0 (or on
one), which depends on ``E, Q, K, V`` only, and (2) no point of label 1 lies in the closed
convex hull of those of label 0; for ``c <= 0`` the same with the labels exchanged.  A
front failing both (1)s or both (2)s has no tail.

**Tails.**  On the fronts left, every tail of the grid: per readout difference ``r``,
hidden unit ``(w, b1)`` and value ``c = r W2``, the bias values ``d = r b2 + beta`` that
put every sequence on its side form an interval test.

**Symmetry.**  Exchanging the two model dimensions (rows of ``E``, entries of ``Q, K, V,
O`` and of the tail) maps networks of the grid to networks computing the same function:
only embeddings whose first row is lexicographically at most the second are walked.

The walk is exhaustive, so "none" means no b-bit integer network of the shape memorizes
the labelling -- on this module's word (it is not a checkable proof: the SAT query with
its LRAT proof decides refutations).  A network found is rebuilt exactly and certified by
the checker before it is reported.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from math import lcm

import numpy as np

from exactmem.checker.proofs.search_reps import grid_values
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec
from exactmem.search.finders.plane_net import Front, Tail, plane_network, tail_values
from exactmem.search.question.shape import Shape

MAX_WORK = 1 << 29  # embeddings x (Q, K, V) choices walked at most
BATCH = 32  # embeddings per numpy step
TAIL_CHUNK = 256  # stream sets per tail test


def work(bits: int, vocab: int) -> int:
    """Embeddings (up to the dimension swap) times ``(Q, K, V)`` choices."""
    g = 2 ** bits
    return (g ** (2 * vocab) // 2 + g ** vocab) * g ** 6


def applies(ds: Dataset, shape: Shape, bits: int | None) -> bool:
    """Can the exhaustive plane walk decide ``ds`` on ``shape`` with ``bits``?"""
    return bits is not None and bits >= 1 and shape.layers == 1 and shape.heads == 1 \
        and shape.d_model == 2 and shape.head_dim == 1 and shape.ff_width <= 1 \
        and shape.residual and shape.readout == "argmax" and ds.inputs == "token-ids" \
        and ds.vocab_size is not None and len({len(s) for s in ds.sequences}) == 1 \
        and all(y in (0, 1) for y in ds.labels) and len(set(ds.labels)) == 2 \
        and work(bits, ds.vocab_size) <= MAX_WORK


@dataclass(frozen=True, slots=True)
class Outcome:
    """A network's front and tail (``None``: no network), and what was walked."""

    front: Front | None
    tail: Tail | None
    embeddings: int  # embeddings walked (up to the dimension swap)
    total: int  # embeddings to walk
    fronts_tested: int  # distinct stream sets whose tails were all tried


class PlaneExhaustive:
    """The exhaustive walk of :mod:`exactmem.search.finders.plane_exhaustive` for one labelling."""

    def __init__(self, ds: Dataset, shape: Shape, bits: int) -> None:
        if not applies(ds, shape, bits):
            raise ValueError("the exhaustive plane walk needs one block, d_model 2, one head "
                             "of size 1, ff_width <= 1, residual, argmax, both labels, token "
                             f"ids and at most {MAX_WORK} embeddings x (Q, K, V) choices")
        assert ds.vocab_size is not None
        self.ds, self.shape, self.bits, self.vocab = ds, shape, bits, ds.vocab_size
        self.g = np.array(grid_values(bits), dtype=np.int64)
        self.vecs = np.array(list(itertools.product(self.g, repeat=2)), dtype=np.int64)
        self.tokens = np.array([tuple(s) for s in ds.sequences], dtype=np.int64)  # (N, n)
        self.n_seq, self.n = self.tokens.shape
        self.sigma = lcm(*range(1, self.n + 1))
        self.y = np.array(ds.labels, dtype=np.int64)
        last = self.tokens[:, -1]
        self.lines = [np.flatnonzero(last == b) for b in np.unique(last)]
        top = 2 ** bits - 1
        self.diffs = np.arange(-top, top + 1, dtype=np.int64)
        units = [(tuple(int(a) for a in w), int(b)) for w in self.vecs for b in self.g
                 if w.any() or b > 0]
        self.units = units if shape.ff_width else []
        # per readout difference r: the nonzero values c = r W2 (a W2 each), the values
        # d = r b2 + beta sorted (a (b2, beta) each)
        self.tail_tables = []
        vecs = [tuple(int(a) for a in v) for v in self.vecs]
        for r in itertools.product((int(a) for a in self.diffs), repeat=2):
            rv = np.array(r, dtype=np.int64)
            cmap, dmap = tail_values(r, vecs, [int(a) for a in self.diffs],
                                     bool(shape.ff_width))
            self.tail_tables.append((rv, np.array(sorted(cmap), dtype=np.int64), cmap,
                                     np.array(sorted(dmap), dtype=np.int64), dmap))

    # the embeddings and (Q, K, V) ---------------------------------------------------
    def embeddings(self) -> np.ndarray:
        """``(M, 2, V)``: every embedding whose first row is at most its second."""
        cols = self.vecs
        idx = np.array(list(itertools.product(range(len(cols)), repeat=self.vocab)))
        emb = cols[idx].transpose(0, 2, 1)  # (M, 2, V)
        rows = [tuple(r) for r in emb.reshape(len(emb), 2, self.vocab).tolist()]
        keep = np.array([a <= b for a, b in rows])
        return emb[keep]

    def t_values(self, emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``T`` of every sequence, one row per embedding of ``emb``, distinct attention
        pattern (tie sets of every sequence) and value row: ``(R, N)`` and, per row, the
        embedding's place in ``emb`` and the choices of ``K``, ``Q`` and ``V``
        (``(R, 4)``)."""
        c = len(self.vecs)
        proj = np.einsum("cm,bmv->bcv", self.vecs, emb)  # (B, c, V): w . x_t per choice
        toks, last = self.tokens, self.tokens[:, -1]
        keys = proj[:, :, toks]  # (B, K, N, n)
        qs = proj[:, :, last]  # (B, Q, N)
        s = qs[:, None, :, :, None] * keys[:, :, None, :, :]  # (B, K, Q, N, n)
        tied = (s == s.max(axis=4, keepdims=True)).reshape(len(emb), c * c, -1)
        packed = np.packbits(tied, axis=2)  # one byte string per attention pattern
        ts, index = [], []
        for b in range(len(emb)):
            _, first = np.unique(packed[b], axis=0, return_index=True)
            pat = tied[b, first].reshape(len(first), self.n_seq, self.n)  # (P, N, n)
            size = pat.sum(axis=2)
            vals = proj[b][:, toks]  # (V, N, n)
            tot = np.einsum("pnk,vnk->pvn", pat.astype(np.int64), vals)
            ts.append((tot * (self.sigma // size)[:, None, :]).reshape(-1, self.n_seq))
            kq = np.repeat(first, c)
            index.append(np.stack([np.full(len(kq), b), kq // c, kq % c,
                                   np.tile(np.arange(c), len(first))], axis=1))
        return np.concatenate(ts), np.concatenate(index)

    def line_sides(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fact (1) for ``t`` ``(R, N)``: may the margin be convex / concave?"""
        big = np.int64(1) << 40
        ok = []
        for inner in (0, 1):  # the label whose points must lie in an interval
            good = np.ones(len(t), dtype=bool)
            for idx in self.lines:
                tt, yy = t[:, idx], self.y[idx]
                lo = np.where(yy == inner, tt, big).min(axis=1)
                hi = np.where(yy == inner, tt, -big).max(axis=1)
                inside = (yy != inner)[None, :] & (tt >= lo[:, None]) & (tt <= hi[:, None])
                good &= ~inside.any(axis=1)
            ok.append(good)
        return ok[0], ok[1]

    def hull_free(self, h: np.ndarray, inner: int) -> np.ndarray:
        """Fact (2) for streams ``h`` ``(F, N, 2)``: no point of the other label lies in
        the closed convex hull of the points labelled ``inner``.  A point ``p`` is outside
        the hull of the ``u_j + p`` exactly when some ``u_i`` has every ``u_j`` strictly
        counter-clockwise of it or on its ray (all within an open half-plane)."""
        hull = h[:, self.y == inner]
        ok = np.ones(len(h), dtype=bool)
        for p in np.flatnonzero(self.y != inner):
            u = hull - h[:, p][:, None, :]
            on = (~u.any(axis=2)).any(axis=1)
            cr = u[:, :, None, 0] * u[:, None, :, 1] - u[:, :, None, 1] * u[:, None, :, 0]
            dot = (u[:, :, None, :] * u[:, None, :, :]).sum(axis=3)
            ext = ((cr > 0) | ((cr == 0) & (dot > 0))).all(axis=2).any(axis=1)
            ok &= ext & ~on
        return ok

    # tails -------------------------------------------------------------------------
    def tail_for(self, h: np.ndarray, signs: np.ndarray) -> list[Tail | None]:
        """Per stream set ``h`` ``(F, N, 2)`` a tail of the grid labelling it (``None``:
        none), trying unit values ``c`` of the allowed signs (``signs`` ``(F, 3)`` for
        ``c < 0``, ``c = 0``, ``c > 0``)."""
        sig, y = self.sigma, self.y
        out: list[Tail | None] = [None] * len(h)
        todo = np.ones(len(h), dtype=bool)
        big = np.int64(1) << 40
        if self.units:
            w = np.array([u[0] for u in self.units], dtype=np.int64)  # (U, 2)
            b1 = np.array([u[1] for u in self.units], dtype=np.int64)
            hid = np.maximum(np.einsum("fnm,um->ufn", h, w) + (b1 * sig)[:, None, None], 0)
        for rv, carr, cmap, dsorted, dmap in self.tail_tables:
            if not todo.any():
                break
            base = h @ rv  # (F, N)
            # the tails without a unit (c = 0), then per unit and nonzero c
            cand: list[tuple[np.ndarray | None, np.ndarray]] = [(None, base[None, None])]
            if self.units and len(carr):
                cand.append((carr, base[None, None] + carr[:, None, None, None] *
                             hid[None]))  # (C, U, F, N)
            for cs, v in cand:
                lo = np.where(y == 1, -v, -big).max(axis=3)  # need sigma d > lo
                hi = np.where(y == 0, -v, big).min(axis=3)  # need sigma d < hi
                need_lo = np.floor_divide(lo, sig) + 1
                need_hi = -np.floor_divide(-hi, sig) - 1
                at = np.searchsorted(dsorted, need_lo)
                fits = (at < len(dsorted)) & \
                    (dsorted[np.minimum(at, len(dsorted) - 1)] <= need_hi)
                allowed = signs[:, 1][None, None] if cs is None else \
                    signs[:, np.sign(cs) + 1].T[:, None, :]
                hit = fits & allowed & todo[None, None]
                for ci, ui, fi in zip(*np.nonzero(hit), strict=True):
                    if not todo[fi]:
                        continue
                    b2, beta = dmap[int(dsorted[at[ci, ui, fi]])]
                    unit = None if cs is None else \
                        (self.units[ui][0], self.units[ui][1], cmap[int(cs[ci])])
                    out[fi] = Tail(unit, b2, tuple(int(a) for a in rv), beta)
                    todo[fi] = False
        return out

    # the walk ------------------------------------------------------------------------
    def search(self, tick: Callable[[int], None] | None = None,
               limit: int | None = None) -> Outcome:
        """Walk every front (up to the dimension swap), or those of the first ``limit``
        embeddings; the first network found.  ``O = 0`` is skipped: its streams are those
        of ``V = 0`` with any other ``O``."""
        embs = self.embeddings()
        total = len(embs)
        if limit is not None:
            embs = embs[:limit]
        nz = [o for o in self.vecs if o.any()]
        tested = 0
        seen: set[bytes] = set()
        for lo in range(0, len(embs), BATCH):
            emb = embs[lo:lo + BATCH]
            t, index = self.t_values(emb)
            convex, concave = self.line_sides(t)
            if not self.shape.ff_width:  # a linear margin: both facts
                convex = concave = convex & concave
            rows = np.flatnonzero(convex | concave)
            hs, fronts, signs = [], [], []
            if len(rows):
                which = index[rows, 0]
                xb = np.transpose(emb, (0, 2, 1))[which][:, self.tokens[:, -1], :]  # (R,N,2)
                tt = t[rows]
                for o in nz:
                    h = self.sigma * xb + tt[:, :, None] * o[None, None, :]
                    cvx = convex[rows] & self.hull_free(h, 0)
                    ccv = concave[rows] & self.hull_free(h, 1)
                    for i in np.flatnonzero(cvx | ccv):
                        key = h[i].tobytes()
                        if key not in seen:
                            seen.add(key)
                            hs.append(h[i])
                            fronts.append((int(rows[i]), o))
                            signs.append((ccv[i], cvx[i] and ccv[i], cvx[i]))
            for at in range(0, len(hs), TAIL_CHUNK):  # bounded memory per tail test
                tails = self.tail_for(np.stack(hs[at:at + TAIL_CHUNK]),
                                      np.array(signs[at:at + TAIL_CHUNK], dtype=bool))
                tested += len(tails)
                for (row, o), tail in zip(fronts[at:at + TAIL_CHUNK], tails, strict=True):
                    if tail is not None:
                        return Outcome(self._front(emb, index[row], o), tail,
                                       lo + int(index[row, 0]) + 1, total, tested)
            if tick is not None:
                tick(len(emb))
        return Outcome(None, None, len(embs), total, tested)

    def _front(self, emb: np.ndarray, index: np.ndarray, o: np.ndarray) -> Front:
        b, k, q, v = (int(a) for a in index)
        return Front(emb[b].copy(), ((self.vecs[q].copy(), self.vecs[k].copy(),
                                      self.vecs[v].copy(), o.copy()),))

    def network(self, outcome: Outcome) -> NetworkSpec:
        """The exact network of a found outcome."""
        assert outcome.front is not None and outcome.tail is not None
        return plane_network(self.shape, self.bits, self.ds, outcome.front, outcome.tail)
