"""What a bit-bounded search answer states, recomputed from its checked sizes (standard
library only; docs/proof-checker.md).

The sizes of an answer are checked one by one in :mod:`.search_check`; this module holds
what is said about them: the shapes and their parameter counts, and the summary -- the
fields ``status``, ``minimal``, ``proved_minimal`` and the texts ``qualifier``,
``claim``, ``claim_reason``, ``ties`` and ``minimize``.  Each is recomputed here and must
equal what the answer says; :func:`statement` is the sentence ``check-search`` prints,
written by the checker from what it checked, never copied from the file.
"""

from __future__ import annotations

from typing import Any

from ..parse import choice, integer, obj
from ..verdict import Unusable

KNOBS = ("layers", "heads", "d_model", "head_dim", "ff_width")
LIMITS = {"layers": 8, "heads": 16, "d_model": 64, "head_dim": 64, "ff_width": 1024}
MAX_FAMILY = 100_000  # shapes enumerated for proved_minimal (the search's cap)
MINIMIZE = (None, "ff-width", "heads", "params")
CAPPED = ("layers", "heads", "d_model", "ff_width")  # the knobs of a family's caps


class Failed(Exception):
    """A claim that does not hold (one reason per argument)."""


def shape(value: Any, where: str) -> dict[str, Any]:
    obj(value, where, (*KNOBS, "residual", "readout"))
    for k in KNOBS:
        integer(value[k], f"{where}.{k}", 0 if k == "ff_width" else 1, LIMITS[k])
    if type(value["residual"]) is not bool:
        raise Unusable(f"{where}.residual: expected true or false")
    choice(value["readout"], ("argmax", "scalar"), f"{where}.readout")
    shaped: dict[str, Any] = value
    return shaped


def params_of(sh: dict[str, Any], size: int, out_dim: int) -> int:
    """Dense parameter count: embedding ``m x size``; per block, per head ``W_Q, W_K, W_V``
    (``s x m``) and ``W_O`` (``m x s``), the feed-forward ``W1, b1, W2, b2``; the readout
    ``k x m`` and its bias."""
    m: int = sh["d_model"]
    s: int = sh["head_dim"]
    q: int = sh["ff_width"]
    heads: int = sh["heads"]
    layers: int = sh["layers"]
    block = heads * 4 * s * m + (2 * q * m + q + m if q else 0)
    return m * size + layers * block + out_dim * (m + 1)


def nests_in(small: dict[str, Any], big: dict[str, Any]) -> bool:
    """Every network of ``small`` is, padded with zeros (on every grid), one of ``big``:
    extra blocks and feed-forwards are the identity only through the residual."""
    if small["residual"] != big["residual"] or small["readout"] != big["readout"]:
        return False
    if any(small[k] > big[k] for k in KNOBS):
        return False
    residual: bool = small["residual"]
    return residual or (small["layers"] == big["layers"]
                        and (small["ff_width"] == 0) == (big["ff_width"] == 0))


def label(sh: dict[str, Any], residual: bool = False) -> str:
    text = f"L{sh['layers']} H{sh['heads']} m{sh['d_model']} s{sh['head_dim']} " \
           f"q{sh['ff_width']}"
    return text + (" res" if sh["residual"] else " nores") if residual else text


def qualifier(bits: int) -> str:
    """What a verified answer is about and whose word its refutations are: LRAT proofs of
    re-derived CNFs (or label consistency), both checked here."""
    return f"among {bits}-bit integer weights, LRAT-checked"


