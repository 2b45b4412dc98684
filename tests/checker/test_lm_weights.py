"""Bound weights (docs/trained-models.md, "Bound weights"): the checker's standard-library
safetensors reader against the safetensors library's own reading, a bound certificate
verified with the claim of the embedded one, and every lie a file or its binding can tell
answered with one line (unusable, or rejected for a changed file), nothing written."""

from __future__ import annotations

import copy
import json
import os
import struct
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lm_models import random_spec, redigest

from exactmem.checker.entry import checker_line
from exactmem.checker.lm import lm_weights
from exactmem.checker.verify import check_certificate
from exactmem.cli import main
from exactmem.lm.certfile import build_lm_certificate, spec_from_lm_certificate
from exactmem.lm.decoder import LMSpec
from exactmem.lm.float64 import logits64
from exactmem.lm.weightsfile import write_weights
from exactmem.model.dataset import Dataset, canonical_json

Cert = dict[str, Any]
WEIGHTS = "c.weights.safetensors"

CHECKER = checker_line() + "\n"  # printed on stdout before the s line


def _dataset(spec: LMSpec) -> Dataset:
    toks = np.random.default_rng(12).integers(0, spec.vocab_size, size=(2, 5))
    labels = logits64(spec, toks).argmax(-1)
    return Dataset(task="seq2seq", inputs="token-ids", vocab_size=spec.vocab_size,
                   sequences=tuple(tuple(map(int, s)) for s in toks),
                   labels=tuple(tuple(map(int, r)) for r in labels))


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[LMSpec, Cert, Cert, bytes]:
    """``(spec, embedded certificate, bound certificate, the weights file's bytes)``."""
    spec = random_spec(np.random.default_rng(11), "gelu_tanh", tied=False)
    ds = _dataset(spec)
    folder = tmp_path_factory.mktemp("w")
    with open(folder / WEIGHTS, "wb") as fh:
        binding = write_weights(spec, fh, WEIGHTS)
    pos = [list(range(5))] * 2
    return (spec, build_lm_certificate(spec, ds, pos, partial=False),
            build_lm_certificate(spec, ds, pos, partial=False, weights=binding),
            (folder / WEIGHTS).read_bytes())


def _place(tmp: Path, cert: Cert, data: bytes, rebind: bool = True) -> Path:
    """``c.json`` and its weights file ``data`` in ``tmp``; ``rebind``: the binding's length
    and hash made those of ``data`` (re-digested), so only the file's content is judged."""
    cert = copy.deepcopy(cert)
    (tmp / WEIGHTS).write_bytes(data)
    if rebind:
        import hashlib

        cert["model"]["weights"].update(bytes=len(data),
                                        sha256=hashlib.sha256(data).hexdigest())
        redigest(cert)
    (tmp / "c.json").write_text(canonical_json(cert))
    return tmp / "c.json"


def _check(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str,
                                                                                  str]:
    before = sorted(os.listdir(path.parent))
    code = main(["check", str(path), "-q", *extra])
    out, err = capsys.readouterr()
    assert sorted(os.listdir(path.parent)) == before  # nothing written
    return code, out, err


def test_bound_certificate_holds_no_weight_and_verifies_as_the_embedded_one(
        made: tuple[LMSpec, Cert, Cert, bytes], tmp_path: Path) -> None:
    _, embedded, bound, data = made
    assert "tensors" not in bound["model"] and "values" not in json.dumps(bound)
    assert set(bound["model"]["weights"]) == {"path", "bytes", "sha256", "tensors"}
    path = _place(tmp_path, bound, data, rebind=False)
    one = check_certificate(embedded, tmp_path)
    two = check_certificate(json.loads(path.read_text()), tmp_path)
    assert one.verified and two.verified and one.claim == two.claim
    assert two.claim is not None and two.claim.startswith("10 of 10 positions")


