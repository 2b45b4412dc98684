"""Language-model datasets: the next token labels every position; bad token files are
refused with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from exactmem.errors import DatasetError
from exactmem.lm.tokens import next_token_dataset, read_tokens
from exactmem.model.dataset import load_dataset

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "lm_dataset.py"


def test_the_next_token_labels_every_position() -> None:
    ds = next_token_dataset(np.array([[3, 1, 4, 1], [5, 9, 2, 6]]), 10)
    assert (ds.task, ds.inputs, ds.n) == ("seq2seq", "token-ids", 3)
    assert ds.sequences == ((3, 1, 4), (5, 9, 2)) and ds.labels == ((1, 4, 1), (9, 2, 6))


@pytest.mark.parametrize(("tokens", "vocab", "message"), [
    ([[1]], 4, "L >= 2"), ([[1, 7]], 4, "ids must lie in [0, 4)"),
    (np.array([[0.5, 1.0]]), 4, "expected integers")])
def test_bad_token_arrays_are_refused(tokens: object, vocab: int, message: str) -> None:
    with pytest.raises(DatasetError, match=message.replace("[", r"\[").replace(")", r"\)")):
        next_token_dataset(tokens, vocab)  # type: ignore[arg-type]


def test_token_files_and_the_script(tmp_path: Path) -> None:
    np.save(tmp_path / "t.npy", np.array([[1, 2, 3], [3, 2, 1]]))
    (tmp_path / "t.txt").write_text("1 2 3\n3 2 1\n")
    assert (read_tokens(tmp_path / "t.npy") == read_tokens(tmp_path / "t.txt")).all()
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "t.txt"), "--vocab", "4",
                           "-o", str(tmp_path / "d.json")], capture_output=True, text=True)
    assert done.returncode == 0 and load_dataset(tmp_path / "d.json").labels == ((2, 3), (2, 1))
    (tmp_path / "bad.txt").write_text("1 2 3\n3 2\n")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "bad.txt"), "--vocab",
                           "4", "-o", str(tmp_path / "e.json")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "lines of one length" in done.stderr and not (tmp_path / "e.json").exists()
