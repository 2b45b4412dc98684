"""Read a model file in the export layout as an exact :class:`NetworkSpec` (docs/model-layout.md).

A PyTorch ``state_dict`` (``.pt``, read with ``torch.load(..., weights_only=True)``), a
safetensors file, or an in-memory mapping of tensors is read *exactly*: every float
(float64, float32, float16, bfloat16) is a dyadic rational, widened to float64 without
rounding and turned into integer numerators over one power-of-two denominator per tensor.

The structure (layer kinds, flags, readout) is the JSON skeleton ``exactmem.skeleton/1``
of :mod:`exactmem.exporters.skeleton`: the ``_extra_state`` entry of a state dict, the
``exactmem.skeleton`` metadata of a safetensors file, or given explicitly.  The skeleton is
read strictly, and every tensor is checked before conversion (present, floating point,
finite, the expected shape), so unusable input is one message naming the tensor.

torch is imported only to read a ``.pt`` file or torch tensors; the files themselves are
read by :mod:`exactmem.importers.model_files`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.arith import ScaledMatrix, to_rational
from exactmem.errors import NotExactError, SpecError
from exactmem.exporters.skeleton import BIAS_PARTS, SKELETON_FORMAT
from exactmem.importers.model_files import (
    METADATA_KEY,
    SAFETENSORS_SUFFIXES,
    is_safetensors,
    load_safetensors_state,
    load_torch_state,
)
from exactmem.importers.model_kinds import (
    check_declared,
    unsupported_modules,
    unsupported_names,
)
from exactmem.model.spec import (
    ATTENTION_KINDS,
    READ_POSITIONS,
    READOUT_KINDS,
    Affine,
    Attention,
    Embedding,
    FeedForward,
    Head,
    Layer,
    Linear,
    NetworkSpec,
    Readout,
)

EXTRA_STATE = "_extra_state"


@dataclass(frozen=True, slots=True)
class ImportedModel:
    """The exact network read from ``source``, with the float dtypes its tensors had."""

    spec: NetworkSpec
    source: str
    dtypes: tuple[str, ...]
    tensors: int
    weights: int

    def __str__(self) -> str:
        return (f"{self.source}: {self.tensors} tensors, {self.weights} weights "
                f"({', '.join(self.dtypes)}), read exactly")


# the skeleton, read strictly ------------------------------------------------------------
_LAYER_KEYS = {"embedding": {"type"}, "linear": {"type", "bias"},
               "feedforward": {"type", "residual", "bias"},
               "attention": {"type", "kind", "residual", "keys", "heads"}}
_OPTIONAL_KEYS = {"embedding": {"positions"}, "attention": {"causal", "biases", "scales"}}


def _fields(obj: object, where: str, keys: set[str], optional: set[str] | None = None,
            ) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise SpecError(f"{where}: expected an object, found {type(obj).__name__}")
    missing, extra = sorted(keys - obj.keys()), sorted(obj.keys() - keys - (optional or set()))
    if missing or extra:
        raise SpecError(f"{where}: expected the fields {sorted(keys)}"
                        + (f"; missing {missing}" if missing else "")
                        + (f"; unknown {extra}" if extra else ""))
    return obj


def _bool(v: object, where: str) -> bool:
    if type(v) is not bool:
        raise SpecError(f"{where}: expected true or false, found {v!r}")
    return v


def _count(v: object, where: str, least: int = 1) -> int:
    if type(v) is not int or v < least:
        raise SpecError(f"{where}: expected an integer >= {least}, found {v!r}")
    return v


def _choice(v: object, where: str, options: tuple[str, ...]) -> str:
    if v not in options:
        raise SpecError(f"{where}: expected one of {list(options)}, found {v!r}")
    return str(v)


def read_skeleton(obj: object) -> dict[str, Any]:
    """``obj`` (a dict or JSON text) checked against ``exactmem.skeleton/1``; errors name the
    field.  Returns the skeleton as a dict."""
    if isinstance(obj, (str, bytes)):
        try:
            obj = json.loads(obj)
        except ValueError as exc:
            raise SpecError(f"the network structure is not valid JSON: {exc}") from None
    skel = _fields(obj, "structure", {"format", "input", "layers", "readout"})
    if skel["format"] != SKELETON_FORMAT:
        raise SpecError(f"structure.format: expected {SKELETON_FORMAT!r}, "
                        f"found {skel['format']!r}")
    inp = _fields(skel["input"], "structure.input", {"kind", "dim", "seq_len"})
    _choice(inp["kind"], "structure.input.kind", ("token-ids", "vectors"))
    _count(inp["dim"], "structure.input.dim")
    n = _count(inp["seq_len"], "structure.input.seq_len")
    if not isinstance(skel["layers"], list):
        raise SpecError("structure.layers: expected a list")
    for i, lay in enumerate(skel["layers"]):
        w = f"structure.layers[{i}]"
        kind = lay.get("type") if isinstance(lay, dict) else None
        if kind not in _LAYER_KEYS:
            raise SpecError(f"{w}.type: expected one of {sorted(_LAYER_KEYS)}, found {kind!r}")
        _fields(lay, w, _LAYER_KEYS[kind], _OPTIONAL_KEYS.get(kind))
        if kind == "embedding" and (i != 0 or inp["kind"] != "token-ids"):
            raise SpecError(f"{w}: an embedding is the first layer of a token-ids network only")
        if i == 0 and inp["kind"] == "token-ids" and kind != "embedding":
            raise SpecError(f"{w}: a token-ids network starts with an embedding layer")
        if kind == "embedding" and "positions" in lay:
            _bool(lay["positions"], f"{w}.positions")
        if kind == "linear":
            _bool(lay["bias"], f"{w}.bias")
        elif kind == "feedforward":
            _bool(lay["residual"], f"{w}.residual")
            if not isinstance(lay["bias"], list) or not lay["bias"]:
                raise SpecError(f"{w}.bias: expected a non-empty list (one flag per map)")
            for j, b in enumerate(lay["bias"]):
                _bool(b, f"{w}.bias[{j}]")
        elif kind == "attention":
            _choice(lay["kind"], f"{w}.kind", ATTENTION_KINDS)
            _bool(lay["residual"], f"{w}.residual")
            heads = _count(lay["heads"], f"{w}.heads")
            if "causal" in lay:
                _bool(lay["causal"], f"{w}.causal")
            biases = lay.get("biases", [])
            if not isinstance(biases, list) or len(set(biases)) != len(biases) or \
                    not set(biases) <= set(BIAS_PARTS):
                raise SpecError(f"{w}.biases: expected a list of distinct names among "
                                f"{list(BIAS_PARTS)}, found {biases!r}")
            scales = lay.get("scales", [])  # absent: every scale 1 (no list of `heads`)
            if "scales" in lay and (not isinstance(scales, list) or len(scales) != heads):
                raise SpecError(f"{w}.scales: expected a list of {heads} 'p/q' strings")
            for h, sc in enumerate(scales):
                try:
                    ok = isinstance(sc, str) and to_rational(sc, f"{w}.scales[{h}]") > 0
                except NotExactError as exc:
                    raise SpecError(str(exc)) from None
                if not ok:
                    raise SpecError(f"{w}.scales[{h}]: expected a positive 'p/q' string, "
                                    f"found {sc!r}")
            keys = lay["keys"]
            if keys is not None:
                if not isinstance(keys, list) or not keys:
                    raise SpecError(f"{w}.keys: expected null or a non-empty list of positions")
                for k in keys:
                    if type(k) is not int or not 0 <= k < n:
                        raise SpecError(f"{w}.keys: expected positions in 0..{n - 1}, "
                                        f"found {k!r}")
    ro = _fields(skel["readout"], "structure.readout", {"kind", "positions"})
    _choice(ro["kind"], "structure.readout.kind", READOUT_KINDS)
    _choice(ro["positions"], "structure.readout.positions", READ_POSITIONS)
    return skel


def iter_tensor_names(skel: dict[str, Any]) -> Iterator[str]:
    """Every tensor name the skeleton calls for, in layout order, one at a time."""
    for i, lay in enumerate(skel["layers"]):
        pre = f"layers.{i}."
        if lay["type"] == "embedding":
            yield pre + "table"
            if lay.get("positions"):
                yield pre + "positions"
        elif lay["type"] == "linear":
            yield pre + "weight"
            if lay["bias"]:
                yield pre + "bias"
        elif lay["type"] == "feedforward":
            for j, b in enumerate(lay["bias"]):
                yield f"{pre}maps.{j}.weight"
                if b:
                    yield f"{pre}maps.{j}.bias"
        else:
            parts = ("query", "key", "value", "output") + tuple(
                f"{b}_bias" for b in lay.get("biases", []))
            for h in range(lay["heads"]):
                yield from (f"{pre}heads.{h}.{part}" for part in parts)


def tensor_names(skel: dict[str, Any]) -> list[str]:
    """Every tensor name the skeleton calls for, in layout order."""
    return list(iter_tensor_names(skel))


# tensors to exact matrices ---------------------------------------------------------------
def _as_float64(name: str, value: object) -> tuple[np.ndarray, str]:
    """The tensor as a float64 array (an exact widening) and its original dtype name."""
    if type(value).__module__.split(".")[0] == "torch":
        import torch

        if not isinstance(value, torch.Tensor):
            raise SpecError(f"{name}: expected a tensor, found {type(value).__name__}")
        if not value.is_floating_point():
            raise NotExactError(f"{name}: expected a floating-point tensor, found {value.dtype}")
        dtype = str(value.dtype).removeprefix("torch.")
        return value.detach().to(device="cpu", dtype=torch.float64).numpy(), dtype
    if isinstance(value, np.ndarray):
        if value.dtype not in (np.float64, np.float32, np.float16):
            raise NotExactError(f"{name}: expected a float64, float32 or float16 array, "
                                f"found {value.dtype}")
        return value.astype(np.float64), str(value.dtype)
    raise SpecError(f"{name}: expected a tensor or a numpy array, found {type(value).__name__}")


def _exact(name: str, a: np.ndarray) -> ScaledMatrix:
    """``a`` (float64, 1-D = a column, or 2-D) as integers over one power-of-two denominator."""
    if not np.isfinite(a).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
        raise NotExactError(f"{name}: holds {a[bad]} at index {list(bad)}; weights must be "
                            "finite")
    rows = a.reshape(-1, 1) if a.ndim == 1 else a
    ratios = [[float(x).as_integer_ratio() for x in row] for row in rows.tolist()]
    den = max((d for row in ratios for _, d in row), default=1)  # all powers of two
    num = tuple(tuple(p * (den // d) for p, d in row) for row in ratios)
    return ScaledMatrix(num, den, rows.shape[1]).reduced()


class _Reader:
    """Checks shapes while walking the layers, then converts each tensor exactly."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    def mat(self, name: str, rows: int | None, cols: int | None) -> ScaledMatrix:
        a = self.arrays[name]
        if a.ndim != 2 or (rows is not None and a.shape[0] != rows) or \
                (cols is not None and a.shape[1] != cols):
            want = f"({'any' if rows is None else rows}, {'any' if cols is None else cols})"
            raise SpecError(f"{name}: expected shape {want}, found {tuple(a.shape)}")
        return _exact(name, a)

    def vec(self, name: str, size: int) -> ScaledMatrix:
        a = self.arrays[name]
        if a.shape != (size,):
            raise SpecError(f"{name}: expected shape ({size},), found {tuple(a.shape)}")
        return _exact(name, a)

    def affine(self, pre: str, has_bias: bool, d: int) -> Affine:
        w = self.mat(pre + "weight", None, d)
        return Affine(w, self.vec(pre + "bias", w.shape[0]) if has_bias else None)


