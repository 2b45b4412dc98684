"""``certify-model --shards K [--scheduler ADDRESS]``: a language model's proof and self-check
on slices of the sequences give the byte-identical certificate and the claim of one process,
in local processes and on a Dask LocalCluster; bad shard counts are one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

from exactmem.api.model import certify_model  # noqa: E402
from exactmem.api.model_shards import slices  # noqa: E402
from exactmem.api.verbs import check  # noqa: E402
from exactmem.cli import main  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_gpt2  # noqa: E402
from exactmem.lm.tokens import next_token_dataset  # noqa: E402
from exactmem.model.dataset import save_dataset  # noqa: E402

SEQS = 140  # three batches of 64: slices of whole batches


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("lmshards")
    model = random_gpt2(root / "m", seed=1, layers=2, d_model=32)
    vocab = int(json.loads((root / "m" / "config.json").read_text())["vocab_size"])
    toks = np.random.default_rng(5).integers(0, vocab, size=(SEQS, 6))
    data = root / "nt.json"
    save_dataset(next_token_dataset(toks, vocab), data)
    one = certify_model(str(model), data, output=root / "one.json", partial=True)
    assert one.written and one.code_lengths
    return {"root": root, "model": str(model), "data": data, "one": one,
            "bytes": (root / "one.json").read_bytes()}


def test_slices_are_whole_batches_covering_every_sequence() -> None:
    for count in (1, 63, 64, 65, 140, 1000):
        for k in (1, 2, 3, 7, 100):
            got = slices(count, k, 64)
            assert got[0][0] == 0 and got[-1][1] == count and len(got) <= k
            assert all(a < b for a, b in got)
            assert all(b == c for (_, b), (c, _) in zip(got, got[1:], strict=False))
            assert all(a % 64 == 0 for a, _ in got)
    assert slices(140, 3, 64) == [(0, 64), (64, 128), (128, 140)]
    assert slices(5, 2, 1) == [(0, 2), (2, 5)]


def test_local_shards_write_the_certificate_of_one_process(case: dict[str, Any]) -> None:
    out = case["root"] / "three.json"
    many = certify_model(case["model"], case["data"], output=out, partial=True, shards=3)
    one = case["one"]
    assert (many.proved, many.positions, many.sequences_full) == \
        (one.proved, one.positions, one.sequences_full)
    assert many.code_lengths == one.code_lengths
    assert out.read_bytes() == case["bytes"]
    assert check(out).claim == check(case["root"] / "one.json").claim


def test_a_dask_local_cluster_writes_the_certificate_of_one_process(
        case: dict[str, Any]) -> None:
    distributed = pytest.importorskip("distributed")
    out = case["root"] / "dask.json"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        many = certify_model(case["model"], case["data"], output=out, partial=True,
                             shards=2, scheduler=cluster.scheduler_address)
    assert (many.proved, many.positions) == (case["one"].proved, case["one"].positions)
    assert out.read_bytes() == case["bytes"]


@pytest.mark.parametrize("shards", ["0", "-2", "x"])
def test_a_bad_shard_count_is_a_one_line_error(case: dict[str, Any], shards: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out: Path = case["root"] / "bad.json"
    try:
        code = main(["certify-model", case["model"], str(case["data"]), "-o", str(out),
                     "--partial", "--shards", shards])
    except SystemExit as exc:  # argparse: not an integer
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert "shards" in err and "Traceback" not in err
    assert not out.exists()
