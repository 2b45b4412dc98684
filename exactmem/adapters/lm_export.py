"""Exporting a certified language model (``exactmem.lm-certificate/1``,
docs/trained-models.md, "Exporting a certified language model").

The files hold the stored weights of :class:`~exactmem.model.lm_spec.LMSpec` under its tensor
names, rounded once to nearest into ``float32`` (or exactly, ``float64``: every stored weight
is a float64), and the model's shape as ``config`` (every LMSpec field but the tensors):

* safetensors: the tensors, the config as JSON in the metadata (``exactmem.config``);
* torch: ``{"config", "state_dict", "exactmem"}`` saved with ``torch.save`` (loadable with
  ``weights_only=True``);
* ONNX (opset 17): input ``tokens`` (int64 ``[batch, n]``, ``n <= context``), outputs
  ``logits`` ``[batch, n, vocab]`` and ``labels`` (``ArgMax``, int64 ``[batch, n]``).  The
  function of :mod:`exactmem.model.lm_spec` op for op: LayerNorm with the population variance
  and ``eps`` as stored (``ReduceMean``, ``Sqrt``, ``Div``; not ``LayerNormalization``,
  whose ``epsilon`` attribute is a float32), RMSNorm, the causal mask (``Where`` key > query
  gives ``-inf``), scores divided by ``sqrt(d_head)``, ``Softmax`` over the keys, GELU tanh
  with the decimal ``0.044715`` and ``sqrt(2/pi)`` as constants, GELU erf with the ``Erf`` op
  in float32; onnxruntime has no float64 ``Erf``, so the float64 graph sums erf's series of
  positive terms ``erf(z) = 2/sqrt(pi) exp(-z^2) sum_k 2^k z^(2k+1) / (2k+1)!!`` (``z``
  clipped to ``|z| <= 5.9``, where ``erfc < 2^-53``), accurate to a few ulps.

A written file is then run in its own runtime (onnxruntime; torch for torch and
safetensors, reloaded from disk) and its logits judged: a position counts when the label is
the unique maximum of its logits.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import CertificateError, SpecError
from exactmem.model.lm_spec import LMSpec

DTYPES = ("float64", "float32")
TAG = "exactmem.lm-export/1"
CELLS = 4_000_000  # activation values per batch
ERF_CLIP = 5.9


def config(spec: LMSpec) -> dict[str, Any]:
    """Every LMSpec field but the tensors (``layer_norm_eps`` is the stored float exactly)."""
    return {k: getattr(spec, k) for k in (
        "vocab_size", "context", "d_model", "heads", "layers", "d_ff", "activation",
        "layer_norm_eps", "tied_head", "norm_first", "final_norm", "norm")}


def spec_of(cert: dict[str, Any]) -> LMSpec:
    """The LMSpec of a certificate (one-line error when its model cannot be read)."""
    from exactmem.certificate.lm import spec_from_lm_certificate

    try:
        return spec_from_lm_certificate(cert)
    except SpecError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise CertificateError(f"model: cannot read the language model ({type(exc).__name__}: "
                               f"{exc})") from None


def tokens_of(spec: LMSpec, ds: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, labels)`` ``[N, n]`` of a next-token dataset the model can run."""
    if (ds.task, ds.inputs) != ("seq2seq", "token-ids"):
        raise SpecError(f"dataset: a language model needs a seq2seq token-id dataset, found "
                        f"{ds.task}, {ds.inputs}")
    toks = np.array(ds.sequences, dtype=np.int64)
    labels = np.array(ds.labels, dtype=np.int64)
    if toks.shape[1] > spec.context:
        raise SpecError(f"dataset: sequences of {toks.shape[1]} tokens exceed the context of "
                        f"{spec.context}")
    if min(toks.min(), labels.min()) < 0 or max(toks.max(), labels.max()) >= spec.vocab_size:
        raise SpecError(f"dataset: a token or label outside the vocabulary of {spec.vocab_size}")
    return toks, labels


def _arrays(spec: LMSpec, dtype: str) -> dict[str, np.ndarray]:
    want = np.float64 if dtype == "float64" else np.float32
    return {k: np.ascontiguousarray(v.astype(want)) for k, v in sorted(spec.tensors.items())}


