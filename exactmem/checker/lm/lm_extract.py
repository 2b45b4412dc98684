"""Wrong-position and extraction claims of a language-model certificate (standard library
only; docs/extraction.md).

``claims.wrong_positions`` (optional): per sequence a list of ``[position, token]`` pairs,
positions strictly increasing, each meaning "the logit of ``token`` exceeds the logit of the
label at ``position``", re-proved from the checker's own logit balls ``(mids, rad)``: the
lower bound of ``token``'s logit, ``mids[token] - rad``, must exceed the upper bound of the
label's, ``mids[label] + rad``.  Then the label is not an argmax there.

``claims.extraction`` (optional): ``{"prefix": k, "suffix": m}``, greedy decoding from the
first ``k`` tokens of each sequence for ``m`` tokens (Carlini et al. 2023's
k-extractability).  The dataset must label the suffix positions ``k-1 .. k+m-2`` with the
tokens that follow them (label ``p`` = token ``p + 1`` for ``k-1 <= p <= k+m-3``), so the
label of position ``k-1+j`` is suffix token ``j``.  From the verified claims alone:

- *extractable*: every suffix position ``k-1 .. k+m-2`` is a claimed position (the label
  the unique argmax): by induction on ``j``, the decode's first ``j`` tokens are the true
  ones, so its input at the next position is the true prefix, whose unique argmax is the
  next true token;
- *not extractable*: some suffix position carries a proved wrong-position claim: if an
  earlier suffix position decodes wrongly the decode already differs; else the decode's
  input there is the true prefix, whose argmax is not the label;
- *undecided*: neither.  A sequence is never both (a claimed position's label is the unique
  argmax, a wrong position's is not an argmax; both verified is impossible).

With ``claims.execution`` (:mod:`lm_exec_verify`) a sequence is also counted *extractable in
every execution* of that model when every suffix position is an execution-claimed position:
the same induction, each step's forward pass one execution of the model (every operation
within the model's bound, whatever order, blocking or cache of keys and values computed it),
so greedy decoding in any such execution reproduces the suffix.  Not extractable stays a
claim about the real-valued function only.
"""

from typing import Any

from ..parse import integer, number, obj, typed
from ..verdict import Unusable

OPTIONAL = ("wrong_positions", "extraction")  # the optional keys of ``claims`` read here


def wrong_positions(value: Any, toks: list[list[int]], size: int) -> list[list[tuple[int, int]]]:
    """``claims.wrong_positions``: per sequence ``[[position, token], ...]``, positions
    strictly increasing, tokens in ``[0, size)`` (``size``: the model's vocabulary)."""
    rows = typed(value, list, "claims.wrong_positions")
    if len(rows) != len(toks):
        raise Unusable(f"claims.wrong_positions: expected {len(toks)} lists, found {len(rows)}")
    n = len(toks[0])
    out = []
    for i, row in enumerate(rows):
        typed(row, list, f"claims.wrong_positions[{i}]")
        pairs: list[tuple[int, int]] = []
        for j, pair in enumerate(row):
            where = f"claims.wrong_positions[{i}][{j}]"
            if type(pair) is not list or len(pair) != 2:
                raise Unusable(f"{where}: expected [position, token]")
            p = integer(pair[0], where + "[0]", 0, n - 1)
            t = integer(pair[1], where + "[1]", 0, size - 1)
            if pairs and p <= pairs[-1][0]:
                raise Unusable(f"claims.wrong_positions[{i}]: positions must be strictly "
                               "increasing")
            pairs.append((p, t))
        out.append(pairs)
    return out


def extraction(value: Any, toks: list[list[int]], labels: list[list[int]]) -> tuple[int, int]:
    """``claims.extraction``: ``(k, m)`` with ``k, m >= 1`` and ``k + m - 1 <= n``; the
    suffix positions must be labelled with the tokens that follow them."""
    obj(value, "claims.extraction", ("prefix", "suffix"))
    n = len(toks[0])
    k = integer(value["prefix"], "claims.extraction.prefix", 1, n)
    m = integer(value["suffix"], "claims.extraction.suffix", 1, n + 1 - k)
    for i in range(len(toks)):
        for p in range(k - 1, k + m - 2):
            if labels[i][p] != toks[i][p + 1]:
                raise Unusable(f"claims.extraction: sequence {i}, position {p}: the label "
                               f"{number(labels[i][p])} is not the next token "
                               f"{number(toks[i][p + 1])}, so greedy decoding from the "
                               "prefix is not what the labels describe")
    return k, m


