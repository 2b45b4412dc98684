"""Fuzzing the language-model checker: a crafted corpus and field mutations, every answer
judged by an evaluator outside the checker.

The corpus (``--corpus`` certificates, tests/lm_fuzzing.py ``crafted``): random small
decoders (pre- or post-LN, LayerNorm or RMSNorm, with or without a final norm, tied or not,
GELU tanh / erf or ReLU, vocabularies from 1, contexts from 1) each with one crafted
feature (a near tie planted in the head at 2^-20 to 2^-52, a zero query / key / value head,
a zero gain, an all-zero layer, a tensor scaled by 2^+-8 to 2^+-400, eps down to 2^-1000),
claiming every position, the provable ones, or code lengths within 2^-k of the true value
(above or below it); then the crafted attacks of the limits (tests/lm_crafted.py).  The
mutations (``--mutations``, tests/lm_fuzzing.py ``mutate``) edit one field of a genuine
certificate: header integers and choices, tensor values, scales and shapes, the dataset,
the claims, the digest, the JSON text.  A certificate the checker accepts is judged by
tests/lm_reference.py (mpmath at 400 bits, 1,600 where a margin is within 2^-340): a false
accept is a VERIFIED certificate with a claim that is not true there, or whose stated
counts differ.  Prints markdown tables; exit 1 on a false accept, a crash, or a file over
10 s.

    .venv/bin/python scripts/fuzz_lm_checker.py --mutations 10000 --corpus 240 --seed 1
"""

from __future__ import annotations

import argparse
import copy
import os
import resource
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from lm_crafted import (  # noqa: E402
    coded_certificate,
    next_token_dataset,
    redigest,
    scaled,
    small_spec,
    zero_bomb,
)
from lm_fuzzing import campaign, crafted, genuine, run_one, write  # noqa: E402
from lm_reference import judge  # noqa: E402

SLOW = 10.0
CATEGORIES = ("near tie", "zero query", "zero key", "zero value", "zero gain", "zero layer",
              "scale up", "scale down", "tiny eps", "plain")


