"""Certified memorization capacity of the softmax-attention constructions, by certificate.

Usage: ``python scripts/capacity_heads.py [--quick] [--out docs/results]``

Writes three tables (and PNG plots) to ``--out``:

* ``capacity_mahdavi.csv``: for each (H, d_h, n, d, context), whether ``mahdavi2024-mha``
  certifies the theorem's count ``H (min(n, d_h) - 1) + 1`` on random data (several seeds),
  and the largest ``T`` certified on every seed when ``T`` is increased one at a time;
* ``capacity_dana.csv``: the same for ``dana2024-aot`` against ``H d_h + d``;
* ``capacity_dana_exp1.csv``: Dana et al.'s experiment 1 setting (bigrams over N = 50
  tokens, d = d_h = 10, H = 1..31): the network built for ``H d_h + d`` of the 2500
  associations, evaluated rigorously on all 2500; certified accuracy next to their trained
  accuracies and their Corollary 2 bound.

Every "certified" below means: the interval forward pass proved the label (argmax, or
within epsilon) for every sequence; no float is involved.  Floats appear only in the plots.
Progress (per setting, and per layer and sequence of the rigorous evaluation) goes to
stderr; ``--quiet`` turns it off.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import time
from pathlib import Path
from typing import Any

from exactmem import progress
from exactmem.constructions import get
from exactmem.datasets.draw_attention import generate_for
from exactmem.errors import ExactmemError
from exactmem.model.dataset import Dataset
from exactmem.model.interval_verdict import certify_interval

SEEDS = (0, 1, 2)
# Dana et al. (AISTATS 2025), experiment 1 (N = 50, d = d_h = 10): trained accuracy vs H
DANA_EXP1 = {1: 0.130, 6: 0.324, 11: 0.506, 16: 0.685, 21: 0.861, 26: 0.963, 31: 0.997}


def _try(name: str, ds: Dataset, opts: dict[str, Any]) -> tuple[bool, str]:
    con = get(name)
    try:
        con.build(ds, {**con.defaults(), **opts})
        return True, ""
    except ExactmemError as exc:
        return False, str(exc).split(";")[0][:90]


def mahdavi_rows(quick: bool) -> list[dict[str, Any]]:
    settings = [(1, 2, 3, 5), (2, 2, 3, 5), (3, 2, 3, 5), (4, 2, 3, 5),
                (2, 1, 3, 5), (2, 3, 3, 5), (3, 3, 3, 5), (2, 4, 4, 6)]
    if quick:
        settings = settings[:3]
    rows = []
    bar = progress.task("mahdavi settings", total=2 * len(settings), unit="setting",
                        heartbeat=True)
    for context in ("shared", "random"):
        for H, dh, n, d in settings:
            bar.update(0, description=f"mahdavi H = {H}, d_h = {dh}, n = {n}, d = {d}, "
                                      f"{context} context")
            start = time.perf_counter()
            formula = H * (min(n, dh) - 1) + 1
            ceiling = H * (n - 1) + 1 if context == "shared" else H * d

            def ok_all(T: int, H: int = H, dh: int = dh, n: int = n, d: int = d,
                       context: str = context) -> tuple[bool, str]:
                for s in SEEDS:
                    ds = generate_for("mahdavi2024-mha", seed=s, heads=H, head_dim=dh, n=n,
                                      dim=d, N=T, classes=1000,
                                      shared_context=context == "shared")
                    good, why = _try("mahdavi2024-mha", ds, {"heads": H, "head_dim": dh,
                                                             "seed": s})
                    if not good:
                        return False, f"seed {s}: {why}"
                return True, ""

            at_formula, why = ok_all(formula)
            largest, reason = (formula if at_formula else 0), why
            if at_formula:
                T = formula + 1
                while T <= H * d + 1:
                    good, why = ok_all(T)
                    if not good:
                        reason = f"T = {T} fails ({why})"
                        break
                    largest, T = T, T + 1
            row = {"H": H, "d_h": dh, "n": n, "d": d, "context": context,
                   "formula": formula, "certified_at_formula": at_formula,
                   "largest_certified_T": largest, "feature_ceiling": ceiling,
                   "first_failure": reason, "seconds": round(time.perf_counter() - start, 1)}
            print(f"mahdavi {row}", flush=True)
            rows.append(row)
            bar.update()
    bar.close()
    return rows


def dana_rows(quick: bool) -> list[dict[str, Any]]:
    settings = [(1, 2, 2), (2, 2, 2), (3, 2, 2), (4, 2, 2), (6, 2, 2), (2, 3, 3), (3, 3, 3),
                (4, 4, 4)]
    if quick:
        settings = settings[:3]
    rows = []
    bar = progress.task("dana settings", total=len(settings), unit="setting", heartbeat=True)
    for H, dh, d in settings:
        bar.update(0, description=f"dana H = {H}, d_h = {dh}, d = {d}")
        start = time.perf_counter()
        formula = H * dh + d
        results = []
        for s in SEEDS:
            ds = generate_for("dana2024-aot", seed=s, heads=H, head_dim=dh, dim=d)
            results.append(_try("dana2024-aot", ds, {"heads": H, "head_dim": dh, "dim": d,
                                                     "seed": s})[0])
        ds = generate_for("dana2024-aot", seed=0, heads=H, head_dim=dh, dim=d, N=formula + 1)
        over, why = _try("dana2024-aot", ds, {"heads": H, "head_dim": dh, "dim": d})
        row = {"H": H, "d_h": dh, "d": d, "formula": formula,
               "certified_seeds": f"{sum(results)}/{len(results)}",
               "largest_certified_T": formula if all(results) else "-",
               "formula_plus_one": "certified" if over else why,
               "seconds": round(time.perf_counter() - start, 1)}
        print(f"dana {row}", flush=True)
        rows.append(row)
        bar.update()
    bar.close()
    return rows


def dana_exp1_rows(quick: bool) -> list[dict[str, Any]]:
    N, d = 50, 10
    rng = random.Random(0)
    pairs = [(a, b) for a in range(N) for b in range(N)]
    nxt = {p: rng.randrange(N) for p in pairs}
    full = Dataset("next-token", "token-ids", tuple(pairs), tuple(nxt[p] for p in pairs),
                   vocab_size=N)
    order = [p for p in pairs if p[0] != p[1]]
    rng.shuffle(order)
    rows = []
    for H in progress.track((1, 6) if quick else sorted(DANA_EXP1), "dana exp1 heads",
                            unit="setting"):
        start = time.perf_counter()
        T = H * d + d
        sub = order[:T]
        ds = Dataset("next-token", "token-ids", tuple(sub), tuple(nxt[p] for p in sub),
                     vocab_size=N)
        con = get("dana2024-aot")
        with progress.stage(f"dana exp1 H = {H}: build"):
            result = con.build(ds, {**con.defaults(), "heads": H, "head_dim": d, "dim": d})
        built = time.perf_counter() - start
        hint = result.hints["softmax"]
        tick, close = progress.hook(f"dana exp1 H = {H}: evaluate", heartbeat=True)
        try:
            out = certify_interval(result.spec, full, None, (int(hint["precision"]),),
                                   progress=tick)
        finally:
            close()
        certified = sum(1 for row in out.evaluation.predictions if row[0] is not None)
        bound = 1 / N + (1 - 1 / N) * T / (N * N)
        row = {"H": H, "d": d, "d_h": d, "T_built": T, "certified_on_2500": certified,
               "certified_accuracy": round(certified / (N * N), 4),
               "corollary2_bound": round(bound, 4), "trained_accuracy": DANA_EXP1[H],
               "build_seconds": round(built, 1),
               "eval_seconds": round(time.perf_counter() - start - built, 1)}
        print(f"dana-exp1 {row}", flush=True)
        rows.append(row)
    return rows


def write(rows: list[dict[str, Any]], path: Path) -> None:
    if not rows:
        return
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}", flush=True)


def plots(out: Path, mahdavi: list[dict[str, Any]], dana: list[dict[str, Any]],
          exp1: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for context, marker in (("shared", "o"), ("random", "s")):
        sel = [r for r in mahdavi if r["context"] == context and r["d_h"] == 2 and r["n"] == 3]
        ax[0].plot([r["H"] for r in sel], [r["largest_certified_T"] for r in sel], marker,
                   label=f"certified, {context} context")
    sel = [r for r in mahdavi if r["context"] == "shared" and r["d_h"] == 2 and r["n"] == 3]
    ax[0].plot([r["H"] for r in sel], [r["formula"] for r in sel], "k--",
               label="H(min(n,d_h)-1)+1")
    ax[0].set(xlabel="heads H", ylabel="examples T", title="mahdavi2024-mha (n=3, d=5, d_h=2)")
    ax[0].legend()
    sel = [r for r in dana if r["d"] == 2 and r["d_h"] == 2]
    ax[1].plot([r["H"] for r in sel], [r["largest_certified_T"] for r in sel], "o",
               label="certified")
    ax[1].plot([r["H"] for r in sel], [r["formula"] for r in sel], "k--", label="H d_h + d")
    ax[1].set(xlabel="heads H", ylabel="associations T", title="dana2024-aot (d = d_h = 2)")
    ax[1].legend()
    if exp1:
        hs = [r["H"] for r in exp1]
        ax[2].plot(hs, [r["trained_accuracy"] for r in exp1], "o-", label="trained (Dana et al.)")
        ax[2].plot(hs, [r["certified_accuracy"] for r in exp1], "s-", label="certified (exact)")
        ax[2].plot(hs, [r["corollary2_bound"] for r in exp1], "k--", label="Corollary 2 bound")
        ax[2].set(xlabel="heads H", ylabel="accuracy on 2500 bigrams",
                  title="N = 50, d = d_h = 10")
        ax[2].legend()
    fig.tight_layout()
    fig.savefig(out / "capacity_heads.png", dpi=110)
    print(f"wrote {out / 'capacity_heads.png'}", flush=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few settings only")
    ap.add_argument("--out", default="docs/results")
    ap.add_argument("--skip-exp1", action="store_true", help="skip the N = 50 comparison")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    args = ap.parse_args(argv)
    if args.quiet:
        progress.configure(quiet=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mahdavi = mahdavi_rows(args.quick)
    write(mahdavi, out / "capacity_mahdavi.csv")
    dana = dana_rows(args.quick)
    write(dana, out / "capacity_dana.csv")
    exp1 = [] if args.skip_exp1 else dana_exp1_rows(args.quick)
    write(exp1, out / "capacity_dana_exp1.csv")
    plots(out, mahdavi, dana, exp1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