def _layer(r: _Reader, i: int, lay: dict[str, Any], d: int, vocab: int, n: int) -> Layer:
    pre = f"layers.{i}."
    if lay["type"] == "embedding":
        table = r.mat(pre + "table", None, vocab)
        return Embedding(table, r.mat(pre + "positions", table.shape[0], n)
                         if lay.get("positions") else None)
    if lay["type"] == "linear":
        return Linear(r.affine(pre, lay["bias"], d))
    if lay["type"] == "feedforward":
        maps: list[Affine] = []
        for j, b in enumerate(lay["bias"]):
            maps.append(r.affine(f"{pre}maps.{j}.", b, maps[-1].out_dim if maps else d))
        if lay["residual"] and maps[-1].out_dim != d:
            raise SpecError(f"{pre}maps.{len(maps) - 1}.weight: a residual feed-forward block "
                            f"keeps the dimension {d}, found {maps[-1].out_dim} outputs")
        return FeedForward(tuple(maps), residual=lay["residual"])
    heads: list[Head] = []
    for h in range(lay["heads"]):
        hp = f"{pre}heads.{h}."
        q = r.mat(hp + "query", None, d)
        k = r.mat(hp + "key", q.shape[0], d)
        v = r.mat(hp + "value", None, d)
        sizes = {"query": q.shape[0], "key": k.shape[0], "value": v.shape[0], "output": d}
        bq, bk, bv, bo = (r.vec(f"{hp}{part}_bias", sizes[part])
                          if part in lay.get("biases", []) else None for part in BIAS_PARTS)
        scale = to_rational(lay["scales"][h] if "scales" in lay else "1", f"{pre}scales[{h}]")
        heads.append(Head(q, k, v, r.mat(hp + "output", d, v.shape[0]), query_bias=bq,
                          key_bias=bk, value_bias=bv, output_bias=bo, scale=scale))
    keys = tuple(lay["keys"]) if lay["keys"] is not None else None
    try:
        return Attention(tuple(heads), kind=lay["kind"], residual=lay["residual"], keys=keys,
                         causal=lay.get("causal", False))
    except SpecError as exc:
        raise SpecError(f"layers.{i} (attention): {exc}") from None


