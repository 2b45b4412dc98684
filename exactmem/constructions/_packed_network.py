"""The network of the dense packed-word memorizers (:mod:`.dense_float32`, and through its
``build_packed`` :mod:`.dense_int8` and :mod:`.dense_bf16`), built from solved tables:
``FF_out o FF_2 o FF_1 o FF_0 o A_10 o ... o A_0 o E`` (the "Network" paragraph of
:mod:`.dense_float32`'s docstring, and its exactness bounds).

- :func:`fetch_layer`: uniform attention on one key position adding that token's features
  into fetch dimensions (exact: one key);
- :func:`lookup`: table ``j``'s five fetched features, one-hot units on paraboloids, the
  word layer whose ``G x L`` weight matrix is the words, the output into the accumulator;
- :func:`extract`: ``s mod f`` by clipped steps, then bit peeling of the accumulator (two
  ReLU layers per bit), output field ``s``: the label;
- :func:`network`: the embedding, the fetches, the three lookups and the extraction.
"""

from __future__ import annotations

from collections.abc import Sequence

from exactmem.arith import ScaledMatrix
from exactmem.constructions._gadgets import ONE, Expr, Program
from exactmem.model.spec import (
    Attention,
    Embedding,
    FeedForward,
    Head,
    Layer,
    NetworkSpec,
    Readout,
)

#: the features fetched per table: row ``g``, ``g^2``, column coordinates ``la``, ``lb`` and
#: ``la^2 + lb^2``
FETCH = ("g", "g2", "la", "lb", "lsq")


def dims(mods: Sequence[int], fetch: Sequence[str] = FETCH, extra: Sequence[str] = (),
         field: Sequence[str] = ("s",)) -> list[str]:
    """The model dimensions: ``pi(t) mod K`` and its square for each modulus ``K``, the
    ``extra`` ones, the fetched features of the three tables, the field and the accumulator."""
    return [x for K in mods for x in (f"m{K}", f"q{K}")] + list(extra) + \
        [f"{x}{j}" for j in range(3) for x in fetch] + [*field, "acc"]


def fetch_layer(names: list[str], pos: int, pairs: Sequence[tuple[str, Sequence[str]]]
                ) -> Attention:
    """Uniform attention on the single key ``pos``: stream dim ``src`` of that token is added to
    the dims ``dsts`` of every position."""
    d = len(names)
    idx = {x: i for i, x in enumerate(names)}
    value = ScaledMatrix(tuple(tuple(int(c == idx[src]) for c in range(d)) for src, _ in pairs),
                         1, d)
    output = ScaledMatrix(tuple(tuple(int(names[r] in dsts) for _, dsts in pairs)
                                for r in range(d)), 1, len(pairs))
    zero = ScaledMatrix.zeros(1, d)
    return Attention((Head(query=zero, key=zero, value=value, output=output),),
                     kind="uniform", residual=True, keys=(pos,))


def _residual(prog: Program) -> FeedForward:
    return FeedForward(tuple(prog.maps), residual=True)


def lookup(names: list[str], j: int, words: list[int], G: int, La: int, Lb: int,  # noqa: N803
            gate: int, fetch: Sequence[str] = FETCH, lean: bool = False,
            offset: int = 0) -> FeedForward:
    """Table ``j``: its five fetched features (a narrow first layer, so the wide one-hot
    layer reads five inputs, not the whole model), one-hot units, the word layer (the
    ``G x L`` words, less ``offset``, as weights), accumulator output (``lean``: through
    one unit summing the word layer)."""
    prog = Program(names)
    prog.step({x: {f"{x}{j}": 1} for x in fetch})
    one: dict[str, Expr] = {}
    for u in range(G):
        one[f"r{u}"] = {ONE: 1 - u * u, "g": 2 * u, "g2": -1}
    for a in range(La):
        for c in range(Lb):
            e: dict[str, int] = {ONE: 1 - a * a - c * c, "lsq": -1}
            if a:
                e["la"] = 2 * a
            if c:
                e["lb"] = 2 * c
            one[f"c{a}_{c}"] = e
    prog.step(one)
    L = La * Lb  # noqa: N806
    two: dict[str, Expr] = {}
    for u in range(G):
        row = {f"c{col // Lb}_{col % Lb}": words[u * L + col] - offset for col in range(L)
               if words[u * L + col] != offset}
        two[f"h{u}"] = {**row, f"r{u}": gate, ONE: offset - gate}
    prog.step(two)
    total: Expr = {f"h{u}": 1 for u in range(G)}
    if lean:
        prog.step({"sigma": total})
        total = {"sigma": 1}
    prog.step({x: (total if x == "acc" else {}) for x in names})
    return _residual(prog)