def test_the_tensors_read_back_exactly(made: tuple[LMSpec, Cert, Cert, bytes],
                                       tmp_path: Path) -> None:
    spec, _, bound, data = made
    _place(tmp_path, bound, data, rebind=False)
    back = spec_from_lm_certificate(bound, tmp_path)
    assert set(back.tensors) == set(spec.tensors)
    for k, t in spec.tensors.items():
        assert np.array_equal(back.tensors[k], t)
    dtypes = {e["dtype"] for k, e in json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
              .items() if k != "__metadata__"}
    assert dtypes == {"F32"}  # float32 weights stay 4 bytes a weight


def test_the_digest_covers_the_binding(made: tuple[LMSpec, Cert, Cert, bytes],
                                       tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _, _, bound, data = made
    cert = copy.deepcopy(bound)
    cert["model"]["weights"]["tensors"]["h0.mlp.fc.bias"] = "h1.mlp.fc.bias"  # not redigested
    code, out, err = _check(_place(tmp_path, cert, data, rebind=False), capsys)
    assert (code, out) == (1, CHECKER + "s REJECTED\n") and "digest" in err


def test_one_changed_byte_is_rejected_naming_the_file(
        made: tuple[LMSpec, Cert, Cert, bytes], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, _, bound, data = made
    changed = bytearray(data)
    changed[-3] ^= 0x10  # the last tensor's last value
    code, out, err = _check(_place(tmp_path, bound, bytes(changed), rebind=False), capsys)
    assert (code, out) == (1, CHECKER + "s REJECTED\n")
    assert f"weights file {tmp_path / WEIGHTS} is not the file the certificate binds" in err
    code, out, err = _check(_place(tmp_path, bound, data + b" ", rebind=False), capsys)
    assert code == 1 and "bytes, the certificate binds" in err


def test_a_missing_file_is_unusable_naming_it_and_weights_finds_another(
        made: tuple[LMSpec, Cert, Cert, bytes], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, embedded, bound, data = made
    path = _place(tmp_path, bound, data, rebind=False)
    elsewhere = tmp_path / "kept" / "any-name.bin"
    elsewhere.parent.mkdir()
    os.replace(tmp_path / WEIGHTS, elsewhere)
    code, out, err = _check(path, capsys)
    assert (code, out) == (2, CHECKER + "s UNUSABLE\n")
    assert f"cannot read the weights file {tmp_path / WEIGHTS}" in err
    code, out, _ = _check(path, capsys, "--weights", str(elsewhere))
    assert code == 0 and out.endswith("s VERIFIED\n")
    (tmp_path / "e.json").write_text(canonical_json(embedded))
    code, out, err = _check(tmp_path / "e.json", capsys, "--weights", str(elsewhere))
    assert code == 2 and "embeds its tensors" in err


def test_sharded_check_reads_the_bound_file(made: tuple[LMSpec, Cert, Cert, bytes],
                                            tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _, _, bound, data = made
    path = _place(tmp_path, bound, data, rebind=False)
    one = _check(path, capsys)
    two = _check(path, capsys, "--shards", "2")
    assert one[0] == two[0] == 0 and one[1] == two[1]


# crafted files ------------------------------------------------------------------------------
def _file(head: Any, body: bytes, declared: int | None = None) -> bytes:
    """A safetensors file: ``head`` (an object, or raw text), padded to 8 bytes."""
    text = head.encode() if isinstance(head, str) else json.dumps(head).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text) if declared is None else declared) + text + body


def _tensors(data: bytes) -> tuple[dict[str, Any], bytes]:
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n]), data[8 + n:]


def _edit(data: bytes, name: str, **fields: Any) -> bytes:
    head, body = _tensors(data)
    head[name].update(fields)
    return _file(head, body)