def spec_from_state(state: Mapping[str, Any], skel: object | None = None,
                    source: str = "the state dict") -> ImportedModel:
    """The exact network of ``state`` (tensor name -> torch tensor or numpy array) laid out
    as docs/model-layout.md describes.  ``skel`` overrides the ``_extra_state`` entry."""
    if skel is None:
        skel = state.get(EXTRA_STATE)
        if skel is None:
            refusal = unsupported_names(state, source)
            if refusal is not None:
                raise refusal
            raise SpecError(f"{source} has no network structure: no '{EXTRA_STATE}' entry "
                            "(give the structure: --structure FILE or skeleton=; see "
                            "docs/model-layout.md)")
    sk = read_skeleton(skel)
    given = {k for k in state if k != EXTRA_STATE}
    refusal = unsupported_names(given, source)
    if refusal is not None:
        raise refusal
    check_declared(sk, given, iter_tensor_names(sk), source)  # before any list is sized
    names = tensor_names(sk)
    missing = [n for n in names if n not in given]
    if missing:
        raise SpecError(f"{source} lacks the tensors {missing[:8]}"
                        + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""))
    extra = sorted(given - set(names))
    if extra:
        raise SpecError(f"{source} has tensors the structure does not describe: {extra[:8]}"
                        " (a bias whose flag is false, or a layer missing from the structure?)")
    arrays: dict[str, np.ndarray] = {}
    dtypes: set[str] = set()
    for name in names:
        arrays[name], dt = _as_float64(name, state[name])
        dtypes.add(dt)
    reader = _Reader(arrays)
    inp = sk["input"]
    d = vocab = int(inp["dim"])
    layers: list[Layer] = []
    for i, lay in enumerate(sk["layers"]):
        layer = _layer(reader, i, lay, d, vocab, int(inp["seq_len"]))
        layers.append(layer)
        d = layer.out_dim
    if sk["readout"]["kind"] == "scalar" and d != 1:
        raise SpecError(f"a scalar readout needs output dimension 1, the last layer gives {d}")
    spec = NetworkSpec(input_kind=inp["kind"], input_dim=int(inp["dim"]),
                       seq_len=int(inp["seq_len"]), layers=tuple(layers),
                       readout=Readout(sk["readout"]["kind"], sk["readout"]["positions"]))
    weights = sum(int(a.size) for a in arrays.values())
    return ImportedModel(spec, source, tuple(sorted(dtypes)), len(names), weights)


