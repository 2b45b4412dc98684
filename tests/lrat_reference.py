"""An independent standard-LRAT checker, written for the tests from the format description
(lrat-check, Heule et al.; cake_lpr reads the same numbering), sharing no code with
:mod:`exactmem.checker.proofs.lrat`:

* the CNF's clauses are numbered 1..m in file order;
* ``ID LITS 0 HINTS 0`` adds clause ``ID`` (an id no clause ever had: greater than every
  id so far), which must follow from the hinted clauses by unit propagation in the order
  given: with every literal of the new clause false, each hinted clause must be unit
  (its open literal is set) until one is falsified;
* ``ID d IDS 0`` deletes clauses;
* the proof is accepted once the empty clause is added.
"""

from __future__ import annotations


def parse_dimacs(text: str) -> list[list[int]]:
    nums: list[int] = []
    for line in text.splitlines():
        if line.startswith(("c", "p")) or not line.strip():
            continue
        nums.extend(int(x) for x in line.split())
    out, cur = [], []
    for x in nums:
        if x == 0:
            out.append(cur)
            cur = []
        else:
            cur.append(x)
    return out


def accepts(cnf_text: str, proof_text: str) -> bool:
    """True when the proof derives the empty clause in standard LRAT."""
    db = dict(enumerate(parse_dimacs(cnf_text), start=1))
    top = len(db)
    for line in proof_text.splitlines():
        tok = line.split()
        if not tok or tok[0] == "c":
            continue
        if tok[1] == "d":
            for i in tok[2:-1]:
                db.pop(int(i), None)
            continue
        vals = [int(t) for t in tok]
        cid, rest = vals[0], vals[1:]
        if cid <= top:
            return False
        top = cid
        zero = rest.index(0)
        lits, hints = rest[:zero], rest[zero + 1:-1]
        value = {abs(x): x < 0 for x in lits}  # every literal of the lemma made false
        conflict = False
        for h in hints:
            if h < 0 or h not in db:
                return False
            free = []
            for x in db[h]:
                v = value.get(abs(x))
                if v is None:
                    free.append(x)
                elif v == (x > 0):
                    return False  # a satisfied hint
            if not free:
                conflict = True
                break
            if len(free) > 1:
                return False
            value[abs(free[0])] = free[0] > 0
        if not conflict:
            return False
        if not lits:
            return True
        db[cid] = lits
    return False