def _lies(data: bytes) -> list[tuple[str, bytes, str]]:
    head, body = _tensors(data)
    wte = head["wte"]["data_offsets"]
    first = min(e["data_offsets"][0] for k, e in head.items() if k != "__metadata__")
    at = next(k for k, e in head.items() if k != "__metadata__" and e["data_offsets"][0] == 0)
    nan = bytearray(body)
    nan[wte[0] + 4 * 9:wte[0] + 4 * 10] = struct.pack("<f", float("nan"))  # wte[1, 1]
    dup = json.dumps(head)[:-1] + ', "wte": ' + json.dumps(head["wte"]) + "}"
    return [
        ("offset outside the file", _edit(data, "wte", data_offsets=[wte[0], len(body) + 4]),
         "tensor 'wte'.data_offsets[1]"),
        ("overlapping tensors", _edit(data, at, data_offsets=[first, first + 4 * 11 * 8],
                                      dtype="F32", shape=[11, 8]), "overlap"),
        ("a gap", _file({k: v for k, v in head.items() if k != at}, body), "belong to no"),
        ("dtype and shape disagree with the extent", _edit(data, "wte", dtype="F64"),
         "tensor 'wte': 352 bytes of data, but F64 of shape [11, 8] takes 704"),
        ("a shape other than the model's", _edit(data, "wte", shape=[8, 11]),
         "shape [8, 11], expected [11, 8]"),
        ("an integer dtype", _edit(data, "wte", dtype="I32"), "dtype I32 is not read"),
        ("no safetensors dtype", _edit(data, "wte", dtype="F128"),
         "'F128' is not a safetensors dtype"),
        ("a header of 10^9 bytes declared", _file(head, body, declared=10 ** 9),
         "a header of 1000000000 bytes declared, more than the limit of 100000000"),
        ("a header past the end", _file(head, body, declared=10 ** 6), "past the end"),
        ("a header that is not JSON", _file("{not json", body), "header: not valid JSON"),
        ("duplicate keys", _file(dup, body), "duplicate key 'wte'"),
        ("a float offset", _file(json.dumps(head).replace(f"[{wte[0]}, ", f"[{wte[0]}.0, ",
                                                          1), body), "data_offsets[0]"),
        ("metadata that is not strings", _file({**head, "__metadata__": {"a": 1}}, body),
         "__metadata__"),
        ("a tensor the file lacks", _file({k: v for k, v in head.items() if k != "wte"} |
                                          {"other": head["wte"]}, body),
         "tensor 'wte' (model.weights.tensors.wte): not a tensor of the file"),
        ("NaN", _file(head, bytes(nan)),
         "tensor 'wte' (model.weights.tensors.wte): NaN at index [1, 1]"),
        ("nothing but a header length", struct.pack("<Q", 16),
         "a header of 16 bytes declared, past the end of the file of 8 bytes"),
    ]


