"""Three-table retrieval by hypergraph peeling: the storage of the float-ready memorizer.

A *retrieval data structure* (static function) stores ``y(e)`` for a fixed key set with no
keys: key ``e`` has one slot ``x_j(e)`` in each of three tables ``T_0, T_1, T_2`` and

    y(e) = (T_0[x_0(e)] + T_1[x_1(e)] + T_2[x_2(e)]) mod L.

The tables are found by peeling the 3-partite 3-uniform hypergraph whose edges are the keys
(Botelho, Pagh & Ziviani, WADS 2007; Dietzfelbinger & Walzer, ESA 2019): repeatedly remove
a slot of degree one with its edge, then assign the removed edges in reverse order, each
through its free slot.  Peeling succeeds with high probability when the three tables hold
together more than about ``1.222`` slots per key and the slots behave like random ones;
with ``1.24`` the storage is ``1.24 log2 L`` bits per key, the information bound being
``log2 L``.  Works in any abelian group; here ``Z / L``.
"""

from __future__ import annotations

from collections.abc import Sequence

Edge = tuple[int, int, int]


def peel(edges: Sequence[Edge], sizes: tuple[int, int, int]) -> list[tuple[int, int]] | None:
    """A peeling order ``[(edge, table of its free slot)]`` covering every edge, or ``None``
    when a non-empty 2-core remains (the caller rehashes).  Edges must be distinct."""
    deg = [[0] * m for m in sizes]
    acc = [[0] * m for m in sizes]  # XOR of the incident edge indices
    for i, e in enumerate(edges):
        for j in range(3):
            deg[j][e[j]] += 1
            acc[j][e[j]] ^= i
    stack = [(j, x) for j in range(3) for x in range(sizes[j]) if deg[j][x] == 1]
    order: list[tuple[int, int]] = []
    while stack:
        j, x = stack.pop()
        if deg[j][x] != 1:
            continue
        i = acc[j][x]
        order.append((i, j))
        for k in range(3):
            y = edges[i][k]
            deg[k][y] -= 1
            acc[k][y] ^= i
            if deg[k][y] == 1:
                stack.append((k, y))
    return order if len(order) == len(edges) else None


def solve_tables(edges: Sequence[Edge], values: Sequence[int], sizes: tuple[int, int, int],
                 modulus: int) -> list[list[int]] | None:
    """Tables with ``sum_j T_j[e_j] = values[e] (mod modulus)`` for every edge, entries in
    ``[0, modulus)`` (0 in slots no edge uses), or ``None`` if peeling fails."""
    order = peel(edges, sizes)
    if order is None:
        return None
    tables = [[0] * m for m in sizes]
    for i, j in reversed(order):
        e = edges[i]
        others = sum(tables[k][e[k]] for k in range(3) if k != j)
        tables[j][e[j]] = (values[i] - others) % modulus
    return tables


def lookup(tables: Sequence[Sequence[int]], edge: Edge, modulus: int) -> int:
    """The stored value of ``edge``: ``sum_j T_j[e_j] mod modulus``."""
    return sum(tables[j][edge[j]] for j in range(3)) % modulus
