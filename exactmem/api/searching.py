"""``exactmem.search``: the search verb as one function, shared by ``exactmem search``.

Three modes, as on the command line: one shape (``minimize=None``), a sweep of shapes
(``minimize="ff-width" | "heads" | "params"``), and every labelling of the input sequences
(``all_labellings=True``).  Real weights go to Z3 (refutations cross-checked, the solvers'
word); ``bits=B`` restricts the weights to B-bit integers and goes to SAT, whose refutations
are LRAT proofs checked before they are reported (written to ``proofs`` when given).

Every size is checked against :data:`CAPS` first (documented in docs/cli.md), so an absurd
request is one error, not an hour of enumeration or an exhausted machine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, cast

from exactmem.api.result_types import SearchResult, search_reason
from exactmem.errors import DatasetError
from exactmem.model.dataset import Dataset, load_dataset

PathLike = str | Path

# (least, most) of every size the search accepts; docs/cli.md, "search", lists them
CAPS: dict[str, tuple[float, float]] = {
    "layers": (1, 8), "heads": (1, 16), "d_model": (1, 64), "head_dim": (1, 64),
    "ff_width": (0, 1024), "max_layers": (1, 8), "max_heads": (1, 16),
    "max_d_model": (1, 64), "max_ff_width": (0, 1024),
    "N": (1, 24), "n": (1, 16), "vocab": (1, 64), "classes": (2, 8),
    "bits": (1, 8), "conflicts": (1, 10**10), "timeout": (1e-3, 7 * 86400),
    "budget": (1e-3, 30 * 86400), "rlimit": (0, 10**12), "cvc5_rlimit": (0, 10**12),
    "random_fronts": (0, 10**9), "grid_fronts": (0, 10**9), "sweep_conflicts": (0, 10**10),
    "workers": (1, 256),
}
MAX_SWEPT_SHAPES = 100_000  # shapes of a --minimize params family (caps multiplied)
MAX_LABELLINGS = 1 << 24  # classes ** N for --all-labellings
MAX_INPUT_CLASSES = 1_000_000  # distinct sequences enumerated to draw --N of them
MAX_DATASET = (4096, 256)  # sequences and tokens per sequence of a searched dataset file


def _flag(name: str) -> str:
    return "--" + {"N": "N", "n": "n"}.get(name, name.replace("_", "-"))


def check_caps(**values: float | None) -> None:
    """Refuse a size outside :data:`CAPS` with one line naming the option and the range."""
    for name, value in values.items():
        if value is None:
            continue
        low, high = CAPS[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or not low <= value <= high:
            raise DatasetError(f"{_flag(name)}: expected a number in [{low:g}, {high:g}] "
                               f"(the search's cap), found {value!r}")


def _check_family(minimize: str | None, max_layers: int, max_heads: int, max_d_model: int,
                  max_ff_width: int) -> None:
    if minimize != "params":
        return
    count = max_layers * max_heads * max_d_model * (max_d_model + 1) // 2 * (max_ff_width + 1)
    if count > MAX_SWEPT_SHAPES:
        raise DatasetError(f"--minimize params: the caps describe {count} shapes, more than "
                           f"the {MAX_SWEPT_SHAPES} a sweep accepts; lower --max-* caps")


def _check_inputs(N: int, n: int, vocab: int, classes: int) -> None:  # noqa: N803
    if classes ** N > MAX_LABELLINGS:
        raise DatasetError(f"--all-labellings: {classes}^{N} labellings, more than the "
                           f"{MAX_LABELLINGS} (2^24) the search enumerates")
    distinct = math.comb(vocab + n - 2, n - 1) * vocab
    if distinct > MAX_INPUT_CLASSES:
        raise DatasetError(f"--n {n} --vocab {vocab}: {distinct} distinct sequences to draw "
                           f"from, more than {MAX_INPUT_CLASSES}")


def _check_dataset(ds: Dataset) -> None:
    if ds.N > MAX_DATASET[0] or ds.n > MAX_DATASET[1]:
        raise DatasetError(f"search: a dataset of at most {MAX_DATASET[0]} sequences of at "
                           f"most {MAX_DATASET[1]} tokens, found N = {ds.N}, n = {ds.n}")


def qualifier(bits: int | None, ties: str = "split", bound: str | None = None,
              proof_kinds: tuple[str, ...] = ()) -> str:
    """What the answers are about and whose word an infeasible one is."""
    if bits is not None:
        checked = "DRUP/LRAT-checked" if "drup" in proof_kinds else "LRAT-checked"
        return f"among {bits}-bit integer weights, {checked}"
    text = "real weights"
    if bound is not None:
        text += f" |w| <= {bound}"
    if ties == "margin":
        text += ", margin ties (a restriction)"
    return text + ", solvers' word"


def _outside_caps(ds: Dataset, base: Any, limits: Any, params: int) -> list[str]:
    """The smallest shape beyond each cap with at most ``params`` parameters (the shapes
    :func:`exactmem.search.drive.sweep.caps_hide_nothing` looks at)."""
    from exactmem.search.drive.sweep import beyond_caps
    from exactmem.search.question.outcome import shape_params

    out = []
    for knob, cap, shape in beyond_caps(base, limits):
        p = shape_params(ds, shape)
        if p <= params:
            out.append(f"{shape.label()} ({p} parameters) is outside {_flag('max_' + knob)} "
                       f"{cap}")
    return out


def search(data: Dataset | PathLike | None = None, *, layers: int = 1, heads: int = 1,
           d_model: int = 1, head_dim: int | None = None, ff_width: int = 0,
           residual: bool = True, readout: str = "argmax", ties: str = "split",
           bound: object | None = None, timeout: float = 60.0, budget: float | None = None,
           minimize: str | None = None, max_layers: int = 2, max_heads: int = 2,
           max_d_model: int = 2, max_ff_width: int = 4,
           certificates: PathLike | None = None, bits: int | None = None,
           conflicts: int | None = None, proofs: PathLike | None = None,
           rlimit: int | None = None, encoding: str = "positions",
           cvc5_rlimit: int | None = 20_000, crosscheck: bool = True,
           all_labellings: bool = False, N: int | None = None,  # noqa: N803
           n: int | None = None, vocab: int | None = None, classes: int = 2, seed: int = 0,
           results: PathLike = "search-results.jsonl", retry_unknown: bool = False,
           transfer: bool = True, random_fronts: int | None = None,
           grid_fronts: int | None = None, sweep_conflicts: int | None = None,
           first_failure: bool = False, executor: str = "processes",
           workers: int | None = None, scheduler: str | None = None,
           on_result: Callable[[Any], None] | None = None,
           show_progress: bool = True) -> SearchResult:
    """The smallest hardmax Transformer memorizing ``data`` (``exactmem search``); the
    keyword arguments are the CLI's options (``--max-ff-width`` is ``max_ff_width``,
    ``--no-transfer`` is ``transfer=False``).  Unusable input raises ``DatasetError``."""
    from exactmem.arith import to_rational
    from exactmem.search.drive.sweep import Limits
    from exactmem.search.encode.encoding import EncodeOptions
    from exactmem.search.question.shape import Shape

    check_caps(layers=layers, heads=heads, d_model=d_model, head_dim=head_dim,
               ff_width=ff_width, max_layers=max_layers, max_heads=max_heads,
               max_d_model=max_d_model, max_ff_width=max_ff_width, N=N, n=n, vocab=vocab,
               classes=classes, bits=bits, conflicts=conflicts, timeout=timeout,
               budget=budget, rlimit=rlimit, cvc5_rlimit=cvc5_rlimit,
               random_fronts=random_fronts, grid_fronts=grid_fronts,
               sweep_conflicts=sweep_conflicts, workers=workers)
    _check_family(minimize, max_layers, max_heads, max_d_model, max_ff_width)
    if bits is not None:
        if bound is not None or ties != "split":
            raise DatasetError("--bits fixes the weights to a b-bit integer grid with exact "
                               "ties; it cannot be combined with --bound or --ties margin")
        if rlimit is not None:
            raise DatasetError("--rlimit is Z3's budget for real weights; with --bits the "
                               "budget is --conflicts")
    elif proofs is not None or conflicts is not None:
        raise DatasetError("--proofs and --conflicts need --bits (real-valued refutations "
                           "are the solvers' word, with no proof to write)")
    solver = {"rlimit": rlimit or None, "encoding": encoding, "crosscheck": crosscheck,
              "cvc5_rlimit": cvc5_rlimit or None}
    base = Shape(layers=layers, heads=heads, d_model=d_model, head_dim=head_dim or d_model,
                 ff_width=ff_width, residual=residual,
                 readout=cast(Literal["scalar", "argmax"], readout))
    b: Fraction | None = to_rational(bound, "--bound") if bound is not None else None
    opts = EncodeOptions(ties=cast(Literal["split", "margin"], ties), bound=b)
    limits = Limits(max_layers, max_heads, max_d_model, max_ff_width)
    folder = Path(certificates) if certificates is not None else None
    proof_dir = Path(proofs) if proofs is not None else None
    ds = data if isinstance(data, Dataset) or data is None else load_dataset(data)
    if all_labellings:
        return _all_labellings(ds, base, limits, b, {
            "N": N, "n": n, "vocab": vocab, "classes": classes, "seed": seed,
            "ties": ties, "timeout": timeout, "retry_unknown": retry_unknown, "bits": bits,
            "conflicts": conflicts, "proofs": proofs, "solver": solver, "encoding": encoding,
            "transfer": transfer, "random_fronts": random_fronts, "grid_fronts": grid_fronts,
            "sweep_conflicts": sweep_conflicts, "minimize": minimize, "results": results,
            "executor": executor, "workers": workers, "scheduler": scheduler,
            "budget": budget, "first_failure": first_failure,
            "show_progress": show_progress, "folder": folder})
    if ds is None:
        raise DatasetError("search: give a dataset file, or --all-labellings with --N --n "
                           "--vocab")
    _check_dataset(ds)
    if minimize is not None:
        from exactmem.search.drive.sweep import minimize as sweep

        report = sweep(ds, base, minimize, limits, opts, timeout, folder, on_result, budget,
                       bits, conflicts, proof_dir, solver)
    else:
        report = _single(ds, base, opts, timeout, budget, folder, bits, conflicts,
                         proof_dir, solver)
    return _result(report, bits, ties, None if b is None else str(b),
                   _why(report, ds, base, limits, minimize))


def _single(ds: Dataset, base: Any, opts: Any, timeout: float, budget: float | None,
            folder: Path | None, bits: int | None, conflicts: int | None,
            proof_dir: Path | None, solver: dict[str, Any]) -> dict[str, Any]:
    from exactmem.search.drive.query import run_bits_query, run_query

    path = None
    name = base.label().replace(" ", "_")
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (name + ".cert.json")
    if bits is not None:
        res = run_bits_query(ds, base, bits, conflicts, path,
                             None if proof_dir is None else proof_dir / name)
    else:
        res = run_query(ds, base, opts, timeout if budget is None else min(timeout, budget),
                        path, **solver)
    minimal = {**base.as_dict(), "params": res.params} if res.status == "found" else None
    out = {"status": res.status, "minimize": None, "minimal": minimal, "proved_minimal": False,
           "claim": "at most" if minimal else None, "ties": opts.ties,
           "sizes": [res.as_dict()]}
    if bits is not None:
        from exactmem.search.drive.query import bits_answer

        out["bits"] = bits
        out.update(bits_answer(ds, out["sizes"], {0: res}))
    else:
        out.update(rlimit=solver["rlimit"], encoding=solver["encoding"])
    return out


def _why(report: dict[str, Any], ds: Dataset, base: Any, limits: Any,
         minimize: str | None) -> str | None:
    """Why a found size is only "at most" (``None`` when it is minimal or nothing was found)."""
    if report.get("minimal") is None or report.get("proved_minimal"):
        return None
    params = int(report["minimal"]["params"])
    outside = _outside_caps(ds, base, limits, params) if minimize == "params" else []
    return search_reason(report, minimize, outside)


def _result(report: dict[str, Any], bits: int | None, ties: str, bound: str | None,
            reason: str | None) -> SearchResult:
    kinds = tuple(report.get("proof_kinds") or
                  {str(e.get("proof_kind")) for e in report.get("sizes", ())
                   if e.get("status") == "infeasible"})
    report["qualifier"] = qualifier(bits, ties, bound, kinds)
    report["claim_reason"] = reason
    return SearchResult(status=str(report["status"]), minimal=report.get("minimal"),
                        proved_minimal=bool(report.get("proved_minimal")),
                        claim=report.get("claim"), shapes=tuple(report.get("sizes", ())),
                        report=report, qualifier=report["qualifier"], reason=reason)


def _all_labellings(ds: Dataset | None, base: Any, limits: Any, bound: Fraction | None,
                    kw: dict[str, Any]) -> SearchResult:
    from exactmem.search.drive.all_labellings import shattering_search
    from exactmem.search.drive.executors import make_executor
    from exactmem.search.drive.results import ExhaustiveRun, ResultsFile
    from exactmem.search.drive.sweep import candidates, caps_hide_nothing
    from exactmem.search.finders.grid_pool import MAX_FRONTS as GRID_FRONTS
    from exactmem.search.finders.label_sweep import SWEEP_CONFLICTS
    from exactmem.search.finders.transfer import DEFAULT_POOL
    from exactmem.search.question.labellings import generate_inputs

    if ds is not None:
        if ds.inputs != "token-ids" or ds.task != "next-token":
            raise DatasetError("--all-labellings needs a next-token dataset of token ids")
        assert ds.vocab_size is not None
        check_caps(N=ds.N, n=ds.n)
        seqs, vocab = tuple(tuple(s) for s in ds.sequences), ds.vocab_size
    else:
        if kw["N"] is None or kw["n"] is None or kw["vocab"] is None:
            raise DatasetError("--all-labellings without a dataset needs --N, --n and --vocab")
        _check_inputs(kw["N"], kw["n"], kw["vocab"], kw["classes"])
        seqs, vocab = generate_inputs(kw["N"], kw["n"], kw["vocab"], kw["seed"]), kw["vocab"]
    if kw["classes"] ** len(seqs) > MAX_LABELLINGS:
        raise DatasetError(f"--all-labellings: {kw['classes']}^{len(seqs)} labellings, more "
                           f"than the {MAX_LABELLINGS} (2^24) the search enumerates")
    solver = kw["solver"]
    q = ExhaustiveRun(seqs, vocab, kw["classes"], kw["ties"], kw["timeout"],
                      None if bound is None else str(bound), kw["retry_unknown"], kw["bits"],
                      kw["conflicts"], None if kw["proofs"] is None else str(kw["proofs"]),
                      solver["rlimit"], solver["cvc5_rlimit"], kw["encoding"],
                      solver["crosscheck"], kw["transfer"],
                      DEFAULT_POOL if kw["random_fronts"] is None else kw["random_fronts"],
                      GRID_FRONTS if kw["grid_fronts"] is None else kw["grid_fronts"],
                      SWEEP_CONFLICTS if kw["sweep_conflicts"] is None else kw["sweep_conflicts"])
    probe = q.dataset([0] * len(seqs))
    minimize = kw["minimize"]
    shapes = candidates(base, minimize, limits, probe) if minimize else [base]

    def caps_ok(params: int) -> bool:
        return bool(caps_hide_nothing(probe, base, limits, params))

    results = Path(kw["results"])
    store = ResultsFile(results, q.header())
    executor = make_executor(kw["executor"], kw["workers"], kw["scheduler"])
    start = time.monotonic()
    deadline = None if kw["budget"] is None else start + kw["budget"]
    try:
        report = shattering_search(q, shapes, store, executor, kw["first_failure"],
                                   kw["show_progress"], kw["folder"], deadline,
                                   caps_ok if minimize == "params" else None)
    finally:
        executor.close()
    sizes = []
    for s in report["shapes"]:
        status = {True: "found", False: "infeasible", None: "unknown"}[s["shatters"]]
        sizes.append({**s, "status": status})
    out = {"status": report["status"], "minimal": report["minimal"],
           "proved_minimal": report["proved_minimal"], "claim": report["claim"],
           "minimize": minimize, "family": limits.as_dict(),
           "ties": q.ties, "bound": q.bound, "bits": q.bits, "sizes": sizes,
           "rlimit": q.rlimit, "encoding": q.encoding, "proof_kinds": _kinds(store, sizes),
           "sequences": [list(x) for x in seqs], "vocab": vocab, "classes": kw["classes"],
           "results": str(results), "reused": report["reused"],
           "padded": report["padded"],
           "solved": report["solved"], "seconds": round(time.monotonic() - start, 3)}
    return _result(out, q.bits, q.ties, q.bound, _why(out, probe, base, limits, minimize))


def _kinds(store: Any, sizes: list[dict[str, Any]]) -> dict[str, int]:
    """How many infeasible answers of the swept shapes rest on which proof kind."""
    from exactmem.search.drive.results import record_key
    from exactmem.search.question.shape import Shape

    counts: dict[str, int] = {}
    for rec in store.records.values():
        if rec.get("status") != "infeasible":
            continue
        shape = Shape.from_dict(rec["shape"])
        if any(Shape.from_dict(e["shape"]) == shape for e in sizes) and \
                rec["key"] == record_key(shape, rec.get("labels", [])):
            kind = str(rec.get("proof_kind"))
            counts[kind] = counts.get(kind, 0) + 1
    return counts


__all__ = ["CAPS", "check_caps", "qualifier", "search"]
