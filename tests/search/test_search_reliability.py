"""Search reliability: retries, bounds, tie semantics in claims, progress, budgets, workers."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.model.dataset import Dataset, save_dataset
from exactmem.search.drive.all_labellings import run_shape, shattering_search
from exactmem.search.drive.executors import SerialExecutor
from exactmem.search.drive.results import ExhaustiveRun, ResultsFile, record_key
from exactmem.search.drive.sweep import Limits, minimize
from exactmem.search.encode.encoding import EncodeOptions, encode
from exactmem.search.question.labellings import labelling_classes
from exactmem.search.question.shape import Shape

POINTS = [(0, 0), (1, 0), (0, 1), (1, 1)]
SMALL = Shape()  # L1 H1 m1 s1 q0, residual, argmax


def xor() -> Dataset:
    seqs = tuple(((Fraction(a), Fraction(b)),) for a, b in POINTS)
    return Dataset("next-token", "vectors", seqs, (0, 1, 1, 0), dim=2)


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EXACTMEM_QUIET": ""}
    return subprocess.run([sys.executable, "-m", "exactmem", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


class Recording(SerialExecutor):
    """The serial executor, remembering every payload it ran."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []

    def run(self, fn: Any, payloads: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in payloads:
            self.payloads.append(p)
            yield fn(p)


def _question(**kw: Any) -> ExhaustiveRun:
    return ExhaustiveRun(((0,), (1,)), 2, **kw)


def _fake_unknown(store: ResultsFile, q: ExhaustiveRun, labels: tuple[int, ...],
                  timeout: float) -> str:
    key = record_key(SMALL, labels)
    store.add({"key": key, "labels": list(labels), "shape": SMALL.as_dict(), "params": 5,
               "status": "unknown", "reason": "timeout", "seconds": timeout,
               "timeout": timeout})
    return key


def test_stored_unknown_is_retried_with_a_larger_timeout_or_on_request(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    q = _question(timeout_s=5.0)
    labels = labelling_classes(q.sequences, 2, True)[-1].labels
    store = ResultsFile(path, q.header())
    key = _fake_unknown(store, q, labels, 5.0)
    ex = Recording()
    run_shape(q, SMALL, ResultsFile(path, q.header()), ex, show_progress=False)
    assert key not in [p["key"] for p in ex.payloads]  # same timeout: kept
    ex = Recording()
    again = ResultsFile(path, q.header())
    run_shape(_question(timeout_s=5.0, retry_unknown=True), SMALL, again, ex,
              show_progress=False)
    assert key in [p["key"] for p in ex.payloads]
    assert again.records[key]["status"] == "found"
    # a larger timeout retries too (fresh unknown stored under 5 s)
    store = ResultsFile(path, q.header())
    _fake_unknown(store, q, labels, 5.0)
    ex = Recording()
    bigger = ResultsFile(path, q.header())
    run_shape(_question(timeout_s=30.0), SMALL, bigger, ex, show_progress=False)
    assert key in [p["key"] for p in ex.payloads]
    assert bigger.records[key]["status"] == "found" and bigger.records[key]["timeout"] == 30.0


def _rationals(obj: Any) -> Iterator[Fraction]:
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _rationals(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _rationals(v)
    elif isinstance(obj, str):
        try:
            yield Fraction(obj)
        except ValueError:
            return


def test_all_labellings_honours_the_bound(tmp_path: Path) -> None:
    q = _question(bound="3/2")
    assert q.header()["bound"] == "3/2"  # another question than the unbounded one
    store = ResultsFile(tmp_path / "b.jsonl", q.header())
    ex = Recording()
    summary = run_shape(q, SMALL, store, ex, show_progress=False)
    assert ex.payloads and all(p["bound"] == "3/2" for p in ex.payloads)
    assert summary["shatters"] is True
    weights = [w for r in store.records.values() for w in _rationals(r["network"]["layers"])]
    assert weights and max(abs(w) for w in weights) <= Fraction(3, 2)
    assert any(w != 0 for w in weights)


def test_under_a_bound_the_class_zero_readout_row_is_free() -> None:
    ds = Dataset("next-token", "token-ids", ((0,), (1,)), (0, 1), vocab_size=2)
    free = encode(ds, SMALL, EncodeOptions(bound=Fraction(1)))
    assert all(not p.is_const() for p in free.params["out.W"][0] + free.params["out.b"][0])
    fixed = encode(ds, SMALL, EncodeOptions())
    assert all(p.is_const() for p in fixed.params["out.W"][0])


def test_margin_ties_never_claim_a_minimum() -> None:
    rep = minimize(xor(), Shape(residual=False, readout="scalar"), "ff-width",
                   Limits(max_ff_width=2), EncodeOptions(ties="margin"), timeout_s=60)
    assert rep["status"] == "found" and rep["minimal"]["ff_width"] == 2
    assert rep["proved_minimal"] is False and rep["claim"] == "at most"
    assert rep["ties"] == "margin"


def test_all_labellings_json_records_ties_and_margin_is_at_most(tmp_path: Path) -> None:
    proc = cli("search", "--all-labellings", "--N", "2", "--n", "1", "--vocab", "2",
               "--minimize", "ff-width", "--max-ff-width", "1", "--ties", "margin",
               "--executor", "serial", "--results", str(tmp_path / "m.jsonl"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ties"] == "margin" and out["proved_minimal"] is False
    assert out["claim"] == "at most"


def test_json_output_keeps_progress_on_stderr(tmp_path: Path) -> None:
    data = tmp_path / "xor.json"
    save_dataset(xor(), data)
    proc = cli("search", str(data), "--readout", "scalar", "--residual", "off",
               "--minimize", "ff-width", "--max-ff-width", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)  # stdout is exactly one JSON object
    assert "q1" in proc.stderr and "infeasible" in proc.stderr  # one line per shape
    quiet = cli("search", str(data), "--readout", "scalar", "--residual", "off",
                "--minimize", "ff-width", "--max-ff-width", "2", "--json", "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_overall_budget_bounds_the_sweep() -> None:
    rep = minimize(xor(), Shape(residual=False, readout="scalar"), "ff-width",
                   Limits(max_ff_width=3), timeout_s=60, budget_s=1e-6)
    assert rep["status"] == "unknown" and rep["minimal"] is None
    assert all(e["status"] == "unknown" for e in rep["sizes"])
    assert any("budget" in e.get("reason", "") for e in rep["sizes"])


def test_shattering_minimum_needs_the_caps_check(tmp_path: Path) -> None:
    q = _question()
    rep = shattering_search(q, [SMALL], ResultsFile(tmp_path / "c.jsonl", q.header()),
                            SerialExecutor(), show_progress=False, caps_ok=lambda p: False)
    assert rep["status"] == "found" and rep["proved_minimal"] is False
    assert rep["claim"] == "at most"
    rep = shattering_search(q, [SMALL], ResultsFile(tmp_path / "c.jsonl", q.header()),
                            SerialExecutor(), show_progress=False, caps_ok=lambda p: True)
    assert rep["proved_minimal"] is True and rep["claim"] == "minimal"


HANG_GUARD = 900.0  # seconds; only against a driver that hangs, never a pass/fail criterion


def _worker_pids(proc: subprocess.Popen[bytes], fifo: Path, count: int) -> list[int]:
    """Wait until ``count`` workers have written their pid into ``fifo`` (the executor's
    ``EXACTMEM_WORKER_LOG`` hook); each line is an event, no clock decides the answer."""
    rd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    wr = os.open(fifo, os.O_WRONLY)  # our own writer: the read end never sees end-of-file
    try:
        text = b""
        while text.count(b"\n") < count:
            ready, _, _ = select.select([rd], [], [], HANG_GUARD)
            assert ready, f"no worker started within the {HANG_GUARD:.0f} s hang guard"
            text += os.read(rd, 4096)
            assert proc.poll() is None, "the driver ended before it started its workers"
        return [int(x) for x in text.split()]
    finally:
        os.close(rd)
        os.close(wr)


def test_killing_the_driver_ends_its_workers(tmp_path: Path) -> None:
    fifo = tmp_path / "workers.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [sys.executable, "-m", "exactmem", "search", "--all-labellings", "--N", "9", "--n", "2",
         "--vocab", "3", "--minimize", "params", "--workers", "2", "--timeout", "120",
         "--results", str(tmp_path / "k.jsonl"), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "EXACTMEM_WORKER_LOG": str(fifo)})
    handles: dict[int, int] = {}  # pidfd -> worker pid
    try:
        for k in _worker_pids(proc, fifo, 2):  # opened while the driver lives: no pid reuse
            try:
                handles[os.pidfd_open(k)] = k
            except ProcessLookupError:  # already gone: nothing to wait for
                pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    try:
        pending = list(handles)
        while pending:  # a pidfd becomes readable when its process ends
            ready, _, _ = select.select(pending, [], [], 120.0)  # guard after the event
            if not ready:
                break
            pending = [h for h in pending if h not in ready]
        left = [handles[h] for h in pending]
        for h in pending:  # clean up before failing
            signal.pidfd_send_signal(h, signal.SIGKILL)
    finally:
        for h in handles:
            os.close(h)
    assert not left, f"workers {left} outlived the driver"


def test_bit_bounded_unknowns_are_retried_under_a_larger_conflict_budget() -> None:
    rec = {"status": "unknown", "conflict_budget": 1000, "timeout": 60.0}
    assert not _question(bits=2, conflicts=1000).retry(rec)
    assert _question(bits=2, conflicts=5000).retry(rec)
    assert _question(bits=2, conflicts=1000, retry_unknown=True).retry(rec)
    assert not _question(bits=2, conflicts=5000).retry({**rec, "status": "infeasible"})
    assert _question(bits=2).header()["bits"] == 2
