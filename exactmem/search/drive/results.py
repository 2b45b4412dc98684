"""What an exhaustive run asks and where its answers go.

:class:`ExhaustiveRun` holds the inputs, the label alphabet and the query settings of an
``--all-labellings`` run; :class:`ResultsFile` streams the answers to a JSON-lines file, one
line per answered query, flushed and synced as it arrives, so a rerun reads the file and
solves only what is missing (``Ctrl-C`` or a kill loses nothing that was stored);
:func:`pad_from_store` answers a labelling from a stored witness of a nested smaller shape;
:func:`summarize` sums up one shape.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exactmem.errors import DatasetError
from exactmem.model.dataset import Dataset
from exactmem.search.encode.encoding import TieMode
from exactmem.search.finders.grid_pool import MAX_FRONTS as GRID_FRONTS
from exactmem.search.finders.label_sweep import SWEEP_CONFLICTS
from exactmem.search.finders.transfer import DEFAULT_POOL
from exactmem.search.question.labellings import LabellingClass
from exactmem.search.question.outcome import Found
from exactmem.search.question.shape import Shape, nests_in

RESULTS_FORMAT = "exactmem.search-results/1"


def record_key(shape: Shape, labels: Sequence[int]) -> str:
    return f"{shape.label()} {shape.readout}|{','.join(map(str, labels))}"


class ResultsFile:
    """Append-only JSON lines: a header naming the question, then one record per query."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}
        self.by_labels: dict[tuple[int, ...], list[dict[str, Any]]] = {}
        lines: list[str] = []
        if path.exists():
            raw = path.read_text().splitlines()
            for k, line in enumerate(raw):
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    if k == len(raw) - 1:
                        break  # a line cut by a kill: dropped, rewritten below
                    raise DatasetError(f"{path}: line {k + 1} is not JSON") from None
                lines.append(line)
                if k == 0:
                    if obj.get("header") != header:
                        raise DatasetError(f"{path}: the results file belongs to another "
                                           f"question (header {obj.get('header')!r})")
                elif "key" in obj:
                    self._index(obj)
            if len(lines) != len(raw) or not lines:
                from exactmem.files.atomic import write_text_atomic

                write_text_atomic(path, "".join(x + "\n" for x in lines))
        if not lines:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._write_line({"format": RESULTS_FORMAT, "header": header})

    def _write_line(self, obj: dict[str, Any]) -> None:
        # appended in place (a kill keeps every finished line), never through a symlink
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                         0o666)
        except OSError as exc:
            raise DatasetError(f"cannot append to {self.path}: {exc.strerror or exc} "
                               "(a symlink is never followed)") from None
        with os.fdopen(fd, "a") as fh:
            fh.write(json.dumps(obj, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def add(self, record: dict[str, Any]) -> None:
        self._write_line(record)
        self._index(record)

    def _index(self, record: dict[str, Any]) -> None:
        self.records[record["key"]] = record
        if "labels" in record:
            self.by_labels.setdefault(tuple(record["labels"]), []).append(record)


@dataclass(frozen=True, slots=True)
class ExhaustiveRun:
    """The inputs, the label alphabet and the query settings of an exhaustive run."""

    sequences: tuple[tuple[int, ...], ...]
    vocab: int
    classes: int = 2
    ties: TieMode = "split"
    timeout_s: float = 60.0
    bound: str | None = None  # "p/q": |w| <= bound on every weight, or None
    retry_unknown: bool = False  # re-solve stored unknowns even under the same budget
    bits: int | None = None  # b-bit integer weights, decided by SAT
    conflicts: int | None = None  # SAT conflict budget per query
    proof_dir: str | None = None  # where CNF files and LRAT proofs are written
    rlimit: int | None = None  # Z3 resource limit per solver call (deterministic)
    cvc5_rlimit: int | None = None  # cvc5 resource limit of the cross-check (None: skipped)
    encoding: str = "positions"  # the first encoding; the other one cross-checks
    crosscheck: bool = True  # re-ask every refutation (second encoding, cvc5)
    transfer: bool = True  # try the fronts of earlier witnesses first (real weights)
    pool: int = DEFAULT_POOL  # random fronts tried on the labellings left unknown (0: none)
    grid: int = GRID_FRONTS  # with bits: fronts of the grid enumeration (0: none)
    sweep: int = SWEEP_CONFLICTS  # with bits: conflicts per labelling of the label sweep

    def header(self) -> dict[str, Any]:
        head: dict[str, Any] = {"sequences": [list(s) for s in self.sequences],
                                "vocab": self.vocab, "classes": self.classes,
                                "ties": self.ties}
        if self.bound is not None:
            head["bound"] = self.bound
        if self.bits is not None:
            head["bits"] = self.bits
        return head

    def retry(self, record: dict[str, Any]) -> bool:
        """Is a stored answer to be solved again?  Only an ``unknown``, and only with
        ``retry_unknown`` or a larger budget (timeout, Z3 ``rlimit``, or SAT conflicts with
        ``bits``) than the one it ran under (no ``rlimit`` counts as unlimited)."""
        if record.get("status") != "unknown":
            return False
        if self.bits is not None:
            from exactmem.search.solvers.sat_backend import DEFAULT_CONFLICTS

            return self.retry_unknown or (self.conflicts or DEFAULT_CONFLICTS) > \
                int(record.get("conflict_budget", 0))
        if self.retry_unknown or self.timeout_s > float(record.get("timeout", 0.0)):
            return True
        before = record.get("rlimit")
        return before is not None and (self.rlimit is None or self.rlimit > int(before))

    def dataset(self, labels: Sequence[int]) -> Dataset:
        return Dataset("next-token", "token-ids", self.sequences, tuple(labels),
                       vocab_size=self.vocab)



def cert_path(certificate_dir: Path | None, key: str) -> Path | None:
    if certificate_dir is None:
        return None
    certificate_dir.mkdir(parents=True, exist_ok=True)
    name = key.replace(" ", "_").replace("|", "__").replace(",", "")
    return certificate_dir / f"{name}.cert.json"


def pad_from_store(q: ExhaustiveRun, shape: Shape, labels: tuple[int, ...], key: str,
                    store: ResultsFile, cert_path: Path | None = None) -> bool:
    """Answer from a stored witness of a smaller nested shape (zero-padded, re-certified)."""
    from exactmem.search.drive.query import padded_result
    from exactmem.search.encode.encoding import EncodeOptions

    for rec in store.by_labels.get(tuple(labels), []):
        small = Shape.from_dict(rec["shape"])
        if rec["status"] == "found" and "network" in rec and small != shape and \
                nests_in(small, shape):
            res = padded_result(q.dataset(labels), small, rec["network"], shape,
                                EncodeOptions(ties=q.ties))
            if res is None:
                continue
            if cert_path is not None and res.certificate is not None:
                from exactmem.certificate import write_certificate

                write_certificate(res.certificate, cert_path)
                res = dataclasses.replace(res, certificate_path=str(cert_path))
            out = res.as_dict()
            from exactmem.certificate import spec_to_json

            assert isinstance(res.outcome, Found)
            out.update(key=key, labels=list(labels), network=spec_to_json(res.outcome.witness),
                       padded_from=small.as_dict(), verified=True)
            store.add(out)
            return True
    return False


def summarize(shape: Shape, classes: list[LabellingClass], store: ResultsFile,
              reused: int, solved: int) -> dict[str, Any]:
    counts = {"found": 0, "infeasible": 0, "unknown": 0, "unanswered": 0}
    labellings = dict(counts)
    secs: list[float] = []
    params = None
    for cls in classes:
        rec = store.records.get(record_key(shape, cls.labels))
        status = rec["status"] if rec else "unanswered"
        counts[status] += 1
        labellings[status] += cls.size
        if rec:
            secs.append(float(rec["seconds"]))
            params = rec["params"]
    if counts["infeasible"]:
        shatters: bool | None = False
    elif counts["found"] == len(classes):
        shatters = True
    else:
        shatters = None
    secs.sort()
    return {"shape": shape.as_dict(), "params": params, "shatters": shatters,
            "classes": counts, "labellings": labellings, "reused": reused, "solved": solved,
            "median_seconds": secs[len(secs) // 2] if secs else None,
            "seconds": round(sum(secs), 4)}

