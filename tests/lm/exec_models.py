"""Models and torch executions for the execution-claim tests: small pre-LN decoders whose
head has two nearly equal rows (a near tie that float rounding decides), certificates with
``claims.execution`` made and checked, and the label's survival under several torch
summation orders and formats."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from exactmem.checker.lm.lm_verify import check
from exactmem.lm.block import forward
from exactmem.lm.certfile import build_lm_certificate
from exactmem.lm.decoder import LMSpec
from exactmem.lm.exec_balls import prove_execution
from exactmem.lm.float64 import logits64
from exactmem.lm.positions import prove_positions
from exactmem.lm.torchrun import TorchOps
from exactmem.model.dataset import Dataset

VOCAB, CTX, D = 16, 8, 16


def near_tie_spec(tie: float, seed: int = 0, std: float = 0.02, head: float = 4.0) -> LMSpec:
    """One pre-LN block (d 16, 2 heads, GELU tanh), float32 weights, an untied head whose
    last two rows differ by ``tie`` times a random vector: where they lead, the label's
    margin is about ``tie`` times the norm of the final LayerNorm's output."""
    rng = np.random.default_rng(seed)

    def f32(a: Any) -> np.ndarray:
        return np.asarray(a, dtype=np.float32).astype(np.float64)

    d, ff = D, 2 * D
    t = {"wte": f32(rng.normal(0, 1.0, (VOCAB, d))), "wpe": f32(rng.normal(0, 0.3, (CTX, d))),
         "lnf.weight": f32(1 + rng.normal(0, 0.1, d)), "lnf.bias": f32(rng.normal(0, 0.1, d))}
    for name, shape in (("ln1", (d,)), ("ln2", (d,))):
        t[f"h0.{name}.weight"] = f32(1 + rng.normal(0, 0.1, shape))
        t[f"h0.{name}.bias"] = f32(rng.normal(0, 0.1, shape))
    for name, shape in (("attn", (d, 3 * d)), ("attn.proj", (d, d)), ("mlp.fc", (d, ff)),
                        ("mlp.proj", (ff, d))):
        t[f"h0.{name}.weight"] = f32(rng.normal(0, std, shape))
        t[f"h0.{name}.bias"] = f32(rng.normal(0, 0.05, shape[1]))
    rows = head * rng.normal(0, 1.0, (VOCAB, d))
    u = rng.normal(0, 1.0, d)
    rows[VOCAB - 2] = 3 * u
    rows[VOCAB - 1] = 3 * u + tie * rng.normal(0, 1.0, d)
    t["head"] = f32(rows)
    return LMSpec(vocab_size=VOCAB, context=CTX, d_model=d, heads=2, layers=1, d_ff=ff,
                  activation="gelu_tanh", layer_norm_eps=1e-5, tied_head=False, tensors=t)


def self_labelled(spec: LMSpec, count: int, seed: int = 1) -> Dataset:
    """``count`` random sequences labelled with the float64 argmax (the real argmax where it
    is proved)."""
    toks = np.random.default_rng(seed).integers(0, VOCAB, (count, CTX))
    ys = logits64(spec, toks).argmax(-1)
    return Dataset(task="seq2seq", inputs="token-ids", vocab_size=VOCAB,
                   sequences=tuple(map(tuple, toks.tolist())),
                   labels=tuple(map(tuple, ys.tolist())))


def certify(spec: LMSpec, ds: Dataset, fmt: str, ulps: int = 4) -> dict[str, Any]:
    """The certificate of the real-valued positions proved and of the positions proved for
    every ``fmt`` execution: the producer's, less those the checker does not re-prove (as
    ``certify_lm`` does)."""
    real = [list(r) for r in prove_positions(spec, ds.sequences, ds.labels,
                                             producer="fast").proved]
    rows = prove_execution(spec, ds.sequences, ds.labels, real, fmt, ulps)
    cert = build_lm_certificate(spec, ds, real, True,
                                execution={"format": fmt, "ulps": ulps, "positions": rows})
    missed: list[tuple[int, int]] = []
    check(cert, ".", exec_unproved=missed)
    for i, p in missed:
        rows[i].remove(p)
    return build_lm_certificate(spec, ds, real, True,
                                execution={"format": fmt, "ulps": ulps, "positions": rows})


def _state(spec: LMSpec, dtype: Any) -> dict[str, Any]:
    import torch

    return {k: torch.tensor(v, dtype=dtype) for k, v in spec.tensors.items()}


