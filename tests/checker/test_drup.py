"""The stdlib DRUP/DRAT checker: solver proofs accepted, crafted bad proofs rejected, bad
input unusable; verdicts agree with an independent published checker (dratify)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from cnf_formulas import dimacs, php

from exactmem.checker.proofs.drup import check_proof, check_proof_files

PHP_SOLVERS = ["cadical153", "glucose4", "lingeling"]


def solver_proof(name: str, cls: list[list[int]]) -> str | None:
    from pysat.solvers import Solver

    with Solver(name=name, bootstrap_with=cls, with_proof=True) as s:
        if s.solve():
            return None
        return "\n".join(s.get_proof()) + "\n"


def dratify_ok(cnf: str, proof: str) -> bool:
    dratify = pytest.importorskip("dratify")
    return bool(dratify.check_proof(dratify.parse_dimacs(cnf), proof).ok)


@pytest.mark.parametrize("solver", PHP_SOLVERS)
@pytest.mark.parametrize("n", [4, 5])
def test_solver_proofs_are_verified_by_both_checkers(solver: str, n: int) -> None:
    nvars, cls = php(n)
    proof = solver_proof(solver, cls)
    assert proof is not None
    cnf = dimacs(nvars, cls)
    assert check_proof(cnf, proof).verdict == "s VERIFIED"
    assert dratify_ok(cnf, proof)


def test_random_unsat_3cnf_agree_with_dratify() -> None:
    rng = random.Random(7)
    for _ in range(12):
        nvars = 30
        cls = [[rng.choice((1, -1)) * rng.randint(1, nvars) for _ in range(3)]
               for _ in range(170)]
        proof = solver_proof("cadical153", cls)
        if proof is None:
            continue
        cnf = dimacs(nvars, cls)
        mine = check_proof(cnf, proof).verdict == "s VERIFIED"
        assert mine and dratify_ok(cnf, proof)
        # drop a random lemma that is not the final empty clause: both checkers agree
        lines = proof.splitlines()
        adds = [i for i, x in enumerate(lines) if not x.startswith("d") and x != "0"]
        if adds:
            cut = "\n".join(x for i, x in enumerate(lines) if i != rng.choice(adds)) + "\n"
            assert (check_proof(cnf, cut).verdict == "s VERIFIED") == dratify_ok(cnf, cut)


def test_crafted_bad_proofs_are_rejected() -> None:
    nvars, cls = php(4)
    cnf = dimacs(nvars, cls)
    assert check_proof(cnf, "0\n").verdict == "s REJECTED"  # empty clause out of thin air
    assert check_proof(cnf, "").verdict == "s REJECTED"  # no refutation at all
    assert check_proof(cnf, "1 0\n0\n").verdict == "s REJECTED"  # unit not implied
    sat = dimacs(2, [[1, 2], [-1, 2]])
    assert check_proof(sat, "2 0\n0\n").verdict == "s REJECTED"  # satisfiable formula
    # deleting clauses cannot make a refutation easier
    proof = solver_proof("cadical153", cls)
    assert proof is not None
    deleted = "".join(f"d {' '.join(map(str, c))} 0\n" for c in cls if len(c) == 2) + proof
    assert check_proof(cnf, deleted).verdict == "s REJECTED"


def test_rat_lemma_is_accepted_and_a_non_rat_one_rejected() -> None:
    # x1 occurs nowhere: (1) is not RUP but RAT (no clause holds -1)
    rep = check_proof(dimacs(3, [[2, 3]]), "1 0\n")
    assert rep.verdict == "s REJECTED" and "does not derive" in rep.reasons[0]
    # with (-1 2): the resolvent (1 2) is not RUP, so (1) is not RAT; the formula is
    # satisfiable, and (1) would give the empty clause by unit propagation
    rep = check_proof(dimacs(3, [[2, 3], [-1, 2], [-1, -2]]), "1 0\n")
    assert rep.verdict == "s REJECTED" and "neither RUP nor RAT" in rep.reasons[0]
    unsat = dimacs(2, [[1, 2], [1, -2], [-1, 2], [-1, -2]])
    assert check_proof(unsat, "1 0\n0\n").verdict == "s VERIFIED"


@pytest.mark.parametrize("cnf,proof,why", [
    ("p cnf 2 1\n1 2 0\n", "x 0\n", "not an integer"),
    ("p cnf 2 2\n1 2 0\n", "0\n", "header says"),
    ("p cnf 2 1\n1 3 0\n", "0\n", "beyond"),
    ("1 2 0\n", "0\n", "before the 'p cnf'"),
    ("p cnf 2 1\n1 2\n", "0\n", "not ended"),
    ("p cnf 2 1\n1 2 0\n", "1 2\n", "ended by one 0"),
    ("p cnf 2 1\n1 2 0\np cnf 2 1\n", "0\n", "one header"),
    ("p cnf 2 1\n1 ２ 0\n", "0\n", "not an integer"),
])
def test_malformed_input_is_unusable(cnf: str, proof: str, why: str) -> None:
    rep = check_proof(cnf, proof)
    assert rep.verdict == "s UNUSABLE" and rep.exit_code == 2
    assert why in rep.reasons[0]


def test_resource_limit_is_unusable_not_a_hang() -> None:
    nvars, cls = php(5)
    proof = solver_proof("cadical153", cls)
    assert proof is not None
    rep = check_proof(dimacs(nvars, cls), proof, max_steps=100)
    assert rep.verdict == "s UNUSABLE" and "resource limit" in rep.reasons[0]


def test_check_proof_verb_contract(tmp_path: Path) -> None:
    nvars, cls = php(4)
    cnf, good, bad, binary = (tmp_path / n for n in ("f.cnf", "p.drup", "b.drup", "x.drat"))
    cnf.write_text(dimacs(nvars, cls))
    proof = solver_proof("cadical153", cls)
    assert proof is not None
    good.write_text(proof)
    bad.write_text("0\n")
    binary.write_bytes(b"a\x01\x02\x00\xff")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "exactmem", "check-proof", *args],
                              capture_output=True, text=True, timeout=120)

    for args, code, line in [((str(cnf), str(good)), 0, "s VERIFIED"),
                             ((str(cnf), str(bad)), 1, "s REJECTED"),
                             ((str(cnf), str(binary)), 2, "s UNUSABLE"),
                             ((str(cnf), str(tmp_path / "missing")), 2, "s UNUSABLE")]:
        proc = run(*args)
        assert proc.returncode == code, proc.stderr
        assert proc.stdout.splitlines()[-1] == line
        assert ("c claim: this CNF is unsatisfiable" in proc.stdout) == (code == 0)
    assert check_proof_files(str(cnf), str(good)).verdict == "s VERIFIED"


def test_backward_checking_checks_the_core_only() -> None:
    nvars, cls = php(4)
    cnf = dimacs(nvars, cls)
    proof = solver_proof("cadical153", cls)
    assert proof is not None
    good = check_proof(cnf, proof)
    assert good.verdict == "s VERIFIED" and 0 < good.counts["checked"] <= good.counts["lemmas"]
    # a lemma that does not follow, placed where nothing uses it: not part of the core
    junk = f"{nvars + 5} {nvars + 6} 0\n-{nvars + 5} 0\n"
    rep = check_proof(cnf, junk + proof)
    assert rep.verdict == "s VERIFIED" and rep.counts["checked"] == good.counts["checked"]
    # the same false unit placed so that the refutation uses it: rejected
    rep = check_proof(dimacs(2, [[1, 2], [-1, 2]]), "-2 0\n0\n")
    assert rep.verdict == "s REJECTED" and "neither RUP nor RAT" in rep.reasons[0]


def test_a_wrong_literal_in_a_core_lemma_is_caught() -> None:
    rng = random.Random(3)
    nvars, cls = php(4)
    cnf = dimacs(nvars, cls)
    proof = solver_proof("cadical153", cls)
    assert proof is not None
    lines = proof.splitlines()
    adds = [i for i, x in enumerate(lines) if not x.startswith("d") and len(x.split()) > 2]
    for i in rng.sample(adds, min(8, len(adds))):
        lits = lines[i].split()
        lits[0] = str(-int(lits[0]))
        bad = "\n".join(lines[:i] + [" ".join(lits)] + lines[i + 1:]) + "\n"
        assert (check_proof(cnf, bad).verdict == "s VERIFIED") == dratify_ok(cnf, bad)
