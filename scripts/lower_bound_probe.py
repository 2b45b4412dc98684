"""Lower-bound probe: smallest bit-bounded hardmax Transformer memorizing N sequences.

Setting (docs/search.md, "Lower-bound probe"): vocabulary V = 2, tokens fed as fixed
one-hot vectors through a fixed identity input map (d_model = V; the embedding is
**not** searched and **not** counted), next-token sequences of length n = ceil(N/2) (2n
distinct consistency classes exist, so N >> V), K sampled binary labellings per N.  For
each bit budget b the script sweeps shapes (1 block, residual, argmax readout, heads
1..--max-heads, head_dim 1..--max-head-dim, ff_width 0..--max-ff-width) by parameter
count and records, per labelling, the smallest shape with a b-bit integer network that
memorizes it.  Every ``found`` is a certificate
the checker verified; every smaller shape is ``infeasible`` with an LRAT proof checked by
exactmem.checker.proofs.lrat (re-checked at the end with ``exactmem check-proof``'s code),
``implied`` (nested in a refuted shape), or ``unknown`` (conflict budget) -- then the row
says "at most".

    python scripts/lower_bound_probe.py --minutes 12 --out docs/results/lower_bound
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem.model.dataset import Dataset
from exactmem.search.question.labellings import consistency_classes
from exactmem.search.question.shape import Shape

V = 2
Z3_RLIMIT = 20_000_000  # Z3 resource units per query (deterministic)
CVC5_RLIMIT = 2_000_000  # cvc5 resource units per cross-check (deterministic)
REAL_WALL_S = 1800.0  # a wall-clock backstop only; the resource limits decide


def shapes(max_heads: int = 1, max_head_dim: int = 2, max_ff: int = 8) -> list[Shape]:
    out = [Shape(1, h, V, s, q, True, "argmax") for h in range(1, max_heads + 1)
           for s in range(1, max_head_dim + 1) for q in range(max_ff + 1)]
    return sorted(out, key=lambda sh: (params(sh), sh.heads, sh.head_dim, sh.ff_width))


def params(sh: Shape) -> int:
    """Parameters without the fixed embedding: heads 4*s*m, FF 2*q*m + q + m, readout
    2*m + 2 (two classes)."""
    m = sh.d_model
    ff = 2 * sh.ff_width * m + sh.ff_width + m if sh.ff_width else 0
    return sh.heads * 4 * sh.head_dim * m + ff + 2 * m + 2


def dataset(N: int, seed: int) -> Dataset:  # noqa: N803
    n = max(1, math.ceil(N / 2))
    rng = random.Random(1000 * N + seed)
    seqs = sorted(rng.sample(consistency_classes(n, V), N))
    labels = tuple(rng.randrange(2) for _ in seqs)
    onehot = [tuple(Fraction(int(i == t)) for i in range(V)) for t in range(V)]
    return Dataset("next-token", "vectors", tuple(tuple(onehot[t] for t in s) for s in seqs),
                   labels, dim=V)


def probe(N: int, seed: int, bits: int, conflicts: int, proof_dir: str,  # noqa: N803
          cert_dir: str, caps: tuple[int, int, int] = (1, 2, 8),
          rlimits: tuple[int, int] = (Z3_RLIMIT, CVC5_RLIMIT),
          known: dict[str, Any] | None = None, find_conflicts: int = 100_000
          ) -> dict[str, Any]:
    """One point: the smallest shape memorizing labelling ``seed`` of N sequences with
    ``bits``-bit integer weights (SAT, LRAT proofs) or, ``bits == 0``, real weights (Z3
    under a resource limit; every refutation re-asked to cvc5).

    Shapes nest (zero weights pad a smaller shape into a larger one, on every grid), so a
    refutation of a shape refutes every shape nested in it.  Bit budgets: an upward pass
    with ``find_conflicts`` looks for a network; a downward pass from it then asks, with
    ``conflicts``, the shapes with fewer parameters that no refuted shape contains, largest
    first, until one is unknown; an upward pass asks the smallest shapes until one is not
    refuted: ``refuted_up_to`` is a checked lower bound, ``params`` (a certificate) an
    upper bound, equal when every shape in between is refuted ("minimal").  The
    real-valued search goes upward only (Z3 under its resource limit).

    ``known``: the row of a smaller bit budget that found a network.  Its integers lie in
    this budget's range too (the grids are nested), so its certificate answers this budget
    and only the smaller shapes are searched."""
    from exactmem.search.drive.query import run_bits_query
    from exactmem.search.question.shape import nests_in

    ds = dataset(N, seed)
    ident = [[int(i == j) for j in range(V)] for i in range(V)]
    row: dict[str, Any] = {"N": N, "n": ds.n, "labeling": seed, "bits": bits,
                           "conflict_budget": conflicts if bits else "",
                           "rlimit": "" if bits else f"z3 {rlimits[0]}; cvc5 {rlimits[1]}",
                           "params": None, "shape": None, "claim": "none", "infeasible": 0,
                           "implied": 0, "unknown": 0, "proofs": [], "proof_kind": "",
                           "certificate": None}
    kinds: list[str] = []
    start = time.monotonic()
    family = shapes(*caps)
    status: dict[Shape, str] = {}
    best: tuple[Shape, Any] | None = None
    if known is not None:
        best = (next(sh for sh in family if sh.label() == known["shape"]), known)

    asked_full: set[Shape] = set()

    def ask(sh: Shape, budget: int) -> str:
        nonlocal best
        if budget == conflicts:
            asked_full.add(sh)
        name = f"N{N}_k{seed}_b{bits}_{sh.label().replace(' ', '_')}"
        cert = f"{cert_dir}/{name}.cert.json"
        if bits:
            res = run_bits_query(ds, sh, bits, budget, cert, Path(proof_dir) / name,
                                 fixed_embed=ident)
            kind = "lrat"
        else:
            res, kind = real_query(ds, sh, cert, rlimits)
        status[sh] = res.status
        if res.status == "found":
            best = (sh, {"certificate": res.certificate_path})
        elif res.status == "infeasible":
            kinds.append(kind)
            if res.proof is not None:
                row["proofs"].append((res.cnf, res.proof))
        return res.status

    if best is None:
        for sh in family:  # upward: the first network (cheap budget for bit grids)
            if ask(sh, find_conflicts) == "found":
                break

    def implied(sh: Shape) -> bool:
        if any(status.get(big) == "infeasible" and nests_in(sh, big) for big in family):
            status[sh] = "implied"
        return status.get(sh) == "implied"

    if best is not None:  # downward from the network, largest first, to the first unknown
        top = params(best[0])
        for sh in sorted(family, key=lambda x: -params(x)):
            if params(sh) >= top or status.get(sh) == "infeasible" or implied(sh):
                continue
            if not bits:
                continue  # the real-valued answers are final (resource limits)
            answer = ask(sh, conflicts)
            if answer == "found":
                top = params(sh)
            elif answer == "unknown":
                break
    if bits:  # upward from the smallest shape to the first unknown: a checked lower bound
        for sh in family:
            if best is not None and params(sh) >= params(best[0]):
                break
            if status.get(sh) in ("infeasible", "found") or implied(sh):
                continue
            if status.get(sh) == "unknown" and sh in asked_full:
                break
            if ask(sh, conflicts) != "infeasible":
                break
    top = params(best[0]) if best is not None else params(family[-1]) + 1
    below = [sh for sh in family if params(sh) < top]
    row["infeasible"] = sum(status.get(sh) == "infeasible" for sh in below)
    row["implied"] = sum(status.get(sh) == "implied" for sh in below)
    row["unknown"] = len(below) - row["infeasible"] - row["implied"]
    refuted = [params(sh) for sh in family if status.get(sh) in ("infeasible", "implied")]
    open_ = [params(sh) for sh in family if status.get(sh) not in ("infeasible", "implied")]
    # a checked lower bound: every shape with at most this many parameters is refuted
    row["refuted_up_to"] = max((p for p in refuted if not open_ or p < min(open_)),
                               default="")
    if best is not None:
        row.update(params=params(best[0]), shape=best[0].label(),
                   certificate=best[1]["certificate"],
                   claim="minimal" if row["unknown"] == 0 else "at most")
        if known is not None and best[1] is known:
            row["from_bits"] = known["bits"]
    row["proof_kind"] = "; ".join(f"{k} x{kinds.count(k)}" for k in dict.fromkeys(kinds))
    row["seconds"] = round(time.monotonic() - start, 2)
    return row


def real_query(ds: Dataset, sh: Shape, cert: str, rlimits: tuple[int, int]) -> tuple[Any, str]:
    """Real weights, the same fixed input map: Z3 decides under its resource limit (no
    wall-clock stages, so reruns agree); ``run_query`` re-asks every refutation to Z3 on
    the second encoding and to cvc5, and ``proof_kind`` says who agreed (``z3``,
    ``z3+enc2``, ``z3+cvc5``, ``z3+enc2+cvc5``); a second opinion's ``sat`` makes the
    point unknown."""
    from exactmem.search.drive.query import run_query
    from exactmem.search.encode.encoding import EncodeOptions
    from exactmem.search.question.outcome import Infeasible

    opts = EncodeOptions(fixed_embed=tuple(tuple(Fraction(int(i == j)) for j in range(V))
                                           for i in range(V)))
    res = run_query(ds, sh, opts, timeout_s=REAL_WALL_S, certificate_path=cert,
                    portfolio=False, rlimit=rlimits[0], cvc5_rlimit=rlimits[1])
    kind = res.outcome.proof_kind if isinstance(res.outcome, Infeasible) else ""
    return res, kind


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, nargs="+", default=[2, 4, 6, 8, 10, 12, 14, 16])
    ap.add_argument("--bits", type=int, nargs="+", default=[1, 2, 4, 8, 0],
                    help="bit budgets; 0 = unbounded (real weights, Z3 + cvc5)")
    ap.add_argument("--z3-rlimit", type=int, default=Z3_RLIMIT)
    ap.add_argument("--cvc5-rlimit", type=int, default=CVC5_RLIMIT)
    ap.add_argument("--labellings", "--labelings", type=int, default=2,
                    help="sampled labellings per N")
    ap.add_argument("--conflicts", type=int, default=1_000_000,
                    help="conflict budget of a deciding query (downward pass)")
    ap.add_argument("--find-conflicts", type=int, default=100_000,
                    help="conflict budget of the upward pass that looks for a network")
    ap.add_argument("--minutes", type=float, default=12.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-heads", type=int, default=1)
    ap.add_argument("--max-head-dim", type=int, default=2)
    ap.add_argument("--max-ff-width", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("docs/results/lower_bound"))
    ap.add_argument("--proofs", type=Path, default=Path("lower_bound_proofs"))
    ap.add_argument("--recheck", action="store_true",
                    help="only re-check the proofs of the CSV at --out and redraw the plot")
    args = ap.parse_args()
    if args.recheck:
        recheck_csv(args.out, args.proofs)
        return 0
    deadline = time.monotonic() + 60 * args.minutes
    (args.proofs / "certs").mkdir(parents=True, exist_ok=True)
    finite = sorted(b for b in set(args.bits) if b > 0)
    rows: list[dict[str, Any]] = []
    pool = ProcessPoolExecutor(args.workers)
    caps = (args.max_heads, args.max_head_dim, args.max_ff_width)
    rl = (args.z3_rlimit, args.cvc5_rlimit)

    def submit(N: int, k: int, b: int, known: dict[str, Any] | None) -> Future[Any]:  # noqa: N803
        return pool.submit(probe, N, k, b, args.conflicts, str(args.proofs),
                           str(args.proofs / "certs"), caps, rl, known, args.find_conflicts)

    # budgets <= 2 first, then the unbounded points; a budget > 2 runs after the next
    # smaller one of its N (a network found there answers it)
    base = [b for b in finite if b <= 2] or finite[:1]
    order = [(N, k, b) for b in base for N in args.N for k in range(args.labellings)]
    order += [(N, k, 0) for N in args.N for k in range(args.labellings) if 0 in args.bits]
    pending = {submit(N, k, b, None) for N, k, b in order}
    try:
        while pending:
            done, pending = wait(pending, timeout=max(0.0, deadline - time.monotonic()),
                                 return_when=FIRST_COMPLETED)
            if not done:
                raise TimeoutError
            for fut in done:
                r = fut.result()
                rows.append(r)
                write(rows, args.out)
                print(f"N={r['N']:3d} b={r['bits']} k={r['labeling']}: params {r['params']} "
                      f"({r['claim']}; {r['infeasible']} refuted, {r['unknown']} unknown) "
                      f"{r['seconds']}s", file=sys.stderr, flush=True)
                later = [b for b in finite if b > r["bits"]] if r["bits"] else []
                if later and later[0] not in base:
                    known = r if r["params"] is not None else None
                    pending.add(submit(r["N"], r["labeling"], later[0], known))
    except TimeoutError:
        print("time budget over; unfinished points are left out", file=sys.stderr)
    running = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in running:  # stop points still running
        proc.terminate()
    recheck(rows, args.out)
    return 0


def recheck(rows: list[dict[str, Any]], out: Path) -> None:
    """Every proof re-checked from its files by the code behind `exactmem check-proof`,
    every certificate by the code behind `exactmem check`."""
    from exactmem.checker import check_file
    from exactmem.checker.proofs.lrat import check_lrat_files

    for r in rows:
        if r.get("kept"):  # a row of an earlier run whose files are not here: as recorded
            continue
        verdicts = [check_lrat_files(c, p).verdict for c, p in r["proofs"]]
        r["proofs_rechecked"] = f"{verdicts.count('s VERIFIED')}/{len(verdicts)}"
        if r["certificate"]:
            r["certificate_rechecked"] = check_file(r["certificate"]).verified
        write(rows, out)
    plot(rows, out.with_suffix(".png"))


def recheck_csv(out: Path, proofs: Path) -> None:
    """``--recheck``: re-check the proofs of a finished run's CSV and redraw the plot."""
    with open(out.with_suffix(".csv")) as fh:
        rows: list[dict[str, Any]] = list(csv.DictReader(fh))
    for r in rows:
        for k in ("N", "n", "bits", "labeling", "infeasible", "implied", "unknown"):
            r[k] = int(r.get(k) or 0)
        r["params"] = int(r["params"]) if r["params"] else None
        r["seconds"] = float(r["seconds"])
        count = int(r.get("proofs") or 0)
        if r["certificate"]:  # the CSV names the file; it lies under --proofs/certs
            r["certificate"] = str(proofs / "certs" / Path(r["certificate"]).name)
        stems = sorted(proofs.glob(f"N{r['N']}_k{r['labeling']}_b{r['bits']}_*.cnf"))
        r["proofs"] = [(str(c), str(c.with_suffix(".lrat"))) for c in stems]
        files = [p for c, p in r["proofs"]] + ([r["certificate"]] if r["certificate"] else [])
        # rows whose files are not under --proofs keep what their run recorded
        r["kept"] = count != len(stems) or not all(Path(f).exists() for f in files)
        if r["kept"]:
            r["proofs"] = [("", "")] * count
    recheck(rows, out)


