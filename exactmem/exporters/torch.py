"""PyTorch adapter: a :class:`NetworkSpec` as an ``nn.Module`` and back, exactly.

This is the only module of exactmem that imports torch.

* :func:`to_torch` builds :class:`ExactmemNetwork`, which mirrors the spec layer by layer
  (Kajitsuka & Sato eq. 1-4): column-wise attention (keys on rows of the score matrix),
  hardmax weight split uniformly over *all* tied maxima, uniform attention as the mean of
  the values, explicit residuals, token-wise ReLU blocks.  Weights are rounded once, to
  nearest, from the exact rationals into the dtype (:mod:`exactmem.floats.formats`).
* :func:`from_torch` reads a module or a ``state_dict`` back: every float is a dyadic
  rational, so the conversion is exact and the result can be certified.

Float evaluation order (what the precision report emulates): an affine map is
``(x @ W.T) + b``; uniform attention sums the values over the keys, then divides by the
number of keys; hardmax sums the values of the tied keys (a 0/1 mask times the values),
then divides by the number of ties; then ``W_O`` is applied and the residual added.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import NotExactError, SpecError
from exactmem.exporters.skeleton import named_matrices, skeleton, spec_from_tensors
from exactmem.floats.formats import FORMATS, FloatFormat, round_to_format, rounded_values
from exactmem.model.dataset import Dataset
from exactmem.model.spec import NetworkSpec
from exactmem.optional import require

require("torch", "running the network in float")  # missing: one line naming the extra
import torch  # noqa: E402
from torch import nn  # noqa: E402

DTYPES: dict[str, torch.dtype] = {"float64": torch.float64, "float32": torch.float32,
                                  "bfloat16": torch.bfloat16, "float16": torch.float16}


def dtype_of(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise SpecError(f"dtype must be one of {sorted(DTYPES)}, found {name!r}")
    return DTYPES[name]


def format_of(dtype: torch.dtype) -> FloatFormat:
    for name, dt in DTYPES.items():
        if dt == dtype:
            return FORMATS[name]
    raise SpecError(f"no exact rounding rule for torch dtype {dtype}")


def _tensor(rows: list[list[float]], cols: int, dtype: torch.dtype,
            device: str | torch.device) -> torch.Tensor:
    t = torch.tensor(rows, dtype=torch.float64).reshape(len(rows), cols)
    return t.to(device=device, dtype=dtype)


class ExactmemNetwork(nn.Module):
    """A float mirror of a :class:`NetworkSpec`; ``forward`` maps token ids ``[batch, n]``
    (int64) or vectors ``[batch, n, d]`` to the raw outputs ``[batch, n, d_out]``."""

    def __init__(self, skel: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.skel = skel
        self.layers = nn.ModuleList()
        for i in range(len(skel["layers"])):
            mod = nn.Module()
            for name, t in tensors.items():
                pre = f"layers.{i}."
                if name.startswith(pre):
                    _set_param(mod, name[len(pre):], t)
            self.layers.append(mod)

    # structure -------------------------------------------------------------------------
    def get_extra_state(self) -> str:
        return json.dumps(self.skel, sort_keys=True)

    def set_extra_state(self, state: Any) -> None:
        self.skel = json.loads(state) if isinstance(state, str) else dict(state)

    @property
    def seq_len(self) -> int:
        return int(self.skel["input"]["seq_len"])

    def read_positions(self) -> list[int]:
        pos = self.skel["readout"]["positions"]
        n = self.seq_len
        return [n - 1] if pos == "last" else [0] if pos == "first" else list(range(n))

    # forward ---------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, read_only: bool = False) -> torch.Tensor:
        """Raw outputs ``[batch, n, d_out]``; with ``read_only`` the token-wise layers after
        the last attention layer run on the read positions only (``[batch, positions, d]``)."""
        layers = self.skel["layers"]
        last_att = max((i for i, la in enumerate(layers) if la["type"] == "attention"),
                       default=-1)
        for i, (lay, mod) in enumerate(zip(layers, self.layers, strict=True)):
            if read_only and i == last_att + 1:
                x = x[:, self.read_positions()]
            kind = lay["type"]
            if kind == "embedding":
                n = x.shape[1]
                x = _param(mod, "table").t()[x]
                if lay.get("positions"):
                    x = x + _param(mod, "positions").t()[:n]
            elif kind == "linear":
                x = _affine(x, _param(mod, "weight"), _opt_param(mod, "bias"))
            elif kind == "feedforward":
                y = x
                for j, _ in enumerate(lay["bias"]):
                    if j > 0:
                        y = torch.relu(y)
                    m = _child(mod, f"maps.{j}")
                    y = _affine(y, _param(m, "weight"), _opt_param(m, "bias"))
                x = x + y if lay["residual"] else y
            else:
                x = _attention(x, lay, mod)
        return x

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Labels computed on the read positions only (same values as ``labels(forward(x))``)."""
        out = self.forward(x, read_only=True)
        if len(self.skel["layers"]) and out.shape[1] != len(self.read_positions()):
            out = out[:, self.read_positions()]
        return self._readout(out)

    def labels(self, outputs: torch.Tensor) -> torch.Tensor:
        """The readout: nearest integer (ties to even) of a scalar output, or the first
        argmax; int64 ``[batch]`` for one read position, ``[batch, n]`` for every position."""
        return self._readout(outputs[:, self.read_positions(), :])

    def _readout(self, sel: torch.Tensor) -> torch.Tensor:
        lab = (torch.round(sel[..., 0]) if self.skel["readout"]["kind"] == "scalar"
               else torch.argmax(sel, dim=-1)).to(torch.int64)
        return lab[:, 0] if self.skel["readout"]["positions"] != "every" else lab