def write(fmt: str, spec: LMSpec, path: Path, dtype: str, meta: dict[str, str]) -> None:
    """Write ``spec`` in ``fmt`` and ``dtype`` to ``path`` (the caller makes it atomic)."""
    meta = {"exactmem.format": TAG, "exactmem.dtype": dtype, **meta,
            "exactmem.config": json.dumps(config(spec), sort_keys=True)}
    if fmt == "safetensors":
        from safetensors.numpy import save_file

        save_file(_arrays(spec, dtype), str(path), metadata=meta)
    elif fmt == "torch":
        import torch

        state = {k: torch.from_numpy(v) for k, v in _arrays(spec, dtype).items()}
        torch.save({"config": config(spec), "state_dict": state, "exactmem": meta}, str(path))
    else:
        import onnx

        model = build_onnx(spec, dtype)
        onnx.helper.set_model_props(model, meta)
        onnx.save_model(model, str(path))


# ONNX ------------------------------------------------------------------------------------
def _erf64(g: Any, z: str) -> str:
    """erf of float64 ``z`` by its series of positive terms (module docstring)."""
    z = g.op("Clip", [z, g.scalar(-ERF_CLIP), g.scalar(ERF_CLIP)])
    y = g.op("Mul", [z, z])
    y2 = g.op("Mul", [y, g.scalar(2.0)])
    k, term, total = 0, ERF_CLIP, ERF_CLIP
    while term > total * 2.0 ** -56:
        k += 1
        term *= 2 * ERF_CLIP ** 2 / (2 * k + 1)
        total += term
    acc = g.scalar(1.0)
    for j in range(k, 0, -1):  # nested: 1 + 2y/3 (1 + 2y/5 (1 + ... (1 + 2y/(2k+1))))
        acc = g.op("Add", [g.scalar(1.0), g.op("Div", [g.op("Mul", [acc, y2]),
                                                      g.scalar(float(2 * j + 1))])])
    front = g.op("Mul", [g.op("Exp", [g.op("Neg", [y])]), g.scalar(2 / math.sqrt(math.pi))])
    erf = g.op("Mul", [g.op("Mul", [front, z]), acc])
    return g.op("Clip", [erf, g.scalar(-1.0), g.scalar(1.0)])


def _activation(g: Any, spec: LMSpec, x: str) -> str:
    if spec.activation == "relu":
        return g.op("Relu", [x])
    if spec.activation == "gelu_tanh":
        cube = g.op("Mul", [g.op("Mul", [x, x]), x])
        inner = g.op("Add", [x, g.op("Mul", [g.scalar(0.044715), cube])])
        t = g.op("Tanh", [g.op("Mul", [g.scalar(math.sqrt(2 / math.pi)), inner])])
    else:
        z = g.op("Div", [x, g.scalar(math.sqrt(2))])
        t = g.op("Erf", [z]) if g.dtype == "float32" else _erf64(g, z)
    return g.op("Mul", [g.op("Mul", [g.scalar(0.5), x]), g.op("Add", [g.scalar(1.0), t])])


def _norm(g: Any, spec: LMSpec, x: str, name: str) -> str:
    eps = g.scalar(spec.layer_norm_eps)
    if spec.norm == "rmsnorm":
        c = x
        ms = g.op("ReduceMean", [g.op("Mul", [x, x])], axes=[-1], keepdims=1)
    else:
        c = g.op("Sub", [x, g.op("ReduceMean", [x], axes=[-1], keepdims=1)])
        ms = g.op("ReduceMean", [g.op("Mul", [c, c])], axes=[-1], keepdims=1)
    y = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [ms, eps])])])
    y = g.op("Mul", [y, _t(g, spec, name + ".weight")])
    return g.op("Add", [y, _t(g, spec, name + ".bias")])


def _t(g: Any, spec: LMSpec, name: str, part: slice | None = None) -> str:
    a = spec.get(name)
    if part is not None:
        a = a[..., part]
    return g.const(name.replace(".", "_"), np.ascontiguousarray(a.astype(g.np)))


def _affine(g: Any, spec: LMSpec, x: str, name: str, part: slice | None = None) -> str:
    y = g.op("MatMul", [x, _t(g, spec, name + ".weight", part)])
    return g.op("Add", [y, _t(g, spec, name + ".bias", part)])


