"""Checking a language-model certificate ``exactmem.lm-certificate/1`` (standard library only).

Read strictly (docs/trained-models.md, "Certificate"): the model's shape, its norm kind
(``model.norm``: ``"layernorm"`` or ``"rmsnorm"``; absent in older certificates: LayerNorm),
every tensor as integers over one power of two (embedded, or from a safetensors file bound
by its length and SHA-256: :mod:`lm_weights`), the dataset (embedded or bound by SHA-256, a
``seq2seq`` token-id dataset: a label at every position), the claimed positions and the
digest.  Each claimed position is re-proved with the rigorous forward pass of
:mod:`lm_forward`: the lower bound of the label's logit must exceed the upper bound of every
other logit.  Nothing the producer computed is trusted; the claim "K of M positions" is
stated by the checker, with the working precision it chose from the model
(:func:`lm_model.prepared`).

Optional ``claims.code_length_bits``: per sequence an upper bound ``"p/q"`` on its code length
``-sum_t log2 p(label_t)`` over every position (docs/memorized-bits.md).  The checker derives
its own upper bound from its logit balls (:mod:`lm_codelength`) and rejects a claim below it;
it then states, over the distinct sequences (a repeated one counted once), how far the
model's code length lies below the uniform code over the dataset's vocabulary: memorized bits
only when the dataset records a generator the checker regenerates (:mod:`lm_uniform`).  An
optional ``reference`` model adds Morris et al.'s mem_U (:mod:`lm_reference`).  The
code-length claims are read, re-proved and stated by :mod:`lm_codeclaims`.

Optional ``claims.execution`` (docs/trained-models.md, "Execution claims"): positions, and
with ``code_length_bits`` per-sequence code-length bounds, claimed for every float execution
of its model, re-proved by :mod:`lm_exec_verify`.

Optional ``claims.wrong_positions`` and ``claims.extraction`` (greedy extraction from a
prefix, docs/extraction.md) are read and re-proved by :mod:`lm_extract`.
"""

import hashlib
from pathlib import Path
from typing import Any

from ..cert_dataset import canonical, dataset_object, dataset_source
from ..parse import integer, number, obj, typed
from ..passes import Progress
from ..verdict import CheckReport, Unusable
from . import (
    lm_codeclaims,
    lm_codelength,
    lm_exec_verify,
    lm_extract,
    lm_forward,
    lm_reference,
    lm_uniform,
    lm_weights,
)
from .lm_bounds import Degenerate
from .lm_model import header, model, prepared, work

FORMAT = "exactmem.lm-certificate/1"
TOP = ("format", "model", "dataset", "claims", "digest")
MAX_WORK = 1 << 40  # multiply-adds of the forward passes, estimated before any tensor is read
Positions = list[tuple[int, int]]  # (sequence, position) pairs
Outcome = tuple[list[str], bool, str | None]  # failures, unusable, the claim


def claims(value: Any, toks: list[list[int]]) -> tuple[bool, list[list[int]]]:
    """``claims``: ``partial`` and, per sequence, its claimed positions (strictly
    increasing); without ``partial`` every position must be claimed."""
    obj(value, "claims", ("partial", "positions"),
        ("code_length_bits", "execution", *lm_extract.OPTIONAL))
    partial = typed(value["partial"], bool, "claims.partial")
    pos = typed(value["positions"], list, "claims.positions")
    if len(pos) != len(toks):
        raise Unusable(f"claims.positions: expected {len(toks)} lists, found {len(pos)}")
    n = len(toks[0])
    for i, row in enumerate(pos):
        typed(row, list, f"claims.positions[{i}]")
        for j, p in enumerate(row):
            integer(p, f"claims.positions[{i}][{j}]", 0, n - 1)
            if j and p <= row[j - 1]:
                raise Unusable(f"claims.positions[{i}]: positions must be strictly increasing")
        if not partial and len(row) != n:
            raise Unusable(f"claims.positions[{i}]: without partial every position is claimed")
    return partial, pos