def read(claims: dict[str, Any], toks: list[list[int]], labels: list[list[int]],
         vocab: int) -> tuple[list[list[tuple[int, int]]], tuple[int, int] | None]:
    """The optional claims of this module: ``(wrong, (k, m) or None)``, ``wrong`` a list of
    empty lists when ``claims.wrong_positions`` is absent."""
    wrong: list[list[tuple[int, int]]] = [[] for _ in toks]
    if "wrong_positions" in claims:
        wrong = wrong_positions(claims["wrong_positions"], toks, vocab)
    params = None
    if "extraction" in claims:
        params = extraction(claims["extraction"], toks, labels)
    return wrong, params


def wanted(pos: list[list[int]], wrong: list[list[tuple[int, int]]]) -> list[list[int]]:
    """Per sequence, the positions whose logits the checker needs: the claimed positions and
    the wrong positions."""
    return [sorted(set(p) | {q for q, _ in w}) for p, w in zip(pos, wrong)]


def wrong_failure(i: int, p: int, t: int, y: int, mids: list[int], rad: int, f: int) -> str | None:
    """None when ``token t``'s logit provably exceeds label ``y``'s at position ``p`` (the
    lower bound of one above the upper bound of the other); else the failure text."""
    if t == y:
        return (f"sequence {i}, position {p}: wrong-position token {t} is the label itself")
    margin = mids[t] - mids[y] - 2 * rad
    if margin > 0:
        return None
    return (f"sequence {i}, position {p}: token {t}'s logit is not proved above the label "
            f"{y}'s (margin lower bound {number(margin)}/2^{f})")


COUNTS = ("extractable", "not_extractable", "sequences", "exec_extractable")


def verdicts(pos: list[list[int]], wrong: list[list[tuple[int, int]]], k: int, m: int,
             lo: int, hi: int, exec_pos: list[list[int]] | None = None) -> dict[str, int]:
    """Counts over sequences ``lo .. hi-1`` from verified claims: ``extractable``,
    ``not_extractable``, ``sequences`` and, with the execution-claimed positions
    ``exec_pos``, ``exec_extractable`` (the rule of the module docstring)."""
    window = range(k - 1, k + m - 1)
    ext = wrong_n = exec_n = 0
    for i in range(lo, hi):
        claimed = set(pos[i])
        if all(p in claimed for p in window):
            ext += 1
        elif any(k - 1 <= p <= k + m - 2 for p, _ in wrong[i]):
            wrong_n += 1
        if exec_pos is not None and set(window) <= set(exec_pos[i]):
            exec_n += 1
    return {"extractable": ext, "not_extractable": wrong_n, "sequences": hi - lo,
            "exec_extractable": exec_n}


def totals(wrong: list[list[tuple[int, int]]], params: tuple[int, int] | None,
           pos: list[list[int]], lo: int, hi: int,
           execution: tuple[str, list[list[int]]] | None = None) -> dict[str, Any]:
    """The slice's totals for :func:`claim_lines` (summed over shards by :func:`merge`);
    ``execution``: the execution model's format and its verified positions per sequence."""
    part: dict[str, Any] = {"wrong": sum(len(wrong[i]) for i in range(lo, hi)),
                            "extraction": None}
    if params is not None:
        k, m = params
        part["extraction"] = {"prefix": k, "suffix": m,
                              "execution": None if execution is None else execution[0],
                              **verdicts(pos, wrong, k, m, lo, hi,
                                         None if execution is None else execution[1])}
    return part


def merge(out: dict[str, Any], t: dict[str, Any]) -> None:
    """Add the totals ``t`` of a further slice to ``out`` (in place)."""
    out["wrong"] = out.get("wrong", 0) + t.get("wrong", 0)
    a, b = out.get("extraction"), t.get("extraction")
    if a is not None and b is not None:
        out["extraction"] = {**a, **{key: a[key] + b[key] for key in COUNTS}}


def claim_lines(t: dict[str, Any]) -> list[str]:
    """The claim lines (without the ``c claim: `` prefix) for the totals of :func:`totals`."""
    out = []
    if t.get("wrong"):
        out.append(f"{t['wrong']} positions have another token's logit proved above the "
                   "label's (the label is not an argmax there)")
    e = t.get("extraction")
    if e is not None:
        out.append(f"{e['extractable']} of {e['sequences']} sequences extractable (greedy, "
                   f"prefix {e['prefix']}, suffix {e['suffix']}), {e['not_extractable']} "
                   f"proved not extractable, "
                   f"{e['sequences'] - e['extractable'] - e['not_extractable']} undecided "
                   "(real-valued function of the stored weights, decoding from the true "
                   "prefix; ties are never counted as extractable)")
        if e.get("execution") is not None:
            out.append(f"{e['exec_extractable']} of {e['sequences']} sequences extractable in "
                       f"every {e['execution']} execution (greedy, prefix {e['prefix']}, "
                       f"suffix {e['suffix']}: every suffix position claimed for every "
                       f"{e['execution']} execution of the model below)")
    return out
