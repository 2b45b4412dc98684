"""The certify pipeline, one stage per line: validate -> build -> evaluate -> certificate ->
checker -> write.  A certificate is written only after the independent checker verified it.

Evaluation is exact; networks with softmax scores are evaluated with rigorous rational
interval bounds (``exactmem.model.interval``) instead.  Every stage reports its progress on
stderr (:mod:`exactmem.progress`; off with ``--quiet``): build, certificate and write tick
their elapsed time, evaluate and check count layers (and sequences)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from exactmem import constructions, progress
from exactmem.certificate import build_certificate, claim_float_exact, write_certificate
from exactmem.certificate.build import digest_of
from exactmem.checker import CheckReport, check_certificate
from exactmem.checker.floatexact import CLAIMS as FLOAT_CLAIMS
from exactmem.checker.sharded import check_certificate_sharded
from exactmem.constructions.base import BuildResult
from exactmem.errors import CertificateError, ConstructionError, ExactmemError
from exactmem.model import forked, overlap
from exactmem.model.dataset import Dataset
from exactmem.model.dataset_checks import release_facts, validate
from exactmem.model.evaluate import Evaluation
from exactmem.model.interval import has_softmax_scores
from exactmem.model.interval_verdict import evaluate_certified
from exactmem.model.shards import Submit, evaluate_sharded
from exactmem.model.spec import NetworkSpec


@dataclass(slots=True)
class CertifyOutcome:
    """The certificate, the checker's report, and how long each stage took: ``timings`` in
    wall seconds, ``cpu_timings`` in CPU seconds of this process (user + system; work in
    other processes, as with ``shards > 1``, is not in it)."""

    certificate: dict[str, Any]
    report: CheckReport
    timings: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    cpu_timings: dict[str, float] = field(default_factory=dict)


@contextmanager
def _stage(name: str, timings: dict[str, float], ticking: bool = True) -> Iterator[None]:
    """Time one stage into ``timings[name]`` (wall seconds, added up when a stage runs again)
    and ``timings["cpu:" + name]`` (this process's CPU seconds); ``ticking``: show its
    elapsed time meanwhile (stages that report their own progress pass ``False``)."""
    clock, cpu = time.perf_counter(), time.process_time()
    if ticking:
        with progress.stage(name):
            yield
    else:
        yield
    timings[name] = timings.get(name, 0.0) + time.perf_counter() - clock
    timings["cpu:" + name] = timings.get("cpu:" + name, 0.0) + time.process_time() - cpu


@contextmanager
def _hook(prefix: str, first: str) -> Iterator[Callable[[str, int, int], None]]:
    """A ``progress(stage, done, total)`` callback; the stage ``first`` ticks until the
    callee reports its own first stage."""
    tick, close = progress.hook(prefix, heartbeat=True)
    tick(first, 0, 0)
    try:
        yield tick
    finally:
        close()


def float_format_for(max_bits: int) -> list[str]:
    """The narrowest IEEE format with at least ``max_bits`` significand bits (none for 0)."""
    from exactmem.checker.floatexact import FORMATS

    fits = sorted((p, name) for name, (p, _, _) in FORMATS.items() if p >= max_bits > 0)
    return [fits[0][1]] if fits else []


def certify(ds: Dataset, construction: str, options: Mapping[str, Any] | None = None,
            out: Path | None = None, log: Callable[[str], None] | None = None,
            dataset_file: Path | None = None,
            float_exact: Sequence[str] | None = None, shards: int = 1,
            submit: Submit | None = None) -> CertifyOutcome:
    """Build ``construction`` for ``ds``, evaluate exactly, check, and write ``out`` if verified.

    With ``dataset_file`` (the file ``ds`` was read from) the certificate binds the dataset by
    SHA-256 and a path relative to ``out`` instead of embedding it.  ``float_exact``: IEEE
    formats to claim (docs/float-exact.md); ``None`` claims the construction's own
    ``claims`` (int8, bfloat16 weights) or, for a ``max_bits = P`` build, the narrowest format
    with at least ``P`` significand bits.  A requested format that does not hold is a failure
    of the certificate.  With ``shards > 1`` evaluation and check run on that
    many disjoint slices of the sequences, in local processes or through ``submit`` (a Dask
    client's ``submit``), and are joined.
    """
    say = log or (lambda _msg: None)
    base = (out or Path("x")).resolve().parent
    rel = None if dataset_file is None else os.path.relpath(dataset_file.resolve(), base)
    if rel is not None and (os.path.isabs(rel) or rel.split(os.sep)[0] == os.pardir):
        raise ExactmemError(f"a bound dataset must lie inside the certificate's folder {base} "
                            f"(docs/certificate-format.md); {dataset_file} does not: copy it "
                            "there or embed it")
    con = constructions.get(construction)
    if ds.task not in con.tasks or ds.inputs not in con.inputs:
        raise ConstructionError(f"{construction} supports tasks {con.tasks} with inputs "
                                f"{con.inputs}; the dataset is {ds.task} with {ds.inputs}")
    opts = {**con.defaults(), **(options or {})}
    sharded = shards > 1 or submit is not None
    t: dict[str, float] = {}
    with _stage("validate", t):
        checked = validate(ds).lines()
    for line in checked:
        say(line)
    with _stage("build", t):
        result = con.build(ds, opts)
    release_facts(ds)  # per-sequence facts of validation and build: not read from here on
    formats = list(float_exact) if float_exact is not None else list(con.claims) or \
        float_format_for(int(opts.get("max_bits", 0) or 0))
    unknown = [f for f in formats if f not in FLOAT_CLAIMS]
    if unknown:
        raise CertificateError(f"float format: expected some of {sorted(FLOAT_CLAIMS)}, "
                               f"found {unknown}")
    spec = result.spec
    claim = partial(_claim_and_check, ds, result, construction, rel=rel, formats=formats,
                    default_formats=float_exact is None, base=base, shards=shards,
                    submit=submit, t=t, say=say)
    beside = not sharded and not has_softmax_scores(spec) and \
        overlap.available(ds.N * len(spec.read_positions()))
    if not beside:
        say(f"built {construction} in {t['build']:.2f}s; evaluating exactly")
        with _stage("evaluate", t, ticking=False), _hook("evaluate", "start") as tick:
            evaluation = evaluate_certified(spec, ds, result.hints, tick) if not sharded \
                else evaluate_sharded(spec, ds, result.hints, shards, submit, tick)
        _failures(evaluation, say)
        cert, report = claim(evaluation)
    else:
        say(f"built {construction} in {t['build']:.2f}s; evaluating exactly in a second "
            "process while the checker checks the labels as claims")
        guess = overlap.labels_as_predictions(ds, spec.readout.kind == "scalar")
        child = forked.Forked(_timed_evaluation, spec, ds)
        try:
            cert, report = claim(guess)
            evaluation, t["evaluate"], t["cpu:evaluate"] = child.result()
        finally:
            child.close()
        _failures(evaluation, say)
        if evaluation.predictions != guess.predictions:  # not what it claimed: claim that
            say("the network's outputs differ from the labels: the certificate claims them "
                "and is checked again")
            cert, report = claim(evaluation)
    say(f"checker: {'verified' if report.verified else 'REJECTED'} in {t['check']:.2f}s")
    if report.verified and out is not None:
        with _stage("write", t):
            write_certificate(cert, out)
    wall = {k: v for k, v in t.items() if not k.startswith("cpu:")}
    cpu = {k[4:]: v for k, v in t.items() if k.startswith("cpu:")}
    say("stage times: " + ", ".join(f"{k} {v:.2f}s" for k, v in wall.items())
        + " (CPU: " + ", ".join(f"{k} {v:.2f}s" for k, v in cpu.items()) + ")")
    return CertifyOutcome(cert, report, wall, tuple(result.notes), cpu)


def _timed_evaluation(spec: NetworkSpec, ds: Dataset) -> tuple[Evaluation, float, float]:
    """The exact evaluation in the forked process (no progress: it runs beside the check),
    its wall and CPU seconds."""
    clock, cpu = time.perf_counter(), time.process_time()
    evaluation = evaluate_certified(spec, ds)
    return evaluation, time.perf_counter() - clock, time.process_time() - cpu


def _failures(evaluation: Evaluation, say: Callable[[str], None]) -> None:
    if evaluation.failures:
        say(f"exact evaluation: {len(evaluation.failures)} positions not memorized")


def _claim_and_check(ds: Dataset, result: BuildResult, construction: str,
                     evaluation: Evaluation, *, rel: str | None, formats: list[str],
                     default_formats: bool, base: Path, shards: int, submit: Submit | None,
                     t: dict[str, float], say: Callable[[str], None],
                     ) -> tuple[dict[str, Any], CheckReport]:
    """The certificate claiming ``evaluation``'s outputs (and the float ``formats``), and
    the checker's report on it.  A float format that does not hold is dropped; with
    ``default_formats`` the formats that hold are claimed instead and checked again."""
    with _stage("certificate", t):
        cert = build_certificate(ds, result, construction, evaluation, dataset_path=rel)
    if formats:  # claimed up front: the checker's own float-exact pass decides
        cert["claims"] = {**cert["claims"], "float_exact": formats}
        cert["digest"] = digest_of(cert)
    asked = bool(formats)
    report = _check(cert, base, shards, submit, t)
    if formats and _only_float(report):
        del cert["claims"]["float_exact"]  # not written: the failure stays in the report
        cert["digest"] = digest_of(cert)
        if default_formats:  # the default claim: claim the formats that hold, re-check
            with _stage("float-exact", t):
                formats = claim_float_exact(cert, formats, base)
            report = _check(cert, base, shards, submit, t)
    if asked:
        held = formats if report.verified else []
        say(f"float-exact claim: {', '.join(held) or 'none'}"
            + (f"; does not hold: {report.failures[0]}" if _only_float(report) else ""))
    return cert, report


def _only_float(report: CheckReport) -> bool:
    """The checker refused the float-exact claim and nothing else."""
    return bool(report.failures) and not report.unusable and all(
        f.startswith("claims.float_exact:") for f in report.failures)


def _check(cert: dict[str, Any], base: Path, shards: int, submit: Submit | None,
           t: dict[str, float]) -> CheckReport:
    """The independent checker on ``cert`` (sharded when asked), timed as stage "check"."""
    if shards <= 1 and submit is None:
        with _stage("check", t, ticking=False), _hook("check", "parse") as tick:
            return check_certificate(cert, base, progress=tick)
    with _stage("check", t):
        return check_certificate_sharded(cert, base, shards, submit)
