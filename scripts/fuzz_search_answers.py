"""Mutation fuzzer for ``exactmem check-search``: mutated search answers never verify.

Runs a real bit-bounded search (N = 6, 1-bit weights, ``--minimize params``), cuts it into
small genuine answers (one refuted size and the found one; each verifies), and mutates
them: the claims in the JSON (status, shape, parameters, bits, dataset, summary, files
swapped between sizes, weights of the embedded certificate), the CNF files (a literal, a
clause, a header line) and the LRAT proofs (a hint, a literal, a line), re-binding the
SHA-256 of every changed file (and a certificate's digest) as an attacker would.  A
mutated answer that verifies is a false accept, except a changed proof that the
independent standard-LRAT checker of tests/lrat_reference.py also accepts (the claim is
then still proved).  Prints the counts; exit 1 on a false accept or a crash.

    .venv/bin/python scripts/fuzz_search_answers.py --mutations 2000 --seed 1
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import random
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from lrat_reference import accepts  # noqa: E402
from search_answers import genuine_answer, rebind  # noqa: E402

from exactmem.checker.proofs.search_check import check_search  # noqa: E402
from exactmem.model.dataset import dataset_from_json  # noqa: E402

Answer = dict[str, Any]


def _pieces(ans: Answer, folder: Path) -> list[Answer]:
    """Small genuine answers: one refuted size (proofs under 200 kB) and the found one."""
    found = next(e for e in ans["sizes"] if e["status"] == "found")
    out = []
    for e in ans["sizes"]:
        if e["status"] == "infeasible" and (folder / e["proof"]).stat().st_size < 200_000:
            out.append({**ans, "sizes": [e, found], "proved_minimal": False})
    return out


def _file(folder: Path, entry: dict[str, Any], key: str, rng: random.Random,
          change: Callable[[list[str], random.Random], list[str]]) -> None:
    """Write a changed copy of ``entry[key]`` and point the entry (re-bound) at it."""
    lines = (folder / entry[key]).read_text().splitlines()
    name = f"mut/{rng.randrange(10 ** 9)}.{key}"
    (folder / name).write_text("\n".join(change(lines, rng)) + "\n")
    entry[key] = name
    rebind(entry, folder)


def _flip_literal(lines: list[str], rng: random.Random) -> list[str]:
    k = rng.choice([i for i, x in enumerate(lines) if x[0] not in "cp"])
    nums = lines[k].split()
    j = rng.randrange(len(nums) - 1)
    nums[j] = str(-int(nums[j]))
    return lines[:k] + [" ".join(nums)] + lines[k + 1:]


def _drop_clause(lines: list[str], rng: random.Random) -> list[str]:
    k = rng.choice([i for i, x in enumerate(lines) if x[0] not in "cp"])
    head = [x for x in lines if x.startswith("p ")][0].split()
    out = [x for i, x in enumerate(lines) if i != k]
    return [f"p cnf {head[2]} {int(head[3]) - 1}" if x.startswith("p ") else x for x in out]


def _header(lines: list[str], rng: random.Random) -> list[str]:
    k = rng.choice([i for i, x in enumerate(lines) if x.startswith("c ")])
    return lines[:k] + [lines[k] + " x"] + lines[k + 1:]


def _proof_change(lines: list[str], rng: random.Random) -> list[str]:
    adds = [i for i, x in enumerate(lines) if x.split()[1] != "d"]
    k = rng.choice(adds)
    nums = lines[k].split()
    cut = nums.index("0")
    lemma, hints = nums[1:cut], nums[cut + 1:-1]
    kind = rng.randrange(4)
    if kind == 0 and hints:
        hints.pop(rng.randrange(len(hints)))
    elif kind == 1 and lemma:
        lemma.pop(rng.randrange(len(lemma)))
    elif kind == 2 and hints:
        hints[rng.randrange(len(hints))] = str(rng.randrange(1, int(nums[0])))
    else:
        return lines[:k] + lines[k + 1:]
    return lines[:k] + [" ".join([nums[0], *lemma, "0", *hints, "0"])] + lines[k + 1:]


def _rehash(ans: Answer) -> None:
    ans["dataset"]["sha256"] = dataset_from_json(ans["dataset"]["data"]).sha256()


TEXTS: dict[str, list[Any]] = {
    "qualifier": ["among 1-bit integer weights, proved minimal", "real weights, solvers' word",
                  "among 2-bit integer weights, LRAT-checked"],
    "claim": ["minimal", None], "claim_reason": [None, "every smaller shape was refuted"],
    "ties": ["margin"], "minimize": [None, "ff-width", "heads"]}


def mutate(base: Answer, all_sizes: list[dict[str, Any]], folder: Path,
           rng: random.Random) -> tuple[str, Answer]:
    """A mutated copy and the mutation's name."""
    ans = copy.deepcopy(base)
    bad, found = ans["sizes"]
    kind = rng.choice(["found-as-infeasible", "params", "shape", "bits", "label", "token",
                       "minimal", "proved-minimal", "swap-files", "weight", "kind",
                       "cnf-literal", "cnf-clause", "cnf-header", "proof", "proof",
                       "options", "text"])
    if kind == "found-as-infeasible":
        other = rng.choice([e for e in all_sizes if e["status"] == "infeasible"])
        found.update({k: other[k] for k in ("cnf", "proof", "cnf_sha256", "proof_sha256",
                                             "question", "proof_kind")}, status="infeasible")
        found.pop("certificate_data", None)
        ans.update(status="infeasible", minimal=None)
    elif kind == "params":
        rng.choice([bad, found])["params"] += rng.choice([-1, 1])
    elif kind == "shape":
        e = rng.choice([bad, found])
        knob = rng.choice(["layers", "heads", "d_model", "head_dim", "ff_width", "residual",
                           "readout"])
        sh = e["shape"]
        if knob == "residual":
            sh[knob] = not sh[knob]
        elif knob == "readout":
            sh[knob] = "scalar"
        else:
            sh[knob] = max(0, sh[knob] + rng.choice([-1, 1]))
    elif kind == "bits":
        ans["bits"] = 2
    elif kind == "text":  # the answer's words: each a claim recomputed by the checker
        field, values = rng.choice(list(TEXTS.items()))
        ans[field] = rng.choice([v for v in values if v != ans[field]])
    elif kind in ("label", "token"):
        data = ans["dataset"]["data"]
        i = rng.randrange(len(data["labels"]))
        if kind == "label":
            data["labels"][i] ^= 1
        else:
            j = rng.randrange(len(data["sequences"][i]))
            data["sequences"][i][j] = (data["sequences"][i][j] + 1) % data["vocab_size"]
        if rng.random() < 0.8:
            _rehash(ans)
    elif kind == "minimal":
        ans["minimal"] = {**ans["minimal"], "params": ans["minimal"]["params"] - 1}
    elif kind == "proved-minimal":
        ans["proved_minimal"] = True
    elif kind == "swap-files":
        other = rng.choice([e for e in all_sizes if e["status"] == "infeasible"
                            and e["shape"] != bad["shape"]])
        bad.update({k: other[k] for k in ("cnf", "proof", "cnf_sha256", "proof_sha256")})
    elif kind == "weight":
        layers = found["certificate_data"]["network"]["layers"]
        rows = rng.choice([la["table"] if "table" in la else la.get("weight")
                           for la in layers if "table" in la or "weight" in la])
        row = rng.choice(rows)
        j = rng.randrange(len(row))
        if rng.random() < 0.5:  # another grid value; the digest no longer matches
            row[j] = rng.choice([v for v in ("0", "-1") if v != row[j]])
        else:  # off the 1-bit grid, the digest recomputed as an attacker would
            row[j] = rng.choice(["1", "2", "1/2", "-2"])
            cert = found["certificate_data"]
            body = {k: v for k, v in cert.items() if k != "digest"}
            cert["digest"] = "sha256:" + hashlib.sha256(json.dumps(
                body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    elif kind == "kind":
        bad["proof_kind"] = rng.choice(["label-consistency", "z3", "drup"])
    elif kind == "options":
        q = bad["question"]
        key = rng.choice(["symmetry", "segments"])
        q[key] = not q[key]
    elif kind.startswith("cnf"):
        change = {"cnf-literal": _flip_literal, "cnf-clause": _drop_clause,
                  "cnf-header": _header}[kind]
        _file(folder, bad, "cnf", rng, change)
    else:
        _file(folder, bad, "proof", rng, _proof_change)
    return kind, ans


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutations", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ans = genuine_answer(folder, "--bits", "1", "--minimize", "params")
        (folder / "mut").mkdir()
        pieces = _pieces(ans, folder)
        for p in pieces:
            assert check_search(json.loads(json.dumps(p)), folder).verdict == "s VERIFIED"
        counts: Counter[tuple[str, str]] = Counter()
        false_accepts = []
        for k in range(args.mutations):
            base = rng.choice(pieces)
            kind, bad = mutate(base, ans["sizes"], folder, rng)
            while bad == base:  # a mutation that changed nothing (ff_width 0 - 1 -> 0)
                kind, bad = mutate(base, ans["sizes"], folder, rng)
            try:
                verdict = check_search(json.loads(json.dumps(bad)), folder).verdict
            except Exception as exc:  # noqa: BLE001 - a crash is a finding
                verdict = f"crash {type(exc).__name__}"
            if verdict == "s VERIFIED" and kind == "proof":
                e = bad["sizes"][0]
                if accepts((folder / e["cnf"]).read_text(), (folder / e["proof"]).read_text()):
                    verdict = "s VERIFIED (a valid proof still)"
            counts[(kind, verdict)] += 1
            if verdict == "s VERIFIED" or verdict.startswith("crash"):
                false_accepts.append(f"{k}: {kind} -> {verdict}")
    width = max(len(kind) for kind, _ in counts)
    for (kind, verdict), n in sorted(counts.items()):
        print(f"{kind:{width}s}  {verdict:34s} {n:6d}")
    print(f"mutations {args.mutations}, genuine pieces {len(pieces)}, "
          f"false accepts or crashes {len(false_accepts)}")
    for line in false_accepts[:20]:
        print("  " + line)
    return 1 if false_accepts else 0


if __name__ == "__main__":
    sys.exit(main())
