"""Dense float32-exact memorizer: label words as the weights of a dense layer.

The float-ready network of :mod:`.kajitsuka2025_float` stores about 11 label bits per
*nonzero* parameter, but its feed-forward block merges many narrow gadgets into wide layers
that are mostly zeros: counted as a user loads it (every entry of every dense tensor) it
holds 0.63 label bits per parameter.  This construction keeps the same guarantee (every
weight, activation and partial sum an integer below ``2^24``: float32 evaluates it exactly in
any order, docs/float-exact.md) but lays the network out so that most dense entries are
label words.  Next-token task, token ids, read at the last position.

**Storage** (three-table retrieval, :mod:`._retrieval`).  Table ``j`` (``j = 0, 1, 2``) is a
``G x L`` matrix of *words*; a word packs ``f = floor(21 / b)`` fields of ``b`` label bits
(``b`` = bits of the largest label).  A sequence ``x`` selects in table ``j`` the word at row
``g(x_{p_j})`` and column ``(la(x_{q_j}), lb(x_{r_j}))`` -- functions of the tokens at three
positions -- and a field ``s = (m(x_{s_0}) + m(x_{s_1})) mod f``; the coordinate maps are
``pi(t) mod K`` for a random permutation ``pi`` of the vocabulary (``m``: the largest ``K``).
The label is field ``s`` of ``W_0 + W_1 + W_2`` (the sum of the three selected words; fields
are solved from ``s = 0`` upwards, each by hypergraph peeling, with the carries out of the
lower fields known).

**Network** ``FF_out o FF_2 o FF_1 o FF_0 o A_10 o ... o A_0 o E`` (built from the solved
tables by :mod:`._packed_network`; this module chooses the layout and solves the tables):

* ``E``: token ``t`` -> ``(pi(t) mod K, (pi(t) mod K)^2)`` for each modulus ``K`` in use; the
  model also has five *fetch* dimensions per table ``(g, g^2, la, lb, la^2 + lb^2)``, the
  field sum ``s`` and the accumulator.
* ``A_i``: uniform attention with one key position (``keys = (p,)``) and residual: it adds
  the features of the token at ``p`` into fetch dimensions (the division by one key is
  exact).  Every fetch comes before the first feed-forward block, so those blocks run at the
  read position only.
* ``FF_j`` (residual): a narrow layer passing table ``j``'s five features (so the wide layer
  after it reads five inputs, not the whole model); one ReLU layer of one-hot units on
  paraboloids, ``1 - (g - u)^2`` for the row ``u`` and ``1 - (la - a)^2 - (lb - c)^2`` for the
  column ``(a, c)`` -- linear in the features, 1 at the selected value and ``<= 0`` elsewhere;
  one ReLU layer of ``G`` units ``T_j[u, :] . onehot(column) + 2^21 onehot_u - 2^21`` (the
  word of the selected row, ``<= 0`` for the others): **the words are this dense ``G x L``
  weight matrix**; an output map adds their sum to the accumulator.
* ``FF_out``: ``s mod f`` by clipped steps, then bit peeling of the accumulator (two ReLU
  layers per bit, top bit first; the bits of field ``s`` are gated in), output the label.

**Exactness** (each bound a ``sum |terms|`` of one dot product, all below ``2^24``): features
below ``V^2``; one-hot units ``<= 1 + 4 K^2``; word layer ``< 3 * 2^21``; accumulator ``< 3 *
2^21`` (three words); peeling ``< 2 * 3 * 2^21``.  Every value is an integer (never
subnormal), so the float32 claim holds on hardware that flushes subnormals.

**Size** (dense parameters; ``d`` model dimensions, ``s <= 2`` features per fetch):
``2 |mods| V`` (embedding) ``+ 11 (2 d + 2 d s)`` (attention) ``+ 3 [5 d + 7 (G + L) + G (G
+ L + 1) + d G]`` (lookups) ``+ O(d + f b)`` (extraction); the ``3 G L`` words (about
``1.31 N / f``: the peeling slack times the largest field group) are the leading term.
Requires ``n >= 11`` positions.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from exactmem.constructions._packed_network import FETCH, network
from exactmem.constructions._retrieval import solve_tables
from exactmem.constructions.base import BuildResult, Construction, Option
from exactmem.errors import ConstructionError
from exactmem.model.dataset import Dataset
from exactmem.model.dataset_checks import require_no_conflicting_duplicates

WORD_BITS = 21  # words below 2^21: three of them and the gate stay below 2^23
SLACK = 1.25  # table slots per edge of the largest field group (peeling threshold ~1.222)
ATTEMPTS = 16
POSITIONS = 11  # p_j, q_j, r_j for three tables and two for the field


def _cost(G: int, La: int, Lb: int, d: int) -> int:  # noqa: N803
    """Dense parameters of one table's lookup block: feature layer ``5 d``, one-hot layer
    ``(G + L)(5 + 1)``, word layer ``G (G + L + 1)``, output ``d G``."""
    L = La * Lb  # noqa: N806
    return 5 * d + (G + L) * 6 + G * (G + L + 1) + d * G


def choose_shape(words: int, V: int, fields: int,  # noqa: N803
                 cap: int | None = None) -> tuple[int, int, int]:
    """``(G, La, Lb)`` with ``G La Lb >= words`` and each at most ``V`` (and ``cap``), of least
    dense cost (divisors of ``V`` first: then every coordinate is exactly uniform for uniform
    tokens)."""
    best: tuple[int, int, int, int] | None = None
    top = min(V, cap or V)
    divs = [k for k in range(1, top + 1) if V % k == 0]
    for pool in (divs, list(range(1, top + 1))):
        for G in pool:  # noqa: N806
            for La in pool:  # noqa: N806
                Lb = next((c for c in pool if G * La * c >= words), None)  # noqa: N806
                if Lb is None:
                    continue
                d = 2 * len({G, La, Lb} - {1}) + 3 * len(FETCH) + 2
                c = _cost(G, La, Lb, d)
                if best is None or c < best[0]:
                    best = (c, G, La, Lb)
        if best is not None:
            return best[1], best[2], best[3]
    raise ConstructionError(f"{words} words per table do not fit a vocabulary of {V} tokens "
                            f"(at most {top ** 3}); use kajitsuka2025-float")


def _solve(keys: Sequence[tuple[int, int, int, int]], labels: Sequence[int], W: int,  # noqa: N803
           fields: int, b: int) -> list[list[int]] | None:
    """Tables of words with ``field_s(W_0[x_0] + W_1[x_1] + W_2[x_2]) = y`` for every key
    ``(x_0, x_1, x_2, s)``; ``None`` when a field group does not peel or two keys clash."""
    tables = [[0] * W for _ in range(3)]
    L = 1 << b  # noqa: N806
    groups: list[list[int]] = [[] for _ in range(fields)]
    for i, k in enumerate(keys):
        groups[k[3]].append(i)
    for s, members in enumerate(groups):
        low = (1 << (b * s)) - 1
        want: dict[tuple[int, int, int], int] = {}
        for i in members:
            x0, x1, x2, _ = keys[i]
            carry = ((tables[0][x0] & low) + (tables[1][x1] & low) + (tables[2][x2] & low)) \
                >> (b * s)
            if want.setdefault((x0, x1, x2), (labels[i] - carry) % L) != (labels[i] - carry) % L:
                return None
        if not want:
            continue
        solved = solve_tables(list(want), list(want.values()), (W, W, W), L)
        if solved is None:
            return None
        for j in range(3):
            for x, v in enumerate(solved[j]):
                tables[j][x] |= v << (b * s)
    return tables


def build(ds: Dataset, options: Mapping[str, Any]) -> BuildResult:
    """The dense float32-exact network for ``ds`` (module docstring)."""
    max_bits = int(options.get("max_bits", 24) or 24)
    if max_bits != 24:
        raise ConstructionError(f"dense-float32 is built for float32 (max_bits 24), "
                                f"found {max_bits}")
    return build_packed(ds, options, "dense-float32", WORD_BITS)


def _lean_cost(G: int, La: int, Lb: int, fields: int) -> int:  # noqa: N803
    """Weight-matrix entries of the lean network (:func:`build_packed`, ``lean``): per table
    the feature layer ``F d``, the one-hot layer ``(G + L) F``, the word layer ``G (G + L)``,
    the sum unit ``G`` and its output ``d``; ``6 d`` per fetch layer (``2`` or ``3`` per
    table) and ``2 d`` for the extractor's first map."""
    L, F = La * Lb, (4 if Lb == 1 else 5)  # noqa: N806
    d = 2 * len({G, La, Lb} - {1}) + 1 + 3 * F + 1
    fetches = 2 + (Lb > 1)
    return 3 * (F * d + (G + L) * F + G * (G + L) + G + d + 6 * d * fetches) + 2 * d


