"""The lookup construction memorizes random consistent datasets, and the checker agrees."""

from __future__ import annotations

import pytest

from exactmem.checker import check_certificate
from exactmem.datasets.draw import generate
from exactmem.errors import InconsistentLabelsError
from exactmem.model import Dataset, evaluate, sizes
from exactmem.pipeline import certify


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("task", ["next-token", "seq2seq"])
@pytest.mark.parametrize("dim", [None, 3])
def test_lookup_memorizes(seed: int, task: str, dim: int | None) -> None:
    ds = generate(task, N=60, n=4, vocab=6, classes=4, seed=seed, dim=dim)  # type: ignore[arg-type]
    outcome = certify(ds, "lookup", {"seed": seed})
    assert outcome.report.verified, outcome.report.failures[:5]
    assert outcome.certificate["claims"]["outputs"] == [
        [str(y) for y in ds.position_labels(i)] for i in range(ds.N)]


def test_lookup_handles_repeated_tokens_and_permutations() -> None:
    seqs = ((1, 1, 2), (1, 2, 1), (2, 1, 1), (2, 2, 2), (0, 1, 2), (1, 0, 2))
    labels = (3, 0, 0, 1, 2, 2)  # (1,2,1) and (2,1,1): same multiset, same last token
    ds = Dataset("next-token", "token-ids", seqs, labels, vocab_size=3)
    outcome = certify(ds, "lookup")
    assert outcome.report.verified


def test_lookup_refuses_inconsistent_data() -> None:
    ds = Dataset("next-token", "token-ids", ((1, 2, 3), (2, 1, 3)), (0, 1), vocab_size=4)
    with pytest.raises(InconsistentLabelsError, match="sequences 0 and 1"):
        certify(ds, "lookup")


def test_lookup_size_is_linear_in_contexts() -> None:
    small = generate("next-token", N=50, n=4, vocab=8, classes=2, seed=3)
    large = generate("next-token", N=200, n=4, vocab=8, classes=2, seed=3)
    from exactmem.constructions import get

    a = sizes(get("lookup").build(small, {}).spec).params_nonzero
    b = sizes(get("lookup").build(large, {}).spec).params_nonzero
    assert 3.5 < b / a < 4.5


def test_a_wrong_label_is_caught_by_evaluation_and_checker() -> None:
    ds = generate("next-token", N=30, n=3, vocab=5, classes=3, seed=4)
    from exactmem.certificate import build_certificate
    from exactmem.constructions import get

    result = get("lookup").build(ds, {})
    flipped = Dataset(ds.task, ds.inputs, ds.sequences,
                      ((ds.labels[0] + 1) % 3, *ds.labels[1:]), vocab_size=ds.vocab_size)
    ev = evaluate(result.spec, flipped)
    assert [f.sequence for f in ev.failures] == [0]
    report = check_certificate(build_certificate(flipped, result, "lookup", ev))
    assert not report.verified and any("sequence 0" in f for f in report.failures)
