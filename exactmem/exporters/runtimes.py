"""Run an exported network in the runtime its file is made for, and count what it memorizes.

``exactmem export`` runs the file it wrote: an ``.onnx`` graph in onnxruntime (CPU), a torch
state_dict in torch, a safetensors file through torch (its floats read back exactly, then
run in the file's dtype).  ``exactmem precision`` uses the same runs for its per-runtime
rows.  A sequence is memorized when every read position gives its label under the float
readout rule of :func:`exactmem.floats.fidelity.judge` (a scalar output within ``1/2``
of the label, or one unique finite maximum at the label's class); the fraction counts
sequences, as the precision report does.

The narrow dtypes (:data:`NARROW`: ``int8``, ``bfloat16``) are written for certificates
that claim them (docs/float-exact.md): int8 or bfloat16 weight matrices, int32 or float32
biases, tables and activations; an ONNX file runs in onnxruntime (the integer graph of
:mod:`exactmem.exporters.lowp_onnx` for int8: ``MatMulInteger`` with int32 accumulation;
bfloat16 initializers widened to float32), a torch or safetensors file in torch
(:mod:`exactmem.exporters.lowp`: integer matmul for int8, float32 for bf16).

While torch or onnxruntime load (seconds), a progress line says so on stderr.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from exactmem import progress as progress_ui
from exactmem.floats.float_judge import DtypeRow, Values, judge
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec

#: the runtime each export format runs in, and the dtypes it writes
RUNTIME = {"onnx": "onnxruntime", "torch": "torch", "safetensors": "torch"}
DTYPES = {"onnx": ("float64", "float32"),
          "torch": ("float64", "float32", "bfloat16", "float16"),
          "safetensors": ("float64", "float32", "float16")}
CELLS = 4_000_000  # values per activation tensor of one batch
#: narrow export dtype -> the claim a certificate must carry for it (every format)
NARROW = {"int8": "int8", "bfloat16": "bfloat16-weights/float32"}


@dataclass(frozen=True, slots=True)
class RuntimeRun:
    """What one runtime memorizes: ``memorized`` of ``total`` sequences in ``dtype``."""

    runtime: str
    dtype: str
    memorized: int
    total: int
    failing: tuple[int, ...]

    @property
    def fraction(self) -> float:
        return 1 - (self.total - self.memorized) / self.total if self.total else 1.0

    @property
    def complete(self) -> bool:
        return self.memorized == self.total

    def line(self) -> str:
        """``memorized 1.0 (300/300) in onnxruntime float32``."""
        return (f"memorized {round(self.fraction, 4)} ({self.memorized}/{self.total}) in "
                f"{self.runtime} {self.dtype}")


def _batch(spec: NetworkSpec, ds: Dataset) -> int:
    from exactmem.model.sizes import sizes

    return max(1, min(4096, CELLS // max(1, ds.n * sizes(spec).width)))


def _values(rows: Any) -> Values:
    """float64 outputs ``[N, positions, d]`` as exact values (``None``: not finite)."""
    return [[tuple(Fraction(v) if v == v and abs(v) != float("inf") else None for v in vec)
             for vec in row] for row in rows.tolist()]


def _run(runtime: str, dtype: str, spec: NetworkSpec, ds: Dataset, values: Values,
         ) -> RuntimeRun:
    misses = judge(spec, ds, values)
    bad = sorted({m.sequence for m in misses})
    return RuntimeRun(runtime, dtype, ds.N - len(bad), ds.N, tuple(bad[:5]))


# onnxruntime -----------------------------------------------------------------------------
def _onnx_session(src: str | bytes) -> Any:
    with progress_ui.stage("loading onnxruntime"):
        from exactmem.optional import require

        ort = require("onnxruntime", "running the ONNX export")
    return ort.InferenceSession(src, providers=["CPUExecutionProvider"])


def onnx_values(src: str | Path | bytes, spec: NetworkSpec, ds: Dataset, dtype: str) -> Values:
    """Outputs of the ONNX graph (a file, or a serialized model) at the read positions."""
    import numpy as np

    from exactmem.exporters.onnx_export import dataset_array

    sess = _onnx_session(src if isinstance(src, bytes) else str(src))
    name = sess.get_inputs()[0].name
    x = dataset_array(ds, {"bfloat16": "float32"}.get(dtype, dtype))
    pos = list(spec.read_positions())
    step = _batch(spec, ds)
    chunks = []
    with progress_ui.task(f"onnxruntime {dtype}", total=ds.N, unit="seq") as bar:
        for start in range(0, ds.N, step):
            (out,) = sess.run(["outputs"], {name: x[start:start + step]})
            chunks.append(np.asarray(out)[:, pos, :].astype(np.float64))
            bar.update(len(chunks[-1]))
    return _values(np.concatenate(chunks, axis=0))


def run_onnx_file(path: str | Path, spec: NetworkSpec, ds: Dataset, dtype: str) -> RuntimeRun:
    return _run("onnxruntime", dtype, spec, ds, onnx_values(path, spec, ds, dtype))


def run_onnx_spec(spec: NetworkSpec, ds: Dataset, dtype: str) -> RuntimeRun:
    """The graph :func:`~exactmem.exporters.onnx_export.build_model` writes, run in memory."""
    from exactmem.exporters.onnx_export import build_model

    model = build_model(spec, dtype).SerializeToString()
    return _run("onnxruntime", dtype, spec, ds, onnx_values(model, spec, ds, dtype))


# torch -----------------------------------------------------------------------------------
def load_torch() -> Any:
    """:mod:`exactmem.exporters.torch`, with a progress line while torch loads (seconds)."""
    with progress_ui.stage("loading torch"):
        from exactmem.exporters import torch as th
    return th


def _torch_run(net: Any, spec: NetworkSpec, ds: Dataset, dtype: str) -> RuntimeRun:
    import torch

    th = load_torch()
    with torch.inference_mode(), progress_ui.stage(f"torch {dtype}"):
        raw = th.run_torch(net, ds, _batch(spec, ds))
    return _run("torch", dtype, spec, ds, _values(raw))


def run_torch_spec(spec: NetworkSpec, ds: Dataset, dtype: str) -> RuntimeRun:
    """``spec`` with weights rounded into ``dtype``, run in torch on the CPU."""
    th = load_torch()
    return _torch_run(th.to_torch(spec, dtype), spec, ds, dtype)


def _with_file_tensors(spec: NetworkSpec, dtype: str, tensors: dict[str, Any]) -> Any:
    """The network of ``spec`` in ``dtype`` carrying the file's tensors (every name and
    shape must match; infinities are run as they are)."""
    from exactmem.errors import SpecError

    th = load_torch()
    net = th.to_torch(spec, dtype)
    params = dict(net.named_parameters())
    tensors = {k: v for k, v in tensors.items() if k != "_extra_state"}
    if set(tensors) != set(params):
        raise SpecError(f"the written file's tensors {sorted(set(tensors) ^ set(params))[:3]} "
                        f"do not match the certificate's network")
    for name, t in tensors.items():
        if tuple(t.shape) != tuple(params[name].shape):
            raise SpecError(f"{name}: shape {tuple(t.shape)} in the file, "
                            f"{tuple(params[name].shape)} in the certificate's network")
        params[name].data.copy_(t.to(params[name].dtype))
    return net


def run_torch_file(path: str | Path, spec: NetworkSpec, ds: Dataset, dtype: str,
                   ) -> RuntimeRun:
    """A state_dict written by ``export --format torch``: ``torch.load`` (weights only) and
    run in torch."""
    import torch

    state = torch.load(str(path), map_location="cpu", weights_only=True)
    return _torch_run(_with_file_tensors(spec, dtype, state), spec, ds, dtype)


def run_safetensors_file(path: str | Path, spec: NetworkSpec, ds: Dataset, dtype: str,
                         ) -> RuntimeRun:
    """A safetensors export, read by ``safetensors.torch`` and run in torch in ``dtype``."""
    from exactmem.optional import require

    load_torch()  # torch first, with its progress line
    load_file = require("safetensors.torch", "reading safetensors").load_file
    return _torch_run(_with_file_tensors(spec, dtype, load_file(str(path))), spec, ds, dtype)


def run_file(fmt: str, path: str | Path, spec: NetworkSpec, ds: Dataset, dtype: str,
             ) -> RuntimeRun:
    """Run the file ``path`` written in export format ``fmt`` in its own runtime."""
    if fmt == "onnx":
        return run_onnx_file(path, spec, ds, dtype)
    if fmt == "torch":
        return run_torch_file(path, spec, ds, dtype)
    return run_safetensors_file(path, spec, ds, dtype)


def run_narrow_file(fmt: str, path: str | Path, spec: NetworkSpec, ds: Dataset, dtype: str,
                    ) -> RuntimeRun:
    """Run a file written in the narrow ``dtype`` (:data:`NARROW`) in its runtime: ONNX in
    onnxruntime, a state_dict or safetensors file in torch with the tensors as stored."""
    if fmt == "onnx":
        return run_onnx_file(path, spec, ds, dtype)
    import torch

    from exactmem.exporters.skeleton import skeleton
    from exactmem.optional import require

    th = load_torch()
    if fmt == "torch":
        tensors = torch.load(str(path), map_location="cpu", weights_only=True)
    else:
        tensors = require("safetensors.torch", "reading safetensors").load_file(str(path))
    from exactmem.exporters.lowp_load import widen

    tensors = widen({k: v for k, v in tensors.items() if k != "_extra_state"}, NARROW[dtype])
    return _torch_run(th.ExactmemNetwork(skeleton(spec), tensors), spec, ds, dtype)


def run_format(fmt: str, spec: NetworkSpec, ds: Dataset, dtype: str) -> RuntimeRun:
    """What export format ``fmt`` in ``dtype`` would memorize, run in memory."""
    return run_onnx_spec(spec, ds, dtype) if fmt == "onnx" else run_torch_spec(spec, ds, dtype)


def onnx_rows(spec: NetworkSpec, ds: Dataset, dtypes: Sequence[str] = DTYPES["onnx"],
              ) -> list[DtypeRow]:
    """The precision report's onnxruntime rows (the graph ``export --format onnx`` writes)."""
    import time

    from exactmem.floats.formats import FORMATS

    rows = []
    for dt in dtypes:
        clock = time.perf_counter()
        run = run_onnx_spec(spec, ds, dt)
        rows.append(DtypeRow(dt, FORMATS[dt].precision, run.fraction,
                             run.failing, time.perf_counter() - clock, "onnxruntime"))
    return rows
