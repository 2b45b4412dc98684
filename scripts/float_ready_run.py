#!/usr/bin/env python3
"""Run a float-exact certificate's network in float32 (or float64) and compare with the labels.

    .venv/bin/python scripts/float_ready_run.py c.json [--onnx net.onnx] [--dtype float32]

Backends: onnxruntime on CPU (the ``exactmem export --format onnx`` graph, written here when
``--onnx`` is not given), onnxruntime's CUDA provider and torch on CUDA when available, and
torch on CPU.  For each backend it prints how many read positions give *exactly* the label
as raw float output (a float-exact network must give every one) and how many ``labels``
(rounded outputs) are right.  Exit 0 when every backend gets every label exactly, 1
otherwise, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def _labels(ds) -> np.ndarray:  # type: ignore[no-untyped-def]
    if ds.task == "next-token":
        return np.array(ds.labels, dtype=np.float64).reshape(ds.N, 1)
    return np.array(ds.labels, dtype=np.float64).reshape(ds.N, ds.n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("certificate")
    ap.add_argument("--onnx", help="ONNX file exported from the certificate (else built here)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--no-torch", action="store_true", help="skip the torch backends")
    ap.add_argument("--batch", type=int, default=4096, help="sequences per run (memory)")
    args = ap.parse_args(argv)

    from exactmem.certificate import (
        dataset_from_certificate,
        read_certificate,
        spec_from_certificate,
    )
    from exactmem.errors import ExactmemError
    from exactmem.exporters.onnx_export import build_model, dataset_array

    try:
        cert = read_certificate(args.certificate)
        ds = dataset_from_certificate(cert, Path(args.certificate).resolve().parent)
    except ExactmemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spec = spec_from_certificate(cert)
    claimed = cert["claims"].get("float_exact", [])
    print(f"{args.certificate}: N = {ds.N}, float-exact claim {claimed or 'none'}")
    want = _labels(ds)
    results: list[tuple[str, int, int, float]] = []

    import onnxruntime as ort

    model = args.onnx or build_model(spec, args.dtype).SerializeToString()
    x = dataset_array(ds, args.dtype)
    providers = ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    for prov in providers:
        sess = ort.InferenceSession(model, providers=[prov])
        clock = time.perf_counter()
        name = sess.get_inputs()[0].name
        parts = [sess.run(["outputs", "labels"], {name: x[i:i + args.batch]})
                 for i in range(0, len(x), args.batch)]
        secs = time.perf_counter() - clock
        outs = np.concatenate([p[0] for p in parts])
        labels = np.concatenate([p[1] for p in parts])
        pos = [ds.n - 1] if ds.task == "next-token" else list(range(ds.n))
        raw = np.asarray(outs, dtype=np.float64)[:, pos, 0]
        lab = np.asarray(labels).reshape(want.shape)
        results.append((f"onnxruntime {prov}", int((raw == want).sum()),
                        int((lab == want).sum()), secs))
    if not args.no_torch:
        import torch

        from exactmem.exporters.torch import run_torch, to_torch

        torch.backends.cuda.matmul.allow_tf32 = False
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        for dev in devices:
            net = to_torch(spec, args.dtype, dev)
            clock = time.perf_counter()
            out = run_torch(net, ds, batch_size=args.batch, device=dev)[:, :, 0]
            secs = time.perf_counter() - clock
            results.append((f"torch {dev}", int((out == want).sum()), int((np.rint(out) == want)
                                                                           .sum()), secs))
    total = want.size
    ok = True
    for name, exact, right, secs in results:
        print(f"{name:36s} {args.dtype}: output == label at {exact}/{total}, "
              f"labels right {right}/{total} ({secs:.2f}s)")
        ok &= exact == total
    print("every label exact in every backend" if ok else "NOT every label exact")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
