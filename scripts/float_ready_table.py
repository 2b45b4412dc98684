#!/usr/bin/env python3
"""Float-ready memorizers: label bits per parameter over N, against the baselines.

Certifies random next-token datasets (n = 16, vocab 64, 8 classes) with
``kajitsuka2025-next-token --max-bits P`` for ``N = 2^a .. 2^b`` and each ``P`` given, and,
for comparison, ``lookup --max-bits 24`` and the unbounded ``kajitsuka2025-next-token`` up to
smaller N.  Every row is certified (exact evaluation, the independent checker, the
float-exact claim for the narrowest IEEE format with P significand bits).  Writes
``docs/results/float_ready.csv`` (rewritten as each row finishes; a re-measured row replaces
the earlier one of the same construction, P and N) and the plot
``docs/results/float_ready.png``: label bits per nonzero and per dense parameter against N,
the latter with the 3.6 bits/parameter of trained GPT models (Morris et al. 2025, who count
every dense parameter).

The bit columns are :func:`exactmem.constructions.bounds.bit_figures`, the function behind
``exactmem info``: label bits per nonzero parameter, per dense parameter and per stored bit
of the exported file (dense parameters x bits of ``stored_dtype``, the narrowest float-exact
format claimed, else float64).

    .venv/bin/python scripts/float_ready_table.py                      # 2^8 .. 2^16, P = 24, 53
    .venv/bin/python scripts/float_ready_table.py --max-exp 12 --bits 24 --lookup-max-exp 0
    .venv/bin/python scripts/float_ready_table.py --refresh            # new columns, no certify
    .venv/bin/python scripts/float_ready_table.py --plot-only

``--refresh`` rebuilds the network of every row already in the CSV (the build is
deterministic in the seeds; seconds even at N = 2^16), checks that its recorded sizes are
reproduced, and recomputes the bit columns; the certification columns (``certify_s``,
``verified``, ``load_1min``) stay those of the row's certified run, and ``figures_from``
says ``rebuild``.

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
from exactmem.constructions import get
from exactmem.constructions.bounds import bit_figures
from exactmem.datasets.draw import generate
from exactmem.errors import ExactmemError
from exactmem.model.dataset import Dataset
from exactmem.model.sizes import sizes
from exactmem.model.spec import NetworkSpec
from exactmem.pipeline import certify

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ["construction", "P", "N", "n", "classes", "seed", "params_nonzero", "params_dense",
          "depth", "width", "max_bits", "weight_bits_total", "label_bits",
          "label_bits_per_nonzero", "label_bits_per_dense", "stored_dtype",
          "label_bits_per_stored_bit", "float_exact", "block_words", "blocks", "table_slots",
          "certify_s", "verified", "load_1min", "figures_from"]
TRAINED = 3.6  # label bits per dense parameter of trained GPT models (Morris et al. 2025)


def dataset(N: int, n: int, classes: int, seed: int) -> Dataset:  # noqa: N803
    return generate("next-token", N=N, n=n, vocab=64, classes=classes, seed=seed)


def options(P: int, seed: int) -> dict[str, Any]:  # noqa: N803
    return {"seed": seed, **({"max_bits": P} if P else {})}


def figure_columns(spec: NetworkSpec, ds: Dataset, float_exact: list[str]) -> dict[str, Any]:
    """The size and bit columns of a row: :func:`sizes` and :func:`bit_figures`, as ``info``."""
    sz, bits = sizes(spec), bit_figures(spec, ds, float_exact)
    return {"params_nonzero": sz.params_nonzero, "params_dense": sz.params_dense,
            "depth": sz.depth, "width": sz.width, "max_bits": sz.max_bits,
            "weight_bits_total": bits["weight_bits_total"], "label_bits": bits["label_bits"],
            **{k: bits[k] for k in ("label_bits_per_nonzero", "label_bits_per_dense",
                                    "stored_dtype", "label_bits_per_stored_bit")},
            "float_exact": " ".join(float_exact)}


def measure(construction: str, P: int, N: int, n: int, classes: int,  # noqa: N803
            seed: int) -> dict[str, Any]:
    ds = dataset(N, n, classes, seed)
    clock = time.perf_counter()
    out = certify(ds, construction, options(P, seed))
    secs = time.perf_counter() - clock
    spec = spec_from_certificate(out.certificate)
    params = out.certificate["construction"]["params"]
    return {"construction": construction, "P": P or "", "N": N, "n": n, "classes": classes,
            "seed": seed,
            **figure_columns(spec, ds, list(out.certificate["claims"].get("float_exact", []))),
            "block_words": params.get("block_words", ""), "blocks": params.get("blocks", ""),
            "table_slots": params.get("table_slots", ""), "certify_s": round(secs, 2),
            "verified": out.report.verified, "load_1min": round(os.getloadavg()[0], 2),
            "figures_from": "certify"}


def refresh(row: dict[str, str], seed: int) -> dict[str, Any]:
    """``row`` with its bit columns recomputed from a rebuild (module docstring)."""
    P, N = int(row["P"] or 0), int(row["N"])  # noqa: N806
    n, classes = int(row["n"]), int(row["classes"])
    seed = int(row.get("seed") or seed)
    ds = dataset(N, n, classes, seed)
    spec = get(row["construction"]).build(ds, options(P, seed)).spec
    cols = figure_columns(spec, ds, row["float_exact"].split())
    for key in ("params_nonzero", "params_dense", "depth", "width", "max_bits"):
        if str(cols[key]) != row[key]:
            raise ExactmemError(f"{row['construction']} P={P} N={N}: the rebuild gives "
                                f"{key} = {cols[key]}, the CSV {row[key]}")
    return {**{k: row.get(k, "") for k in FIELDS}, **cols, "seed": seed,
            "figures_from": "rebuild"}


def plot(rows: list[dict[str, str]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 2, figsize=(12, 6))
    panels = (("label_bits_per_nonzero", "params_nonzero", "label bits per nonzero parameter"),
              ("label_bits_per_dense", "params_dense",
               "label bits per dense parameter (zeros included)"))
    for ax, (column, count, label) in zip(axes, panels, strict=True):
        series: dict[str, list[tuple[int, float]]] = {}
        for r in rows:
            if r["verified"] != "True":
                continue
            name = r["construction"] + (f" --max-bits {r['P']}" if r["P"] else " (unbounded)")
            series.setdefault(name, []).append((int(r["N"]), float(r[column])))
        for i, (name, pts) in enumerate(sorted(series.items())):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name,
                    color=f"C{i + 1}")
        ref = ROOT / "docs" / "results" / "scaling_next-token.csv"
        if ref.exists():  # the unbounded construction at larger N, measured with 2 classes
            with ref.open() as fh:
                pts = sorted((int(r["N"]), int(r["N"]) / int(r[count]))
                             for r in csv.DictReader(fh) if r["verified"] == "True")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=":", color="C0",
                    label="kajitsuka2025-next-token (unbounded), 2 classes "
                          "(scaling_next-token.csv)")
        if column == "label_bits_per_dense":
            ax.axhline(TRAINED, color="grey", linestyle="--",
                       label=f"{TRAINED} bits per dense parameter (trained GPT, Morris et al.)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
        ax.set_xlabel("N (next-token sequences, n = 16, vocab 64, 8 classes)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("Certified memorizers: label bits per parameter, two readings")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown(rows: list[dict[str, str]]) -> str:
    """The rows as a markdown table, one per (construction, P, N)."""
    cols = ["construction", "P", "N", "params_nonzero", "params_dense", "max_bits",
            "label_bits_per_nonzero", "label_bits_per_dense", "stored_dtype",
            "label_bits_per_stored_bit", "float_exact", "block_words", "blocks", "certify_s",
            "load_1min", "figures_from"]
    last = {_key(r): r for r in rows}
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for key in sorted(last, key=lambda k: (k[0] != "kajitsuka2025-next-token" or not k[1],
                                           k[0], k[1], int(k[2]))):
        lines.append("| " + " | ".join(str(last[key].get(c, "")) or "-" for c in cols) + " |")
    return "\n".join(lines)


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["construction"], str(row["P"]), str(row["N"])


def _write(rows: list[dict[str, Any]], out: Path) -> None:
    tmp = out.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, out)


def _put(rows: list[dict[str, Any]], row: dict[str, Any]) -> None:
    """Replace the row of the same construction, P and N, or append."""
    for i, old in enumerate(rows):
        if _key(old) == _key(row):
            rows[i] = row
            return
    rows.append(row)


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
    ap.add_argument("--seed", type=int, default=1, help="data and construction seed")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "float_ready.csv"))
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--refresh", action="store_true",
                    help="recompute the size and bit columns of the CSV's rows from rebuilds "
                         "(no certification; see the module docstring)")
    ap.add_argument("--markdown", action="store_true",
                    help="also print the CSV as a markdown table (one row per item)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    progress.configure(quiet=args.quiet)
    rows: list[dict[str, Any]] = []
    if out.exists():
        with out.open() as fh:
            rows = list(csv.DictReader(fh))
    if args.refresh:
        for i, row in enumerate(rows):
            try:
                rows[i] = refresh(row, args.seed)
            except ExactmemError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            _write(rows, out)
            if not args.quiet:
                print(f"[{i + 1}/{len(rows)}] refreshed {row['construction']} "
                      f"P={row['P'] or 'unbounded'} N={row['N']}", file=sys.stderr, flush=True)
    elif not args.plot_only:
        jobs: list[tuple[str, int, int]] = []
        for e in range(args.min_exp, args.max_exp + 1):
            jobs += [("kajitsuka2025-next-token", P, 1 << e) for P in args.bits]
            if e <= args.lookup_max_exp:
                jobs.append(("lookup", 24, 1 << e))
            if e <= args.unbounded_max_exp:
                jobs.append(("kajitsuka2025-next-token", 0, 1 << e))
        for i, (con, P, N) in enumerate(jobs):  # noqa: N806
            if not args.quiet:
                print(f"[{i + 1}/{len(jobs)}] {con} P={P or 'unbounded'} N={N}",
                      file=sys.stderr, flush=True)
            try:
                row = measure(con, P, N, args.n, args.classes, args.seed)
            except ExactmemError as exc:
                print(f"{con} P={P or 'unbounded'} N={N}: not built: {exc}", flush=True)
                continue
            _put(rows, row)
            _write(rows, out)
            print(", ".join(f"{k}={row[k]}" for k in (
                "construction", "P", "N", "params_nonzero", "params_dense", "max_bits",
                "label_bits_per_nonzero", "label_bits_per_dense", "label_bits_per_stored_bit",
                "float_exact", "certify_s", "verified", "load_1min")), flush=True)
    rows = [{k: str(v) for k, v in r.items()} for r in rows]
    plot(rows, out.with_suffix(".png"))
    best = [r for r in rows if r["P"] == "24" and r["construction"].startswith("kajitsuka")]
    if best:
        top = max(best, key=lambda r: int(r["N"]))
        print(f"P = 24 at N = {top['N']}: label bits per nonzero parameter "
              f"{top['label_bits_per_nonzero']}, per dense {top['label_bits_per_dense']}, per "
              f"stored {top['stored_dtype']} bit {top['label_bits_per_stored_bit']} "
              f"({top['params_nonzero']} nonzero, {top['params_dense']} dense)")
    if args.markdown:
        print(markdown(rows))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
