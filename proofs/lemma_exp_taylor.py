"""The inequalities behind the rigorous exp and softmax bounds (exactmem.arith.expbounds,
exactmem.arith.softmax and the checker's exp re-derivation).

Notation: ``T_K(r) = sum_{k<=K} r^k/k!``, ``R_K(r) = r^(K+1)/(K+1)!``.

* ``taylor-lower``: for ``r >= 0``, ``T_K(r) <= exp(r)``.  Proof: ``f(r) = exp(-r) T_K(r)``
  has ``f(0) = 1`` and ``f'(r) = -exp(-r) r^K/K! <= 0``; sympy checks the derivative
  identity for symbolic ``K`` (from ``d/dr r^k/k! = r^(k-1)/(k-1)!``, also checked).
* ``taylor-upper``: for ``r >= 0``, ``exp(r) (1 - R_K(r)) <= T_K(r)``, so
  ``exp(r) <= T_K(r)/(1 - R_K(r))`` when ``R_K(r) < 1``.  Proof: ``h(r) = exp(-r) T_K(r)
  + R_K(r) - 1`` has ``h(0) = 0`` and ``h'(r) = (r^K/K!)(1 - exp(-r)) >= 0``; sympy checks
  the identity for symbolic ``K``.
* ``rounding-steps`` (Z3, nonlinear real arithmetic): squaring and reciprocals of positive
  enclosures keep them enclosures, and ``x/(x+y)`` is increasing in ``x`` and decreasing
  in ``y`` for positive arguments (the softmax row bound).
* ``taylor-concrete``: the two inequalities hold at every rational point of a grid for
  ``K = 0..12`` against sympy's exact ``exp`` evaluated by interval comparison.
"""

from __future__ import annotations

from .framework import Lemma, Outcome


def _symbolic_identities() -> tuple[bool, bool, bool]:
    import sympy as sp

    r = sp.Symbol("r", positive=True)
    k = sp.Symbol("k", integer=True, positive=True)
    K = sp.Symbol("K", integer=True, nonnegative=True)
    tm1 = sp.Symbol("Tm1")  # T_{K-1}(r), which is also T_K'(r)
    # termwise derivative: d/dr r^k/k! = r^(k-1)/(k-1)!
    term = sp.simplify(sp.diff(r ** k / sp.factorial(k), r) - r ** (k - 1) / sp.factorial(k - 1))
    termwise = sp.simplify(sp.combsimp(term)) == 0
    t_k = tm1 + r ** K / sp.factorial(K)  # T_K = T_{K-1} + r^K/K!
    d_t_k = tm1  # T_K' = T_{K-1} (termwise derivative above; T_0' = 0 with T_{-1} = 0)
    r_k = r ** (K + 1) / sp.factorial(K + 1)
    d_r_k = sp.combsimp(sp.diff(r_k, r))
    # lower: d/dr (exp(-r) T_K) = -exp(-r) T_K + exp(-r) T_K'
    f_prime = -sp.exp(-r) * t_k + sp.exp(-r) * d_t_k
    lower = sp.simplify(f_prime + sp.exp(-r) * r ** K / sp.factorial(K)) == 0
    # upper: d/dr (exp(-r) T_K + R_K - 1)
    h_prime = -sp.exp(-r) * t_k + sp.exp(-r) * d_t_k + d_r_k
    upper = sp.simplify(sp.combsimp(h_prime - r ** K / sp.factorial(K) * (1 - sp.exp(-r)))) == 0
    return termwise, lower, upper


def _check_lower() -> Outcome:
    termwise, lower, _ = _symbolic_identities()
    if termwise and lower:
        return Outcome("proved", "sympy: f' = -exp(-r) r^K/K! <= 0, f(0) = 1, symbolic K")
    return Outcome("failed", f"identities: termwise={termwise}, lower={lower}")


def _check_upper() -> Outcome:
    termwise, _, upper = _symbolic_identities()
    if termwise and upper:
        return Outcome("proved", "sympy: h' = (r^K/K!)(1 - exp(-r)) >= 0, h(0) = 0, symbolic K")
    return Outcome("failed", f"identities: termwise={termwise}, upper={upper}")


def _check_rounding() -> Outcome:
    import z3

    lo, x, hi, y, x2, y2 = z3.Reals("lo x hi y x2 y2")
    claims = {
        "square": z3.Implies(z3.And(0 < lo, lo <= x, x <= hi), z3.And(lo * lo <= x * x,
                                                                        x * x <= hi * hi)),
        "reciprocal": z3.Implies(z3.And(0 < lo, lo <= x, x <= hi),
                                 z3.And(1 / hi <= 1 / x, 1 / x <= 1 / lo)),
        "ratio": z3.Implies(z3.And(0 < x2, x2 <= x, 0 < y, y <= y2),
                            x2 / (x2 + y2) <= x / (x + y)),
    }
    for name, claim in claims.items():
        s = z3.Solver()
        s.set("timeout", 20000)
        s.add(z3.Not(claim))
        res = s.check()
        if res == z3.sat:
            return Outcome("failed", f"{name}: counterexample {s.model()}")
        if res != z3.unsat:
            return Outcome("unknown", f"{name}: z3 returned {res}")
    return Outcome("proved", "z3: negations of square, reciprocal and ratio monotonicity unsat")


def _check_concrete() -> Outcome:
    import sympy as sp

    for K in range(13):
        for num in range(0, 41, 3):
            r = sp.Rational(num, 8)
            t = sum((r ** k / sp.factorial(k) for k in range(K + 1)), sp.Integer(0))
            rem = r ** (K + 1) / sp.factorial(K + 1)
            if not bool(t <= sp.exp(r)):
                return Outcome("failed", f"lower fails at K={K}, r={r}")
            if rem < 1 and not bool(sp.exp(r) * (1 - rem) <= t):
                return Outcome("failed", f"upper fails at K={K}, r={r}")
    return Outcome("proved", "K = 0..12 on a grid of 14 rationals in [0, 5]")


LEMMAS = [
    Lemma("exp-taylor-lower", "for r >= 0 and every K: T_K(r) <= exp(r)", _check_lower),
    Lemma("exp-taylor-upper",
          "for r >= 0 and every K: exp(r) (1 - r^(K+1)/(K+1)!) <= T_K(r)", _check_upper),
    Lemma("exp-rounding-steps",
          "squaring/reciprocal keep enclosures; x/(x+y) is monotone (softmax row bound)",
          _check_rounding),
    Lemma("exp-taylor-concrete", "both Taylor inequalities on a rational grid, K <= 12",
          _check_concrete),
]