def margin_failure(i: int, p: int, y: int, mids: list[int], rad: int,
                   f: int = lm_forward.F) -> str | None:
    """None when the label's logit provably exceeds every other; else the failure text
    with the proved margin bound (``2**-F`` units shown as a decimal-free ratio)."""
    if len(mids) == 1:
        return None  # one class: its logit is the unique maximum
    best = max(m for k, m in enumerate(mids) if k != y)
    margin = mids[y] - best - 2 * rad
    if margin > 0:
        return None
    rival = next(k for k, m in enumerate(mids) if k != y and m == best)
    return (f"sequence {i}, position {p}: label {y} is not proved the unique argmax "
            f"(class {rival}; margin lower bound {number(margin)}/2^{f})")


def check(cert: dict[str, Any], base: Path, progress: Progress | None = None,
          shard: tuple[int, int] = (0, 1), unproved: Positions | None = None,
          derived: dict[int, int] | None = None, totals: dict[str, Any] | None = None,
          ref_derived: dict[int, tuple[int, int]] | None = None,
          exec_unproved: Positions | None = None, weights: Path | None = None,
          reference: bool = False, exec_derived: dict[int, int] | None = None) -> Outcome:
    """Check a decoded LM certificate; returns ``(failures, unusable, claim)``; ``weights``:
    the bound weights file to read instead of the one beside the certificate.  The
    positions ``(i, p)`` whose margin (or wrong-position claim) is not proved are appended
    to ``unproved`` if given;
    with code lengths, ``derived[i]`` is set to the checker's own upper bound of sequence
    ``i``'s code length (units ``2**-lm_codelength.P``) if ``derived`` is a dict.  A dict
    ``totals`` receives the slice's exact counts and code-length totals (:func:`merge`,
    :func:`claim_text`), so that shards combine into the claim of one pass.  A dataset
    that records its generator is regenerated (:mod:`lm_uniform`); an optional
    ``reference`` model is checked by :mod:`lm_reference` (``ref_derived[i]``: the checker's
    ``(lower, upper)`` bounds of its code length).  With ``claims.execution`` its positions
    are re-proved for every execution of its model (:mod:`lm_exec_verify`); those it cannot
    prove are appended to ``exec_unproved``; with its ``code_length_bits``,
    ``exec_derived[i]`` is set as ``derived[i]`` from the execution balls of every position.
    ``reference`` (True): the standard-library
    products only (else :mod:`lm_limbs` where available: the same integers)."""
    failures: list[str] = []
    try:
        obj(cert, "certificate", TOP, ("reference",))
        if type(cert["digest"]) is not str:
            raise Unusable("digest: expected a 'sha256:...' string")
        data, where = dataset_source(cert["dataset"], base)
        task, inputs, toks, labels, size, ds_hash = dataset_object(data, where)
        if ds_hash != cert["dataset"]["sha256"]:
            failures.append("dataset: its SHA-256 does not match the one bound in the certificate")
        if (task, inputs) != ("seq2seq", "token-ids"):
            raise Unusable(f"dataset: a language-model certificate needs a seq2seq token-id "
                           f"dataset (a label at every position), found {task}, {inputs}")
        seed = None
        if "generator" in data:  # a recorded generator the data does not match: rejected
            mismatch = lm_uniform.mismatch(data["generator"], toks, labels, size)
            failures += [mismatch] if mismatch else []
            seed = None if mismatch else data["generator"]["seed"]
        head = header(cert["model"])
        if weights is not None and "weights" not in head:
            raise Unusable("--weights: the certificate embeds its tensors (model.tensors); it "
                           "binds no weights file")
        if size > head["vocab_size"]:
            raise Unusable(f"dataset.vocab_size: {number(size)} tokens, more than the model's "
                           f"vocabulary of {head['vocab_size']}")
        if len(toks[0]) > head["context"]:
            raise Unusable(f"dataset: sequences of {len(toks[0])} tokens exceed the model's "
                           f"context of {head['context']}")
        partial, pos = claims(cert["claims"], toks)
        coded = None
        if "code_length_bits" in cert["claims"]:
            coded = lm_codeclaims.code_lengths(cert["claims"]["code_length_bits"], toks,
                                               labels, size)
        wrong, extract = lm_extract.read(cert["claims"], toks, labels, head["vocab_size"])
        want = lm_extract.wanted(pos, wrong)
        ref = lm_reference.read(cert["reference"], head, toks, coded) \
            if "reference" in cert else None
        execution = None
        if "execution" in cert["claims"]:
            execution = lm_exec_verify.parse(cert["claims"]["execution"], toks, labels, size,
                                             coded is not None)
        n = len(toks[0])
        wanted = [n if coded else len(row) for row in want]
        if execution is not None:  # a second forward pass: every position with code lengths
            wanted += [n if execution.code_lengths else len(row)
                       for row in execution.positions]
        cost = work(head, wanted, n) + (lm_reference.cost(ref, toks) if ref else 0)
        if cost > MAX_WORK:
            raise Unusable(f"the forward passes would take about {cost:.3g} multiply-adds "
                           f"(from the model's shape and the claims), more than the limit "
                           f"of {MAX_WORK:.3g} (MAX_WORK)")
        bound = None  # model.weights: the bound file, its hash checked before it is read
        if "weights" in cert["model"]:
            bound = lm_weights.load(cert["model"]["weights"], base, weights)
        if isinstance(bound, str):  # a changed file: rejected, not read
            failures.append(bound)
        else:
            net = model(cert["model"], bound=bound, fast=not reference)
            if execution is not None:
                lm_exec_verify.refuse(net)
        body = {k: v for k, v in cert.items() if k != "digest"}
        actual = "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()
        if cert["digest"] != actual:
            failures.insert(0, f"digest: the certificate's content does not match its digest "
                               f"(claimed {cert['digest'][:80]}, content hashes to {actual})")
    except Unusable as exc:
        return [*failures, str(exc)], True, None
    if failures:  # the certificate is rejected whatever its positions: no forward pass
        return [*failures, "claims: not evaluated (a certificate whose digest, dataset hash or "
                           "weights file fails is rejected whatever its claims)"], False, None
    net = prepared(net, toks, want, coded is not None)
    f: int = net["f"]
    if ref is not None:
        try:
            lm_reference.prepare(ref, toks, pos)
        except Unusable as exc:
            return [str(exc)], True, None
    k, count = shard
    lo, hi = k * len(toks) // count, (k + 1) * len(toks) // count
    proved = full = exec_proved = 0
    n = len(toks[0])
    exec_bad: list[tuple[int, int]] = []  # execution positions not re-proved (this slice)
    for i in range(lo, hi):
        if progress is not None:
            progress("forward", i - lo, hi - lo)
        erows = execution.positions[i] if execution is not None else []
        if not want[i] and coded is None and not erows:
            continue
        if max(labels[i]) >= net["vocab"]:
            failures.append(f"sequence {i}: a label is not a token of the model's vocabulary")
            continue
        if execution is not None and (erows or execution.code_lengths):
            failures += lm_exec_verify.check_sequence(net, i, toks[i], labels[i], execution,
                                                      margin_failure, exec_bad, exec_derived)
            exec_proved += len(erows)
        if not want[i] and coded is None:
            continue
        try:
            outs = lm_forward.logits(net, toks[i], range(n) if coded else want[i])
        except Degenerate as exc:
            failures.append(f"sequence {i}: {exc}")
            continue
        if coded is not None:
            bad = lm_codeclaims.code_length_failure(i, coded[i], labels[i], outs, derived, f)
            if bad:
                failures.append(bad)
        if ref is not None:
            failures += lm_reference.sequence(ref, i, toks[i], labels[i], ref_derived)
        for p in pos[i]:
            mids, rad = outs[p]
            bad = margin_failure(i, p, labels[i][p], mids, rad, f)
            if bad:
                failures.append(bad)
                if unproved is not None:
                    unproved.append((i, p))
        for p, t in wrong[i]:
            mids, rad = outs[p]
            bad = lm_extract.wrong_failure(i, p, t, labels[i][p], mids, rad, f)
            if bad:
                failures.append(bad)
                if unproved is not None:
                    unproved.append((i, p))
        proved += len(pos[i])
        full += len(pos[i]) == len(toks[i])
    if progress is not None:
        progress("forward", hi - lo, hi - lo)
    if exec_unproved is not None:
        exec_unproved += exec_bad
    exec_held = None  # the execution model's format and the positions re-proved under it
    if execution is not None:
        lost = set(exec_bad)
        exec_held = (execution.model.fmt, [[p for p in row if (i, p) not in lost]
                                           for i, row in enumerate(execution.positions)])
    mem = mem_u = exec_mem = None
    if coded is not None:
        once = lm_codeclaims.distinct(toks, labels, lo, hi)
        h_lo = lm_codelength.reference_lower(n, size)
        mem = lm_codelength.below_uniform([coded[i] for i in once], h_lo)
        if execution is not None and execution.code_lengths:
            exec_mem = lm_codelength.below_uniform([execution.code_lengths[i] for i in once],
                                                   h_lo)
        if ref is not None:
            mem_u = (lm_reference.mem_u(ref, coded, once), len(once), ref["name"])
    part: dict[str, Any] = {
        "proved": proved, "positions": (hi - lo) * n, "full": full, "sequences": hi - lo,
        "partial": partial, "n": n, "vocab": size, "below_uniform": mem, "f": f,
        "seed": seed, "mem_u": mem_u,
        **lm_extract.totals(wrong, extract, pos, lo, hi, exec_held)}
    if execution is not None:
        part["execution"] = {"proved": exec_proved, "format": execution.model.fmt,
                             "model": execution.model.text(), "below_uniform": exec_mem}
    if totals is not None:
        totals.update(part)
    return failures, False, None if failures else claim_text(part)


