"""Crafted language-model certificates for the checker's limits (tests/lm/test_lm_limits.py,
scripts/fuzz_lm_checker.py): a small genuine certificate, edits of it that stress one
cost each (a huge logit scale, a huge norm gain, a long code-length claim, a gzip file that
inflates to a large zero model), re-digested so that only the edit is judged."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.checker.cert_dataset import canonical
from exactmem.lm.certfile import build_lm_certificate
from exactmem.lm.decoder import LMSpec
from exactmem.lm.float64 import logits64
from exactmem.model.dataset import Dataset

Cert = dict[str, Any]


def redigest(cert: Cert, rehash_dataset: bool = False) -> Cert:
    """The digest (and, if asked, the embedded dataset's SHA-256) of the edited content."""
    if rehash_dataset and "data" in cert["dataset"]:
        cert["dataset"]["sha256"] = hashlib.sha256(
            canonical(cert["dataset"]["data"]).encode()).hexdigest()
    body = {k: v for k, v in cert.items() if k != "digest"}
    cert["digest"] = "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
    return cert


def small_spec(seed: int = 5, v: int = 7, t: int = 6, d: int = 4, heads: int = 2,
               layers: int = 1, d_ff: int = 8, tied: bool = False, std: float = 0.7,
               act: str = "gelu_tanh") -> LMSpec:
    """A small random pre-LN decoder with float32 weights."""
    rng = np.random.default_rng(seed)
    shapes: dict[str, list[int]] = {"wte": [v, d], "wpe": [t, d], "lnf.weight": [d],
                                    "lnf.bias": [d]}
    if not tied:
        shapes["head"] = [v, d]
    for i in range(layers):
        p = f"h{i}."
        shapes.update({p + "ln1.weight": [d], p + "ln1.bias": [d], p + "ln2.weight": [d],
                       p + "ln2.bias": [d], p + "attn.weight": [d, 3 * d],
                       p + "attn.bias": [3 * d], p + "attn.proj.weight": [d, d],
                       p + "attn.proj.bias": [d], p + "mlp.fc.weight": [d, d_ff],
                       p + "mlp.fc.bias": [d_ff], p + "mlp.proj.weight": [d_ff, d],
                       p + "mlp.proj.bias": [d]})
    tensors = {}
    for k, s in shapes.items():
        x = rng.normal(0, std, s)
        if ".ln" in "." + k and k.endswith("weight"):
            x += 1
        tensors[k] = x.astype(np.float32).astype(np.float64)
    return LMSpec(vocab_size=v, context=t, d_model=d, heads=heads, layers=layers, d_ff=d_ff,
                  activation=act, layer_norm_eps=1e-5, tied_head=tied,  # type: ignore[arg-type]
                  tensors=tensors)


def next_token_dataset(spec: LMSpec, count: int, seed: int = 3,
                       sequences: list[list[int]] | None = None) -> Dataset:
    """``count`` random sequences of ``context + 1`` tokens cut into inputs (the first
    ``context``) labelled with their next tokens, as a code-length claim needs."""
    rng = np.random.default_rng(seed)
    n = spec.context
    rows = sequences or [list(map(int, rng.integers(0, spec.vocab_size, n + 1)))
                         for _ in range(count)]
    return Dataset(task="seq2seq", inputs="token-ids", vocab_size=spec.vocab_size,
                   sequences=tuple(tuple(r[:n]) for r in rows),
                   labels=tuple(tuple(r[1:n + 1]) for r in rows))


def self_labelled(spec: LMSpec, count: int, seed: int = 3) -> Dataset:
    """Random sequences labelled with the float64 argmax at every position."""
    toks = np.random.default_rng(seed).integers(0, spec.vocab_size, size=(count, spec.context))
    labels = logits64(spec, toks).argmax(-1)
    return Dataset(task="seq2seq", inputs="token-ids", vocab_size=spec.vocab_size,
                   sequences=tuple(tuple(map(int, s)) for s in toks),
                   labels=tuple(tuple(map(int, r)) for r in labels))


def coded_certificate(spec: LMSpec, ds: Dataset, bits: Fraction | int = 1000) -> Cert:
    """A certificate claiming no positions (partial) and code lengths of ``bits`` each."""
    return build_lm_certificate(spec, ds, [[] for _ in ds.sequences], partial=True,
                                code_lengths=[Fraction(bits)] * len(ds.sequences))


def digits(x: int) -> str:
    """Decimal text of any integer (by halves, so not limited by Python's int-to-str
    limit, which stays on for the checker)."""
    if x < 0:
        return "-" + digits(-x)
    if x.bit_length() <= 8000:
        return str(x)
    k = int(x.bit_length() * 0.30103 / 2)
    hi, lo = divmod(x, 10 ** k)
    return digits(hi) + digits(lo).rjust(k, "0")


def scaled(cert: Cert, name: str, bits: int) -> Cert:
    """Every value of tensor ``name`` times ``2**bits``, re-digested: a smaller scale, or
    scale 0 and the numerators shifted."""
    c = copy.deepcopy(cert)
    t = c["model"]["tensors"][name]
    if bits <= t["scale"]:
        t["scale"] -= bits
    else:
        t["values"] = [digits(int(v) << (bits - t["scale"])) for v in t["values"]]
        t["scale"] = 0
    return redigest(c)


def write(path: Path, cert: Cert | str, gz: bool = False) -> Path:
    text = cert if isinstance(cert, str) else canonical(cert)
    if gz:
        path.write_bytes(gzip.compress(text.encode(), 9))
    else:
        path.write_text(text)
    return path


def zero_bomb(path: Path, d: int = 1024, sequences: int = 20_000, d_ff: int = 1024) -> Path:
    """A gzip certificate (tens of KB) inflating to a zero-filled one-layer model of width
    ``d`` with ``sequences`` one-token sequences, each position claimed."""
    def zeros(shape: list[int]) -> dict[str, Any]:
        size = shape[0] * (shape[1] if len(shape) == 2 else 1)
        return {"scale": 0, "shape": shape, "values": ["0"] * size}

    shapes = {"wte": [2, d], "wpe": [1, d], "lnf.weight": [d], "h0.ln1.weight": [d],
              "h0.ln2.weight": [d], "h0.attn.weight": [d, 3 * d],
              "h0.attn.proj.weight": [d, d], "h0.mlp.fc.weight": [d, d_ff],
              "h0.mlp.proj.weight": [d_ff, d]}
    data = {"format": "exactmem.dataset/1", "task": "seq2seq", "inputs": "token-ids",
            "vocab_size": 2, "sequences": [[k % 2] for k in range(sequences)],
            "labels": [[0]] * sequences}
    cert: Cert = {"format": "exactmem.lm-certificate/1",
                  "model": {"architecture": "pre-ln-decoder", "vocab_size": 2, "context": 1,
                            "d_model": d, "heads": 1, "layers": 1, "d_ff": d_ff,
                            "activation": "relu", "layer_norm_eps": "1/100000",
                            "norm": "layernorm", "tied_head": True,
                            "tensors": {k: zeros(s) for k, s in shapes.items()}},
                  "dataset": {"sha256": "", "data": data},
                  "claims": {"partial": True, "positions": [[0]] * sequences}}
    redigest(cert, rehash_dataset=True)
    text = json.dumps(cert, sort_keys=True, separators=(",", ":"))
    return write(path, text, gz=True)