def read_model(source: str | Path | Mapping[str, Any] | Any,
               skeleton: object | None = None) -> ImportedModel:
    """Read ``source`` exactly: a ``.pt`` state dict file, a safetensors file, a state dict
    mapping, or a module with ``state_dict()``.  ``skeleton`` (a dict, JSON text) overrides
    the structure stored with the tensors."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise SpecError(f"{path}: no such model file")
        if path.suffix.lower() in SAFETENSORS_SUFFIXES or is_safetensors(path):
            arrays, meta = load_safetensors_state(path)
            refusal = unsupported_names(arrays, str(path))
            if refusal is not None:
                raise refusal
            if skeleton is None and meta is None:
                raise SpecError(f"{path} has no network structure: no '{METADATA_KEY}' "
                                "metadata (give the structure: --structure FILE or "
                                "skeleton=; see docs/model-layout.md)")
            return spec_from_state(arrays, skeleton if skeleton is not None else meta,
                                   str(path))
        return spec_from_state(load_torch_state(path), skeleton, str(path))
    if isinstance(source, Mapping):
        return spec_from_state(source, skeleton)
    state_dict = getattr(source, "state_dict", None)
    if callable(state_dict):
        refusal = unsupported_modules(source, f"the module {type(source).__name__}")
        if refusal is not None:
            raise refusal
        return spec_from_state(state_dict(), skeleton, f"the module {type(source).__name__}")
    raise SpecError(f"expected a model file path, a state dict or a module, found "
                    f"{type(source).__name__}")
