"""Positions the exact passes compute: before an attention layer only the positions needed
after it and their keys.  The checker and the producer agree on them, and skipping the rest
changes no output (the checker's outputs equal a pass over every position)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from exactmem.checker import net_forward as cforward
from exactmem.checker import passes, verify
from exactmem.checker.cert_dataset import dataset
from exactmem.checker.parse import network
from exactmem.datasets.draw import generate
from exactmem.model.forward import needed_positions
from exactmem.pipeline import certify


def _att(keys: list[int] | None, causal: bool = False) -> dict[str, Any]:
    return {"type": "attention", "keys": keys, "causal": causal}


def test_keys_and_queries_only() -> None:
    layers = [{"type": "embedding"}, _att([2]), _att([0]), {"type": "feedforward"}]
    assert cforward.needed_positions(layers, [3], 4) == [[0, 2, 3], [0, 3], [3], [3]]
    # a causal layer without keys needs every position up to the latest query
    causal = [{"type": "embedding"}, _att(None, causal=True), {"type": "feedforward"}]
    assert cforward.needed_positions(causal, [2], 5) == [[0, 1, 2], [2], [2]]
    plain = [{"type": "embedding"}, _att(None), {"type": "feedforward"}]
    assert cforward.needed_positions(plain, [2], 5) == [[0, 1, 2, 3, 4], [2], [2]]


@pytest.fixture(scope="module")
def cert() -> dict[str, Any]:
    ds = generate(task="next-token", N=120, n=12, vocab=16, classes=8, seed=7)
    out = certify(ds, "dense-float32", {"seed": 2})
    assert out.report.verified, out.report.failures[:3]
    return out.certificate


def test_producer_and_checker_agree(cert: dict[str, Any]) -> None:
    from exactmem.certificate import spec_from_certificate

    spec = spec_from_certificate(cert)
    net, layers, readout = network(cert["network"])
    mine = cforward.needed_positions(layers, readout["positions"], net["n"])
    assert needed_positions(spec) == mine
    assert len(mine[1]) < net["n"]  # the keyed reads need fewer than every position


def test_skipping_positions_changes_no_output(cert: dict[str, Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    net, layers, readout = network(cert["network"])
    toks = dataset(cert["dataset"], Path("."))[2]
    read = readout["positions"]
    fast = verify.run(net, layers, read, toks)

    def every(layers: list[dict[str, Any]], read: list[int], n: int) -> list[list[int]]:
        out, need = [], list(read)
        for la in reversed(layers):
            out.append(need)
            if la["type"] == "attention":
                need = list(range(n))
        return out[::-1]

    monkeypatch.setattr(cforward, "needed_positions", every)
    full = verify.run(net, layers, read, toks)
    assert fast == full
    assert all(type(x) is Fraction for row in fast for vec in row for x in vec)


def test_float_mirror_values_are_the_exact_outputs(cert: dict[str, Any]) -> None:
    """When the float32 claim holds the checker reads the outputs from the float mirror's
    exact values: they equal its own exact pass (another order of the same function)."""
    from exactmem.checker import floatexact
    from exactmem.checker.cert_dataset import initial

    net, layers, readout = network(cert["network"])
    toks = dataset(cert["dataset"], Path("."))[2]
    read = readout["positions"]
    needs = cforward.needed_positions(layers, read, net["n"])
    final: list[Any] = []
    assert floatexact.check(net, layers, initial(net, toks, layers), needs, ["float32"],
                            final) == []
    assert passes.outputs(final[0], read) == verify.run(net, layers, read, toks)
    final.clear()  # a format that does not hold leaves no state
    assert floatexact.check(net, layers, initial(net, toks, layers), needs, ["bfloat16"],
                            final) and not final
