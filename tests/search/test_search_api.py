"""The search verb from Python and its claims: bits, proofs, all labellings, qualifiers, the
reason for "at most", size caps, ``-q``; and ``exactmem.prove``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import exactmem
from exactmem.cli import main
from exactmem.errors import DatasetError, ExactmemError

BITS = "among 2-bit integer weights, LRAT-checked"
REAL = "real weights, solvers' word"


def _small(tmp_path: Path) -> Path:
    """The README's search dataset: the one-head shape without feed-forward is refuted."""
    path = tmp_path / "small.json"
    exactmem.generate("next-token", N=6, n=2, vocab=3, classes=3, seed=1, output=path)
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exactmem", *args], capture_output=True,
                          text=True, timeout=300)


def test_search_with_bits_writes_proofs_that_check(tmp_path: Path) -> None:
    data, proofs = _small(tmp_path), tmp_path / "P"
    res = exactmem.search(data, bits=2, proofs=proofs)
    assert isinstance(res, exactmem.SearchResult) and res.status == "infeasible" and not res
    assert res.qualifier == BITS and res.report["qualifier"] == BITS
    (entry,) = res.shapes
    assert entry["proof_kind"] == "lrat" and Path(entry["cnf"]).parent == proofs
    assert main(["check-proof", entry["cnf"], entry["proof"], "-q"]) == 0
    swept = exactmem.search(exactmem.load_dataset(data), bits=2, minimize="params",
                            proofs=tmp_path / "Q")
    assert swept.status == "found" and swept.proved_minimal and swept.minimal is not None
    assert swept.minimal["params"] == 17 and swept.reason is None
    assert str(swept).startswith(f"status: found; minimal: 17 parameters, {BITS}")
    assert sorted(p.suffix for p in (tmp_path / "Q").iterdir()) == [".cnf", ".lrat"]


def test_a_capped_sweep_says_which_shape_it_did_not_try(tmp_path: Path) -> None:
    res = exactmem.search(_small(tmp_path), bits=2, minimize="params", max_ff_width=0)
    assert res.status == "found" and res.claim == "at most" and not res.proved_minimal
    assert res.reason == "not tried: L1 H1 m1 s1 q1 res (17 parameters) is outside " \
                         "--max-ff-width 0"
    assert str(res).splitlines()[-1] == f"why at most: {res.reason}"
    one = exactmem.search(_small(tmp_path), bits=2, ff_width=1)
    assert one.claim == "at most" and one.reason is not None and "--minimize" in one.reason


def test_all_labellings_from_python(tmp_path: Path) -> None:
    res = exactmem.search(all_labellings=True, N=3, n=2, vocab=2, bits=2, executor="serial",
                          results=tmp_path / "r.jsonl", show_progress=False)
    assert res.status == "found" and res.qualifier == BITS
    assert res.report["sequences"] and (tmp_path / "r.jsonl").exists()
    assert str(res).startswith(f"status: found; shatters with {res.claim} ")


def test_cli_summary_lines_carry_the_qualifier_and_q_is_accepted(tmp_path: Path) -> None:
    data = str(_small(tmp_path))
    real = cli("search", data, "--minimize", "ff-width", "--max-ff-width", "1", "-q")
    assert real.returncode == 0 and real.stderr == "", real.stderr
    assert f"status: found; minimal: 17 parameters, {REAL}" in real.stdout
    bits = cli("search", data, "--bits", "2", "--max-ff-width", "0", "--minimize", "params",
               "-q", "--json")
    out = json.loads(bits.stdout)
    assert out["qualifier"] == BITS and out["claim"] == "at most"
    assert "--max-ff-width 0" in out["claim_reason"]


def test_help_names_both_kinds_of_answer() -> None:
    text = " ".join(cli("search", "--help").stdout.split())
    assert "Z3's opinion" not in text
    assert "the solvers' word" in text and "LRAT proof" in text and "-q" in text


