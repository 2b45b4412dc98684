"""The Z3 backend: the only module that imports ``z3`` (lazily).

:func:`solve` translates a :class:`~exactmem.search.encode.formula.Problem` to Z3 (nonlinear real
arithmetic with Boolean structure), runs it under a per-query timeout and returns an
exact :class:`Assignment`, ``Infeasible("z3")`` or ``Unknown(reason)``.

Z3 may return algebraic (irrational) values for nonlinear problems.  Then the model is
made rational by re-solving: the Boolean case split of the model is fixed, and each
weight in turn is fixed to a rational (its exact value when rational, else rational
approximations of increasing precision) while the rest stays satisfiable.
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

from exactmem.search.encode.formula import And, Atom, BoolVar, Formula, Not, Or, Poly, Problem
from exactmem.search.question.outcome import Assignment, BackendOutcome, Infeasible, Unknown

NAME = "z3"


def _z3() -> Any:
    from exactmem.optional import require

    return require("z3", "the search")


def version() -> str:
    return str(_z3().get_version_string())


class _Translator:
    def __init__(self, problem: Problem, ctx: Any) -> None:
        z3 = _z3()
        self.z3, self.ctx = z3, ctx
        self.reals = [z3.Real(f"x{i}", ctx) for i in range(len(problem.reals))]
        self.bools = [z3.Bool(f"b{i}", ctx) for i in range(len(problem.bools))]

    def num(self, c: Fraction) -> Any:
        return self.z3.RealVal(f"{c.numerator}/{c.denominator}", self.ctx)

    def poly(self, p: Poly) -> Any:
        z3 = self.z3
        terms = []
        for mono, c in p.terms.items():
            factors = [self.reals[i] for i in mono]
            if not factors:
                terms.append(self.num(c))
                continue
            prod = factors[0] if len(factors) == 1 else z3.Product(*factors)
            terms.append(prod if c == 1 else self.num(c) * prod)
        if not terms:
            return self.num(Fraction(0))
        return terms[0] if len(terms) == 1 else z3.Sum(*terms)

    def formula(self, f: Formula) -> Any:
        z3 = self.z3
        if isinstance(f, Atom):
            e = self.poly(f.poly)
            return e == 0 if f.rel == "==" else e >= 0
        if isinstance(f, BoolVar):
            return self.bools[f.index]
        if isinstance(f, Not):
            return z3.Not(self.formula(f.arg))
        if isinstance(f, And):
            return z3.And(*[self.formula(a) for a in f.args]) if f.args else \
                z3.BoolVal(True, self.ctx)
        if isinstance(f, Or):
            return z3.Or(*[self.formula(a) for a in f.args]) if f.args else \
                z3.BoolVal(False, self.ctx)
        raise TypeError(f"not a formula: {f!r}")


def _rational(z3: Any, val: Any) -> Fraction | None:
    if z3.is_rational_value(val):
        return Fraction(val.numerator_as_long(), val.denominator_as_long())
    if z3.is_int_value(val):
        return Fraction(val.as_long())
    return None


def _approximations(z3: Any, val: Any) -> list[Fraction]:
    out: list[Fraction] = []
    for digits in (4, 8, 16, 32):
        a = _rational(z3, val.approx(digits))
        if a is not None:
            for cand in (a.limit_denominator(10 ** digits), a):
                if cand not in out:
                    out.append(cand)
    return out


def _check(z3: Any, ctx: Any, assertions: list[Any], deadline: float,
           rlimit: int | None = None) -> tuple[str, Any]:
    left = deadline - time.monotonic()
    if left <= 0:
        return "unknown", "timeout"
    s = z3.Solver(ctx=ctx)
    s.set("timeout", max(1, int(left * 1000)))
    if rlimit is not None:
        s.set("rlimit", rlimit)
    s.add(*assertions)
    r = s.check()
    if r == z3.sat:
        return "sat", s.model()
    if r == z3.unsat:
        return "unsat", None
    return "unknown", s.reason_unknown()


def solve(problem: Problem, timeout_s: float = 60.0, seed: int = 0,
          rlimit: int | None = None, rationalise: bool = True) -> BackendOutcome:
    """Decide ``problem`` with Z3 within ``timeout_s`` seconds (wall clock) and, when
    given, Z3's resource count ``rlimit`` (deterministic: the same answer under any load
    while the wall-clock limit is not reached; the re-solves that make an algebraic model
    rational get the same limit each).  ``rationalise=False``: a satisfiable problem
    answers ``Assignment(())`` (only the verdict is wanted)."""
    z3 = _z3()
    deadline = time.monotonic() + timeout_s
    ctx = z3.Context()
    z3.set_param("smt.random_seed", seed)
    tr = _Translator(problem, ctx)
    assertions = [tr.formula(f) for f in problem.constraints]
    status, model = _check(z3, ctx, assertions, deadline, rlimit)
    if status == "unsat":
        return Infeasible("z3", f"z3 {version()}: unsat" + (f" (rlimit {rlimit})"
                                                                 if rlimit else ""))
    if status == "unknown":
        return Unknown(f"z3: {model}" + (f" (rlimit {rlimit})" if rlimit else ""))
    if not rationalise:
        return Assignment(())
    values = [_rational(z3, model.eval(v, model_completion=True)) for v in tr.reals]
    if all(values[i] is not None for i in problem.param_vars):
        return Assignment(_complete(values))
    return _rationalise(z3, ctx, tr, problem, assertions, model, deadline, rlimit)


def _complete(values: list[Fraction | None]) -> tuple[Fraction, ...]:
    return tuple(v if v is not None else Fraction(0) for v in values)


def _rationalise(z3: Any, ctx: Any, tr: _Translator, problem: Problem, assertions: list[Any],
                 model: Any, deadline: float, rlimit: int | None = None) -> BackendOutcome:
    """Fix the case split, then every weight to a rational, keeping satisfiability."""
    fixed = list(assertions)
    for b in tr.bools:
        val = model.eval(b, model_completion=True)
        fixed.append(b == val)
    for i in problem.param_vars:
        v = tr.reals[i]
        val = model.eval(v, model_completion=True)
        exact = _rational(z3, val)
        candidates = [exact] if exact is not None else _approximations(z3, val)
        for cand in candidates:
            status, new_model = _check(z3, ctx, fixed + [v == tr.num(cand)], deadline, rlimit)
            if status == "sat":
                fixed.append(v == tr.num(cand))
                model = new_model
                break
            if status == "unknown" and (new_model == "timeout" or "resource" in str(new_model)):
                return Unknown(f"{new_model} while making the model rational")
        else:
            return Unknown(f"z3 returned an algebraic model and no rational value of "
                           f"{problem.reals[i]} keeps it satisfiable")
    values = [_rational(z3, model.eval(v, model_completion=True)) for v in tr.reals]
    return Assignment(_complete(values), rational_resolve=True)
