"""Minimal-size search: sweep shapes from small to large and report the smallest ``found``.

A minimum is claimed (``proved_minimal``) only when every smaller shape of the swept
family is ``infeasible`` and the family's caps cannot hide a smaller shape; otherwise the
found size is an upper bound ("at most").  A shape that nests in a shape already proved
infeasible (:func:`~exactmem.search.question.shape.nests_in`) is infeasible without a query.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from exactmem.errors import SpecError
from exactmem.model.dataset import Dataset
from exactmem.search.drive.query import bits_answer, run_bits_query, run_query
from exactmem.search.encode.encoding import EncodeOptions
from exactmem.search.question.outcome import Infeasible, QueryResult, shape_params
from exactmem.search.question.shape import Shape, nests_in

Minimize = Literal["ff-width", "heads", "params"]
MINIMIZE_MODES = ("ff-width", "heads", "params")


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps of the swept family."""

    max_layers: int = 2
    max_heads: int = 2
    max_d_model: int = 2
    max_ff_width: int = 4

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def candidates(base: Shape, mode: str, limits: Limits, ds: Dataset) -> list[Shape]:
    """Shapes to try, smallest first."""
    if mode == "ff-width":
        return [dataclasses.replace(base, ff_width=q) for q in range(limits.max_ff_width + 1)]
    if mode == "heads":
        return [dataclasses.replace(base, heads=h) for h in range(1, limits.max_heads + 1)]
    if mode != "params":
        raise SpecError(f"--minimize must be one of {MINIMIZE_MODES}, found {mode!r}")
    shapes = [Shape(layers, heads, m, s, q, base.residual, base.readout)
              for layers in range(1, limits.max_layers + 1)
              for heads in range(1, limits.max_heads + 1)
              for m in range(1, limits.max_d_model + 1)
              for s in range(1, m + 1)
              for q in range(limits.max_ff_width + 1)]
    return sorted(shapes, key=lambda sh: (shape_params(ds, sh), sh.layers, sh.heads,
                                          sh.d_model, sh.head_dim, sh.ff_width))


def beyond_caps(base: Shape, limits: Limits) -> list[tuple[str, int, Shape]]:
    """``(knob, cap, shape)``: the smallest shape one step beyond each cap."""
    smallest = Shape(1, 1, 1, 1, 0, base.residual, base.readout)
    rep = dataclasses.replace
    return [("layers", limits.max_layers, rep(smallest, layers=limits.max_layers + 1)),
            ("heads", limits.max_heads, rep(smallest, heads=limits.max_heads + 1)),
            ("d_model", limits.max_d_model, rep(smallest, d_model=limits.max_d_model + 1)),
            ("ff_width", limits.max_ff_width, rep(smallest, ff_width=limits.max_ff_width + 1))]


def caps_hide_nothing(ds: Dataset, base: Shape, limits: Limits, params: int) -> bool:
    """No shape beyond a cap has at most ``params`` parameters (params grow with every knob)."""
    return all(shape_params(ds, sh) > params for _, _, sh in beyond_caps(base, limits))


PROOF_KEYS = ("cnf", "proof", "cnf_sha256", "proof_sha256", "question")


def implied_infeasible(shape: Shape, infeasible: list[Shape]) -> Shape | None:
    for big in infeasible:
        if nests_in(shape, big):
            return big
    return None


