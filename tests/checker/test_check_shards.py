"""Sharded checking: K disjoint slices of the sequences give the verdict of the single
pass, locally and on a Dask LocalCluster; a tampered weight is rejected naming the
sequences of every shard."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzzing import genuine, redigest, text_of

from exactmem.checker import check_file
from exactmem.checker.sharded import check_sharded


def _write(tmp: Path, name: str, cert: dict[str, Any]) -> Path:
    path = tmp / name
    path.write_text(text_of(cert))
    return path


@pytest.mark.parametrize("name", ["lookup", "kajitsuka2025-seq2seq", "dana2024-aot"])
def test_shards_agree_with_the_single_pass(tmp_path: Path, name: str) -> None:
    cert = genuine(name)
    path = _write(tmp_path, "c.json", cert)
    one = check_file(path)
    many = check_sharded(path, 3)
    assert one.verified and many.verified
    assert many.claim == one.claim and many.counts == one.counts


def _tampered(tmp_path: Path) -> tuple[Path, list[str]]:
    cert = copy.deepcopy(genuine("lookup"))
    last = cert["network"]["layers"][-1]
    row = last["weight"][0] if "weight" in last else last["maps"][-1]["weight"][0]
    row[0] = str(int(row[0].split("/")[0]) + 7)
    path = _write(tmp_path, "bad.json", redigest(cert))
    single = check_file(path)
    assert not single.verified and not single.unusable
    return path, single.failures


def test_tampered_weight_is_rejected_by_the_shards_naming_sequences(tmp_path: Path) -> None:
    path, single = _tampered(tmp_path)
    many = check_sharded(path, 4)
    assert not many.verified and not many.unusable
    assert sorted(many.failures) == sorted(single)
    assert any(f.startswith("sequence ") for f in many.failures)


def test_cli_shards_on_a_dask_local_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    good = _write(tmp_path, "c.json", genuine("kajitsuka2025-next-token"))
    bad, single = _tampered(tmp_path)
    # dashboard ":0": a free port (the default 8787 collides with a concurrent run)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        for path, code in ((good, 0), (bad, 1)):
            proc = subprocess.run([sys.executable, "-m", "exactmem", "check", str(path),
                                   "--shards", "2", "--scheduler", cluster.scheduler_address],
                                  capture_output=True, text=True, timeout=300)
            assert proc.returncode == code, proc.stderr[-500:]
            assert "Traceback" not in proc.stderr
            if code:
                named = [line[2:] for line in proc.stderr.splitlines()
                         if line.startswith("c sequence ")]
                assert sorted(named) == sorted(f for f in single if f.startswith("sequence "))
