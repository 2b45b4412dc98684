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

What is encoded (no normalisation, no symmetry breaking, so UNSAT is about every b-bit
integer network of the shape): token vectors depend only on (multiset, token) -- exact
for networks without positional encoding; the readout at each (multiset, last token) has
its label as unique argmax (``score_y > score_c``) or equals ``sigma_L * y`` (scalar).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from math import lcm

from exactmem.arith import ScaledMatrix
from exactmem.errors import SpecError
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec
from exactmem.search.bitblast import Circuit, Int
from exactmem.search.encoding import Token, _subsets, output_dim, reads_of
from exactmem.search.shape import Shape, spec_of


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
                 fixed_embed: list[list[int]] | None = None) -> None:
        if bits < 1:
            raise SpecError(f"--bits must be >= 1, found {bits}")
        self.ds, self.shape, self.c = ds, shape, Circuit()
        self.p = BitProblem(self.c, bits)
        self.fixed_embed = fixed_embed
        self.reads = reads_of(ds)

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
        sizes = [sum(ms[g][1] for g in tset) for ms in self.reads.multisets
                 for tset in _subsets(len(ms), "split")]
        return lcm(*sizes) if sizes else 1

    def attention(self, layer: int, reps: dict[tuple[int, Token], list[Int]],
                  queries: list[tuple[int, Token]], big_m: int) -> dict[tuple[int, Token],
                                                                        list[Int]]:
        sh, c, m, s = self.shape, self.c, self.shape.d_model, self.shape.head_dim
        total: dict[tuple[int, Token], list[list[Int]]] = {q: [] for q in queries}
        for h in range(sh.heads):
            p = f"att{layer}.{h}."
            wq, wk = self.mat(p + "Q", s, m), self.mat(p + "K", s, m)
            wv, wo = self.mat(p + "V", s, m), self.mat(p + "O", m, s)
            keys = {k: self.matvec(wk, x) for k, x in reps.items()}
            outs = {k: self.matvec(wo, self.matvec(wv, x)) for k, x in reps.items()}
            for key in queries:
                i = key[0]
                groups = self.reads.multisets[i]
                ks = [(i, t) for t, _ in groups]
                qv = self.matvec(wq, reps[key])
                scores = [c.dot(keys[k], qv) for k in ks]
                options = []
                is_max = [c.and_([-c.less(scores[g], scores[o]) for o in range(len(ks))
                                  if o != g]) for g in range(len(ks))]
                for tset in _subsets(len(ks), "split"):
                    sel = c.and_([is_max[g] if g in tset else -is_max[g]
                                  for g in range(len(ks))])
                    tot = sum(groups[g][1] for g in tset)
                    mix = [c.sum([c.mul_const(outs[ks[g]][r], groups[g][1] * big_m // tot)
                                  for g in tset]) for r in range(m)]
                    options.append((sel, mix))
                if len(options) == 1:
                    head = options[0][1]
                else:
                    head = [c.select([(sel, mix[r]) for sel, mix in options])
                            for r in range(m)]
                total[key].append(head)
        out = {}
        for key in queries:
            vec = [c.sum([hd[r] for hd in total[key]]) for r in range(m)]
            if sh.residual:
                vec = [c.add(v, c.mul_const(x, big_m)) for v, x in zip(vec, reps[key],
                                                                      strict=True)]
            out[key] = vec
        return out

    def feedforward(self, layer: int, reps: dict[tuple[int, Token], list[Int]],
                    scale: int) -> dict[tuple[int, Token], list[Int]]:
        sh, c, m, q = self.shape, self.c, self.shape.d_model, self.shape.ff_width
        p = f"ff{layer}."
        w1, b1 = self.mat(p + "W1", q, m), self.mat(p + "b1", q, 1)
        w2, b2 = self.mat(p + "W2", m, q), self.mat(p + "b2", m, 1)
        out = {}
        for key, x in reps.items():
            act = [c.relu(c.add(c.dot(w1[j], x), c.mul_const(b1[j][0], scale)))
                   for j in range(q)]
            y = [c.add(c.dot(w2[i], act), c.mul_const(b2[i][0], scale)) for i in range(m)]
            out[key] = [c.add(a, b) for a, b in zip(y, x, strict=True)] if sh.residual else y
        return out

    def encode(self) -> BitProblem:
        sh, c = self.shape, self.c
        scale = _input_scale(self.ds)
        emb = self.embed(scale)
        reps = {(i, t): emb[t] for i, ms in enumerate(self.reads.multisets) for t, _ in ms}
        read_keys = list(dict.fromkeys((i, t) for i, t, _ in self.reads.targets))
        big_m = self.tie_scale()
        for layer in range(sh.layers):
            queries = read_keys if layer == sh.layers - 1 else list(reps)
            reps = self.attention(layer, reps, queries, big_m)
            scale *= big_m
            if sh.ff_width:
                reps = self.feedforward(layer, reps, scale)
        k = output_dim(self.ds, sh)
        w, b = self.mat("out.W", k, sh.d_model), self.mat("out.b", k, 1)
        for i, t, y in self.reads.targets:
            x = reps[(i, t)]
            scores = [c.add(c.dot(w[r], x), c.mul_const(b[r][0], scale)) for r in range(k)]
            if sh.readout == "scalar":
                target = Fraction(y) * scale
                if target.denominator != 1:
                    c.clauses.append([-c.true])  # cannot be hit by integers: unsatisfiable
                    continue
                c.clauses.append([c.is_zero(c.add(scores[0], c.const(int(target)),
                                                  negate_y=True))])
            else:
                for r in range(k):
                    if r != y:
                        c.clauses.append([c.less(scores[r], scores[y])])
        return self.p


def encode_bits(ds: Dataset, shape: Shape, bits: int,
                fixed_embed: list[list[int]] | None = None) -> BitProblem:
    """The CNF whose models are exactly the b-bit integer networks of ``shape`` that
    memorize ``ds`` (weights read off the weight literals).  ``fixed_embed``: for vector
    inputs, a fixed integer ``d_model x dim`` input map (not searched, not counted)."""
    return _BitEncoder(ds, shape, bits, fixed_embed).encode()


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
