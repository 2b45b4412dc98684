"""The exact passes hold a bounded number of sequences at a time (producer
``evaluate.SLICE``, checker ``passes.CHUNK``): slicing changes no prediction, no failure
and no sequence number in a failure line, and a deep block is not walked once per slice."""

from __future__ import annotations

import copy
import dataclasses
import importlib
from typing import Any

import pytest

from exactmem.certificate.build import digest_of
from exactmem.checker import check_certificate, passes
from exactmem.datasets.draw import generate
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


@pytest.fixture(scope="module")
def ks25() -> Any:
    ds = generate(task="next-token", N=90, n=8, vocab=16, classes=2, seed=4)
    out = certify(ds, "kajitsuka2025-next-token", {"seed": 1})
    assert out.report.verified, out.report.failures[:3]
    return ds, out


def test_deep_block_runs_once_over_all_slices(ks25: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slicing bounds the attention layers' memory; the deep scalar block after them runs
    once on the joined state (producer and checker), not once per slice."""
    from exactmem.checker import net_piecewise as checker_piecewise
    from exactmem.model import piecewise as model_piecewise

    ds, out = ks25
    from exactmem.constructions import get

    spec = get("kajitsuka2025-next-token").build(ds, {"seed": 1}).spec
    whole = evaluate_mod.evaluate(spec, ds)
    calls: dict[str, int] = {"model": 0, "checker": 0}
    for name, mod in (("model", model_piecewise), ("checker", checker_piecewise)):
        real = mod.evaluate

        def counted(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            calls[_name] += 1
            return _real(*a, **k)

        monkeypatch.setattr(mod, "evaluate", counted)
    monkeypatch.setattr(evaluate_mod, "SLICE", 7)
    monkeypatch.setattr(passes, "CHUNK", 7)
    assert evaluate_mod.evaluate(spec, ds) == whole
    assert check_certificate(out.certificate).verified
    assert 0 < calls["model"] <= 2 and 0 < calls["checker"] <= 2


def test_exact_pass_chunks_change_nothing(outcome: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker's exact pass (no float claim) sliced: same failures; the dense tail runs
    a block of columns at a time."""
    _, out = outcome
    bad = copy.deepcopy(out.certificate)
    bad["claims"].pop("float_exact", None)
    bad["claims"]["outputs"][17] = [str((int(bad["claims"]["outputs"][17][0]) + 1) % 8)]
    bad["digest"] = digest_of(bad)
    whole = check_certificate(bad)
    monkeypatch.setattr(passes, "CHUNK", 4)
    chunked = check_certificate(bad)
    assert not whole.verified and chunked.failures == whole.failures
    assert any("sequence 17" in f for f in chunked.failures)
