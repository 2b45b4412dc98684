"""Encode "a hardmax Transformer of this shape memorizes this dataset" as a :class:`Problem`.

Semantics are those of :mod:`exactmem.model.spec` (Kajitsuka & Sato eqs. (1)-(4), (12));
what the encoding uses, each step valid for every network of the shape:

* **no positional information**: a token's vector depends only on (the multiset of its
  sequence, the token), so positions holding the same token share one set of unknowns
  and each distinct multiset is encoded once;
* **hardmax ties** (option ``ties``): ``"split"`` (exact eq. (1) semantics) chooses, per
  head and query, the tie set ``T`` among the distinct keys: scores in ``T`` are equal and
  the output is the count-weighted mean of their values; ``"margin"`` admits only a unique
  winning key (ties between different tokens excluded), a restriction, so ``infeasible``
  under ``"margin"`` says nothing about ``"split"``;
* **scale normalisation**: hardmax is invariant under ``W_Q -> c W_Q`` (``c > 0``), so every
  non-maximal score is at most the maximum minus 1 (not merely below it); argmax readouts
  are invariant under ``E_out -> c E_out``, so the label's score beats every other by >= 1;
* **ReLU by case split**: each hidden unit on each distinct input is active
  (``pre >= 0, out = pre``) or not (``pre <= 0, out = 0``);
* **one unknown for W_K^T W_Q and W_O W_V** when ``head_dim >= d_model`` (any ``m x m``
  matrix is then reachable); factor matrices otherwise;
* **fixed attention pattern per branch**: the tie-set choice is a Boolean disjunction, so
  inside one branch the attention output is linear in the values;
* **symmetry breaking**: hidden units are scaled so their bias is ``-1``, ``0`` or ``1`` and
  sorted by it; heads are sorted by their first score-matrix entry.

Intermediate activations get auxiliary unknowns so every atom is at most quadratic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Any, Literal

from exactmem.checker.proofs.search_encode import Reads
from exactmem.checker.proofs.search_encode import reads_of as trusted_reads
from exactmem.errors import SpecError
from exactmem.model.dataset import Dataset
from exactmem.search.encode.formula import (
    Formula,
    Poly,
    Problem,
    conj,
    disj,
    dot,
    eq,
    ge,
    le,
    matvec,
)
from exactmem.search.question.shape import Shape

TieMode = Literal["split", "margin"]
Token = Any  # an int id or a tuple of Fractions


@dataclass(frozen=True, slots=True)
class EncodeOptions:
    """``ties``: tie semantics; ``bound``: optional ``|w| <= bound`` on every weight;
    ``symmetry``: add the symmetry-breaking constraints; ``uniform``: restrict every head
    to zero scores (uniform attention, eq. (39)) -- a restriction used to find witnesses
    fast, never to refute; ``fixed_embed``: for vector inputs, a fixed rational
    ``d_model x dim`` input map (not searched; the change-of-basis normalisation is then
    off); ``fixed``: parameters held at given rational values, ``(name, rows)`` pairs
    (witness transfer, :mod:`exactmem.search.finders.transfer`; only the positions encoding reads
    it)."""

    ties: TieMode = "split"
    bound: Fraction | None = None
    symmetry: bool = True
    uniform: bool = False
    fixed_embed: tuple[tuple[Fraction, ...], ...] | None = None
    fixed: tuple[tuple[str, tuple[tuple[Fraction, ...], ...]], ...] | None = None

    def __post_init__(self) -> None:
        if self.ties not in ("split", "margin"):
            raise SpecError(f"ties must be 'split' or 'margin', found {self.ties!r}")
        if self.bound is not None and self.bound <= 0:
            raise SpecError(f"bound must be positive, found {self.bound}")


def reads_of(ds: Dataset) -> Reads:
    """Group a next-token dataset by multiset, as the trusted CNF encoder does
    (:func:`exactmem.checker.proofs.search_encode.reads_of`: first appearance order, exact
    duplicates collapse, a conflicting label stays and makes the problem infeasible)."""
    if ds.task != "next-token":
        raise SpecError("search: only next-token datasets are supported")
    return trusted_reads(ds.sequences, ds.labels)


def _subsets(k: int, ties: TieMode) -> list[tuple[int, ...]]:
    if ties == "margin":
        return [(i,) for i in range(k)]
    return [c for r in range(1, k + 1) for c in combinations(range(k), r)]


class _Encoder:
    def __init__(self, ds: Dataset, shape: Shape, opts: EncodeOptions) -> None:
        self.ds, self.shape, self.opts = ds, shape, opts
        self.p = Problem()
        self.reads = reads_of(ds)
        self.out_dim = 1 if shape.readout == "scalar" else max(2, ds.num_classes)

    # parameters -------------------------------------------------------------------
    def mat(self, name: str, rows: int, cols: int) -> list[list[Poly]]:
        m = self.p.matrix(name, rows, cols)
        if self.opts.bound is not None:
            for row in m:
                for w in row:
                    self.p.add(le(w, self.opts.bound))
                    self.p.add(ge(w, -self.opts.bound))
        return m

    def embed(self) -> dict[Token, list[Poly]]:
        m = self.shape.d_model
        tokens = sorted({t for ms in self.reads.multisets for t, _ in ms})
        if self.ds.inputs == "token-ids":
            assert self.ds.vocab_size is not None
            table = self.mat("embed", m, self.ds.vocab_size)
            col = tokens[0]
        elif self.opts.fixed_embed is not None:
            table = [[Poly.const(v) for v in row] for row in self.opts.fixed_embed]
            return {t: matvec(table, [Poly.const(x) for x in t]) for t in tokens}
        else:
            assert self.ds.dim is not None
            table = self.mat("embed", m, self.ds.dim)
            col = 0
        if self.opts.symmetry and self.opts.bound is None:
            # a change of basis of the residual stream (every later map absorbs it) sends a
            # non-zero column of the embedding to the first unit vector
            first = [table[i][col] for i in range(m)]
            self.p.add(disj([conj([eq(x) for x in first]),
                             conj([eq(x, int(i == 0)) for i, x in enumerate(first)])]))
        if self.ds.inputs == "token-ids":
            return {t: [table[i][t] for i in range(m)] for t in tokens}
        return {t: matvec(table, [Poly.const(x) for x in t]) for t in tokens}

    # attention ----------------------------------------------------------------------
    def head(self, layer: int, h: int, reps: dict[tuple[int, Token], list[Poly]],
             queries: Sequence[tuple[int, Token]]) -> dict[tuple[int, Token], list[Poly]]:
        sh, m = self.shape, self.shape.d_model
        name = f"att{layer}.{h}."
        tag = f"L{layer}h{h}"
        if sh.full_rank_heads:
            a = self.mat(name + "A", m, m)
            if self.opts.uniform:
                for row in a:
                    for x in row:
                        self.p.add(eq(x))
            b = self.mat(name + "B", m, m)
            first = a[0][0]
            qv = {key: self.p.define(f"{tag}.q{key}", matvec(a, reps[key])) for key in queries}
            kv = {key: reps[key] for key in reps}
            values = {key: self.p.define(f"{tag}.v{key}", matvec(b, reps[key])) for key in reps}
        else:
            wq = self.mat(name + "Q", sh.head_dim, m)
            if self.opts.uniform:
                for row in wq:
                    for x in row:
                        self.p.add(eq(x))
            wk = self.mat(name + "K", sh.head_dim, m)
            wv = self.mat(name + "V", sh.head_dim, m)
            wo = self.mat(name + "O", m, sh.head_dim)
            first = wq[0][0]
            qv = {key: self.p.define(f"{tag}.q{key}", matvec(wq, reps[key])) for key in queries}
            kv = {key: self.p.define(f"{tag}.k{key}", matvec(wk, reps[key])) for key in reps}
            values = {key: self.p.define(f"{tag}.v{key}", matvec(wv, reps[key])) for key in reps}
        self.head_firsts.setdefault(layer, []).append(first)
        out: dict[tuple[int, Token], list[Poly]] = {}
        for key in queries:
            ms_i = key[0]
            groups = self.reads.multisets[ms_i]
            keys = [(ms_i, t) for t, _ in groups]
            scores = [dot(kv[k], qv[key]) for k in keys]
            dim = m if sh.full_rank_heads else sh.head_dim
            if len(keys) == 1:
                mix = values[keys[0]]
                res = mix if sh.full_rank_heads else matvec(wo, mix)
                out[key] = res
                continue
            res_vars = [self.p.real(f"{tag}.o{key}[{r}]") for r in range(m)]
            branches: list[Formula] = []
            tsets = [tuple(range(len(keys)))] if self.opts.uniform else \
                _subsets(len(keys), self.opts.ties)
            for tset in tsets:
                ref = scores[tset[0]]
                conds: list[Formula] = []
                for g in range(len(keys)):
                    if g in tset:
                        if g != tset[0]:
                            conds.append(eq(scores[g], ref))
                    else:
                        conds.append(le(scores[g], ref - 1))
                total = sum(groups[g][1] for g in tset)
                mix = [sum((values[keys[g]][r] * Fraction(groups[g][1], total) for g in tset),
                           Poly()) for r in range(dim)]
                res = mix if sh.full_rank_heads else matvec(wo, mix)
                conds.extend(eq(res_vars[r], res[r]) for r in range(m))
                branches.append(conj(conds))
            self.p.add(disj(branches))
            out[key] = res_vars
        return out

    # feed-forward -------------------------------------------------------------------
    def feedforward(self, layer: int, reps: dict[tuple[int, Token], list[Poly]],
                    last: bool) -> dict[tuple[int, Token], list[Poly]]:
        sh, m, q = self.shape, self.shape.d_model, self.shape.ff_width
        name = f"ff{layer}."
        w1, b1 = self.mat(name + "W1", q, m), self.mat(name + "b1", q, 1)
        w2, b2 = self.mat(name + "W2", m, q), self.mat(name + "b2", m, 1)
        if self.opts.symmetry:
            for j in range(q):
                b = b1[j][0]
                if self.opts.bound is None:  # scaling a unit would break a weight bound
                    self.p.add(disj([eq(b, -1), eq(b, 0), eq(b, 1)]))
                if j:
                    self.p.add(le(b1[j - 1][0], b))
        out = {}
        for key, x in reps.items():
            pre = [dot(w1[j], x) + b1[j][0] for j in range(q)]
            act = []
            for j in range(q):
                r = self.p.real(f"ff{layer}.r{key}[{j}]")
                self.p.add(disj([conj([ge(pre[j]), eq(r, pre[j])]),
                                 conj([le(pre[j]), eq(r, 0)])]))
                act.append(r)
            y = [dot(w2[i], act) + b2[i][0] + (x[i] if sh.residual else 0) for i in range(m)]
            out[key] = y if last else self.p.define(f"ff{layer}.y{key}", y)
        return out

    # whole network ------------------------------------------------------------------
    def encode(self) -> Problem:
        sh = self.shape
        self.head_firsts: dict[int, list[Poly]] = {}
        emb = self.embed()
        reps = {(i, t): emb[t] for i, ms in enumerate(self.reads.multisets) for t, _ in ms}
        read_keys = list(dict.fromkeys((i, t) for i, t, _ in self.reads.targets))
        for layer in range(sh.layers):
            final = layer == sh.layers - 1
            queries = read_keys if final else list(reps)
            heads = [self.head(layer, h, reps, queries) for h in range(sh.heads)]
            att: dict[tuple[int, Token], list[Poly]] = {}
            for key in queries:
                vec = [sum((hd[key][r] for hd in heads), Poly()) for r in range(sh.d_model)]
                if sh.residual:
                    vec = [v + x for v, x in zip(vec, reps[key], strict=True)]
                att[key] = vec if (final and not sh.ff_width) else \
                    self.p.define(f"att{layer}.y{key}", vec)
            reps = self.feedforward(layer, att, final) if sh.ff_width else att
            if self.opts.symmetry and sh.heads > 1:
                firsts = self.head_firsts[layer]
                for lo, hi in zip(firsts, firsts[1:], strict=False):
                    self.p.add(le(lo, hi))
        w = self.mat("out.W", self.out_dim, sh.d_model)
        b = self.mat("out.b", self.out_dim, 1)
        if sh.readout == "argmax" and self.opts.symmetry and self.opts.bound is None:
            # argmax is unchanged when one affine function is subtracted from every class
            # (not without loss of generality under a weight bound: the difference may
            # leave the box)
            zero = Poly()
            w[0] = [zero] * sh.d_model
            b[0] = [zero]
        for i, t, y in self.reads.targets:
            x = reps[(i, t)]
            scores = [dot(w[c], x) + b[c][0] for c in range(self.out_dim)]
            if sh.readout == "scalar":
                self.p.add(eq(scores[0], y))
            else:
                for c in range(self.out_dim):
                    if c != y:
                        self.p.add(ge(scores[y], scores[c] + 1))
        return self.p


def encode(ds: Dataset, shape: Shape, opts: EncodeOptions | None = None) -> Problem:
    """The problem whose solutions are exactly the weights of ``shape`` memorizing ``ds``
    (up to the normalisations listed in the module docstring)."""
    if opts is not None and opts.fixed:
        raise SpecError("the multiset encoding does not hold parameters fixed; "
                        "use the positions encoding")
    return _Encoder(ds, shape, opts or EncodeOptions()).encode()
