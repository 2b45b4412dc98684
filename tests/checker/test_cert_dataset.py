"""The checker's dataset reader (checker/cert_dataset.py): tokens and labels are checked in
bulk, and a bad one is still named exactly, against a per-value reading written here."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from exactmem.checker.cert_dataset import DATASET_FORMAT, dataset_object
from exactmem.checker.verdict import Unusable


def _data(task: str, rng: random.Random, N: int = 30, n: int = 5, V: int = 7,  # noqa: N803
          ) -> dict[str, Any]:
    seqs = [[rng.randrange(V) for _ in range(n)] for _ in range(N)]
    labels: list[Any] = [rng.randrange(4) for _ in range(N)] if task == "next-token" else \
        [[rng.randrange(4) for _ in range(n)] for _ in range(N)]
    return {"format": DATASET_FORMAT, "task": task, "inputs": "token-ids", "vocab_size": V,
            "sequences": seqs, "labels": labels}


def _first_bad(data: dict[str, Any]) -> str | None:
    """The field a value-by-value reading names first: tokens, then labels."""
    V = data["vocab_size"]  # noqa: N806
    for i, s in enumerate(data["sequences"]):
        for k, t in enumerate(s):
            if type(t) is not int or not 0 <= t < V:
                return f"dataset.sequences[{i}][{k}]"
    for i, y in enumerate(data["labels"]):
        if data["task"] == "next-token":
            if type(y) is not int or y < 0:
                return f"dataset.labels[{i}]"
            continue
        if type(y) is not list or len(y) != len(data["sequences"][0]):
            return f"dataset.labels[{i}]"
        for k, v in enumerate(y):
            if type(v) is not int or v < 0:
                return f"dataset.labels[{i}][{k}]"
    return None


BAD = [True, False, 1.0, -1, 7, 10**40, "3", None]


@pytest.mark.parametrize("task", ["next-token", "seq2seq"])
@pytest.mark.parametrize("seed", range(6))
def test_a_bad_token_or_label_is_named(task: str, seed: int) -> None:
    rng = random.Random(seed)
    good = _data(task, rng)
    assert dataset_object(copy.deepcopy(good))[3] == good["labels"]
    for _ in range(40):
        data = copy.deepcopy(good)
        for _ in range(rng.randrange(1, 3)):  # one or two bad values, tokens or labels
            bad = rng.choice(BAD)
            i = rng.randrange(len(data["sequences"]))
            if rng.random() < 0.5:
                data["sequences"][i][rng.randrange(5)] = bad
            elif task == "next-token":
                data["labels"][i] = bad
            elif rng.random() < 0.2:
                data["labels"][i] = data["labels"][i][:-1]  # a label list one short
            else:
                data["labels"][i][rng.randrange(5)] = bad
        want = _first_bad(data)
        if want is None:  # the bad values were valid after all (7 as a label)
            dataset_object(data)
            continue
        with pytest.raises(Unusable) as err:
            dataset_object(data)
        assert str(err.value).startswith(want + ":"), (str(err.value), want)


def test_edges_of_the_vocabulary_are_read() -> None:
    data = _data("next-token", random.Random(0))
    data["sequences"][0] = [0, 6, 0, 6, 0]
    data["labels"][0] = 10**30
    assert dataset_object(data)[2][0] == [0, 6, 0, 6, 0]