@pytest.mark.parametrize("case", range(16))
def test_a_lying_file_gets_one_line_and_exit_2(made: tuple[LMSpec, Cert, Cert, bytes],
                                               tmp_path: Path, case: int,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    _, _, bound, data = made
    what, lie, needle = _lies(data)[case]
    code, out, err = _check(_place(tmp_path, bound, lie), capsys)
    assert (code, out) == (2, CHECKER + "s UNUSABLE\n"), what
    lines = [ln for ln in err.splitlines() if not ln.startswith("c checker:")]
    assert len(lines) == 1 and needle in lines[0], (what, err)


def test_there_are_sixteen_lies(made: tuple[LMSpec, Cert, Cert, bytes]) -> None:
    assert len(_lies(made[3])) == 16


@pytest.mark.parametrize("name", ["/etc/passwd", "../c.weights.safetensors", "a/../../x",
                                  "C:\\x", "", "out"])
def test_a_path_leading_outside_the_folder_is_unusable(
        made: tuple[LMSpec, Cert, Cert, bytes], tmp_path: Path, name: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, _, bound, data = made
    folder = tmp_path / "certs"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(data)
    (folder / "out").symlink_to(tmp_path / "secret.bin")  # a link leading outside
    cert = copy.deepcopy(bound)
    cert["model"]["weights"]["path"] = name
    path = _place(folder, redigest(cert), data, rebind=False)
    code, out, err = _check(path, capsys)
    assert (code, out) == (2, CHECKER + "s UNUSABLE\n") and "model.weights.path" in err


def test_a_link_inside_the_folder_is_followed(made: tuple[LMSpec, Cert, Cert, bytes],
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _, _, bound, data = made
    (tmp_path / "real.safetensors").write_bytes(data)
    cert = copy.deepcopy(bound)
    cert["model"]["weights"]["path"] = "inner"
    path = _place(tmp_path, redigest(cert), data, rebind=False)
    (tmp_path / "inner").symlink_to("real.safetensors")
    assert _check(path, capsys)[0] == 0


@pytest.mark.parametrize("edit, needle", [
    (lambda w: w.update(sha256="AB" * 32), "64 lowercase hexadecimal"),
    (lambda w: w.update(bytes=7), "model.weights.bytes"),
    (lambda w: w.update(bytes=True), "model.weights.bytes"),
    (lambda w: w.update(extra=1), "model.weights.extra: unknown field"),
    (lambda w: w["tensors"].update(wte=3), "model.weights.tensors.wte"),
    (lambda w: w["tensors"].pop("wpe"), "model.weights.tensors.wpe: missing"),
    (lambda w: w["tensors"].update(bogus="wte"), "model.weights.tensors.bogus: unknown"),
])
def test_a_malformed_binding_is_unusable(made: tuple[LMSpec, Cert, Cert, bytes],
                                         tmp_path: Path, edit: Any, needle: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, _, bound, data = made
    cert = copy.deepcopy(bound)
    edit(cert["model"]["weights"])
    code, out, err = _check(_place(tmp_path, redigest(cert), data, rebind=False), capsys)
    assert (code, out) == (2, CHECKER + "s UNUSABLE\n") and needle in err, err


def test_both_or_neither_source_is_unusable(made: tuple[LMSpec, Cert, Cert, bytes],
                                            tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _, embedded, bound, data = made
    both = copy.deepcopy(bound)
    both["model"]["tensors"] = embedded["model"]["tensors"]
    neither = copy.deepcopy(bound)
    del neither["model"]["weights"]
    for cert in (both, neither):
        code, _, err = _check(_place(tmp_path, redigest(cert), data, rebind=False), capsys)
        assert code == 2 and "exactly one of 'tensors' (embedded) and 'weights'" in err


# the reader against the safetensors library ---------------------------------------------------
def _special(rng: np.random.Generator, dtype: Any, size: int, wide: bool) -> np.ndarray:
    """Random values with zeros of both signs and, ``wide``, the extremes of ``dtype``."""
    info = np.finfo(dtype)
    pool = [0.0, -0.0, 1.0, float(info.eps)]
    if wide:
        pool += [float(info.max), -float(info.max), float(info.tiny),
                 float(info.smallest_subnormal), -float(info.smallest_subnormal)]
    with np.errstate(over="ignore"):
        vals = (rng.standard_normal(size) * 10.0 ** rng.integers(-6, 6, size)).astype(dtype)
    vals[~np.isfinite(vals)] = 1.0
    vals[: len(pool)] = np.array(pool, dtype=dtype)
    return vals


@pytest.mark.parametrize("seed", range(4))
def test_the_reader_equals_the_safetensors_library(tmp_path: Path, seed: int) -> None:
    """Files written by the safetensors library (numpy and torch, bfloat16 too) read by the
    checker: every value the exact rational of the library's own reading."""
    st_numpy = pytest.importorskip("safetensors.numpy")
    torch = pytest.importorskip("torch")
    st_torch = pytest.importorskip("safetensors.torch")
    rng = np.random.default_rng(seed)
    arrays = {f"t{k}": _special(rng, dt, 40, wide).reshape(5, 8) for k, (dt, wide) in
              enumerate(((np.float64, False), (np.float32, True), (np.float16, True)))}
    tiny = np.finfo(np.float64).smallest_subnormal
    arrays["subnormal"] = np.array([tiny, -3 * tiny, 2.0 ** -1000, 0.0])  # scale 1074
    st_numpy.save_file(arrays, str(tmp_path / "n.safetensors"), metadata={"k": "v"})
    bf = torch.from_numpy(rng.standard_normal(24).astype(np.float32)).to(torch.bfloat16)
    st_torch.save_file({"b": bf.reshape(4, 6), "v": torch.ones(3, dtype=torch.bfloat16)},
                       str(tmp_path / "b.safetensors"))
    theirs = {**st_numpy.load_file(str(tmp_path / "n.safetensors")),
              **{k: v.float().numpy() for k, v in
                 st_torch.load_file(str(tmp_path / "b.safetensors")).items()}}
    for name in ("n", "b"):
        raw = (tmp_path / f"{name}.safetensors").read_bytes()
        entries = lm_weights.header(bytearray(raw), name)
        for key, (dtype, shape, lo, hi) in entries.items():
            rows, e = lm_weights.exact(memoryview(raw)[lo:hi], dtype, shape, key)
            mine = [Fraction(p, 1 << e) for row in rows for p in row]
            want = [Fraction(float(x)) for x in theirs[key].ravel()]
            assert mine == want, key
            assert e == 0 or any(p & 1 for row in rows for p in row)  # the least scale


def test_infinities_and_wide_numerators_are_refused_naming_the_index() -> None:
    raw = memoryview(struct.pack("<4d", 1.0, 2.0, 3.0, float("-inf")))
    with pytest.raises(lm_weights.Unusable, match=r"w: an infinity at index \[1, 1\]"):
        lm_weights.exact(raw, "F64", [2, 2], "w")
    tiny = np.finfo(np.float64).smallest_subnormal  # with 2**1000: 2074 bits of numerator
    raw = memoryview(struct.pack("<2d", tiny, 2.0 ** 1000))
    with pytest.raises(lm_weights.Unusable, match=r"w: at index \[1\] a numerator of 2075 "
                                                  "bits exceeds the limit of 1024"):
        lm_weights.exact(raw, "F64", [2], "w")


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
def test_every_half_width_bit_pattern_reads_as_numpy_decodes_it(dtype: str) -> None:
    """All 65,536 patterns: the finite ones the exact value numpy gives them (bfloat16: the
    upper half of a float32), the others refused as NaN or infinity."""
    bits = np.arange(1 << 16, dtype="<u2")
    values = bits.view("<f2") if dtype == "F16" else \
        (bits.astype("<u4") << 16).view("<f4")
    finite = np.isfinite(values)
    raw = memoryview(bits[finite].tobytes())
    rows, e = lm_weights.exact(raw, dtype, [int(finite.sum())], "w")
    assert [Fraction(p, 1 << e) for p in rows[0]] == \
        [Fraction(float(x)) for x in values[finite]]
    for k in np.flatnonzero(~finite)[:: 97]:
        with pytest.raises(lm_weights.Unusable, match="NaN|infinity"):
            lm_weights.exact(memoryview(bits[k:k + 1].tobytes()), dtype, [1], "w")


def test_a_verdict_is_recorded_only_on_the_file_beside(
        made: tuple[LMSpec, Cert, Cert, bytes], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``check --weights FILE`` verified FILE, not the file beside: no record (export would
    otherwise reuse it with the file beside); a record names the weights file's hash, so a
    changed file voids it."""
    from exactmem.api import verified

    monkeypatch.setenv("EXACTMEM_CACHE", str(tmp_path / "cache"))
    _, _, bound, data = made
    folder = tmp_path / "certs"
    folder.mkdir()
    path = _place(folder, bound, data, rebind=False)
    (tmp_path / "copy.bin").write_bytes(data)
    assert _check(path, capsys, "--weights", str(tmp_path / "copy.bin"))[0] == 0
    assert verified.lookup(path) is None
    assert _check(path, capsys)[0] == 0
    record = verified.lookup(path)
    assert record is not None and WEIGHTS in record["bound"]
    (folder / WEIGHTS).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert verified.lookup(path) is None
