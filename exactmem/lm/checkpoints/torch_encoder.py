"""A stack of torch ``nn.TransformerEncoderLayer`` used as a causal language model, as an
:class:`~exactmem.lm.decoder.LMSpec` (layout: docs/trained-models.md, "torch encoder
stacks").

The checkpoint is ``torch.save({"config": {...}, "state_dict": model.state_dict()}, path)``
of :func:`reference_module` (copy it): token embedding ``tok``, learned positions ``pos``,
``layers.{i}`` encoder layers (``batch_first=True``, ``dropout=0``) run with a causal mask, an
optional final ``norm`` and a bias-free linear ``head``.  The norms (``norm1``, ``norm2`` of
every layer and the final one) are all ``nn.LayerNorm`` or, with ``config["norm"] ==
"rmsnorm"``, all ``nn.RMSNorm`` (:func:`save_encoder` writes the checkpoint of a live module
and names a norm of the other kind).  An RMSNorm built with ``eps=None`` uses
``torch.finfo`` of its computation type at run time (``2**-23`` for float32, float16 and
bfloat16 inputs, ``2**-52`` for float64); the importer stores the eps of the checkpoint's own
dtype (that of ``tok.weight``: the dtype the stack runs in), and the cross-check runs the
float64 module with that eps made explicit (:func:`norm_eps`).  The encoder layer packs
q | k | v in ``self_attn.in_proj_weight`` ``[3d, d]``; ``norm_first=True`` is pre-LN,
``False`` post-LN (``x = norm1(x + attn(x)); x = norm2(x + ff(x))``); the activation is
``"relu"`` or ``"gelu"`` (torch's erf form).  ``nn.Linear`` weights ``[out, in]`` are
transposed to the spec's ``[in, out]``.  :func:`encoder_logits` is the module's own forward
pass (float64), for the cross-check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import SpecError
from exactmem.lm.decoder import LMSpec
from exactmem.optional import reads_as, require

INTS = ("vocab_size", "context", "d_model", "heads", "layers", "d_ff")
CONFIG = (*INTS, "norm_first", "activation", "layer_norm_eps", "final_norm")
NORMS = ("layernorm", "rmsnorm")  # config["norm"]; absent: layernorm
ACTIVATION = {"relu": "relu", "gelu": "gelu_erf"}
MODULES = ("tok", "pos", "layers", "head")  # the reference layout's submodules
LAYER = {"norm1": "ln1", "norm2": "ln2", "self_attn.out_proj": "attn.proj",
         "linear1": "mlp.fc", "linear2": "mlp.proj"}


def _torch() -> Any:
    return require("torch", "reading a torch encoder checkpoint", extra="trained")


def reference_module(config: dict[str, Any]) -> Any:
    """The reference causal LM over ``nn.TransformerEncoderLayer`` (copy it to train your
    own; only its state dict and ``config`` are read)."""
    torch = _torch()
    nn = torch.nn

    class EncoderLM(nn.Module):  # type: ignore[name-defined]
        def __init__(self, c: dict[str, Any]) -> None:
            super().__init__()
            d, eps = c["d_model"], c["layer_norm_eps"]
            self.rms = c.get("norm", "layernorm") == "rmsnorm"
            self.tok = nn.Embedding(c["vocab_size"], d)
            self.pos = nn.Embedding(c["context"], d)
            self.layers = nn.ModuleList(nn.TransformerEncoderLayer(
                d, c["heads"], c["d_ff"], dropout=0.0, activation=c["activation"],
                layer_norm_eps=eps, batch_first=True, norm_first=c["norm_first"])
                for _ in range(c["layers"]))
            norm = (lambda: nn.RMSNorm(d, eps=eps)) if self.rms else (
                lambda: nn.LayerNorm(d, eps=eps))
            if self.rms:
                for layer in self.layers:
                    layer.norm1, layer.norm2 = norm(), norm()
            self.norm = norm() if c["final_norm"] else None
            self.head = nn.Linear(d, c["vocab_size"], bias=False)

        def forward(self, idx: Any) -> Any:
            n = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(n))
            mask = nn.Transformer.generate_square_subsequent_mask(n, dtype=x.dtype)
            # torch's inference fast path of the encoder layer (eval, no grad) computes a
            # LayerNorm from norm1.weight and norm1.bias whatever norm1 is: off for RMSNorm
            fast = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(fast and not self.rms)
            try:
                for layer in self.layers:
                    x = layer(x, src_mask=mask, is_causal=True)
            finally:
                torch.backends.mha.set_fastpath_enabled(fast)
            return self.head(x if self.norm is None else self.norm(x))

    return EncoderLM(config)


def read_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config, state dict)`` of a torch encoder checkpoint; the config checked."""
    torch = _torch()
    try:
        ckpt = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one message
        raise SpecError(f"{path}: cannot read a torch checkpoint: {exc}") from None
    if not isinstance(ckpt, dict) or set(ckpt) != {"config", "state_dict"}:
        raise SpecError(f"{path}: expected a torch encoder checkpoint (a dict with exactly "
                        "'config' and 'state_dict')")
    cfg, state = ckpt["config"], ckpt["state_dict"]
    if not isinstance(cfg, dict) or set(cfg) - {"norm"} != set(CONFIG):
        raise SpecError(f"{path}: config must have exactly the keys {', '.join(CONFIG)} "
                        "(and optionally norm)")
    if cfg.get("norm", "layernorm") not in NORMS:
        raise SpecError(f"{path}: config.norm: expected 'layernorm' or 'rmsnorm', found "
                        f"{cfg['norm']!r}")
    rms = cfg.get("norm") == "rmsnorm"
    if any(type(cfg[k]) is not int or cfg[k] < 1 for k in INTS):
        raise SpecError(f"{path}: config: {', '.join(INTS)} must be positive integers")
    if type(cfg["norm_first"]) is not bool or type(cfg["final_norm"]) is not bool:
        raise SpecError(f"{path}: config: norm_first and final_norm must be true or false")
    if cfg["activation"] not in ACTIVATION:
        raise SpecError(f"{path}: config.activation: expected 'relu' or 'gelu' (erf form), "
                        f"found {cfg['activation']!r}")
    if type(cfg["layer_norm_eps"]) is not float and not (rms and cfg["layer_norm_eps"] is None):
        raise SpecError(f"{path}: config.layer_norm_eps: expected a float (or None for "
                        "RMSNorm: torch's default)")
    if rms and cfg["layer_norm_eps"] == 0.0:
        raise SpecError(f"{path}: config.layer_norm_eps is 0: an RMSNorm input of all zeros "
                        "would divide by 0, so the function is not defined everywhere; not "
                        "certifying")
    if not isinstance(state, dict):
        raise SpecError(f"{path}: state_dict: expected a dict of tensors")
    return cfg, state


