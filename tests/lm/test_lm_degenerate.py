"""Degenerate models the importers accept (zero queries, keys, values or gains, all-zero
layers, one-token contexts, a vocabulary of one) get a verdict from the checker and from
the producer's position prover, never an internal error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from exactmem.checker.verify import check_certificate
from exactmem.lm.certfile import build_lm_certificate
from exactmem.lm.decoder import LMSpec
from exactmem.lm.float64 import logits64
from exactmem.lm.positions import prove_positions
from exactmem.model.dataset import Dataset


def spec_of(v: int = 7, t: int = 4, d: int = 4, heads: int = 2,
            edit: Callable[[dict[str, np.ndarray], int], None] | None = None) -> LMSpec:
    """A small random pre-LN decoder (2 layers, float32 weights), edited by ``edit``."""
    rng = np.random.default_rng(5)
    probe = LMSpec(vocab_size=v, context=t, d_model=d, heads=heads, layers=2, d_ff=8,
                   activation="gelu_tanh", layer_norm_eps=1e-5, tied_head=True,
                   tensors={k: np.ones(s) for k, s in _shapes(v, t, d).items()})
    tensors = {k: rng.normal(0, 0.7, s).astype(np.float32).astype(np.float64)
               for k, s in probe.shapes().items() if k in _shapes(v, t, d)}
    for k in tensors:
        if ".ln" in "." + k and k.endswith("weight"):
            tensors[k] += 1
    if edit is not None:
        edit(tensors, d)
    return LMSpec(vocab_size=v, context=t, d_model=d, heads=heads, layers=2, d_ff=8,
                  activation="gelu_tanh", layer_norm_eps=1e-5, tied_head=True,
                  tensors=tensors)


def _shapes(v: int, t: int, d: int) -> dict[str, list[int]]:
    out = {"wte": [v, d], "wpe": [t, d], "lnf.weight": [d], "lnf.bias": [d]}
    for i in range(2):
        p = f"h{i}."
        out.update({p + "ln1.weight": [d], p + "ln1.bias": [d], p + "ln2.weight": [d],
                    p + "ln2.bias": [d], p + "attn.weight": [d, 3 * d],
                    p + "attn.bias": [3 * d], p + "attn.proj.weight": [d, d],
                    p + "attn.proj.bias": [d], p + "mlp.fc.weight": [d, 8],
                    p + "mlp.fc.bias": [8], p + "mlp.proj.weight": [8, d],
                    p + "mlp.proj.bias": [d]})
    return out


def _zero(part: str, head: int | None = None) -> Callable[[dict[str, np.ndarray], int], None]:
    """Zero the query / key / value weights and biases (of one head, or all) of layer 0."""
    def edit(ts: dict[str, np.ndarray], d: int) -> None:
        k = "qkv".index(part)
        lo, hi = (k * d, (k + 1) * d) if head is None else (k * d + head * d // 2,
                                                            k * d + (head + 1) * d // 2)
        ts["h0.attn.weight"][:, lo:hi] = 0
        ts["h0.attn.bias"][lo:hi] = 0
    return edit


def _zero_gains(ts: dict[str, np.ndarray], d: int) -> None:
    for k in ("h0.ln1.weight", "h0.ln2.weight", "h1.ln1.weight"):
        ts[k][:] = 0


def _zero_layer(ts: dict[str, np.ndarray], d: int) -> None:
    for k in ts:
        if k.startswith("h1."):
            ts[k][...] = 0


def _all_zero(ts: dict[str, np.ndarray], d: int) -> None:
    for k in ts:
        ts[k][...] = 0


CASES = {
    "zero query, one head": dict(edit=_zero("q", 0)),
    "zero queries": dict(edit=_zero("q")),
    "zero keys": dict(edit=_zero("k")),
    "zero values": dict(edit=_zero("v")),
    "zero gains": dict(edit=_zero_gains),
    "all-zero layer": dict(edit=_zero_layer),
    "all-zero model": dict(edit=_all_zero),
    "one-token context": dict(t=1),
    "vocabulary of one": dict(v=1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_degenerate_model_gets_a_verdict(name: str) -> None:
    spec = spec_of(**CASES[name])  # type: ignore[arg-type]
    toks = np.random.default_rng(3).integers(0, spec.vocab_size, size=(2, spec.context))
    labels = logits64(spec, toks).argmax(-1)
    ds = Dataset(task="seq2seq", inputs="token-ids", vocab_size=spec.vocab_size,
                 sequences=tuple(tuple(map(int, s)) for s in toks),
                 labels=tuple(tuple(map(int, r)) for r in labels))
    bounds = prove_positions(spec, ds.sequences, ds.labels, producer="auto")
    claimed = [list(range(spec.context))] * 2
    report = check_certificate(build_lm_certificate(spec, ds, claimed, partial=False),
                               Path("."))
    assert not report.unusable, report.failures
    assert report.verdict in ("s VERIFIED", "s REJECTED")
    if name in ("vocabulary of one", "zero query, one head"):
        assert report.verified, report.failures
    assert bounds is not None


def test_a_gpt2_with_an_all_zero_query_head_certifies_and_checks(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    import torch
    from transformers import GPT2LMHeadModel

    from exactmem.cli import main
    from exactmem.lm.checkpoints.random_models import random_gpt2, self_labelled
    from exactmem.model.dataset import save_dataset

    folder = random_gpt2(tmp_path / "m", seed=1, layers=1, d_model=16, heads=2, vocab=16,
                         context=8)
    model = GPT2LMHeadModel.from_pretrained(str(folder))
    with torch.no_grad():  # head 0: query weights and bias 0, so uniform attention
        model.transformer.h[0].attn.c_attn.weight[:, :8] = 0
        model.transformer.h[0].attn.c_attn.bias[:8] = 0
    model.save_pretrained(str(folder))
    save_dataset(self_labelled(folder, 4, 8, seed=0), tmp_path / "d.json")
    cert = tmp_path / "c.json"
    assert main(["certify-model", str(folder), str(tmp_path / "d.json"), "-o", str(cert),
                 "--partial", "-q"]) == 0
    assert main(["check", str(cert), "-q"]) == 0
