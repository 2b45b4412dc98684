"""``certify-model --bind-weights`` on a Hugging Face GPT-2 checkpoint (docs/trained-models.md,
"Bound weights"): the certificate holds no weight, ``check`` verifies it with the file beside
it with the count of the embedded certificate and of the in-process self-check; ``info`` and
``export`` read it; a changed byte is rejected and a missing file unusable, each naming the
file; a symbolic link at an output name is refused before any work."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from exactmem.checker.entry import checker_line
from exactmem.cli import main  # noqa: E402
from exactmem.lm import weightsfile  # noqa: E402
from exactmem.lm.checkpoints.random_models import random_gpt2, self_labelled  # noqa: E402
from exactmem.model.dataset import save_dataset  # noqa: E402

COUNT = re.compile(r"(\d+) of (\d+) positions")

CHECKER = checker_line() + "\n"  # printed on stdout before the s line


def run(*args: object) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint ``m/``, 6 self-labelled sequences ``d.json``, and in ``out/`` the
    embedded certificate ``e.json`` and the bound one ``b.json`` (``b.log``: what
    certify-model printed)."""
    folder = tmp_path_factory.mktemp("bind")
    random_gpt2(folder / "m", seed=0)
    save_dataset(self_labelled(folder / "m", 6, 16, seed=0), folder / "d.json")
    (folder / "out").mkdir()
    assert run("certify-model", folder / "m", folder / "d.json", "-o", folder / "out/e.json",
               "--partial", "-q", "--embed-weights") == 0
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert run("certify-model", folder / "m", folder / "d.json", "-o",
                   folder / "out/b.json", "--partial", "-q", "--bind-weights") == 0
    (folder / "b.log").write_text(printed.getvalue())
    return folder


def test_bound_verifies_with_the_counts_of_the_embedded_and_of_the_self_check(
        made: Path, capsys: pytest.CaptureFixture[str]) -> None:
    printed = (made / "b.log").read_text()
    assert "weights bound in" in printed
    certified = COUNT.search(printed)
    cert = json.loads((made / "out/b.json").read_text())
    weights = made / "out/b.weights.safetensors"
    assert cert["model"]["weights"]["path"] == weights.name
    assert cert["model"]["weights"]["bytes"] == weights.stat().st_size
    assert "tensors" not in cert["model"] and '"values"' not in json.dumps(cert)
    claims = []
    for name in ("e.json", "b.json"):
        assert run("check", made / "out" / name, "-q") == 0
        claims.append(capsys.readouterr().out)
    assert claims[0] == claims[1]
    checked = COUNT.search(claims[1])
    assert certified is not None and checked is not None
    assert certified.groups() == checked.groups() and int(checked[1]) > 0
    assert (made / "out/b.json").stat().st_size * 20 < (made / "out/e.json").stat().st_size


def test_info_and_export_read_the_bound_weights(made: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    infos = []
    for name in ("e.json", "b.json"):
        assert run("info", made / "out" / name, "--json") == 0
        infos.append(json.loads(capsys.readouterr().out))
    assert infos[0] == infos[1] and infos[1]["params"] > 0
    assert run("export", made / "out/b.json", "--format", "torch", "-o", made / "b.pt",
               "-q") == 0
    out = capsys.readouterr().out
    assert "wrote" in out and (made / "b.pt").is_file()


def test_a_changed_byte_is_rejected_and_a_missing_file_unusable(
        made: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("certify-model", made / "m", made / "d.json", "-o", tmp_path / "c.json",
               "--partial", "-q", "--bind-weights", "--no-self-check") == 0
    weights = tmp_path / "c.weights.safetensors"
    assert "not checked yet" in capsys.readouterr().out
    assert run("check", tmp_path / "c.json", "-q") == 0  # written unchecked, then checked
    capsys.readouterr()
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    assert run("check", tmp_path / "c.json", "-q") == 1
    out, err = capsys.readouterr()
    assert out == CHECKER + "s REJECTED\n" and str(weights) in err
    weights.unlink()
    assert run("check", tmp_path / "c.json", "-q") == 2
    out, err = capsys.readouterr()
    assert out == CHECKER + "s UNUSABLE\n" and f"cannot read the weights file {weights}" in err


@pytest.mark.parametrize("link", ["c.json", "c.weights.safetensors"])
def test_a_symlink_at_an_output_name_is_refused(made: Path, tmp_path: Path, link: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (tmp_path / link).symlink_to(victim)
    assert run("certify-model", made / "m", made / "d.json", "-o", tmp_path / "c.json",
               "--partial", "-q", "--bind-weights") == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "untouched"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([link, "victim"])


def test_binding_is_the_default_above_the_size(made: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(weightsfile, "BIND_ABOVE", 1000)
    assert run("certify-model", made / "m", made / "d.json", "-o", tmp_path / "c.json",
               "--partial", "-q", "--no-self-check") == 0
    assert "weights" in json.loads((tmp_path / "c.json").read_text())["model"]
    monkeypatch.undo()
    assert run("certify-model", made / "m", made / "d.json", "-o", tmp_path / "s.json",
               "--partial", "-q", "--no-self-check") == 0
    assert "tensors" in json.loads((tmp_path / "s.json").read_text())["model"]
    assert not (tmp_path / "s.weights.safetensors").exists()


def test_bind_and_embed_exclude_each_other(made: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        run("certify-model", made / "m", made / "d.json", "-o", tmp_path / "c.json",
            "--bind-weights", "--embed-weights")
    assert exc.value.code == 2