def check_report(cert: dict[str, Any], base: Path, progress: Progress | None = None,
                 shard: tuple[int, int] = (0, 1), weights: Path | None = None,
                 reference: bool = False) -> CheckReport:
    """:func:`check` as the checker's one report (the table of formats in
    :mod:`..verify`): the claim and the exact slice totals that
    :func:`..sharded.combine` adds up (``totals``)."""
    totals: dict[str, Any] = {}
    bad, unusable, claim = check(cert, base, progress, shard, totals=totals, weights=weights,
                                 reference=reference)
    report = CheckReport(bad, unusable, claim)
    report.totals = totals or None
    return report


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals of disjoint slices, in order, as those of their union: counts and the
    exact rational code-length totals are sums (no rounding before the claim is written)."""
    out = dict(parts[0])
    for t in parts[1:]:
        for key in ("proved", "positions", "full", "sequences"):
            out[key] += t[key]
        if "execution" in out:
            e, te = out["execution"], t["execution"]
            out["execution"] = {**e, "proved": e["proved"] + te["proved"]}
            if e.get("below_uniform") is not None and te.get("below_uniform") is not None:
                out["execution"]["below_uniform"] = tuple(
                    a + b for a, b in zip(e["below_uniform"], te["below_uniform"]))
        mine, theirs = out["below_uniform"], t["below_uniform"]
        if mine is not None and theirs is not None:
            out["below_uniform"] = tuple(a + b for a, b in zip(mine, theirs))
        lm_extract.merge(out, t)
        if out.get("mem_u") and t.get("mem_u"):
            out["mem_u"] = (out["mem_u"][0] + t["mem_u"][0], out["mem_u"][1] + t["mem_u"][1],
                            out["mem_u"][2])
    return out


def claim_text(t: dict[str, Any]) -> str:
    """The claim lines for the totals ``t`` of :func:`check` (or of :func:`merge`)."""
    claim = (f"{t['proved']} of {t['positions']} positions have the label as unique argmax "
             f"({t['full']} of {t['sequences']} sequences in full; "
             + ("partial" if t["partial"] else "all positions claimed")
             + f"; rigorous bounds at 2^-{t.get('f', lm_forward.F)} on the real-valued "
               "function of the stored weights)")
    for line in lm_extract.claim_lines(t):
        claim += "\nc claim: " + line
    if t.get("execution") is not None:
        claim += "\nc claim: " + lm_exec_verify.text(t)
    if t["below_uniform"] is not None:
        claim += "\nc claim: " + lm_codeclaims.below_uniform_text(
            t["below_uniform"], t["sequences"], t["n"], t["vocab"], t.get("seed"))
        if (t.get("execution") or {}).get("below_uniform") is not None:
            claim += "\nc claim: " + lm_codeclaims.execution_text(t)
    if t.get("mem_u"):
        total, count, name = t["mem_u"]
        claim += "\nc claim: " + lm_reference.text(total, count, t["sequences"], name)
    return claim
