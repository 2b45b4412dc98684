"""``exactmem info [--json]`` on a language-model certificate: what it claims, position by
position (dataset embedded or bound by path); an unreadable one is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from lm_models import random_spec

from exactmem.cli import main
from exactmem.lm.certfile import build_lm_certificate, write_lm_certificate
from exactmem.model.dataset import Dataset, save_dataset


def make(tmp_path: Path, bind: bool) -> Path:
    spec = random_spec(np.random.default_rng(0), "gelu_tanh", tied=True)
    toks = np.random.default_rng(1).integers(0, spec.vocab_size, size=(3, 8))
    ds = Dataset(task="seq2seq", inputs="token-ids", vocab_size=spec.vocab_size,
                 sequences=tuple(tuple(map(int, s)) for s in toks),
                 labels=tuple(tuple(map(int, s)) for s in toks))
    save_dataset(ds, tmp_path / "d.json")
    cert = build_lm_certificate(spec, ds, [list(range(8)), [0, 3], []], True,
                                "d.json" if bind else None)
    write_lm_certificate(cert, tmp_path / "c.json")
    return tmp_path / "c.json"


@pytest.mark.parametrize("bind", [False, True])
def test_info_json_counts_positions(tmp_path: Path, bind: bool,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(make(tmp_path, bind)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["certified_positions"], out["positions"], out["sequences_in_full"]) == (10, 24, 1)
    assert out["layers"] == 2 and out["partial"] is True
    assert main(["info", str(tmp_path / "c.json")]) == 0
    assert "certified_positions  10" in capsys.readouterr().out


def test_info_unreadable_lm_certificate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = make(tmp_path, False)
    cert = json.loads(path.read_text())
    del cert["claims"]
    path.write_text(json.dumps(cert))
    assert main(["info", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "claims" in err[0]