class Blocked(TorchOps):
    """Every matrix product split over its inner dimension into blocks of ``block``, the
    partial products added in reverse order (another summation order than one matmul)."""

    def __init__(self, spec: LMSpec, state: dict[str, Any], block: int) -> None:
        super().__init__(spec, state)
        self.block = block

    def mm(self, x: Any, w: Any) -> Any:
        k = w.shape[0]
        parts = [x[..., i:i + self.block] @ w[i:i + self.block]
                 for i in range(0, k, self.block)][::-1]
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        return out

    def linear(self, x: Any, name: str) -> Any:
        return self.mm(x, self.t(name + ".weight")) + self.t(name + ".bias")

    def residual(self, x: Any, h: Any, name: str) -> Any:
        return x + self.mm(h, self.t(name + ".weight")) + self.t(name + ".bias")

    def head(self, x: Any) -> Any:
        return self.mm(x, self.t("head").T)


class Transposed(TorchOps):
    """Every matrix product as ``(W^T x^T)^T`` (a transposed product, another kernel)."""

    def mm(self, x: Any, w: Any) -> Any:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        return (w.T @ flat.T).T.reshape(*shape[:-1], w.shape[1])

    linear = Blocked.linear
    residual = Blocked.residual
    head = Blocked.head


def onnxruntime_run(spec: LMSpec) -> Callable[[np.ndarray], np.ndarray] | None:
    """The float32 ONNX graph of ``spec`` (:func:`exactmem.lm.onnx_graph.build_onnx`, the
    graph ``exactmem export`` writes) run in onnxruntime on the CPU; None without
    onnxruntime."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    from exactmem.lm.onnx_graph import build_onnx

    sess = ort.InferenceSession(build_onnx(spec, "float32").SerializeToString(),
                                providers=["CPUExecutionProvider"])

    def go(toks: np.ndarray) -> np.ndarray:
        out = sess.run(["logits"], {"tokens": np.asarray(toks, dtype=np.int64)})[0]
        return np.asarray(out, dtype=np.float64)
    return go


def runs(spec: LMSpec, fmt: str) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Named executions of ``spec`` in ``fmt`` (float32: torch with one matmul, blocked in
    two block sizes, transposed, one sequence at a time, and onnxruntime when installed;
    bfloat16: the model in bfloat16, and float32 weights under CPU bfloat16 autocast with
    and without flush-to-zero)."""
    import torch

    def run(make: Callable[[], TorchOps], batch: int | None = None, autocast: bool = False,
            ftz: bool = False) -> Callable[[np.ndarray], np.ndarray]:
        def go(toks: np.ndarray) -> np.ndarray:
            ops = make()
            step = batch or len(toks)
            out = []
            old = torch.set_flush_denormal(ftz)
            try:
                with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16,
                                                            enabled=autocast):
                    for i in range(0, len(toks), step):
                        tok = torch.from_numpy(toks[i:i + step])
                        out.append(forward(ops, ops.embed(tok)).float().double().numpy())
            finally:
                torch.set_flush_denormal(False)
                del old
            return np.concatenate(out)
        return go

    if fmt == "float32":
        f32 = _state(spec, torch.float32)
        out = {"matmul": run(lambda: TorchOps(spec, f32)),
               "blocked-4": run(lambda: Blocked(spec, f32, 4)),
               "blocked-3": run(lambda: Blocked(spec, f32, 3)),
               "transposed": run(lambda: Transposed(spec, f32)),
               "batch-1": run(lambda: TorchOps(spec, f32), batch=1),
               "ftz": run(lambda: TorchOps(spec, f32), ftz=True)}
        ort_run = onnxruntime_run(spec)
        if ort_run is not None:
            out["onnxruntime"] = ort_run
        return out
    bf = _state(spec, torch.bfloat16)
    f32 = _state(spec, torch.float32)
    return {"bf16-model": run(lambda: TorchOps(spec, bf)),
            "bf16-blocked": run(lambda: Blocked(spec, bf, 4)),
            "autocast": run(lambda: TorchOps(spec, f32), autocast=True),
            "autocast-ftz": run(lambda: TorchOps(spec, f32), autocast=True, ftz=True),
            "autocast-batch-1": run(lambda: TorchOps(spec, f32), batch=1, autocast=True)}
