"""The producer's evaluation in a forked process beside the check (exactmem.model.overlap):
the same certificate, verdict and failures as evaluating first and checking after, when the
network memorizes, when the labels are not its outputs, and when the evaluation fails."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

from exactmem import pipeline
from exactmem.constructions import get
from exactmem.datasets.draw import generate
from exactmem.errors import ConstructionError
from exactmem.model import overlap
from exactmem.model.dataset import Dataset
from exactmem.pipeline import certify

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or (os.cpu_count() or 1) < 2,
                                reason="needs os.fork and two CPUs")


@pytest.fixture(autouse=True)
def _memory_not_known(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's free memory is not judged here (the guard has its own test): a test
    worker's peak so far must not decide which path runs."""
    monkeypatch.setattr(overlap, "_available_bytes", lambda: None)
    monkeypatch.delenv("EXACTMEM_OVERLAP", raising=False)


def _both(monkeypatch: pytest.MonkeyPatch, ds: Dataset, name: str,
          ) -> tuple[pipeline.CertifyOutcome, pipeline.CertifyOutcome]:
    """(evaluate then check, evaluate beside the check) of the same build."""
    monkeypatch.setenv("EXACTMEM_JOBS", "1")
    first = certify(ds, name, {"seed": 3})
    monkeypatch.delenv("EXACTMEM_JOBS")
    monkeypatch.setattr(overlap, "MIN_POSITIONS", 1)
    said: list[str] = []
    beside = certify(ds, name, {"seed": 3}, log=said.append)
    assert any("in a second process" in line for line in said), said
    return first, beside


@pytest.mark.parametrize("name", ["kajitsuka2025-next-token", "lookup"])
def test_a_memorizing_network_gets_the_same_certificate(monkeypatch: pytest.MonkeyPatch,
                                                        name: str) -> None:
    ds = generate("next-token", N=40, n=5, vocab=8, classes=3, seed=1)
    first, beside = _both(monkeypatch, ds, name)
    assert first.report.verified and beside.report.verified
    assert beside.certificate == first.certificate
    assert beside.timings["evaluate"] > 0 and "check" in beside.timings


def test_a_wrong_guess_is_claimed_again_from_the_evaluation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ds = generate("next-token", N=30, n=4, vocab=6, classes=3, seed=2)
    real = overlap.labels_as_predictions

    def shifted(data: Dataset, scalar: bool) -> overlap.Evaluation:
        ev = real(data, scalar)
        return dataclasses.replace(ev, predictions=tuple(
            tuple(p + 1 for p in row) if i == 7 else row  # type: ignore[operator]
            for i, row in enumerate(ev.predictions)))

    monkeypatch.setattr(overlap, "labels_as_predictions", shifted)
    first, beside = _both(monkeypatch, ds, "kajitsuka2025-next-token")
    assert first.report.verified and beside.report.verified
    assert beside.certificate == first.certificate


def test_a_network_that_does_not_memorize_gets_the_same_verdict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ds = generate("next-token", N=30, n=4, vocab=6, classes=3, seed=4)
    wrong = dataclasses.replace(ds, labels=tuple((y + 1) % 3 if i % 5 == 2 else y
                                                 for i, y in enumerate(ds.labels)))
    con = get("kajitsuka2025-next-token")

    class Stale:  # the network of the right labels, certified against the wrong ones
        tasks, inputs, claims = con.tasks, con.inputs, con.claims

        @staticmethod
        def defaults() -> dict[str, Any]:
            return con.defaults()

        @staticmethod
        def build(_: Dataset, opts: dict[str, Any]) -> Any:
            return con.build(ds, opts)

    monkeypatch.setattr(pipeline.constructions, "get", lambda _name: Stale)
    first, beside = _both(monkeypatch, wrong, "kajitsuka2025-next-token")
    assert not first.report.verified and not beside.report.verified
    assert beside.certificate == first.certificate
    assert beside.report.failures == first.report.failures


def test_an_error_in_the_forked_evaluation_reaches_the_caller(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> Any:
        raise ConstructionError("no evaluation today")

    monkeypatch.setattr(pipeline, "_timed_evaluation", broken)
    monkeypatch.setattr(overlap, "MIN_POSITIONS", 1)
    ds = generate("next-token", N=20, n=4, vocab=6, classes=3, seed=5)
    with pytest.raises(ConstructionError, match="no evaluation today"):
        certify(ds, "lookup", {"seed": 1})


def test_too_little_memory_evaluates_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(overlap, "MIN_POSITIONS", 1)
    assert overlap.available(10)
    monkeypatch.setenv("EXACTMEM_OVERLAP", "0")
    assert not overlap.available(10)
    monkeypatch.delenv("EXACTMEM_OVERLAP")
    monkeypatch.setattr(overlap, "_available_bytes", lambda: 4 * overlap._peak_bytes())
    assert overlap.available(10)
    monkeypatch.setattr(overlap, "_available_bytes", lambda: overlap._peak_bytes())
    assert not overlap.available(10)  # the evaluation and the check would not both fit
    said: list[str] = []
    ds = generate("next-token", N=20, n=4, vocab=6, classes=3, seed=5)
    assert certify(ds, "lookup", {"seed": 1}, log=said.append).report.verified
    assert not any("in a second process" in line for line in said), said


def test_fork_alone_allows_only_the_readers_of_earlier_children(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A further child may be forked beside the threads that drain earlier children's pipes,
    not beside any other thread (its locks would stay held in the child).  The threads
    seen are set here, so the verdict does not depend on the test process's own threads."""
    import threading

    from exactmem.model import forked

    main = threading.main_thread()
    child = forked.Forked(sum, [1, 2, 3])
    try:
        reader = child._reader
        assert reader.name == forked.READER
        monkeypatch.setattr(forked.threading, "enumerate", lambda: [main, reader])
        assert forked.usable(alone=True)
        other = threading.Thread(target=lambda: None)
        monkeypatch.setattr(forked.threading, "enumerate", lambda: [main, reader, other])
        assert not forked.usable(alone=True) and forked.usable()
        monkeypatch.setattr(forked.threading, "enumerate", lambda: [main])
        assert forked.usable(alone=True)
        assert child.result() == 6
    finally:
        child.close()
