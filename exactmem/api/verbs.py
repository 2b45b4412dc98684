"""The CLI verbs as Python functions: the same library calls, typed results, no exit codes.

A negative verdict is a result (``verified`` false, ``bool(result)`` false); unusable input
raises an :class:`~exactmem.errors.ExactmemError`.  Heavy dependencies (torch, z3, onnx)
are imported inside the functions that need them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from exactmem.api.result_types import (
    CertifyResult,
    CheckResult,
    DtypeFidelity,
    InfoResult,
    LemmaResult,
    LMInfoResult,
    PrecisionResult,
    ProveResult,
)
from exactmem.api.searching import search
from exactmem.errors import CertificateError, ExactmemError, MissingDependencyError
from exactmem.model.dataset import Dataset, load_dataset
from exactmem.model.sizes import Sizes

PathLike = str | Path
EXTRA = "pip install 'exactmem[export]'"


def dataset_of(data: Dataset | PathLike) -> tuple[Dataset, Path | None]:
    """``data`` itself, or the dataset read from the file ``data`` (and its path)."""
    if isinstance(data, Dataset):
        return data, None
    return load_dataset(data), Path(data)


def failing_sequences(failures: tuple[str, ...]) -> tuple[int, ...]:
    """The sequence indices named by checker failures (``"sequence 3, position 7: ..."``)."""
    return tuple(sorted({int(m.group(1)) for f in failures
                         if (m := re.match(r"sequence (\d+),", f))}))


def _certificate(cert: dict[str, Any] | PathLike) -> tuple[dict[str, Any], Path]:
    from exactmem.certificate import read_certificate

    if isinstance(cert, dict):
        return cert, Path(".")
    return read_certificate(cert), Path(cert).parent


def check_result(report: Any, path: Path | None = None) -> CheckResult:
    return CheckResult(verified=bool(report.verified), unusable=bool(report.unusable),
                       exit_code=int(report.exit_code), failures=tuple(report.failures),
                       claim=getattr(report, "claim", None), path=path)


def sizes_of(cert: dict[str, Any]) -> Sizes:
    s = cert["sizes"]
    return Sizes(s["params_dense"], s["params_nonzero"], s["depth"], s["width"], s["max_bits"])


def _need_torch(what: str) -> None:
    from importlib.util import find_spec

    if find_spec("torch") is None:
        raise MissingDependencyError(f"{what} needs torch: {EXTRA}")


def generate(task: str = "next-token", N: int | None = None,  # noqa: N803
             n: int | None = None, vocab: int | None = None, classes: int | None = None,
             seed: int = 0, *, dim: int | None = None, labels: str = "consistent",
             for_construction: str | None = None, output: PathLike | None = None,
             **kw: Any) -> Dataset:
    """A random dataset (``exactmem generate``), written to ``output`` when given.

    Defaults: ``N = 100``, ``n = 8``, ``vocab = 16``, ``classes = 2``.  Labels depend only on
    the multiset of tokens and the read token (consistent); ``labels="random"`` may give
    inconsistent data.  ``for_construction`` (with ``heads``, ``head_dim``,
    ``shared_context`` in ``kw``; unset sizes take that construction's defaults) generates
    data meeting an attention construction's assumptions."""
    from exactmem.model.dataset import save_dataset

    if for_construction is not None:
        from exactmem.datasets.draw_attention import generate_for

        given = {k: v for k, v in (("N", N), ("n", n), ("dim", dim), ("vocab", vocab),
                                   ("classes", classes)) if v is not None}
        ds = generate_for(for_construction, seed=seed, **given, **kw)
    else:
        if kw:
            raise ExactmemError(f"generate: {sorted(kw)} apply only with for_construction")
        if labels not in ("consistent", "random"):
            raise ExactmemError(f"labels: expected 'consistent' or 'random', found {labels!r}")
        if task not in ("next-token", "seq2seq"):
            raise ExactmemError(f"task: expected 'next-token' or 'seq2seq', found {task!r}")
        from exactmem.datasets.draw import generate as gen

        ds = gen("next-token" if task == "next-token" else "seq2seq", N=N or 100, n=n or 8,
                 vocab=vocab or 16, classes=classes or 2, seed=seed, dim=dim,
                 consistent=labels == "consistent")
    if output is not None:
        save_dataset(ds, output)
    return ds


def certify(data: Dataset | PathLike, construction: str, *, output: PathLike | None = None,
            bind_dataset: bool = False, log: Callable[[str], None] | None = None,
            float_exact: list[str] | None = None, shards: int = 1,
            scheduler: str | None = None, **options: Any) -> CertifyResult:
    """Build ``construction`` for ``data``, evaluate it exactly, run the checker, and write
    ``output`` only when verified (``exactmem certify``).  Construction options (``seed``,
    ``max_bits``, ...) are keyword arguments; ``float_exact``: IEEE formats to claim;
    ``shards``: evaluate and check that many slices in parallel (on the Dask
    ``scheduler`` when given)."""
    from exactmem import constructions
    from exactmem.api.support import dask_submit
    from exactmem.files.atomic import check_writable
    from exactmem.pipeline import certify as run

    if shards < 1:
        raise ExactmemError(f"shards: expected a positive number, found {shards}")
    if output is not None:
        check_writable(output)
    ds, file = dataset_of(data)
    con = constructions.get(construction)
    known = {o.name for o in con.options}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ExactmemError(f"{unknown} do not apply to {con.name}; its options: "
                            f"{sorted(known) or 'none'}")
    if bind_dataset and file is None:
        raise ExactmemError("bind_dataset needs the dataset as a file path")
    out = Path(output) if output is not None else None
    with dask_submit(scheduler) as submit:
        outcome = run(ds, con.name, options, out=out, log=log,
                      dataset_file=file if bind_dataset else None, float_exact=float_exact,
                      shards=shards, submit=submit)
    check = check_result(outcome.report)
    if out is not None and check.verified and out.exists():  # the checked dict, as written
        _recorded(replace(check, path=out))
    failing = failing_sequences(check.failures)
    return CertifyResult(verified=check.verified, construction=con.name, N=ds.N,
                         sizes=sizes_of(outcome.certificate), check=check,
                         path=out if check.verified else None, failing_sequences=failing,
                         failures=check.failures, notes=tuple(outcome.notes),
                         timings=dict(outcome.timings), certificate=outcome.certificate)


def check(certificate: dict[str, Any] | PathLike, *, shards: int = 1,
          progress: Callable[[str, int, int], None] | None = None,
          scheduler: str | None = None, weights: PathLike | None = None,
          reference: bool = False) -> CheckResult:
    """The trusted checker's verdict (``exactmem check``); an unreadable file is an
    ``unusable`` result, not an exception.  ``shards``: check that many slices of the
    sequences in parallel (on the Dask ``scheduler`` when given).  ``weights``: a language
    model's bound weights file, read instead of the one beside the certificate (its verdict
    is then not recorded: the record is about the files beside the certificate).
    ``reference``: the checker's standard-library path only, never its NumPy fast path (the
    same verdict; docs/checker.md, "Fast path")."""
    from exactmem.checker import check_certificate, check_file

    if shards < 1:
        raise ExactmemError(f"shards: expected a positive number, found {shards}")
    if isinstance(certificate, dict):
        return check_result(check_certificate(certificate, Path("."), progress,
                                              weights=weights, reference=reference))
    path = Path(certificate)
    if shards > 1 or scheduler:
        from exactmem.api.support import dask_submit
        from exactmem.checker.sharded import check_sharded

        bound = None if weights is None else Path(weights).resolve()
        with dask_submit(scheduler) as submit:
            return _recorded(check_result(check_sharded(str(path.resolve()), shards, submit,
                                                        bound, reference=reference), path),
                             weights)
    return _recorded(check_result(check_file(path, progress=progress, weights=weights,
                                             reference=reference), path), weights)


def _recorded(result: CheckResult, weights: PathLike | None = None) -> CheckResult:
    """Keep a verification record of a VERIFIED certificate file (api.verified), so that
    ``export`` does not check it again; not when another weights file was read."""
    if result.verified and result.path is not None and weights is None:
        from exactmem.api import verified

        verified.record(result.path, result.claim)
    return result


def shard_count(shards: int) -> int:
    """How many slices ``shards`` gives at most (the checker's cap)."""
    from exactmem.checker.shard_plan import MAX_SHARDS

    return min(shards, MAX_SHARDS)


def info(certificate: dict[str, Any] | PathLike) -> InfoResult | LMInfoResult:
    """Size figures and the theorem's bound (``exactmem info``); does not check.  A
    language model's certificate gives what it claims, position by position
    (:class:`LMInfoResult`)."""
    from exactmem.certificate.figures import LM_KEYS, lm_summary
    from exactmem.certificate.figures import info as figures
    from exactmem.lm.certfile import LM_FORMAT, lm_info

    if isinstance(certificate, dict):
        if certificate.get("format") == LM_FORMAT:
            try:
                return LMInfoResult(lm_info(certificate), LM_KEYS)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise CertificateError(f"not a readable {LM_FORMAT} certificate "
                                       f"({type(exc).__name__}: {exc})") from None
    else:
        lm = lm_summary(str(certificate))
        if lm is not None:
            return LMInfoResult(lm, LM_KEYS)
    cert, _ = _certificate(certificate)
    d = figures(cert)
    base = {"construction", "N", "n", "task", "inputs", "d", "C", "params", "bound",
            "params_dense", "params_nonzero", "depth", "width", "max_bits"}
    return InfoResult(construction=d["construction"], N=d["N"], n=d["n"], task=d["task"],
                      inputs=d["inputs"], d=d["d"], C=d["C"], sizes=sizes_of({"sizes": d}),
                      params=dict(d.get("params") or {}), bound=d.get("bound"),
                      figures={k: v for k, v in d.items() if k not in base})


def precision(certificate: dict[str, Any] | PathLike, *, bits: int | None = None,
              search: bool = True, scan: bool = False, device: str = "cpu",
              log: Callable[[str], None] | None = None) -> PrecisionResult:
    """Does the certified network still memorize in float (``exactmem precision``)?  The
    torch run per dtype; with ``search`` the fewest significand bits for (a) rounded weights
    and (b) the MPFR forward pass; with ``bits`` the ``bits``-bit forward pass certified."""
    from exactmem.certificate import dataset_from_certificate, spec_from_certificate

    _need_torch("the precision report")
    from exactmem.floats import fidelity as pr

    cert, base = _certificate(certificate)
    spec = spec_from_certificate(cert)
    ds = dataset_from_certificate(cert, base)
    weights_p = forward_p = None
    lines: tuple[str, ...] = ()
    if search:
        report = pr.precision_report(spec, ds, device, scan=scan, log=log)
        raw_rows = list(report.rows)
        weights_p, forward_p = report.weights.p, report.forward.p
        lines = tuple(report.table().splitlines()[len(raw_rows) + 1:])
    else:
        raw_rows, _ = pr.float_rows(spec, ds, ("float64", "float32", "bfloat16", "float16"),
                                    device)
    rows = tuple(DtypeFidelity(r.dtype, r.precision, r.memorized, tuple(r.failing))
                 for r in raw_rows)
    misses: tuple[str, ...] = ()
    if bits is not None:
        _, found = pr.certify_at(spec, ds, bits)
        misses = tuple(str(m) for m in found)
    return PrecisionResult(ds.N, rows, weights_p, forward_p, lines, bits, misses)


def lemma_names() -> tuple[str, ...]:
    """The names of the lemmas of ``proofs/`` (``exactmem prove --list``)."""
    from exactmem.api.lemmas import framework

    return tuple(lemma.name for lemma in framework().discover())


def prove(filter: str | None = None, *, quick: bool = False,  # noqa: A002
          on_result: Callable[[LemmaResult], None] | None = None) -> ProveResult:
    """Re-run the lemma proofs of ``proofs/`` (``exactmem prove``): every lemma, or those
    whose name contains ``filter``; ``quick`` runs the smaller instances where a lemma has
    them; ``on_result`` sees each lemma's result as it comes.  A filter that matches no
    lemma raises ``ExactmemError``."""
    from exactmem.api.lemmas import framework

    fw = framework()
    lemmas = fw.select(filter)
    if not lemmas:
        raise ExactmemError(f"no lemma name contains {filter!r}; the lemmas: "
                            + ", ".join(lemma.name for lemma in fw.discover()))
    done = []
    for r in fw.run(quick=quick, lemmas=lemmas):
        one = LemmaResult(r.lemma.name, str(r.outcome.status), r.seconds, r.outcome.detail,
                          r.quick, r.line())
        if on_result is not None:
            on_result(one)
        done.append(one)
    return ProveResult(tuple(done), quick)


__all__ = ["certify", "check", "dataset_of", "generate", "info", "lemma_names",
           "precision", "prove", "search", "shard_count"]
