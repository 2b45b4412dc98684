"""The second real-valued encoding and the cross-check of every refutation."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from exactmem.model.dataset import Dataset, save_dataset
from exactmem.model.evaluate import evaluate
from exactmem.search.drive.query import run_query
from exactmem.search.drive.results import ExhaustiveRun
from exactmem.search.encode.encoding import EncodeOptions, encode
from exactmem.search.encode.encoding_positions import encode_positions
from exactmem.search.encode.formula import Problem
from exactmem.search.question.outcome import Assignment, Found, Infeasible, Unknown
from exactmem.search.question.shape import Shape
from exactmem.search.solvers import crosscheck, z3_backend
from exactmem.search.solvers.crosscheck import Verdicts

XOR = Dataset("next-token", "vectors",
              tuple(((Fraction(a), Fraction(b)),) for a, b in ((0, 0), (1, 0), (0, 1), (1, 1))),
              (0, 1, 1, 0), dim=2)


def tokens(seqs: tuple[tuple[int, ...], ...], labels: tuple[int, ...], vocab: int) -> Dataset:
    return Dataset("next-token", "token-ids", seqs, labels, vocab_size=vocab)


# small cases, each decided by Z3 in under a second with either encoding, but XOR with two
# hidden units and two query rows, which the positions encoding decides in about 5 s here
CASES = [
    (tokens(((0, 0), (1, 0), (1, 1)), (1, 0, 1), 2), Shape(1, 1, 1, 1, 1, False, "scalar")),
    (tokens(((0, 0), (0, 1), (1, 0)), (1, 0, 1), 2), Shape(1, 1, 1, 1, 1, True, "scalar")),
    (tokens(((0, 0), (1, 0), (2, 2)), (0, 1, 0), 3), Shape(1, 1, 1, 1, 0, True, "argmax")),
    (tokens(((0, 1), (1, 2), (2, 0)), (1, 0, 0), 3), Shape(1, 1, 1, 1, 1, False, "argmax")),
    (tokens(((0, 0), (1, 0), (0, 1), (1, 1)), (0, 1, 1, 0), 2),
     Shape(1, 1, 1, 1, 1, False, "scalar")),
    (tokens(((0, 0), (0, 2), (2, 0), (2, 1)), (0, 1, 0, 0), 3),
     Shape(1, 1, 1, 1, 1, True, "scalar")),
    (XOR, Shape(1, 1, 2, 2, 0, False, "scalar")),
    (XOR, Shape(1, 1, 2, 2, 2, False, "scalar")),
    (XOR, Shape(1, 1, 2, 1, 0, True, "argmax")),
]


SOLVE_LIMIT = 600  # seconds: a bound for a loaded machine, not the expected time (5 s at most)


def verdict(problem: Problem) -> str:
    out = z3_backend.solve(problem, SOLVE_LIMIT, rationalise=False)
    return "sat" if isinstance(out, Assignment) else \
        "unsat" if isinstance(out, Infeasible) else "unknown"


def test_the_two_encodings_agree_on_small_cases_both_ways() -> None:
    seen = set()
    for ds, shape in CASES:
        first, second = verdict(encode(ds, shape)), verdict(encode_positions(ds, shape))
        assert first == second != "unknown", (shape.label(), ds.labels)
        seen.add(first)
    assert seen == {"sat", "unsat"}  # both outcomes are exercised


def test_a_model_of_the_second_encoding_is_a_network_the_checker_verifies() -> None:
    ds, shape = CASES[3]
    res = run_query(ds, shape, encoding="positions", portfolio=False, timeout_s=60)
    assert res.status == "found" and isinstance(res.outcome, Found)
    assert evaluate(res.outcome.witness, ds).memorized
    assert dict(res.extra)["encoding"] == "positions"


def test_ties_are_averaged_over_tied_positions() -> None:
    # (0, 1, 1) read at token 1: with every score tied the head returns (e0 + 2 e1) / 3,
    # with unique winners e0 or e1; a 1-d network with uniform attention and no
    # feed-forward can only separate these two sequences through the 1/3 vs 2/3 weights
    ds = tokens(((0, 1, 1), (0, 0, 1)), (0, 1), 2)
    shape = Shape(1, 1, 1, 1, 0, True, "scalar")
    uniform = EncodeOptions(uniform=True)
    assert verdict(encode_positions(ds, shape, uniform)) == "sat"
    assert verdict(encode(ds, shape, uniform)) == "sat"
    same = tokens(((0, 1, 1), (1, 0, 1)), (0, 1), 2)  # equal multiset, equal last token
    assert verdict(encode_positions(same, shape)) == "unsat"


def test_margin_restriction_and_bound_are_encoded() -> None:
    ds, shape = CASES[2]
    assert verdict(encode_positions(ds, shape, EncodeOptions(ties="margin"))) == \
        verdict(encode(ds, shape, EncodeOptions(ties="margin")))
    tight = EncodeOptions(bound=Fraction(1, 100))  # scalar label 1 is out of reach
    ds1, shape1 = CASES[1]
    assert verdict(encode_positions(ds1, shape1, tight)) == "unsat"


def test_a_refutation_records_who_agreed() -> None:
    pytest.importorskip("cvc5")
    res = run_query(XOR, Shape(1, 1, 2, 2, 0, False, "scalar"), timeout_s=60,
                    rlimit=5_000_000, cvc5_rlimit=5_000_000)
    assert isinstance(res.outcome, Infeasible)
    assert res.outcome.proof_kind == "z3+enc2+cvc5"
    out = res.as_dict()
    assert out["proof_kind"] == "z3+enc2+cvc5" and out["rlimit"] == 5_000_000
    assert out["crosscheck"] == {"enc2": "unsat", "cvc5": "unsat"}
    alone = run_query(XOR, Shape(1, 1, 2, 2, 0, False, "scalar"), timeout_s=60,
                      crosscheck=False)
    assert isinstance(alone.outcome, Infeasible) and alone.outcome.proof_kind == "z3"


def test_a_disagreeing_second_encoding_makes_the_answer_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def tampered(ds: Dataset, shape: Shape, opts: EncodeOptions | None = None) -> Problem:
        return Problem()  # no constraint: satisfiable, so it contradicts every refutation

    monkeypatch.setattr(crosscheck, "encode_positions", tampered)
    res = run_query(XOR, Shape(1, 1, 2, 2, 0, False, "scalar"), timeout_s=60,
                    encoding="multiset", cvc5_rlimit=None)
    assert isinstance(res.outcome, Unknown) and "disagreement" in res.outcome.reason
    assert "enc2 found it satisfiable" in res.outcome.reason
    assert res.as_dict()["crosscheck"] == {"enc2": "sat", "cvc5": "skipped"}


def test_verdicts_name_the_proof_kind() -> None:
    first = Infeasible("z3", "z3: unsat")
    assert Verdicts("unsat", "unsat").outcome(first) == Infeasible("z3+enc2+cvc5", "z3: unsat")
    assert Verdicts("unknown", "unsat").outcome(first) == Infeasible("z3+cvc5", "z3: unsat")
    assert Verdicts("unsat", "skipped").outcome(first) == Infeasible("z3+enc2", "z3: unsat")
    assert Verdicts("unknown", "unknown").outcome(first) == first
    out = Verdicts("unsat", "sat").outcome(first)
    assert isinstance(out, Unknown) and "cvc5 found it satisfiable" in out.reason


def test_a_stored_unknown_is_retried_under_a_larger_rlimit_only() -> None:
    rec = {"status": "unknown", "timeout": 60.0, "rlimit": 1000}
    q = ExhaustiveRun(((0, 1),), 2, timeout_s=60.0, rlimit=1000)
    assert not q.retry(rec)
    assert ExhaustiveRun(((0, 1),), 2, timeout_s=60.0, rlimit=2000).retry(rec)
    assert not q.retry({**rec, "status": "infeasible"})


def test_cli_records_rlimit_encoding_and_proof_kind(tmp_path: Path) -> None:
    data = tmp_path / "xor.json"
    save_dataset(XOR, data)
    proc = subprocess.run([sys.executable, "-m", "exactmem", "search", str(data), "--readout",
                           "scalar", "--residual", "off", "--d-model", "2", "--rlimit",
                           "5000000", "--encoding", "positions", "--cvc5-rlimit", "0",
                           "--json", "--quiet"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["rlimit"] == 5_000_000 and rep["encoding"] == "positions"
    (entry,) = rep["sizes"]
    assert entry["status"] == "infeasible" and entry["proof_kind"] == "z3+enc2"
    assert entry["crosscheck"] == {"enc2": "unsat", "cvc5": "skipped"}
    bad = subprocess.run([sys.executable, "-m", "exactmem", "search", str(data), "--rlimit",
                          "-1"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--rlimit" in bad.stderr and "Traceback" not in bad.stderr


def test_the_other_encoding_answers_when_the_first_gives_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Problem] = []
    real_encode, real_solve = crosscheck.encode_positions, z3_backend.solve

    def recording(ds: Dataset, shape: Shape, opts: EncodeOptions | None = None) -> Problem:
        made.append(real_encode(ds, shape, opts))
        return made[-1]

    def stubborn(problem: Problem, *args: object, **kwargs: object) -> object:
        if any(problem is p for p in made):
            return Unknown("z3: forced")
        return real_solve(problem, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(crosscheck, "encode_positions", recording)
    monkeypatch.setattr(z3_backend, "solve", stubborn)
    ds, shape = CASES[3]  # satisfiable
    res = run_query(ds, shape, portfolio=False, timeout_s=60, rlimit=50_000_000)
    assert res.status == "found" and dict(res.extra)["decided_by"] == "multiset"
    refuted = run_query(XOR, Shape(1, 1, 2, 2, 0, False, "scalar"), portfolio=False,
                        timeout_s=60, rlimit=50_000_000, cvc5_rlimit=None)
    assert isinstance(refuted.outcome, Infeasible) and refuted.outcome.proof_kind == "z3"
    assert dict(refuted.extra)["decided_by"] == "multiset"
    none = run_query(ds, shape, portfolio=False, timeout_s=60, fallback=False)
    assert isinstance(none.outcome, Unknown) and "forced" in none.outcome.reason
