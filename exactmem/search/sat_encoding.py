"""Bit-bounded networks to CNF: "a shape with b-bit integer weights memorizes the dataset".

**The grid.**  Every weight (embedding, Q/K/V/O of every head, both feed-forward matrices
and biases, readout matrix and bias) is an integer in ``[-2^(b-1), 2^(b-1))`` (b-bit two's
complement) times its layer's scale, and the scale of every layer is fixed to ``2^0``: the
weights are b-bit integers.  A weight then costs exactly b bits, the quantity in the
counting bound ``P * b >= N`` and in the bit complexity of Vardi et al. and Kajitsuka &
Sato (bits per weight; one shared power of two per layer adds O(1) bits per layer).  For
``W_Q``, ``W_K`` (hardmax is invariant under positive score scaling) and the argmax readout
(weight and bias scaled together) any per-layer power of two is equivalent to ``2^0``;
elsewhere other scales are not searched.

**Exact semantics in integers.**  The stream is carried as integers ``X = sigma * x``
(``sigma > 0`` a known constant): ``sigma_0`` = common denominator of the input vectors
(1 for token ids); attention layer ``l`` multiplies it by ``M_l`` = the lcm of every
possible tie-set size.  A head's output at a query is ``sum_{g in T} c_g v_g / sum_{g in T}
c_g`` over the tied maximizing keys ``T`` (``c_g`` = multiplicity of key token g: weight
``1/|I_j|`` on every tied position, Kajitsuka & Sato eq. (1)); times ``M_l`` it is the
integer combination ``sum (c_g M_l / |T|) W_O W_V X_g``.  Scores ``(W_K X_k).(W_Q X_q)`` are
``sigma^2`` times the true ones, so ties and order are exact.  Biases of a layer working at
scale ``sigma`` enter as ``sigma * b``; ReLU and the readout comparisons commute with
``sigma > 0``.  Tie sets: ``T`` is selected exactly when its keys are the maxima
(``s_g >= s_h`` for all h) and the other keys are not.

What is encoded (no normalisation; the symmetry breaking of
:meth:`_BitEncoder.break_symmetries` keeps a copy of every network's function, so UNSAT is
about every b-bit integer network of the shape): token vectors depend only on (multiset,
token) -- exact for networks without positional encoding; the readout at each (multiset,
last token) has its label as unique argmax (``score_y > score_c``) or equals
``sigma_L * y`` (scalar).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from math import lcm

from exactmem.arith import ScaledMatrix
from exactmem.errors import SpecError
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec
from exactmem.search import canonical
from exactmem.search.bitblast import Circuit, Int
from exactmem.search.encoding import Token, _subsets, output_dim, reads_of
from exactmem.search.shape import Shape, spec_of


@dataclass(slots=True)
class Mix:
    """A stream vector at one query, kept as a sum so that linear maps can be pushed into
    it: ``base`` (residual and biases), per head the output of the selected tie set
    (options ``(selector, [(k, v)])`` meaning ``sum k * v`` over the set's value vectors
    ``v``; exactly one selector holds), and per feed-forward layer ``W2 act``."""

    base: list[Int]
    heads: list[list[tuple[int, list[tuple[int, list[Int]]]]]]
    ff: list[tuple[list[list[Int]], list[Int]]] = field(default_factory=list)  # (W2, act)


@dataclass(slots=True)
class BitProblem:
    circuit: Circuit
    bits: int
    weights: dict[str, list[list[Int]]] = field(default_factory=dict)

    @property
    def clauses(self) -> list[list[int]]:
        return self.circuit.clauses


def _input_scale(ds: Dataset) -> int:
    if ds.inputs == "token-ids":
        return 1
    return lcm(*(Fraction(c).denominator for seq in ds.sequences for tok in seq for c in tok))


class _BitEncoder:
    def __init__(self, ds: Dataset, shape: Shape, bits: int,
                 fixed_embed: list[list[int]] | None = None, symmetry: bool = True,
                 segments: bool = True) -> None:
        if bits < 1:
            raise SpecError(f"--bits must be >= 1, found {bits}")
        self.ds, self.shape, self.c = ds, shape, Circuit()
        self.p = BitProblem(self.c, bits)
        self.fixed_embed = fixed_embed
        self.symmetry = symmetry
        self.with_segments = segments
        self.reads = reads_of(ds)
        self.tail_input: dict[tuple[int, Token], Mix] = {}  # set by front()

    def mat(self, name: str, rows: int, cols: int) -> list[list[Int]]:
        m = [[self.c.fresh(self.p.bits) for _ in range(cols)] for _ in range(rows)]
        self.p.weights[name] = m
        return m

    def matvec(self, w: list[list[Int]], x: list[Int]) -> list[Int]:
        return [self.c.dot(row, x) for row in w]

    def embed(self, scale: int) -> dict[Token, list[Int]]:
        m, c = self.shape.d_model, self.c
        tokens = sorted({t for ms in self.reads.multisets for t, _ in ms})
        if self.ds.inputs == "token-ids":
            assert self.ds.vocab_size is not None
            table = self.mat("embed", m, self.ds.vocab_size)
            return {t: [table[i][t] for i in range(m)] for t in tokens}
        assert self.ds.dim is not None
        if self.fixed_embed is not None:  # a given integer map, outside the searched weights
            table = [[c.const(v) for v in row] for row in self.fixed_embed]
        else:
            table = self.mat("embed", m, self.ds.dim)
        out = {}
        for t in tokens:
            ints = [int(Fraction(v) * scale) for v in t]
            out[t] = [c.sum([c.mul_const(table[i][j], ints[j]) for j in range(len(ints))])
                      for i in range(m)]
        return out

    def tie_scale(self) -> int:
        """lcm of the sizes of the tie sets with two or more key tokens: a set ``T`` weighs
        key token ``g`` by ``c_g M / |T|``, an integer when ``|T|`` divides ``M``, and a
        single winner by ``M``."""
        sizes = [sum(ms[g][1] for g in tset) for ms in self.reads.multisets
                 for tset in _subsets(len(ms), "split") if len(tset) > 1]
        return lcm(*sizes) if sizes else 1

    def attention(self, layer: int, reps: dict[tuple[int, Token], list[Int]],
                  queries: list[tuple[int, Token]], big_m: int) -> dict[tuple[int, Token], Mix]:
        """Each query's attention output (plus the residual) as a :class:`Mix`."""
        sh, c, m, s = self.shape, self.c, self.shape.d_model, self.shape.head_dim
        out: dict[tuple[int, Token], Mix] = {
            q: Mix([c.mul_const(x, big_m) for x in reps[q]] if sh.residual else
                   [c.const(0)] * m, []) for q in queries}
        for h in range(sh.heads):
            p = f"att{layer}.{h}."
            wq, wk = self.mat(p + "Q", s, m), self.mat(p + "K", s, m)
            wv, wo = self.mat(p + "V", s, m), self.mat(p + "O", m, s)
            keys = {k: self.matvec(wk, x) for k, x in reps.items()}
            vals = {k: self.matvec(wo, self.matvec(wv, x)) for k, x in reps.items()}
            for key in queries:
                i = key[0]
                groups = self.reads.multisets[i]
                ks = [(i, t) for t, _ in groups]
                qv = self.matvec(wq, reps[key])
                scores = [c.dot(keys[k], qv) for k in ks]
                is_max = [c.and_([-c.less(scores[g], scores[o]) for o in range(len(ks))
                                  if o != g]) for g in range(len(ks))]
                options = []
                for tset in _subsets(len(ks), "split"):
                    sel = c.and_([is_max[g] if g in tset else -is_max[g]
                                  for g in range(len(ks))])
                    tot = sum(groups[g][1] for g in tset)
                    options.append((sel, [(groups[g][1] * big_m // tot, vals[ks[g]])
                                          for g in tset]))
                out[key].heads.append(options)
        return out

    def row_dot(self, row: list[Int], x: Mix) -> Int:
        """``row . x`` with the row pushed through the attention mixtures: ``row . v`` is
        formed once per value vector ``v`` (shared by every query), each query then only
        adds constant multiples of it (exact: the map is linear)."""
        c = self.c
        parts = [c.dot(row, x.base)]
        for w2, act in x.ff:  # row . (W2 act) = (row W2) . act, row W2 formed once
            parts.append(c.dot([c.dot(row, [r[j] for r in w2]) for j in range(len(act))],
                               act))
        for options in x.heads:
            sums = [(sel, c.sum([c.mul_const(c.dot(row, v), k) for k, v in terms]))
                    for sel, terms in options]
            parts.append(sums[0][1] if len(sums) == 1 else c.select(sums))
        return c.sum(parts)

    def materialize(self, x: Mix) -> list[Int]:
        c, m = self.c, len(x.base)
        unit = [[c.const(int(i == j)) for j in range(m)] for i in range(m)]
        return [self.row_dot(unit[i], x) for i in range(m)]

    def feedforward(self, layer: int, reps: dict[tuple[int, Token], Mix],
                    scale: int) -> dict[tuple[int, Token], Mix]:
        sh, c, m, q = self.shape, self.c, self.shape.d_model, self.shape.ff_width
        p = f"ff{layer}."
        w1, b1 = self.mat(p + "W1", q, m), self.mat(p + "b1", q, 1)
        w2, b2 = self.mat(p + "W2", m, q), self.mat(p + "b2", m, 1)
        out = {}
        for key, x in reps.items():
            act = [c.relu(c.add(self.row_dot(w1[j], x), c.mul_const(b1[j][0], scale)))
                   for j in range(q)]
            bias = [c.mul_const(b2[i][0], scale) for i in range(m)]
            out[key] = Mix([c.add(a, b) for a, b in zip(bias, x.base, strict=True)], x.heads,
                           [*x.ff, (w2, act)]) if sh.residual else Mix(bias, [], [(w2, act)])
        return out

    def break_symmetries(self) -> None:
        """Lex-leader constraints for permutations that leave the network's function and
        the grid unchanged, so a sorted copy of every network satisfies them: the hidden
        units of a feed-forward layer (row ``j`` of ``W1``, ``b1_j``, column ``j`` of
        ``W2``), the dimensions inside a head (row ``r`` of ``W_Q``, ``W_K``, ``W_V``,
        column ``r`` of ``W_O``: scores and outputs are sums over ``r``), and the heads of a
        layer (all their weights, after their dimensions are sorted)."""
        w, sh, c = self.p.weights, self.shape, self.c

        def bits(ints: list[Int]) -> list[int]:
            return [b for x in ints for b in reversed(x.bits)]

        def chain(keys: list[list[int]]) -> None:
            for a, b in zip(keys, keys[1:], strict=False):
                c.lex_leq(a, b)

        for layer in range(sh.layers):
            heads = []
            for h in range(sh.heads):
                q, k, v, o = (w[f"att{layer}.{h}.{x}"] for x in "QKVO")
                chain([bits(q[r] + k[r] + v[r] + [row[r] for row in o])
                       for r in range(sh.head_dim)])
                heads.append(bits([x for m in (q, k, v, o) for row in m for x in row]))
            chain(heads)
            if sh.ff_width:
                w1, b1, w2 = (w[f"ff{layer}.{x}"] for x in ("W1", "b1", "W2"))
                chain([bits(w1[j] + b1[j] + [row[j] for row in w2])
                       for j in range(sh.ff_width)])
        if canonical.applies(sh.d_model, sh.head_dim, self.p.bits):
            self.keep_representatives()

    def keep_representatives(self) -> None:
        """``d_model = head_dim = 1``: every head and hidden unit is the representative of
        its function (:mod:`~exactmem.search.canonical`); each other grid point of its
        weights is excluded by one clause.  Sorting permutes representatives, so a sorted
        copy built from representatives computes the function of every network."""
        w, sh, b = self.p.weights, self.shape, self.p.bits
        heads = canonical.excluded(b, 4, canonical.head_key)
        units = canonical.excluded(b, 3, canonical.unit_key)
        for layer in range(sh.layers):
            for h in range(sh.heads):
                ints = [w[f"att{layer}.{h}.{x}"][0][0] for x in "QKVO"]
                for vals in heads:
                    self.c.exclude(ints, vals)
            for j in range(sh.ff_width):
                p = f"ff{layer}."
                ints = [w[p + "W1"][j][0], w[p + "b1"][j][0], w[p + "W2"][0][j]]
                for vals in units:
                    self.c.exclude(ints, vals)

    def segments(self, streams: dict[tuple[int, Token], Int],
                 labels: dict[tuple[int, Token], int]) -> None:
        """Redundant clauses for a scalar tail (``d_model = 1``, argmax over two labels):
        the labels change at most ``ff_width + 1`` times along the sorted streams that
        enter the tail (:func:`tail_segments`).  Each read position gets a segment
        ``c in [0, K]``, ``K = ff_width + 1``, in order encoding (``u_k = [c >= k]``):
        ``s_i <= s_j`` forces ``c_i <= c_j`` (so equal streams share a segment), and the
        label is the first segment's label ``y0`` flipped on every odd segment.
        ``labels``: per read position the literal "label 1" (``true``/``-true`` when
        fixed)."""
        c, k_max = self.c, self.shape.ff_width + 1
        keys = list(streams)
        u = {key: [c.true] + [c.var() for _ in range(k_max)] + [-c.true] for key in keys}
        y0 = c.var()
        for key in keys:
            lab = labels[key]
            for k in range(1, k_max):
                c.clause([-u[key][k + 1], u[key][k]])
            for k in range(k_max + 1):  # in segment k the label is y0 xor (k odd)
                same = -y0 if k % 2 else y0
                c.clause([-u[key][k], u[key][k + 1], -lab, same])
                c.clause([-u[key][k], u[key][k + 1], lab, -same])
        for a in keys:
            for b in keys:
                if a != b:
                    above = c.less(streams[b], streams[a])  # not s_a <= s_b
                    for k in range(1, k_max + 1):
                        c.clause([above, -u[a][k], u[b][k]])

    def front(self) -> tuple[dict[tuple[int, Token], Mix], int]:
        """The stream at every read position (as a :class:`Mix`) and its scale."""
        sh = self.shape
        scale = _input_scale(self.ds)
        emb = self.embed(scale)
        reps = {(i, t): emb[t] for i, ms in enumerate(self.reads.multisets) for t, _ in ms}
        read_keys = list(dict.fromkeys((i, t) for i, t, _ in self.reads.targets))
        big_m = self.tie_scale()
        mixes: dict[tuple[int, Token], Mix] = {}
        for layer in range(sh.layers):
            if layer:
                reps = {key: self.materialize(x) for key, x in mixes.items()}
            queries = read_keys if layer == sh.layers - 1 else list(reps)
            mixes = self.attention(layer, reps, queries, big_m)
            scale *= big_m
            if layer == sh.layers - 1:
                self.tail_input = mixes
            if sh.ff_width:
                mixes = self.feedforward(layer, mixes, scale)
        return mixes, scale

    def label_literals(self) -> dict[tuple[int, Token], int]:
        """Two labels, argmax readout: per read position ``(i, t)`` a fresh literal ``l``
        with ``l -> margin > 0`` and ``-l -> margin < 0``, ``margin = score_1 - score_0``
        (label 1 exactly when ``l`` holds, each a unique argmax: the clauses of
        :meth:`encode` for that label)."""
        c, sh = self.c, self.shape
        mixes, scale = self.front()
        w, b = self.mat("out.W", 2, sh.d_model), self.mat("out.b", 2, 1)
        row = [c.add(p, q, negate_y=True) for p, q in zip(w[1], w[0], strict=True)]
        bias = c.add(b[1][0], b[0][0], negate_y=True)
        lits = {}
        for key, x in mixes.items():
            margin = c.add(self.row_dot(row, x), c.mul_const(bias, scale))
            lit = lits[key] = c.var()
            c.clauses.append([-lit, c.less(c.const(0), margin)])
            c.clauses.append([lit, c.less(margin, c.const(0))])
        if self.symmetry:
            self.break_symmetries()
        return lits

    def encode(self) -> BitProblem:
        sh, c = self.shape, self.c
        mixes, scale = self.front()
        k = output_dim(self.ds, sh)
        w, b = self.mat("out.W", k, sh.d_model), self.mat("out.b", k, 1)
        diffs: dict[tuple[int, int], tuple[list[Int], Int]] = {}
        for i, t, y in self.reads.targets:
            x = mixes[(i, t)]
            if sh.readout == "scalar":
                score = c.add(self.row_dot(w[0], x), c.mul_const(b[0][0], scale))
                target = Fraction(y) * scale
                if target.denominator != 1:
                    c.clauses.append([-c.true])  # cannot be hit by integers: unsatisfiable
                    continue
                c.clauses.append([c.is_zero(c.add(score, c.const(int(target)),
                                                  negate_y=True))])
                continue
            for r in range(k):
                if r == y:
                    continue
                # score_y - score_r = (w_y - w_r) . x + (b_y - b_r) * scale: the difference
                # row is formed once per pair of classes and shared by every sequence
                if (y, r) not in diffs:
                    diffs[(y, r)] = ([c.add(p, q, negate_y=True) for p, q in
                                      zip(w[y], w[r], strict=True)],
                                     c.add(b[y][0], b[r][0], negate_y=True))
                row, bias = diffs[(y, r)]
                margin = c.add(self.row_dot(row, x), c.mul_const(bias, scale))
                c.clauses.append([c.less(c.const(0), margin)])
        if self.with_segments and tail_segments(self.ds, sh):
            self.segments({key: self.materialize(x)[0] for key, x in self.tail_input.items()},
                          {(i, t): c.true if y == 1 else -c.true
                           for i, t, y in self.reads.targets})
        if self.symmetry:
            self.break_symmetries()
        return self.p


def tail_segments(ds: Dataset, shape: Shape) -> bool:
    """Do the segment clauses (:meth:`_BitEncoder.segments`) apply?  With ``d_model = 1``
    the tail (last feed-forward layer, residual or not, and the readout) maps the stream
    ``x`` to the margin ``score_1 - score_0``, a continuous piecewise-linear function of
    ``x`` with at most ``ff_width`` kinks, so its sign changes at most ``ff_width + 1``
    times along the sorted streams and equal streams get equal labels: every network's
    model extends to the segment variables, which makes the clauses redundant."""
    return shape.d_model == 1 and shape.readout == "argmax" and output_dim(ds, shape) == 2


def encode_bits(ds: Dataset, shape: Shape, bits: int,
                fixed_embed: list[list[int]] | None = None, symmetry: bool = True,
                segments: bool = True) -> BitProblem:
    """The CNF whose models are the b-bit integer networks of ``shape`` that memorize
    ``ds`` (weights read off the weight literals) -- all of them with ``symmetry=False``;
    with it, those whose units, head dimensions and heads are in lexicographic order and,
    for ``d_model = head_dim = 1``, built from representative heads and units (every
    network has such a copy computing the same function, so satisfiability is
    unchanged).  ``segments``: the redundant segment clauses where :func:`tail_segments`
    applies (every model extends to them).  ``fixed_embed``: for vector inputs, a fixed
    integer ``d_model x dim`` input map (not searched, not counted)."""
    return _BitEncoder(ds, shape, bits, fixed_embed, symmetry, segments).encode()


@dataclass(slots=True)
class LabelledProblem:
    """The CNF of a shape on a set of sequences with the labels left open: ``literals``
    maps each read position (multiset index, last token) to its label literal."""

    problem: BitProblem
    literals: dict[tuple[int, Token], int]


def encode_labelled(ds: Dataset, shape: Shape, bits: int) -> LabelledProblem:
    """:func:`encode_bits` for two labels and an argmax readout with the label of every
    read position an open literal: the models with literals set as a labelling are the
    sorted b-bit networks memorizing it (the labels of ``ds`` are ignored)."""
    if shape.readout != "argmax" or output_dim(ds, shape) != 2:
        raise SpecError("label literals need an argmax readout over two labels")
    enc = _BitEncoder(ds, shape, bits)
    lits = enc.label_literals()
    return LabelledProblem(enc.p, lits)


def witness_from_model(ds: Dataset, shape: Shape, problem: BitProblem,
                       model: set[int], fixed_embed: list[list[int]] | None = None
                       ) -> NetworkSpec:
    """The integer network of a model."""
    mats = {name: ScaledMatrix.from_rows([[Fraction(problem.circuit.value(x, model))
                                           for x in row] for row in rows],
                                         cols=len(rows[0]) if rows else 0)
            for name, rows in problem.weights.items()}
    if fixed_embed is not None:
        mats["embed"] = ScaledMatrix.from_rows([[Fraction(v) for v in row]
                                                for row in fixed_embed],
                                               cols=len(fixed_embed[0]))
    dim = ds.vocab_size if ds.inputs == "token-ids" else ds.dim
    assert dim is not None
    return spec_of(shape, ds.inputs, dim, ds.n, output_dim(ds, shape), mats)