def _attention(g: Any, spec: LMSpec, x: str, p: str, hidden: str) -> str:
    d, h, dh = spec.d_model, spec.heads, spec.d_head
    split = g.ints([0, 0, h, dh])
    q, k, v = (g.op("Reshape", [_affine(g, spec, x, p + "attn", slice(j * d, (j + 1) * d)),
                                split]) for j in range(3))  # [B, n, h, dh]
    q = g.op("Transpose", [q], perm=[0, 2, 1, 3])
    kt = g.op("Transpose", [k], perm=[0, 2, 3, 1])
    s = g.op("Div", [g.op("MatMul", [q, kt]), g.scalar(math.sqrt(dh))])  # [B, h, query, key]
    s = g.op("Where", [hidden, g.scalar(-math.inf), s])
    w = g.op("Softmax", [s], axis=-1)
    o = g.op("MatMul", [w, g.op("Transpose", [v], perm=[0, 2, 1, 3])])
    o = g.op("Reshape", [g.op("Transpose", [o], perm=[0, 2, 1, 3]), g.ints([0, 0, d])])
    return _affine(g, spec, o, p + "attn.proj")


def build_onnx(spec: LMSpec, dtype: str) -> Any:
    """The ONNX ``ModelProto`` of ``spec`` in ``dtype`` (module docstring)."""
    import onnx

    from exactmem.adapters.onnx_export import OPSET, _Graph

    g = _Graph(dtype)
    one = g.const("one", np.array(1, dtype=np.int64))
    n = g.op("Gather", [g.op("Shape", ["tokens"]), one], axis=0)
    pos = g.op("Range", [g.const("zero", np.array(0, dtype=np.int64)), n, one])
    hidden = g.op("Greater", [g.op("Unsqueeze", [pos, g.ints([0])]),
                              g.op("Unsqueeze", [pos, g.ints([1])])])  # key > query
    x = g.op("Add", [g.op("Gather", [_t(g, spec, "wte"), "tokens"], axis=0),
                     g.op("Gather", [_t(g, spec, "wpe"), pos], axis=0)])
    for i in range(spec.layers):
        p = f"h{i}."
        a = _attention(g, spec, _norm(g, spec, x, p + "ln1") if spec.norm_first else x, p,
                       hidden)
        x = g.op("Add", [x, a])
        if not spec.norm_first:
            x = _norm(g, spec, x, p + "ln1")
        f_in = _norm(g, spec, x, p + "ln2") if spec.norm_first else x
        m = _affine(g, spec, _activation(g, spec, _affine(g, spec, f_in, p + "mlp.fc")),
                    p + "mlp.proj")
        x = g.op("Add", [x, m])
        if not spec.norm_first:
            x = _norm(g, spec, x, p + "ln2")
    if spec.final_norm:
        x = _norm(g, spec, x, "lnf")
    head = spec.get("wte" if spec.tied_head else "head")
    g.nodes.append(onnx.helper.make_node(
        "MatMul", [x, g.const("head", np.ascontiguousarray(head.T.astype(g.np)))], ["logits"]))
    g.nodes.append(onnx.helper.make_node("ArgMax", ["logits"], ["labels"], axis=-1,
                                         keepdims=0))
    i64 = onnx.TensorProto.INT64
    graph = onnx.helper.make_graph(
        g.nodes, "exactmem-lm",
        [onnx.helper.make_tensor_value_info("tokens", i64, ["batch", "n"])],
        [onnx.helper.make_tensor_value_info("logits", g.elem,
                                            ["batch", "n", spec.vocab_size]),
         onnx.helper.make_tensor_value_info("labels", i64, ["batch", "n"])], g.inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="exactmem")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# running a written file ------------------------------------------------------------------
def _batch(spec: LMSpec, n: int) -> int:
    widest = max(spec.d_ff, spec.vocab_size, 3 * spec.d_model, spec.heads * n)
    return max(1, CELLS // max(1, n * widest))


def read_file(fmt: str, path: str | Path) -> tuple[LMSpec, dict[str, Any]]:
    """A torch or safetensors export read back: its LMSpec (float64 copies of the stored
    tensors, validated) and its torch tensors as stored."""
    if fmt == "safetensors":
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), framework="pt") as fh:
            cfg = json.loads((fh.metadata() or {})["exactmem.config"])
        state = load_file(str(path))
    else:
        import torch

        saved = torch.load(str(path), map_location="cpu", weights_only=True)
        cfg, state = saved["config"], saved["state_dict"]
    tensors = {k: v.double().numpy() for k, v in state.items()}
    return LMSpec(**cfg, tensors=tensors), state


