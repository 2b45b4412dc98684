#!/usr/bin/env python3
"""Label bits per dense parameter and per stored bit, against N, next to trained models.

Builds ``dense-float32`` (seed 0, the default of ``certify``) on random next-token datasets (n
= 16, vocab 64, 8 classes, data seed 1, ``exactmem generate`` semantics) for each N given and
writes ``docs/results/bits_per_param.csv`` and ``docs/results/bits_per_param.png``. The bit
columns are :func:`exactmem.constructions.bounds.bit_figures` (the function behind ``exactmem
info``): label bits per nonzero parameter, per dense parameter (every entry of every tensor,
how trained-model figures count) and per stored bit (dense parameters x 32 for float32). The
float-ready rows of ``docs/results/float_ready.csv`` (``kajitsuka2025-next-token --max-bits
24``) are plotted for comparison. Reference lines: trained GPT-style models, Morris et al.
2025 (3.83 bits per parameter in float32, 3.51 in bfloat16), Allen-Zhu & Li 2024 (2 bits per
parameter, unchanged at int8); information limits 24 / 8 / 8 bits per parameter (a float32
significand, a bfloat16 significand, an int8).

With ``--certify`` every row is also certified (exact evaluation, float32 claim, the
independent checker; ``exactmem.pipeline.certify``) and run in onnxruntime float32 (the
``exactmem export --format onnx --dtype float32`` graph): the columns ``verified``,
``certify_s`` (the whole pipeline), ``evaluate_s`` (the producer's exact pass), ``check_s``
(float claim plus checker), ``forward_s`` (onnxruntime float32 on every sequence, in
batches of 4096, best of 3), ``onnx_exact`` (read positions whose float32 output equals
the label) and ``peak_rss_mb`` (this process's peak resident memory after the row).

    .venv/bin/python scripts/bits_per_param.py                    # N = 2^12, 2^14, 2^16
    .venv/bin/python scripts/bits_per_param.py --certify --exps 12 14 16
    .venv/bin/python scripts/bits_per_param.py --plot-only

With ``--construction dense-int8`` or ``dense-bf16`` the rows are the int8- and
bfloat16-weight variants: ``params_narrow`` counts the entries of the weight matrices (int8
or bfloat16; the rest -- biases, embedding table -- is added in int32 or float32, the claim's
semantics), ``label_bits_per_narrow`` divides the label bits by it, ``stored_bits`` charges
every tensor the bits of the dtype ``export --dtype int8|bfloat16`` writes it in (int8 /
bfloat16 weights; the narrowest exact one of int8 / int16 / int32 or bfloat16 / float32 for
the rest: ``bounds.storage_dtype``), the tensor bytes of the safetensors file x 8 (all three
from ``bit_figures`` with the claim, as ``exactmem info`` prints them); with ``--certify``
the row is certified with the
claim ``int8`` or ``bfloat16-weights/float32`` and the tensors, written as safetensors in
their dtypes and read back, are run in torch (integer matmul for int8, bf16 widened to
float32): ``runtime_exact`` counts the labels it gets; ``onnx_exact`` counts them in
onnxruntime (:mod:`exactmem.exporters.lowp_onnx`: for int8 the integer graph,
``MatMulInteger`` on the activations' bytes with int32 accumulation; for bf16 bfloat16
initializers with a ``Cast`` to float32), the graphs ``exactmem export --format onnx
--dtype int8|bfloat16`` writes.

    .venv/bin/python scripts/bits_per_param.py --construction dense-int8 --certify --exps 12
"""

from __future__ import annotations

import argparse
import csv
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "docs" / "results" / "bits_per_param.csv"
PNG = ROOT / "docs" / "results" / "bits_per_param.png"
FLOAT_READY = ROOT / "docs" / "results" / "float_ready.csv"
TRAINED = [("Morris et al. 2025, float32", 3.83, 32), ("Morris et al. 2025, bfloat16", 3.51, 16),
           ("Allen-Zhu & Li 2024, int8", 2.0, 8)]
LIMITS = [("float32 significand", 24), ("bfloat16 significand / int8", 8)]
COLUMNS = ["construction", "dtype", "N", "n", "vocab", "classes", "seed", "params_dense",
           "params_nonzero", "depth", "width", "max_bits", "label_bits",
           "label_bits_per_nonzero", "label_bits_per_dense", "stored_bits",
           "label_bits_per_stored_bit", "verified", "certify_s", "evaluate_s", "check_s",
           "forward_s", "onnx_exact", "peak_rss_mb", "params_narrow", "label_bits_per_narrow",
           "runtime_exact"]
