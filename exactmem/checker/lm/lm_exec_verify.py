"""``claims.execution`` of a language-model certificate (standard library only): the
execution model (``format``, ``ulps``) and the positions claimed for every float execution
of it, re-proved with :mod:`lm_execution` (docs/trained-models.md, "Execution claims")."""

from collections.abc import Callable
from typing import Any

from ..parse import choice, integer, obj, typed
from ..verdict import Unusable
from . import lm_execution
from .lm_bounds import Degenerate
from .lm_exec_model import FORMATS, MAX_ULPS, Model, NotProved
from .lm_model import Json

KEYS = ("format", "ulps", "positions")


def parse(value: Any, toks: list[list[int]]) -> tuple[Model, list[list[int]]]:
    """``claims.execution`` -> ``(Model, positions per sequence)`` (strictly increasing)."""
    obj(value, "claims.execution", KEYS)
    fmt = choice(value["format"], tuple(FORMATS), "claims.execution.format")
    ulps = integer(value["ulps"], "claims.execution.ulps", 1, MAX_ULPS)
    rows = typed(value["positions"], list, "claims.execution.positions")
    if len(rows) != len(toks):
        raise Unusable(f"claims.execution.positions: expected {len(toks)} lists, found "
                       f"{len(rows)}")
    n = len(toks[0])
    for i, row in enumerate(rows):
        typed(row, list, f"claims.execution.positions[{i}]")
        for j, p in enumerate(row):
            integer(p, f"claims.execution.positions[{i}][{j}]", 0, n - 1)
            if j and p <= row[j - 1]:
                raise Unusable(f"claims.execution.positions[{i}]: positions must be strictly "
                               "increasing")
    return Model(fmt, ulps), rows


def refuse(net: Json) -> None:
    """Unusable when the model has a part the execution claim does not cover yet."""
    missing = lm_execution.refused(net)
    if missing:
        raise Unusable(f"claims.execution: not covered for {', '.join(missing)} (the "
                       "execution model covers pre-LN decoders with LayerNorm, GPT-2's "
                       "function)")


def check_sequence(net: Json, i: int, toks: list[int], labels: list[int], rows: list[int],
                   mod: Model,
                   margin_failure: Callable[[int, int, int, list[int], int, int], str | None],
                   unproved: list[tuple[int, int]] | None = None) -> list[str]:
    """The failures of sequence ``i``'s execution-claimed positions ``rows``."""
    if not rows:
        return []
    norms = net.setdefault("exec_norms", lm_execution.Norms())  # once per certificate
    try:
        outs = lm_execution.logits(net, toks, rows, mod, norms)
    except (NotProved, Degenerate) as exc:
        if unproved is not None:
            unproved.extend((i, p) for p in rows)
        return [f"execution {mod.fmt}: sequence {i}: not proved ({exc})"]
    bad: list[str] = []
    for p in rows:
        mids, rad = outs[p]
        text = margin_failure(i, p, labels[p], mids, rad, net["f"])
        if text:
            bad.append(f"execution {mod.fmt}: {text}")
            if unproved is not None:
                unproved.append((i, p))
    return bad


def text(t: Json) -> str:
    """The claim line of the totals ``t["execution"]``."""
    e = t["execution"]
    return (f"{e['proved']} of {t['positions']} positions have the label as unique argmax "
            f"in every {e['format']} execution (model: {e['model']}; "
            f"{t['proved']} positions claimed for the real-valued function)")
