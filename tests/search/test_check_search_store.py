"""``exactmem check-search`` on ``--all-labellings`` runs: the results store (every found
network run by the checker on its labelling, every refuted labelling's CNF re-derived and
its LRAT proof checked) and the ``--json`` answer that names it (each shape's
``shatters``, the summary and the texts follow from the store).  A store or answer with
one labelling tampered with is rejected."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from search_answers import exactmem

from exactmem.checker.entry import checker_line
from exactmem.checker.proofs.search_check import check_search, check_search_file


def _run(folder: Path, *argv: str) -> dict[str, Any]:
    proc = exactmem(folder, "search", "--all-labellings", "--n", "2", "--vocab", "2",
                    "--minimize", "ff-width", "--proofs", "P", "--results", "r.jsonl",
                    "--executor", "serial", "--json", "--quiet", *argv)
    assert proc.returncode in (0, 1), proc.stderr
    (folder / "answer.json").write_text(proc.stdout)
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def refuting(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """N = 4 with 1-bit weights: no shape of the sweep shatters (labellings refuted)."""
    folder = tmp_path_factory.mktemp("refuting")
    return folder, _run(folder, "--N", "4", "--bits", "1", "--max-ff-width", "1")


@pytest.fixture(scope="module")
def shattering(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """N = 3 with 2-bit weights: the smallest shape shatters (every labelling found)."""
    folder = tmp_path_factory.mktemp("shattering")
    return folder, _run(folder, "--N", "3", "--bits", "2", "--max-ff-width", "1")


def _records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (folder / "r.jsonl").read_text().splitlines()]


def _store_verdict(folder: Path, records: list[dict[str, Any]]) -> tuple[str, list[str]]:
    (folder / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rep = check_search_file(str(folder / "t.jsonl"))
    return rep.verdict, rep.reasons


def _relabel(rec: dict[str, Any], k: int) -> None:
    rec["labels"][k] ^= 1
    rec["key"] = rec["key"].split("|")[0] + "|" + ",".join(map(str, rec["labels"]))


def test_a_store_verifies_and_a_tampered_labelling_is_rejected(
        refuting: tuple[Path, dict[str, Any]]) -> None:
    folder, ans = refuting
    assert ans["status"] == "infeasible" and ans["bits"] == 1
    proc = exactmem(folder, "check-search", "r.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [checker_line(), "s VERIFIED"]
    assert "L1 H1 m1 s1 q0 res argmax: does not shatter the 4 sequences" in proc.stderr
    records = _records(folder)
    found = next(k for k, r in enumerate(records) if r.get("status") == "found")
    refuted = next(k for k, r in enumerate(records) if r.get("status") == "infeasible")
    for k, why in ((found, "does not give sequence"), (refuted, "not the CNF")):
        bad = copy.deepcopy(records)
        _relabel(bad[k], 0)
        verdict, reasons = _store_verdict(folder, bad)
        assert verdict == "s REJECTED" and why in " ".join(reasons), reasons
    bad = copy.deepcopy(records)
    _relabel(bad[found], 0)
    bad[found]["labels"][0] ^= 1  # the key no longer names the labelling
    assert _store_verdict(folder, bad)[0] == "s REJECTED"
    proc = exactmem(folder, "check-search", "t.jsonl")
    assert proc.returncode == 1 and proc.stdout.splitlines() == [checker_line(), "s REJECTED"]
    bad = copy.deepcopy(records)
    del bad[0]["header"]["bits"]  # real weights: the solvers' word
    assert _store_verdict(folder, bad)[0] == "s UNUSABLE"
    (folder / "t.jsonl").write_text((folder / "r.jsonl").read_text() + "{\n")
    proc = exactmem(folder, "check-search", "t.jsonl")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_an_answer_is_checked_with_its_store(
        refuting: tuple[Path, dict[str, Any]],
        shattering: tuple[Path, dict[str, Any]]) -> None:
    folder, ans = shattering
    assert ans["status"] == "found" and ans["proved_minimal"] and ans["claim"] == "minimal"
    rep = check_search(copy.deepcopy(ans), folder)
    assert rep.verdict == "s VERIFIED", rep.reasons
    assert rep.claim is not None and rep.claim.startswith(
        "status found: shatters the 3 sequences with minimal 10 parameters")
    assert "shatters the 3 sequences; 4 labellings found (8 of 8" in rep.lines[0]
    # one found labelling taken out of the store: the shape no longer shatters by it
    records = _records(folder)
    (folder / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:-1]))
    bad = {**copy.deepcopy(ans), "results": "t.jsonl"}
    rep = check_search(bad, folder)
    assert rep.verdict == "s REJECTED" and "by the store it is open" in rep.reasons[0]
    folder, ans = refuting
    assert check_search(copy.deepcopy(ans), folder).verdict == "s VERIFIED"
    bad = copy.deepcopy(ans)
    bad["sizes"][-1].update(shatters=True, status="found")
    bad.update(status="found", minimal={**bad["sizes"][-1]["shape"],
                                        "params": bad["sizes"][-1]["params"]},
               claim="at most", claim_reason="not every smaller shape was refuted")
    rep = check_search(bad, folder)
    assert rep.verdict == "s REJECTED" and "by the store it does not shatter" in \
        rep.reasons[0]
    for field, change in (("qualifier", "among 1-bit integer weights, proved"),
                          ("classes", {"found": 4, "infeasible": 0, "unknown": 0,
                                       "unanswered": 0}),
                          ("params", 99)):
        bad = copy.deepcopy(ans)
        if field == "qualifier":
            bad[field] = change
        else:
            bad["sizes"][0][field] = change
        rep = check_search(bad, folder)
        assert rep.verdict == "s REJECTED" and field in rep.reasons[0], rep.reasons


def test_a_scalar_readout_with_bits_asks_both_labellings_of_a_flip(tmp_path: Path) -> None:
    """``y -> 1 - y`` negates the readout row and sets the bias to ``1 - b``: off the B-bit
    grid for ``-2^(B-1)``, so a bit-bounded run asks both labellings, and the checker can
    confirm its "shatters" from the store alone."""
    ans = _run(tmp_path, "--N", "3", "--bits", "2", "--readout", "scalar",
               "--max-ff-width", "0")
    assert ans["status"] == "found" and ans["sizes"][0]["classes"]["found"] == 8
    rep = check_search(copy.deepcopy(ans), tmp_path)
    assert rep.verdict == "s VERIFIED", rep.reasons
    assert "scalar: shatters the 3 sequences; 8 labellings found" in rep.lines[0]
