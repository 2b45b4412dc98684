"""A deliberately naive reference forward pass (one Fraction per entry, one sequence at a
time), written straight from the paper's equations, to test the fast paths against."""

from __future__ import annotations

from fractions import Fraction

from exactmem.arith import ScaledMatrix
from exactmem.model import Affine, Attention, Dataset, Embedding, FeedForward, Linear, NetworkSpec

Vec = list[Fraction]


def mat_vec(m: ScaledMatrix, v: Vec) -> Vec:
    return [sum((m.entry(i, j) * v[j] for j in range(m.cols)), Fraction(0))
            for i in range(m.shape[0])]


def affine(a: Affine, v: Vec) -> Vec:
    out = mat_vec(a.weight, v)
    if a.bias is not None:
        out = [x + b for x, b in zip(out, a.bias.column_values(), strict=True)]
    return out


def attention(layer: Attention, cols: list[Vec]) -> list[Vec]:
    """Eq. (2) with eq. (1) hardmax: keys on rows, queries on columns, ties split."""
    n = len(cols)
    keys = list(layer.keys) if layer.keys is not None else list(range(n))
    out = []
    for j in range(n):
        acc = [Fraction(0)] * len(cols[0])
        for h in layer.heads:
            q = mat_vec(h.query, cols[j])
            scores = [sum((a * b for a, b in zip(mat_vec(h.key, cols[i]), q, strict=True)),
                          Fraction(0)) for i in keys]
            best = max(scores)
            ties = [i for i, s in zip(keys, scores, strict=True) if s == best]
            if layer.kind == "uniform":
                ties = keys
            mean = [sum((mat_vec(h.value, cols[i])[r] for i in ties), Fraction(0)) / len(ties)
                    for r in range(h.value.shape[0])]
            contrib = mat_vec(h.output, mean)
            acc = [a + c for a, c in zip(acc, contrib, strict=True)]
        out.append([a + c for a, c in zip(acc, cols[j], strict=True)] if layer.residual else acc)
    return out


def run(spec: NetworkSpec, ds: Dataset, i: int) -> list[Vec]:
    seq = ds.sequences[i]
    cols: list[Vec]
    start = 0
    if spec.input_kind == "token-ids":
        emb = spec.layers[0]
        assert isinstance(emb, Embedding)
        cols = [[emb.table.entry(r, t) for r in range(emb.table.shape[0])] for t in seq]
        start = 1
    else:
        cols = [list(t) for t in seq]
    for layer in spec.layers[start:]:
        if isinstance(layer, Linear):
            cols = [affine(layer.map, c) for c in cols]
        elif isinstance(layer, FeedForward):
            new = []
            for c in cols:
                v = c
                for k, a in enumerate(layer.layers):
                    if k:
                        v = [max(x, Fraction(0)) for x in v]
                    v = affine(a, v)
                new.append([x + y for x, y in zip(v, c, strict=True)] if layer.residual else v)
            cols = new
        elif isinstance(layer, Attention):
            cols = attention(layer, cols)
    return [cols[k] for k in spec.read_positions()]
