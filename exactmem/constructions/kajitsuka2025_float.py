"""Float-ready memorizers in the Kajitsuka & Sato architecture (``--max-bits P``).

The network has the shape of Kajitsuka & Sato (ICLR 2025) Theorem 4.1 / E.1 --
``FF_2 o UA o E_in`` with one uniform-attention layer, read at the last position
(next-token) or at every position (seq2seq, Corollary 4.1) -- but every weight, every
activation and every partial sum of every dot product is an integer below ``2^P``, so the
network run in IEEE floats with a ``P``-bit significand (float32: ``P = 24``) computes
exactly its rational outputs, in any summation order (docs/float-exact.md; the checker
verifies the claim).  Integers are never subnormal (every non-zero value is at least 1, the
grid unit is 1), so the claim also holds where hardware flushes subnormals to zero.  The
unbounded construction needs hundreds of significand bits; this one replaces its two
unbounded ingredients:

1. **Context ids** (Thm E.1's embedding and eq. 52-53, hashed): token ``t`` embeds as
   ``(n f_j(t), h_j(t), 0)_{j=0,1,2}`` with random integers ``0 <= f_j <= M / 2``,
   ``0 <= h_j < M``; the uniform head adds ``S_j = sum_p f_j(x_p)`` (the mean of ``n f_j``:
   the division by ``n`` is exact), and ``FF_2`` forms ``c_j = S_j + h_j(x_k)``, a function of
   (multiset, token at the read position) as in eq. (5) / (10), and its slot
   ``x_j = c_j mod M`` (:func:`~._float_gadgets.mod_steps`).
2. **Memorizer** (a retrieval table in place of Lemma C.1): the label of a context is
   ``(T_0[x_0] + T_1[x_1] + T_2[x_2]) mod L`` (``L = 2^b``, ``b`` label bits) with tables
   found by hypergraph peeling (:mod:`._retrieval`), about ``1.24 N`` slots of ``b`` bits
   in all.  A table is stored ``f <= floor((P - 2) / b)`` slots per word and ``m`` words per
   block of ``F = f m`` slots (``f, m`` minimize :func:`layout_cost`); a bank selects the
   block of ``x_j`` (about ``7 + m`` nonzero parameters per block), then a shared network
   selects the word and extracts the field (two ReLU layers per bit,
   :mod:`._float_gadgets`); a last gadget adds the three fields mod ``L``.  The hashes are
   rerandomized (and the slack grown by 3%) until peeling succeeds.

Size (nonzero parameters): ``9 V`` (embedding, ``V`` distinct tokens) ``+ 6`` (attention)
``+ 3 [(7 + m) Q + 14 m + 24 f b] + O(mod steps)`` with ``Q = M / (f m)`` blocks per
table: the ``3 M / f ~ 1.24 N b / (P - 2)`` words hold the labels, the rest is block
selection (``~ sqrt M`` with the best ``m``) and the shared extraction.
Requirements: token ids, labels integers ``>= 0`` consistent as in eq. (5) / (10).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

from exactmem.arith import ScaledMatrix
from exactmem.constructions._float_gadgets import (
    bank_steps,
    extract_steps,
    merge,
    mod_steps,
    mod_sum_steps,
    select_steps,
)
from exactmem.constructions._gadgets import Program
from exactmem.constructions._retrieval import Edge, solve_tables
from exactmem.constructions.base import BuildResult
from exactmem.errors import ConstructionError
from exactmem.model.dataset import Dataset
from exactmem.model.dataset_checks import multiset_keys, require_consistent
from exactmem.model.spec import Attention, Embedding, Head, Layer, NetworkSpec, Readout

SLACK = 1.24  # table slots per context (peeling threshold ~1.222)
ATTEMPTS = 12


def table_slots(contexts: int, slack: float = SLACK) -> int:
    """Slots per table: ``ceil(slack * contexts / 3)``."""
    return max(1, math.ceil(contexts * slack / 3))


def layout_cost(M: int, fields: int, m: int, b: int) -> int:  # noqa: N803
    """Nonzero parameters of one table's bank, word selection and field extraction, to first
    order (counted from the gadgets): ``7 Q + Q m`` (blocks and words), ``14 m`` (selection),
    ``24 f b`` (extraction), ``Q = ceil(M / (f m))``."""
    Q = -(-M // (fields * m))  # noqa: N806
    return 7 * Q + Q * m + (14 * m if m > 1 else 0) + 24 * fields * b


def layout(M: int, P: int, b: int, block_words: int = 0) -> tuple[int, int, int]:  # noqa: N803
    """``(fields, m, Q)``: fields per word (at most ``(P - 2) // b``), words per block (the
    given ``block_words``, or the cheapest) and blocks, minimizing :func:`layout_cost`."""
    top = (P - 2) // b
    if top < 1:
        raise ConstructionError(f"max_bits = {P}: a {b}-bit label does not fit in a "
                                f"{P - 2}-bit word; raise --max-bits")
    ms = [block_words] if block_words else range(1, max(2, math.isqrt(M) + 2))
    _, fields, m = min((layout_cost(M, f, m, b), f, m) for f in range(1, top + 1) for m in ms)
    return fields, m, -(-M // (fields * m))


def _contexts(ds: Dataset, every: bool) -> dict[tuple[tuple[Any, ...], Any], int]:
    ctx: dict[tuple[tuple[Any, ...], Any], int] = {}
    n = ds.n
    positions = range(n) if every else (n - 1,)
    for i, (seq, ms) in enumerate(zip(ds.sequences, multiset_keys(ds), strict=True)):
        for k, y in zip(positions, ds.position_labels(i), strict=True):
            ctx.setdefault((ms, seq[k]), int(y))
    return ctx


def _hash(ctx: list[tuple[Counter[Any], Any]], tokens: list[Any], M: int, fmax: int,  # noqa: N803
          rng: random.Random) -> tuple[list[dict[Any, int]], list[dict[Any, int]],
                                       list[list[int]]]:
    """Random ``f_j, h_j`` and every context's ``c_j = sum f_j + h_j`` (j = 0, 1, 2)."""
    fs = [{t: rng.randint(0, fmax) for t in tokens} for _ in range(3)]
    hs = [{t: rng.randint(0, M - 1) for t in tokens} for _ in range(3)]
    cs = [[sum(c * f[t] for t, c in ms.items()) + h[tok] for ms, tok in ctx]
          for f, h in zip(fs, hs, strict=True)]
    return fs, hs, cs


