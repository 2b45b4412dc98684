"""``exactmem check-search``: a real bit-bounded answer verifies as a whole; an answer whose
"infeasible" is not bound to its question (a found size rewritten as infeasible, a CNF
swapped for an unrelated unsatisfiable one), a tampered hash or file, or a changed claim
is rejected; a missing file is unusable.  The proofs are standard LRAT: an independent
checker written from the format accepts them."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from lrat_reference import accepts
from search_answers import exactmem, genuine_answer, pigeonhole_files, rebind

from exactmem.checker.entry import checker_line
from exactmem.checker.proofs.search_check import check_search, nests_in, params_of


@pytest.fixture(scope="module")
def answer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("answer")
    return folder, genuine_answer(folder, "--bits", "1", "--minimize", "params")


def _verdict(folder: Path, ans: dict[str, Any]) -> tuple[str, list[str]]:
    rep = check_search(json.loads(json.dumps(ans)), folder)
    return rep.verdict, rep.reasons


def _first(ans: dict[str, Any], status: str) -> dict[str, Any]:
    return next(e for e in ans["sizes"] if e["status"] == status)


def test_a_real_answer_verifies_and_its_proofs_are_standard_lrat(
        answer: tuple[Path, dict[str, Any]]) -> None:
    folder, ans = answer
    assert ans["status"] == "found" and ans["minimal"]["params"] == 28
    refuted = [e for e in ans["sizes"] if e["status"] == "infeasible"]
    assert len(refuted) == 17 and all(e["proof_kind"] == "lrat" for e in refuted)
    assert _verdict(folder, ans) == ("s VERIFIED", [])
    proc = exactmem(folder, "check-search", "answer.json")
    assert proc.returncode == 0 and proc.stdout.splitlines() == [checker_line(), "s VERIFIED"]
    assert "1 found sizes certified, 17 LRAT refutations" in proc.stderr
    claim = next(x for x in proc.stderr.splitlines() if x.startswith("c claim: "))
    assert claim == ("c claim: status found: at most 28 parameters, among 1-bit integer "
                     "weights, LRAT-checked (L2 H1 m2 s1 q0 res argmax); why at most: "
                     + ans["claim_reason"])
    for e in refuted:
        cnf = (folder / e["cnf"]).read_text()
        assert cnf.startswith("c encoder exactmem.bits-cnf/1\n")
        assert f"c dataset-sha256 {ans['dataset']['sha256']}\n" in cnf
        proof = (folder / e["proof"]).read_text()
        assert accepts(cnf, proof), e["cnf"]
        empty = [x for x in proof.splitlines() if x.split()[1] == "0"]
        assert len(empty) == 1 and not accepts(cnf, proof.replace(empty[0], ""))


def test_a_found_size_rewritten_as_infeasible_is_rejected(
        answer: tuple[Path, dict[str, Any]]) -> None:
    folder, ans = answer
    names = pigeonhole_files(folder)
    bad = copy.deepcopy(ans)
    found = _first(bad, "found")
    other = _first(bad, "infeasible")
    for files in ((other["cnf"], other["proof"]), names):  # a real run's pair, and php
        found.update(status="infeasible", proof_kind="lrat", cnf=files[0], proof=files[1],
                     question=other["question"])
        found.pop("certificate_data", None)
        rebind(found, folder)
        bad.update(status="infeasible", minimal=None, proved_minimal=False)
        verdict, why = _verdict(folder, bad)
        assert verdict == "s REJECTED" and "not the CNF of the question" in " ".join(why)


def test_a_cnf_swapped_for_an_unrelated_unsatisfiable_one_is_rejected(
        answer: tuple[Path, dict[str, Any]]) -> None:
    folder, ans = answer
    cnf, proof = pigeonhole_files(folder, "unrelated")
    assert exactmem(folder, "check-proof", cnf, proof).returncode == 0  # a valid refutation
    bad = copy.deepcopy(ans)
    entry = _first(bad, "infeasible")
    entry.update(cnf=cnf, proof=proof)
    rebind(entry, folder)
    verdict, why = _verdict(folder, bad)
    assert verdict == "s REJECTED" and "sizes[0].cnf: not the CNF" in " ".join(why)
    # the same with the genuine header pasted on top of the unrelated clauses
    head = [x for x in (folder / _first(ans, "infeasible")["cnf"]).read_text().splitlines()
            if x.startswith("c ")]
    (folder / "pasted.cnf").write_text("\n".join(head) + "\n" + (folder / cnf).read_text())
    entry.update(cnf="pasted.cnf")
    rebind(entry, folder)
    assert _verdict(folder, bad)[0] == "s REJECTED"


def test_tampered_hashes_and_files_are_rejected(answer: tuple[Path, dict[str, Any]],
                                                tmp_path: Path) -> None:
    folder, ans = answer
    bad = copy.deepcopy(ans)
    _first(bad, "infeasible")["proof_sha256"] = "0" * 64
    verdict, why = _verdict(folder, bad)
    assert verdict == "s REJECTED" and "does not match its SHA-256" in " ".join(why)
    # a changed CNF with its hash updated: the re-derived CNF differs
    work = tmp_path / "w"
    shutil.copytree(folder, work)
    bad = copy.deepcopy(ans)
    entry = _first(bad, "infeasible")
    lines = (work / entry["cnf"]).read_text().splitlines()
    lines[-1] = "-" + lines[-1] if not lines[-1].startswith("-") else lines[-1][1:]
    (work / entry["cnf"]).write_text("\n".join(lines) + "\n")
    rebind(entry, work)
    assert _verdict(work, bad)[0] == "s REJECTED"


def test_changed_claims_are_rejected(answer: tuple[Path, dict[str, Any]]) -> None:
    folder, ans = answer
    cases = []
    bad = copy.deepcopy(ans)  # another labelling: every CNF is now the wrong question
    bad["dataset"]["data"]["labels"][0] ^= 1
    bad["dataset"]["sha256"] = __import__("hashlib").sha256(json.dumps(
        bad["dataset"]["data"], sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    cases.append(bad)
    bad = copy.deepcopy(ans)
    bad["dataset"]["data"]["labels"][0] ^= 1  # the hash left as it was
    cases.append(bad)
    bad = copy.deepcopy(ans)
    _first(bad, "infeasible")["params"] -= 1
    cases.append(bad)
    bad = copy.deepcopy(ans)
    bad["bits"] = 2
    cases.append(bad)
    bad = copy.deepcopy(ans)
    bad["minimal"]["params"] = 27
    cases.append(bad)
    bad = copy.deepcopy(ans)
    _first(bad, "infeasible")["proof_kind"] = "label-consistency"
    cases.append(bad)
    bad = copy.deepcopy(ans)
    _first(bad, "infeasible")["shape"]["ff_width"] += 1
    cases.append(bad)
    bad = copy.deepcopy(ans)
    bad["sizes"][1]["status"] = "unknown"
    bad["proved_minimal"] = True
    cases.append(bad)
    for k, bad in enumerate(cases):
        assert _verdict(folder, bad)[0] == "s REJECTED", k


def _summary_verdict(ans: dict[str, Any]) -> str:
    """The summary and texts of ``ans`` against its sizes taken as checked (the sizes
    themselves are checked by the other tests): ``""`` when they follow, else why not."""
    from exactmem.checker.proofs.search_claims import Failed, Family, summary
    from exactmem.checker.verdict import Unusable

    done = [(e, e["status"]) for e in ans["sizes"]]
    try:
        summary(ans, done, Family(3, 2), ans["bits"])
    except (Failed, Unusable) as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


@pytest.mark.parametrize(("field", "value"), [
    ("qualifier", "among 1-bit integer weights, proved optimal"),
    ("qualifier", "among 2-bit integer weights, LRAT-checked"),
    ("claim", "minimal"),
    ("claim", None),
    ("claim_reason", None),
    ("claim_reason", "every smaller shape was refuted"),
    ("ties", "margin"),
    ("minimize", None),
    ("minimize", "ff-width"),
    ("minimize", "heads"),
    ("minimize", "everything"),
])
def test_rewritten_texts_are_rejected(answer: tuple[Path, dict[str, Any]], field: str,
                                      value: Any) -> None:
    """The texts of an answer are claims too: each is recomputed from the checked sizes
    and must be what the answer says (a missing one is unusable)."""
    _, ans = answer
    assert _summary_verdict(ans) == ""
    bad = copy.deepcopy(ans)
    assert bad[field] != value
    bad[field] = value
    why = _summary_verdict(bad)
    assert why.startswith("Unusable" if value == "everything" else "Failed") and field in why
    del bad[field]
    assert _summary_verdict(bad).startswith("Unusable")


def test_a_rewritten_claim_fails_the_whole_answer(answer: tuple[Path, dict[str, Any]]
                                                 ) -> None:
    folder, ans = answer
    bad = copy.deepcopy(ans)
    bad.update(claim="minimal", claim_reason=None)
    verdict, why = _verdict(folder, bad)
    assert verdict == "s REJECTED" and why == [
        "claim: the answer says 'minimal', the checked sizes say 'at most'",
        "claim_reason: the answer says null, the checked sizes say "
        + repr(ans["claim_reason"])]


def test_missing_files_and_fields_are_unusable(answer: tuple[Path, dict[str, Any]],
                                               tmp_path: Path) -> None:
    folder, ans = answer
    bad = copy.deepcopy(ans)
    _first(bad, "infeasible")["cnf"] = "P/none.cnf"
    verdict, why = _verdict(folder, bad)
    assert verdict == "s UNUSABLE" and "no such regular file" in " ".join(why)
    bad = copy.deepcopy(ans)
    del _first(bad, "infeasible")["proof_sha256"]
    assert _verdict(folder, bad)[0] == "s UNUSABLE"
    (tmp_path / "a.json").write_text(json.dumps(ans))  # its files are not beside it
    proc = exactmem(tmp_path, "check-search", "a.json")
    assert proc.returncode == 2 and proc.stdout.splitlines() == [checker_line(), "s UNUSABLE"]
    assert "Traceback" not in proc.stderr
    proc = exactmem(tmp_path, "check-search", "a.json", "--base", str(folder))
    assert proc.returncode == 0, proc.stderr


def test_nested_sizes_and_label_consistency(answer: tuple[Path, dict[str, Any]],
                                            tmp_path: Path) -> None:
    folder, ans = answer
    big = next(e for e in ans["sizes"] if e["status"] == "infeasible"
               and e["shape"]["ff_width"] == 1 and e["shape"]["heads"] == 1
               and e["shape"]["layers"] == 1 and e["shape"]["d_model"] == 1)
    small = {**copy.deepcopy(big), "nests_in": big["shape"]}
    small["shape"] = {**big["shape"], "ff_width": 0}
    small["params"] = params_of(small["shape"], 3, 2)
    good = copy.deepcopy(ans)
    good["sizes"].insert(0, small)
    assert _verdict(folder, good) == ("s VERIFIED", [])
    wrong = copy.deepcopy(good)
    wrong["sizes"][0]["shape"]["heads"] = 2  # does not nest in the refuted shape
    wrong["sizes"][0]["params"] = params_of(wrong["sizes"][0]["shape"], 3, 2)
    assert _verdict(folder, wrong)[0] == "s REJECTED"
    assert not nests_in({**big["shape"], "residual": False, "layers": 1},
                        {**big["shape"], "residual": False, "layers": 2})
    (tmp_path / "d.json").write_text(json.dumps(
        {"format": "exactmem.dataset/1", "task": "next-token", "inputs": "token-ids",
         "vocab_size": 2, "sequences": [[0, 1], [1, 0], [0, 1]], "labels": [0, 1, 1]}))
    proc = exactmem(tmp_path, "search", "d.json", "--bits", "1", "--json", "--quiet",
                    "--minimize", "ff-width", "--max-ff-width", "0")
    inconsistent = json.loads(proc.stdout)
    assert _first(inconsistent, "infeasible")["proof_kind"] == "label-consistency"
    assert _verdict(tmp_path, inconsistent) == ("s VERIFIED", [])
    inconsistent["dataset"]["data"]["labels"] = [0, 1, 0]
    inconsistent["dataset"].pop("sha256")
    from exactmem.model.dataset import dataset_from_json

    inconsistent["dataset"]["sha256"] = dataset_from_json(
        inconsistent["dataset"]["data"]).sha256()
    verdict, why = _verdict(tmp_path, inconsistent)
    assert verdict == "s REJECTED" and "carry different labels" in " ".join(why)


def test_the_api(answer: tuple[Path, dict[str, Any]]) -> None:
    from exactmem.api.proofs import check_proof, check_search

    folder, ans = answer
    res = check_search(folder / "answer.json")
    assert res.verified and res.claim and res.exit_code == 0
    entry = _first(ans, "infeasible")
    proof = check_proof(folder / entry["cnf"], folder / entry["proof"])
    assert proof.verified and proof.claim == "this CNF is unsatisfiable"
    assert check_proof(folder / entry["cnf"], folder / "P").unusable


def test_the_re_encoding_is_bounded_by_the_file_offered(
        answer: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """A tiny CNF claimed for the largest shape: rejected after at most as many
    variables as the file has bytes, not after encoding the whole network."""
    folder, ans = answer
    (tmp_path / "tiny.cnf").write_text("p cnf 1 1\n1 0\n")
    (tmp_path / "tiny.lrat").write_text("2 0 1 0\n")
    bad = copy.deepcopy(ans)
    entry = _first(bad, "infeasible")
    entry["shape"] = {"layers": 8, "heads": 8, "d_model": 16, "head_dim": 16,
                      "ff_width": 32, "residual": True, "readout": "argmax"}
    entry["params"] = params_of(entry["shape"], 3, 2)
    entry.update(cnf="tiny.cnf", proof="tiny.lrat")
    rebind(entry, tmp_path)
    bad["sizes"] = [entry]
    bad.update(status="infeasible", minimal=None, proved_minimal=False)
    bad["bits"] = 8
    verdict, why = _verdict(tmp_path, bad)
    assert verdict == "s REJECTED" and "more variables than the file has bytes" in why[0]


def test_a_single_shape_answer_verifies_and_a_flipped_label_is_rejected(
        tmp_path: Path) -> None:
    """Without ``--minimize`` (one shape asked): the answer carries its dataset, so it is
    re-checked on its own; a label changed in that dataset no longer verifies."""
    ans = genuine_answer(tmp_path, "--bits", "1")
    assert [e["status"] for e in ans["sizes"]] in (["found"], ["infeasible"])
    assert _verdict(tmp_path, ans) == ("s VERIFIED", [])
    bad = copy.deepcopy(ans)
    labels = bad["dataset"]["data"]["labels"]
    labels[0] = 1 - labels[0] if isinstance(labels[0], int) else labels[0]
    assert _verdict(tmp_path, bad)[0] != "s VERIFIED"
