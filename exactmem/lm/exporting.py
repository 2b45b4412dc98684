"""Exporting a certified language model (``exactmem.lm-certificate/1``,
docs/trained-models.md, "Exporting a certified language model").

The files hold the stored weights of :class:`~exactmem.lm.decoder.LMSpec` under its tensor
names, rounded once to nearest into ``float32`` (or exactly, ``float64``: every stored weight
is a float64), and the model's shape as ``config`` (every LMSpec field but the tensors):

* safetensors: the tensors, the config as JSON in the metadata (``exactmem.config``);
* torch: ``{"config", "state_dict", "exactmem"}`` saved with ``torch.save`` (loadable with
  ``weights_only=True``);
* ONNX (opset 17): input ``tokens``, outputs ``logits`` and ``labels``
  (:mod:`exactmem.lm.onnx_graph`).

A written file is then run in its own runtime (onnxruntime; torch for torch and
safetensors, reloaded from disk) and its logits judged: a position counts when the label is
the unique maximum of its logits.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.errors import CertificateError, SpecError
from exactmem.lm.decoder import LMSpec
from exactmem.lm.torchrun import batch_size, torch_chunks

DTYPES = ("float64", "float32")
TAG = "exactmem.lm-export/1"


def config(spec: LMSpec) -> dict[str, Any]:
    """Every LMSpec field but the tensors (``layer_norm_eps`` is the stored float exactly)."""
    return {k: getattr(spec, k) for k in (
        "vocab_size", "context", "d_model", "heads", "layers", "d_ff", "activation",
        "layer_norm_eps", "tied_head", "norm_first", "final_norm", "norm")}


def spec_of(cert: dict[str, Any], base: Path | None = None) -> LMSpec:
    """The LMSpec of a certificate (one-line error when its model cannot be read; bound
    weights read from its folder ``base``)."""
    from exactmem.lm.certfile import spec_from_lm_certificate

    try:
        return spec_from_lm_certificate(cert, base)
    except (SpecError, CertificateError):
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

        from exactmem.lm.onnx_graph import build_onnx

        model = build_onnx(spec, dtype)
        onnx.helper.set_model_props(model, meta)
        onnx.save_model(model, str(path))


# running a written file ------------------------------------------------------------------
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


def file_chunks(fmt: str, path: str | Path, spec: LMSpec, tokens: np.ndarray,
                ) -> Iterator[np.ndarray]:
    """Logits (as float64) of the written file ``path`` run in its own runtime, a batch of
    sequences at a time (a batch's logits are a few MB; all of them at the 1M shape, 1 GB)."""
    from exactmem import progress

    if fmt != "onnx":
        with progress.stage("loading torch"):
            import torch  # noqa: F401
        with progress.stage("running the written file in torch"):
            yield from torch_chunks(*read_file(fmt, path), tokens)
        return
    with progress.stage("loading onnxruntime"):
        import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    step = batch_size(spec, tokens.shape[1])
    with progress.stage("running the written file in onnxruntime"):
        for s in range(0, len(tokens), step):
            out = sess.run(["logits"], {"tokens": tokens[s:s + step]})[0]
            yield np.asarray(out, dtype=np.float64)


def file_logits(fmt: str, path: str | Path, spec: LMSpec, tokens: np.ndarray) -> np.ndarray:
    """All logits ``[N, n, vocab]`` of :func:`file_chunks`."""
    return np.concatenate(list(file_chunks(fmt, path, spec, tokens)))


def file_proved(fmt: str, path: str | Path, spec: LMSpec, tokens: np.ndarray,
                labels: np.ndarray) -> np.ndarray:
    """:func:`proved` of the file's logits, a batch at a time."""
    out, start = [], 0
    for chunk in file_chunks(fmt, path, spec, tokens):
        out.append(proved(chunk, labels[start:start + len(chunk)]))
        start += len(chunk)
    return np.concatenate(out)


def proved(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``[N, n]`` booleans: the label's logit exceeds every other (NaN never does)."""
    from exactmem.lm.float64 import label_margin

    with np.errstate(invalid="ignore"):  # inf - inf: NaN, not held
        return label_margin(logits, labels) > 0


def summary(ok: np.ndarray, claimed: list[list[int]], runtime: str, dtype: str,
            ) -> tuple[bool, str]:
    """``(every certified position holds, the line)``."""
    held = sum(int(ok[i, p]) for i, row in enumerate(claimed) for p in row)
    total = sum(map(len, claimed))
    return held == total, (
        f"{dtype} in {runtime}: the label is the unique argmax at {held} of {total} certified "
        f"positions ({int(ok.sum())} of {ok.size} positions in the file's dataset: "
        f"{ok.shape[0]} sequences of {ok.shape[1]})")


def execution_line(claims: Any, dtype: str, checked: bool, ok: np.ndarray) -> str | None:
    """What the certificate's execution claim (docs/trained-models.md, "Execution claims")
    proves about the written file in ``dtype``, beside the run's ``ok`` ``[N, n]``; None
    when it claims no execution in that format."""
    ex = claims.get("execution") if isinstance(claims, dict) else None
    if not isinstance(ex, dict) or ex.get("format") != dtype:
        return None
    rows = ex.get("positions")
    if not isinstance(rows, list) or len(rows) != ok.shape[0]:
        return None
    pairs = [(i, p) for i, row in enumerate(rows) if isinstance(row, list) for p in row
             if type(p) is int and 0 <= p < ok.shape[1]]
    lost = sum(not ok[i, p] for i, p in pairs)
    how = ("re-proved by the checker" if checked
           else "NOT re-proved here: --no-check; run exactmem check")
    line = (f"proved for every {dtype} execution: the label is the unique argmax at "
            f"{len(pairs)} certified positions (the certificate's execution claim, "
            f"exp/tanh/erf/rsqrt within {ex.get('ulps')} ulps, {how}; no run is needed for "
            "these)")
    if lost:
        line += (f"; the run above loses {lost} of them, so that runtime is outside the "
                 "execution model (e.g. TF32 or approximate kernels)")
    return line


def claimed_positions(cert: dict[str, Any], tokens: np.ndarray) -> list[list[int]]:
    """The certificate's ``claims.positions``, one list of positions per sequence of
    ``tokens`` (else a :class:`SpecError`)."""
    claims = cert.get("claims")
    rows = claims.get("positions") if isinstance(claims, dict) else None
    if (not isinstance(rows, list) or len(rows) != len(tokens)
            or not all(isinstance(r, list) and all(type(p) is int and 0 <= p < tokens.shape[1]
                                                   for p in r) for r in rows)):
        raise SpecError("claims.positions: expected one list of positions per sequence")
    return rows
