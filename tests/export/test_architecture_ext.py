"""What trained Transformers add (docs/architecture.md): positional embeddings, attention
biases, score scales, causal masks.  The producer and the checker agree with a naive
reference written from the semantics; softmax bounds enclose a 60-digit evaluation; the
exports round-trip the fields; a tampered field is rejected; the defaults change nothing."""

from __future__ import annotations

import copy
import random
from fractions import Fraction
from typing import Any

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.arith import ScaledMatrix
from exactmem.certificate import build_certificate, spec_from_certificate
from exactmem.certificate.build import digest_of
from exactmem.certificate.encode import spec_to_json
from exactmem.checker import check_certificate
from exactmem.checker.cert_dataset import initial
from exactmem.checker.parse import network
from exactmem.checker.softmax_check import enclose
from exactmem.checker.verify import run
from exactmem.constructions.base import BuildResult
from exactmem.model import Dataset
from exactmem.model.evaluate import evaluate
from exactmem.model.forward import forward, outputs
from exactmem.model.interval_verdict import certify_interval, softmax_hint
from exactmem.model.spec import (
    Attention,
    Embedding,
    FeedForward,
    Head,
    Linear,
    NetworkSpec,
    Readout,
)

VOCAB, N_POS, DIM, CLASSES = 5, 3, 3, 4


def _mat(rng: random.Random, rows: int, cols: int, den: int = 4) -> ScaledMatrix:
    return ScaledMatrix.from_rows([[Fraction(rng.randint(-6, 6), den) for _ in range(cols)]
                                   for _ in range(rows)], cols=cols)


def _vec(rng: random.Random, rows: int) -> ScaledMatrix:
    return _mat(rng, rows, 1, 8)


def extended_spec(seed: int, kind: str = "hardmax", causal: bool = True,
                  biases: bool = True, scale: Fraction = Fraction(3, 4),
                  positions: bool = True) -> NetworkSpec:
    """A token-ids network with every new field: embedding + positions, one attention layer
    of two heads (head size 2), a linear unembedding to CLASSES, argmax at the last
    position (next-token) or at every position."""
    rng = random.Random(seed)
    heads = []
    for _ in range(2):
        q, k, v = _mat(rng, 2, DIM), _mat(rng, 2, DIM), _mat(rng, 2, DIM)
        if kind == "uniform":  # uniform heads: zero key weights
            k = ScaledMatrix.zeros(2, DIM)
        o = _mat(rng, DIM, 2)
        bs = (_vec(rng, 2), _vec(rng, 2), _vec(rng, 2), _vec(rng, DIM)) if biases \
            else (None,) * 4
        heads.append(Head(q, k, v, o, *bs, scale=scale))
    emb = Embedding(_mat(rng, DIM, VOCAB, 2), _mat(rng, DIM, N_POS, 2) if positions else None)
    return NetworkSpec("token-ids", VOCAB, N_POS, (
        emb, Attention(tuple(heads), kind=kind, causal=causal),  # type: ignore[arg-type]
        Linear(FeedForward((_affine(rng),)).layers[0])), Readout("argmax", "last"))


def _affine(rng: random.Random) -> Any:
    from exactmem.model.spec import Affine

    return Affine(_mat(rng, CLASSES, DIM), _vec(rng, CLASSES))


def all_sequences(seed: int, count: int = 40) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    seqs = {tuple(rng.randrange(VOCAB) for _ in range(N_POS)) for _ in range(count)}
    return sorted(seqs)


# the naive reference -----------------------------------------------------------------
Vec = list[Fraction]


def _mv(m: ScaledMatrix, v: Vec, b: ScaledMatrix | None = None) -> Vec:
    out = [sum((m.entry(i, j) * v[j] for j in range(m.cols)), Fraction(0))
           for i in range(m.shape[0])]
    return out if b is None else [x + y for x, y in zip(out, b.column_values(), strict=True)]


