"""The lower-bound probe (scripts/lower_bound_probe.py) on small points: the minimum it
reports is a verified certificate, every smaller shape is refuted by an LRAT proof the
checker accepts or is nested in a refuted shape, and the checked bound is consistent."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from exactmem.checker import check_file
from exactmem.checker.proofs.lrat import check_lrat_files

ROOT = Path(__file__).resolve().parents[2]


def probe_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lower_bound_probe",
                                                  ROOT / "scripts" / "lower_bound_probe.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["lower_bound_probe"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_one_bit_points_are_minimal_with_checked_proofs(tmp_path: Path) -> None:
    lb = probe_module()
    (tmp_path / "certs").mkdir()
    rows = {N: lb.probe(N, 0, 1, 100_000, str(tmp_path), str(tmp_path / "certs"),
                        (1, 2, 2)) for N in (4, 8)}
    for row in rows.values():
        assert row["claim"] == "minimal" and row["unknown"] == 0
        assert check_file(row["certificate"]).verified
        smaller = [sh for sh in lb.shapes(1, 2, 2) if lb.params(sh) < row["params"]]
        assert row["infeasible"] + row["implied"] == len(smaller) > 0
        assert row["refuted_up_to"] == max(lb.params(sh) for sh in smaller)
        assert len(row["proofs"]) == row["infeasible"]
        for cnf, proof in row["proofs"]:
            assert proof.endswith(".lrat")
            assert check_lrat_files(cnf, proof).verdict == "s VERIFIED"
    # more sequences need at least as many parameters
    assert rows[8]["params"] >= rows[4]["params"]


def test_a_larger_budget_reuses_the_network_of_a_smaller_one(tmp_path: Path) -> None:
    lb = probe_module()
    (tmp_path / "certs").mkdir()
    two = lb.probe(4, 0, 2, 100_000, str(tmp_path), str(tmp_path / "certs"), (1, 2, 2))
    four = lb.probe(4, 0, 4, 100_000, str(tmp_path), str(tmp_path / "certs"), (1, 2, 2),
                    known=two)
    assert four["from_bits"] == 2 and four["params"] <= two["params"]
    assert four["claim"] == "minimal"
