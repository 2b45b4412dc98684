"""``exactmem extract``: certified greedy extraction, judged against the float64 greedy
decode; the certificate's wrong-position and extraction claims re-proved by ``exactmem
check``, tampering rejected."""

from __future__ import annotations

import hashlib
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
from exactmem.lm.extraction import by_length, decide, greedy_decode, wrong_token  # noqa: E402

K, M, V = 4, 4, 16
FLIPPED = {5: 1, 6: 0, 7: 3}  # sequence -> the suffix index whose token is changed


def run(*args: object) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A random nanoGPT, 8 prefixes continued by its own float64 greedy decode (so
    extractable), three of them with a suffix token changed (so not), and the report."""
    folder = tmp_path_factory.mktemp("extract")
    ckpt = random_nanogpt(folder / "m.pt", seed=3, layers=1, d_model=16, vocab=V, context=16)
    pre = np.random.default_rng(0).integers(0, V, (8, K))
    toks = np.concatenate([pre, greedy_decode(lambda t: nanogpt_logits(ckpt, t), pre, M)], 1)
    for i, j in FLIPPED.items():
        toks[i, K + j] = (toks[i, K + j] + 1) % V
    np.save(folder / "t.npy", toks)
    assert run("extract", ckpt, folder / "t.npy", "--prefix", K, "--suffix", M,
               "--every-length", "-o", folder / "r.json", "-q") == 0
    return {"folder": folder, "ckpt": ckpt, "toks": toks,
            "report": json.loads((folder / "r.json").read_text())}


def test_the_rule() -> None:
    # suffix positions k-1 .. k+m-2 = 3 .. 6
    assert decide([0, 3, 4, 5, 6], [], 4, 4).status == "extractable"
    v = decide([3, 4], [(6, 2)], 4, 4)
    assert (v.status, v.span, v.first_wrong) == ("not extractable", 2, (6, 2))
    v = decide([3, 5, 6], [(1, 2)], 4, 4)  # a wrong position in the prefix does not count
    assert (v.status, v.span, v.first_wrong) == ("undecided", 1, None)
    assert decide([4, 5, 6], [(3, 0), (5, 1)][:1], 4, 4).status == "not extractable"
    with pytest.raises(ValueError):
        decide([3], [(3, 1)], 4, 4)
    rows = by_length([decide([3, 4, 5, 6], [], 4, 4), decide([3], [(5, 0)], 4, 4),
                      decide([], [], 4, 4)], 4, 4)
    assert [(r["extractable"], r["not_extractable"], r["undecided"]) for r in rows] == \
        [(2, 0, 1), (1, 0, 2), (1, 1, 1), (1, 1, 1)]


def test_wrong_token_needs_a_proved_gap() -> None:
    lo, hi = np.array([0.0, 2.0, 1.0]), np.array([1.5, 2.5, 1.2])
    assert wrong_token(lo, hi, 0) == 1 and wrong_token(lo, hi, 2) == 1
    assert wrong_token(lo, hi, 1) is None
    assert wrong_token(np.array([0.0, 1.5]), np.array([1.5, 2.0]), 0) is None  # a tie


def test_verdicts_agree_with_the_float64_greedy_decode(made: dict[str, Any]) -> None:
    rows = made["report"]["sequences"]
    toks = made["toks"]
    decoded = greedy_decode(lambda t: nanogpt_logits(made["ckpt"], t), toks[:, :K], M)
    for i, r in enumerate(rows):
        reproduces = bool((decoded[i] == toks[i, K:]).all())
        assert r["float"]["extractable"] == reproduces
        assert r["status"] == ("extractable" if reproduces else "not extractable"), i
    for i, j in FLIPPED.items():
        fw = rows[i]["first_wrong"]
        assert (fw["suffix_index"], fw["position"]) == (j, K - 1 + j)
        assert fw["token"] == decoded[i, j] and rows[i]["proved_span"] == j
        assert rows[i]["float"]["disagreements"][0]["suffix_index"] == j
    assert made["report"]["by_length"][0] == {"suffix": 1, "extractable": 7,
                                              "not_extractable": 1, "undecided": 0}
    folder = made["folder"]
    assert (folder / "r.csv").read_text().count("\n") == 9
    page = (folder / "r.html").read_text()
    assert page.count("<svg") == 2 and "not extractable" in page


def test_check_re_proves_both_kinds(made: dict[str, Any],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    cert = made["folder"] / "r.cert.json"
    for shards in (1, 2):
        assert run("check", cert, "--shards", shards, "-q") == 0
        out = capsys.readouterr().out
        assert ("c claim: 5 of 8 sequences extractable (greedy, prefix 4, suffix 4), 3 proved "
                "not extractable, 0 undecided") in out
        wrong = re.search(r"c claim: (\d+) positions have another token's logit", out)
        assert wrong is not None and int(wrong[1]) >= 3


def _bump(row: list[int], p: int) -> None:
    row[p] = (row[p] + 1) % V


def _tampered(made: dict[str, Any], tmp_path: Path, change: Any) -> Path:
    cert = json.loads((made["folder"] / "r.cert.json").read_text())
    change(cert)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(redigest(cert)))
    return path


def test_a_false_wrong_position_claim_is_rejected(
        made: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def claim_right_position_wrong(cert: dict[str, Any]) -> None:
        p = cert["claims"]["positions"][0].pop()  # proved right: claim it wrong instead
        label = cert["dataset"]["data"]["labels"][0][p]
        cert["claims"]["wrong_positions"][0] = [[p, (label + 1) % V]]

    assert run("check", _tampered(made, tmp_path, claim_right_position_wrong), "-q") == 1
    assert "is not proved above the label" in capsys.readouterr().err

    def label_as_wrong_token(cert: dict[str, Any]) -> None:
        p, _ = cert["claims"]["wrong_positions"][5][0]
        cert["claims"]["wrong_positions"][5][0][1] = cert["dataset"]["data"]["labels"][5][p]

    assert run("check", _tampered(made, tmp_path, label_as_wrong_token), "-q") == 1
    assert "is the label itself" in capsys.readouterr().err


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c["claims"]["wrong_positions"].pop(), "expected 8 lists"),
    (lambda c: c["claims"]["wrong_positions"][5].append([0, 1]), "strictly increasing"),
    (lambda c: c["claims"]["wrong_positions"][5][0].__setitem__(1, V), "outside [0, 15]"),
    (lambda c: c["claims"]["extraction"].__setitem__("suffix", 5), "outside [1, 4]"),
    (lambda c: c["claims"]["extraction"].__setitem__("extra", 1), "unknown field"),
    (lambda c: _bump(c["dataset"]["data"]["labels"][0], K - 1), "is not the next token"),
])
def test_malformed_extraction_claims_are_unusable(
        made: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        change: Any, message: str) -> None:
    def apply(cert: dict[str, Any]) -> None:
        change(cert)
        text = json.dumps(cert["dataset"]["data"], sort_keys=True, separators=(",", ":"))
        cert["dataset"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()

    assert run("check", _tampered(made, tmp_path, apply), "-q") == 2
    assert message in capsys.readouterr().err


def test_a_trained_model_against_its_float64_decode(tmp_path: Path) -> None:
    """The acceptance in small: a model trained a few seconds on 12 sequences (duplicated
    1 to 4 times) memorizes some; no verdict contradicts the float64 greedy decode of the
    checkpoint's own forward pass, and at least 95% are decided."""
    from exactmem.api.extracting import extract
    from exactmem.lm.checkpoints.nanogpt_train import train_nanogpt

    rng = np.random.default_rng(1)
    toks = rng.integers(0, 12, (12, 10))
    train = np.repeat(toks, [1 + i % 4 for i in range(12)], axis=0)
    ckpt = tmp_path / "m.pt"
    train_nanogpt(ckpt, train, 12, layers=1, d_model=16, heads=2, steps=40, lr=1e-2)
    np.save(tmp_path / "t.npy", toks)
    r = extract(ckpt, tmp_path / "t.npy", tmp_path / "r.json", prefix=5, suffix=5)
    decoded = greedy_decode(lambda t: nanogpt_logits(ckpt, t), toks[:, :5], 5)
    for v, row, dec in zip(r.verdicts, toks, decoded, strict=True):
        reproduces = bool((dec == row[5:]).all())
        assert v.status in (("extractable", "undecided") if reproduces
                            else ("not extractable", "undecided"))
    assert r.count("undecided") <= 0.05 * len(r.verdicts)
    assert r.count("extractable") and r.count("not extractable")  # both kinds occur
    assert run("check", tmp_path / "r.cert.json", "-q") == 0


