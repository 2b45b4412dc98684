"""Exact checks of a dataset against the assumptions of the memorization theorems.

* conflicting duplicates: two identical sequences with different labels;
* consistency (Kajitsuka & Sato eq. 5 / eq. 10): sequences equal up to a permutation of
  tokens, with the same last token (next-token) or the same token at the read position
  (seq2seq), must share the label — no permutation-equivariant model can do otherwise;
* token-wise (r, delta)-separation (Assumption 4.1), computed exactly as squared norms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain
from typing import Any, TypeVar

from exactmem.errors import DatasetError, InconsistentLabelsError
from exactmem.model.dataset import Dataset

_T = TypeVar("_T")


def _once(ds: Dataset, name: str, compute: Callable[[], _T]) -> _T:
    """``compute()`` once per dataset (a dataset is immutable: validation and a
    construction's own checks read the same facts)."""
    if name not in ds.memo:
        ds.memo[name] = compute()
    value: _T = ds.memo[name]
    return value


def release_facts(ds: Dataset) -> None:
    """Forget the facts kept per sequence (:func:`multiset_keys`: one tuple a sequence);
    for callers done with validation and the build, so their memory is free for the next
    stage.  Asked again, they are computed again."""
    ds.memo.pop("multiset_keys", None)


def multiset_key(seq: tuple[Any, ...]) -> tuple[Any, ...]:
    """The multiset of a sequence's tokens, as a sorted tuple."""
    return tuple(sorted(seq))


def multiset_keys(ds: Dataset) -> list[tuple[Any, ...]]:
    """:func:`multiset_key` of every sequence, in order (computed once per dataset; do not
    modify the list)."""
    return _once(ds, "multiset_keys", lambda: list(map(multiset_key, ds.sequences)))


def find_conflicting_duplicate(ds: Dataset) -> tuple[int, int] | None:
    """First pair ``(i, j)``, ``i < j``, of identical sequences with different labels."""
    return _once(ds, "conflicting_duplicate", lambda: _conflicting_duplicate(ds))


def _conflicting_duplicate(ds: Dataset) -> tuple[int, int] | None:
    first: dict[tuple[Any, ...], int] = {}
    for j, seq in enumerate(ds.sequences):
        i = first.setdefault(seq, j)
        if i != j and ds.labels[i] != ds.labels[j]:
            return (i, j)
    return None


def find_inconsistency(ds: Dataset) -> tuple[int, int, int] | None:
    """First violation of eq. (5)/(10): ``(i, j, position of j)``; ``None`` if consistent.

    Next-token: same multiset and same last token, different labels.
    Seq2seq: same multiset, ``X_i[:, k] = X_j[:, l]``, different labels ``y_i[k] != y_j[l]``.
    """
    return _once(ds, "inconsistency", lambda: _inconsistency(ds))


def _inconsistency(ds: Dataset) -> tuple[int, int, int] | None:
    seen: dict[tuple[Any, Any], tuple[int, int, int]] = {}
    for j, (seq, ms) in enumerate(zip(ds.sequences, multiset_keys(ds), strict=True)):
        positions = (len(seq) - 1,) if ds.task == "next-token" else range(len(seq))
        labels = ds.position_labels(j)
        for idx, k in enumerate(positions):
            key = (ms, seq[k])
            prev = seen.get(key)
            if prev is None:
                seen[key] = (j, k, labels[idx])
            elif prev[2] != labels[idx]:
                return (prev[0], j, k)
    return None


def require_no_conflicting_duplicates(ds: Dataset) -> None:
    pair = find_conflicting_duplicate(ds)
    if pair is not None:
        i, j = pair
        raise InconsistentLabelsError(
            f"sequences {i} and {j} are identical but carry different labels "
            f"({ds.labels[i]!r} vs {ds.labels[j]!r}); no function can memorize both", pair)


def require_consistent(ds: Dataset) -> None:
    """Raise :class:`InconsistentLabelsError` naming the first offending pair."""
    require_no_conflicting_duplicates(ds)
    bad = find_inconsistency(ds)
    if bad is not None:
        i, j, k = bad
        where = "the same last token" if ds.task == "next-token" else f"the token at position {k}"
        raise InconsistentLabelsError(
            f"sequences {i} and {j} are equal up to a permutation of tokens with {where} but "
            f"carry different labels; they violate label consistency (Kajitsuka & Sato "
            f"eq. {'5' if ds.task == 'next-token' else '10'}), which every model without "
            f"positional information needs", (i, j))


def distinct_tokens(ds: Dataset) -> list[Any]:
    """Distinct tokens in first-appearance order (a new list)."""
    return list(_once(ds, "distinct_tokens", lambda: tuple(_first_seen(ds))))


def _first_seen(ds: Dataset) -> dict[Any, None]:
    return dict.fromkeys(chain.from_iterable(ds.sequences))  # insertion order: first seen


def _sq_dist(a: tuple[Fraction, ...], b: tuple[Fraction, ...]) -> Fraction:
    return sum(((x - y) * (x - y) for x, y in zip(a, b, strict=True)), Fraction(0))


def separation_squared(ds: Dataset) -> tuple[Fraction, Fraction] | None:
    """``(delta^2, r^2)`` of Assumption 4.1 for vector datasets (exact); ``None`` for ids.

    ``delta`` is the least distance between distinct tokens, ``r`` the largest norm.
    Uses a sweep along the first coordinate, so it is exact and fast on typical data.
    With a single distinct token, ``delta^2`` is reported as 0.
    """
    if ds.inputs != "vectors":
        return None
    toks: list[tuple[Fraction, ...]] = sorted(distinct_tokens(ds))
    r2 = max(sum((x * x for x in t), Fraction(0)) for t in toks)
    best: Fraction | None = None
    for i, a in enumerate(toks):
        for b in toks[i + 1:]:
            gap = b[0] - a[0]
            if best is not None and gap * gap >= best:
                break
            d2 = _sq_dist(a, b)
            if best is None or d2 < best:
                best = d2
    return (best if best is not None else Fraction(0), r2)


@dataclass(frozen=True, slots=True)
class DatasetReport:
    """What validation found: sizes, separation, consistency."""

    N: int
    n: int
    task: str
    inputs: str
    distinct_tokens: int
    distinct_sequences: int
    delta_squared: Fraction | None
    r_squared: Fraction | None
    consistent: bool
    inconsistency: tuple[int, int] | None

    def lines(self) -> list[str]:
        out = [f"N = {self.N} sequences of length n = {self.n} ({self.task}, {self.inputs})",
               f"distinct tokens: {self.distinct_tokens}; "
               f"distinct sequences: {self.distinct_sequences}"]
        if self.delta_squared is not None and self.r_squared is not None:
            out.append(f"token separation delta^2 = {self.delta_squared} "
                       f"(delta ~ {float(self.delta_squared) ** 0.5:.6g}), radius r^2 = "
                       f"{self.r_squared} (r ~ {float(self.r_squared) ** 0.5:.6g})")
        if self.consistent:
            out.append("labels are consistent (Kajitsuka & Sato eq. 5/10)")
        else:
            out.append(f"labels are NOT consistent: sequences {self.inconsistency}")
        return out


def validate(ds: Dataset) -> DatasetReport:
    """Check a dataset; conflicting duplicates raise, inconsistency is reported."""
    require_no_conflicting_duplicates(ds)
    bad = find_inconsistency(ds)
    sep = separation_squared(ds)
    return DatasetReport(
        N=ds.N, n=ds.n, task=ds.task, inputs=ds.inputs,
        distinct_tokens=len(distinct_tokens(ds)),
        distinct_sequences=len(set(ds.sequences)),
        delta_squared=sep[0] if sep else None, r_squared=sep[1] if sep else None,
        consistent=bad is None, inconsistency=(bad[0], bad[1]) if bad else None)


__all__ = ["DatasetError", "DatasetReport", "distinct_tokens", "find_conflicting_duplicate",
           "find_inconsistency", "multiset_key", "multiset_keys", "release_facts",
           "require_consistent",
           "require_no_conflicting_duplicates", "separation_squared", "validate"]
