"""What a newcomer reads first says what there is: ``certify-model --help`` describes every
model kind the verb reads, the README lists every docs page and every extra."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from exactmem.api.lm import KINDS
from exactmem.api.model import MODEL_KINDS
from exactmem.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_certify_model_help_describes_every_model_kind(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert set(MODEL_KINDS) == {*KINDS, "export"}
    with pytest.raises(SystemExit):
        main(["certify-model", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for kind, what in MODEL_KINDS.items():
        assert f"{kind}: {' '.join(what.split())[:40]}" in text.replace("- ", "-"), kind


def test_the_readme_lists_every_docs_page_and_every_extra() -> None:
    readme = (REPO / "README.md").read_text()
    pages = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))
    assert [p for p in pages if f"`{p}`" not in readme] == []
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    listed = set(re.findall(r"`([a-z]+)`\s+\(", readme.split("Extras:")[1].split("\n\n")[0]))
    assert set(extras) <= listed, set(extras) - listed
