"""The parts of the memorized-bits claims (docs/memorized-bits.md): the seeded uniform
generator (two implementations that agree, pinned by a golden digest, exactly uniform by
rejection), the dataset grammar of a recorded generator, the rigorous lower bound of a code
length (against mpmath, both branches), and scripts/lm_dataset.py --uniform."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactmem.checker.cert_dataset import dataset_object
from exactmem.checker.lm import lm_codelength, lm_uniform
from exactmem.checker.verdict import Unusable
from exactmem.datasets.uniform_tokens import uniform_dataset, uniform_rows
from exactmem.errors import DatasetError
from exactmem.model.dataset import dataset_from_json

P = lm_codelength.P
REPO = Path(__file__).resolve().parents[2]
mpmath.mp.prec = 400


@given(st.integers(0, (1 << 64) - 1), st.integers(1, 1 << 32), st.integers(1, 3),
       st.integers(2, 5))
@settings(max_examples=60, deadline=None)
def test_the_producer_and_the_checker_draw_the_same_tokens(seed: int, vocab: int, count: int,
                                                           length: int) -> None:
    rows = uniform_rows(seed, vocab, count, length)
    assert rows == lm_uniform.rows(seed, vocab, count, length)
    assert all(0 <= t < vocab for r in rows for t in r)


def test_the_generator_is_pinned_by_its_definition() -> None:
    """Token k of row i is the first accepted u mod V, u the first 8 bytes of the SHA-256 of
    the name and four 8-byte big-endian numbers; a golden digest of 64 x 65 tokens."""
    name = b"exactmem.uniform-tokens/1"
    be = [x.to_bytes(8, "big") for x in (5, 1, 2, 0)]
    u = int.from_bytes(hashlib.sha256(name + b"".join(be)).digest()[:8], "big")
    assert uniform_rows(5, 2048, 2, 3)[1][2] == u % 2048  # accepted: u < 2**64 - 2**64 % 2048
    rows = lm_uniform.rows(0, 2048, 64, 65)
    digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    assert digest == GOLDEN


GOLDEN = "345d77c85084d1cec00850e071bf3cb41dd8ba46024623d3531c6db25cbaa9b5"


def test_rejection_keeps_the_tokens_exactly_uniform(monkeypatch: pytest.MonkeyPatch) -> None:
    """With V = 3, a draw u >= 2**64 - (2**64 mod 3) is rejected and the next counter
    drawn: every residue then has exactly (2**64 - 1) // 3 accepted values of u.  The
    rejection path is taken when the digest lands there (forced here)."""
    limit = (1 << 64) - (1 << 64) % 3
    assert limit % 3 == 0 and (1 << 64) - limit == 1
    calls: list[bytes] = []
    real = hashlib.sha256

    class Forced:
        def __init__(self, data: bytes = b"") -> None:
            self.h = real(data)

        def copy(self) -> Forced:
            out = Forced()
            out.h = self.h.copy()
            return out

        def update(self, data: bytes) -> None:
            self.h.update(data)
            calls.append(data)

        def digest(self) -> bytes:
            if calls[-1] == (0).to_bytes(8, "big"):
                return b"\xff" * 32  # u = 2**64 - 1: rejected for V = 3
            return self.h.digest()

    monkeypatch.setattr(lm_uniform.hashlib, "sha256", Forced)
    tok = lm_uniform.row(9, 0, 1, 3)[0]
    name = b"exactmem.uniform-tokens/1"
    again = real(name + b"".join(x.to_bytes(8, "big") for x in (9, 0, 0, 1))).digest()
    assert tok == int.from_bytes(again[:8], "big") % 3


def test_a_generated_dataset_records_its_generator_and_round_trips() -> None:
    ds = uniform_dataset(7, 64, 4, 9)
    assert ds.generator == {"name": "exactmem.uniform-tokens/1", "seed": 7, "vocab": 64,
                            "sequences": 4, "length": 9}
    assert (ds.N, ds.n, ds.vocab_size) == (4, 8, 64)
    data = ds.to_json()
    back = dataset_from_json(json.loads(json.dumps(data)))
    assert back == ds and back.generator == ds.generator and back.sha256() == ds.sha256()
    assert dataset_object(data)[5] == ds.sha256()  # the generator is part of the hash
    plain = dict(data)
    del plain["generator"]
    assert dataset_object(plain)[5] != ds.sha256()
    assert ds.slice(0, 2).generator is None  # a slice is not what the generator draws
    for bad in ((7, 0, 4, 9), (-1, 2, 4, 9), (7, 2, 4, 1), (7, 2, 1 << 20, 5)):
        with pytest.raises(DatasetError):
            uniform_dataset(*bad)


def test_the_grammar_of_a_recorded_generator() -> None:
    data = uniform_dataset(7, 4, 2, 5).to_json()
    for key, value in (("name", "other"), ("vocab", 0), ("vocab", (1 << 32) + 1),
                       ("sequences", 0), ("length", 1), ("seed", "7")):
        d = json.loads(json.dumps(data))
        d["generator"][key] = value
        with pytest.raises(Unusable, match=f"generator.{key}"):
            dataset_object(d)
    d = json.loads(json.dumps(data))
    del d["generator"]["seed"]
    with pytest.raises(Unusable, match="seed"):
        dataset_object(d)
    d = json.loads(json.dumps(data))
    d["task"], d["labels"] = "next-token", [0, 1]
    with pytest.raises(Unusable, match="only a seq2seq token-id dataset"):
        dataset_object(d)


def test_the_checker_regenerates_and_names_the_first_difference() -> None:
    ds = uniform_dataset(3, 5, 3, 6)
    assert ds.generator is not None
    toks = [list(s) for s in ds.sequences]
    labels = [list(y) for y in ds.labels]
    assert lm_uniform.mismatch(ds.generator, toks, labels, 5) is None
    labels[1][4] = (labels[1][4] + 1) % 5  # the last token of row 1
    text = lm_uniform.mismatch(ds.generator, toks, labels, 5)
    assert text is not None and "(1 of 3 sequences differ; first: sequence 1, token 5" in text
    assert "vocab 5, but the dataset's vocab_size is 6" in str(
        lm_uniform.mismatch(ds.generator, toks, labels, 6))
    gen = dict(ds.generator, sequences=1 << 20, length=8)
    with pytest.raises(Unusable, match="MAX_TOKENS"):
        lm_uniform.mismatch(gen, toks, labels, 5)


@given(st.lists(st.integers(-(1 << 140), 1 << 140), min_size=1, max_size=10),
       st.integers(0, 1 << 100), st.data())
@settings(max_examples=120, deadline=None)
def test_the_lower_bound_is_below_the_code_length_of_every_point_of_the_ball(
        mids: list[int], rad: int, data: st.DataObject) -> None:
    y = data.draw(st.integers(0, len(mids) - 1))
    f = 128
    lower = lm_codelength.position_lower(mids, rad, y, f)
    upper = lm_codelength.position_upper(mids, rad, y, f)
    # the best point of the ball: the label's logit at its highest, every other at its lowest
    ls = [mpmath.mpf(m + (rad if k == y else -rad)) / 2 ** f for k, m in enumerate(mids)]
    best = mpmath.log(sum(mpmath.exp(v - ls[y]) for v in ls), 2) * 2 ** P
    assert 0 <= lower <= best
    assert best - lower <= 2 ** P * 1e-15 + 8 * len(mids) + 64
    assert lower <= upper
    big = max((m - mids[y]) / 2 ** f for m in mids)
    if big > lm_codelength.EXP_LIMIT + 1:  # the log-domain branch, as tight
        assert best - lower <= 2 ** P * 1e-12


def test_the_lower_bound_at_a_point_is_the_code_length() -> None:
    f = 128
    mids = [3 << f, 1 << f, -(2 << f)]
    exact = mpmath.log(1 + mpmath.exp(2) + mpmath.exp(-3), 2) * 2 ** P  # label 1
    lo = lm_codelength.position_lower(mids, 0, 1, f)
    hi = lm_codelength.position_upper(mids, 0, 1, f)
    assert lo <= exact <= hi and hi - lo <= 64
    assert lm_codelength.position_lower([5], 7, 0, f) == 0  # one token: probability 1
    far = [0, 3000 << f, (3000 << f) - (1 << f)]  # a rival 3,000 nats above the label
    exact = mpmath.log(1 + mpmath.exp(3000) + mpmath.exp(2999), 2) * 2 ** P
    lo = lm_codelength.position_lower(far, 1, 0, f)
    assert lo <= exact <= lm_codelength.position_upper(far, 1, 0, f)
    assert exact - lo <= 2 ** P * 1e-12


def test_lm_dataset_writes_a_seeded_uniform_dataset(tmp_path: Path) -> None:
    out = tmp_path / "u.json"
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "lm_dataset.py"), "--uniform",
                          "11", "--vocab", "16", "--sequences", "5", "--length", "9", "-o",
                          str(out)], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert "5 sequences of 8 labelled positions (uniform random from seed 11)" in run.stdout
    data = json.loads(out.read_text())
    assert data["generator"]["seed"] == 11
    assert data["sequences"] == [r[:-1] for r in lm_uniform.rows(11, 16, 5, 9)]
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "lm_dataset.py"), "--uniform",
                          "11", "--vocab", "16", "-o", str(out)], capture_output=True,
                         text=True, cwd=REPO, env={"PYTHONPATH": str(REPO),
                                                   "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and "--sequences and --length" in bad.stderr
