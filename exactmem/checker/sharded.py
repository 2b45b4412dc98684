"""Checking one certificate in K slices, in parallel processes or on any executor, and
joining the slice reports into the verdict of one pass (standard library only).  The
slices and processes come from :func:`shard_plan.shard_plan`; each slice is
:func:`verify.check_certificate` with ``shard=(k, K)``.
"""

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from .net_claims import network_report
from .shard_plan import shard_plan
from .strict_json import read_json
from .verdict import CheckReport, Unusable
from .verify import Progress, check_certificate, check_file

Submit = Callable[..., Any]  # submit(function, *args) -> a future


def combine(reports: list[CheckReport]) -> CheckReport:
    """One report for the K shard reports of one certificate: verified when every shard
    is; failures in shard order, each named once.  Language-model slices add up their exact
    totals, so the claim is the one of a single pass."""
    failures: list[str] = []
    seen: set[str] = set()
    for r in reports:
        for f in r.failures:
            if f not in seen:
                seen.add(f)
                failures.append(f)
    unusable = any(r.unusable for r in reports)
    if reports and all(type(r.totals) is dict for r in reports):  # language models
        from .lm.lm_verify import claim_text, merge

        out = network_report(failures, unusable)
        out.totals = merge([r.totals for r in reports])
        out.claim = claim_text(out.totals) if out.verified else None
        return out
    bases = {r.totals for r in reports if r.counts.get("positions")}
    return network_report(failures, unusable, bases.pop() if len(bases) == 1 else None,
                          sum(r.counts.get("positions", 0) for r in reports),
                          sum(r.counts.get("sequences", 0) for r in reports))


def _count(cert: Any) -> int:
    """The number of claimed sequences of a decoded certificate (1 when unreadable: the
    one slice then reports why); a language model's are its ``claims.positions`` lists."""
    claims = cert.get("claims") if type(cert) is dict else None
    lm = cert.get("format") == "exactmem.lm-certificate/1" if type(cert) is dict else False
    outputs = claims.get("positions" if lm else "outputs") if type(claims) is dict else None
    return len(outputs) if type(outputs) is list else 1


def _in_shards(check: Callable[..., CheckReport], source: Any, base: Any, shards: int,
               submit: Submit | None, count: int) -> CheckReport:
    slices, processes = shard_plan(shards, count)
    plan = [(k, slices) for k in range(slices)]
    if submit is not None:
        futures = [submit(check, source, base, None, part) for part in plan]
        return combine([f.result() for f in futures])
    if slices == 1:
        return check(source, base, None, (0, 1))
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=processes) as pool:
        return combine(list(pool.map(check, [source] * slices, [base] * slices,
                                     [None] * slices, plan)))


def _check_path(path: str, weights: str | None, progress: Progress | None,
                shard: tuple[int, int], reference: bool = False) -> CheckReport:
    return check_file(path, progress, shard, weights, reference=reference)


def check_sharded(path: Path | str, shards: int, submit: Submit | None = None,
                  weights: Path | str | None = None, *, reference: bool = False
                  ) -> CheckReport:
    """Check ``path`` in ``shards`` slices in parallel and combine the reports: the same
    verdict as one pass for every ``shards >= 1`` (:func:`shard_plan` caps the slices at
    :data:`shard_plan.MAX_SHARDS` and at the number of sequences, the processes at the CPUs).

    ``submit(function, *args)`` returns a future (a Dask client's ``submit`` works); by
    default a local process pool of the standard library runs the shards.  ``weights``: a
    language model's bound weights file (:func:`verify.check_certificate`); ``reference``:
    the standard-library path only."""
    try:
        count = _count(read_json(path))
    except Unusable as exc:
        return network_report([str(exc)], unusable=True)
    check = partial(_check_path, reference=True) if reference else _check_path
    return _in_shards(check, str(path), None if weights is None else str(weights),
                      shards, submit, count)


def check_certificate_sharded(cert: Any, base: Path | str, shards: int,
                              submit: Submit | None = None) -> CheckReport:
    """:func:`check_sharded` for a decoded certificate (``base``: where a dataset bound
    by path is found)."""
    return _in_shards(check_certificate, cert, base, shards, submit, _count(cert))
