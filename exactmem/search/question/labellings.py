"""The labellings of a set of input sequences, up to the symmetries of the question.

For next-token datasets of token ids (no positional information, a free embedding table):

* the inputs are *consistency classes* -- a multiset of tokens plus the last token
  (Kajitsuka & Sato eq. 5); :func:`generate_inputs` draws ``N`` distinct ones;
* symmetry: relabelling the vocabulary permutes embedding columns and, for an argmax
  readout (or a scalar readout with two labels and unbounded real weights, ``y -> 1 - y``),
  permuting the labels permutes readout rows; so two labelled datasets whose graphs
  (sequence, token and label nodes) are isomorphic have the same answer.
  :func:`labelling_classes` keeps one representative per isomorphism class (networkx:
  Weisfeiler-Lehman hash buckets, then exact isomorphism tests); :func:`token_symmetries`
  lists the token permutations.

The runs that answer every class live in :mod:`exactmem.search.drive.all_labellings`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations_with_replacement, permutations, product
from typing import Any

from exactmem.errors import DatasetError


def consistency_classes(n: int, vocab: int) -> list[tuple[int, ...]]:
    """One sequence per (multiset of ``n`` tokens, last token): sorted rest, then last."""
    out = []
    for ms in combinations_with_replacement(range(vocab), n):
        for t in sorted(set(ms)):
            rest = list(ms)
            rest.remove(t)
            out.append((*rest, t))
    return out


def generate_inputs(N: int, n: int, vocab: int, seed: int = 0) -> tuple[tuple[int, ...], ...]:  # noqa: N803
    """``N`` distinct consistency classes of length-``n`` sequences over ``vocab`` tokens."""
    classes = consistency_classes(n, vocab)
    if N > len(classes):
        raise DatasetError(f"only {len(classes)} distinct sequences (up to permutation of all "
                           f"but the last token) exist for n = {n}, vocab = {vocab}; "
                           f"asked for N = {N}")
    if N == len(classes):
        return tuple(classes)
    rng = random.Random(seed)
    return tuple(sorted(rng.sample(classes, N)))


def labels_symmetric(readout: str, classes: int, bounded: bool = False) -> bool:
    """Is every permutation of the labels a symmetry of the searched family?  An argmax
    readout permutes its rows; a scalar readout with two labels maps ``y -> 1 - y`` by
    negating its row and setting the bias to ``1 - b``, which leaves a bounded family
    (``bounded``: B-bit integer weights, or ``|w| <= bound``: ``-(-2^(B-1))`` and ``1 - b``
    can fall outside), so there it is not used."""
    return readout == "argmax" or (classes == 2 and not bounded)


def labelled_graph(seqs: Sequence[tuple[int, ...]], labels: Sequence[int],
                   symmetric: bool) -> Any:
    import networkx as nx

    g = nx.Graph()
    for i, (seq, y) in enumerate(zip(seqs, labels, strict=True)):
        g.add_node(("s", i), kind="seq")
        counts: dict[int, int] = {}
        for t in seq:
            counts[t] = counts.get(t, 0) + 1
        for t, c in counts.items():
            g.add_node(("t", t), kind="tok")
            g.add_edge(("s", i), ("t", t), e=f"{c}/{int(t == seq[-1])}")
        g.add_node(("y", y), kind="label" if symmetric else f"label{y}")
        g.add_edge(("s", i), ("y", y), e="label")
    return g


@dataclass(frozen=True, slots=True)
class LabellingClass:
    """A representative labelling and how many labellings it stands for."""

    labels: tuple[int, ...]
    size: int


def labelling_classes(seqs: Sequence[tuple[int, ...]], classes: int,
                      symmetric: bool) -> list[LabellingClass]:
    """Every labelling in ``[classes]^N`` up to isomorphism, in enumeration order.

    Each class is represented by its first labelling in ``itertools.product`` order, i.e.
    the lexicographically smallest of its orbit.  Small cases go through the token and
    label permutations directly (:func:`_classes_by_permutations`), the others through
    graph isomorphism (:func:`_classes_by_graphs`); the tests check that both agree."""
    tokens = sorted({t for seq in seqs for t in seq})
    perms = math.factorial(len(tokens)) * (math.factorial(classes) if symmetric else 1)
    if perms <= 5040 and classes ** len(seqs) <= 1 << 22:
        return _classes_by_permutations(seqs, classes, symmetric)
    return _classes_by_graphs(seqs, classes, symmetric)


def token_symmetries(seqs: Sequence[tuple[int, ...]], vocab: int = 0
                     ) -> list[tuple[list[int], tuple[int, ...]]]:
    """The token permutations ``perm`` (``t -> perm[t]``, for ``t < max(vocab, tokens)``)
    that map the set of sequences (multiset of all but the last token, last token) onto
    itself, each with the map ``i -> image[i]`` of sequence indices: ``(image, perm)``."""
    def key(seq: Sequence[int]) -> tuple[tuple[int, ...], int]:
        return tuple(sorted(seq[:-1])), seq[-1]

    index = {key(seq): i for i, seq in enumerate(seqs)}
    tokens = sorted({t for seq in seqs for t in seq})
    size = max(vocab, tokens[-1] + 1 if tokens else 0)
    out = []
    for perm in permutations(tokens):
        pi = dict(zip(tokens, perm, strict=True))
        image = [index.get(key([pi[t] for t in seq]), -1) for seq in seqs]
        if -1 not in image:
            out.append((image, tuple(pi.get(t, t) for t in range(size))))
    return out


def _classes_by_permutations(seqs: Sequence[tuple[int, ...]], classes: int,
                             symmetric: bool) -> list[LabellingClass]:
    """Two labelled datasets are isomorphic (:func:`labelled_graph`) exactly when a
    permutation of the tokens maps the set of sequences (multiset, last token) onto
    itself and, with it and (``symmetric``) a permutation of the labels, one labelling
    onto the other: a sequence node is determined by its token edges.  So the orbit of
    each labelling under those permutations is its class (numpy, all labellings at once)."""
    import numpy as np

    maps = [image for image, _ in token_symmetries(seqs)]
    relabels = list(permutations(range(classes))) if symmetric else [tuple(range(classes))]
    n = len(seqs)
    codes = np.arange(classes ** n, dtype=np.int64)
    digits = (codes[:, None] // classes ** np.arange(n - 1, -1, -1)) % classes  # product order
    weights = classes ** np.arange(n - 1, -1, -1, dtype=np.int64)
    best = codes.copy()
    for image in maps:
        moved = np.empty_like(digits)
        moved[:, image] = digits  # the label of sequence i moves to sequence image[i]
        for sigma in relabels:
            best = np.minimum(best, np.asarray(sigma, dtype=np.int64)[moved] @ weights)
    reps, sizes = np.unique(best, return_counts=True)
    return [LabellingClass(tuple(int(x) for x in digits[r]), int(c))
            for r, c in zip(reps, sizes, strict=True)]


def _classes_by_graphs(seqs: Sequence[tuple[int, ...]], classes: int,
                       symmetric: bool) -> list[LabellingClass]:
    import networkx as nx
    from networkx.algorithms.isomorphism import categorical_edge_match, categorical_node_match

    nm, em = categorical_node_match("kind", None), categorical_edge_match("e", None)
    buckets: dict[str, list[int]] = {}
    reps: list[tuple[tuple[int, ...], Any]] = []
    sizes: list[int] = []
    for labels in product(range(classes), repeat=len(seqs)):
        g = labelled_graph(seqs, labels, symmetric)
        h = nx.weisfeiler_lehman_graph_hash(g, node_attr="kind", edge_attr="e")
        for r in buckets.setdefault(h, []):
            if nx.is_isomorphic(reps[r][1], g, node_match=nm, edge_match=em):
                sizes[r] += 1
                break
        else:
            buckets[h].append(len(reps))
            reps.append((labels, g))
            sizes.append(1)
    return [LabellingClass(lab, s) for (lab, _), s in zip(reps, sizes, strict=True)]