def write(rows: list[dict[str, Any]], out: Path) -> None:
    rows.sort(key=lambda r: (r["bits"], r["N"], r["labeling"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    keys = ["N", "n", "bits", "labeling", "params", "claim", "shape", "refuted_up_to",
            "infeasible", "implied", "unknown",
            "proof_kind", "proofs", "proofs_rechecked", "conflict_budget", "rlimit", "seconds",
            "from_bits", "certificate", "certificate_rechecked", "run"]
    with open(out.with_suffix(".csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows({**r, "proofs": len(r["proofs"]),
                     "certificate": Path(r["certificate"]).name if r["certificate"] else "",
                     "proofs_rechecked": r.get("proofs_rechecked", "pending")} for r in rows)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(10, 4.8))
    for b in sorted({r["bits"] for r in rows}):
        mine = [r for r in rows if r["bits"] == b]
        name = f"b = {b}" if b else "unbounded (solver's word)"
        found = sorted((r["N"], r["params"], r["claim"]) for r in mine if r["params"])
        line = ax.plot([x for x, _, _ in found], [p for _, p, _ in found], "-", alpha=0.6,
                       label=f"{name}: smallest network found")[0]
        color = line.get_color()
        for x, p, claim in found:  # filled: minimal; hollow: an upper bound
            ax.plot([x], [p], "o", color=color,
                    markerfacecolor=color if claim == "minimal" else "none")
        bounds = [(r["N"], int(r["refuted_up_to"])) for r in mine
                  if str(r.get("refuted_up_to") or "") and r["claim"] != "minimal"]
        if bounds:  # every shape with at most this many parameters refuted: P exceeds it
            ax.plot([x for x, _ in bounds], [p for _, p in bounds], "^", color=color,
                    label=f"{name}: checked lower bound (P above)")
    ns = sorted({r["N"] for r in rows})
    if ns:
        ax.plot(ns, [math.sqrt(x) for x in ns], "k:", label="sqrt(N)")
        ax.plot(ns, ns, "k--", label="N")
        for b in sorted({r["bits"] for r in rows} - {0}):
            ax.plot(ns, [x / b for x in ns], ":", alpha=0.5, label=f"counting P >= N/{b}")
    ax.set_xlabel("N (sequences)")
    ax.set_ylabel("parameters (embedding excluded)")
    ax.set_title("smallest b-bit hardmax Transformer found (V = 2, fixed one-hot)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