#: construction -> (dtype column, claim, bits of a narrow parameter)
VARIANTS = {"dense-float32": ("float32", "float32", 32),
            "dense-int8": ("int8", "int8", 8),
            "dense-bf16": ("bfloat16", "bfloat16-weights/float32", 16)}


def _forward(spec: Any, ds: Any) -> tuple[float, int]:
    import numpy as np
    import onnxruntime as ort

    from exactmem.exporters.onnx_export import build_model, dataset_array

    sess = ort.InferenceSession(build_model(spec, "float32").SerializeToString(),
                                providers=["CPUExecutionProvider"])
    x = dataset_array(ds, "float32")
    name = sess.get_inputs()[0].name
    best, outs = float("inf"), None
    for _ in range(3):
        clock = time.perf_counter()
        outs = np.concatenate([sess.run(["outputs"], {name: x[i:i + 4096]})[0]
                               for i in range(0, len(x), 4096)])
        best = min(best, time.perf_counter() - clock)
    assert outs is not None
    exact = int((np.asarray(outs, dtype=np.float64)[:, ds.n - 1, 0] ==
                 np.array(ds.labels, dtype=np.float64)).sum())
    return best, exact


def _lowp(con: str, res: Any, ds: Any, out: dict[str, Any], certify: bool) -> None:
    """The narrow-weight columns of a dense-int8 / dense-bf16 row (module docstring): the
    runs of the tensors in torch and of the ONNX graph in onnxruntime."""
    import tempfile

    import numpy as np

    from exactmem.exporters.lowp import run_lowp, save_lowp
    from exactmem.exporters.lowp_onnx import build_bf16_model, build_int8_model
    from exactmem.exporters.onnx_export import dataset_array, run_onnx

    _, claim, _ = VARIANTS[con]
    if not certify:
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "net.safetensors"
        save_lowp(res.spec, claim, path)
        out["runtime_exact"] = run_lowp(res.spec, ds, claim, path).memorized
    # onnxruntime: the integer graph (MatMulInteger, int32) or bf16 initializers + Cast
    model, x = ((build_int8_model(res.spec), dataset_array(ds, "int8")) if con == "dense-int8"
                else (build_bf16_model(res.spec), dataset_array(ds, "float32")))
    outs, _ = run_onnx(model, x)
    out["onnx_exact"] = int((np.asarray(outs, dtype=np.float64)[:, ds.n - 1, 0] ==
                             np.array(ds.labels, dtype=np.float64)).sum())