def is_torch_encoder(path: Path) -> bool:
    return reads_as(path, read_checkpoint)


def _names(cfg: dict[str, Any]) -> dict[str, str]:
    names = {"tok.weight": "wte", "pos.weight": "wpe", "head.weight": "head"}
    if cfg["final_norm"]:
        names.update({"norm.weight": "lnf.weight", "norm.bias": "lnf.bias"})
    for i in range(cfg["layers"]):
        for kind in ("weight", "bias"):
            names[f"layers.{i}.self_attn.in_proj_{kind}"] = f"h{i}.attn.{kind}"
            for theirs, ours in LAYER.items():
                names[f"layers.{i}.{theirs}.{kind}"] = f"h{i}.{ours}.{kind}"
    if cfg.get("norm") == "rmsnorm":  # nn.RMSNorm has no bias
        names = {k: v for k, v in names.items() if not _norm_bias(k)}
    return names


def _norm_bias(key: str) -> bool:
    return key == "norm.bias" or key.endswith((".norm1.bias", ".norm2.bias"))


def norm_eps(cfg: dict[str, Any], state: dict[str, Any]) -> float:
    """The eps the stack's norms use: the stored number, or for ``nn.RMSNorm(eps=None)``
    ``torch.finfo`` of the computation type of the checkpoint's dtype (float32 for float32,
    float16 and bfloat16; float64 for float64), as ``F.rms_norm`` picks it at run time."""
    if cfg["layer_norm_eps"] is not None:
        return float(cfg["layer_norm_eps"])
    torch = _torch()
    dtype = getattr(state.get("tok.weight"), "dtype", torch.float32)
    return float(torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps)


def load_torch_encoder(path: str | Path) -> LMSpec:
    """Read a torch encoder checkpoint; unknown tensors (named), shapes that do not match
    the config, NaN and infinite weights refused (:class:`SpecError`)."""
    cfg, state = read_checkpoint(path)
    names = _names(cfg)
    tensors: dict[str, np.ndarray] = {}
    for key, value in state.items():
        if key not in names and _norm_bias(key):
            raise SpecError(f"{path}: {key.removesuffix('.bias')} has a bias, so it is not an "
                            "nn.RMSNorm, but config.norm is rmsnorm (every norm of the stack "
                            "is of one kind)")
        if key not in names:
            raise SpecError(f"{path}: tensor {key} is not part of the torch encoder layout "
                            "(unsupported layer)")
        if not hasattr(value, "is_floating_point") or not value.is_floating_point():
            raise SpecError(f"{path}: state dict entry {key} is not a float tensor")
        arr = value.double().numpy()
        ours = names[key]
        if arr.ndim == 2 and ours not in ("wte", "wpe", "head"):
            arr = arr.T  # nn.Linear and in_proj_weight store [out, in]
        tensors[ours] = np.ascontiguousarray(arr)
    return LMSpec(vocab_size=cfg["vocab_size"], context=cfg["context"], d_model=cfg["d_model"],
                  heads=cfg["heads"], layers=cfg["layers"], d_ff=cfg["d_ff"],
                  activation=ACTIVATION[cfg["activation"]],  # type: ignore[arg-type]
                  layer_norm_eps=norm_eps(cfg, state), tied_head=False, tensors=tensors,
                  norm_first=cfg["norm_first"], final_norm=cfg["final_norm"],
                  norm=cfg.get("norm", "layernorm"))


