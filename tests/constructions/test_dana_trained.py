"""Dana et al.'s experimental attention-only model, trained, read exactly and certified on
the subset it provably memorizes (scripts/reproduce_dana.py; docs/results/dana_trained.md)."""

from __future__ import annotations

import copy
import gzip
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from exactmem.certificate import build_certificate, certificate_text  # noqa: E402
from exactmem.certificate.build import claim_subset, digest_of  # noqa: E402
from exactmem.checker import check_certificate  # noqa: E402
from exactmem.checker.verify import check_file  # noqa: E402
from exactmem.constructions.base import BuildResult  # noqa: E402
from exactmem.errors import SpecError  # noqa: E402
from exactmem.exporters.torch import AttentionOnly, to_torch  # noqa: E402
from exactmem.importers.aot_fold import spec_from_aot  # noqa: E402
from exactmem.model.dataset import Dataset  # noqa: E402
from exactmem.model.interval_verdict import certify_interval, softmax_hint  # noqa: E402

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
V = 8


@pytest.fixture(scope="module")
def trained() -> Iterator[tuple[AttentionOnly, Dataset]]:
    """All 64 bigrams over 8 tokens with seeded next tokens; 300 Adam steps (one thread:
    the machine's cores are shared)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    seqs = tuple((a, b) for a in range(V) for b in range(V))
    labels = torch.randint(0, V, (len(seqs),), generator=gen)
    ds = Dataset("next-token", "token-ids", seqs, tuple(int(y) for y in labels), vocab_size=V)
    torch.manual_seed(0)
    model = AttentionOnly(V, 4, 4, 2, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    x = torch.tensor(seqs)
    for _ in range(300):
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    yield model, ds
    torch.set_num_threads(threads)


def test_the_fold_is_the_trained_model(trained: tuple[AttentionOnly, Dataset]) -> None:
    """The exact spec's float64 mirror gives the trained model's logits evaluated in
    float64 (its float32 weights widened exactly): only float64 rounding differs."""
    model, ds = trained
    spec = spec_from_aot(model.state_dict(), 2)
    x = torch.tensor(ds.sequences)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(x)
        got = to_torch(spec, torch.float64)(x)[:, -1, :]
    assert (got - want).abs().max() < 1e-10


def test_certified_subset_is_what_the_float_model_gets_right(
        trained: tuple[AttentionOnly, Dataset]) -> None:
    model, ds = trained
    spec = spec_from_aot(model.state_dict(), 2)
    outcome = certify_interval(spec, ds, precisions=(32, 64))
    ids = [i for i, row in enumerate(outcome.evaluation.predictions) if row[0] is not None]
    with torch.no_grad():
        logits = model(torch.tensor(ds.sequences))
    top2 = logits.topk(2, dim=-1).values
    right = (logits.argmax(-1) == torch.tensor(ds.labels)).tolist()
    clear = ((top2[:, 0] - top2[:, 1]) > 1e-4).tolist()
    assert 0 < len(ids) < ds.N  # a real subset: the test can fail both ways
    assert {i for i in range(ds.N) if right[i] and clear[i]} <= set(ids)
    assert set(ids) <= {i for i in range(ds.N) if right[i]}
    cert = build_certificate(ds, BuildResult(spec, {}, hints={"softmax": softmax_hint(outcome)}),
                             "dana2024-trained", outcome.evaluation)
    claim_subset(cert, ids)
    report = check_certificate(cert)
    assert report.verified, report.failures[:3]
    assert f"a subset: {len(ids)} of the {ds.N} sequences" in (report.claim or "")
    wrong = next(i for i in range(ds.N) if not right[i])  # claim one it gets wrong
    bad = dict(cert, claims={**cert["claims"], "sequences": sorted([*ids, wrong]),
                             "outputs": [[str(ds.labels[i])] for i in sorted([*ids, wrong])]})
    bad["digest"] = digest_of(bad)
    assert not check_certificate(bad).verified


def test_a_state_dict_that_is_not_the_model_is_refused() -> None:
    with pytest.raises(SpecError, match="embed.weight"):
        spec_from_aot({"weight": torch.zeros(2, 2)}, 2)
    state = AttentionOnly(V, 4, 4, 1, 2).state_dict()
    state["pos"] = torch.zeros(3, 4)
    with pytest.raises(SpecError, match="pos: expected shape"):
        spec_from_aot(state, 2)


def test_committed_certificate_verifies() -> None:
    """docs/results/dana_trained_H1.json.gz (gzip) verifies: the subset claim of the trained
    H = 1 model (H = 16 and 31 are verified by the script and `exactmem check`)."""
    path = RESULTS / "dana_trained_H1.json.gz"
    report = check_file(path)
    assert report.verified, report.failures[:3]
    assert "of the 2500 sequences" in (report.claim or "")


def test_gzip_certificates_are_read_and_bad_ones_refused(tmp_path: Path,
                                                         trained: tuple[AttentionOnly, Dataset],
                                                         ) -> None:
    model, ds = trained
    spec = spec_from_aot(model.state_dict(), 2)
    outcome = certify_interval(spec, ds, precisions=(32,))
    ids = [i for i, row in enumerate(outcome.evaluation.predictions) if row[0] is not None]
    cert = build_certificate(ds, BuildResult(spec, {}, hints={"softmax": softmax_hint(outcome)}),
                             "dana2024-trained", outcome.evaluation)
    claim_subset(cert, ids)
    data = gzip.compress(certificate_text(cert).encode(), mtime=0)
    (tmp_path / "c.json.gz").write_bytes(data)
    assert check_file(tmp_path / "c.json.gz").verified
    (tmp_path / "cut.json.gz").write_bytes(data[: len(data) // 2])
    report = check_file(tmp_path / "cut.json.gz")
    assert report.unusable and "gzip" in report.failures[0]
