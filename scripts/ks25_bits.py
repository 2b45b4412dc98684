"""KS25's own bits, quantified: total weight bits of ``kajitsuka2025-next-token`` against N.

Kajitsuka & Sato (ICLR 2025) remark that their next-token construction has total bit
complexity ``O~(N)``.  This measures it: for random consistent next-token datasets (n = 16,
vocab 64, 2 classes, as ``scripts/scaling.py``) with ``N = 2^a`` it builds the unbounded
network (default options: no ``max_bits``) with the construction's builder and reads
``weight_bits_total`` (the sum over nonzero weights of the bit lengths of the reduced numerator
and denominator; :func:`exactmem.constructions.bounds.bit_figures`, the figure ``info --json``
gives).  The sizes are those of the network the certificate would hold; no exact evaluation
or check is run, since the bit count does not depend on them (``exactmem certify`` +
``info --json`` gives the same figure, checked here for the smallest N with ``--crosscheck``).

Writes ``docs/results/ks25_bits.csv`` (a row per N, appended as it finishes, so an interrupted
run keeps what it measured), fits ``total bits / N`` and ``total bits / (N log2 N)`` (least
squares through the origin, and the value at the largest N) and the log-log slope, and plots
``docs/results/ks25_bits.png`` when matplotlib is there.  Rows stop once the next one would
not fit the time budget (``--budget`` seconds; a row costs about 2.3x the previous).

    .venv/bin/python scripts/ks25_bits.py                       # N = 2^4 .. within 600 s
    .venv/bin/python scripts/ks25_bits.py --max-exp 12 --budget 60
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import time
from pathlib import Path

from exactmem import constructions
from exactmem.constructions.bounds import bit_figures
from exactmem.datasets.draw import generate
from exactmem.model.sizes import sizes

ROOT = Path(__file__).resolve().parent.parent
NAME = "kajitsuka2025-next-token"
FIELDS = ["N", "n", "vocab", "label_bits", "weight_bits_total", "params_nonzero",
          "params_dense", "depth", "max_bits", "bits_over_N", "bits_over_NlogN",
          "bits_per_nonzero", "build_s", "load_avg"]
GROWTH = 2.3  # build time of 2N over that of N, measured here (a little above 2)


def row(exp: int, n: int, vocab: int, seed: int) -> dict[str, object]:
    """Build the network for N = 2^exp and return its bit figures."""
    N = 1 << exp  # noqa: N806
    ds = generate("next-token", N=N, n=n, vocab=vocab, classes=2, seed=seed)
    con = constructions.get(NAME)
    start = time.perf_counter()
    built = con.build(ds, {**con.defaults(), "seed": seed})
    build_s = time.perf_counter() - start
    bits = bit_figures(built.spec, ds)
    sz = sizes(built.spec)
    total = bits["weight_bits_total"]
    return {"N": N, "n": n, "vocab": vocab, "label_bits": bits["label_bits"],
            "weight_bits_total": total, "params_nonzero": sz.params_nonzero,
            "params_dense": sz.params_dense, "depth": sz.depth, "max_bits": sz.max_bits,
            "bits_over_N": round(total / N, 3),
            "bits_over_NlogN": round(total / (N * math.log2(N)), 4),
            "bits_per_nonzero": round(total / sz.params_nonzero, 3),
            "build_s": round(build_s, 2), "load_avg": round(os.getloadavg()[0], 2)}


def crosscheck(n: int, vocab: int, seed: int, exp: int) -> int:
    """``weight_bits_total`` of ``exactmem certify`` + ``info --json`` at N = 2^exp."""
    from exactmem.certificate.figures import info
    from exactmem.pipeline import certify

    ds = generate("next-token", N=1 << exp, n=n, vocab=vocab, classes=2, seed=seed)
    outcome = certify(ds, NAME, {"seed": seed})
    assert outcome.report.verified
    return int(info(outcome.certificate)["weight_bits_total"])


def fit(rows: list[dict[str, object]]) -> dict[str, float]:
    """Least-squares constants through the origin and the log-log slope."""
    ns = [float(r["N"]) for r in rows]  # type: ignore[arg-type]
    ts = [float(r["weight_bits_total"]) for r in rows]  # type: ignore[arg-type]
    nl = [x * math.log2(x) for x in ns]
    out = {"c_N": sum(t * x for t, x in zip(ts, ns, strict=True)) / sum(x * x for x in ns),
           "c_NlogN": sum(t * x for t, x in zip(ts, nl, strict=True)) / sum(x * x for x in nl)}
    if len(rows) > 1:
        lx, ly = [math.log(x) for x in ns], [math.log(t) for t in ts]
        mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
        out["slope"] = (sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True))
                        / sum((a - mx) ** 2 for a in lx))
    return out


def plot(rows: list[dict[str, object]], path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [int(r["N"]) for r in rows]  # type: ignore[call-overload]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.loglog(ns, [int(r["weight_bits_total"]) for r in rows], "o-",  # type: ignore[call-overload]
             label="weight_bits_total")
    a.loglog(ns, [float(r["label_bits"]) for r in rows], "k--",  # type: ignore[arg-type]
             label="label bits (N log2 C)")
    a.set_xlabel("N (sequences)")
    a.set_ylabel("bits")
    a.legend()
    a.set_title(f"{NAME}: total weight bits")
    b.semilogx(ns, [float(r["bits_over_N"]) for r in rows], "o-",  # type: ignore[arg-type]
               label="total bits / N")
    b.semilogx(ns, [float(r["bits_over_NlogN"]) for r in rows], "s-",  # type: ignore[arg-type]
               label="total bits / (N log2 N)")
    b.set_xlabel("N (sequences)")
    b.legend()
    b.set_title("against O~(N)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-exp", type=int, default=4)
    ap.add_argument("--max-exp", type=int, default=20)
    ap.add_argument("--budget", type=float, default=600.0, help="seconds for all rows")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--crosscheck", action="store_true",
                    help="also certify the smallest N and compare with info --json")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/results/ks25_bits.csv")
    args = ap.parse_args()
    rows: list[dict[str, object]] = []
    start, last = time.perf_counter(), 0.0
    with args.out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        for exp in range(args.min_exp, args.max_exp + 1):
            left = args.budget - (time.perf_counter() - start)
            if rows and last * GROWTH > left:
                print(f"stopping before N = 2^{exp}: about {last * GROWTH:.0f} s needed, "
                      f"{left:.0f} s left in the budget")
                break
            t0 = time.perf_counter()
            r = row(exp, args.n, args.vocab, args.seed)
            last = time.perf_counter() - t0
            rows.append(r)
            w.writerow(r)
            fh.flush()
            print(f"N = 2^{exp}: {r['weight_bits_total']} weight bits, "
                  f"{r['bits_over_N']} / N, {r['bits_over_NlogN']} / (N log2 N), "
                  f"{r['params_nonzero']} nonzero, max {r['max_bits']} bits, {last:.1f} s")
    f = fit(rows)
    big = rows[-1]
    print(f"fit through the origin: total bits = {f['c_N']:.2f} N = "
          f"{f['c_NlogN']:.3f} N log2 N; log-log slope {f.get('slope', float('nan')):.3f}; "
          f"at N = {big['N']}: {big['bits_over_N']} / N, {big['bits_over_NlogN']} / (N log2 N)")
    if args.crosscheck:
        got = crosscheck(args.n, args.vocab, args.seed, args.min_exp)
        print(f"crosscheck N = 2^{args.min_exp}: certify + info --json gives {got}, "
              f"the builder {rows[0]['weight_bits_total']}: "
              + ("equal" if got == rows[0]["weight_bits_total"] else "DIFFERENT"))
    if plot(rows, args.out.with_suffix(".png")):
        print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    else:
        print(f"wrote {args.out} (no matplotlib: no plot)")


if __name__ == "__main__":
    main()
