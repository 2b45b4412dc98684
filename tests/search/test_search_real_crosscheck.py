"""Real-valued search pieces of the lower-bound probe: a fixed input map, Z3's resource
limit, and cvc5 as a second opinion on refutations."""

from __future__ import annotations

from fractions import Fraction

import pytest

from exactmem.model.dataset import Dataset
from exactmem.model.evaluate import evaluate
from exactmem.model.spec import Linear
from exactmem.search.drive.query import run_query
from exactmem.search.encode.encoding import EncodeOptions, encode
from exactmem.search.question.outcome import Found, Infeasible, Unknown
from exactmem.search.question.shape import Shape
from exactmem.search.solvers import cvc5_backend, z3_backend

XOR = Dataset("next-token", "vectors",
              tuple(((Fraction(a), Fraction(b)),) for a, b in ((0, 0), (1, 0), (0, 1), (1, 1))),
              (0, 1, 1, 0), dim=2)
ROT = ((Fraction(0), Fraction(1)), (Fraction(2), Fraction(0)))


def test_cvc5_agrees_with_z3_on_xor_refutations() -> None:
    pytest.importorskip("cvc5")
    p = encode(XOR, Shape(1, 1, 2, 2, 0, False, "scalar"))  # no hidden unit: infeasible
    assert isinstance(z3_backend.solve(p, 60), Infeasible)
    assert cvc5_backend.refutes(p, 5_000_000) == "unsat"
    # one hidden unit, still infeasible: cvc5 may give up, never contradict
    p = encode(XOR, Shape(1, 1, 2, 2, 1, False, "scalar"))
    assert isinstance(z3_backend.solve(p, 60), Infeasible)
    assert cvc5_backend.refutes(p, 20_000) in ("unsat", "unknown")


def test_cvc5_never_refutes_a_satisfiable_problem() -> None:
    pytest.importorskip("cvc5")
    p = encode(XOR, Shape(1, 1, 2, 2, 2, False, "scalar"))  # width 2 memorizes XOR
    assert cvc5_backend.refutes(p, 20_000) != "unsat"


def test_a_fixed_input_map_is_used_and_not_searched() -> None:
    opts = EncodeOptions(fixed_embed=ROT)
    assert "embed" not in encode(XOR, Shape(1, 1, 2, 2, 1, True, "argmax"), opts).params
    res = run_query(XOR, Shape(1, 1, 2, 2, 1, True, "argmax"), opts, timeout_s=60,
                    portfolio=False)
    assert res.status == "found" and res.certificate is not None
    assert isinstance(res.outcome, Found)
    spec = res.outcome.witness
    first = spec.layers[0]
    assert isinstance(first, Linear) and first.map.weight.to_fractions() == [list(r) for r in ROT]
    assert evaluate(spec, XOR).memorized


def test_z3_resource_limit_gives_unknown_and_says_so() -> None:
    p = encode(XOR, Shape(1, 1, 2, 2, 1, False, "scalar"))
    out = z3_backend.solve(p, 60, rlimit=1)
    assert isinstance(out, Unknown) and "rlimit 1" in out.reason