def attacks(tmp: Path) -> list[tuple[str, Path, object]]:
    """The crafted attacks of the limits, as files."""
    spec = small_spec()
    base = coded_certificate(spec, next_token_dataset(spec, 3), 1000)
    out: list[tuple[str, Path, object]] = []

    def add(name: str, cert: object) -> None:
        out.append((name, write(tmp / f"a{len(out)}.json", cert), cert))  # type: ignore[arg-type]

    add("head x 2^40, code length 1000 bits", scaled(base, "head", 40))
    add("head x 2^1000, code length 1000 bits", scaled(base, "head", 1000))
    stale = scaled(base, "head", 40)
    stale["digest"] = base["digest"]
    add("head x 2^40, stale digest", stale)
    add("final gain x 2^60000", scaled(base, "lnf.weight", 60000))
    add("final gain x 2^1000 (F capped)", scaled(base, "lnf.weight", 1000))
    for claim in ("9" * 20000, "1/" + "9" * 20000):
        c = copy.deepcopy(base)
        c["claims"]["code_length_bits"] = [claim] * 3
        add(f"code length {claim[:4]}... ({len(claim)} chars)", redigest(c))
    c = copy.deepcopy(base)
    c["model"]["tensors"]["wpe"]["shape"] = [True, 4] if spec.context == 1 else \
        [spec.context, True]
    add("shape with a boolean", redigest(c))
    c = copy.deepcopy(base)
    c["model"].update(d_model=1 << 16, d_ff=1 << 16, heads=1, layers=1 << 16)
    add("shapes beyond MAX_WORK", redigest(c))
    row = [k % 2 for k in range(7)]
    rep = small_spec(v=2)
    add("one alternating sequence repeated 1,000 times",
        coded_certificate(rep, next_token_dataset(rep, 0, sequences=[row] * 1000), 10 ** 6))
    path = zero_bomb(tmp / "bomb.json.gz")
    out.append(("gzip: 25 KB inflating to a zero d = 1,024 model, 20,000 sequences", path,
                None))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutations", type=int, default=10000)
    ap.add_argument("--corpus", type=int, default=240)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    start, cpu = time.perf_counter(), time.process_time()
    bad: list[str] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        print(f"# scripts/fuzz_lm_checker.py --mutations {args.mutations} --corpus "
              f"{args.corpus} --seed {args.seed}\n")
        corpus = crafted(args.corpus, args.seed)
        kinds: dict[str, Counter[str]] = defaultdict(Counter)
        slowest = (0.0, "")
        for k, (name, cert) in enumerate(corpus):
            row = run_one(write(tmp / f"c{k % 4}.json", cert), cert)
            kind = next(c for c in CATEGORIES if name.startswith(c))
            kind += " (code lengths)" if "code length" in name else ""
            kinds[kind][row["verdict"]] += 1
            kinds[kind]["false"] += row["false"]
            kinds[kind]["untrue"] += not judge(cert)[0]  # the reference on every file
            if row["seconds"] > slowest[0]:
                slowest = (row["seconds"], name)
            if row["false"] or row["verdict"] == "crash" or row["seconds"] > SLOW:
                bad.append(f"corpus {name}: {row}")
        print("| crafted model | files | verified | rejected | unusable | untrue by the "
              "reference | false accepts |")
        print("|---|---|---|---|---|---|---|")
        total: Counter[str] = Counter()
        for kind in sorted(kinds):
            c = kinds[kind]
            total.update(c)
            files = sum(v for key, v in c.items() if key.startswith("s ") or key == "crash")
            print(f"| {kind} | {files} | {c['s VERIFIED']} | {c['s REJECTED']} | "
                  f"{c['s UNUSABLE']} | {c['untrue']} | {c['false']} |")
        print(f"| all | {len(corpus)} | {total['s VERIFIED']} | {total['s REJECTED']} | "
              f"{total['s UNUSABLE']} | {total['untrue']} | {total['false']} |\n")
        print(f"corpus: {len(corpus)} certificates, slowest answer {slowest[0]:.3f} s "
              f"({slowest[1]})\n")
        print("| crafted attack | verdict | seconds |")
        print("|---|---|---|")
        for name, path, cert in attacks(tmp):
            row = run_one(path, cert if cert is not None else "")
            print(f"| {name} | {row['verdict']} | {row['seconds']:.3f} |")
            if row["false"] or row["verdict"] == "crash" or row["seconds"] > SLOW:
                bad.append(f"attack {name}: {row}")
        print()
        bases = genuine()
        rows = campaign(args.mutations, args.seed, tmp, bases,
                        lambda line: print(f"FAIL {line}", file=sys.stderr))
        table: dict[str, Counter[str]] = defaultdict(Counter)
        for r in rows:
            table[r["base"]][r["verdict"]] += 1
            table[r["base"]]["false"] += r["false"]
            if r["false"] or r["verdict"] == "crash" or r["seconds"] > SLOW:
                bad.append(f"mutation {r['base']}: {r['what']}: {r}")
        print("| genuine base | tried | accepted | rejected | unusable | crashes | "
              "false accepts |")
        print("|---|---|---|---|---|---|---|")
        total = Counter()
        for base in sorted(table):
            c = table[base]
            total.update(c)
            tried = sum(v for key, v in c.items() if key != "false")
            print(f"| {base} | {tried} | {c['s VERIFIED']} | {c['s REJECTED']} | "
                  f"{c['s UNUSABLE']} | {c['crash']} | {c['false']} |")
        print(f"| all | {len(rows)} | {total['s VERIFIED']} | {total['s REJECTED']} | "
              f"{total['s UNUSABLE']} | {total['crash']} | {total['false']} |\n")
        worst = max(rows, key=lambda r: r["seconds"]) if rows else None
        if worst is not None:
            print(f"mutations: {len(rows)}, slowest answer {worst['seconds']:.3f} s "
                  f"({worst['base']}: {worst['what']})")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"wall {time.perf_counter() - start:.0f} s, CPU {time.process_time() - cpu:.0f} s, "
          f"peak memory {rss:.0f} MB, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"false accepts, crashes or answers over {SLOW:.0f} s: {len(bad)}")
    for line in bad[:20]:
        print(f"  {line[:300]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