def choose_lean(words: int, V: int, fields: int,  # noqa: N803
                cap: int | None = None) -> tuple[int, int, int]:
    """``(G, La, Lb)`` of least :func:`_lean_cost` with ``G La Lb >= words``, each coordinate
    at most ``V`` and ``cap``; ``Lb = 1`` reads two positions per table, not three."""
    top = min(V, cap or V)
    best: tuple[int, int, int, int] | None = None
    for G in range(1, top + 1):  # noqa: N806
        for La in range(1, top + 1):  # noqa: N806
            for Lb in range(1, La + 1):  # noqa: N806
                if G * La * Lb < words:
                    continue
                c = _lean_cost(G, La, Lb, fields)
                if best is None or c < best[0]:
                    best = (c, G, La, Lb)
                break  # larger Lb only costs more
    if best is None:
        raise ConstructionError(f"{words} words per table do not fit a vocabulary of {V} "
                                f"tokens (at most {top ** 3})")
    return best[1], best[2], best[3]


def build_packed(ds: Dataset, options: Mapping[str, Any], name: str, word_bits: int,
                 cap: int | None = None, lean: bool = False, offset: int = 0) -> BuildResult:
    """The network of the module docstring with words below ``2^word_bits`` (the gate of the
    word layer ``2^word_bits``, the fields ``floor(word_bits / b)``) and every table coordinate
    below ``cap`` (the one-hot weights ``2 u`` stay below ``2 cap``).

    ``lean`` (the narrow-weight variants, docs/dense-memorizers.md): the field ``s`` is
    ``pi(t) mod f`` of the read (last) token, in the stream without a fetch; the tables are
    sized on the largest field group of the chosen positions; the shape minimizes the
    weight-matrix entries (:func:`choose_lean`, two positions per table allowed); each
    lookup sums its ``G`` units in one unit before the output map.  ``offset``: the word
    matrix stores ``word - offset`` (signed words; the word layer's bias adds it back)."""
    seed = int(options.get("seed", 0) or 0)
    if ds.inputs != "token-ids" or ds.task != "next-token":
        raise ConstructionError(f"{name} supports next-token datasets of token ids")
    if ds.n < POSITIONS:
        raise ConstructionError(f"{name} reads {POSITIONS} positions; the sequences "
                                f"have n = {ds.n}")
    require_no_conflicting_duplicates(ds)
    assert ds.vocab_size is not None
    V, n = ds.vocab_size, ds.n  # noqa: N806
    ctx: dict[tuple[int, ...], int] = {}
    for seq, y in zip(ds.sequences, ds.labels, strict=True):
        ctx.setdefault(tuple(int(t) for t in seq), int(y))
    seqs, labels = list(ctx), list(ctx.values())
    if min(labels) < 0:
        raise ConstructionError("labels must be integers >= 0")
    b = max(1, max(labels).bit_length())
    if b > word_bits:
        raise ConstructionError(f"{b}-bit labels do not fit a {word_bits}-bit word")
    fields = word_bits // b
    group = len(seqs) / fields
    slack, rng = SLACK, random.Random(seed)
    for attempt in range(1, ATTEMPTS + 1):  # noqa: B007 - reported below
        if lean:
            pi = list(range(V))
            rng.shuffle(pi)
            pos = rng.sample(range(n - 1), POSITIONS - 2) + [n - 1]  # field: the read token
            field = [pi[seq[pos[9]]] % fields for seq in seqs]
            largest = max(field.count(s) for s in range(fields))
            words = math.ceil(slack * (largest + 4) / 3)
            G, La, Lb = choose_lean(words, V, fields, cap)  # noqa: N806
        else:
            words = math.ceil(slack * (group + 2 * math.sqrt(group) + 4) / 3)
            G, La, Lb = choose_shape(words, V, fields, cap)  # noqa: N806
            pi = list(range(V))
            rng.shuffle(pi)
            pos = rng.sample(range(n), POSITIONS)
        Ks = max(G, La, Lb)  # noqa: N806
        keys: list[tuple[int, int, int, int]] = []
        for i, seq in enumerate(seqs):
            xs = tuple((pi[seq[pos[3 * j]]] % G) * La * Lb + (pi[seq[pos[3 * j + 1]]] % La) * Lb
                       + pi[seq[pos[3 * j + 2]]] % Lb for j in range(3))
            s = field[i] if lean else (pi[seq[pos[9]]] % Ks + pi[seq[pos[10]]] % Ks) % fields
            keys.append((xs[0], xs[1], xs[2], s))
        tables = _solve(keys, labels, G * La * Lb, fields, b)
        if tables is not None:
            break
        if attempt % 4 == 0:  # new positions and permutation first, then larger tables
            slack *= 1.04
    else:
        raise ConstructionError(f"no peelable layout in {ATTEMPTS} attempts (seed {seed}); the "
                                f"tokens at the read positions may not be spread enough")
    spec = network(V, n, pi, pos, tables, G, La, Lb, fields, b, 1 << word_bits, lean, offset)
    params = {"seed": seed, "max_bits": 24, "contexts": len(seqs), "label_bits": b,
              "fields_per_word": fields, "rows": G, "cols_a": La, "cols_b": Lb,
              "words_per_table": G * La * Lb, "positions": pos, "attempts": attempt}
    if word_bits != WORD_BITS:
        params["word_bits"] = word_bits
    if offset:
        params["word_offset"] = offset
    return BuildResult(spec=spec, params=params, notes=(
        f"{name}{'' if word_bits == WORD_BITS else f' ({word_bits}-bit words)'}: "
        f"{len(seqs)} contexts in 3 tables of {G} x {La * Lb} words of "
        f"{fields} {b}-bit fields (attempt {attempt})",))


CONSTRUCTION = Construction(
    name="dense-float32",
    summary="float32-exact next-token memorizer whose dense weights are packed label words",
    reference="three-table retrieval (Botelho, Pagh & Ziviani 2007) in a Transformer; "
              "docs/dense-memorizers.md",
    tasks=("next-token",),
    inputs=("token-ids",),
    build=build,
    options=(Option("seed", int, 0, "seed of the token permutation and the read positions"),
             Option("max_bits", int, 24, "significand bits of the claim (float32: 24)")),
)
