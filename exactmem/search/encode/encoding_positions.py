"""A second, independently written encoding of "this shape memorizes this dataset".

It is written from the semantics (Kajitsuka & Sato eq. (1) hardmax, eq. (4) the network,
one-hidden-layer ReLU feed-forward, residual optional, last-position readout) and shares
no code with :mod:`exactmem.search.encode.encoding` except the formula language
(:mod:`exactmem.search.encode.formula`) and the parameter names the witness builder reads.  Its
job is to re-decide every real-valued refutation so that an encoding bug shows up as a
disagreement; it is also a complete decision procedure on its own (``--encoding
positions``).

How it differs from the multiset encoding:

* **sequence by sequence**: every sequence of the dataset gets its own unknowns for each
  position class (nothing is shared between sequences with equal multisets);
* **positions grouped by token**: without positional encoding two positions of one
  sequence that hold the same token have equal vectors at every layer (same input, same
  keys), so one vector per distinct token, with its multiplicity ``c``, stands for them;
* **maximizer flags**: per layer, head, query and key token a Boolean ``w_g`` says "key
  ``g`` attains the maximal score": ``w_g -> s_g >= s_h`` for every ``h`` and
  ``not w_g -> s_h >= s_g + 1`` for some ``h``; for each non-empty set ``T`` of flags that
  are exactly the true ones, the head's output is ``sum_{g in T} c_g v_g / sum_{g in T} c_g``
  (weight ``1/|I_j|`` on every tied position, eq. (1)).  The gap of 1 is the scale
  normalisation ``W_Q -> c W_Q`` (``c > 0``) of every head; with a weight bound it is off and
  the gap is strict;
* **ReLU** by one Boolean per unit and input (active: ``pre >= 0, r = pre``; else
  ``pre <= 0, r = 0``);
* **readout**: argmax with a margin of 1 (scale normalisation of ``E_out``; strict under a
  bound) and class 0's row zero (subtracting one affine score from all classes keeps the
  argmax), scalar readout equal to the label;
* **normalisations** (real weights, no bound): each hidden unit's bias is -1, 0 or 1
  (``ReLU(cz) = c ReLU(z)``), one column of the input map is 0 or ``e_1`` (a change of basis
  of the residual stream).  No order is imposed on neurons or heads.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations
from typing import Any

from exactmem.errors import SpecError
from exactmem.model.dataset import Dataset
from exactmem.search.encode.encoding import EncodeOptions
from exactmem.search.encode.formula import (
    And,
    Atom,
    Formula,
    Not,
    Or,
    Poly,
    Problem,
)
from exactmem.search.question.shape import Shape

Vec = list[Poly]


def _zero(p: Poly) -> Formula:
    return Atom(p, "==")


def _nonneg(p: Poly) -> Formula:
    return Atom(p, ">=")


def _pos(p: Poly) -> Formula:
    """``p > 0`` as ``not (-p >= 0)``."""
    return Not(Atom(-p, ">="))


def _implies(a: Formula, b: Formula) -> Formula:
    return Or((Not(a), b))


def _lin(rows: list[list[Poly]], x: Vec) -> Vec:
    out = []
    for row in rows:
        acc = Poly()
        for w, v in zip(row, x, strict=True):
            acc = acc + w * v
        out.append(acc)
    return out


class _Positions:
    def __init__(self, ds: Dataset, shape: Shape, opts: EncodeOptions) -> None:
        if ds.task != "next-token":
            raise SpecError("search: only next-token datasets are supported")
        self.ds, self.sh, self.opts = ds, shape, opts
        self.p = Problem()
        # scale and basis normalisations hold for real weights, not inside a weight box
        self.normalise = opts.bound is None and opts.symmetry
        # parameters held at given values (witness transfer): constants, not normalised
        self.fixed = {name: [[Poly.const(c) for c in row] for row in rows]
                      for name, rows in (opts.fixed or ())}
        # a gap of 1 between compared values is a choice of scale: with a fixed front the
        # scale is fixed too (its score differences may be below 1), so comparisons are strict
        self.gap: int = 1 if self.normalise and not self.fixed else 0  # 0: strict

    def weights(self, name: str, rows: int, cols: int) -> list[list[Poly]]:
        if name in self.fixed:
            const = self.fixed[name]
            if len(const) != rows or any(len(r) != cols for r in const):
                raise SpecError(f"fixed parameter {name}: expected {rows} x {cols}")
            self.p.params[name] = const
            return const
        mat = self.p.matrix(name, rows, cols)
        if self.opts.bound is not None:
            b = self.opts.bound
            for row in mat:
                for w in row:
                    self.p.add(_nonneg(Poly.const(b) - w))
                    self.p.add(_nonneg(w + b))
        return mat

    def aux(self, name: str, exprs: Vec) -> Vec:
        out = []
        for k, e in enumerate(exprs):
            if e.degree() <= 1:  # affine expressions are kept as they are
                out.append(e)
                continue
            v = self.p.real(f"{name}[{k}]")
            self.p.add(_zero(v - e))
            out.append(v)
        return out

    def beats(self, hi: Poly, lo: Poly) -> Formula:
        """``hi`` above ``lo`` by the normalised gap (or strictly; exactly when both are
        fixed numbers)."""
        if (hi - lo).is_const():
            return _pos(hi - lo)
        return _nonneg(hi - lo - self.gap) if self.gap else _pos(hi - lo)

    # the input map ---------------------------------------------------------------
    def inputs(self) -> dict[Any, Vec]:
        m = self.sh.d_model
        toks = {t for seq in self.ds.sequences for t in seq}
        if self.ds.inputs == "token-ids":
            assert self.ds.vocab_size is not None
            table = self.weights("embed", m, self.ds.vocab_size)
            self.basis(table, min(toks))
            return {t: [table[r][t] for r in range(m)] for t in toks}
        if self.opts.fixed_embed is not None:
            fixed = [[Poly.const(c) for c in row] for row in self.opts.fixed_embed]
            return {t: _lin(fixed, [Poly.const(c) for c in t]) for t in toks}
        assert self.ds.dim is not None
        table = self.weights("embed", m, self.ds.dim)
        self.basis(table, 0)
        return {t: _lin(table, [Poly.const(c) for c in t]) for t in toks}

    def basis(self, table: list[list[Poly]], col: int) -> None:
        """An invertible change of basis ``M`` of the residual stream is absorbed by every
        map (``E -> M E``, ``A -> M^-T A M^-1``, ``B -> M B M^-1``, ``W1 -> W1 M^-1``,
        ``W2 -> M W2``, ``E_out -> E_out M^-1``), so one column of the input map is zero or
        the first unit vector."""
        if not self.normalise or "embed" in self.fixed:
            return
        column = [table[r][col] for r in range(len(table))]
        self.p.add(Or((And(tuple(_zero(x) for x in column)),
                       And(tuple(_zero(x - int(r == 0)) for r, x in enumerate(column))))))

    # one attention layer -------------------------------------------------------------
    def attention(self, layer: int, seqs: list[dict[Any, Vec]], counts: list[dict[Any, int]],
                  queries: list[list[Any]]) -> list[dict[Any, Vec]]:
        sh, m = self.sh, self.sh.d_model
        heads: list[list[list[list[Poly]]]] = []
        for h in range(sh.heads):
            pre = f"att{layer}.{h}."
            if sh.head_dim >= m:  # W_K^T W_Q and W_O W_V are arbitrary m x m matrices
                a, b = self.weights(pre + "A", m, m), self.weights(pre + "B", m, m)
                if self.opts.uniform:
                    for row in a:
                        for w in row:
                            self.p.add(_zero(w))
                heads.append([a, b])
            else:
                s = sh.head_dim
                wq, wk = self.weights(pre + "Q", s, m), self.weights(pre + "K", s, m)
                wv, wo = self.weights(pre + "V", s, m), self.weights(pre + "O", m, s)
                if self.opts.uniform:
                    for row in wq:
                        for w in row:
                            self.p.add(_zero(w))
                heads.append([wq, wk, wv, wo])
        out: list[dict[Any, Vec]] = []
        for i, reps in enumerate(seqs):
            keys = sorted(reps, key=repr)
            new: dict[Any, Vec] = {}
            for qt in queries[i]:
                total = [Poly() for _ in range(m)]
                for h, mats in enumerate(heads):
                    tag = f"L{layer}h{h}s{i}q{qt!r}"
                    if len(mats) == 2:  # full rank: A = W_K^T W_Q, B = W_O W_V
                        qv = self.aux(tag + ".Aq", _lin(mats[0], reps[qt]))
                        scores = [sum((x * y for x, y in zip(reps[g], qv, strict=True)), Poly())
                                  for g in keys]
                        vals = [_lin(mats[1], reps[g]) for g in keys]
                    else:
                        wq, wk, wv, wo = mats
                        qv = self.aux(tag + ".q", _lin(wq, reps[qt]))
                        kvs = [self.aux(tag + f".k{g!r}", _lin(wk, reps[g])) for g in keys]
                        scores = [sum((x * y for x, y in zip(k, qv, strict=True)), Poly())
                                  for k in kvs]
                        vals = [_lin(wo, self.aux(tag + f".v{g!r}", _lin(wv, reps[g])))
                                for g in keys]
                    head_out = self.select(tag, scores, vals, [counts[i][g] for g in keys])
                    total = [t + o for t, o in zip(total, head_out, strict=True)]
                if sh.residual:
                    total = [t + x for t, x in zip(total, reps[qt], strict=True)]
                new[qt] = self.aux(f"att{layer}.s{i}.y{qt!r}", total)
            out.append(new)
        return out

    def select(self, tag: str, scores: list[Poly], vals: list[Vec], mult: list[int]) -> Vec:
        """Hardmax over key tokens with multiplicities ``mult`` (eq. (1), ties averaged)."""
        k, m = len(scores), len(vals[0])
        if k == 1:
            return vals[0]
        s = scores
        res = [self.p.real(f"{tag}.o[{r}]") for r in range(m)]
        branches: list[Formula] = []
        for size in range(1, k + 1):
            if self.opts.ties == "margin" and size > 1:
                break
            for tset in combinations(range(k), size):
                top = s[tset[0]]
                conds: list[Formula] = [_zero(s[g] - top) for g in tset[1:]]
                conds += [self.beats(top, s[h]) for h in range(k) if h not in tset]
                weight = sum(mult[g] for g in tset)
                mean = [sum((vals[g][r] * Fraction(mult[g], weight) for g in tset), Poly())
                        for r in range(m)]
                conds += [_zero(res[r] - mean[r]) for r in range(m)]
                branches.append(And(tuple(conds)))
        self.p.add(Or(tuple(branches)))
        return res

    # one feed-forward layer ----------------------------------------------------------
    def feedforward(self, layer: int, seqs: list[dict[Any, Vec]]) -> list[dict[Any, Vec]]:
        sh, m, q = self.sh, self.sh.d_model, self.sh.ff_width
        w1, b1 = self.weights(f"ff{layer}.W1", q, m), self.weights(f"ff{layer}.b1", q, 1)
        w2, b2 = self.weights(f"ff{layer}.W2", m, q), self.weights(f"ff{layer}.b2", m, 1)
        if self.normalise and f"ff{layer}.b1" not in self.fixed:
            # ReLU(c z) = c ReLU(z), c > 0: each hidden bias is -1, 0 or 1
            for j in range(q):
                self.p.add(Or(tuple(_zero(b1[j][0] - v) for v in (-1, 0, 1))))
        out: list[dict[Any, Vec]] = []
        for i, reps in enumerate(seqs):
            new: dict[Any, Vec] = {}
            for t, x in reps.items():
                hidden = []
                for j, pre in enumerate(_lin(w1, x)):
                    pre = pre + b1[j][0]
                    on = self.p.boolean(f"ff{layer}.s{i}.{t!r}.on{j}")
                    r = self.p.real(f"ff{layer}.s{i}.{t!r}.r{j}")
                    self.p.add(_implies(on, And((_nonneg(pre), _zero(r - pre)))))
                    self.p.add(Or((on, And((_nonneg(-pre), _zero(r))))))
                    hidden.append(r)
                y = [v + b2[r][0] for r, v in enumerate(_lin(w2, hidden))]
                if sh.residual:
                    y = [a + b for a, b in zip(y, x, strict=True)]
                new[t] = self.aux(f"ff{layer}.s{i}.y{t!r}", y)
            out.append(new)
        return out

    # the network and the labels -----------------------------------------------------
    def encode(self) -> Problem:
        sh, ds = self.sh, self.ds
        seqs_in, seqs = self.streams(last_ff=True)
        out_dim = 1 if sh.readout == "scalar" else max(2, ds.num_classes)
        w, b = self.weights("out.W", out_dim, sh.d_model), self.weights("out.b", out_dim, 1)
        if sh.readout == "argmax" and self.normalise:
            # argmax is unchanged when class 0's affine score is subtracted from every class
            for x in (*w[0], b[0][0]):
                self.p.add(_zero(x))
        for (seq, y), reps in zip(seqs_in, seqs, strict=True):
            scores = [v + b[c][0] for c, v in enumerate(_lin(w, reps[seq[-1]]))]
            if sh.readout == "scalar":
                self.p.add(_zero(scores[0] - y))
            else:
                for other in range(out_dim):
                    if other != y:
                        self.p.add(self.beats(scores[y], scores[other]))
        return self.p

    def encode_thresholds(self) -> Problem:
        """The front as in :meth:`encode`; the tail (last feed-forward layer and readout)
        replaced by its exact description for a one-dimensional stream and two labels
        (:func:`~exactmem.search.finders.transfer.tail_separates`): ``K = ff_width + 1`` ordered
        thresholds ``t_1 <= ... <= t_K`` and a first label ``s``, and the label of a
        sequence is ``s`` plus the number of thresholds below its stream, mod 2."""
        seqs_in, seqs = self.streams(last_ff=False)
        k = self.sh.ff_width + 1
        t = [self.p.real(f"tail.t{j}") for j in range(k)]
        for lo, hi in zip(t, t[1:], strict=False):
            self.p.add(_nonneg(hi - lo))
        first = self.p.boolean("tail.first_label")
        for (seq, y), reps in zip(seqs_in, seqs, strict=True):
            v = reps[seq[-1]][0]
            cases: list[Formula] = []
            for j in range(k + 1):  # j thresholds lie below the stream
                conds: list[Formula] = []
                if j > 0:
                    conds.append(_pos(v - t[j - 1]))
                if j < k:
                    conds.append(_nonneg(t[j] - v))
                conds.append(first if (y - j) % 2 else Not(first))
                cases.append(And(tuple(conds)))
            self.p.add(Or(tuple(cases)))
        return self.p

    def streams(self, last_ff: bool) -> tuple[list[tuple[Any, int]], list[dict[Any, Vec]]]:
        """The distinct (sequence, label) pairs and, for each, the vector of every token
        after the last block (``last_ff=False``: before the last feed-forward layer)."""
        sh, ds = self.sh, self.ds
        first = self.inputs()
        seqs_in = list(dict.fromkeys(zip(ds.sequences, ds.labels, strict=True)))
        counts: list[dict[Any, int]] = []
        for seq, _ in seqs_in:
            c: dict[Any, int] = {}
            for t in seq:
                c[t] = c.get(t, 0) + 1
            counts.append(c)
        seqs = [{t: first[t] for t in c} for c in counts]
        for layer in range(sh.layers):
            last = layer == sh.layers - 1
            queries = [[seq[-1]] if last else sorted(c, key=repr)
                       for (seq, _), c in zip(seqs_in, counts, strict=True)]
            att = self.attention(layer, seqs, counts, queries)
            if sh.ff_width and (last_ff or not last):
                att = self.feedforward(layer, att)
            # keys of the next layer: every token of the sequence (queries were all of them)
            seqs = att
        return seqs_in, seqs

def encode_positions(ds: Dataset, shape: Shape, opts: EncodeOptions | None = None) -> Problem:
    """The problem whose solutions are the weights of ``shape`` memorizing ``ds`` (up to
    the scale normalisations of the module docstring); parameters are named like
    :mod:`exactmem.search.encode.encoding`'s, so
    :func:`~exactmem.search.encode.witness.witness_spec` reads a model back."""
    return _Positions(ds, shape, opts or EncodeOptions()).encode()


def thresholds_apply(ds: Dataset, shape: Shape, opts: EncodeOptions) -> bool:
    """Is the threshold description of the tail exact here?  A one-dimensional stream,
    residual connections (the readout sees the stream itself), two labels, an argmax
    readout, no weight bound (the tail's weights are free)."""
    return (shape.d_model == 1 and shape.residual and shape.readout == "argmax"
            and opts.bound is None and all(y in (0, 1) for y in ds.labels))


def encode_thresholds(ds: Dataset, shape: Shape, opts: EncodeOptions | None = None) -> Problem:
    """The front of :func:`encode_positions` with the tail described by thresholds: its
    models give the front's weights only (the tail is then fitted, see
    :mod:`exactmem.search.finders.transfer`), and it is unsatisfiable exactly when
    :func:`encode_positions` is (where :func:`thresholds_apply`)."""
    opts = opts or EncodeOptions()
    if not thresholds_apply(ds, shape, opts):
        raise SpecError("the threshold tail needs d_model 1, residual, an argmax readout, "
                        "two labels and no weight bound")
    return _Positions(ds, shape, opts).encode_thresholds()
