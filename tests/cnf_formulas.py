"""Unsatisfiable CNF formulas and DIMACS text for the proof-checker tests."""

from __future__ import annotations


def php(n: int) -> tuple[int, list[list[int]]]:
    """n+1 pigeons in n holes (unsatisfiable)."""
    def v(i: int, j: int) -> int:
        return i * n + j + 1
    cls = [[v(i, j) for j in range(n)] for i in range(n + 1)]
    for j in range(n):
        for a in range(n + 1):
            cls.extend([-v(a, j), -v(b, j)] for b in range(a + 1, n + 1))
    return (n + 1) * n, cls


def dimacs(nvars: int, cls: list[list[int]]) -> str:
    return f"p cnf {nvars} {len(cls)}\n" + "".join(" ".join(map(str, c)) + " 0\n"
                                                     for c in cls)
