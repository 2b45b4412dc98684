"""dana2024-aot: H d_h + d associations certified on random data; assumptions refused."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from exactmem.certificate import write_certificate
from exactmem.checker.entry import checker_line
from exactmem.constructions import get
from exactmem.constructions.dana2024_aot import capacity, circle_points
from exactmem.datasets.draw_attention import generate_for
from exactmem.errors import AssumptionError, ConstructionError
from exactmem.model.dataset import Dataset
from exactmem.pipeline import certify

CON = get("dana2024-aot")


def _certify(ds: Dataset, **opts: Any) -> dict[str, Any]:
    outcome = certify(ds, CON.name, opts)
    assert outcome.report.verified, outcome.report.failures[:3]
    return outcome.certificate


@pytest.mark.parametrize(("H", "dh", "d", "S", "seed"), [
    (1, 2, 2, 2, 0), (2, 2, 2, 2, 1), (3, 1, 2, 2, 2), (2, 3, 3, 2, 3), (2, 2, 3, 3, 4),
])
def test_certified_at_theorem_count(H: int, dh: int, d: int, S: int, seed: int) -> None:
    ds = generate_for("dana2024-aot", seed=seed, heads=H, head_dim=dh, dim=d, n=S)
    assert ds.N == capacity(H, dh, d)
    cert = _certify(ds, heads=H, head_dim=dh, dim=d, seed=seed)
    assert cert["claims"]["outputs"] == [[str(y)] for y in ds.labels]
    assert cert["construction"]["params"]["feature_rank"] == ds.N


def test_cli_check_accepts_the_certificate(tmp_path: Path) -> None:
    ds = generate_for("dana2024-aot", seed=11, heads=2, head_dim=2, dim=2)
    cert = _certify(ds, heads=2, head_dim=2, dim=2)
    path = tmp_path / "c.json"
    write_certificate(cert, path)
    run = subprocess.run([sys.executable, "-m", "exactmem", "check", str(path)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0 and run.stdout.strip().endswith("\ns VERIFIED"), run.stderr
    obj = json.loads(path.read_text())
    obj["dataset"]["data"]["labels"][1] += 1
    path.write_text(json.dumps(obj))
    run = subprocess.run([sys.executable, "-m", "exactmem", "check", str(path)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 1 and run.stdout.splitlines() == [checker_line(), "s REJECTED"]


def test_beyond_capacity_is_refused() -> None:
    ds = generate_for("dana2024-aot", seed=12, heads=2, head_dim=2, dim=2, N=7)
    with pytest.raises(ConstructionError, match="exceed H d_h \\+ d = 6"):
        CON.build(ds, CON.defaults())


def test_refuses_non_deterministic_next_token() -> None:
    ds = Dataset("next-token", "token-ids", ((0, 1), (1, 2), (0, 1)), (2, 0, 3), vocab_size=4)
    with pytest.raises(AssumptionError, match=r"Assumption 1.*sequences 0 and 2"):
        CON.build(ds, CON.defaults())


def test_refuses_inconsistent_without_positions() -> None:
    ds = Dataset("next-token", "token-ids", ((0, 1, 2), (1, 0, 2)), (1, 3), vocab_size=4)
    with pytest.raises(AssumptionError, match="sequences 0 and 1"):
        CON.build(ds, CON.defaults())


def test_refuses_bad_dimensions() -> None:
    ds = generate_for("dana2024-aot", seed=13)
    with pytest.raises(ConstructionError, match="d_h <= d"):
        CON.build(ds, {**CON.defaults(), "head_dim": 3, "dim": 2})


def test_circle_points_are_distinct_unit_vectors() -> None:
    pts = circle_points(50)
    assert len(set(pts)) == 50
    for x, y in pts:
        assert x * x + y * y == 1
    # every point is the unique maximizer of its own direction
    for i, (x, y) in enumerate(pts):
        dots = [x * a + y * b for a, b in pts]
        assert max(dots) == 1 and dots.count(Fraction(1)) == 1 and dots[i] == 1


# the LP readout --------------------------------------------------------------------------
def test_lp_readout_certifies_at_the_theorem_count() -> None:
    ds = generate_for("dana2024-aot", seed=1, heads=2, head_dim=2, dim=2)
    cert = _certify(ds, heads=2, head_dim=2, dim=2, readout="lp")
    assert cert["construction"]["params"]["readout"] == "lp"
    assert cert["claims"]["outputs"] == [[str(y)] for y in ds.labels]


def test_lp_readout_beyond_capacity_claims_the_certified_subset() -> None:
    """64 bigrams for H d_h + d = 6: the LP readout is certified on a subset, which the
    checker re-verifies; asking the construction for all of them is refused."""
    import random

    from exactmem.certificate import build_certificate
    from exactmem.certificate.build import claim_subset
    from exactmem.checker import check_certificate
    from exactmem.constructions.base import BuildResult
    from exactmem.constructions.dana2024_aot import lp_network
    from exactmem.model.interval_verdict import softmax_hint

    rng = random.Random(1)
    pairs = tuple((a, b) for a in range(8) for b in range(8))
    ds = Dataset("next-token", "token-ids", pairs, tuple(rng.randrange(8) for _ in pairs),
                 vocab_size=8)
    opts = {"heads": 2, "head_dim": 2, "dim": 2}
    spec, outcome, params = lp_network(ds, opts)
    ids = [i for i, row in enumerate(outcome.evaluation.predictions) if row[0] is not None]
    assert 0 < len(ids) < ds.N and params["T"] == 64
    cert = build_certificate(ds, BuildResult(spec, params, hints={"softmax": softmax_hint(
        outcome)}), "dana2024-aot", outcome.evaluation)
    claim_subset(cert, ids)
    report = check_certificate(cert)
    assert report.verified, report.failures[:3]
    with pytest.raises(ConstructionError, match="LP readout certified"):
        CON.build(ds, {**CON.defaults(), **opts, "readout": "lp"})


def test_unknown_readout_is_refused() -> None:
    ds = generate_for("dana2024-aot", seed=1, heads=2, head_dim=2, dim=2)
    with pytest.raises(ConstructionError, match="readout"):
        CON.build(ds, {**CON.defaults(), "readout": "qr"})
