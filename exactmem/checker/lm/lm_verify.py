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
(:func:`lm_model.precision`).

Optional ``claims.code_length_bits``: per sequence an upper bound ``"p/q"`` on its code length
``-sum_t log2 p(label_t)`` over every position (docs/memorized-bits.md).  The checker derives
its own upper bound from its logit balls (:mod:`lm_codelength`) and rejects a claim below it;
it then states, over the distinct sequences (a repeated one counted once), how far the
model's code length lies below the uniform code over the dataset's vocabulary: memorized bits
only when the dataset records a generator the checker regenerates (:mod:`lm_uniform`).  An
optional ``reference`` model adds Morris et al.'s mem_U (:mod:`lm_reference`).

Optional ``claims.wrong_positions`` and ``claims.extraction`` (greedy extraction from a
prefix, docs/extraction.md) are read and re-proved by :mod:`lm_extract`.
"""

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..cert_dataset import canonical, dataset_object, dataset_source
from ..parse import integer, number, obj, ratio, typed
from ..passes import Progress
from ..verdict import CheckReport, Unusable
from . import (
    lm_codelength,
    lm_exec_verify,
    lm_extract,
    lm_forward,
    lm_reference,
    lm_uniform,
    lm_weights,
)
from .lm_bounds import Degenerate
from .lm_model import at_precision, header, model, precision, work

FORMAT = "exactmem.lm-certificate/1"
TOP = ("format", "model", "dataset", "claims", "digest")
MAX_WORK = 1 << 40  # multiply-adds of the forward passes, estimated before any tensor is read
Positions = list[tuple[int, int]]  # (sequence, position) pairs
Outcome = tuple[list[str], bool, str | None]  # failures, unusable, the claim


def code_lengths(value: Any, toks: list[list[int]], labels: list[list[int]],
                 size: int) -> list[tuple[int, int]]:
    """``claims.code_length_bits``: one non-negative ``"p/q"`` per sequence; the dataset must
    label each position with the next token (the last label is the token after the input),
    so the labels of a sequence are its tokens 1..n, coded given token 0."""
    rows = typed(value, list, "claims.code_length_bits")
    if len(rows) != len(toks):
        raise Unusable(f"claims.code_length_bits: expected {len(toks)} bounds, found {len(rows)}")
    out: list[tuple[int, int]] = []
    for i, text in enumerate(rows):
        p, q = ratio(text, f"claims.code_length_bits[{i}]")
        if p < 0:
            raise Unusable(f"claims.code_length_bits[{i}]: a code length is >= 0")
        if any(labels[i][k] != toks[i][k + 1] for k in range(len(toks[i]) - 1)):
            raise Unusable(f"claims.code_length_bits: sequence {i} is not labelled with its "
                           "next tokens, so its code length is not that of the sequence")
        if labels[i][-1] >= size:
            raise Unusable(f"claims.code_length_bits: sequence {i}'s last label is not a token "
                           f"of the dataset's vocabulary of {size}")
        out.append((p, q))
    return out


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
          reference: bool = False) -> Outcome:
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
    prove are appended to ``exec_unproved``.  ``reference`` (True): the standard-library
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
            coded = code_lengths(cert["claims"]["code_length_bits"], toks, labels, size)
        wrong, extract = lm_extract.read(cert["claims"], toks, labels, head["vocab_size"])
        want = lm_extract.wanted(pos, wrong)
        ref = lm_reference.read(cert["reference"], head, toks, coded) \
            if "reference" in cert else None
        execution = None
        if "execution" in cert["claims"]:
            execution = lm_exec_verify.parse(cert["claims"]["execution"], toks)
        n = len(toks[0])
        wanted = [n if coded else len(row) for row in want]
        if execution is not None:  # a second forward pass for its sequences
            wanted += [len(row) for row in execution[1]]
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
    f = precision(net, toks, want, coded is not None)
    if f != net["f"]:
        net = at_precision(net["parsed"], f)
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
        erows = execution[1][i] if execution is not None else []
        if not want[i] and coded is None and not erows:
            continue
        if max(labels[i]) >= net["vocab"]:
            failures.append(f"sequence {i}: a label is not a token of the model's vocabulary")
            continue
        if erows and execution is not None:
            failures += lm_exec_verify.check_sequence(net, i, toks[i], labels[i], erows,
                                                      execution[0], margin_failure,
                                                      exec_bad)
            exec_proved += len(erows)
        if not want[i] and coded is None:
            continue
        try:
            outs = lm_forward.logits(net, toks[i], range(n) if coded else want[i])
        except Degenerate as exc:
            failures.append(f"sequence {i}: {exc}")
            continue
        if coded is not None:
            bad = code_length_failure(i, coded[i], labels[i], outs, derived, f)
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
        exec_held = (execution[0].fmt, [[p for p in row if (i, p) not in lost]
                                        for i, row in enumerate(execution[1])])
    mem = mem_u = None
    if coded is not None:
        once = distinct(toks, labels, lo, hi)
        mem = lm_codelength.below_uniform([coded[i] for i in once],
                                          lm_codelength.reference_lower(n, size))
        if ref is not None:
            mem_u = (lm_reference.mem_u(ref, coded, once), len(once), ref["name"])
    part: dict[str, Any] = {
        "proved": proved, "positions": (hi - lo) * n, "full": full, "sequences": hi - lo,
        "partial": partial, "n": n, "vocab": size, "below_uniform": mem, "f": f,
        "seed": seed, "mem_u": mem_u,
        **lm_extract.totals(wrong, extract, pos, lo, hi, exec_held)}
    if execution is not None:
        part["execution"] = {"proved": exec_proved, "format": execution[0].fmt,
                             "model": execution[0].text()}
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


def distinct(toks: list[list[int]], labels: list[list[int]], lo: int, hi: int) -> list[int]:
    """The indices in ``[lo, hi)`` of the sequences that do not repeat an earlier one of the
    whole dataset (same tokens and labels): a repeated sequence is counted once."""
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    out: list[int] = []
    for i in range(hi):
        key = (tuple(toks[i]), tuple(labels[i]))
        if key not in seen:
            seen.add(key)
            if i >= lo:
                out.append(i)
    return out


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals of disjoint slices, in order, as those of their union: counts and the
    exact rational code-length totals are sums (no rounding before the claim is written)."""
    out = dict(parts[0])
    for t in parts[1:]:
        for key in ("proved", "positions", "full", "sequences"):
            out[key] += t[key]
        if "execution" in out:
            out["execution"] = {**out["execution"],
                                "proved": out["execution"]["proved"] + t["execution"]["proved"]}
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
        claim += "\nc claim: " + below_uniform_text(t["below_uniform"], t["sequences"],
                                                     t["n"], t["vocab"], t.get("seed"))
    if t.get("mem_u"):
        total, count, name = t["mem_u"]
        claim += "\nc claim: " + lm_reference.text(total, count, t["sequences"], name)
    return claim