def encoder_logits(path: str | Path, tokens: np.ndarray) -> np.ndarray:
    """The reference module's own forward pass (float64, causal mask) with the checkpoint's
    state dict: logits ``[N, n, vocab]``.  The norms' eps is :func:`norm_eps` (for
    ``nn.RMSNorm(eps=None)`` the one the checkpoint's dtype runs with, not float64's)."""
    torch = _torch()
    cfg, state = read_checkpoint(path)
    model = reference_module({**cfg, "layer_norm_eps": norm_eps(cfg, state)}).double().eval()
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise SpecError(f"{path}: the state dict does not fit the config: "
                        f"{' '.join(x.strip() for x in first[:3])}") from None
    with torch.no_grad():
        out = model(torch.as_tensor(np.asarray(tokens), dtype=torch.long))
    return np.asarray(out.double().numpy())


def encoder_norm_kind(model: Any) -> tuple[str, float | None]:
    """``(norm kind, eps)`` of a live reference-layout module: every ``layers.{i}.norm1`` /
    ``norm2`` and the final ``norm`` must be ``nn.LayerNorm`` or every one ``nn.RMSNorm``,
    all with one eps; otherwise a :class:`SpecError` naming the first module that differs."""
    nn = _torch().nn
    kinds = {nn.LayerNorm: "layernorm", nn.RMSNorm: "rmsnorm"}
    found: list[tuple[str, str, Any]] = []
    for name, mod in model.named_modules():
        if name == "norm" or name.endswith((".norm1", ".norm2")):
            if type(mod) not in kinds:
                raise SpecError(f"module {name} is a {type(mod).__name__}: expected "
                                "nn.LayerNorm or nn.RMSNorm")
            found.append((name, kinds[type(mod)], mod.eps))
    if not found:
        raise SpecError("the module has no norms in the torch encoder layout")
    first, kind, eps = found[0]
    for name, k, e in found[1:]:
        if k != kind:
            raise SpecError(f"module {name} is {type(model.get_submodule(name)).__name__} "
                            f"but {first} is {type(model.get_submodule(first)).__name__}: "
                            "every norm of the stack must be of one kind")
        if e != eps:
            raise SpecError(f"module {name} has eps {e!r} but {first} has {eps!r}: every norm "
                            "of the stack must have one eps")
    return kind, eps


def save_encoder(model: Any, config: dict[str, Any], path: str | Path) -> Path:
    """Save a live module of the reference layout (:func:`reference_module`, its norms
    possibly replaced by ``nn.RMSNorm``) as a checkpoint: ``config`` with ``norm`` and
    ``layer_norm_eps`` read from the modules (:func:`encoder_norm_kind`)."""
    kind, eps = encoder_norm_kind(model)
    cfg = {**config, "norm": kind, "layer_norm_eps": eps}
    path = Path(path)
    _torch().save({"config": cfg, "state_dict": model.state_dict()}, str(path))
    return path


def save_live_encoder(module: Any, path: str | Path) -> Path:
    """Write the checkpoint of a live module of the reference layout, its config read from
    the layers (head count, norm placement, activation, widths and norms)."""
    nn = _torch().nn
    layers = list(module.layers)
    if not layers or not all(isinstance(la, nn.TransformerEncoderLayer) for la in layers):
        raise SpecError("module.layers: expected nn.TransformerEncoderLayer modules")
    first = layers[0]

    def activation(la: Any) -> str:
        act = getattr(la, "activation", None)
        name = getattr(act, "__name__", type(act).__name__).lower()
        if "gelu" in name and getattr(act, "approximate", "none") == "none":
            return "gelu"
        if "relu" in name:
            return "relu"
        raise SpecError(f"an encoder layer's activation {name!r}: expected ReLU or GELU "
                        "(erf form)")

    readings = {(la.norm_first, activation(la), la.self_attn.num_heads) for la in layers}
    if len(readings) != 1:
        raise SpecError("the encoder layers differ in norm placement, activation or head "
                        "count; every layer of the stack must be read one way")
    norm_first, act, heads = readings.pop()
    config = {"vocab_size": module.tok.num_embeddings, "context": module.pos.num_embeddings,
              "d_model": module.tok.embedding_dim, "heads": heads, "layers": len(layers),
              "d_ff": first.linear1.out_features, "norm_first": norm_first,
              "activation": act, "final_norm": getattr(module, "norm", None) is not None}
    return save_encoder(module, config, path)