def reference(spec: NetworkSpec, seq: tuple[int, ...], exp: Any = None) -> list[Any]:
    """The output at the last position, one value per entry, straight from the semantics.
    ``exp``: ``None`` for hardmax/uniform (exact Fractions), else mpmath's exp (softmax)."""
    emb, att, lin = spec.layers
    assert isinstance(emb, Embedding) and isinstance(att, Attention) and isinstance(lin, Linear)
    xs = [[emb.table.entry(r, t) + (emb.positions.entry(r, k) if emb.positions else 0)
           for r in range(DIM)] for k, t in enumerate(seq)]
    j = N_POS - 1
    keys = [i for i in range(N_POS) if not att.causal or i <= j]
    acc: list[Any] = list(xs[j]) if att.residual else [Fraction(0)] * DIM
    for h in att.heads:
        q = _mv(h.query, xs[j], h.query_bias)
        scores = [h.scale * sum((a * b for a, b in zip(_mv(h.key, xs[i], h.key_bias), q,
                                                        strict=True)), Fraction(0))
                  for i in keys]
        if att.kind == "uniform" or h.scores_are_zero():
            w: list[Any] = [Fraction(1, len(keys))] * len(keys)
        elif exp is None:
            best = max(scores)
            ties = [s == best for s in scores]
            w = [Fraction(int(t), sum(ties)) for t in ties]
        else:
            e = [exp(mpmath.mpf(s.numerator) / s.denominator) for s in scores]
            w = [x / sum(e) for x in e]
        vals = [_mv(h.value, xs[i], h.value_bias) for i in keys]
        mixed = [sum((wi * v[r] for wi, v in zip(w, vals, strict=True)), Fraction(0))
                 for r in range(len(vals[0]))]
        out = [sum((h.output.entry(r, c) * mixed[c] for c in range(len(mixed))), Fraction(0))
               for r in range(DIM)]
        if h.output_bias is not None:
            out = [x + b for x, b in zip(out, h.output_bias.column_values(), strict=True)]
        acc = [a + b for a, b in zip(acc, out, strict=True)]
    return [sum((lin.map.weight.entry(r, c) * acc[c] for c in range(DIM)), Fraction(0))
            + (lin.map.bias.entry(r, 0) if lin.map.bias is not None else 0)
            for r in range(CLASSES)]


def dataset_of(spec: NetworkSpec, seqs: list[tuple[int, ...]]) -> Dataset:
    """Labels = the network's own argmax (exact for hardmax; softmax at 30 digits, near
    ties dropped), so the network memorizes."""
    att = spec.layers[1]
    soft = isinstance(att, Attention) and att.kind == "softmax"
    keep, labels = [], []
    for s in seqs:
        with mpmath.workdps(30):
            out = reference(spec, s, mpmath.exp if soft else None)
            best = max(out)
            if sum(1 for x in out if x >= best - (mpmath.mpf(10) ** -6 if soft else 0)) == 1:
                keep.append(s)
                labels.append(out.index(best))
    return Dataset("next-token", "token-ids", tuple(keep), tuple(labels), vocab_size=VOCAB)


def _resign(cert: dict[str, Any]) -> dict[str, Any]:
    cert["digest"] = digest_of(cert)
    return cert


# producer and checker against the reference -------------------------------------------
@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(["hardmax", "uniform"]),
       causal=st.booleans(), biases=st.booleans(), positions=st.booleans())
def test_exact_passes_match_the_reference(seed: int, kind: str, causal: bool, biases: bool,
                                          positions: bool) -> None:
    spec = extended_spec(seed, kind, causal, biases, positions=positions)
    seqs = all_sequences(seed, 30)
    ds = Dataset("next-token", "token-ids", tuple(seqs), tuple(0 for _ in seqs),
                 vocab_size=VOCAB)
    want = [tuple(reference(spec, s)) for s in seqs]
    assert [row[0] for row in outputs(spec, forward(spec, ds))] == want
    net, layers, readout = network(spec_to_json(spec))
    got = run(net, layers, readout["positions"], [list(s) for s in seqs])
    assert [row[0] for row in got] == want


@pytest.mark.parametrize("kind", ["hardmax", "softmax"])
def test_certificates_with_every_field_verify(kind: str) -> None:
    spec = extended_spec(7, kind)
    ds = dataset_of(spec, all_sequences(7, 60))
    if kind == "hardmax":
        ev, hints = evaluate(spec, ds), {}
    else:
        outcome = certify_interval(spec, ds)
        ev, hints = outcome.evaluation, {"softmax": softmax_hint(outcome)}
    assert ev.memorized, ev.failures[:3]
    cert = build_certificate(ds, BuildResult(spec, {}, hints=hints), "test", ev)
    report = check_certificate(cert)
    assert report.verified, report.failures[:3]
    layer = cert["network"]["layers"]
    assert "positions" in layer[0] and layer[1]["causal"] is True
    assert set(layer[1]["heads"][0]) >= {"query_bias", "value_bias", "output_bias", "scale"}
    assert spec_from_certificate(cert) == spec


