"""Sharded certification: evaluation and check of K disjoint slices give the certificate and
the verdict of the single pass, in local processes, through the CLI, and on a Dask
LocalCluster; failures keep the sequence numbers of the whole dataset."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from exactmem.constructions import get
from exactmem.datasets.draw import generate
from exactmem.model.dataset import save_dataset
from exactmem.model.interval_verdict import evaluate_certified
from exactmem.model.shards import bounds, evaluate_sharded
from exactmem.pipeline import certify


def test_bounds_cover_the_sequences_once() -> None:
    for count in (1, 5, 17):
        for k in (1, 2, 3, 8):
            cover = [i for lo, hi in bounds(count, k) for i in range(lo, hi)]
            assert cover == list(range(count))


def test_sharded_evaluation_equals_the_single_pass_with_failures_renumbered() -> None:
    ds = generate("next-token", N=60, n=6, vocab=10, classes=3, seed=2)
    spec = get("kajitsuka2025-next-token").build(ds, {"seed": 2}).spec
    wrong = dataclasses.replace(ds, labels=tuple((y + 1) % 3 if i % 7 == 3 else y
                                                 for i, y in enumerate(ds.labels)))
    one = evaluate_certified(spec, wrong)
    many = evaluate_sharded(spec, wrong, None, 4)
    assert one.failures and many == one
    assert [f.sequence for f in many.failures] == [i for i in range(60) if i % 7 == 3]


def test_cli_certify_in_shards_writes_the_single_pass_certificate(tmp_path: Path) -> None:
    data = tmp_path / "d.json"
    save_dataset(generate("seq2seq", N=40, n=4, vocab=9, classes=2, seed=4), data)
    outs = []
    for shards in ("1", "3"):
        out = tmp_path / f"c{shards}.json"
        proc = subprocess.run([sys.executable, "-m", "exactmem", "certify", str(data), "-c",
                               "kajitsuka2025-seq2seq", "-o", str(out), "--shards", shards,
                               "-q"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-500:]
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    bad = subprocess.run([sys.executable, "-m", "exactmem", "certify", str(data), "-c",
                          "kajitsuka2025-seq2seq", "-o", str(tmp_path / "x.json"),
                          "--shards", "0"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--shards" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "x.json").exists()


def test_certify_on_a_dask_local_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    ds = generate("next-token", N=50, n=5, vocab=8, classes=2, seed=6)
    single = certify(ds, "kajitsuka2025-next-token", {"seed": 6})
    # dashboard ":0": a free port (the default 8787 collides with a concurrent run)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        many = certify(ds, "kajitsuka2025-next-token", {"seed": 6}, shards=3,
                       submit=client.submit)
    assert single.report.verified and many.report.verified
    assert many.report.claim == single.report.claim
    assert json.dumps(many.certificate, sort_keys=True) == json.dumps(single.certificate,
                                                                      sort_keys=True)
