"""Scaling of the Kajitsuka & Sato (2025) constructions against the lookup baseline.

Certifies random consistent token-id datasets (build, exact evaluation, independent checker)
for next-token with ``N = 2^a .. 2^b`` (n = 16) and seq2seq with ``N n`` up to ``2^b`` (n = 4),
and certifies the lookup baseline on the same data.  Each row runs in a fresh process (its
peak memory is that row's alone).  Prints a table (N, dense / nonzero parameters, depth, max
bits, seconds per stage, peak memory, verdicts, the lookup baseline's nonzeros and time, and
the ratios), the least-squares slope of log(nonzero parameters) against log N, where the
construction first uses fewer nonzeros than lookup, and writes
``docs/results/scaling_<task>.csv`` and a log-log plot ``docs/results/scaling.png``.

    .venv/bin/python scripts/scaling.py                 # N up to 2^14 (a few minutes)
    .venv/bin/python scripts/scaling.py --max-exp 20    # up to 2^20 (long)

A row too long for one sweep can be run as two ``--row`` runs whose JSON outputs
``--add-row TASK N n OURS.json LOOKUP.json`` puts into the table.  Rows are appended to
the CSV as they finish (``--append`` keeps the rows already there), so an interrupted run
keeps what it measured.  Floats appear only here, in the report.  ``commit`` is the commit
each row was measured on.  ``cpu_s`` is the row's CPU time (user + system, the whole
process, generation included, and the processes of the parallel piecewise passes, whose
number is ``processes``, ``EXACTMEM_JOBS`` or the CPUs): on a shared machine it says more
than the wall times.  ``peak_rss_mb`` is the larger of the row process's peak and the
largest sum of its and all its descendants' resident memory, sampled twice a second (an
upper bound: a page a forked child shares with its parent counts in both; a memory cgroup's
``memory.max_usage_in_bytes`` counts each page once, docs/scaling.md).
Progress goes to stderr; ``--quiet`` turns it off.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

from exactmem import progress
from exactmem.datasets.draw import generate
from exactmem.model.piecewise import default_jobs as piecewise_jobs
from exactmem.pipeline import certify

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ["task", "N", "n", "points", "params_dense", "params_nonzero", "depth", "width",
          "max_bits", "build_s", "evaluate_s", "certificate_s", "check_s", "total_s", "cpu_s",
          "check_over_evaluate", "peak_rss_mb", "verified", "lookup_nonzero", "lookup_max_bits",
          "lookup_total_s", "lookup_verified", "ratio_lookup_over_ours",
          "time_ours_over_lookup", "load_avg", "commit", "processes"]


def commit() -> str:
    """The commit the row is measured on (``+changes`` when exactmem/ differs from it)."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             text=True, capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                                "exactmem"], text=True, capture_output=True).stdout.strip()
        return out + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _certify(task: str, N: int, n: int, vocab: int, seed: int, name: str,  # noqa: N803
             ) -> dict[str, object]:
    measured_on = commit()  # before the run: the code this process imports
    ds = generate(task, N=N, n=n, vocab=vocab, classes=2, seed=seed)  # type: ignore[arg-type]
    stop, together = threading.Event(), [0]
    sampler = threading.Thread(target=_sample_rss, args=(stop, together), daemon=True)
    sampler.start()
    start = time.perf_counter()
    outcome = certify(ds, name, {"seed": seed})
    total = time.perf_counter() - start
    stop.set()
    sampler.join()
    use = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the piecewise passes' processes
    jobs = piecewise_jobs(N * (n if task == "seq2seq" else 1))  # processes of a deep pass
    return {"sizes": outcome.certificate["sizes"], "timings": outcome.timings,
            "cpu_timings": {k: round(v, 2) for k, v in outcome.cpu_timings.items()},
            "total": total,
            "cpu": round(use.ru_utime + use.ru_stime + kids.ru_utime + kids.ru_stime, 2),
            "cpu_children": round(kids.ru_utime + kids.ru_stime, 2),
            "verified": outcome.report.verified,
            "peak_rss_mb": round(max(use.ru_maxrss, together[0]) / 1024, 1),
            "peak_rss_parent_mb": round(use.ru_maxrss / 1024, 1), "processes": jobs,
            "commit": measured_on}


