"""Mutation fuzzer for the trusted checker.

Mutates genuine certificates of all six constructions (numbers in canonical and
non-canonical forms, keys, structure, hints, dataset, claims, sizes, duplicate keys),
re-digests them (and mostly re-hashes the dataset), and runs the checker on the file text.
Also mutates genuine certificates that claim float-exactness (``float:*``, tests/
fuzzing_float.py): subnormal, edge-of-range and non-float weights and inputs, maps rescaled
by powers of two (the exact function unchanged), claims of other formats; the exact claims
are mostly recomputed so that only the float claim can be false.  Every mutation the checker
accepts must be a true, well-formed certificate according to the independent reference in
tests/fuzzing.py (the producer's decoder, evaluation and encoder) and, for a float claim,
tests/fuzzing_float.py (normal floats of the format, and the producer's correctly rounded
float evaluation, with and without subnormals and in two summation orders, equal to the exact
outputs).  Also times every crafted attack.  Prints a table; exit 1 if a false certificate
was accepted or an answer was not a verdict.

    .venv/bin/python scripts/fuzz_checker.py --mutations 10000 --seed 1
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzzing import SETTINGS, crafted, genuine, mutate, write  # noqa: E402
from fuzzing_float import (  # noqa: E402
    FLOAT_SETTINGS,
    crafted_float,
    float_genuine,
    float_mutate,
    float_reference_accepts,
)

from exactmem import progress  # noqa: E402
from exactmem.checker import check_file  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutations", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    certs = {name: genuine(name) for name in SETTINGS}
    certs.update({name: float_genuine(name) for name in FLOAT_SETTINGS})
    counts: Counter[tuple[str, str]] = Counter()
    float_claims_verified = 0
    start = time.perf_counter()
    false_accepts: list[str] = []
    slowest = (0.0, "")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        names = sorted(certs)
        with progress.task("fuzz", total=args.mutations, unit="mutations") as bar:
            for k in range(args.mutations):
                name = names[k % len(names)]
                fuzz = float_mutate if name in FLOAT_SETTINGS and rng.random() < 0.7 else mutate
                desc, content = fuzz(certs[name], rng)
                path = write(tmp, "m.json", content)
                t0 = time.perf_counter()
                report = check_file(path)
                dt = time.perf_counter() - t0
                if dt > slowest[0]:
                    slowest = (dt, f"{name}: {desc}")
                verdict = {0: "accepted", 1: "rejected", 2: "unusable"}[report.exit_code]
                counts[(name, verdict)] += 1
                if report.verified:
                    ok, why = (False, "raw text") if isinstance(content, str) else \
                        float_reference_accepts(content)
                    float_claims_verified += "float claim" in why
                    if not ok:
                        false_accepts.append(f"{name}: {desc}: {why}")
                bar.update()
        elapsed = time.perf_counter() - start
        attacks = []
        for label, path, code in crafted(certs, tmp) + crafted_float(tmp):
            t0 = time.perf_counter()
            report = check_file(path)
            attacks.append((label, report.exit_code, code, time.perf_counter() - t0))
    print("| construction | tried | accepted | rejected | unusable |")
    print("|---|---|---|---|---|")
    for name in names:
        row = [counts[(name, v)] for v in ("accepted", "rejected", "unusable")]
        print(f"| {name} | {sum(row)} | {row[0]} | {row[1]} | {row[2]} |")
    total = [sum(counts[(n, v)] for n in names) for v in ("accepted", "rejected", "unusable")]
    print(f"| all | {sum(total)} | {total[0]} | {total[1]} | {total[2]} |")
    print(f"{args.mutations} mutations, seed {args.seed}: {elapsed:.0f} s")
    print(f"accepted with a float-exact claim (each confirmed by the float oracle): "
          f"{float_claims_verified}")
    print(f"false certificates accepted: {len(false_accepts)}")
    for line in false_accepts[:20]:
        print("  " + line)
    print(f"slowest answer: {slowest[0]:.3f} s ({slowest[1]})")
    print("\n| crafted attack | exit | expected | seconds |")
    print("|---|---|---|---|")
    for label, got, want, dt in attacks:
        print(f"| {label} | {got} | {want} | {dt:.3f} |")
    bad_attacks = [a for a in attacks if a[1] != a[2]]
    return 1 if false_accepts or bad_attacks else 0


if __name__ == "__main__":
    sys.exit(main())
