"""The stdlib LRAT checker: CaDiCaL's LRAT proofs accepted, every crafted fault rejected,
bad input unusable; the lemmas it accepts are RUP for an independent published DRAT
checker (dratify) and for the DRUP checker."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from cnf_formulas import dimacs, php

from exactmem.checker.proofs.drup import check_proof
from exactmem.checker.proofs.lrat import check_lrat
from exactmem.search.solvers.sat_backend import _run
from exactmem.search.solvers.sat_backend import lrat_to_drup as to_drup


def lrat_proof(cls: list[list[int]]) -> str:
    res, _, _, proof = _run(cls, 10 ** 6)
    assert res is False
    return proof


def random_unsat(seed: int) -> tuple[int, list[list[int]]]:
    rng = random.Random(seed)
    while True:
        cls = [rng.sample(range(1, 31), 3) for _ in range(170)]
        cls = [[x * rng.choice((1, -1)) for x in c] for c in cls]
        if _run(cls, 10 ** 6)[0] is False:
            return 30, cls


@pytest.mark.parametrize("n", [4, 5])
def test_cadical_lrat_proofs_verified_and_their_lemmas_are_rup_for_dratify(n: int) -> None:
    nvars, cls = php(n)
    proof = lrat_proof(cls)
    cnf = dimacs(nvars, cls)
    rep = check_lrat(cnf, proof)
    assert rep.verdict == "s VERIFIED" and rep.counts["lemmas"] > 0
    dratify = pytest.importorskip("dratify")
    drup = to_drup(cls, proof)
    assert dratify.check_proof(dratify.parse_dimacs(cnf), drup).ok
    assert check_proof(cnf, drup).verdict == "s VERIFIED"


def test_proofs_are_written_in_standard_numbering() -> None:
    """CaDiCaL strengthens clauses by the units read before them and numbers those lemmas
    in between the original clauses; the proof is renumbered: clauses 1..m, lemmas from
    m + 1 on, increasing."""
    cls = [[1], [1, 2], [-1, 2], [-2, 3], [-3, -2]]
    proof = lrat_proof(cls)
    ids = [int(line.split()[0]) for line in proof.splitlines() if line.split()[1] != "d"]
    assert ids == list(range(6, 6 + len(ids)))
    assert check_lrat(dimacs(3, cls), proof).verdict == "s VERIFIED"


def _mutants(proof: str, rng: random.Random) -> list[str]:
    lines = proof.splitlines()
    adds = [i for i, x in enumerate(lines) if x.split()[1] != "d"]
    out = []
    for _ in range(12):
        i = rng.choice(adds)
        nums = lines[i].split()
        cut = nums.index("0")
        lemma, hints = nums[1:cut], nums[cut + 1:-1]
        kind = rng.randrange(3)
        if kind == 0 and hints:  # drop a hint
            hints = [h for k, h in enumerate(hints) if k != rng.randrange(len(hints))]
        elif kind == 1 and lemma:  # drop a literal: a stronger lemma
            lemma = [x for k, x in enumerate(lemma) if k != rng.randrange(len(lemma))]
        else:  # drop the step
            out.append("\n".join(x for k, x in enumerate(lines) if k != i) + "\n")
            continue
        bad = " ".join([nums[0], *lemma, "0", *hints, "0"])
        out.append("\n".join(lines[:i] + [bad] + lines[i + 1:]) + "\n")
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mutated_proofs_verified_only_when_dratify_agrees(seed: int) -> None:
    """Soundness against the independent checker: whatever LRAT proof the checker accepts
    (the solver's, or one with a hint, a literal or a step dropped) has lemmas that
    dratify verifies as a DRUP refutation."""
    dratify = pytest.importorskip("dratify")
    nvars, cls = random_unsat(seed)
    cnf = dimacs(nvars, cls)
    proof = lrat_proof(cls)
    assert check_lrat(cnf, proof).verdict == "s VERIFIED"
    rejected = 0
    for bad in _mutants(proof, random.Random(seed)):
        rep = check_lrat(cnf, bad)
        assert rep.verdict in ("s VERIFIED", "s REJECTED")
        if rep.verdict == "s VERIFIED":
            assert dratify.check_proof(dratify.parse_dimacs(cnf), to_drup(cls, bad)).ok
        rejected += rep.verdict == "s REJECTED"
    assert rejected > 0


CNF = "p cnf 2 4\n1 2 0\n-1 2 0\n1 -2 0\n-1 -2 0\n"
GOOD = "5 2 0 1 2 0\n6 0 5 3 4 0\n"


@pytest.mark.parametrize("proof,verdict,why", [
    (GOOD, "s VERIFIED", ""),
    ("5 2 0 1 2 0\n5 d 1 2 0\n6 0 5 3 4 0\n", "s VERIFIED", ""),  # deleting used clauses
    ("5 2 0 1 2 0\n", "s REJECTED", "does not derive the empty clause"),
    ("5 2 0 1 0\n6 0 5 3 4 0\n", "s REJECTED", "without a conflict"),
    ("5 2 0 1 2 0\n6 0 5 3 0\n", "s REJECTED", "without a conflict"),
    ("5 2 0 3 2 0\n6 0 5 3 4 0\n", "s REJECTED", "hint 3 is satisfied"),
    ("5 0 1 0\n", "s REJECTED", "two open literals"),
    ("5 2 0 1 2 0\n6 0 7 3 4 0\n", "s REJECTED", "not a live clause"),
    ("5 d 3 0\n5 2 0 1 2 0\n6 0 5 3 4 0\n", "s REJECTED", "not a live clause"),
    ("5 1 2 0 1 0\n6 2 0 1 2 0\n7 0 6 3 4 0\n", "s VERIFIED", ""),  # a copy of clause 1
    ("5 -1 0 4 1 0\n6 0 5 1 2 0\n", "s REJECTED", "hint 1 is satisfied"),
    ("6 2 0 1 2 0\n5 0 6 3 4 0\n", "s UNUSABLE", "does not exceed"),
    ("4 2 0 1 2 0\n5 0 4 3 0\n", "s UNUSABLE", "does not exceed 4"),  # an original's id
    ("5 2 0 1 -2 0\n6 0 5 3 4 0\n", "s UNUSABLE", "RAT hints"),
    ("5 3 0 1 2 0\n6 0 5 3 4 0\n", "s UNUSABLE", "beyond 2 variables"),
    ("5 2 0 1 2\n6 0 5 3 4 0\n", "s UNUSABLE", "ID LITERALS 0 HINTS 0"),
    (GOOD + "7 x 0\n", "s UNUSABLE", "not an integer"),
    (GOOD + "7 1 0\n", "s UNUSABLE", "ID LITERALS 0 HINTS 0"),
])
def test_crafted_proofs(proof: str, verdict: str, why: str) -> None:
    rep = check_lrat(CNF, proof)
    assert rep.verdict == verdict, rep.reasons
    assert why in " ".join(rep.reasons)


def test_check_proof_verb_reads_lrat_by_suffix(tmp_path: Path) -> None:
    (tmp_path / "f.cnf").write_text(CNF)
    for name, text, code in (("good.lrat", GOOD, 0), ("bad.lrat", "5 2 0 1 0\n", 1),
                             ("junk.lrat", "\x00\x01", 2)):
        (tmp_path / name).write_text(text)
        proc = subprocess.run([sys.executable, "-m", "exactmem", "check-proof",
                               str(tmp_path / "f.cnf"), str(tmp_path / name)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == code, proc.stderr
        assert "Traceback" not in proc.stderr
    drup = subprocess.run([sys.executable, "-m", "exactmem", "check-proof", "--format", "drup",
                           str(tmp_path / "f.cnf"), str(tmp_path / "good.lrat")],
                          capture_output=True, text=True, timeout=120)
    assert drup.returncode != 0  # the same text read as DRUP is not a refutation


def test_proof_files_are_streamed_and_bad_bytes_unusable(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from exactmem.checker.proofs import lrat

    (tmp_path / "f.cnf").write_text(CNF)
    good, bad = tmp_path / "good.lrat", tmp_path / "bad.lrat"
    good.write_text(GOOD)
    assert lrat.check_lrat_files(str(tmp_path / "f.cnf"), str(good)).verdict == "s VERIFIED"
    bad.write_bytes(GOOD.encode() + "7 \u00e9 0\n".encode())
    rep = lrat.check_lrat_files(str(tmp_path / "f.cnf"), str(bad))
    assert rep.verdict == "s UNUSABLE" and "not ASCII" in rep.reasons[0]
    monkeypatch.setattr(lrat, "MAX_LINE", 8)
    rep = lrat.check_lrat_files(str(tmp_path / "f.cnf"), str(good))
    assert rep.verdict == "s UNUSABLE" and "longer than 8 bytes" in rep.reasons[0]
    rep = lrat.check_lrat_files(str(tmp_path / "f.cnf"), str(tmp_path))
    assert rep.verdict == "s UNUSABLE" and "not a regular file" in rep.reasons[0]