def build_float_ready(ds: Dataset, options: Mapping[str, Any], every: bool) -> BuildResult:
    """The ``max_bits = P`` network for ``ds`` (module docstring)."""
    P = int(options.get("max_bits", 0))  # noqa: N806
    seed = int(options.get("seed", 0))
    block_words = int(options.get("block_words", 0) or 0)
    if ds.inputs != "token-ids":
        raise ConstructionError("--max-bits supports token-id datasets only")
    if P < 6:
        raise ConstructionError(f"max_bits must be at least 6, found {P}")
    if block_words < 0:
        raise ConstructionError(f"block_words must be >= 0, found {block_words}")
    require_consistent(ds)
    assert ds.vocab_size is not None
    n, lim = ds.n, 1 << P
    labelled = _contexts(ds, every)
    ctx = [(Counter(ms), tok) for ms, tok in labelled]
    labels = list(labelled.values())
    b = max(1, max(labels).bit_length())
    L = 1 << b  # noqa: N806
    tokens = sorted({t for ms, _ in ctx for t in ms})
    rng = random.Random(seed)
    slack, attempt = SLACK, 0
    while attempt < ATTEMPTS:
        attempt += 1
        M = table_slots(len(ctx), slack)  # noqa: N806
        fields, m, Q = layout(M, P, b, block_words)  # noqa: N806
        if 8 * Q * fields * m + 2 >= lim:
            raise ConstructionError(f"max_bits = {P}: {len(ctx)} contexts need tables of "
                                    f"{Q * fields * m} slots, above 2^{P - 3}; "
                                    f"raise --max-bits")
        fmax = min(max(1, M // 2), (lim - 1) // (n * n), ((lim >> 2) - M) // n)
        if fmax < 0:
            raise ConstructionError(f"max_bits = {P}: no room for token weights at n = {n}")
        fs, hs, cs = _hash(ctx, tokens, M, fmax, rng)
        edge_of: dict[Edge, int] = {}
        clash = False
        for i, y in enumerate(labels):
            e = (cs[0][i] % M, cs[1][i] % M, cs[2][i] % M)
            if edge_of.setdefault(e, y) != y:
                clash = True
                break
        tables = None if clash else solve_tables(list(edge_of), list(edge_of.values()),
                                                 (M, M, M), L)
        if tables is not None:
            break
        slack *= 1.03
    if tables is None:
        raise ConstructionError(f"no peelable hashing in {ATTEMPTS} attempts (seed {seed})")
    spec = _network(ds, every, fs, hs, cs, tables, M, fields, m, Q, b)
    params = {"seed": seed, "max_bits": P, "contexts": len(ctx), "table_slots": M,
              "fields_per_word": fields, "block_words": m, "blocks": Q, "label_bits": b,
              "token_weight_max": fmax, "attempts": attempt}
    return BuildResult(spec=spec, params=params, notes=(
        f"float-ready for {P}-bit floats: every value an integer below 2^{P}; "
        f"{len(ctx)} contexts in 3 tables of {M} slots ({Q} blocks of {m} words of "
        f"{fields} fields; hashing attempt {attempt})",))


def _network(ds: Dataset, every: bool, fs: list[dict[Any, int]], hs: list[dict[Any, int]],
             cs: list[list[int]], tables: list[list[int]], M: int, fields: int, m: int,  # noqa: N803
             Q: int, b: int) -> NetworkSpec:  # noqa: N803
    """``FF_2 o UA o E_in`` for the chosen hashes and tables."""
    assert ds.vocab_size is not None
    n = ds.n
    table = [[0] * ds.vocab_size for _ in range(9)]
    for j in range(3):
        for t, v in fs[j].items():
            table[j][t] = n * v
        for t, v in hs[j].items():
            table[3 + j][t] = v
    value = ScaledMatrix.from_rows([[int(r == c) for c in range(9)] for r in range(3)])
    output = ScaledMatrix.from_rows([[int(r == c + 6) for c in range(3)] for r in range(9)])
    zero = ScaledMatrix.zeros(1, 9)
    head = Head(query=zero, key=zero, value=value, output=output)
    names = [f"F{j}" for j in range(3)] + [f"H{j}" for j in range(3)] + \
        [f"S{j}" for j in range(3)]
    prog = Program(names)
    F, wb = fields * m, fields * b  # noqa: N806
    stages: list[list[Any]] = [[], [], [], []]
    accs = []
    for j in range(3):
        p = f"t{j}_"
        lo, hi = min(cs[j]), max(cs[j])
        slots = tables[j] + [0] * (Q * F - M)
        words = [[sum(slots[q * F + a * fields + f] << (b * (fields - 1 - f))
                      for f in range(fields)) for a in range(m)] for q in range(Q)]
        stages[0].append(mod_steps({f"S{j}": 1, f"H{j}": 1}, M, lo, hi, p))
        stages[1].append(bank_steps(p + "X", words, F, p))
        ws = [f"{p}w{a}" for a in range(m)]
        if m > 1:
            stages[2].append(select_steps(ws, p + "rr", fields, wb, p))
            w, t = p + "w", p + "t"
        else:
            stages[2].append([])
            w, t = ws[0], p + "rr"
        steps, acc = extract_steps(w, t, fields, b, p)
        stages[3].append(steps)
        accs.append(acc)
    for parts in stages:
        for step in merge(*parts):
            prog.step(step)
    for step in mod_sum_steps(accs, 1 << b, "y"):
        prog.step(step)
    layers: list[Layer] = [Embedding(ScaledMatrix.from_rows(table)),
                           Attention((head,), kind="uniform", residual=True),
                           prog.feedforward()]
    return NetworkSpec(input_kind="token-ids", input_dim=ds.vocab_size, seq_len=n,
                       layers=tuple(layers),
                       readout=Readout("scalar", "every" if every else "last"))