def test_text_in_text_out(tmp_path: Path, made: dict[str, Any]) -> None:
    """JSON lines with text and duplication counts, character-level: the report shows the
    spans as text and the duplication plot."""
    chars = "abcdefghijklmnop"  # 16 characters, one per token id
    toks = made["toks"]
    with (tmp_path / "d.jsonl").open("w") as fh:
        for i, row in enumerate(toks):
            fh.write(json.dumps({"text": "".join(chars[t] for t in row), "count": 1 + i}) + "\n")
    (tmp_path / "v.json").write_text(json.dumps(list(chars)))
    assert run("extract", made["ckpt"], tmp_path / "d.jsonl", "--vocab", tmp_path / "v.json",
               "--prefix", K, "--suffix", M, "-o", tmp_path / "r.json", "-q") == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert [r["status"] for r in report["sequences"]] == \
        [r["status"] for r in made["report"]["sequences"]]
    row = report["sequences"][5]
    assert row["text"]["proved_span"] == row["text"]["suffix"][:row["proved_span"]]
    assert row["count"] == 6 and (tmp_path / "r.html").read_text().count("<svg") == 3


def test_meta_pkl_is_read_without_running_code(tmp_path: Path) -> None:
    import pickle

    from exactmem.errors import DatasetError
    from exactmem.lm.text_data import read_meta

    meta = {"vocab_size": 3, "itos": {0: "a", 1: "b", 2: " "}, "stoi": {"a": 0, "b": 1, " ": 2}}
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps(meta))
    voc = read_meta(tmp_path / "meta.pkl")
    assert voc.encode("ab a") == [0, 1, 2, 0] and voc.decode([1, 0]) == "ba"

    class Boom:
        def __reduce__(self) -> tuple[Any, ...]:
            return (print, ("ran",))

    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({"itos": Boom()}))
    with pytest.raises(DatasetError, match="refers to builtins.print.*pass --chars"):
        read_meta(tmp_path / "evil.pkl")


