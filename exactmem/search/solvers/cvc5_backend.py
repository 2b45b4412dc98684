"""A second opinion on real-valued refutations: the only module that imports ``cvc5``.

:func:`refutes` translates a :class:`~exactmem.search.encode.formula.Problem` to cvc5's API
(quantifier-free nonlinear real arithmetic with Boolean structure, decided by cvc5's
cylindrical algebraic coverings) and asks whether it is unsatisfiable, under cvc5's
deterministic resource limit.  It is written independently of the Z3 translation so that
a "z3 said unsat" can be confirmed by a solver with a different code base; it never
produces witnesses (those come from Z3 and are certified by the checker).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Literal

from exactmem.search.encode.formula import And, Atom, BoolVar, Formula, Not, Or, Poly, Problem

Answer = Literal["unsat", "sat", "unknown"]


def _cvc5() -> Any:
    from exactmem.optional import require

    return require("cvc5", "the cvc5 cross-check")


def version() -> str:
    return f"cvc5 {_cvc5().__version__}"


class _Translator:
    def __init__(self, cvc5: Any, tm: Any, problem: Problem) -> None:
        self.k, self.tm = cvc5.Kind, tm
        real, boolean = tm.getRealSort(), tm.getBooleanSort()
        self.reals = [tm.mkConst(real, f"x{i}") for i in range(len(problem.reals))]
        self.bools = [tm.mkConst(boolean, f"b{i}") for i in range(len(problem.bools))]

    def num(self, c: Fraction) -> Any:
        return self.tm.mkReal(c.numerator, c.denominator)

    def poly(self, p: Poly) -> Any:
        k, tm = self.k, self.tm
        terms = []
        for mono, c in p.terms.items():
            factors = [self.reals[i] for i in mono]
            if c != 1 or not factors:
                factors.insert(0, self.num(c))
            terms.append(factors[0] if len(factors) == 1 else tm.mkTerm(k.MULT, *factors))
        if not terms:
            return self.num(Fraction(0))
        return terms[0] if len(terms) == 1 else tm.mkTerm(k.ADD, *terms)

    def formula(self, f: Formula) -> Any:
        k, tm = self.k, self.tm
        if isinstance(f, Atom):
            rel = k.EQUAL if f.rel == "==" else k.GEQ
            return tm.mkTerm(rel, self.poly(f.poly), self.num(Fraction(0)))
        if isinstance(f, BoolVar):
            return self.bools[f.index]
        if isinstance(f, Not):
            return tm.mkTerm(k.NOT, self.formula(f.arg))
        if isinstance(f, And | Or):
            args = [self.formula(a) for a in f.args]
            if len(args) < 2:
                empty = tm.mkTrue() if isinstance(f, And) else tm.mkFalse()
                return args[0] if args else empty
            return tm.mkTerm(k.AND if isinstance(f, And) else k.OR, *args)
        raise TypeError(f"not a formula: {f!r}")


def refutes(problem: Problem, rlimit: int = 2_000_000) -> Answer:
    """cvc5's answer on ``problem`` ("unsat": cvc5 also finds no solution) within its
    deterministic resource budget ``rlimit`` (cvc5's ``rlimit`` option) per attempt.

    First attempt: cylindrical algebraic coverings alone (``nl-ext=none``), on these
    problems much faster than cvc5's default; it may answer "incomplete", then cvc5's
    default nonlinear strategy (coverings with incremental linearisation) tries."""
    first = _attempt(problem, rlimit, {"nl-cov": "true", "nl-ext": "none"})
    return first if first != "unknown" else _attempt(problem, rlimit, {})


def _attempt(problem: Problem, rlimit: int, options: dict[str, str]) -> Answer:
    cvc5 = _cvc5()
    tm = cvc5.TermManager()
    solver = cvc5.Solver(tm)
    solver.setLogic("QF_NRA")
    solver.setOption("rlimit", str(rlimit))
    for key, value in options.items():
        solver.setOption(key, value)
    tr = _Translator(cvc5, tm, problem)
    for f in problem.constraints:
        solver.assertFormula(tr.formula(f))
    res = solver.checkSat()
    if res.isUnsat():
        return "unsat"
    if res.isSat():
        return "sat"
    return "unknown"
