"""certify-model on models it cannot or must not read: declared sizes beyond the tensors
present, layer kinds it does not read (named, with what to do), NaN weights in safetensors;
and the line it prints while torch loads (docs/certify-model.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crafted_limits import heads_safetensors

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

import exactmem  # noqa: E402
from exactmem.cli import main  # noqa: E402
from exactmem.errors import SpecError  # noqa: E402


@pytest.fixture(scope="module")
def lookup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    run = lambda *a: main([str(x) for x in a])  # noqa: E731
    assert run("generate", "--N", 20, "--n", 4, "--vocab", 6, "--classes", 3, "--seed", 1,
               "-o", folder / "d.json") == 0
    assert run("certify", folder / "d.json", "-c", "lookup", "-o", folder / "c.json", "-q") == 0
    assert run("export", folder / "c.json", "--format", "torch", "-o", folder / "m.pt",
               "-q") == 0
    assert run("export", folder / "c.json", "--format", "safetensors", "-o",
               folder / "m.safetensors", "-q") == 0
    return folder


def _refused(model: Path, data: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["certify-model", str(model), str(data), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and not out.exists()
    assert len([x for x in err.splitlines() if "error:" in x]) == 1
    return err


def test_a_billion_declared_heads_are_refused_at_once(lookup: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    model = heads_safetensors(tmp_path / "heads.safetensors", 10 ** 9)
    assert model.stat().st_size < 3000
    (tmp_path / "d.json").write_text(json.dumps(
        {"format": "exactmem.dataset/1", "task": "next-token", "inputs": "token-ids",
         "vocab_size": 2, "sequences": [[0, 1], [1, 0]], "labels": [0, 1]}))
    err = _refused(model, tmp_path / "d.json", tmp_path / "c.json", capsys)
    assert "the structure calls for 4000000001 tensors, layer 1: 1000000000 heads" in err
    assert "lacks the tensors ['layers.1.heads.0.query'" in err


def test_declared_heads_in_a_pt_file_are_checked_against_its_tensors(
        lookup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = torch.load(lookup / "m.pt", weights_only=True)
    skel = json.loads(state["_extra_state"])
    layer = next(i for i, la in enumerate(skel["layers"]) if la["type"] == "attention")
    skel["layers"][layer]["heads"] = 10 ** 12
    state["_extra_state"] = json.dumps(skel)
    torch.save(state, tmp_path / "x.pt")
    err = _refused(tmp_path / "x.pt", lookup / "d.json", tmp_path / "c.json", capsys)
    assert f"layer {layer}: {10 ** 12} heads" in err and "declared sizes" in err


def test_nan_in_a_bfloat16_safetensors_file_is_one_line(lookup: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(lookup / "m.safetensors"), framework="pt") as fh:
        meta = fh.metadata()
    tensors = {k: v.to(torch.bfloat16) for k, v in load_file(lookup / "m.safetensors").items()}
    tensors["layers.0.table"][0, 0] = float("nan")
    save_file(tensors, tmp_path / "nan.safetensors", metadata=meta)
    err = _refused(tmp_path / "nan.safetensors", lookup / "d.json", tmp_path / "c.json", capsys)
    assert "layers.0.table: holds nan at index [0, 0]" in err


class _Norm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(6, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.out = torch.nn.Linear(4, 3)


def _kinds() -> dict[str, torch.nn.Module]:
    return {"LayerNorm": _Norm(),
            "nn.MultiheadAttention": torch.nn.MultiheadAttention(4, 2),
            "nn.TransformerEncoderLayer": torch.nn.TransformerEncoderLayer(4, 2, 8)}


@pytest.mark.parametrize("kind", sorted(_kinds()))
def test_unsupported_layers_are_named_with_what_to_do(lookup: Path, tmp_path: Path, kind: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    module = _kinds()[kind]
    with pytest.raises(SpecError, match=f"cannot read {kind} .*It reads: embedding"):
        exactmem.certify_model(module, lookup / "d.json")
    torch.save(module.state_dict(), tmp_path / "m.pt")  # a plain state dict, no structure
    err = _refused(tmp_path / "m.pt", lookup / "d.json", tmp_path / "c.json", capsys)
    assert f"cannot read {kind} (tensor " in err and "docs/certify-model.md" in err
    advice = {"LayerNorm": "train or rebuild the model without it",
              "nn.MultiheadAttention": "in_proj_weight",
              "nn.TransformerEncoderLayer": "rebuild the block without normalization"}[kind]
    assert advice in err


def test_a_norm_next_to_a_layout_model_is_named(lookup: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    state = torch.load(lookup / "m.pt", weights_only=True)
    state["layers.1.ln_1.weight"] = torch.ones(3, dtype=torch.float64)
    torch.save(state, tmp_path / "x.pt")
    err = _refused(tmp_path / "x.pt", lookup / "d.json", tmp_path / "c.json", capsys)
    assert "cannot read LayerNorm (tensor 'layers.1.ln_1.weight')" in err


def test_a_line_on_stderr_while_torch_loads(lookup: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    args = ["certify-model", str(lookup / "m.pt"), str(lookup / "d.json"), "-o"]
    assert main([*args, str(tmp_path / "a.json")]) == 0
    assert "loading torch" in capsys.readouterr().err
    assert main([*args, str(tmp_path / "b.json"), "-q"]) == 0
    assert "loading torch" not in capsys.readouterr().err
    assert main(["certify-model", str(lookup / "m.safetensors"), str(lookup / "d.json"), "-o",
                 str(tmp_path / "c.json")]) == 0
    assert "loading torch" not in capsys.readouterr().err  # safetensors needs no torch