def _rss_kb(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next((int(line.split()[1]) for line in fh if line.startswith("VmRSS:")), 0)
    except (OSError, ValueError):
        return 0


def _sample_rss(stop: threading.Event, peak: list[int]) -> None:
    """``peak[0]``: the largest sum (kB) of the resident memory of this process and all its
    descendants (the forked evaluation and the parallel passes' processes), sampled twice a
    second from /proc (Linux; pages the processes share count once per process, so a
    forked child's shared pages count twice: an upper bound)."""
    me = os.getpid()
    while not stop.wait(0.5):
        parent: dict[int, int] = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/stat") as fh:
                        parent[int(pid)] = int(fh.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        tree, grew = {me}, True
        while grew:
            more = {p for p, pp in parent.items() if pp in tree} - tree
            tree |= more
            grew = bool(more)
        peak[0] = max(peak[0], sum(_rss_kb(str(p)) for p in tree))


def _in_process(args: list[str]) -> dict[str, object]:
    proc = subprocess.run([sys.executable, __file__, "--row", *args], text=True,
                          stdout=subprocess.PIPE, check=True)
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def measure(task: str, N: int, n: int, vocab: int, seed: int) -> dict[str, object]:  # noqa: N803
    name = "kajitsuka2025-next-token" if task == "next-token" else "kajitsuka2025-seq2seq"
    common = [task, str(N), str(n), str(vocab), str(seed)]
    return combine(task, N, n, _in_process([*common, name]), _in_process([*common, "lookup"]))


def combine(task: str, N: int, n: int, ours: dict[str, object],  # noqa: N803
            look: dict[str, object]) -> dict[str, object]:
    """One table row from the JSON results of our row and the lookup row."""
    sz, t = ours["sizes"], ours["timings"]
    assert isinstance(sz, dict) and isinstance(t, dict)
    lsz = look["sizes"]
    assert isinstance(lsz, dict)
    total, ltotal = float(ours["total"]), float(look["total"])  # type: ignore[arg-type]
    return {"task": task, "N": N, "n": n, "points": N if task == "next-token" else N * n,
            "params_dense": sz["params_dense"], "params_nonzero": sz["params_nonzero"],
            "depth": sz["depth"], "width": sz["width"], "max_bits": sz["max_bits"],
            "build_s": round(t["build"], 2), "evaluate_s": round(t["evaluate"], 2),
            "certificate_s": round(t["certificate"], 2), "check_s": round(t["check"], 2),
            "total_s": round(total, 2), "cpu_s": ours["cpu"],
            "check_over_evaluate": round(t["check"] / max(t["evaluate"], 1e-9), 2),
            "peak_rss_mb": ours["peak_rss_mb"], "verified": ours["verified"],
            "lookup_nonzero": lsz["params_nonzero"], "lookup_max_bits": lsz["max_bits"],
            "lookup_total_s": round(ltotal, 2), "lookup_verified": look["verified"],
            "ratio_lookup_over_ours": round(lsz["params_nonzero"] / sz["params_nonzero"], 3),
            "time_ours_over_lookup": round(total / max(ltotal, 1e-9), 2),
            "load_avg": round(os.getloadavg()[0], 2), "commit": ours.get("commit", "unknown"),
            "processes": ours.get("processes", 1)}


def slope(rows: list[dict[str, object]], key: str) -> float:
    xs = [math.log(float(r["points"])) for r in rows]  # type: ignore[arg-type]
    ys = [math.log(float(r[key])) for r in rows]  # type: ignore[arg-type]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def report(task: str, rows: list[dict[str, object]]) -> None:
    print(f"\n{task}: " + " | ".join(f"{k}" for k in FIELDS[1:]))
    for r in rows:
        print("  " + " | ".join(str(r.get(k, "")) for k in FIELDS[1:]))
    if len(rows) >= 2:
        print(f"  slope of log(nonzero params) vs log(points): {slope(rows, 'params_nonzero'):.3f}"
              f" (lookup: {slope(rows, 'lookup_nonzero'):.3f})")
    wins = [r for r in rows if float(r["ratio_lookup_over_ours"]) > 1]  # type: ignore[arg-type]
    first = next((r for r in rows if all(float(s["ratio_lookup_over_ours"]) > 1  # type: ignore[arg-type]
                                         for s in rows if int(s["points"]) >= int(r["points"]))),  # type: ignore[call-overload]
                 None)
    if first is not None:
        print(f"  fewer nonzeros than lookup from {first['points']} points on "
              f"(ratio {first['ratio_lookup_over_ours']}); at {rows[-1]['points']}: "
              f"ratio {rows[-1]['ratio_lookup_over_ours']}")
    elif not wins:
        print("  never fewer nonzeros than lookup in this range")


def plot(results: dict[str, list[dict[str, object]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.6))
    for task, rows in results.items():
        if not rows:
            continue
        xs = [float(r["points"]) for r in rows]  # type: ignore[arg-type]
        ax.loglog(xs, [float(r["params_nonzero"]) for r in rows], "o-",  # type: ignore[arg-type]
                  label=f"Kajitsuka & Sato, {task} (slope {slope(rows, 'params_nonzero'):.2f})")
        ax.loglog(xs, [float(r["lookup_nonzero"]) for r in rows], "s--",  # type: ignore[arg-type]
                  label=f"lookup baseline, {task}")
        y0 = float(rows[0]["params_nonzero"])  # type: ignore[arg-type]
        ax.loglog(xs, [y0 * math.sqrt(x / xs[0]) for x in xs], ":", color="gray",
                  label="sqrt(N) reference" if task == "next-token" else None)
        bx.loglog(xs, [float(r["total_s"]) for r in rows], "o-",  # type: ignore[arg-type]
                  label=f"Kajitsuka & Sato, {task}: certify")
        bx.loglog(xs, [float(r["check_s"]) for r in rows], "^:",  # type: ignore[arg-type]
                  label=f"Kajitsuka & Sato, {task}: check")
        bx.loglog(xs, [float(r["lookup_total_s"]) for r in rows], "s--",  # type: ignore[arg-type]
                  label=f"lookup baseline, {task}: certify")
    ax.set_xlabel("memorized points (N next-token, nN seq2seq)")
    ax.set_ylabel("nonzero parameters")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    bx.set_xlabel("memorized points")
    bx.set_ylabel("seconds (2 shared cores, see load_avg)")
    bx.grid(True, which="both", alpha=0.3)
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-exp", type=int, default=6)
    ap.add_argument("--max-exp", type=int, default=14)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", default="next-token,seq2seq")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results"))
    ap.add_argument("--plot-only", action="store_true",
                    help="re-read the CSV files of an earlier (possibly interrupted) run, "
                         "print the summary and draw the plot")
    ap.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    ap.add_argument("--append", action="store_true",
                    help="keep the rows already in the CSV files and add the new ones")
    ap.add_argument("--row", nargs=6, metavar=("TASK", "N", "n", "VOCAB", "SEED", "NAME"),
                    help=argparse.SUPPRESS)  # one certification, in this process (JSON out)
    ap.add_argument("--add-row", nargs=5, metavar=("TASK", "N", "n", "OURS_JSON", "LOOKUP_JSON"),
                    help="add (or replace) one table row from the JSON of two --row runs "
                         "(rows too long for one sweep run separately)")
    args = ap.parse_args(argv)
    if args.add_row:
        task, N, n, ours_json, look_json = args.add_row  # noqa: N806
        row = combine(task, int(N), int(n), json.loads(Path(ours_json).read_text()),
                      json.loads(Path(look_json).read_text()))
        path = Path(args.out) / f"scaling_{task}.csv"
        with path.open() as fh:
            rows = [r for r in csv.DictReader(fh) if int(r["points"]) != int(row["points"])]
        rows.append(row)
        rows.sort(key=lambda r: int(r["points"]))  # type: ignore[call-overload]
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=FIELDS, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        print(f"{path}: row for {row['points']} points, verified {row['verified']}, "
              f"lookup verified {row['lookup_verified']}")
        return 0
    if args.row:
        task, N, n, vocab, seed, name = args.row  # noqa: N806
        progress.configure(quiet=True)
        print(json.dumps(_certify(task, int(N), int(n), int(vocab), int(seed), name)))
        return 0
    if args.quiet:
        progress.configure(quiet=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict[str, object]]] = {}
    if args.plot_only:
        for task in args.tasks.split(","):
            with (out / f"scaling_{task}.csv").open() as fh:
                results[task] = list(csv.DictReader(fh))
            report(task, results[task])
        plot(results, out / "scaling.png")
        return 0
    clock = time.perf_counter()
    exps = range(args.min_exp, args.max_exp + 1)
    bar = progress.task("scaling rows", total=len(args.tasks.split(",")) * len(exps), unit="row")
    for task in args.tasks.split(","):
        n = 16 if task == "next-token" else 4
        path = out / f"scaling_{task}.csv"
        rows: list[dict[str, object]] = []
        if args.append and path.exists():
            with path.open() as fh:
                rows = [r for r in csv.DictReader(fh) if int(r["points"]).bit_length() - 1
                        not in exps]
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=FIELDS, lineterminator="\n")
            writer.writeheader()
            for r in rows:
                writer.writerow(r)
            fh.flush()
            for e in exps:
                N = 2 ** e if task == "next-token" else 2 ** e // n  # noqa: N806
                bar.update(0, description=f"scaling {task} points = 2^{e}")
                row = measure(task, N, n, vocab=64, seed=args.seed)
                bar.update()
                rows.append(row)
                writer.writerow(row)
                fh.flush()
                print(f"[{time.perf_counter() - clock:7.1f}s] {task} points=2^{e}: nonzero "
                      f"{row['params_nonzero']} (lookup {row['lookup_nonzero']}), depth "
                      f"{row['depth']}, bits {row['max_bits']}, verified {row['verified']}, "
                      f"{row['total_s']}s (lookup {row['lookup_total_s']}s), peak "
                      f"{row['peak_rss_mb']} MB, load {row['load_avg']}", flush=True)
        rows.sort(key=lambda r: int(r["points"]))  # type: ignore[call-overload]
        results[task] = rows
        report(task, rows)
        print(f"csv: {path}")
    bar.close()
    plot(results, out / "scaling.png")
    print(f"total time {time.perf_counter() - clock:.1f}s")
    return 0 if all(str(r["verified"]) == "True" and str(r["lookup_verified"]) == "True"
                    for rows in results.values() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
