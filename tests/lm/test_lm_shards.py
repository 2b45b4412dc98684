"""Language-model certificates split across ``check --shards K`` by sequence: the same
verdict and the same claim lines (positions and memorized bits, combined exactly) for
every K; a tampered weight is rejected in every split."""

from __future__ import annotations

import copy
import gzip
import json
from concurrent.futures import Future
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lm_models import random_spec, redigest

from exactmem.checker.lm import lm_verify
from exactmem.checker.sharded import _count, check_certificate_sharded, check_sharded
from exactmem.checker.verify import check_certificate
from exactmem.lm.certfile import build_lm_certificate
from exactmem.lm.codelength import code_length_upper
from exactmem.lm.positions import prove_positions
from exactmem.lm.tokens import next_token_dataset

Cert = dict[str, Any]
N = 5


def inline(fn: Any, *args: Any) -> Future[Any]:
    """A ``submit`` that runs in this process (no pool: fast and deterministic)."""
    fut: Future[Any] = Future()
    fut.set_result(fn(*args))
    return fut


@pytest.fixture(scope="module")
def cert() -> Cert:
    spec = random_spec(np.random.default_rng(21), "gelu_tanh", tied=True)
    toks = np.random.default_rng(22).integers(0, spec.vocab_size, size=(N, 7))
    ds = next_token_dataset(toks, spec.vocab_size)
    lengths: list[Fraction] = []
    bounds = prove_positions(spec, ds.sequences, ds.labels, producer="arb",
                             on_logits=lambda i, lo, hi: lengths.append(
                                 code_length_upper(lo, hi, ds.labels[i])))
    return build_lm_certificate(spec, ds, [list(p) for p in bounds.proved], True,
                                code_lengths=lengths)


def test_an_lm_certificate_is_planned_by_sequence(cert: Cert) -> None:
    assert _count(cert) == N


@pytest.mark.parametrize("k", [1, 2, 3, N + 1])
def test_every_split_gives_the_verdict_and_claim_lines_of_one_pass(cert: Cert, k: int) -> None:
    one = check_certificate(copy.deepcopy(cert), Path("."))
    assert one.verified and one.claim is not None
    assert "\nc claim: code length at most " in one.claim
    split = check_certificate_sharded(copy.deepcopy(cert), Path("."), k, inline)
    assert (split.verdict, split.claim, split.failures) == (one.verdict, one.claim, [])
    assert split.totals is not None and split.totals["sequences"] == N


def test_the_memorized_bits_are_summed_exactly_before_rounding(cert: Cert) -> None:
    """Per-slice floors would undercount: the combined claim floors the exact sum."""
    parts = []
    for k in range(N):
        totals: dict[str, Any] = {}
        lm_verify.check(copy.deepcopy(cert), Path("."), shard=(k, N), totals=totals)
        parts.append(totals)
    merged = lm_verify.merge(parts)
    whole: dict[str, Any] = {}
    lm_verify.check(copy.deepcopy(cert), Path("."), totals=whole)
    assert merged == whole
    clipped = sum((t["below_uniform"][0] for t in parts), Fraction(0))
    assert merged["below_uniform"][0] == clipped
    assert lm_verify.claim_text(merged) == lm_verify.claim_text(whole)


def test_a_tampered_weight_is_rejected_under_shards(cert: Cert) -> None:
    c = copy.deepcopy(cert)
    vals = c["model"]["tensors"]["lnf.weight"]["values"]
    vals[0] = str(int(vals[0]) * 3)  # the logits move; the digest no longer matches
    for k in (1, 2, 3, N + 1):
        report = check_certificate_sharded(copy.deepcopy(c), Path("."), k, inline)
        assert report.verdict == "s REJECTED" and report.claim is None
        assert report.failures[0].startswith("digest:")
        assert sum(f.startswith("digest:") for f in report.failures) == 1
    again = check_certificate_sharded(redigest(copy.deepcopy(c)), Path("."), 3, inline)
    assert again.verdict == "s REJECTED" and again.claim is None and again.failures


def test_a_sharded_file_check_in_processes_matches_one_pass(cert: Cert, tmp_path: Path) -> None:
    path = tmp_path / "lm.json.gz"
    path.write_bytes(gzip.compress(json.dumps(cert).encode()))
    one = check_sharded(str(path), 1)
    two = check_sharded(str(path), 2)
    assert one.verified and (two.verdict, two.claim) == (one.verdict, one.claim)
