"""``claims.execution`` of a language-model certificate (standard library only): the
execution model (``format``, ``ulps``), the positions claimed for every float execution of
it and, optionally, per sequence an upper bound on its code length in every such execution
(``code_length_bits``, as ``claims.code_length_bits``), re-proved with the execution balls of
:mod:`lm_execution` (docs/trained-models.md, "Execution claims")."""

from collections.abc import Callable
from typing import Any, NamedTuple

from ..parse import choice, integer, obj, typed
from ..verdict import Unusable
from . import lm_codeclaims, lm_execution
from .lm_bounds import Degenerate
from .lm_codeclaims import Bound
from .lm_exec_model import FORMATS, MAX_ULPS, Model, NotProved
from .lm_model import Json

KEYS = ("format", "ulps", "positions")


class Execution(NamedTuple):
    """A parsed ``claims.execution``."""

    model: Model
    positions: list[list[int]]  # per sequence, strictly increasing
    code_lengths: list[Bound] | None  # per sequence ``(p, q)`` bits, or None


def parse(value: Any, toks: list[list[int]], labels: list[list[int]], size: int,
          coded: bool) -> Execution:
    """``claims.execution`` -> :class:`Execution`; ``code_length_bits`` only beside the
    real-valued ``claims.code_length_bits`` (``coded``), whose figure it is stated with."""
    obj(value, "claims.execution", KEYS, ("code_length_bits",))
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
    lengths = None
    if "code_length_bits" in value:
        if not coded:
            raise Unusable("claims.execution.code_length_bits: only with "
                           "claims.code_length_bits (the real-valued bounds)")
        lengths = lm_codeclaims.code_lengths(value["code_length_bits"], toks, labels, size,
                                             "claims.execution.code_length_bits")
    return Execution(Model(fmt, ulps), rows, lengths)


def refuse(net: Json) -> None:
    """Unusable when the model has a part the execution claim does not cover yet."""
    missing = lm_execution.refused(net)
    if missing:
        raise Unusable(f"claims.execution: not covered for {', '.join(missing)} (the "
                       "execution model covers pre-LN decoders with LayerNorm, GPT-2's "
                       "function)")


def check_sequence(net: Json, i: int, toks: list[int], labels: list[int], ex: Execution,
                   margin_failure: Callable[[int, int, int, list[int], int, int], str | None],
                   unproved: list[tuple[int, int]] | None = None,
                   derived: dict[int, int] | None = None) -> list[str]:
    """The failures of sequence ``i``'s execution claims: its positions and, with
    ``code_length_bits``, its code-length bound from the execution balls of every position
    (``derived[i]``: the checker's own bound, :func:`lm_codeclaims.code_length_failure`)."""
    rows, mod = ex.positions[i], ex.model
    claimed = ex.code_lengths[i] if ex.code_lengths is not None else None
    if not rows and claimed is None:
        return []
    what = f"execution {mod.fmt}"
    norms = net.setdefault("exec_norms", lm_execution.Norms())  # once per certificate
    try:
        outs = lm_execution.logits(net, toks, range(len(toks)) if claimed else rows, mod,
                                   norms)
    except (NotProved, Degenerate) as exc:
        if unproved is not None:
            unproved.extend((i, p) for p in rows)
        return ([f"{what}: sequence {i}: not proved ({exc})"] if rows else []) + (
            [f"{what}: code length of sequence {i}: not proved ({exc})"] if claimed else [])
    bad: list[str] = []
    if claimed is not None:
        text = lm_codeclaims.code_length_failure(i, claimed, labels, outs, derived, net["f"],
                                                 what)
        bad += [text] if text else []
    for p in rows:
        mids, rad = outs[p]
        text = margin_failure(i, p, labels[p], mids, rad, net["f"])
        if text:
            bad.append(f"{what}: {text}")
            if unproved is not None:
                unproved.append((i, p))
    return bad


def text(t: Json) -> str:
    """The claim line of the totals ``t["execution"]``."""
    e = t["execution"]
    return (f"{e['proved']} of {t['positions']} positions have the label as unique argmax "
            f"in every {e['format']} execution (model: {e['model']}; "
            f"{t['proved']} positions claimed for the real-valued function)")
