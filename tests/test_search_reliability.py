"""Search reliability: retries, bounds, tie semantics in claims, progress, budgets, workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.model.dataset import Dataset, save_dataset
from exactmem.search.encoding import EncodeOptions, encode
from exactmem.search.executors import SerialExecutor
from exactmem.search.labelings import (
    Question,
    ResultsFile,
    labelling_classes,
    record_key,
    run_shape,
    shattering_search,
)
from exactmem.search.shape import Shape
from exactmem.search.sweep import Limits, minimize

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


def _question(**kw: Any) -> Question:
    return Question(((0,), (1,)), 2, **kw)


def _fake_unknown(store: ResultsFile, q: Question, labels: tuple[int, ...],
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


def test_all_labelings_honours_the_bound(tmp_path: Path) -> None:
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


def test_all_labelings_json_records_ties_and_margin_is_at_most(tmp_path: Path) -> None:
    proc = cli("search", "--all-labelings", "--N", "2", "--n", "1", "--vocab", "2",
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
    start = time.monotonic()
    rep = minimize(xor(), Shape(residual=False, readout="scalar"), "ff-width",
                   Limits(max_ff_width=3), timeout_s=60, budget_s=1e-6)
    assert time.monotonic() - start < 30
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


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_killing_the_driver_ends_its_workers(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "exactmem", "search", "--all-labelings", "--N", "9", "--n", "2",
         "--vocab", "3", "--minimize", "params", "--workers", "2", "--timeout", "120",
         "--results", str(tmp_path / "k.jsonl"), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        kids: set[int] = set()
        for _ in range(300):
            kids = _children(proc.pid)
            if len(kids) >= 2:
                break
            time.sleep(0.1)
        assert kids, "the driver started no worker"
        time.sleep(1.0)
        kids |= _children(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    for _ in range(100):
        if not any(_alive(k) for k in kids):
            break
        time.sleep(0.1)
    left = [k for k in kids if _alive(k)]
    for k in left:  # clean up before failing
        os.kill(k, signal.SIGKILL)
    assert not left, f"workers {left} outlived the driver"


def test_bit_bounded_unknowns_are_retried_under_a_larger_conflict_budget() -> None:
    rec = {"status": "unknown", "conflict_budget": 1000, "timeout": 60.0}
    assert not _question(bits=2, conflicts=1000).retry(rec)
    assert _question(bits=2, conflicts=5000).retry(rec)
    assert _question(bits=2, conflicts=1000, retry_unknown=True).retry(rec)
    assert not _question(bits=2, conflicts=5000).retry({**rec, "status": "infeasible"})
    assert _question(bits=2).header()["bits"] == 2
