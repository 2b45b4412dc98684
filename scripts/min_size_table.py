"""The smallest hardmax Transformer that memorizes every binary labelling, for small N.

For n in {1, 2, 3} and N = 1, 2, ... (next-token, token ids, binary labels, argmax
readout, residual on) the script draws N distinct input sequences over the smallest
vocabulary that has N of them, sweeps shapes by parameter count (exactmem.search) and
records the smallest shape that memorizes *every* labelling.  A shape is dropped at its
first infeasible labelling.  Every found network was certified by the checker.

Output: docs/results/min_size.csv and docs/results/min_size.png (unless --out changes
it); per-question JSON-lines results under --runs (a rerun resumes).

    python scripts/min_size_table.py --minutes 30
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from pathlib import Path

from exactmem.search.drive.all_labellings import shattering_search
from exactmem.search.drive.executors import make_executor
from exactmem.search.drive.results import ExhaustiveRun, ResultsFile
from exactmem.search.drive.sweep import Limits, candidates
from exactmem.search.question.labellings import consistency_classes, generate_inputs
from exactmem.search.question.shape import Shape

COLUMNS = ["n", "N", "vocab", "status", "minimal_shape", "params", "params_no_embedding",
           "proved_minimal", "shapes_tried", "found", "infeasible", "unknown", "padded",
           "median_query_s", "sqrt_N", "seconds", "sequences"]


def smallest_vocab(N: int, n: int) -> int:  # noqa: N803
    v = 2
    while len(consistency_classes(n, v)) < N:
        v += 1
    return v


def one_row(n: int, N: int, args: argparse.Namespace, executor: object,  # noqa: N803
            deadline: float) -> dict[str, object]:
    vocab = smallest_vocab(N, n)
    seqs = generate_inputs(N, n, vocab, seed=args.seed)
    q = ExhaustiveRun(seqs, vocab, 2, "split", args.timeout)
    base = Shape(readout="argmax", residual=True)
    limits = Limits(args.max_layers, args.max_heads, args.max_d_model, args.max_ff_width)
    shapes = candidates(base, "params", limits, q.dataset([0] * N))
    store = ResultsFile(args.runs / f"n{n}_N{N}.jsonl", q.header())
    start = time.monotonic()
    rep = shattering_search(q, shapes, store, executor, first_failure=True,  # type: ignore[arg-type]
                            show_progress=not args.quiet, deadline=deadline)
    secs = [float(r["seconds"]) for r in store.records.values()
            if "padded_from" not in r]
    counts = {k: sum(1 for r in store.records.values() if r["status"] == k)
              for k in ("found", "infeasible", "unknown")}
    m = rep["minimal"]
    status = rep["status"] if time.monotonic() <= deadline or m else "cut"
    return {
        "n": n, "N": N, "vocab": vocab, "status": status,
        "minimal_shape": (f"L{m['layers']} H{m['heads']} m{m['d_model']} s{m['head_dim']} "
                          f"q{m['ff_width']}") if m else "",
        "params": m["params"] if m else "",
        "params_no_embedding": m["params"] - m["d_model"] * vocab if m else "",
        "proved_minimal": rep["proved_minimal"], "shapes_tried": len(rep["shapes"]),
        **counts, "padded": sum(1 for r in store.records.values() if "padded_from" in r),
        "median_query_s": round(statistics.median(secs), 4) if secs else "",
        "sqrt_N": round(math.sqrt(N), 4), "seconds": round(time.monotonic() - start, 2),
        "sequences": " ".join("".join(map(str, s)) for s in seqs),
    }


def plot(rows: list[dict[str, object]], path: Path) -> None:
    """Parameters (without the embedding table) against N; hollow markers: "at most"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    styles = {1: ("o", 0.0), 2: ("s", 0.08), 3: ("^", 0.16)}
    for n in sorted({int(str(r["n"])) for r in rows}):
        marker, dx = styles.get(n, ("x", 0.0))
        pts = [(int(str(r["N"])) + dx, float(str(r["params_no_embedding"])),
                str(r["proved_minimal"]) == "True") for r in rows
               if int(str(r["n"])) == n and r["params_no_embedding"] != ""]
        if not pts:
            continue
        line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker,
                       label=f"n = {n}")[0]
        loose = [p for p in pts if not p[2]]
        if loose:
            ax.plot([p[0] for p in loose], [p[1] for p in loose], marker, ms=11,
                    mfc="white", color=line.get_color())
    ref = [r for r in rows if r["params_no_embedding"] != ""]
    if ref:
        ns = sorted({int(str(r["N"])) for r in ref})
        scale = min(float(str(r["params_no_embedding"])) for r in ref)
        ax.plot(ns, [scale * math.sqrt(x) for x in ns], "k--", label="c·√N (reference)")
    ax.set_xlabel("N (sequences)")
    ax.set_ylabel("parameters (without embedding table)")
    ax.set_title("Smallest hardmax Transformer memorizing every binary labelling\n"
                 "(hollow: an upper bound, a smaller shape had unknown queries)", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def verify_runs(runs: Path, cert_dir: Path | None) -> dict[str, int]:
    """Re-check every stored ``found`` network with the trusted checker (``check_file``,
    the code behind ``exactmem check``); certificates are written to ``cert_dir``."""
    import json
    import tempfile

    from exactmem.certificate import build_certificate, spec_from_json, write_certificate
    from exactmem.checker import check_file
    from exactmem.constructions.base import BuildResult
    from exactmem.search.question.outcome import CONSTRUCTION_NAME

    counts = {"found": 0, "verified": 0, "rejected": 0}
    out = cert_dir or Path(tempfile.mkdtemp(prefix="min_size_certs_"))
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(runs.glob("*.jsonl")):
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        header = lines[0]["header"]
        q = ExhaustiveRun(tuple(tuple(s) for s in header["sequences"]), header["vocab"],
                          header["classes"], header["ties"])
        for k, rec in enumerate(lines[1:]):
            if rec.get("status") != "found":
                continue
            counts["found"] += 1
            spec = spec_from_json(rec["network"])
            cert = build_certificate(q.dataset(rec["labels"]),
                                     BuildResult(spec, {"shape": rec["shape"]}),
                                     CONSTRUCTION_NAME)
            target = out / f"{path.stem}_{k}.cert.json"
            write_certificate(cert, target)
            ok = check_file(target).verified
            counts["verified" if ok else "rejected"] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0, help="total time budget")
    p.add_argument("--n", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--max-N", type=int, default=16, dest="max_N")
    p.add_argument("--timeout", type=float, default=40.0, help="seconds per query")
    p.add_argument("--row-minutes", type=float, default=8.0,
                   help="time budget of one (n, N) row; a row that runs out is 'cut'")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-layers", type=int, default=2)
    p.add_argument("--max-heads", type=int, default=2)
    p.add_argument("--max-d-model", type=int, default=2)
    p.add_argument("--max-ff-width", type=int, default=4)
    p.add_argument("--runs", type=Path, default=Path("runs/min_size"))
    p.add_argument("--out", type=Path, default=Path("docs/results/min_size"))
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--verify", action="store_true",
                   help="only re-check every found network stored under --runs with the "
                        "checker, writing certificates to --certificates")
    p.add_argument("--certificates", type=Path, default=None)
    p.add_argument("--plot-only", action="store_true",
                   help="redraw the PNG from the CSV at --out")
    args = p.parse_args(argv)
    if args.plot_only:
        with args.out.with_suffix(".csv").open() as fh:
            plot(list(csv.DictReader(fh)), args.out.with_suffix(".png"))
        return 0
    if args.verify:
        counts = verify_runs(args.runs, args.certificates)
        print(" ".join(f"{k}={v}" for k, v in counts.items()))
        return 0 if counts["rejected"] == 0 else 1
    deadline = time.monotonic() + args.minutes * 60
    executor = make_executor("processes", args.workers)
    rows: list[dict[str, object]] = []
    active = set(args.n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        for N in range(1, args.max_N + 1):  # noqa: N806
            for n in sorted(active):
                if time.monotonic() > deadline:
                    break
                if N > len(consistency_classes(n, max(2, smallest_vocab(N, n)))):
                    continue
                row_deadline = min(deadline, time.monotonic() + args.row_minutes * 60)
                row = one_row(n, N, args, executor, row_deadline)
                rows.append(row)
                print(" ".join(f"{k}={row[k]}" for k in COLUMNS[:-1]), flush=True)
                if row["status"] != "found":
                    active.discard(n)  # larger N for this n would only be cut or unknown
            if not active or time.monotonic() > deadline:
                break
    except KeyboardInterrupt:
        print("interrupted; writing what is done", file=sys.stderr)
    finally:
        executor.close(cancel=True)
    with args.out.with_suffix(".csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.csv')} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