def test_unusable_inputs_exit_2(made: dict[str, Any], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    folder = made["folder"]
    assert run("extract", made["ckpt"], folder / "t.npy", "--prefix", 10, "--suffix", 10,
               "-o", tmp_path / "r.json", "-q") == 2
    assert "exceed the model's context of 16" in capsys.readouterr().err
    (tmp_path / "d.txt").write_text("hello world\n")
    assert run("extract", made["ckpt"], tmp_path / "d.txt", "--prefix", 2, "--suffix", 2,
               "-o", tmp_path / "r.json", "-q") == 2
    assert "pass --chars or --vocab" in capsys.readouterr().err


def test_the_model_directorys_tokenizer_and_chars(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from exactmem.lm.text_data import model_tokenizer, read_sequences

    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "b": 1, "[UNK]": 2},
                                                           unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    voc = model_tokenizer(tmp_path)
    assert voc is not None and voc.encode("a b b a c") == [0, 1, 1, 0, 2]
    assert voc.decode([1, 0]) == "b a"
    (tmp_path / "d.txt").write_text("ab ba\nbbbbb\n")
    got = read_sequences(tmp_path / "d.txt", 4, tmp_path / "none.pt", chars=True)
    assert got.tokens.tolist() == [[1, 2, 0, 2], [2, 2, 2, 2]]  # " " 0, "a" 1, "b" 2
    assert got.vocabulary is not None and got.vocabulary.decode([1, 0, 2]) == "a b"


def test_the_undecided_are_proved_again_in_arb(
        made: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first pass that proves nothing leaves every sequence undecided; the arb pass
    decides them as before."""
    from exactmem.api.extracting import extract
    from exactmem.lm import positions

    monkeypatch.setattr(positions, "prove_positions",
                        lambda spec, seqs, *a, **kw: positions.PositionBounds(
                            tuple(() for _ in seqs), tuple(() for _ in seqs)))
    logs: list[str] = []
    r = extract(made["ckpt"], made["folder"] / "t.npy", tmp_path / "r.json", prefix=K,
                suffix=M, log=logs.append)
    assert "producer: 8 undecided sequences proved again in arb" in logs
    assert [v.status for v in r.verdicts] == [s["status"] for s in made["report"]["sequences"]]
