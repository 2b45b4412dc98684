"""``exactmem generate`` refuses sizes beyond its documented caps: one line, exit 2, nothing
written, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from exactmem.cli import main
from exactmem.commands.generate import CAPS, MAX_VALUES


@pytest.mark.parametrize("args,names", [
    (["--N", str(CAPS["N"] + 1)], "--N"),
    (["--n", "1000000000"], "--n"),
    (["--vocab", "9" * 30], "--vocab"),
    (["--classes", str(CAPS["classes"] + 1)], "--classes"),
    (["--dim", str(CAPS["dim"] + 1)], "--dim"),
    (["--for", "mahdavi2024-mha", "--heads", "100000"], "--heads"),
    (["--for", "mahdavi2024-mha", "--head-dim", "100000"], "--head-dim"),
    (["--N", "1000000", "--n", "11"], "N * n ="),
    (["--N", "100000", "--n", "10", "--dim", "11"], "N * n * dim ="),
    (["--dim", "1000", "--vocab", "10001"], "vocab * dim ="),
])
def test_sizes_beyond_the_caps_are_refused(args: list[str], names: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d.json"
    assert main(["generate", *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and names in err and "docs/cli.md" in err
    assert not out.exists()


def test_sizes_at_the_caps_pass_the_check(tmp_path: Path) -> None:
    import argparse

    from exactmem.commands.generate import check_sizes

    check_sizes(argparse.Namespace(N=CAPS["N"], n=MAX_VALUES // CAPS["N"], vocab=CAPS["vocab"],
                                   classes=CAPS["classes"], dim=None, heads=CAPS["heads"],
                                   head_dim=CAPS["head_dim"]))
    assert main(["generate", "--N", "20", "--n", "3", "-o", str(tmp_path / "d.json")]) == 0


def test_a_vector_vocabulary_larger_than_the_entries_allow_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """33 distinct entries p/q exist: 34 one-dimensional words cannot be drawn (no endless
    loop)."""
    assert main(["generate", "--dim", "1", "--vocab", "34", "--N", "5", "--n", "2",
                 "-o", str(tmp_path / "d.json")]) == 2
    assert "cannot draw 34 distinct vectors" in capsys.readouterr().err
    assert main(["generate", "--dim", "1", "--vocab", "33", "--N", "5", "--n", "2",
                 "-o", str(tmp_path / "d.json")]) == 0