def test_the_all_labellings_flag_keeps_its_former_spelling() -> None:
    from exactmem.cli import build_parser

    for flag in ("--all-labellings", "--all-labelings"):
        args = build_parser().parse_args(["search", flag, "--N", "3", "--n", "2", "--vocab", "2"])
        assert args.all_labellings is True
    assert build_parser().parse_args(["search", "d.json"]).all_labellings is False


@pytest.mark.parametrize("args, flag", [
    (["--all-labellings", "--N", "1000", "--n", "2", "--vocab", "3"], "--N"),
    (["--all-labellings", "--N", "20", "--n", "2", "--vocab", "3", "--classes", "3"],
     "labellings"),
    (["--all-labellings", "--N", "6", "--n", "16", "--vocab", "64"], "--n 16 --vocab 64"),
    (["--all-labellings", "--N", "6", "--n", "2", "--vocab", "100000"], "--vocab"),
    (["DATA", "--bits", "64"], "--bits"),
    (["DATA", "--layers", "1000"], "--layers"),
    (["DATA", "--minimize", "params", "--max-d-model", "64", "--max-ff-width", "1024"],
     "--minimize params"),
    (["DATA", "--timeout", "inf"], "--timeout"),
    (["DATA", "--budget", "1e12"], "--budget"),
    (["DATA", "--bits", "2", "--conflicts", "0"], "--conflicts"),
    (["DATA", "--workers", "100000"], "--workers"),
])
def test_absurd_sizes_are_refused_in_one_line(tmp_path: Path, args: list[str],
                                              flag: str) -> None:
    data = str(_small(tmp_path))
    proc = cli("search", *[data if a == "DATA" else a for a in args],
               "--results", str(tmp_path / "r.jsonl"))
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r.jsonl").exists()


def test_caps_hold_in_python_too() -> None:
    with pytest.raises(DatasetError, match="--bits"):
        exactmem.search(all_labellings=True, N=4, n=2, vocab=2, bits=99)


def test_prove_from_python() -> None:
    res = exactmem.prove("interval", quick=True)
    assert isinstance(res, exactmem.ProveResult) and res
    assert [x.name for x in res.lemmas] == ["gadget.G2.interval-indicator",
                                            "gadget.G5.unit-interval"]
    assert all(x.status == "proved" for x in res.lemmas)
    assert str(res).splitlines()[-1] == "2 of 2 lemmas proved (quick)"
    with pytest.raises(ExactmemError, match="no lemma name contains"):
        exactmem.prove("no-such-lemma")


def test_the_api_page_search_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    import re

    page = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    block = re.findall(r"```python\n(.*?)```", page, re.S)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/api.md", "exec"), {"__name__": "docs_api_search"})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"status: found; minimal: 17 parameters, {BITS}")
    assert out[1] == "[(13, 'infeasible', 'P/L1_H1_m1_s1_q0_res.cnf'), (17, 'found', None)]"
    assert out[2] == "found minimal 14" and out[-1] == "2 of 2 lemmas proved (quick)"
    assert (tmp_path / "P" / "L1_H1_m1_s1_q0_res.lrat").exists()


def test_the_readme_search_lines_run_as_written(tmp_path: Path) -> None:
    import shlex

    from exactmem.cli import build_parser

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    starts = ("exactmem generate --task next-token --N 6 ", "exactmem search small.json",
              "exactmem check-proof ", "exactmem check-search ")
    lines = [x.split("  #")[0].strip() for x in readme.splitlines() if x.startswith(starts)]
    assert [x.split()[1] for x in lines] == ["generate", "search", "search", "check-proof",
                                             "search", "check-search"]
    verbs = set(build_parser()._subparsers._group_actions[0].choices or ())  # type: ignore[union-attr]
    exe = f"{shlex.quote(sys.executable)} -m exactmem"
    for line in lines:
        if line.split()[1] not in verbs:  # check-search: a verb of the proof checker
            continue
        proc = subprocess.run(line.replace("exactmem", exe, 1) + " -q", shell=True, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (line, proc.stdout, proc.stderr)
        if "check-proof" in line:
            assert "s VERIFIED" in proc.stdout
        if "--proofs P" in line and "--json" not in line:
            assert " 13  infeasible " in proc.stdout and "minimal: 17 parameters" in proc.stdout
