"""``exactmem extract --execution``: sequences proved extractable in every float execution
of a format, judged against torch's float32 forward pass (outside the producer), re-proved
by ``exactmem check`` and counted by it; tampered execution claims rejected."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lm_models import redigest  # noqa: E402

from exactmem.cli import main  # noqa: E402
from exactmem.lm.checkpoints.nanogpt import nanogpt_logits  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_nanogpt  # noqa: E402
from exactmem.lm.extraction import greedy_decode  # noqa: E402

K, M, V, N = 4, 4, 16, 12
FLIPPED = (3, 8)  # sequences whose second suffix token is changed (so not extractable)
WINDOW = list(range(K - 1, K + M - 1))


def run(*args: object) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A random nanoGPT with weights of std 0.05 (its float32 rounding radius is well below
    its margins), 12 prefixes continued by its own float64 greedy decode, two of them with a
    suffix token changed; ``extract --execution float32``."""
    folder = tmp_path_factory.mktemp("extract_exec")
    ckpt = random_nanogpt(folder / "m.pt", seed=3, layers=1, d_model=16, vocab=V, context=16,
                          std=0.05)
    pre = np.random.default_rng(0).integers(0, V, (N, K))
    toks = np.concatenate([pre, greedy_decode(lambda t: nanogpt_logits(ckpt, t), pre, M)], 1)
    for i in FLIPPED:
        toks[i, K + 1] = (toks[i, K + 1] + 1) % V
    np.save(folder / "t.npy", toks)
    from exactmem.api.extracting import extract

    r = extract(ckpt, folder / "t.npy", folder / "r.json", prefix=K, suffix=M,
                execution="float32")
    return {"folder": folder, "ckpt": ckpt, "toks": toks, "result": r,
            "report": json.loads((folder / "r.json").read_text())}


def test_every_execution_claim_holds_in_torch_float32(made: dict[str, Any]) -> None:
    from exactmem.api.lm import load_lm
    from exactmem.lm.torchrun import torch_right

    r = made["result"]
    assert (r.execution, r.ulps) == ("float32", 2)
    claimed = [i for i, yes in enumerate(r.exec_extractable) if yes]
    assert claimed, "the model's margins should allow some claims"
    assert not set(claimed) & set(FLIPPED)
    assert all(r.verdicts[i].status == "extractable" for i in claimed)
    spec, _, _ = load_lm(made["ckpt"], "nanogpt")
    toks = made["toks"][:, :K + M - 1]
    labels = made["toks"][:, 1:K + M]
    right = torch_right(spec, toks, labels, "float32")
    for i in claimed:  # the label is the unique float32 argmax at every suffix position
        assert right[i, WINDOW].all(), i
    summary = made["report"]["summary"]
    assert summary["extractable_every_execution"] == len(claimed)
    assert made["report"]["execution"] == {"format": "float32", "ulps": 2}
    rows = made["report"]["sequences"]
    assert [row["extractable_every_execution"] for row in rows] == r.exec_extractable


def _claim(out: str) -> int:
    found = re.search(r"c claim: (\d+) of 12 sequences extractable in every float32 "
                      r"execution \(greedy, prefix 4, suffix 4", out)
    assert found is not None, out
    return int(found[1])


def test_check_counts_the_same_sequences(made: dict[str, Any],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    want = sum(made["result"].exec_extractable)
    for shards in (1, 2):
        assert run("check", made["folder"] / "r.cert.json", "--shards", shards, "-q") == 0
        assert _claim(capsys.readouterr().out) == want


def _tampered(made: dict[str, Any], tmp_path: Path, change: Any) -> Path:
    cert = json.loads((made["folder"] / "r.cert.json").read_text())
    change(cert["claims"]["execution"]["positions"])
    path = tmp_path / "t.json"
    path.write_text(json.dumps(redigest(cert)))
    return path


def test_a_not_extractable_sequence_claimed_is_rejected(
        made: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def claim_flipped(rows: list[list[int]]) -> None:
        rows[FLIPPED[0]] = sorted(set(rows[FLIPPED[0]]) | set(WINDOW))

    assert run("check", _tampered(made, tmp_path, claim_flipped), "-q") == 1
    err = capsys.readouterr()
    assert f"execution float32: sequence {FLIPPED[0]}, position {K}" in err.out + err.err


def test_a_dropped_position_loses_its_sequence(
        made: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = made["result"].exec_extractable.index(True)

    def drop(rows: list[list[int]]) -> None:
        rows[first] = [p for p in rows[first] if p != WINDOW[-1]]

    assert run("check", _tampered(made, tmp_path, drop), "-q") == 0
    assert _claim(capsys.readouterr().out) == sum(made["result"].exec_extractable) - 1


def test_ulps_without_execution_exit_2(made: dict[str, Any], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert run("extract", made["ckpt"], made["folder"] / "t.npy", "--prefix", K, "--suffix",
               M, "--ulps", 3, "-o", tmp_path / "r.json", "-q") == 2
    assert "--ulps: only with --execution" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_command_prints_the_count(made: dict[str, Any], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert run("extract", made["ckpt"], made["folder"] / "t.npy", "--prefix", K, "--suffix",
               M, "--execution", "float32", "--ulps", 2, "-o", tmp_path / "r.json", "-q") == 0
    want = sum(made["result"].exec_extractable)
    assert (f"and {want} of 12 sequences extractable in every float32 execution "
            "(exp/tanh/erf/rsqrt within 2 ulps)") in capsys.readouterr().out
    assert (tmp_path / "r.cert.json").read_bytes() == \
        (made["folder"] / "r.cert.json").read_bytes()
