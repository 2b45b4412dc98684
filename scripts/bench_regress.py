"""Regression benchmark: a fixed set of rows, each one's CPU seconds over a calibration
workload timed in the same run, against a committed baseline.

Rows (each in a fresh process, one after the other; data generated outside the timing):

* ``ks25-2^14``, ``ks25-2^16``: ``certify`` (build, exact evaluation, the checker) of
  ``kajitsuka2025-next-token`` on the random next-token data of ``scripts/scaling.py``
  (n = 16, vocabulary 64, 2 classes, seed 0);
* ``lookup-2^16``: the lookup baseline on the same 2^16 sequences;
* ``dense-float32-2^16``: ``dense-float32`` on ``scripts/bench_dense_certify.py``'s data
  (n = 16, vocabulary 64, 8 classes, seed 1), float32-exact claim included;
* ``lm-standin``: ``certify-model`` (default: with its self-check) of the untrained
  stand-in of the 1M GPT-2 shape (``scripts/bench_gpt2_1m.py --standin``: 4 layers,
  d = 128, 4 heads, vocabulary 2048, context 64) on its first 16 self-labelled sequences;
* ``search``: ``exactmem search --all-labellings --N 6 --n 2 --vocab 3 --minimize params``
  (the smallest hardmax network of every labelling, Z3 in the same process).

The *calibration* is a fixed pure-Python workload (big-integer products, an interpreter
loop, dictionary work, exact rational sums, a pass over about 100 MB of integers), run in
fresh processes before every row and after the last.  A row's figure is its CPU seconds
(user + system of its process and of the processes it starts, the timed work only) divided
by the mean of the calibrations on either side of it, each the best of three runs, so the
figure travels between machines and load levels better than seconds do.
``docs/results/perf_baseline.csv`` holds the committed figures; a row more than
``--tolerance`` (1.5) times its baseline makes the run exit 1.

    .venv/bin/python scripts/bench_regress.py                   # all rows (about 3 min CPU)
    .venv/bin/python scripts/bench_regress.py --rows ks25-2^16 lookup-2^16
    .venv/bin/python scripts/bench_regress.py --write-baseline  # after a measured gain only
    .venv/bin/python scripts/bench_regress.py --tiny            # tiny inputs, no baseline

Update the baseline only with a measured improvement (or a row added); say so in the
commit.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "docs" / "results" / "perf_baseline.csv"
FIELDS = ["row", "ratio", "cpu_s", "calibration_s", "peak_mb", "commit", "load_avg", "date"]
ROWS = ["ks25-2^14", "ks25-2^16", "lookup-2^16", "dense-float32-2^16", "lm-standin", "search"]


def calibration(scale: int = 40) -> None:
    """The fixed reference workload, ``scale`` fortieths of it (the whole: about 1.5 CPU-s
    on this project's 2-core machine, idle): big-integer products, an interpreter loop,
    dictionary work, exact rational sums (``Fraction``: the exact code's staple) and a pass
    over about 100 MB of integers (sorted, then looked up: the rows' memory traffic)."""
    x = 3 ** 40000
    y = x
    for _ in range(2 * scale):
        y = (y * x) >> 63000
    acc = 0
    for i in range(130_000 * scale):
        acc = (acc * 31 + i) % 1_000_003
    d: dict[int, int] = {}
    for i in range(45_000 * scale):
        d[i ^ 0x5A5A] = i
    q = Fraction(0)
    for i in range(1, 3_000 * scale):
        q += Fraction(i % 97 + 1, i % 89 + 3)
    big = [(i * 2_654_435_761) % 4_294_967_311 for i in range(15_000 * scale)]
    big.sort()
    seen = dict.fromkeys(big)
    hits = sum(1 for v in range(0, 4_294_967_311, 4_294_967_311 // (15_000 * scale))
               if v in seen)
    assert acc >= 0 and len(d) == 45_000 * scale and y > 0 and q > 0 and hits >= 0


def _cpu() -> float:
    """CPU seconds (user + system) of this process and of its children waited for so far
    (the processes a row forks or spawns count too)."""
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                 resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _certify(task: str, N: int, n: int, classes: int, seed: int,  # noqa: N803
             name: str) -> bool:
    from exactmem import progress
    from exactmem.datasets.draw import generate
    from exactmem.pipeline import certify

    progress.configure(quiet=True)
    ds = generate(task, N=N, n=n, vocab=64, classes=classes, seed=seed)  # type: ignore[arg-type]
    start = _cpu()
    ok = certify(ds, name, {"seed": seed}).report.verified
    _timed[0] = _cpu() - start
    return ok


def _lm(tiny: bool, work: Path) -> bool:
    from exactmem.cli import main as cli
    from exactmem.lm.checkpoints.random_models import random_gpt2, self_labelled
    from exactmem.model.dataset import save_dataset

    shape = dict(layers=1, d_model=16, heads=2, vocab=64, context=8) if tiny else \
        dict(layers=4, d_model=128, heads=4, vocab=2048, context=64)
    model = random_gpt2(work / "standin", seed=0, std=0.05, **shape)  # type: ignore[arg-type]
    ds = self_labelled(model, 2 if tiny else 16, int(shape["context"]), seed=0)
    save_dataset(ds, work / "d.json")
    start = _cpu()
    code = cli(["certify-model", str(model), str(work / "d.json"), "-o", str(work / "c.json"),
                "--partial", "-q"])
    _timed[0] = _cpu() - start
    return code == 0


def _search(tiny: bool, work: Path) -> bool:
    from exactmem.cli import main as cli

    start = _cpu()
    code = cli(["search", "--all-labellings", "--N", "4" if tiny else "6", "--n", "2",
                "--vocab", "3", "--minimize", "params", "--results", str(work / "r.jsonl"),
                "-q"])
    _timed[0] = _cpu() - start
    return code == 0


_timed = [0.0]


def run_row(name: str, tiny: bool) -> dict[str, Any]:
    """One row in this process: ``{"cpu": timed CPU seconds, "ok": ..., "peak_mb": ...}``."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if name == "calibration":
            start = _cpu()
            calibration(1 if tiny else 40)
            _timed[0], ok = _cpu() - start, True
        elif name.startswith("ks25-") or name.startswith("lookup-"):
            exp = 8 if tiny else int(name.split("^")[1])
            con = "lookup" if name.startswith("lookup") else "kajitsuka2025-next-token"
            ok = _certify("next-token", 2 ** exp, 16, 2, 0, con)
        elif name.startswith("dense-float32"):
            ok = _certify("next-token", 2 ** (8 if tiny else 16), 16, 8, 1, "dense-float32")
        elif name == "lm-standin":
            ok = _lm(tiny, work)
        elif name == "search":
            ok = _search(tiny, work)
        else:
            raise SystemExit(f"unknown row {name!r}; rows: {', '.join(ROWS)}")
    use = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": round(_timed[0], 3), "ok": ok, "peak_mb": round(use.ru_maxrss / 1024)}


def _in_process(name: str, tiny: bool) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", name] + (["--tiny"] if tiny else [])
    proc = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, check=True)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _calibrate(tiny: bool, repeats: int = 3) -> float:
    """The calibration's CPU seconds: the best of ``repeats`` fresh processes (the least
    disturbed by other work on the machine)."""
    return min(_in_process("calibration", tiny)["cpu"] for _ in range(repeats))


def read_baseline(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    with path.open() as fh:
        return {r["row"]: float(r["ratio"]) for r in csv.DictReader(fh)}


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             text=True, capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                                "exactmem"], text=True, capture_output=True).stdout.strip()
        return out + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="rows: " + ", ".join(ROWS))
    ap.add_argument("--rows", nargs="*", default=ROWS, help="the rows to run (default: all)")
    ap.add_argument("--baseline", default=str(BASELINE), help="the baseline CSV")
    ap.add_argument("--tolerance", type=float, default=1.5,
                    help="a row fails above this multiple of its baseline (default 1.5)")
    ap.add_argument("--write-baseline", action="store_true",
                    help="write this run's figures as the baseline (rows not run are kept)")
    ap.add_argument("--tiny", action="store_true",
                    help="tiny inputs (a second or two a row): the script runs; no baseline")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # one row, in this process (JSON out)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_row(args.one, args.tiny)))
        return 0
    base = {} if args.tiny else read_baseline(Path(args.baseline))
    calib = [_calibrate(args.tiny)]
    results: list[dict[str, Any]] = []
    failed = False
    print(f"calibration: {calib[0]:.2f} CPU-s; load average {os.getloadavg()[0]:.2f}",
          flush=True)
    for name in args.rows:
        res = _in_process(name, args.tiny)
        calib.append(_calibrate(args.tiny))
        unit = (calib[-2] + calib[-1]) / 2
        ratio = res["cpu"] / unit
        ref = base.get(name)
        bad = not res["ok"] or (ref is not None and ratio > args.tolerance * ref)
        failed |= bad
        verdict = "FAIL" if bad else "ok"
        against = f"baseline {ref:.2f} ({ratio / ref:.2f}x)" if ref else "no baseline"
        print(f"{name:20s} {res['cpu']:8.2f} CPU-s  /{unit:5.2f} = {ratio:7.2f}  {against}  "
              f"peak {res['peak_mb']} MB  {'' if res['ok'] else 'NOT VERIFIED  '}{verdict}",
              flush=True)
        results.append({"row": name, "ratio": round(ratio, 3), "cpu_s": res["cpu"],
                        "calibration_s": round(unit, 3), "peak_mb": res["peak_mb"],
                        "commit": _commit(), "load_avg": round(os.getloadavg()[0], 2),
                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    if args.write_baseline and not args.tiny:
        path = Path(args.baseline)
        kept: list[dict[str, Any]] = []
        if path.exists():
            with path.open() as fh:
                kept = [r for r in csv.DictReader(fh) if r["row"] not in args.rows]
        rows = sorted(kept + results, key=lambda r: ROWS.index(r["row"])
                      if r["row"] in ROWS else len(ROWS))
        with path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
        print(f"baseline written: {path}")
    print("RED: a row is slower than its baseline allows (or not verified)" if failed
          else "GREEN")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