def extract(names: list[str], fields: int, b: int, top_s: int, sdim: str = "s"
             ) -> FeedForward:
    """``acc, s -> field (s mod f)`` of ``acc`` by bit peeling; output the label.  ``s`` (in
    the dimension ``sdim``, ``0 <= s <= top_s``) is reduced by clipped steps at the
    multiples of ``f``."""
    prog = Program(names)
    first: dict[str, Expr] = {"w": {"acc": 1}, "sv": {sdim: 1}}
    T: dict[str, int] = {"sv": 2}  # noqa: N806
    for i in range(1, top_s // fields + 1):
        first[f"su{i}"] = {sdim: 1, ONE: 1 - i * fields}
        first[f"sw{i}"] = {sdim: 1, ONE: -i * fields}
        T.update({f"su{i}": -2 * fields, f"sw{i}": 2 * fields})
    prog.step(first)
    R: Expr = {"w": 1}  # noqa: N806
    acc: Expr | None = None
    top = fields * b + 1  # three words < 3 * 2^(f b) < 2^(f b + 2)
    for k in range(top, -1, -1):
        fld = k // b if k < fields * b else None
        a: dict[str, Expr] = {"u": {**R, ONE: R.get(ONE, 0) + 1 - (1 << k)},
                              "v": {**R, ONE: R.get(ONE, 0) - (1 << k)}}
        if fld is not None:
            a["dp"] = {**T, ONE: -2 * fld}
            a["dm"] = {**{x: -c for x, c in T.items()}, ONE: 2 * fld}
        if k > 0:
            a["w"] = R
            a["t"] = T
        if acc is not None:
            a["acc"] = acc
        prog.step(a)
        bstep: dict[str, Expr] = {}
        if fld is not None:
            bstep["gb"] = {"u": 1, "v": -1, "dp": -1, "dm": -1}
        if k > 0:
            bstep.update({"w": {"w": 1}, "t": {"t": 1}, "b": {"u": 1, "v": -1}})
        if acc is not None:
            bstep["acc"] = {"acc": 1}
        prog.step(bstep)
        R, T = {"w": 1, "b": -(1 << k)}, {"t": 1}  # noqa: N806
        if fld is not None:
            acc = {**({"acc": 1} if acc is not None else {}), "gb": 1 << (k % b)}
    assert acc is not None
    prog.step({"y": acc})
    return FeedForward(tuple(prog.maps), residual=False)


def network(V: int, n: int, pi: list[int], pos: list[int], tables: list[list[int]],  # noqa: N803
            G: int, La: int, Lb: int, fields: int, b: int,  # noqa: N803
            gate: int, lean: bool = False, offset: int = 0) -> NetworkSpec:
    """The network reading the three ``G x (La Lb)`` word tables at the positions ``pos``
    through the permutation ``pi`` (``fields`` fields of ``b`` bits per word, the word
    layer's gate ``gate``; ``lean`` and ``offset`` as in ``build_packed``)."""
    mods = sorted({G, La, Lb} - {1})
    fetch = tuple(x for x in FETCH if x != "lb") if lean and Lb == 1 else FETCH
    names = dims(mods, fetch, ("sf",) if lean else (), () if lean else ("s",))
    table = []
    for x in names:
        row = [0] * V
        for t in range(V):
            if x == "sf":
                row[t] = pi[t] % fields
            elif x[0] == "m" and x[1:].isdigit():
                row[t] = pi[t] % int(x[1:])
            elif x[0] == "q" and x[1:].isdigit():
                row[t] = (pi[t] % int(x[1:])) ** 2
        table.append(row)
    layers: list[Layer] = [Embedding(ScaledMatrix(tuple(map(tuple, table)), 1, V))]

    def feat(K: int, one: str, sq: Sequence[str]) -> list[tuple[str, Sequence[str]]]:
        return [(f"m{K}", (one,)), (f"q{K}", sq)] if K > 1 else []

    for j in range(3):
        for p, pairs in ((pos[3 * j], feat(G, f"g{j}", (f"g2{j}",))),
                         (pos[3 * j + 1], feat(La, f"la{j}", (f"lsq{j}",))),
                         (pos[3 * j + 2], feat(Lb, f"lb{j}", (f"lsq{j}",)))):
            if pairs:
                layers.append(fetch_layer(names, p, pairs))
    Ks = max(G, La, Lb)  # noqa: N806
    if Ks > 1 and not lean:  # lean: the field is sf of the read token (pos[9] = n - 1)
        layers.append(fetch_layer(names, pos[9], [(f"m{Ks}", ("s",))]))
        layers.append(fetch_layer(names, pos[10], [(f"m{Ks}", ("s",))]))
    for j in range(3):
        layers.append(lookup(names, j, tables[j], G, La, Lb, gate, fetch, lean, offset))
    layers.append(extract(names, fields, b, fields - 1 if lean else 2 * Ks - 2,
                           "sf" if lean else "s"))
    return NetworkSpec(input_kind="token-ids", input_dim=V, seq_len=n, layers=tuple(layers),
                       readout=Readout("scalar", "last"))
