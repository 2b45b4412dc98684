"""Exhaustive mode: every labelling of a set of input sequences (the shattering question).

:func:`shattering_search` tries shapes smallest first until one memorizes every labelling
class (:func:`~exactmem.search.question.labellings.labelling_classes`); :func:`run_shape`
answers every class for one shape: stored answers are reused
(:mod:`~exactmem.search.drive.results`), the finders go first
(:mod:`~exactmem.search.drive.walks`), and each remaining labelling is a query
(:func:`~exactmem.search.drive.worker.query_worker`) run by an executor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from exactmem import progress
from exactmem.search.drive import walks
from exactmem.search.drive.executors import Executor
from exactmem.search.drive.results import (
    ExhaustiveRun,
    ResultsFile,
    cert_path,
    pad_from_store,
    record_key,
    summarize,
)
from exactmem.search.drive.walks import Donors, labels_of, seed_walk
from exactmem.search.drive.worker import query_worker
from exactmem.search.finders import label_sweep
from exactmem.search.finders.front_pool import cheap_test_applies
from exactmem.search.question.labellings import (
    LabellingClass,
    labelling_classes,
    labels_symmetric,
)
from exactmem.search.question.shape import Shape

PROBES = 4  # --bits --first-failure: labellings asked to SAT before the grid walk
QUICK_FRONTS = 4096  # fronts of the short walk whose misses are probed
LATE_FRONTS = 16_384  # plane pools: fronts walked again for what SAT left unknown
PROBE_EMBEDDINGS = 4096  # probes of an exhaustive plane shape: embeddings walked first


class _Stop(Exception):
    """The shape failed (or time is up) before the budget passes."""


def run_shape(q: ExhaustiveRun, shape: Shape, store: ResultsFile, executor: Executor,
              first_failure: bool = False, show_progress: bool = True,
              certificate_dir: Path | None = None,
              deadline: float | None = None) -> dict[str, Any]:
    """Answer every labelling class for one shape; stored answers are reused.  In order:
    the queries still to ask (:func:`plan_queries`); with b bits, probes and walks
    (:func:`probe_and_walk`); with real weights, the random fronts that pick the likely
    refutations (:func:`~exactmem.search.drive.walks.suspects`); then the queries, pass by
    pass (:func:`ask_in_passes`)."""
    sym = labels_symmetric(shape.readout, q.classes,
                           q.bits is not None or q.bound is not None)
    classes = labelling_classes(q.sequences, q.classes, sym)
    pending, hard, reused, padded = plan_queries(q, shape, classes, store, certificate_dir)
    failed = first_failure and any(store.records[record_key(shape, c.labels)]["status"] ==
                                   "infeasible" for c in classes
                                   if record_key(shape, c.labels) in store.records)
    transfer = q.transfer and q.bits is None
    run = ShapeRun(q, shape, store, executor, first_failure, show_progress, deadline,
                   Donors(shape, store) if transfer else None)
    suspects: list[dict[str, Any]] = []
    if transfer and run.cheap and not failed and q.pool and pending:
        with progress.task(f"{shape.label()} random fronts ({q.pool} drawn as arrays)",
                           heartbeat=True) as bar:
            if not show_progress:
                bar.close()
            suspects = walks.suspects(q, shape, pending)
    walk = None  # a plane pool (one wide block): its sample goes on from walk to walk
    if q.bits is not None and pending and not failed:
        pending, walk = probe_and_walk(run, pending, hard)
    run.bar = run.task("queries", len(pending))
    if pending and not failed:
        ask_in_passes(run, pending, suspects, walk)
    run.bar.close()
    summary = summarize(shape, classes, store, reused, run.solved)
    summary["padded"] = padded
    return summary


def plan_queries(q: ExhaustiveRun, shape: Shape, classes: list[LabellingClass], store: ResultsFile,
                 certificate_dir: Path | None
                 ) -> tuple[list[dict[str, Any]], int, int, int]:
    """The payloads of the classes still to ask (those that smaller shapes could not
    memorize first: a failing shape fails fast), how many of them smaller shapes failed
    on, and how many classes were answered from the store (reused, zero-padded)."""
    pending = []
    reused = padded = 0
    hard = []
    for cls in classes:
        key = record_key(shape, cls.labels)
        if key in store.records and not q.retry(store.records[key]):
            reused += 1
            continue
        if pad_from_store(q, shape, cls.labels, key, store, cert_path(certificate_dir, key)):
            padded += 1
            continue
        before = [r for r in store.by_labels.get(tuple(cls.labels), [])
                  if r["status"] != "found"]
        hard.append(bool(before))
        payload: dict[str, Any] = {"dataset": q.dataset(cls.labels).to_json(),
                                   "shape": shape.as_dict(), "ties": q.ties,
                                   "timeout": q.timeout_s, "key": key}
        if q.bound is not None:
            payload["bound"] = q.bound
        if q.bits is None:
            payload.update(rlimit=q.rlimit, cvc5_rlimit=q.cvc5_rlimit, encoding=q.encoding,
                           crosscheck=q.crosscheck)
        if q.bits is not None:
            payload["bits"], payload["conflicts"] = q.bits, q.conflicts
            if q.sweep and q.classes == 2:
                payload["sweep"] = q.sweep
            if q.proof_dir is not None:
                name = key.replace(" ", "_").replace("|", "__").replace(",", "")
                payload["proof_stem"] = str(Path(q.proof_dir) / name)
        path = cert_path(certificate_dir, key)
        if path is not None:
            payload["certificate"] = str(path)
        pending.append(payload)
    pending = [p for _, p in sorted(zip(hard, pending, strict=True),
                                    key=lambda hp: not hp[0])]
    return pending, sum(hard), reused, padded


class ShapeRun:
    """One shape's queries in flight: each payload is sent with the donors known by then,
    each answer stored as it comes (and lent as a donor), progress counted on ``bar``."""

    def __init__(self, q: ExhaustiveRun, shape: Shape, store: ResultsFile, executor: Executor,
                 first_failure: bool, show_progress: bool, deadline: float | None,
                 donors: Donors | None) -> None:
        self.q, self.shape, self.store, self.executor = q, shape, store, executor
        self.first_failure, self.show_progress, self.deadline = \
            first_failure, show_progress, deadline
        self.donors = donors
        # where the cheap test picks the random fronts, they are tried before every query
        self.cheap = cheap_test_applies(shape, q.classes)
        self.solved = 0
        self.answered: set[str] = set()
        self.bar: progress.Task | None = None

    def with_donors(self, payloads: list[dict[str, Any]], only: bool = False,
                    pool: bool = False) -> Iterator[dict[str, Any]]:
        """Each payload as it is sent, with the donors known by then (lazy executors)."""
        q = self.q
        for p in payloads:
            if self.deadline is not None:
                p["timeout"] = min(float(p["timeout"]),
                                   max(0.001, self.deadline - time.monotonic()))
            if self.donors is not None:
                p["donors"] = self.donors.current()
                p["transfer_only"] = only
                p["pool"] = [q.pool, 0] if q.pool and (pool or self.cheap) else None
            yield p

    def drain(self, payloads: Iterator[dict[str, Any]]) -> bool:
        """Store the answers as they come; ``True`` when the shape failed or time is up."""
        for res in self.executor.run(query_worker, payloads):
            if res.get("status") == "not transferred":
                continue  # a transfer-only pass that found nothing keeps the stored answer
            res["labels"] = labels_of(res)
            self.store.add(res)
            if self.donors is not None:
                self.donors.add(res)
            if res["key"] not in self.answered:
                self.answered.add(res["key"])
                self.solved += 1
                assert self.bar is not None
                self.bar.update()
            if self.first_failure and res["status"] == "infeasible":
                return True
            if self.deadline is not None and time.monotonic() > self.deadline:
                return True
        return False

    def unknown(self, p: dict[str, Any]) -> bool:
        return bool(self.store.records.get(p["key"], {}).get("status") == "unknown")

    def task(self, what: str, total: int) -> progress.Task:
        t = progress.task(f"{self.shape.label()} {what}", total=total, unit="query",
                          heartbeat=True)
        if not self.show_progress:
            t.close()  # closing first silences it
        return t


def probe_and_walk(run: ShapeRun, pending: list[dict[str, Any]], hard: int
                   ) -> tuple[list[dict[str, Any]], Any]:
    """b-bit weights: with ``--first-failure`` likely refutations go to SAT before the full
    walk (with the segment clauses a refutation is often far cheaper than the walk): first
    what smaller shapes could not memorize (``hard`` of them lead ``pending``), then what
    a short walk did not find; then the walk.  The queries left to ask, in order (none when
    a probe refuted the shape), and the plane pool that goes on walking (or ``None``)."""
    from exactmem.search.finders import plane_exhaustive
    from exactmem.search.solvers.sat_backend import DEFAULT_CONFLICTS

    q, shape, store, show = run.q, run.shape, run.store, run.show_progress
    assert q.bits is not None
    asked: set[int] = set()
    cut: set[int] = set()  # probes asked under a quarter of the conflict budget
    exhaustive = plane_exhaustive.applies(q.dataset(labels_of(pending[0])), shape, q.bits)

    def probe(batch: list[dict[str, Any]], cheap: bool = False) -> bool:
        """Ask ``batch`` first (``cheap``: under a quarter of the conflict budget -- a
        likely refutation is cheap, and the probe is asked again in full later)."""
        for p in batch:
            p.pop("sweep", None)  # the sweep never refutes
            asked.add(id(p))
            if exhaustive:  # the first embeddings of the exhaustive walk, then SAT
                p["exhaustive"] = PROBE_EMBEDDINGS
            if cheap:
                p["conflicts"] = max(1, (q.conflicts or DEFAULT_CONFLICTS) // 4)
                cut.add(id(p))
        run.bar = run.task("probes", len(batch))
        try:
            return bool(batch) and run.drain(run.with_donors(batch))
        except KeyboardInterrupt:
            run.executor.close(cancel=True)
            raise
        finally:
            run.bar.close()
            for p in batch:
                p.pop("exhaustive", None)
                p["conflicts"] = q.conflicts

    walk = walks.walk_pool(q, shape, plane_only=True)
    stop = run.first_failure and probe(pending[:min(hard, PROBES)], cheap=True)
    if run.first_failure and not stop:
        seed_walk(walk, store, shape)
        short = walks.grid_witnesses(q, shape, [p for p in pending if id(p) not in asked],
                                     show, QUICK_FRONTS, walk)
        stop = probe([p for p in short if "witness" not in p][:PROBES])
        seed_walk(walk, store, shape)
    if stop:
        return [], walk
    # grid enumeration: certified networks for what it finds, the rest asked first; a probe
    # left unknown is walked, and asked again only when it ran under the cheap budget or
    # is walked exhaustively
    walked = walks.grid_witnesses(q, shape, [p for p in pending if "witness" not in p and
                                             (id(p) not in asked or run.unknown(p))],
                                  show, None, walk)
    seen = {id(p) for p in walked}
    # where every front can be walked for one labelling, what the walk missed (a probe left
    # unknown too) is walked exhaustively before its SAT query
    for p in walked:
        if "witness" not in p and exhaustive:
            p["exhaustive"] = True
            p.pop("sweep", None)
    return [p for p in walked if id(p) not in asked or "witness" in p or
            "exhaustive" in p or id(p) in cut] + \
        [p for p in pending if "witness" in p and id(p) not in seen], walk


def ask_in_passes(run: ShapeRun, pending: list[dict[str, Any]],
                  suspects: list[dict[str, Any]], walk: Any) -> None:
    """The queries: the likely refutations first, under the whole resource limit; then the
    budget passes, each followed (real weights) by a transfer-only pass over the fronts
    found since; then a plane pool walks again for what SAT left unknown."""
    q, shape, store, donors = run.q, run.shape, run.store, run.donors
    try:
        # labellings that no random front can serve are the likely refutations: they are
        # asked first, under the whole resource limit
        for p in suspects:
            p["rlimit"] = q.rlimit
        if suspects and run.drain(run.with_donors(suspects)):
            raise _Stop
        asked = {id(p) for p in suspects}
        todo = [p for p in pending if id(p) not in asked]
        budgets = walks.budgets(q, donors is not None)
        for k, budget in enumerate(budgets):
            # an earlier pass is skipped where a stored unknown already ran under it
            batch = todo if k == len(budgets) - 1 else \
                [p for p in todo if int(store.records.get(p["key"], {}).get("rlimit")
                                        or 0) < int(budget or 0)]
            for p in batch:
                p["rlimit"] = budget
            if run.drain(run.with_donors(batch)):
                raise _Stop
            if donors is None:
                break
            # a cheap pass: the unknown answers against every front found since, and
            # against random fronts whose streams some tail can label (first time only)
            again = [p for p in todo if run.unknown(p) and
                     (k == 0 or donors.grew_since(p.get("donors", [])))]
            if run.drain(run.with_donors(again, only=True, pool=k == 0)):
                raise _Stop
            todo = [p for p in todo if run.unknown(p)]
        # a plane pool walks again for what SAT left unknown, near every network found
        late = [p for p in pending if run.unknown(p) and "exhaustive" not in p]
        if walk is not None and late and \
                (run.deadline is None or time.monotonic() < run.deadline):
            seed_walk(walk, store, shape)
            walk.patience = LATE_FRONTS
            late = walks.grid_witnesses(q, shape, late, run.show_progress, LATE_FRONTS, walk)
            run.drain(run.with_donors([p for p in late if "witness" in p]))
    except _Stop:
        pass
    except KeyboardInterrupt:
        run.executor.close(cancel=True)
        raise
    finally:
        label_sweep.release()  # the serial executor's solver, kept in this process


def shattering_search(q: ExhaustiveRun, shapes: Sequence[Shape], store: ResultsFile,
                      executor: Executor, first_failure: bool = False,
                      show_progress: bool = True,
                      certificate_dir: Path | None = None,
                      deadline: float | None = None,
                      caps_ok: Callable[[int], bool] | None = None) -> dict[str, Any]:
    """Shapes smallest first until one memorizes every labelling (or ``deadline``,
    a ``time.monotonic()`` value, passes).  ``caps_ok(params)``: no shape beyond the
    swept family has at most ``params`` parameters (else the answer is "at most")."""
    per_shape = []
    smallest = None
    cut = False  # the deadline passed before every shape was tried
    for shape in shapes:
        if deadline is not None and time.monotonic() > deadline:
            cut = True
            break
        summary = run_shape(q, shape, store, executor, first_failure, show_progress,
                            certificate_dir, deadline)
        per_shape.append(summary)
        if summary["shatters"]:
            smallest = summary
            break
    # a minimum needs every smaller shape refuted under exact tie semantics, and (``caps_ok``)
    # no shape beyond the swept caps with fewer parameters
    proved = smallest is not None and all(s["shatters"] is False for s in per_shape[:-1]) \
        and q.ties == "split" and (caps_ok is None or caps_ok(int(smallest["params"])))
    if smallest is not None:
        status = "found"
    elif per_shape and not cut and all(s["shatters"] is False for s in per_shape):
        status = "infeasible"  # every shape of the family refuted
    else:
        status = "unknown"
    return {"status": status,
            "minimal": {**smallest["shape"], "params": smallest["params"]} if smallest else None,
            "proved_minimal": proved, "claim": ("minimal" if proved else "at most")
            if smallest else None, "ties": q.ties, "shapes": per_shape,
            "reused": sum(s["reused"] for s in per_shape),
            "padded": sum(s["padded"] for s in per_shape),
            "solved": sum(s["solved"] for s in per_shape)}
