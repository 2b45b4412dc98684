#!/usr/bin/env python3
"""Float-ready memorizers: label bits per parameter over N, against the baselines.

Certifies random next-token datasets (n = 16, vocab 64, 8 classes) with
``kajitsuka2025-next-token --max-bits P`` for ``N = 2^a .. 2^b`` and each ``P`` given, and,
for comparison, ``lookup --max-bits 24`` and the unbounded ``kajitsuka2025-next-token`` up to
smaller N.  Every row is certified (exact evaluation, the independent checker, the
float-exact claim for the narrowest IEEE format with P significand bits).  Writes
``docs/results/float_ready.csv`` (rows appended as they finish) and the plot
``docs/results/float_ready.png``: label bits per nonzero parameter against N, with the
3.6 bits/parameter line of trained GPT models (Morris et al. 2025).

    .venv/bin/python scripts/float_ready_table.py                      # 2^8 .. 2^16, P = 24, 53
    .venv/bin/python scripts/float_ready_table.py --max-exp 12 --bits 24 --lookup-max-exp 0
    .venv/bin/python scripts/float_ready_table.py --plot-only

Timings are wall seconds of this machine under whatever load it has; the CSV records the
1-minute load average next to each row.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path
from typing import Any

from exactmem import progress
from exactmem.certificate import spec_from_certificate
from exactmem.constructions.bounds import bit_figures
from exactmem.errors import ExactmemError
from exactmem.model.generate import generate
from exactmem.model.sizes import sizes
from exactmem.pipeline import certify

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ["construction", "P", "N", "n", "classes", "params_nonzero", "params_dense", "depth",
          "width", "max_bits", "label_bits", "label_bits_per_param",
          "label_bits_per_stored_bit", "float_exact", "block_words", "blocks", "table_slots",
          "certify_s", "verified", "load_1min"]


def measure(construction: str, P: int, N: int, n: int, classes: int,  # noqa: N803
            seed: int) -> dict[str, Any]:
    ds = generate("next-token", N=N, n=n, vocab=64, classes=classes, seed=seed)
    opts: dict[str, Any] = {"seed": seed}
    if P:
        opts["max_bits"] = P
    clock = time.perf_counter()
    out = certify(ds, construction, opts)
    secs = time.perf_counter() - clock
    spec = spec_from_certificate(out.certificate)
    sz, bits = sizes(spec), bit_figures(spec, ds)
    params = out.certificate["construction"]["params"]
    return {"construction": construction, "P": P or "", "N": N, "n": n, "classes": classes,
            "params_nonzero": sz.params_nonzero, "params_dense": sz.params_dense,
            "depth": sz.depth, "width": sz.width, "max_bits": sz.max_bits,
            "label_bits": bits["label_bits"], "label_bits_per_param": bits["label_bits_per_param"],
            "label_bits_per_stored_bit": round(bits["label_bits_per_param"] / P, 6) if P else "",
            "float_exact": " ".join(out.certificate["claims"].get("float_exact", [])),
            "block_words": params.get("block_words", ""), "blocks": params.get("blocks", ""),
            "table_slots": params.get("table_slots", ""), "certify_s": round(secs, 2),
            "verified": out.report.verified, "load_1min": round(os.getloadavg()[0], 2)}


def plot(rows: list[dict[str, str]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r["verified"] != "True":
            continue
        name = r["construction"] + (f" --max-bits {r['P']}" if r["P"] else " (unbounded)")
        series.setdefault(name, []).append((int(r["N"]), float(r["label_bits_per_param"])))
    for name, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ref = ROOT / "docs" / "results" / "scaling_next-token.csv"
    if ref.exists():  # the unbounded construction at larger N, measured with 2 classes
        with ref.open() as fh:
            pts = sorted((int(r["N"]), int(r["N"]) / int(r["params_nonzero"]))
                         for r in csv.DictReader(fh) if r["verified"] == "True")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=":", color="C0",
                label="kajitsuka2025-next-token (unbounded), 2 classes (scaling_next-token.csv)")
    ax.axhline(3.6, color="grey", linestyle="--",
               label="3.6 bits/param (trained GPT, Morris et al.)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("N (next-token sequences, n = 16, vocab 64, 8 classes)")
    ax.set_ylabel("label bits per nonzero parameter")
    ax.set_title("Certified memorizers: label bits per parameter")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown(rows: list[dict[str, str]]) -> str:
    """The rows as a markdown table, the last measurement of each (construction, P, N)."""
    last = {(r["construction"], r["P"], int(r["N"])): r for r in rows}
    cols = ["construction", "P", "N", "params_nonzero", "max_bits", "label_bits_per_param",
            "label_bits_per_stored_bit", "float_exact", "block_words", "blocks", "certify_s",
            "load_1min"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for key in sorted(last, key=lambda k: (k[0] != "kajitsuka2025-next-token" or not k[1],
                                           k[0], k[1], k[2])):
        lines.append("| " + " | ".join(last[key][c] or "-" for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-exp", type=int, default=8)
    ap.add_argument("--max-exp", type=int, default=16)
    ap.add_argument("--bits", type=int, nargs="+", default=[24, 53])
    ap.add_argument("--lookup-max-exp", type=int, default=10,
                    help="lookup --max-bits 24 up to 2^this (its bank is dense M x 2M; 0: none)")
    ap.add_argument("--unbounded-max-exp", type=int, default=12,
                    help="the unbounded construction up to 2^this (0: none)")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "float_ready.csv"))
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--markdown", action="store_true",
                    help="also print the CSV as a markdown table (last row per item)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    progress.configure(quiet=args.quiet)
    if not args.plot_only:
        jobs: list[tuple[str, int, int]] = []
        for e in range(args.min_exp, args.max_exp + 1):
            jobs += [("kajitsuka2025-next-token", P, 1 << e) for P in args.bits]
            if e <= args.lookup_max_exp:
                jobs.append(("lookup", 24, 1 << e))
            if e <= args.unbounded_max_exp:
                jobs.append(("kajitsuka2025-next-token", 0, 1 << e))
        new = not out.exists()
        with out.open("a", newline="") as fh:
            w = csv.DictWriter(fh, FIELDS)
            if new:
                w.writeheader()
            for i, (con, P, N) in enumerate(jobs):  # noqa: N806
                if not args.quiet:
                    print(f"[{i + 1}/{len(jobs)}] {con} P={P or 'unbounded'} N={N}",
                          file=sys.stderr, flush=True)
                try:
                    row = measure(con, P, N, args.n, args.classes, args.seed)
                except ExactmemError as exc:
                    print(f"{con} P={P or 'unbounded'} N={N}: not built: {exc}", flush=True)
                    continue
                w.writerow(row)
                fh.flush()
                print(", ".join(f"{k}={row[k]}" for k in ("construction", "P", "N",
                      "params_nonzero", "max_bits", "label_bits_per_param", "float_exact",
                      "certify_s", "verified", "load_1min")), flush=True)
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    plot(rows, out.with_suffix(".png"))
    best = [r for r in rows if r["P"] == "24" and r["construction"].startswith("kajitsuka")]
    if best:
        top = max(best, key=lambda r: int(r["N"]))
        print(f"P = 24 at N = {top['N']}: {top['label_bits_per_param']} label bits per nonzero "
              f"parameter ({top['params_nonzero']} nonzero, float-exact {top['float_exact']})")
    if args.markdown:
        print(markdown(rows))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