def test_softmax_bounds_enclose_a_60_digit_evaluation() -> None:
    spec = extended_spec(11, "softmax")
    seqs = all_sequences(11, 20)
    net, layers, readout = network(spec_to_json(spec))
    state = initial(net, [list(s) for s in seqs], layers)
    mids, rads, den, index = enclose(net, layers, readout, state, 40, lambda k=1: None)
    with mpmath.workdps(60):
        for s, row in zip(seqs, index, strict=True):
            want = reference(spec, s, mpmath.exp)
            c = row[N_POS - 1]
            for r in range(CLASSES):
                lo = mpmath.mpf(mids[c][r] - rads[c][r]) / den
                hi = mpmath.mpf(mids[c][r] + rads[c][r]) / den
                assert lo <= want[r] <= hi
                assert hi - lo < mpmath.mpf(2) ** -20  # tight, not vacuous


def test_the_causal_mask_changes_what_a_query_sees() -> None:
    """Query 0 of a causal layer sees key 0 only: its output ignores later tokens."""
    spec = extended_spec(5, "hardmax")
    att = spec.layers[1]
    assert isinstance(att, Attention)
    every = NetworkSpec(spec.input_kind, spec.input_dim, spec.seq_len,
                        spec.layers[:2] + (spec.layers[2],), Readout("argmax", "first"))
    seqs = [(1, 0, 0), (1, 4, 2), (1, 3, 3)]
    ds = Dataset("next-token", "token-ids", tuple(seqs), (0, 0, 0), vocab_size=VOCAB)
    outs = [row[0] for row in outputs(every, forward(every, ds))]
    assert outs[0] == outs[1] == outs[2]
    open_spec = NetworkSpec(spec.input_kind, spec.input_dim, spec.seq_len,
                            (spec.layers[0], Attention(att.heads, kind="hardmax"),
                             spec.layers[2]), Readout("argmax", "first"))
    open_outs = [row[0] for row in outputs(open_spec, forward(open_spec, ds))]
    assert len(set(open_outs)) > 1


# tampering ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hardmax_cert() -> dict[str, Any]:
    spec = extended_spec(7, "hardmax")
    ds = dataset_of(spec, all_sequences(7, 60))
    return build_certificate(ds, BuildResult(spec, {}), "test", evaluate(spec, ds))


def _tamper(cert: dict[str, Any], edit: Any) -> Any:
    bad = copy.deepcopy(cert)
    edit(bad["network"]["layers"])
    return check_certificate(_resign(bad))


@pytest.mark.parametrize("field", ["positions", "query_bias", "value_bias", "output_bias"])
def test_a_changed_field_is_rejected(hardmax_cert: dict[str, Any], field: str) -> None:
    def edit(layers: list[Any]) -> None:
        if field == "positions":
            layers[0]["positions"] = [[str(Fraction(x) + 5) for x in r]
                                      for r in layers[0]["positions"]]
        elif field == "causal":
            del layers[1]["causal"]
        else:
            for h in layers[1]["heads"]:
                h[field] = [str(Fraction(x) * 7 - 3) for x in h[field]]

    report = _tamper(hardmax_cert, edit)
    assert not report.verified and not report.unusable
    assert any("readout" in f or "sizes" in f for f in report.failures)


def test_dropping_the_causal_mask_is_rejected() -> None:
    """Read at the first position, where the mask matters (query 0 sees key 0 only)."""
    base = extended_spec(7, "hardmax")
    spec = NetworkSpec(base.input_kind, base.input_dim, base.seq_len, base.layers,
                       Readout("argmax", "first"))
    seqs = all_sequences(7, 60)
    probe = Dataset("next-token", "token-ids", tuple(seqs), tuple(0 for _ in seqs),
                    vocab_size=VOCAB)
    outs = [row[0] for row in outputs(spec, forward(spec, probe))]
    keep = [(s, o.index(max(o))) for s, o in zip(seqs, outs, strict=True)
            if o.count(max(o)) == 1]
    ds = Dataset("next-token", "token-ids", tuple(s for s, _ in keep),
                 tuple(y for _, y in keep), vocab_size=VOCAB)
    cert = build_certificate(ds, BuildResult(spec, {}), "test", evaluate(spec, ds))
    assert check_certificate(cert).verified
    report = _tamper(cert, lambda la: la[1].pop("causal"))
    assert not report.verified and not report.unusable
    assert any("readout" in f for f in report.failures)


