"""The LP readout of ``dana2024-aot`` (docs/constructions/dana2024.md, "The LP readout"): the
map ``[M_0 | O]`` chosen by a linear program (HiGHS through scipy) over the feature matrix,
rounded to dyadics; the network built from it is certified exactly elsewhere, so the solver
is never trusted.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from exactmem.errors import ConstructionError
from exactmem.optional import require

LP_BITS = 24  # the LP readout is rounded to multiples of 2^-LP_BITS
LP_METHOD = "highs-ipm"


def lp_readout(g: list[list[Fraction]], labels: list[int], w_u: list[list[Fraction]],
               subset: float = 4.0, bound: float = 1024.0,
               ) -> tuple[list[list[Fraction]], dict[str, Any]]:
    """The readout ``X = [M_0 | O]`` (``d x D``) chosen by a linear program instead of a
    square solve.  Candidates: the ``subset * D`` associations with the largest margin under
    the least-squares readout (targets ``w_y(t)``).  With ``z_t = X G(t)`` and logits
    ``W_U z_t``, the LP minimizes ``sum_t xi_t`` over the candidates subject to
    ``(w_y(t) - w_c) . z_t >= 1 - xi_t`` for *every* other class ``c``, ``xi >= 0`` and
    ``|X_ij| <= bound``: a hinge relaxation of fitting as many candidates as possible with
    margin 1 (``xi_t = 0``: fitted; the square solve fits exactly ``D`` chosen ones).  Over
    all sequences at once the relaxation's optimum can be ``X = 0`` (every ``xi_t = 1``)
    when the capacity is far below their number, hence the candidates.  HiGHS (scipy,
    interior point) solves in floats; ``X`` is rounded to multiples of ``2^-LP_BITS`` and
    the network built from it is certified exactly: the solver is never trusted.  Returns
    ``X`` and solver figures."""
    import time

    import numpy as np

    sparse = require("scipy.sparse", "the LP readout")
    linprog = require("scipy.optimize", "the LP readout").linprog
    G_all = np.array([[float(v) for v in row] for row in g])
    W = np.array([[float(v) for v in row] for row in w_u])
    y_all = np.array(labels)
    D = G_all.shape[1]
    d, C = W.shape[1], W.shape[0]
    x0 = np.linalg.lstsq(G_all, W[y_all], rcond=None)[0].T  # d x D, least squares to w_y
    logits = (G_all @ x0.T) @ W.T
    own = logits[np.arange(len(y_all)), y_all].copy()
    logits[np.arange(len(y_all)), y_all] = -np.inf
    pick = np.argsort(-(own - logits.max(axis=1)))[:max(1, int(subset * D))]
    G, y = G_all[pick], y_all[pick]
    T = len(pick)
    nx, nz = d * D, T * d
    rows = np.repeat(np.arange(nz), D)
    cols = np.tile(np.arange(D), nz)
    eq = sparse.coo_matrix((np.concatenate([np.ones(nz), -G[rows // d, cols]]),
                            (np.concatenate([np.arange(nz), rows]),
                             np.concatenate([nx + np.arange(nz), (rows % d) * D + cols]))),
                           shape=(nz, nx + nz + T)).tocsr()
    tt = np.repeat(np.arange(T), C - 1)
    cc = np.array([c for t in range(T) for c in range(C) if c != y[t]])
    k = len(tt)
    diff = W[y[tt]] - W[cc]  # k x d
    ub = sparse.coo_matrix(
        (np.concatenate([-diff.reshape(-1), -np.ones(k)]),
         (np.concatenate([np.repeat(np.arange(k), d), np.arange(k)]),
          np.concatenate([nx + (tt[:, None] * d + np.arange(d)[None, :]).reshape(-1),
                          nx + nz + tt]))),
        shape=(k, nx + nz + T)).tocsr()
    cost = np.concatenate([np.zeros(nx + nz), np.ones(T)])
    bounds = [(-bound, bound)] * nx + [(None, None)] * nz + [(0, None)] * T
    clock = time.perf_counter()
    res = linprog(cost, A_ub=ub, b_ub=-np.ones(k), A_eq=eq, b_eq=np.zeros(nz),
                  bounds=bounds, method=LP_METHOD)
    if res.x is None:
        raise ConstructionError(f"the readout LP failed: {res.message}")
    xi = res.x[nx + nz:]
    stats = {"lp_candidates": T, "lp_constraints": k + nz,
             "lp_seconds": round(time.perf_counter() - clock, 1),
             "lp_objective": round(float(res.fun), 3), "lp_fitted": int((xi < 1e-7).sum())}
    scale = 1 << LP_BITS
    x = res.x[:nx].reshape(d, D)
    return [[Fraction(round(v * scale), scale) for v in row] for row in x.tolist()], stats
