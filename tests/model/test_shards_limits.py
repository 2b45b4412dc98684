"""``--shards K`` for any K >= 1: the slices are capped (MAX_SHARDS) and clipped to the
sequences, the local processes to the CPUs, and the verdict is the single pass's."""

from __future__ import annotations

import concurrent.futures
import copy
import os
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from fuzzing import genuine, redigest, text_of

from exactmem.checker import check_file
from exactmem.checker.shard_plan import MAX_SHARDS, shard_plan
from exactmem.checker.sharded import check_certificate_sharded, check_sharded
from exactmem.cli import main
from exactmem.model.dataset import load_dataset
from exactmem.model.interval_verdict import evaluate_certified
from exactmem.model.shards import evaluate_sharded

HUGE = (2 ** 64, 10 ** 6)


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    return genuine("lookup")


def _write(tmp: Path, name: str, cert: dict[str, Any]) -> Path:
    path = tmp / name
    path.write_text(text_of(cert))
    return path


def _count(cert: dict[str, Any]) -> int:
    return len(cert["claims"]["outputs"])


def test_the_plan_is_capped_and_clipped() -> None:
    cpus = os.cpu_count() or 1
    assert shard_plan(2 ** 64, 10 ** 9) == (MAX_SHARDS, min(MAX_SHARDS, cpus))
    assert shard_plan(10 ** 6, 5) == (5, min(5, cpus))
    assert shard_plan(3, 1) == (1, 1)
    with pytest.raises(ValueError):
        shard_plan(0, 5)


class _Recording:
    """Runs each submitted call at once and counts them (a stand-in for a Dask client)."""

    def __init__(self) -> None:
        self.calls = 0

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        self.calls += 1
        fut: Future[Any] = Future()
        fut.set_result(fn(*args))
        return fut


@pytest.mark.parametrize("extra", [1, *HUGE])
def test_any_k_gives_the_single_pass_verdict(tmp_path: Path, cert: dict[str, Any],
                                             extra: int) -> None:
    path = _write(tmp_path, "c.json", cert)
    one = check_file(path)
    shards = _count(cert) + extra if extra == 1 else extra
    rec = _Recording()
    many = check_sharded(path, shards, rec.submit)
    assert one.verified and many.verified and many.claim == one.claim
    assert rec.calls == min(_count(cert), MAX_SHARDS)  # never a slice without a sequence
    decoded = check_certificate_sharded(cert, tmp_path, shards, _Recording().submit)
    assert decoded.verified and decoded.claim == one.claim


def test_a_tampered_certificate_is_rejected_alike_for_every_k(tmp_path: Path,
                                                               cert: dict[str, Any]) -> None:
    bad = copy.deepcopy(cert)
    last = bad["network"]["layers"][-1]
    row = last["weight"][0] if "weight" in last else last["maps"][-1]["weight"][0]
    row[0] = str(int(row[0].split("/")[0]) + 7)
    path = _write(tmp_path, "bad.json", redigest(bad))
    single = check_file(path)
    assert not single.verified and not single.unusable
    for shards in (_count(cert) + 1, *HUGE):
        many = check_sharded(path, shards, _Recording().submit)
        assert not many.verified and not many.unusable
        assert sorted(many.failures) == sorted(single.failures)


def test_local_processes_never_exceed_the_cpus(tmp_path: Path, cert: dict[str, Any],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real = concurrent.futures.ProcessPoolExecutor

    def pool(max_workers: int) -> Any:
        asked.append(max_workers)
        return real(max_workers=1)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", pool)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    report = check_sharded(_write(tmp_path, "c.json", cert), 2 ** 64)
    assert report.verified and asked == [2]


@pytest.mark.parametrize("shards", ["N+1", *HUGE])
def test_cli_check_with_any_k(tmp_path: Path, cert: dict[str, Any], shards: Any,
                              monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one slice at a time: no processes
    k = _count(cert) + 1 if shards == "N+1" else shards
    code = main(["check", str(_write(tmp_path, "c.json", cert)), "--shards", str(k), "-q"])
    out = capsys.readouterr()
    assert code == 0 and out.out.splitlines()[-1] == "s VERIFIED", out.err[-300:]
    assert "Error" not in out.err


def test_sharded_evaluation_accepts_any_k(tmp_path: Path, cert: dict[str, Any]) -> None:
    data = tmp_path / "d.json"
    data.write_text(text_of(cert["dataset"]["data"]))
    ds = load_dataset(data)
    from exactmem.constructions import get

    con = get("lookup")
    spec = con.build(ds, con.defaults()).spec
    one = evaluate_certified(spec, ds, None)
    rec = _Recording()
    many = evaluate_sharded(spec, ds, None, 2 ** 64, rec.submit)
    assert many.predictions == one.predictions and rec.calls == ds.N