def torch_logits(spec: LMSpec, state: dict[str, Any], tokens: np.ndarray) -> np.ndarray:
    """Logits ``[N, n, vocab]`` (as float64) of torch's forward pass in the tensors' dtype."""
    import torch
    import torch.nn.functional as F

    dt = next(iter(state.values())).dtype

    def t(name: str) -> Any:
        return state[name] if name in state else torch.zeros(spec.shapes()[name], dtype=dt)

    def norm(x: Any, name: str) -> Any:
        if spec.norm == "rmsnorm":
            y = F.rms_norm(x, (spec.d_model,), t(name + ".weight"), spec.layer_norm_eps)
            return y + t(name + ".bias")
        return F.layer_norm(x, (spec.d_model,), t(name + ".weight"), t(name + ".bias"),
                            spec.layer_norm_eps)

    def act(x: Any) -> Any:
        if spec.activation == "relu":
            return F.relu(x)
        return F.gelu(x, approximate="tanh" if spec.activation == "gelu_tanh" else "none")

    d, h, dh = spec.d_model, spec.heads, spec.d_head
    out = []
    with torch.inference_mode():
        for chunk in np.array_split(tokens, -(-len(tokens) // _batch(spec, tokens.shape[1]))):
            tok = torch.from_numpy(chunk)
            b, n = tok.shape
            x = t("wte")[tok] + t("wpe")[:n]
            hidden = torch.ones(n, n, dtype=torch.bool).triu(1)
            for i in range(spec.layers):
                p = f"h{i}."
                a_in = norm(x, p + "ln1") if spec.norm_first else x
                qkv = a_in @ t(p + "attn.weight") + t(p + "attn.bias")
                q, k, v = (z.reshape(b, n, h, dh).transpose(1, 2) for z in qkv.split(d, -1))
                s = (q @ k.transpose(-1, -2) / math.sqrt(dh)).masked_fill(hidden, -math.inf)
                o = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(b, n, d)
                x = x + o @ t(p + "attn.proj.weight") + t(p + "attn.proj.bias")
                if not spec.norm_first:
                    x = norm(x, p + "ln1")
                f_in = norm(x, p + "ln2") if spec.norm_first else x
                m = act(f_in @ t(p + "mlp.fc.weight") + t(p + "mlp.fc.bias"))
                x = x + m @ t(p + "mlp.proj.weight") + t(p + "mlp.proj.bias")
                if not spec.norm_first:
                    x = norm(x, p + "ln2")
            if spec.final_norm:
                x = norm(x, "lnf")
            out.append((x @ t("wte" if spec.tied_head else "head").T).double().numpy())
    return np.concatenate(out)


def file_logits(fmt: str, path: str | Path, spec: LMSpec, tokens: np.ndarray) -> np.ndarray:
    """Logits (as float64) of the written file ``path`` run in its own runtime."""
    from exactmem import progress

    if fmt != "onnx":
        with progress.stage("loading torch"):
            import torch  # noqa: F401
        with progress.stage("running the written file in torch"):
            return torch_logits(*read_file(fmt, path), tokens)
    with progress.stage("loading onnxruntime"):
        import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    step = _batch(spec, tokens.shape[1])
    with progress.stage("running the written file in onnxruntime"):
        return np.concatenate([np.asarray(sess.run(["logits"], {"tokens": tokens[s:s + step]})[0],
                                          dtype=np.float64)
                               for s in range(0, len(tokens), step)])


def proved(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``[N, n]`` booleans: the label's logit exceeds every other (NaN never does)."""
    lab = np.take_along_axis(logits, labels[..., None], -1)[..., 0]
    others = logits.copy()
    np.put_along_axis(others, labels[..., None], -np.inf, -1)
    return lab > others.max(-1)


def summary(ok: np.ndarray, claimed: list[list[int]], runtime: str, dtype: str,
            ) -> tuple[bool, str]:
    """``(every certified position holds, the line)``."""
    held = sum(int(ok[i, p]) for i, row in enumerate(claimed) for p in row)
    total = sum(map(len, claimed))
    return held == total, (
        f"{dtype} in {runtime}: the label is the unique argmax at {held} of {total} certified "
        f"positions ({int(ok.sum())} of {ok.size} positions in the file's dataset: "
        f"{ok.shape[0]} sequences of {ok.shape[1]})")