@pytest.mark.parametrize("edit, message", [
    (lambda la: la[1]["heads"][0].__setitem__("scale", "-1/2"), "scale"),
    (lambda la: la[1]["heads"][0].__setitem__("scale", "0"), "scale"),
    (lambda la: la[1]["heads"][0].__setitem__("key_bias", ["1"]), "key_bias"),
    (lambda la: la[1]["heads"][0].__setitem__("key_bias", None), "key_bias"),
    (lambda la: la[1].__setitem__("causal", 1), "causal"),
    (lambda la: la[0].__setitem__("positions", [["1", "2"]] * DIM), "positions"),
    (lambda la: la[1]["heads"][0].__setitem__("query_offset", ["1", "1"]), "query_offset"),
])
def test_a_malformed_field_is_unusable(hardmax_cert: dict[str, Any], edit: Any,
                                       message: str) -> None:
    report = _tamper(hardmax_cert, edit)
    assert report.unusable and message in report.failures[-1]


def test_float_exact_is_not_claimed_for_the_new_fields(hardmax_cert: dict[str, Any]) -> None:
    bad = copy.deepcopy(hardmax_cert)
    bad["claims"]["float_exact"] = ["float64"]
    report = check_certificate(_resign(bad))
    assert not report.verified
    assert any("does not cover" in f for f in report.failures)


def test_defaults_write_nothing_new() -> None:
    spec = extended_spec(3, "hardmax", causal=False, biases=False, scale=Fraction(1),
                         positions=False)
    text = str(spec_to_json(spec)["layers"])
    for word in ("positions", "causal", "_bias", "scale"):
        assert word not in text


# exports ---------------------------------------------------------------------------------
def test_torch_and_safetensors_round_trip(tmp_path: Any) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from exactmem.exporters.torch import from_torch, run_torch, save_state_dict, to_torch
    from exactmem.importers.import_model import read_model

    spec = extended_spec(7, "softmax")
    assert from_torch(to_torch(spec)) == spec
    save_state_dict(spec, str(tmp_path / "m.pt"))
    assert read_model(tmp_path / "m.pt").spec == spec
    ds = dataset_of(extended_spec(7, "hardmax"), all_sequences(7, 60))
    with mpmath.workdps(30):
        want = [[float(x) for x in reference(spec, s, mpmath.exp)] for s in ds.sequences]
    got = run_torch(to_torch(spec), ds)[:, 0, :]
    assert abs(got - want).max() < 1e-9


def test_safetensors_export_and_sidecar_round_trip(tmp_path: Any) -> None:
    """The safetensors export (dyadic weights: float64 holds them) and its exact sidecar
    read back as the same spec; certify-model reads the file back too."""
    pytest.importorskip("safetensors")
    from exactmem.certificate import write_certificate
    from exactmem.exporters.safetensors_io import (
        sidecar,
        spec_from_safetensors,
        spec_from_sidecar,
        write_safetensors,
    )
    from exactmem.importers.import_model import read_model

    spec = extended_spec(7, "hardmax")
    ds = dataset_of(spec, all_sequences(7, 60))
    cert = build_certificate(ds, BuildResult(spec, {}), "test", evaluate(spec, ds))
    write_certificate(cert, tmp_path / "c.json")
    out, _ = write_safetensors(spec, tmp_path / "m.safetensors", tmp_path / "c.json")
    assert spec_from_safetensors(out) == spec
    assert spec_from_sidecar(sidecar(spec)) == spec
    assert read_model(out).spec == spec


def test_onnx_matches_torch() -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("torch")
    from exactmem.exporters.onnx_export import build_model, dataset_array, run_onnx
    from exactmem.exporters.torch import run_torch, to_torch

    for kind in ("softmax", "hardmax"):
        spec = extended_spec(9, kind)
        ds = dataset_of(extended_spec(9, "hardmax"), all_sequences(9, 60))
        outs, _ = run_onnx(build_model(spec), dataset_array(ds))
        ref = run_torch(to_torch(spec), ds)[:, 0, :]
        assert abs(outs[:, N_POS - 1, :] - ref).max() < 1e-9


@pytest.mark.parametrize("name", ["kajitsuka2025-next-token-ids.json",
                                  "kajitsuka2025-seq2seq-ids.json"])
def test_reference_certificates_encode_as_before(name: str) -> None:
    """A committed certificate decodes and re-encodes to the very same network JSON."""
    from pathlib import Path

    from exactmem.certificate import read_certificate

    cert = read_certificate(Path(__file__).resolve().parents[2] / "proofs" / "reference" / name)
    assert spec_to_json(spec_from_certificate(cert)) == cert["network"]
