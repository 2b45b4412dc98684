"""Strict DIMACS for the proof checkers (standard library only; docs/proof-checker.md):
the CNF grammar (one ``p cnf V C`` header, exactly ``C`` clauses, literals in ``[-V, V]``,
every clause ended by ``0``, ``c`` comments), the integer tokens of a proof line, reading an
ASCII text file, and the limits both checkers share."""

from __future__ import annotations

import os
import stat

from ..verdict import Unusable

MAX_BYTES = 1 << 30  # per file
MAX_VARS = 1 << 24
MAX_STEPS = 2_000_000_000  # clause (literal) visits of DRUP (LRAT), over the whole check


def ints(line: str, where: str) -> list[int]:
    """The integers of ``line``: ASCII digits with an optional ``-``; nothing else."""
    out = []
    for tok in line.split():
        if not (tok.isascii() and (tok.isdigit() or (tok[0] == "-" and tok[1:].isdigit()))):
            raise Unusable(f"{where}: not an integer: {tok[:20]!r}")
        out.append(int(tok))
    return out


def parse_cnf(text: str) -> tuple[int, list[list[int]]]:
    """``(variables, clauses)`` of a strict DIMACS CNF."""
    nvars = ncls = -1
    clauses: list[list[int]] = []
    cur: list[int] = []
    for k, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] == "c":
            continue
        if s[0] == "p":
            parts = s.split()
            if nvars >= 0 or len(parts) != 4 or parts[1] != "cnf":
                raise Unusable(f"cnf line {k}: expected one header 'p cnf VARS CLAUSES'")
            nvars, ncls = ints(" ".join(parts[2:]), f"cnf line {k}")
            if not (0 <= nvars <= MAX_VARS and ncls >= 0):
                raise Unusable(f"cnf line {k}: header out of range")
            continue
        if nvars < 0:
            raise Unusable(f"cnf line {k}: clause before the 'p cnf' header")
        for lit in ints(s, f"cnf line {k}"):
            if lit == 0:
                clauses.append(cur)
                cur = []
            elif abs(lit) > nvars:
                raise Unusable(f"cnf line {k}: literal {lit} beyond {nvars} variables")
            else:
                cur.append(lit)
    if nvars < 0:
        raise Unusable("cnf: no 'p cnf' header")
    if cur:
        raise Unusable("cnf: last clause not ended by 0")
    if len(clauses) != ncls:
        raise Unusable(f"cnf: header says {ncls} clauses, found {len(clauses)}")
    return nvars, clauses


def read_text(path: str) -> str:
    """The text of the regular ASCII file ``path`` (at most ``MAX_BYTES``)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise Unusable(f"{path}: not a regular file")
    if os.path.getsize(path) > MAX_BYTES:
        raise Unusable(f"{path}: larger than {MAX_BYTES} bytes")
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise Unusable(f"{path}: not an ASCII text file (binary DRAT is not supported)") \
            from None
    return text