def code_length_failure(i: int, claimed: tuple[int, int], labels: list[int],
                        outs: Mapping[int, tuple[list[int], int]],
                        derived: dict[int, int] | None = None,
                        f: int = lm_forward.F) -> str | None:
    """None when the checker's own upper bound of sequence ``i``'s code length is at most the
    claimed ``p/q``; else the failure text."""
    p, q = claimed
    upper = 0
    for k, y in enumerate(labels):
        mids, rad = outs[k]
        upper += lm_codelength.position_upper(mids, rad, y, f)
    if derived is not None:
        derived[i] = upper
    if upper * q <= p << lm_codelength.P:
        return None
    return (f"sequence {i}: claimed code length {number(p)}/{number(q)} bits is below what "
            f"the checker proves ({number(upper)}/2^{lm_codelength.P} bits)")


def below_uniform_text(totals: lm_codelength.Totals, sequences: int, n: int, vocab: int,
                       seed: int | None = None) -> str:
    """The code-length claim from the exact totals ``(clipped, unclipped, code, distinct,
    uniform)`` of :func:`lm_codelength.below_uniform`, summed over the distinct sequences
    (docs/memorized-bits.md).  It says what was measured: the model's code length against
    the uniform code, and calls the clipped sum memorized bits only when the data is what a
    recorded generator draws from ``seed`` (:mod:`lm_uniform`: regenerated and compared),
    so that the uniform distribution is the data's true distribution."""
    clipped, unclipped, code, count, uniform = totals
    repeats = sequences - count
    low = number(clipped.numerator // clipped.denominator)
    text = (f"code length at most {number(-(-code.numerator // code.denominator))} bits for "
            f"the {count} distinct sequences of the dataset"
            + (f" ({repeats} repeated sequences counted once)" if repeats else "")
            + f", {number(unclipped.numerator // unclipped.denominator)} bits below the "
            f"uniform code over {vocab} tokens ({number(uniform.numerator // uniform.denominator)}"
            f" bits: {n} predicted positions per sequence, token 0 not predicted); ")
    if seed is not None:
        return text + (
            f"memorized bits (Morris et al. 2025, the data is uniform random: regenerated "
            f"from seed {seed} by {lm_uniform.NAME}): at least {low} bits, per sequence "
            "max(0, uniform - code length) with the uniform distribution the data's true "
            "distribution (rigorous bounds: code length rounded up, the rest down)")
    return text + (
        f"per sequence max(0, uniform - code length), summed as Morris et al. 2025: "
        f"at least {low} bits (rigorous bounds: code length rounded up, the rest down). "
        "These are bits below the uniform code, not memorized bits: the checker cannot see "
        "that the data is uniform random (the dataset records no generator it regenerates)")
