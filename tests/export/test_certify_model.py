"""certify-model: a .pt or safetensors model in the export layout, read exactly, certified."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

import exactmem  # noqa: E402
from exactmem.certificate import read_certificate, spec_from_certificate  # noqa: E402
from exactmem.cli import main  # noqa: E402
from exactmem.errors import NotExactError, SpecError  # noqa: E402
from exactmem.exporters.skeleton import named_matrices  # noqa: E402
from exactmem.importers.import_model import read_model, read_skeleton  # noqa: E402
from exactmem.model.spec import Embedding  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def lookup(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """d.json (N = 30), its lookup certificate c.json, exported to m.pt and m.safetensors."""
    folder = tmp_path_factory.mktemp("model")
    run = lambda *a: main([str(x) for x in a])  # noqa: E731
    assert run("generate", "--N", 30, "--n", 4, "--vocab", 6, "--classes", 3, "--seed", 1,
               "-o", folder / "d.json") == 0
    assert run("certify", folder / "d.json", "-c", "lookup", "-o", folder / "c.json", "-q") == 0
    assert run("export", folder / "c.json", "--format", "torch", "-o", folder / "m.pt") == 0
    assert run("export", folder / "c.json", "--format", "safetensors", "-o",
               folder / "m.safetensors") == 0
    return folder


def cli(*args: object) -> int:
    return main([str(a) for a in args])


@pytest.mark.parametrize("name", ["m.pt", "m.safetensors"])
def test_an_export_certifies_back(lookup: Path, name: str, capsys: pytest.CaptureFixture[str],
                                  ) -> None:
    out = lookup / f"back-{name}.json"
    assert cli("certify-model", lookup / name, lookup / "d.json", "-o", out) == 0
    assert f"certified {lookup / name} on 30 sequences" in capsys.readouterr().out
    assert cli("check", out) == 0
    cert = read_certificate(out)
    assert cert["construction"] == {"name": "imported-model",
                                    "params": {"dtypes": ["float64"], "source": name}}
    assert spec_from_certificate(cert) == spec_from_certificate(read_certificate(
        lookup / "c.json"))


def test_float32_export_and_api_inputs(lookup: Path, tmp_path: Path) -> None:
    assert cli("export", lookup / "c.json", "--format", "torch", "--dtype", "float32", "-o",
               tmp_path / "m32.pt") == 0
    res = exactmem.certify_model(tmp_path / "m32.pt", lookup / "d.json")
    assert res.verified and res.path is None and res.construction == "imported-model"
    from exactmem.exporters.torch import load_network

    net = load_network(str(lookup / "m.pt"))
    assert exactmem.certify_model(net, lookup / "d.json").verified  # a module
    state = torch.load(lookup / "m.pt", weights_only=True)
    assert exactmem.certify_model(state, exactmem.load_dataset(lookup / "d.json")).verified


def test_one_perturbed_weight_is_exit_1_naming_sequences(lookup: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         ) -> None:
    state = torch.load(lookup / "m.pt", weights_only=True)
    state["layers.3.maps.1.weight"][0, -3] += 1.0
    torch.save(state, tmp_path / "bad.pt")
    out = tmp_path / "bad.json"
    assert cli("certify-model", tmp_path / "bad.pt", lookup / "d.json", "-o", out) == 1
    cap = capsys.readouterr()
    named = re.search(r"not memorized: (\d+) of 30 sequences: ([\d, ]+)", cap.err)
    assert named is not None and int(named.group(1)) >= 1
    assert "sequence " in cap.err and "expected label" in cap.err
    assert "was not written" in cap.out and not out.exists()
    res = exactmem.certify_model(state, lookup / "d.json", output=out)
    assert not res and res.failing_sequences and not out.exists()
    assert str(res).startswith("not certified (imported-model, N = 30): ")


def _edit(state: dict[str, Any], change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    new = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
    change(new)
    return new


def _skel(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(s: dict[str, Any]) -> None:
        sk = json.loads(s["_extra_state"])
        edit(sk)
        s["_extra_state"] = json.dumps(sk)
    return change


def _nan(s: dict[str, Any]) -> None:
    s["layers.2.weight"][0, 1] = float("nan")


def _inf(s: dict[str, Any]) -> None:
    s["layers.3.maps.0.bias"][4] = float("inf")


UNUSABLE: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "missing": (lambda s: s.pop("layers.3.maps.0.bias"), "lacks the tensors "
                "['layers.3.maps.0.bias']"),
    "extra": (lambda s: s.update({"layers.2.bias": torch.zeros(1, dtype=torch.float64)}),
              "does not describe: ['layers.2.bias']"),
    "shape": (lambda s: s.update({"layers.2.weight": torch.zeros(3, 1, dtype=torch.float64)}),
              "layers.2.weight: expected shape (any, 3), found (3, 1)"),
    "bias_shape": (lambda s: s.update({"layers.3.maps.0.bias": s["layers.3.maps.0.bias"][:, None]}),
                   "layers.3.maps.0.bias: expected shape"),
    "integer": (lambda s: s.update({"layers.0.table": s["layers.0.table"].to(torch.int64)}),
                "layers.0.table: expected a floating-point tensor, found torch.int64"),
    "nan": (_nan, "layers.2.weight: holds nan at index [0, 1]"),
    "inf": (_inf, "layers.3.maps.0.bias: holds inf at index [4]"),
    "no_structure": (lambda s: s.pop("_extra_state"), "has no network structure"),
    "bad_kind": (_skel(lambda k: k["layers"][1].update(kind="hardmx")),
                 "structure.layers[1].kind: expected one of"),
    "typo_field": (_skel(lambda k: k["layers"][1].update(key=None)),
                   "structure.layers[1]: expected the fields"),
    "bad_keys": (_skel(lambda k: k["layers"][1].update(keys=[9])),
                 "structure.layers[1].keys: expected positions in 0..3"),
    "not_uniform": (lambda s: [s[f"layers.1.heads.0.{p}"].fill_(1.0) for p in ("query", "key")],
                    "layers.1 (attention): uniform attention needs zero query"),
    "wrong_vocab": (_skel(lambda k: k["input"].update(dim=7)),
                    "layers.0.table: expected shape (any, 7), found (3, 6)"),
}


@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_unusable_models_are_one_message_and_exit_2(lookup: Path, tmp_path: Path, case: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    change, message = UNUSABLE[case]
    torch.save(_edit(torch.load(lookup / "m.pt", weights_only=True), change),
               tmp_path / "x.pt")
    out = tmp_path / "x.json"
    assert cli("certify-model", tmp_path / "x.pt", lookup / "d.json", "-o", out) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err and not out.exists()


def test_unreadable_files_and_a_model_that_does_not_fit(lookup: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        ) -> None:
    (tmp_path / "junk.pt").write_text("not a torch file")
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    cases = {tmp_path / "junk.pt": "cannot read",
             tmp_path / "tensor.pt": "expected a state dict",
             tmp_path / "none.pt": "no such model file"}
    for path, message in cases.items():
        assert cli("certify-model", path, lookup / "d.json", "-o", tmp_path / "o.json") == 2
        assert message in capsys.readouterr().err
    assert cli("generate", "--N", 5, "--n", 5, "--vocab", 6, "-o", tmp_path / "d5.json") == 0
    assert cli("certify-model", lookup / "m.pt", tmp_path / "d5.json", "-o",
               tmp_path / "o.json") == 2
    assert "sequences of length 4; the dataset has token-ids of size 6 and length 5" in \
        capsys.readouterr().err
    assert not (tmp_path / "o.json").exists()


def test_structure_given_separately(lookup: Path, tmp_path: Path) -> None:
    state = torch.load(lookup / "m.pt", weights_only=True)
    (tmp_path / "layout.json").write_text(state.pop("_extra_state"))
    torch.save(state, tmp_path / "bare.pt")
    assert cli("certify-model", tmp_path / "bare.pt", lookup / "d.json", "-o",
               tmp_path / "o.json", "--structure", tmp_path / "layout.json") == 0
    assert cli("certify-model", tmp_path / "bare.pt", lookup / "d.json", "-o",
               tmp_path / "o2.json") == 2


def test_safetensors_of_every_float_dtype_is_read_exactly(lookup: Path, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    state = torch.load(lookup / "m.pt", weights_only=True)
    skel = state.pop("_extra_state")
    mixed = {k: v.to(dt) for (k, v), dt in zip(sorted(state.items()), [
        torch.float64, torch.float32, torch.float16, torch.bfloat16] * 9, strict=False)}
    save_file(mixed, str(tmp_path / "mixed.safetensors"), metadata={"exactmem.skeleton": skel})
    torch.save({**mixed, "_extra_state": skel}, tmp_path / "mixed.pt")
    a = read_model(tmp_path / "mixed.safetensors")
    b = read_model(tmp_path / "mixed.pt")
    assert a.spec == b.spec and set(b.dtypes) == {"bfloat16", "float16", "float32", "float64"}
    for name, m, _ in named_matrices(a.spec):  # every value is the float as stored, exactly
        stored = [Fraction(x) for x in mixed[name].to(torch.float64).reshape(-1).tolist()]
        assert [Fraction(x, m.den) for row in m.num for x in row] == stored, name
    third = {"layers.0.table": torch.full((3, 6), 1 / 3, dtype=torch.bfloat16)}
    save_file({**mixed, **third}, str(tmp_path / "third.safetensors"),
              metadata={"exactmem.skeleton": skel})
    emb = read_model(tmp_path / "third.safetensors").spec.layers[0]
    assert isinstance(emb, Embedding)
    table = emb.table
    assert Fraction(table.num[0][0], table.den) == Fraction(171, 512)  # bfloat16(1/3), 8 bits
    save_file({"layers.0.table": torch.ones(2, 2, dtype=torch.int32)},
              str(tmp_path / "int.safetensors"), metadata={"exactmem.skeleton": skel})
    with pytest.raises(NotExactError, match="layers.0.table: expected a floating-point"):
        read_model(tmp_path / "int.safetensors")


def test_read_skeleton_is_strict() -> None:
    good = {"format": "exactmem.skeleton/1",
            "input": {"kind": "vectors", "dim": 2, "seq_len": 3},
            "layers": [{"type": "linear", "bias": True}],
            "readout": {"kind": "argmax", "positions": "last"}}
    assert read_skeleton(json.dumps(good)) == good
    for bad, message in [
            ({**good, "format": "x"}, "structure.format"),
            ({**good, "readout": {"kind": "max", "positions": "last"}}, "readout.kind"),
            ({**good, "layers": [{"type": "linear", "bias": 1}]}, "layers[0].bias"),
            ({**good, "layers": [{"type": "embedding"}]}, "an embedding is the first layer"),
            ({**good, "input": {"kind": "vectors", "dim": 0, "seq_len": 3}}, "input.dim"),
            ("{", "not valid JSON")]:
        with pytest.raises(SpecError, match=re.escape(message)):
            read_skeleton(bad)


def test_softmax_networks_certify_back(tmp_path: Path) -> None:
    for con in ("mahdavi2024-mha", "dana2024-aot"):
        d, c, m = (tmp_path / f"{con}.{x}" for x in ("d.json", "c.json", "pt"))
        assert cli("generate", "--for", con, "--seed", 1, "-o", d) == 0
        assert cli("certify", d, "-c", con, "-o", c, "-q") == 0
        assert cli("export", c, "--format", "torch", "-o", m) == 0
        res = exactmem.certify_model(m, d, output=tmp_path / f"{con}.back.json")
        assert res.verified, res
        assert exactmem.check(tmp_path / f"{con}.back.json").verified
    mha = tmp_path / "mahdavi2024-mha.pt", tmp_path / "mahdavi2024-mha.d.json"
    assert exactmem.certify_model(*mha, epsilon="1/3").verified  # a scalar readout
    with pytest.raises(SpecError, match=re.escape("epsilon: expected a rational in [0, 1/2)")):
        exactmem.certify_model(*mha, epsilon=1)
    with pytest.raises(SpecError, match="only to networks with softmax scores and a scalar"):
        exactmem.certify_model(tmp_path / "dana2024-aot.pt", tmp_path / "dana2024-aot.d.json",
                               epsilon="1/4")


def test_kajitsuka_weights_that_no_float_holds_are_an_honest_exit_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli("generate", "--N", 30, "--n", 4, "--vocab", 6, "--classes", 3, "--seed", 2,
               "-o", tmp_path / "d.json") == 0
    assert cli("certify", tmp_path / "d.json", "-c", "kajitsuka2025-next-token", "-o",
               tmp_path / "c.json", "-q") == 0
    assert cli("export", tmp_path / "c.json", "--format", "torch", "-o", tmp_path / "k.pt",
               "--allow-lossy") == 0
    capsys.readouterr()
    assert cli("certify-model", tmp_path / "k.pt", tmp_path / "d.json", "-o",
               tmp_path / "k.json") == 1
    err = capsys.readouterr().err
    assert "not memorized: 2 of 30 sequences: 4, 15" in err
    assert re.search(r"every failing output is within [\d.e-]+ of its label", err)
    assert "scalar readout is certified only when" in err and not (tmp_path / "k.json").exists()


def test_the_model_layout_example_trains_and_certifies(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str],
                                                       ) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli("generate", "--N", 40, "--n", 4, "--vocab", 6, "--classes", 3, "--seed", 1,
               "-o", "d.json") == 0
    train, to_safetensors = re.findall(r"```python\n(.*?)```",
                                       (DOCS / "model-layout.md").read_text(), re.S)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread, no contention with other tests
    try:
        scope: dict[str, Any] = {"__name__": "docs_model_layout"}
        exec(compile(train, "docs/model-layout.md", "exec"), scope)
        exec(compile(to_safetensors, "docs/model-layout.md", "exec"), scope)
    finally:
        torch.set_num_threads(threads)
    assert "float32 accuracy: 1.0" in capsys.readouterr().out
    assert cli("certify-model", "tiny.pt", "d.json", "-o", "tiny.cert.json") == 0
    assert cli("check", "tiny.cert.json") == 0
    res = exactmem.certify_model("tiny.safetensors", "d.json")
    assert res.verified and res.sizes.params_dense == 8 * 6 + 2 * 8 + 2 * 64 + 64 * 8 + 64 + 64 * 3
    model = scope["model"]
    with torch.no_grad():  # all logits zero: every argmax is a tie, a failure
        model.layers[2].maps[1].weight[:, :] = 0.0
    out = exactmem.certify_model(model, "d.json", output="broken.json")
    assert not out.verified and len(out.failing_sequences) == 40
    assert not Path("broken.json").exists()


def test_without_torch_pt_names_the_extra_and_safetensors_still_reads(lookup: Path,
                                                                      tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "from exactmem.cli import main\n"
            "sys.exit(main(sys.argv[1:]))")
    run = [sys.executable, "-c", code, "certify-model"]
    pt = subprocess.run([*run, str(lookup / "m.pt"), str(lookup / "d.json"), "-o",
                         str(tmp_path / "a.json")], capture_output=True, text=True, timeout=300)
    assert pt.returncode == 2 and "pip install 'exactmem[export]'" in pt.stderr, pt.stderr
    assert "Traceback" not in pt.stderr and not (tmp_path / "a.json").exists()
    st = subprocess.run([*run, str(lookup / "m.safetensors"), str(lookup / "d.json"), "-o",
                         str(tmp_path / "b.json")], capture_output=True, text=True, timeout=300)
    assert st.returncode == 0, st.stderr
    assert (tmp_path / "b.json").exists()
