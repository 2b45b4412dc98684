"""The trusted encoder of the bit-bounded search question (standard library only).

"Some network of this shape with b-bit integer weights memorizes this next-token dataset"
as a DIMACS CNF (docs/search.md, ``--bits``).  ``exactmem search --bits`` writes the CNF of
every refuted size with this encoder, and ``exactmem check-search`` re-derives it from the
dataset and the question named in the answer and requires the file to be identical, so a
proof is bound to the question it refutes.

**The grid.**  Every weight is an integer in ``[-2^(b-1), 2^(b-1))`` (b-bit two's
complement; every layer's scale is ``2^0``).

**Exact semantics in integers.**  The stream is carried as integers ``X = sigma * x``:
``sigma_0`` = common denominator of the input vectors (1 for token ids); attention layer
``l`` multiplies it by ``M`` = the lcm of every possible tie-set size (two or more key
tokens).  A head's output at a query is ``sum_{g in T} c_g v_g / sum_{g in T} c_g`` over
the tied maximizing keys ``T`` (``c_g`` the multiplicity of key token g: weight ``1/|I_j|``
on every tied position, Kajitsuka & Sato eq. (1)); times ``M`` it is the integer
combination ``sum (c_g M / |T|) W_O W_V X_g``.  Scores are ``sigma^2`` times the true ones,
so ties and order are exact.  Biases at scale ``sigma`` enter as ``sigma * b``; ReLU and
the readout comparisons commute with ``sigma > 0``.  ``T`` is selected exactly when its
keys are maximal and the others are not.  Token vectors depend only on (multiset, token)
(no positional encoding); the readout at each (multiset, last token) has its label as the
unique argmax (``score_y > score_r``) or equals ``sigma_L * y`` (scalar).

**Symmetry breaking** (:meth:`BitEncoder.break_symmetries`) keeps a sorted copy of every
network's function, so UNSAT is about every b-bit network of the shape; the **segment
clauses** (:meth:`BitEncoder.segments`) are implied by the circuit.  Both are argued in
docs/search.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from itertools import combinations
from math import lcm
from typing import Any

from . import search_reps
from .search_circuit import Circuit, Int

ENCODER = "exactmem.bits-cnf/1"
Token = Any  # an int id or a tuple of Fractions
Key = tuple[int, Token]


@dataclass(frozen=True, slots=True)
class Question:
    """What a CNF encodes.  ``sequences``/``labels``: a next-token dataset (token ids, or
    vectors as tuples of Fractions), ``size`` its vocabulary size or dimension."""

    inputs: str
    size: int
    sequences: tuple[tuple[Token, ...], ...]
    labels: tuple[int, ...]
    dataset_sha256: str
    layers: int
    heads: int
    d_model: int
    head_dim: int
    ff_width: int
    residual: bool
    readout: str
    bits: int
    symmetry: bool = True
    segments: bool = True
    fixed_embed: tuple[tuple[int, ...], ...] | None = None

    @property
    def out_dim(self) -> int:
        return 1 if self.readout == "scalar" else max(2, max(self.labels) + 1)

    def header(self) -> list[str]:
        """The comment lines that open the CNF: everything that changes its clauses."""
        fixed = "none" if self.fixed_embed is None else \
            ";".join(",".join(map(str, row)) for row in self.fixed_embed)
        return [f"c encoder {ENCODER}",
                "c question: some network of this shape with b-bit integer weights "
                "memorizes the dataset (UNSAT: none does)",
                f"c dataset-sha256 {self.dataset_sha256}",
                f"c dataset next-token {self.inputs} size {self.size} "
                f"sequences {len(self.sequences)}",
                "c labels " + " ".join(map(str, self.labels)),
                f"c shape layers {self.layers} heads {self.heads} d_model {self.d_model} "
                f"head_dim {self.head_dim} ff_width {self.ff_width} "
                f"residual {'on' if self.residual else 'off'} readout {self.readout}",
                f"c bits {self.bits}",
                f"c symmetry {'on' if self.symmetry else 'off'} "
                f"segments {'on' if self.segments else 'off'} fixed_embed {fixed}"]


def dimacs(nvars: int, clauses: list[list[int]], header: list[str] | None = None) -> str:
    """DIMACS text: the comment lines ``header``, the ``p cnf`` line, one clause a line."""
    lines = [*(header or []), f"p cnf {nvars} {len(clauses)}"]
    lines.extend(" ".join(map(str, c)) + " 0" for c in clauses)
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Reads:
    """What the readout sees: the distinct multisets as (token, count) groups, and per
    distinct (multiset index, last token, label) one target."""

    multisets: tuple[tuple[tuple[Token, int], ...], ...]
    targets: tuple[tuple[int, Token, int], ...]


def reads_of(sequences: tuple[tuple[Token, ...], ...], labels: tuple[int, ...]) -> Reads:
    """Group by multiset (sorted tokens), in order of first appearance; exact duplicates
    collapse, a conflicting label stays (the problem is then unsatisfiable)."""
    index: dict[tuple[Any, ...], int] = {}
    groups: list[tuple[tuple[Token, int], ...]] = []
    seen: set[tuple[int, Token, int]] = set()
    out: list[tuple[int, Token, int]] = []
    for seq, y in zip(sequences, labels, strict=True):
        key = tuple(sorted(seq))
        if key not in index:
            index[key] = len(groups)
            counts: dict[Token, int] = {}
            for t in key:
                counts[t] = counts.get(t, 0) + 1
            groups.append(tuple(counts.items()))
        t = (index[key], seq[-1], y)
        if t not in seen:
            seen.add(t)
            out.append(t)
    return Reads(tuple(groups), tuple(out))


def tie_sets(k: int) -> list[tuple[int, ...]]:
    """Every non-empty subset of ``k`` key tokens, by size, then lexicographically."""
    return [c for r in range(1, k + 1) for c in combinations(range(k), r)]


@dataclass(slots=True)
class Mix:
    """A stream vector at one query, kept as a sum so that linear maps can be pushed into
    it: ``base`` (residual and biases), per head the options ``(selector, [(k, v)])``
    (``sum k * v`` over the selected tie set's value vectors; one selector holds), and per
    feed-forward layer ``(W2, act)``."""

    base: list[Int]
    heads: list[list[tuple[int, list[tuple[int, list[Int]]]]]]
    ff: list[tuple[list[list[Int]], list[Int]]] = field(default_factory=list)


class BitEncoder:
    """Builds the circuit of a :class:`Question` (:meth:`encode`); ``weights`` maps each
    weight matrix's name to its integers."""

    def __init__(self, q: Question, max_vars: int | None = None) -> None:
        self.q, self.c = q, Circuit(max_vars)
        self.weights: dict[str, list[list[Int]]] = {}
        self.reads = reads_of(q.sequences, q.labels)
        self.tail_input: dict[Key, Mix] = {}

    def mat(self, name: str, rows: int, cols: int) -> list[list[Int]]:
        m = [[self.c.fresh(self.q.bits) for _ in range(cols)] for _ in range(rows)]
        self.weights[name] = m
        return m

    def matvec(self, w: list[list[Int]], x: list[Int]) -> list[Int]:
        return [self.c.dot(row, x) for row in w]

    def input_scale(self) -> int:
        if self.q.inputs == "token-ids":
            return 1
        return lcm(*(Fraction(v).denominator for seq in self.q.sequences for tok in seq
                     for v in tok))

    def embed(self, scale: int) -> dict[Token, list[Int]]:
        q, c, m = self.q, self.c, self.q.d_model
        tokens = sorted({t for ms in self.reads.multisets for t, _ in ms})
        if q.inputs == "token-ids":
            table = self.mat("embed", m, q.size)
            return {t: [table[i][t] for i in range(m)] for t in tokens}
        if q.fixed_embed is not None:  # a given integer map, outside the searched weights
            table = [[c.const(v) for v in row] for row in q.fixed_embed]
        else:
            table = self.mat("embed", m, q.size)
        out = {}
        for t in tokens:
            ints = [int(Fraction(v) * scale) for v in t]
            out[t] = [c.sum([c.mul_const(table[i][j], ints[j]) for j in range(len(ints))])
                      for i in range(m)]
        return out

    def tie_scale(self) -> int:
        """lcm of the sizes of the tie sets with two or more key tokens."""
        sizes = [sum(ms[g][1] for g in tset) for ms in self.reads.multisets
                 for tset in tie_sets(len(ms)) if len(tset) > 1]
        return lcm(*sizes) if sizes else 1

    def attention(self, layer: int, reps: dict[Key, list[Int]], queries: list[Key],
                  big_m: int) -> dict[Key, Mix]:
        """Each query's attention output (plus the residual) as a :class:`Mix`."""
        q, c, m, s = self.q, self.c, self.q.d_model, self.q.head_dim
        out = {k: Mix([c.mul_const(x, big_m) for x in reps[k]] if q.residual else
                      [c.const(0)] * m, []) for k in queries}
        for h in range(q.heads):
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
                for tset in tie_sets(len(ks)):
                    sel = c.and_([is_max[g] if g in tset else -is_max[g]
                                  for g in range(len(ks))])
                    tot = sum(groups[g][1] for g in tset)
                    options.append((sel, [(groups[g][1] * big_m // tot, vals[ks[g]])
                                          for g in tset]))
                out[key].heads.append(options)
        return out

    def row_dot(self, row: list[Int], x: Mix) -> Int:
        """``row . x`` with the row pushed through the mixtures (``row . v`` formed once
        per value vector; exact: the maps are linear)."""
        c = self.c
        parts = [c.dot(row, x.base)]
        for w2, act in x.ff:
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

    def feedforward(self, layer: int, reps: dict[Key, Mix], scale: int) -> dict[Key, Mix]:
        q, c, m, w = self.q, self.c, self.q.d_model, self.q.ff_width
        p = f"ff{layer}."
        w1, b1 = self.mat(p + "W1", w, m), self.mat(p + "b1", w, 1)
        w2, b2 = self.mat(p + "W2", m, w), self.mat(p + "b2", m, 1)
        out = {}
        for key, x in reps.items():
            act = [c.relu(c.add(self.row_dot(w1[j], x), c.mul_const(b1[j][0], scale)))
                   for j in range(w)]
            bias = [c.mul_const(b2[i][0], scale) for i in range(m)]
            out[key] = Mix([c.add(a, b) for a, b in zip(bias, x.base, strict=True)], x.heads,
                           [*x.ff, (w2, act)]) if q.residual else Mix(bias, [], [(w2, act)])
        return out

    def break_symmetries(self) -> None:
        """Lex-leader clauses for the permutations that keep the function and the grid:
        hidden units of a feed-forward layer (row ``j`` of ``W1``, ``b1_j``, column ``j``
        of ``W2``), dimensions inside a head (row ``r`` of ``W_Q``, ``W_K``, ``W_V``,
        column ``r`` of ``W_O``), heads of a layer; then, for scalar heads and units, one
        representative grid point per function (:mod:`.search_reps`)."""
        w, q, c = self.weights, self.q, self.c

        def bits(ints: list[Int]) -> list[int]:
            return [b for x in ints for b in reversed(x.bits)]

        def chain(keys: list[list[int]]) -> None:
            for a, b in zip(keys, keys[1:], strict=False):
                c.lex_leq(a, b)

        for layer in range(q.layers):
            heads = []
            for h in range(q.heads):
                wq, wk, wv, wo = (w[f"att{layer}.{h}.{x}"] for x in "QKVO")
                chain([bits(wq[r] + wk[r] + wv[r] + [row[r] for row in wo])
                       for r in range(q.head_dim)])
                heads.append(bits([x for m in (wq, wk, wv, wo) for row in m for x in row]))
            chain(heads)
            if q.ff_width:
                w1, b1, w2 = (w[f"ff{layer}.{x}"] for x in ("W1", "b1", "W2"))
                chain([bits(w1[j] + b1[j] + [row[j] for row in w2])
                       for j in range(q.ff_width)])
        if search_reps.applies(q.d_model, q.head_dim, q.bits):
            self.keep_representatives()

    def keep_representatives(self) -> None:
        """``d_model = head_dim = 1``: each other grid point of a head's or unit's weights
        than its function's representative is excluded by one clause."""
        w, q = self.weights, self.q
        heads = search_reps.excluded(q.bits, 4, search_reps.head_key)
        units = search_reps.excluded(q.bits, 3, search_reps.unit_key)
        for layer in range(q.layers):
            for h in range(q.heads):
                ints = [w[f"att{layer}.{h}.{x}"][0][0] for x in "QKVO"]
                for vals in heads:
                    self.c.exclude(ints, vals)
            for j in range(q.ff_width):
                p = f"ff{layer}."
                ints = [w[p + "W1"][j][0], w[p + "b1"][j][0], w[p + "W2"][0][j]]
                for vals in units:
                    self.c.exclude(ints, vals)

    def segments(self, streams: dict[Key, Int], labels: dict[Key, int]) -> None:
        """Implied clauses for a scalar tail (:func:`tail_segments`): along the sorted
        streams entering the tail the labels change at most ``K = ff_width + 1`` times.
        Each read position gets a segment ``c in [0, K]`` in order encoding
        (``u_k = [c >= k]``); ``s_i <= s_j`` forces ``c_i <= c_j``; the label is ``y0``
        flipped on every odd segment.  ``labels``: per position the literal "label 1"."""
        c, k_max = self.c, self.q.ff_width + 1
        keys = list(streams)
        u = {key: [c.true] + [c.var() for _ in range(k_max)] + [-c.true] for key in keys}
        y0 = c.var()
        for key in keys:
            lab = labels[key]
            for k in range(1, k_max):
                c.clause([-u[key][k + 1], u[key][k]])
            for k in range(k_max + 1):
                same = -y0 if k % 2 else y0
                c.clause([-u[key][k], u[key][k + 1], -lab, same])
                c.clause([-u[key][k], u[key][k + 1], lab, -same])
        for a in keys:
            for b in keys:
                if a != b:
                    above = c.less(streams[b], streams[a])
                    for k in range(1, k_max + 1):
                        c.clause([above, -u[a][k], u[b][k]])

    def front(self) -> tuple[dict[Key, Mix], int]:
        """The stream at every read position (as a :class:`Mix`) and its scale."""
        q = self.q
        scale = self.input_scale()
        emb = self.embed(scale)
        reps = {(i, t): emb[t] for i, ms in enumerate(self.reads.multisets) for t, _ in ms}
        read_keys = list(dict.fromkeys((i, t) for i, t, _ in self.reads.targets))
        big_m = self.tie_scale()
        mixes: dict[Key, Mix] = {}
        for layer in range(q.layers):
            if layer:
                reps = {key: self.materialize(x) for key, x in mixes.items()}
            queries = read_keys if layer == q.layers - 1 else list(reps)
            mixes = self.attention(layer, reps, queries, big_m)
            scale *= big_m
            if layer == q.layers - 1:
                self.tail_input = mixes
            if q.ff_width:
                mixes = self.feedforward(layer, mixes, scale)
        return mixes, scale

    def encode(self) -> BitEncoder:
        q, c = self.q, self.c
        mixes, scale = self.front()
        k = q.out_dim
        w, b = self.mat("out.W", k, q.d_model), self.mat("out.b", k, 1)
        diffs: dict[tuple[int, int], tuple[list[Int], Int]] = {}
        for i, t, y in self.reads.targets:
            x = mixes[(i, t)]
            if q.readout == "scalar":
                score = c.add(self.row_dot(w[0], x), c.mul_const(b[0][0], scale))
                target = Fraction(y) * scale
                if target.denominator != 1:
                    c.clauses.append([-c.true])
                    continue
                c.clauses.append([c.is_zero(c.add(score, c.const(int(target)),
                                                  negate_y=True))])
                continue
            for r in range(k):
                if r == y:
                    continue
                if (y, r) not in diffs:  # the difference row, shared by every sequence
                    diffs[(y, r)] = ([c.add(p, s, negate_y=True) for p, s in
                                      zip(w[y], w[r], strict=True)],
                                     c.add(b[y][0], b[r][0], negate_y=True))
                row, bias = diffs[(y, r)]
                margin = c.add(self.row_dot(row, x), c.mul_const(bias, scale))
                c.clauses.append([c.less(c.const(0), margin)])
        if q.segments and tail_segments(q):
            self.segments({key: self.materialize(x)[0] for key, x in self.tail_input.items()},
                          {(i, t): c.true if y == 1 else -c.true
                           for i, t, y in self.reads.targets})
        if q.symmetry:
            self.break_symmetries()
        return self

    def cnf(self) -> str:
        """The DIMACS text: the question's header, then the clauses."""
        return dimacs(self.c.nvars, self.c.clauses, self.q.header())


def tail_segments(q: Question) -> bool:
    """The segment clauses apply: ``d_model = 1`` and argmax over two labels."""
    return q.d_model == 1 and q.readout == "argmax" and q.out_dim == 2


def encode(q: Question, max_vars: int | None = None) -> str:
    """The CNF text of a question (:class:`~.search_circuit.VariableLimit` past
    ``max_vars`` variables)."""
    return BitEncoder(q, max_vars).encode().cnf()