def row(exp: int, certify: bool, con: str = "dense-float32") -> dict[str, Any]:
    from exactmem.constructions import get
    from exactmem.constructions.bounds import bit_figures
    from exactmem.datasets.draw import generate
    from exactmem.model.sizes import sizes
    from exactmem.pipeline import certify as run_certify

    N = 1 << exp  # noqa: N806
    ds = generate(task="next-token", N=N, n=16, vocab=64, classes=8, seed=1)
    res = get(con).build(ds, {"seed": 0})
    dtype, claim, _ = VARIANTS[con]
    sz, fig = sizes(res.spec), bit_figures(res.spec, ds, [claim])
    out: dict[str, Any] = {"construction": con, "dtype": dtype, "N": N, "n": 16,
                           "vocab": 64, "classes": 8, "seed": 0, **sz.as_dict(),
                           **{k: fig[k] for k in ("label_bits", "label_bits_per_nonzero",
                                                  "label_bits_per_dense", "stored_bits",
                                                  "label_bits_per_stored_bit")},
                           **{k: fig[k] for k in ("params_narrow", "label_bits_per_narrow")
                              if k in fig}}
    if con != "dense-float32":
        _lowp(con, res, ds, out, certify)
    if certify:
        clock = time.perf_counter()
        outcome = run_certify(ds, con, {"seed": 0}, float_exact=[claim])
        if claim not in outcome.certificate["claims"].get("float_exact", []):
            out["verified"] = False
        out["certify_s"] = round(time.perf_counter() - clock, 2)
        out["verified"] = out.get("verified", True) and outcome.report.verified
        out["evaluate_s"] = round(outcome.timings["evaluate"], 2)
        out["check_s"] = round(outcome.timings["check"] + outcome.timings.get("float-exact", 0), 2)
        if con == "dense-float32":
            fwd, exact = _forward(res.spec, ds)
            out["forward_s"], out["onnx_exact"] = round(fwd, 4), exact
        out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def _read(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open() as fh:
        return list(csv.DictReader(fh))


def plot(rows: list[dict[str, str]], png: Path = PNG) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    f32 = [r for r in rows if r["construction"] == "dense-float32"]
    xs = [int(r["N"]) for r in f32]
    ax1.plot(xs, [float(r["label_bits_per_dense"]) for r in f32], "o-", color="C0",
             label="dense-float32 (float32-exact, certified)")
    ax2.plot(xs, [float(r["label_bits_per_stored_bit"]) for r in f32], "o-", color="C0",
             label="dense-float32, float32 file")
    for con, c in (("dense-bf16", "C2"), ("dense-int8", "C6")):
        sub = [r for r in rows if r["construction"] == con]
        if sub:
            sx = [int(r["N"]) for r in sub]
            ax1.plot(sx, [float(r["label_bits_per_narrow"]) for r in sub], "^-", color=c,
                     label=f"{con}, per {sub[0]['dtype']} parameter")
            ax2.plot(sx, [float(r["label_bits_per_stored_bit"]) for r in sub], "^-",
                     color=c, label=f"{con}, stored tensors")
    ready = [r for r in _read(FLOAT_READY)
             if r["construction"] == "kajitsuka2025-next-token" and r["P"] == "24"]
    if ready:
        rx = [int(r["N"]) for r in ready]
        ax1.plot(rx, [float(r["label_bits_per_dense"]) for r in ready], "s--", color="C1",
                 label="float-ready KS25 (--max-bits 24)")
        ax2.plot(rx, [float(r["label_bits_per_stored_bit"]) for r in ready], "s--",
                 color="C1", label="float-ready KS25, float32 file")
    for (name, bits, width), c in zip(TRAINED, ("C3", "C4", "C5"), strict=True):
        ax1.axhline(bits, color=c, ls=":", label=f"trained: {name} ({bits})")
        ax2.axhline(bits / width, color=c, ls=":", label=f"trained: {name} ({bits}/{width})")
    for name, bits in LIMITS:
        ax1.axhline(bits, color="grey", ls="-", lw=0.8, label=f"information limit: {name} "
                                                              f"({bits})")
    ax2.axhline(1.0, color="grey", ls="-", lw=0.8, label="information limit (1)")
    for ax, what in ((ax1, "label bits per dense parameter"),
                     (ax2, "label bits per stored bit")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("N (sequences, n = 16, vocab 64, 8 classes)")
        ax.set_ylabel(what)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("Memorized label bits per parameter: constructed vs trained")
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exps", type=int, nargs="+", default=[12, 14, 16],
                    help="log2 N of the rows (default 12 14 16)")
    ap.add_argument("--certify", action="store_true", help="also certify and time each row")
    ap.add_argument("--construction", choices=sorted(VARIANTS), default="dense-float32",
                    help="dense-float32 (default), or the int8 / bfloat16-weight variant")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--csv", type=Path, default=CSV, help="table to update (default %(default)s)")
    ap.add_argument("--png", type=Path, default=PNG, help="plot to write (default %(default)s)")
    args = ap.parse_args(argv)
    if any(not 6 <= e <= 20 for e in args.exps):
        print("error: --exps must lie in 6..20", file=sys.stderr)
        return 2
    rows = _read(args.csv)
    if not args.plot_only:
        for e in args.exps:
            new = {k: str(v) for k, v in row(e, args.certify, args.construction).items()}
            same = (new["construction"], new["N"])
            old = next((r for r in rows if (r["construction"], r["N"]) == same), None)
            if old is not None and not args.certify:  # keep an earlier certification
                new.update({k: v for k, v in old.items() if k not in new and v})
            rows = [r for r in rows if (r["construction"], r["N"]) != same] + [new]
            rows.sort(key=lambda r: (list(VARIANTS).index(r["construction"]), int(r["N"])))
            with args.csv.open("w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=COLUMNS)
                w.writeheader()
                w.writerows({k: r.get(k, "") for k in COLUMNS} for r in rows)
            print(", ".join(f"{k} {new.get(k, '')}" for k in
                            ("N", "params_dense", "label_bits_per_dense",
                             "label_bits_per_stored_bit", "verified", "certify_s",
                             "evaluate_s", "forward_s", "onnx_exact", "peak_rss_mb",
                             "params_narrow", "label_bits_per_narrow", "runtime_exact")))
    if rows:
        plot(rows, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
