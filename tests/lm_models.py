"""Small random pre-LN decoders for the language-model tests (no checkpoint needed)."""

from __future__ import annotations

import hashlib
import random
from fractions import Fraction
from typing import Any

import numpy as np

from exactmem.checker.cert_dataset import canonical
from exactmem.checker.lm import lm_forward as L
from exactmem.lm.decoder import LMSpec
from exactmem.model.dataset import Dataset


def self_labelled(spec: LMSpec, seed: int, shape: tuple[int, int]) -> Dataset:
    """``shape`` (sequences, tokens) of random token ids, each position labelled with the
    model's own float64 argmax (a seq2seq dataset)."""
    from exactmem.lm.float64 import logits64

    toks = np.random.default_rng(seed).integers(0, spec.vocab_size, size=shape)
    labels = logits64(spec, toks).argmax(-1)
    return Dataset(task="seq2seq", inputs="token-ids", vocab_size=spec.vocab_size,
                   sequences=tuple(tuple(map(int, s)) for s in toks),
                   labels=tuple(tuple(map(int, r)) for r in labels))


def redigest(cert: dict[str, Any]) -> dict[str, Any]:
    """Re-digest an edited certificate the way the checker hashes it, so that only the edit
    itself is judged."""
    body = {k: v for k, v in cert.items() if k != "digest"}
    cert["digest"] = "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
    return cert


def random_spec(rng: np.random.Generator, act: str, tied: bool) -> LMSpec:
    """A small random LMSpec, float32 weights (as a checkpoint stores them)."""
    v, t, d, f = 11, 8, 8, 16
    shapes = {"wte": [v, d], "wpe": [t, d], "lnf.weight": [d], "lnf.bias": [d]}
    if not tied:
        shapes["head"] = [v, d]
    for i in range(2):
        p = f"h{i}."
        shapes.update({p + "ln1.weight": [d], p + "ln1.bias": [d], p + "ln2.weight": [d],
                       p + "ln2.bias": [d], p + "attn.weight": [d, 3 * d],
                       p + "attn.bias": [3 * d], p + "attn.proj.weight": [d, d],
                       p + "attn.proj.bias": [d], p + "mlp.fc.weight": [d, f],
                       p + "mlp.fc.bias": [f], p + "mlp.proj.weight": [f, d],
                       p + "mlp.proj.bias": [d]})
    tensors = {k: (rng.normal(0, 0.5, s) + (1 if ".ln" in "." + k and k.endswith("weight")
                                             and len(s) == 1 else 0)).astype(np.float32)
               .astype(np.float64) for k, s in shapes.items()}
    return LMSpec(vocab_size=v, context=t, d_model=d, heads=2, layers=2, d_ff=f,
                  activation=act, layer_norm_eps=1e-5, tied_head=tied,  # type: ignore[arg-type]
                  tensors=tensors)


def checker_norm_case(xs: list[int], rnd: random.Random) -> tuple[
        list[int], list[int], list[int], Any, Fraction, tuple[int, int]]:
    """A norm case for the checker's LayerNorm / RMSNorm balls: midpoints ``xs`` (20
    fractional bits) at the checker's precision, random gains (8 bits) and biases (9 bits),
    their prepared parameters, ``eps = 10^-5`` and its bounds at ``2 F`` bits:
    ``(m, g, b, params, eps, eps_bounds)``."""
    d = len(xs)
    m = [x << (L.F - 20) for x in xs]
    g = [rnd.randint(-(1 << 10), 1 << 10) for _ in range(d)]
    b = [rnd.randint(-(1 << 10), 1 << 10) for _ in range(d)]
    params = L.ln_params(([g], 8), ([b], 9))
    eps = Fraction(1, 10 ** 5)
    epsb = ((eps.numerator << 2 * L.F) // eps.denominator,
            -((-eps.numerator << 2 * L.F) // eps.denominator))
    return m, g, b, params, eps, epsb
