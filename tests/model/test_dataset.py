"""Dataset parsing and the exact checks (duplicates, consistency, separation)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from exactmem.datasets.draw import generate
from exactmem.errors import DatasetError, InconsistentLabelsError
from exactmem.model import Dataset, dataset_from_json, load_dataset, require_consistent, validate
from exactmem.model.dataset_checks import separation_squared


def ids(seqs: list[tuple[int, ...]], labels: list[int], vocab: int = 5) -> Dataset:
    return Dataset("next-token", "token-ids", tuple(seqs), tuple(labels), vocab_size=vocab)


def test_round_trip_and_hash(tmp_path: Path) -> None:
    ds = generate("seq2seq", N=20, n=3, vocab=4, classes=3, seed=2, dim=2)
    obj = ds.to_json()
    again = dataset_from_json(json.loads(json.dumps(obj)))
    assert again == ds and again.sha256() == ds.sha256()
    path = tmp_path / "d.json"
    path.write_text(json.dumps(obj))
    assert load_dataset(path) == ds


def test_floats_are_refused_with_the_field() -> None:
    obj = generate("next-token", N=3, n=2, vocab=3, classes=2, dim=2).to_json()
    obj["sequences"][1][0][1] = 0.5
    with pytest.raises(DatasetError, match=r"sequences\[1\]\[0\]\[1\].*float"):
        dataset_from_json(obj)
    obj = generate("next-token", N=3, n=2, vocab=3, classes=2).to_json()
    obj["labels"][2] = 1.0
    with pytest.raises(DatasetError, match=r"labels\[2\]"):
        dataset_from_json(obj)


def test_malformed_fields_are_named() -> None:
    with pytest.raises(DatasetError, match="format"):
        dataset_from_json({"format": "x"})
    obj = generate("next-token", N=3, n=2, vocab=3, classes=2).to_json()
    obj["sequences"][1] = [0, 1, 2]
    with pytest.raises(DatasetError, match=r"sequences\[1\]: length 3"):
        dataset_from_json(obj)
    obj["sequences"][1] = [0, 7]
    with pytest.raises(DatasetError, match=r"sequences\[1\]\[1\]"):
        dataset_from_json(obj)


def test_conflicting_duplicates_name_both_indices() -> None:
    ds = ids([(1, 2), (2, 2), (1, 2)], [0, 1, 1])
    with pytest.raises(InconsistentLabelsError, match="sequences 0 and 2") as err:
        validate(ds)
    assert err.value.pair == (0, 2)


def test_permutations_with_the_same_last_token_must_agree() -> None:
    ok = ids([(1, 2, 3), (2, 1, 3), (3, 1, 2)], [0, 0, 1])
    require_consistent(ok)
    assert validate(ok).consistent
    bad = ids([(1, 2, 3), (3, 1, 2), (2, 1, 3)], [0, 1, 1])
    with pytest.raises(InconsistentLabelsError, match="sequences 0 and 2"):
        require_consistent(bad)
    assert validate(bad).inconsistency == (0, 2)


def test_seq2seq_consistency_compares_positions() -> None:
    ds = Dataset("seq2seq", "token-ids", ((1, 2), (2, 1)), ((0, 1), (1, 0)), vocab_size=3)
    require_consistent(ds)
    bad = Dataset("seq2seq", "token-ids", ((1, 2), (2, 1)), ((0, 1), (0, 0)), vocab_size=3)
    with pytest.raises(InconsistentLabelsError):
        require_consistent(bad)


def test_separation_is_exact() -> None:
    toks = [(Fraction(0), Fraction(0)), (Fraction(3), Fraction(4)), (Fraction(1, 2), Fraction(0))]
    ds = Dataset("next-token", "vectors", ((toks[0], toks[1]), (toks[2], toks[1])), (0, 1), dim=2)
    assert separation_squared(ds) == (Fraction(1, 4), Fraction(25))


def test_generated_datasets_are_consistent_and_distinct() -> None:
    for task in ("next-token", "seq2seq"):
        ds = generate(task, N=200, n=4, vocab=5, classes=3, seed=7)
        require_consistent(ds)
        assert len(set(ds.sequences)) == ds.N
    with pytest.raises(DatasetError, match="distinct sequences"):
        generate("next-token", N=10, n=1, vocab=3, classes=2)


@pytest.mark.parametrize("text, field", [
    ('{"format":"exactmem.dataset/1","task":"next-token","inputs":"vectors","dim":1,'
     '"sequences":[[["+1"]]],"labels":[0]}', r"sequences\[0\]\[0\]\[0\]"),
    ('{"format":"exactmem.dataset/1","task":"next-token","inputs":"vectors","dim":1,'
     '"sequences":[[["\\u0661"]]],"labels":[0]}', r"sequences\[0\]\[0\]\[0\]"),
    ('{"format":"exactmem.dataset/1","task":"next-token","inputs":"vectors","dim":1,'
     '"sequences":[[[1]]],"labels":[0]}', r"write \"1\""),
    ('{"format":"exactmem.dataset/1","task":"next-token","inputs":"token-ids","vocab_size":2,'
     '"sequences":[[1]],"labels":[0],"labels":[1]}', "duplicate key 'labels'"),
    ('{"format":"exactmem.dataset/1","task":"next-token","inputs":"token-ids","vocab_size":2,'
     '"sequences":[[1]],"labels":[0],"note":1}', r"note: unknown field"),
    ('{"format":"exactmem.dataset/1","task":"next-token","inputs":"token-ids","vocab_size":2,'
     '"sequences":[],"labels":[]}', "non-empty"),
    ('{"format":"exactmem.dataset/1","task":"next-token","inputs":"token-ids","vocab_size":2,'
     '"sequences":[[1]],"labels":[NaN]}', "NaN"),
    ('\ufeff{}', "byte-order mark"),
])
def test_the_loader_reads_the_strict_grammar(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "d.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DatasetError, match=field):
        load_dataset(path)


def test_the_loader_refuses_binary_and_device_files(tmp_path: Path) -> None:
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(DatasetError, match="not UTF-8"):
        load_dataset(binary)
    with pytest.raises(DatasetError, match="not a regular file"):
        load_dataset("/dev/zero")
    with pytest.raises(DatasetError, match="not a regular file"):
        load_dataset(tmp_path)


def test_derived_facts_are_the_datasets_own() -> None:
    """Facts computed once per dataset (validation, then a construction's own checks) are
    not part of its value, and a slice computes its own."""
    from exactmem.model.dataset_checks import distinct_tokens, find_inconsistency, multiset_keys

    ds = ids([(1, 2, 3), (2, 1, 3), (4, 4, 0)], [0, 1, 1])
    fresh = ids([(1, 2, 3), (2, 1, 3), (4, 4, 0)], [0, 1, 1])
    assert find_inconsistency(ds) == (0, 1, 2) and multiset_keys(ds)[1] == (1, 2, 3)
    assert ds == fresh and hash(ds) == hash(fresh) and ds.sha256() == fresh.sha256()
    assert "memo" not in repr(ds)
    tail = ds.slice(1, 3)
    assert find_inconsistency(tail) is None
    assert multiset_keys(tail) == [(1, 2, 3), (0, 4, 4)]
    toks = distinct_tokens(tail)
    toks.append(99)  # the caller's own list
    assert distinct_tokens(tail) == [2, 1, 3, 4, 0]
    with pytest.raises(InconsistentLabelsError):
        require_consistent(ds)


@pytest.mark.parametrize("task", ["next-token", "seq2seq"])
def test_a_slice_equals_the_dataset_built_from_its_rows(task: str) -> None:
    """A slice is not validated again: it must be the dataset the same rows give, with its
    own (empty) facts, and an empty range is refused."""
    seqs = [(1, 2, 3), (2, 1, 3), (4, 4, 0), (0, 1, 2)]
    labels: list = [0, 1, 1, 2] if task == "next-token" else [(0, 1, 1), (1, 0, 2), (2, 2, 0),
                                                                (0, 0, 1)]
    ds = Dataset(task, "token-ids", tuple(seqs), tuple(labels), vocab_size=5)
    ds.memo["seen"] = True
    for lo, hi in [(0, 4), (1, 3), (3, 4), (2, 9)]:
        part = ds.slice(lo, hi)
        built = Dataset(task, "token-ids", tuple(seqs[lo:hi]), tuple(labels[lo:hi]),
                        vocab_size=5)
        assert part == built and hash(part) == hash(built) and part.sha256() == built.sha256()
        assert part.memo == {} and part.generator is None and part.N == len(seqs[lo:hi])
    with pytest.raises(DatasetError, match="slice 2:2"):
        ds.slice(2, 2)
