"""int8 and bfloat16 weights, stored as such and run in torch (docs/float-exact.md).

The claims ``int8`` and ``bfloat16-weights/float32`` of :mod:`exactmem.checker.floatexact`
fix which tensors are narrow: the *weight matrices* (every ``weight`` of a feed-forward map,
every ``query``/``key``/``value``/``output`` of a head) are stored as int8 or bfloat16; the
activations are int32 or float32.  Every other tensor (biases, embedding and position tables)
is stored in the narrowest dtype that holds all its values
(:func:`exactmem.constructions.bounds.storage_dtype`, the rule ``exactmem info`` charges:
int8 / int16 / int32, or bfloat16 / float32) and widened to int32 / float32 on load
(:func:`exactmem.exporters.lowp_load.widen`).  The mirror of :mod:`exactmem.exporters.torch`
widens a narrow weight exactly inside the matmul, so an int8 network runs entirely in
integer arithmetic (int32 products and sums; torch integer matmul on the CPU) and a bf16
one in float32 -- what the claims certify to be exact.

:func:`lowp_tensors` converts exactly (a value that does not fit its tensor's dtype is an
error, never rounded); :func:`save_lowp` writes them as safetensors; :func:`run_lowp` runs
a file (or the spec in memory) and counts the labels it gets.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import torch

from exactmem.constructions.bounds import storage_dtype
from exactmem.errors import NotExactError
from exactmem.exporters.lowp_load import DTYPES, is_weight, widen
from exactmem.exporters.runtimes import RuntimeRun, _batch, _run, _values
from exactmem.exporters.skeleton import named_matrices, skeleton
from exactmem.exporters.torch import ExactmemNetwork, run_torch
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec

#: dtype name of :func:`~exactmem.constructions.bounds.storage_dtype` -> torch dtype
TORCH_DTYPES = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
                "bfloat16": torch.bfloat16, "float32": torch.float32}


def _convert(values: list[Fraction], shape: tuple[int, ...], dt: torch.dtype,
             name: str) -> torch.Tensor:
    floats = [float(v) for v in values]
    if any(Fraction(f) != v for f, v in zip(floats, values, strict=True)):
        raise NotExactError(f"{name}: a value that is not a float64 number")
    wide = torch.tensor(floats, dtype=torch.float64).reshape(shape)
    t = wide.to(dt) if dt.is_floating_point else wide.to(torch.int64)
    if not dt.is_floating_point:
        info = torch.iinfo(dt)
        if (wide != t).any() or (t < info.min).any() or (t > info.max).any():
            raise NotExactError(f"{name}: a value that is not an integer of {dt}")
        t = t.to(dt)
    elif (t.to(torch.float64) != wide).any():
        raise NotExactError(f"{name}: a value that {dt} does not hold exactly")
    return t


def lowp_tensors(spec: NetworkSpec, claim: str) -> dict[str, torch.Tensor]:
    """Every tensor of ``spec`` in the dtype ``claim`` gives it, converted exactly."""
    if claim not in DTYPES:
        raise NotExactError(f"claim must be one of {sorted(DTYPES)}, found {claim!r}")
    out: dict[str, torch.Tensor] = {}
    for name, m, is_vec in named_matrices(spec):
        vals = [Fraction(x, m.den) for row in m.num for x in row]
        shape = (len(m.num) * m.cols,) if is_vec else (len(m.num), m.cols)
        dt = TORCH_DTYPES[storage_dtype(claim, m, is_weight(name, is_vec))]
        out[name] = _convert(vals, shape, dt, name)
    return out


def save_lowp(spec: NetworkSpec, claim: str, path: str | Path,
              metadata: dict[str, str] | None = None) -> None:
    """Write the tensors of :func:`lowp_tensors` as a safetensors file."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in lowp_tensors(spec, claim).items()}, str(path),
              metadata=metadata)


def save_lowp_state_dict(spec: NetworkSpec, claim: str, path: str | Path) -> None:
    """``torch.save`` of the state_dict of the network with the tensors of
    :func:`lowp_tensors` (structure in ``_extra_state``; ``torch.load(weights_only=True)``
    reads it)."""
    net = ExactmemNetwork(skeleton(spec), lowp_tensors(spec, claim))
    torch.save(net.state_dict(), str(path))


def run_lowp(spec: NetworkSpec, ds: Dataset, claim: str,
             path: str | Path | None = None) -> RuntimeRun:
    """Run the network with the tensors read back from ``path`` (a :func:`save_lowp` file;
    without it, converted in memory) and count the sequences whose label it gets."""
    if path is None:
        tensors = lowp_tensors(spec, claim)
    else:
        from safetensors.torch import load_file

        tensors = load_file(str(path))
    net = ExactmemNetwork(skeleton(spec), widen(tensors, claim))
    with torch.inference_mode():
        raw = run_torch(net, ds, _batch(spec, ds))
    return _run("torch", claim, spec, ds, _values(raw))