def minimize(ds: Dataset, base: Shape, mode: str = "params", limits: Limits | None = None,
             opts: EncodeOptions | None = None, timeout_s: float = 60.0,
             certificate_dir: Path | None = None,
             on_result: Callable[[QueryResult], None] | None = None,
             budget_s: float | None = None, bits: int | None = None,
             conflicts: int | None = None, proof_dir: Path | None = None,
             solver: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sweep shapes; return the JSON report (``status``, ``minimal``, ``proved_minimal``,
    ``sizes``).

    ``budget_s`` bounds the whole sweep: each query gets ``min(timeout_s, what is left)``;
    shapes not reached are reported ``unknown`` with the reason ``budget``.  Progress (one
    line per shape) goes to stderr through :mod:`exactmem.progress`.

    ``bits``: b-bit integer weights decided by SAT (:func:`run_bits_query`) under a
    deterministic ``conflicts`` budget per query; refutations are LRAT proofs written to
    ``proof_dir`` (``<shape>.cnf`` / ``.lrat``) and checked before they are reported.

    ``solver``: keyword settings of :func:`run_query` for real weights (``rlimit``,
    ``encoding``, ``crosscheck``, ``cvc5_rlimit``).
    """
    from exactmem import progress

    limits = limits or Limits()
    opts = opts or EncodeOptions()
    deadline = None if budget_s is None else time.monotonic() + budget_s
    sizes: list[dict[str, Any]] = []
    infeasible: list[Shape] = []
    proofs: dict[Shape, tuple[str, dict[str, Any]]] = {}  # kind, files and question
    ran: dict[int, QueryResult] = {}
    all_smaller_infeasible = True
    minimal: dict[str, Any] | None = None
    shapes = candidates(base, mode, limits, ds)
    with progress.task("search shapes", total=len(shapes), unit="shape") as bar:
        for shape in shapes:
            if minimal is not None:
                break
            bar.update(0, description=f"search {shape.label()}")
            big = implied_infeasible(shape, infeasible)
            if big is not None:
                entry = {"shape": shape.as_dict(), "params": shape_params(ds, shape),
                         "status": "infeasible", "seconds": 0.0,
                         "proof_kind": proofs[big][0],
                         "detail": f"nests in the infeasible shape {big.label()}",
                         "nests_in": big.as_dict(), **proofs[big][1]}
                sizes.append(entry)
                bar.update()
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                sizes.append({"shape": shape.as_dict(), "params": shape_params(ds, shape),
                              "status": "unknown", "seconds": 0.0,
                              "reason": "budget: the overall --budget ran out"})
                all_smaller_infeasible = False
                bar.update()
                continue
            path = None
            if certificate_dir is not None:
                certificate_dir.mkdir(parents=True, exist_ok=True)
                path = certificate_dir / (shape.label().replace(" ", "_") + ".cert.json")
            if bits is not None:
                stem = None if proof_dir is None else \
                    proof_dir / shape.label().replace(" ", "_")
                res = run_bits_query(ds, shape, bits, conflicts, path, stem)
            else:
                res = run_query(ds, shape, opts, timeout_s if left is None else
                                min(timeout_s, left), path, **(solver or {}))
            bar.update()
            if on_result is not None:
                on_result(res)
            ran[len(sizes)] = res
            sizes.append(res.as_dict())
            if res.status == "found":
                minimal = {**shape.as_dict(), "params": res.params}
            elif res.status == "infeasible":
                infeasible.append(shape)
                assert isinstance(res.outcome, Infeasible)
                proofs[shape] = (res.outcome.proof_kind,
                                 {k: v for k, v in sizes[-1].items() if k in PROOF_KEYS})
                if isinstance(res.outcome, Infeasible) and res.outcome.proof_kind == \
                        "label-consistency":
                    break  # no shape of the family can memorize this dataset
            else:
                all_smaller_infeasible = False
    extra: dict[str, Any] = {"bits": bits, "conflict_budget": conflicts,
                             **bits_answer(ds, sizes, ran)} if bits is not None \
        else {k: v for k, v in (solver or {}).items() if k in ("rlimit", "encoding")}
    return report(ds, base, mode, limits, opts.ties, sizes, minimal, all_smaller_infeasible,
                  extra)


def report(ds: Dataset, base: Shape, mode: str, limits: Limits, ties: str,
           sizes: list[dict[str, Any]], minimal: dict[str, Any] | None,
           all_smaller_infeasible: bool, extra: dict[str, Any] | None = None
           ) -> dict[str, Any]:
    """The JSON report of a sweep.  ``proved_minimal`` needs exact tie semantics (an
    infeasible answer under ``--ties margin`` says nothing about the exact question)."""
    proved = False
    if minimal is not None:
        proved = all_smaller_infeasible and ties == "split"
        if mode == "params":
            proved = proved and caps_hide_nothing(ds, base, limits, minimal["params"])
        status = "found"
    elif sizes and all(e["status"] == "infeasible" for e in sizes):
        status = "infeasible"
    else:
        status = "unknown"
    return {"status": status, "minimize": mode, "minimal": minimal, "proved_minimal": proved,
            "claim": ("minimal" if proved else "at most") if minimal else None,
            "ties": ties, "family": limits.as_dict(), "sizes": sizes, **(extra or {})}
