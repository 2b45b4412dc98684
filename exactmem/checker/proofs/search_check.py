"""``exactmem check-search RESULT.json``: one verdict for a whole bit-bounded search answer
(standard library only; docs/proof-checker.md).

An answer of ``exactmem search DATA --bits B --json`` lists sizes (shapes) as ``found``,
``infeasible`` or ``unknown``.  Each claim is checked against the dataset the answer
embeds (its SHA-256 recomputed):

* ``found``: the size's certificate (embedded, or a file bound by SHA-256) verifies with
  :func:`.verify.check_certificate` on this dataset, and its network has the entry's shape
  and parameter count and B-bit integer weights;
* ``infeasible`` by ``lrat``: the CNF of the question (dataset, shape -- or the larger
  shape it nests in --, bits, options) is re-derived by the trusted encoder
  :mod:`.search_encode` and must equal the file byte for byte; both files match their
  SHA-256; the LRAT proof refutes the CNF (:mod:`.lrat`);
* ``infeasible`` by ``label-consistency``: two sequences with the same multiset and last
  token carry different labels;
* every entry's parameter count is recomputed from its shape; the summary (``status``,
  ``minimal``, ``proved_minimal``) must follow from the entries.

``proved_minimal`` is checked by enumerating the smaller shapes of the swept family (the
caps in ``family``) and finding each refuted in the answer.  Verdicts: ``s VERIFIED``
(exit 0), ``s REJECTED`` (exit 1: a claim fails), ``s UNUSABLE`` (exit 2: a file is
missing or malformed, or a limit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..cert_dataset import dataset as read_dataset
from ..parse import integer
from ..strict_json import read_json
from ..verdict import CheckReport, Unusable
from .search_claims import (  # noqa: F401 (nests_in, params_of: re-exported)
    Failed,
    nests_in,
    params_of,
    statement,
    summary,
)
from .search_sizes import MAX_BITS, MAX_SEQUENCES, MAX_SIZES, Sizes, search_report
from .search_store import check_labelings_answer, check_store, is_store


def _answer_sizes(answer: Any, base: Path, report: CheckReport) -> Sizes:
    """The question of an answer: its embedded dataset (SHA-256 recomputed) and bits."""
    if type(answer) is not dict:
        raise Unusable("answer: expected a JSON object")
    for key in ("bits", "sizes", "dataset", "status", "minimal", "proved_minimal"):
        if key not in answer:
            raise Unusable(f"answer.{key}: missing")
    bits = integer(answer["bits"], "answer.bits", 1, MAX_BITS)
    task, inputs, toks, labels, size, digest = read_dataset(answer["dataset"], base)
    if task != "next-token":
        raise Unusable("dataset.task: the search answers next-token datasets only")
    if len(toks) > MAX_SEQUENCES:
        raise Unusable(f"dataset: more than {MAX_SEQUENCES} sequences")
    if digest != answer["dataset"]["sha256"]:
        raise Failed("dataset: its SHA-256 does not match the one in the answer")
    seqs = tuple(tuple(tuple(t) if type(t) is list else t for t in s) for s in toks)
    return Sizes(inputs, size, seqs, tuple(labels), digest, bits, base, report)


def check_search(answer: Any, base: Path) -> CheckReport:
    """Check a decoded answer; files it names are found relative to ``base``.  An
    ``--all-labelings`` answer (it names its results store) is checked with its store
    (:mod:`.search_store`)."""
    if type(answer) is dict and "sequences" in answer and "results" in answer:
        return check_labelings_answer(answer, base)
    report = search_report()
    try:
        a = _answer_sizes(answer, base, report)
        sizes = answer["sizes"]
        if type(sizes) is not list or len(sizes) > MAX_SIZES:
            raise Unusable(f"sizes: expected a list of at most {MAX_SIZES} entries")
        done = []
        for k, e in enumerate(sizes):
            try:
                done.append((e, a.entry(e, f"sizes[{k}]")))
                report.counts["unknown"] += done[-1][1] == "unknown"
            except Failed as exc:
                for x in exc.args:
                    report.reject(str(x))
            except Unusable as exc:
                report.refuse(str(exc))
        if len(done) == len(sizes):
            summary(answer, done, a, a.bits)
            report.claim = statement(answer, a.bits)
    except Failed as exc:
        for x in exc.args:
            report.reject(str(x))
    except (Unusable, MemoryError, RecursionError) as exc:
        report.refuse(str(exc) or type(exc).__name__)
    except Exception as exc:  # noqa: BLE001 - never a traceback, never a verified answer
        report.refuse(f"cannot be checked: {type(exc).__name__}: {exc}")
    return report


def check_search_file(path: str, base: str | None = None) -> CheckReport:
    """Read and check an answer file -- or the results store of an ``--all-labelings`` run
    (:mod:`.search_store`); its files are relative to its folder (or ``base``)."""
    if is_store(path):
        return check_store(Path(path), None if base is None else Path(base))
    try:
        answer = read_json(path)
    except Unusable as exc:
        report = search_report()
        report.refuse(str(exc))
        return report
    return check_search(answer, Path(path).parent if base is None else Path(base))
