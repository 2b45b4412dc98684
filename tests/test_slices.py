"""The exact passes hold a bounded number of sequences at a time (producer
``evaluate.SLICE``, checker ``passes.CHUNK``): slicing changes no prediction, no failure
and no sequence number in a failure line."""

from __future__ import annotations

import copy
import dataclasses
import importlib
from typing import Any

import pytest

from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate, passes
from exactmem.model.generate import generate
from exactmem.pipeline import certify

evaluate_mod = importlib.import_module("exactmem.model.evaluate")  # the module, not the function


@pytest.fixture(scope="module")
def outcome() -> Any:
    ds = generate(task="next-token", N=60, n=12, vocab=16, classes=8, seed=11)
    out = certify(ds, "dense-float32", {"seed": 3})
    assert out.report.verified, out.report.failures[:3]
    return ds, out


def test_producer_slices_change_nothing(outcome: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ds, out = outcome
    from exactmem.constructions import get

    spec = get("dense-float32").build(ds, {"seed": 3, "max_bits": 24}).spec
    wrong = dataclasses.replace(ds, labels=tuple((y + 1) % 8 if i in (5, 41) else y
                                                 for i, y in enumerate(ds.labels)))
    whole = evaluate_mod.evaluate(spec, wrong)
    monkeypatch.setattr(evaluate_mod, "SLICE", 7)
    sliced = evaluate_mod.evaluate(spec, wrong)
    assert sliced == whole
    assert [f.sequence for f in sliced.failures] == [5, 41]


def test_checker_chunks_change_nothing(outcome: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _, out = outcome
    bad = copy.deepcopy(out.certificate)
    bad["claims"]["outputs"][43] = [str((int(bad["claims"]["outputs"][43][0]) + 1) % 8)]
    bad["digest"] = digest_of(bad)
    whole = check_certificate(bad)
    monkeypatch.setattr(passes, "CHUNK", 5)
    chunked = check_certificate(bad)
    assert not whole.verified and chunked.failures == whole.failures
    assert any("sequence 43" in f for f in chunked.failures)
    assert check_certificate(out.certificate).verified