class Family:
    """The sizes (``out(shape)`` readout rows) a sweep's claims are about."""

    def __init__(self, size: int, out_dim: int) -> None:
        self.size, self.out_dim = size, out_dim

    def out(self, sh: dict[str, Any]) -> int:
        return 1 if sh["readout"] == "scalar" else self.out_dim

    def params(self, sh: dict[str, Any]) -> int:
        return params_of(sh, self.size, self.out(sh))

    def caps(self, answer: dict[str, Any]) -> dict[str, int]:
        fam = obj(answer.get("family"), "family",
                  ("max_layers", "max_heads", "max_d_model", "max_ff_width"))
        return {k: integer(fam[f"max_{k}"], f"family.max_{k}", 0 if k == "ff_width" else 1,
                           LIMITS[k]) for k in CAPPED}

    def beyond_caps(self, answer: dict[str, Any], low: dict[str, Any]) -> list[str]:
        """The smallest shape one step beyond each cap that has at most the minimal
        shape's parameters, as the search names it."""
        one = {"layers": 1, "heads": 1, "d_model": 1, "head_dim": 1, "ff_width": 0,
               "residual": low["residual"], "readout": low["readout"]}
        out = []
        for k, cap in self.caps(answer).items():
            sh = {**one, k: cap + 1}
            if self.params(sh) <= low["params"]:
                out.append(f"{label(sh, True)} ({self.params(sh)} parameters) is outside "
                           f"--max-{k.replace('_', '-')} {cap}")
        return out

    def smaller(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        """The shapes that must be refuted for ``proved_minimal``: with ``--minimize
        ff-width`` / ``heads`` the minimal shape with that knob smaller; with ``params``
        every shape of the family (its caps, the minimal shape's residual and readout)
        with fewer parameters -- and no shape beyond a cap may have as few as the minimal
        one."""
        low, mode = answer["minimal"], answer.get("minimize")
        base = {k: low[k] for k in (*KNOBS, "residual", "readout")}
        if mode == "ff-width":
            return [{**base, "ff_width": q} for q in range(low["ff_width"])]
        if mode == "heads":
            return [{**base, "heads": h} for h in range(1, low["heads"])]
        if mode != "params":
            raise Failed("proved_minimal: only a sweep (--minimize) proves minimality")
        cap = self.caps(answer)
        count = cap["layers"] * cap["heads"] * cap["d_model"] * (cap["d_model"] + 1) // 2 \
            * (cap["ff_width"] + 1)
        if count > MAX_FAMILY:
            raise Unusable(f"family: {count} shapes, more than {MAX_FAMILY}")
        if self.beyond_caps(answer, low):
            raise Failed(f"proved_minimal: a shape beyond the caps has at most "
                         f"{low['params']} parameters")
        return [sh for L in range(1, cap["layers"] + 1) for h in range(1, cap["heads"] + 1)
                for m in range(1, cap["d_model"] + 1) for s in range(1, m + 1)
                for q in range(cap["ff_width"] + 1)
                if self.params(sh := {**base, "layers": L, "heads": h, "d_model": m,
                                      "head_dim": s, "ff_width": q}) < low["params"]]


def _swept(answer: dict[str, Any], fam: Family, shapes: list[dict[str, Any]]) -> None:
    """``minimize`` names the sweep the sizes come from: one size without it; one knob
    varying with ``ff-width`` / ``heads``; shapes within the caps with ``params``."""
    mode = answer["minimize"]
    if mode not in MINIMIZE:
        raise Unusable(f"minimize: expected one of {MINIMIZE}")
    if mode is None:
        if len(shapes) != 1:
            raise Failed(f"minimize: null (one shape asked), yet the answer has "
                         f"{len(shapes)} sizes")
        return
    fixed: tuple[str, ...] = ("residual", "readout")
    if mode == "params":
        cap = fam.caps(answer)
        for sh in shapes:
            if any(sh[k] > cap[k] for k in CAPPED):
                raise Failed(f"minimize: 'params' sweeps the family of the caps, yet "
                             f"{label(sh)} is outside them")
    else:
        knob = mode.replace("-", "_")
        fixed = (*(k for k in KNOBS if k != knob), *fixed)
    if any(sh[k] != shapes[0][k] for sh in shapes for k in fixed):
        raise Failed(f"minimize: {mode!r} sweeps {'the caps' if mode == 'params' else mode} "
                     f"at one {' / '.join(fixed)}, yet the sizes differ in them")


def reason(answer: dict[str, Any], fam: Family, done: list[tuple[dict[str, Any], str]]
           ) -> str | None:
    """Why a found size is only "at most" (``None`` when it is minimal or none was
    found): the search's words, recomputed from the checked sizes."""
    if answer["status"] != "found" or answer["proved_minimal"]:
        return None
    mode = answer["minimize"]
    if mode is None:
        return "only the given shape was tried (no --minimize)"
    parts = []
    open_ = [e for e, st in done if st == "unknown"]
    if open_:
        named = ", ".join(label(e["shape"]) + (f" ({e['reason']})" if e.get("reason")
                                               else "") for e in open_[:3])
        parts.append(f"{len(open_)} smaller shape{'s' if len(open_) > 1 else ''} not "
                     f"decided: {named}" + (" ..." if len(open_) > 3 else ""))
    if mode == "params":
        outside = fam.beyond_caps(answer, answer["minimal"])
        if outside:
            parts.append("not tried: " + "; ".join(outside))
    return "; ".join(parts) or "not every smaller shape was refuted"


def summary(answer: dict[str, Any], done: list[tuple[dict[str, Any], str]], fam: Family,
            bits: int) -> None:
    """``status``, ``minimal``, ``proved_minimal`` and the texts follow from the checked
    entries (raises :class:`Failed` on the first that does not)."""
    for key in ("qualifier", "claim", "claim_reason", "ties", "minimize"):
        if key not in answer:
            raise Unusable(f"answer.{key}: missing")
    found = [{**e["shape"], "params": e["params"]} for e, st in done if st == "found"]
    choice(answer["status"], ("found", "infeasible", "unknown"), "status")
    if answer["status"] == "found":
        if answer["minimal"] not in found:
            raise Failed("minimal: not one of the found sizes")
    elif found or answer["minimal"] is not None:
        raise Failed(f"status {answer['status']!r}, yet a size was found or minimal given")
    if answer["status"] == "infeasible" and any(st != "infeasible" for _, st in done):
        raise Failed("status 'infeasible', yet a size is not refuted")
    if answer["ties"] != "split":
        raise Failed(f"ties: {answer['ties']!r}, but the CNFs and certificates checked are "
                     "about exact ties ('split': weight split over tied keys)")
    _swept(answer, fam, [e["shape"] for e, _ in done])
    if answer["proved_minimal"] is True:
        if answer["status"] != "found":
            raise Failed("proved_minimal without a found size")
        refuted = [e["shape"] for e, st in done if st == "infeasible"]
        for sh in fam.smaller(answer):
            if sh not in refuted:
                raise Failed(f"proved_minimal, yet the smaller shape {sh} is not refuted")
    elif answer["proved_minimal"] is not False:
        raise Unusable("proved_minimal: expected true or false")
    want = {"qualifier": qualifier(bits),
            "claim": (("minimal" if answer["proved_minimal"] else "at most")
                      if answer["status"] == "found" else None),
            "claim_reason": reason(answer, fam, done)}
    wrong = [f"{key}: the answer says {_quoted(answer[key])}, the checked sizes say "
             f"{_quoted(value)}" for key, value in want.items() if answer[key] != value]
    if wrong:
        raise Failed(*wrong)  # every rewritten text, one reason each


def _quoted(value: Any) -> str:
    text = "null" if value is None else repr(value)
    return text if len(text) <= 300 else text[:300] + "..."


def statement(answer: dict[str, Any], bits: int) -> str:
    """The verified answer in the checker's words (after :func:`summary` passed)."""
    m, status = answer["minimal"], answer["status"]
    if m is None:
        return f"status {status}: no size found, {qualifier(bits)}"
    how = "minimal" if answer["proved_minimal"] else "at most"
    text = (f"status found: {how} {m['params']} parameters, {qualifier(bits)} "
            f"({label(m, True)} {m['readout']})")
    why = answer["claim_reason"]
    return text + (f"; why at most: {why}" if why else "")