def _set_param(mod: nn.Module, path: str, t: torch.Tensor) -> None:
    parts = path.split(".")
    for p in parts[:-1]:
        if p.isdigit():
            assert isinstance(mod, nn.ModuleList)
            while len(mod) <= int(p):
                mod.append(nn.Module())
            mod = mod[int(p)]
        else:
            if not hasattr(mod, p):
                mod.add_module(p, nn.ModuleList())
            mod = getattr(mod, p)
    mod.register_parameter(parts[-1], nn.Parameter(t, requires_grad=t.is_floating_point()))


def _param(mod: nn.Module, name: str) -> torch.Tensor:
    t = getattr(mod, name)
    assert isinstance(t, torch.Tensor)
    return t


def _opt_param(mod: nn.Module, name: str) -> torch.Tensor | None:
    return _param(mod, name) if hasattr(mod, name) else None


def _child(mod: nn.Module, path: str) -> nn.Module:
    return mod.get_submodule(path)


def _affine(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``x @ W.T + b``; weights stored narrower than ``x`` (int8 with int32 activations,
    bfloat16 with float32) are widened exactly in the matmul (:mod:`.lowp`)."""
    y = torch.matmul(x, w.t() if w.dtype == x.dtype else w.t().to(x.dtype))
    return y + (b if b.dtype == y.dtype else b.to(y.dtype)) if b is not None else y


def _divide(s: torch.Tensor, c: torch.Tensor | int) -> torch.Tensor:
    """``s / c``; for integer activations the quotient (exact when the int8 claim holds)."""
    return s / c if s.is_floating_point() else torch.div(s, c, rounding_mode="floor")


def _attention(x: torch.Tensor, lay: dict[str, Any], mod: nn.Module) -> torch.Tensor:
    keys = lay.get("keys")
    xk = x[:, keys, :] if keys is not None else x
    kpos = torch.tensor(keys if keys is not None else list(range(x.shape[1])), device=x.device)
    # allowed[k, j]: query j sees key k (every key, or k <= j under a causal mask)
    allowed = (kpos[:, None] <= torch.arange(x.shape[1], device=x.device)[None, :]) \
        if lay.get("causal") else torch.ones(len(kpos), x.shape[1], dtype=torch.bool,
                                             device=x.device)
    count = allowed.sum(dim=0).to(x.dtype)[None, :, None]  # [1, n, 1] keys per query
    scales = lay.get("scales") or ["1"] * int(lay["heads"])
    total: torch.Tensor | None = None
    for h in range(int(lay["heads"])):
        head = _child(mod, f"heads.{h}")
        wq, wk, wv, wo = (_param(head, part) for part in ("query", "key", "value", "output"))
        bq, bk, bv, bo = (_opt_param(head, f"{part}_bias")
                          for part in ("query", "key", "value", "output"))
        v = _affine(xk, wv, bv)  # [B, K, s]
        zero = not bool(torch.any(wk != 0)) or (not bool(torch.any(wq != 0)) and (
            bq is None or not bool(torch.any(bq != 0))))
        mask = allowed.to(v.dtype)[None]  # [1, K, n]
        if (lay["kind"] == "uniform" or zero) and not lay.get("causal"):
            agg = _divide(v.sum(dim=1, keepdim=True, dtype=v.dtype), v.shape[1])  # [B, 1, s]
        elif lay["kind"] == "uniform" or zero:
            agg = _divide(torch.matmul(mask.transpose(1, 2), v), count)  # [B, n, s]
        else:
            q = _affine(x, wq, bq)  # [B, n, s]
            k = _affine(xk, wk, bk)  # [B, K, s]
            scores = torch.matmul(k, q.transpose(1, 2))  # [B, K, n]: keys on rows (eq. 2)
            if scales[h] != "1":
                num, _, den = scales[h].partition("/")
                scores = scores * (float(Fraction(int(num), int(den or 1))))
            scores = scores.masked_fill(~allowed[None], float("-inf"))
            if lay["kind"] == "softmax":
                agg = torch.matmul(torch.softmax(scores, dim=1).transpose(1, 2), v)
            else:
                mask = (scores == scores.amax(dim=1, keepdim=True)).to(v.dtype)
                agg = _divide(torch.matmul(mask.transpose(1, 2), v),
                              mask.sum(dim=1, dtype=v.dtype)[..., None])
        out = _affine(agg, wo, bo)
        total = out if total is None else total + out
    assert total is not None
    return x + total if lay["residual"] else total.expand(x.shape[0], x.shape[1], -1)


def to_torch(spec: NetworkSpec, dtype: str | torch.dtype = torch.float64,
             device: str | torch.device = "cpu") -> ExactmemNetwork:
    """The float mirror of ``spec``, every weight rounded once to nearest into ``dtype``."""
    dt = dtype_of(dtype)
    fmt = format_of(dt)
    tensors: dict[str, torch.Tensor] = {}
    for name, m, is_vec in named_matrices(spec):
        t = _tensor(rounded_values(m, fmt), m.cols, dt, device)
        tensors[name] = t.reshape(-1) if is_vec else t
    return ExactmemNetwork(skeleton(spec), tensors).to(device)


def _exact_rows(t: torch.Tensor, name: str, is_vec: bool) -> list[list[Fraction]]:
    if not t.is_floating_point():
        raise NotExactError(f"{name}: expected a floating-point tensor, found {t.dtype}")
    vals = t.detach().to(device="cpu", dtype=torch.float64)  # widening: exact
    if not bool(torch.isfinite(vals).all()):
        raise NotExactError(f"{name}: the tensor holds an infinity or NaN")
    if is_vec:
        return [[Fraction(v)] for v in vals.reshape(-1).tolist()]
    if vals.dim() != 2:
        raise SpecError(f"{name}: expected a matrix, found shape {tuple(vals.shape)}")
    return [[Fraction(v) for v in row] for row in vals.tolist()]


def from_torch(obj: nn.Module | dict[str, Any]) -> NetworkSpec:
    """The exact :class:`NetworkSpec` of an :class:`ExactmemNetwork` or its ``state_dict``
    (floats are dyadic rationals: nothing is rounded)."""
    state = obj.state_dict() if isinstance(obj, nn.Module) else obj
    extra = state.get("_extra_state")
    if extra is None:
        raise SpecError("the state_dict has no '_extra_state' entry with the network structure "
                        "(export it from exactmem.exporters.torch.ExactmemNetwork)")
    skel = json.loads(extra) if isinstance(extra, str) else extra

    def get(name: str, is_vec: bool) -> list[list[Fraction]]:
        if name not in state:
            raise SpecError(f"the state_dict lacks the tensor {name!r}")
        return _exact_rows(state[name], name, is_vec)

    return spec_from_tensors(skel, get)


def dataset_tensor(ds: Dataset, dtype: torch.dtype, device: str | torch.device = "cpu",
                   ) -> torch.Tensor:
    """The dataset's inputs: int64 ``[N, n]`` token ids, or vectors ``[N, n, d]`` rounded
    once into ``dtype``."""
    if ds.inputs == "token-ids":
        return torch.tensor(ds.sequences, dtype=torch.int64, device=device)
    fmt = format_of(dtype)
    rows = [[[_round_float(x, fmt) for x in tok] for tok in seq] for seq in ds.sequences]
    return torch.tensor(rows, dtype=torch.float64).to(device=device, dtype=dtype)


def _round_float(x: Fraction, fmt: FloatFormat) -> float:
    v = round_to_format(x, fmt)
    return float(v) if v is not None else (float("inf") if x > 0 else float("-inf"))


@torch.no_grad()
def run_torch(net: ExactmemNetwork, ds: Dataset, batch_size: int = 4096,
              device: str | torch.device = "cpu") -> np.ndarray:
    """Outputs at the read positions, ``[N, positions, d_out]`` as float64 (exact widening)."""
    dtype = next(p.dtype for p in net.parameters())
    net = net.to(device)
    x = dataset_tensor(ds, dtype, device)
    pos = net.read_positions()
    chunks: list[np.ndarray] = []
    for start in range(0, ds.N, batch_size):
        out = net(x[start:start + batch_size])[:, pos, :]
        chunks.append(out.to(device="cpu", dtype=torch.float64).numpy())
    return np.concatenate(chunks, axis=0)


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def parameters_of(net: ExactmemNetwork) -> Sequence[torch.Tensor]:
    return list(net.parameters())


def save_state_dict(spec: NetworkSpec, path: str | Path, dtype: str = "float64") -> None:
    """``torch.save`` of the state_dict (structure in ``_extra_state``, a JSON string, so
    ``torch.load(path, weights_only=True)`` reads it); written atomically."""
    from exactmem.files.atomic import atomic_path

    state = to_torch(spec, dtype).state_dict()
    with atomic_path(path) as tmp:
        torch.save(state, str(tmp))


def load_network(path: str, device: str | torch.device = "cpu") -> ExactmemNetwork:
    """An :class:`ExactmemNetwork` from a saved state_dict."""
    state = torch.load(path, map_location=device, weights_only=True)
    spec = from_torch(state)
    dtype = next(v.dtype for k, v in state.items() if k != "_extra_state")
    net = to_torch(spec, dtype, device)
    net.load_state_dict(state)
    return net


class AttentionOnly(nn.Module):
    """Dana et al.'s experimental attention-only model (AISTATS 2025, §5; the authors'
    ``models.py``): token embedding ``e`` (dim ``d``), one shared compression ``d -> d_h``,
    a positional embedding (dim ``d_h``) added after it, ``heads`` separate one-head
    ``nn.MultiheadAttention(d_h, 1)`` with a causal mask, summed, decompressed ``d_h -> d``
    by one shared map and added to the residual ``e(t)``, unembedding ``d -> vocab``; the
    logits of the last position.  :func:`exactmem.importers.aot_fold.spec_from_aot` reads
    its ``state_dict`` as the exact :class:`NetworkSpec`."""

    def __init__(self, vocab: int, d: int, d_h: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.compress = nn.Linear(d, d_h, bias=False)
        self.pos = nn.Parameter(torch.randn(seq_len, d_h) / d_h ** 0.5)
        self.heads = nn.ModuleList(nn.MultiheadAttention(d_h, 1, batch_first=True)
                                   for _ in range(heads))
        self.decompress = nn.Linear(d_h, d, bias=False)
        self.unembed = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool),
                                                diagonal=1), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, vocab]`` at the last position of ``tokens`` ``[batch, n]``."""
        res = self.embed(tokens)
        z = self.compress(res) + self.pos[: tokens.shape[1]]
        full = self.get_buffer("mask")
        mask = full[: tokens.shape[1], : tokens.shape[1]]
        total = sum(att(z, z, z, attn_mask=mask, need_weights=False)[0] for att in self.heads)
        out = res + self.decompress(total)
        return self.unembed(out[:, -1])
