"""The self-check of ``certify-model`` (:func:`~exactmem.api.lm.certify_lm`): the trusted
checker re-proves the producer's certificate in process before it is written, and its own
bounds decide -- positions it does not re-prove are left out, code-length claims are set to
the bounds it derives (docs/trained-models.md, "Self-check")."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from exactmem.api.language_model_result import LMResult
from exactmem.errors import SpecError


def self_checked(spec: Any, ds: Any, positions: list[list[int]], partial: bool,
                  rel: str | None, cls: Any, binding: dict[str, Any] | None, tmp: Path | None,
                  where: Path, progress: Any, t: dict[str, float], say: Any,
                  result: LMResult, ref: Any, code_lengths: list[Any],
                  coded: bool, ex: dict[str, Any] | None,
                  sharded: tuple[Any, int] = (None, 1)) -> tuple[dict[str, Any], str | None]:
    """The certificate after the in-process checker (its weights file, if bound, at
    ``tmp``): code-length claims set to the checker's own bounds, positions it does not
    re-prove left out (``result`` updated); a rejection raises :class:`SpecError`.  Also
    the checker's claim when the certificate returned is the one it checked (else None)."""
    from exactmem.checker.lm.lm_verify import check as check_lm
    from exactmem.lm.certfile import build_lm_certificate

    def build() -> dict[str, Any]:
        c = build_lm_certificate(spec, ds, positions, partial, rel, cls, ex, binding)
        return ref.attach(c) if ref is not None else c

    cert = build()
    clock = time.perf_counter()
    unproved: list[tuple[int, int]] = []
    exec_unproved: list[tuple[int, int]] = []
    derived: dict[int, int] = {}
    ref_derived: dict[int, tuple[int, int]] = {}
    exec_derived: dict[int, int] = {}
    checked = cert
    if sharded[0] is not None:  # the same outputs, from slices of the sequences
        from exactmem.api.model_shards import check_sharded

        got = check_sharded(cert, where, tmp, sharded[1], sharded[0], progress)
        bad, unusable, claim = got.bad, got.unusable, got.claim
        unproved, derived, ref_derived = got.unproved, got.derived, got.ref_derived
        exec_unproved, exec_derived = got.exec_unproved, got.exec_derived
    else:
        bad, unusable, claim = check_lm(cert, where, progress, unproved=unproved,
                                        derived=derived, ref_derived=ref_derived,
                                        exec_unproved=exec_unproved, weights=tmp,
                                        exec_derived=exec_derived)
    t["check"] = time.perf_counter() - clock
    longer = [b for b in bad if "claimed code length" in b]
    bad = [b for b in bad if not b.startswith("execution ")]
    if ex is not None and exec_unproved:  # the checker's bounds decide: drop the rest
        say(f"self-check: {len(exec_unproved)} positions proved for every {ex['format']} "
            "execution by the producer are not re-proved by the checker; they are left out")
        for i, p in exec_unproved:
            ex["positions"][i].remove(p)
        set_exec(result, ex["positions"], ds.N, ds.n)
        cert = build()
    if unusable or len(bad) - len(longer) != len(unproved) or (unproved and not partial):
        raise SpecError("self-check: the checker rejects the certificate: " + "; ".join(bad[:5]))
    tight = [checker_bound(derived[i]) for i in range(len(code_lengths))] \
        if coded and len(derived) == len(code_lengths) else code_lengths
    if tight != code_lengths:
        # the claim is the checker's own bound (it re-derives exactly that, so it verifies):
        # raised where the producer's balls were narrower, lowered where they were wider
        say(f"self-check: code-length bounds set to the checker's own ({len(longer)} raised)")
        code_lengths[:] = tight
        result.code_lengths = code_lengths
        cert = build()
    if ex is not None and ex.get("code_length_bits") is not None:
        if _exec_code_lengths(ex, exec_derived, ds.N, say, result):
            cert = build()
    if ref is not None:
        from exactmem.checker.lm.lm_codelength import P

        if ref.adopt(ref_derived, P):
            say("self-check: the reference's code-length bounds set to the checker's own")
            cert = build()
        result.mem_u = mem_u_bounds(ref, ds, code_lengths, result.float_code_lengths)
    if unproved:  # re-proved separately, each position on its own: drop what it could not
        say(f"self-check: {len(unproved)} positions proved by the producer are not re-proved "
            "by the checker's bounds; they are left out")
        for i, p in unproved:
            positions[i].remove(p)
        cert = build()
        result.proved -= len(unproved)
        result.sequences_full = sum(len(r) == ds.n for r in positions)
        result.certified = mask(positions, ds.N, ds.n)
    return cert, (claim if cert is checked and not bad and not unusable else None)


def _exec_code_lengths(ex: dict[str, Any], derived: dict[int, int], count: int, say: Any,
                       result: LMResult) -> bool:
    """The execution code-length claims set to the checker's own bounds (as the real-valued
    ones); dropped when it derives no bound for some sequence (its execution balls fail).
    Whether ``ex`` changed."""
    if len(derived) != count:
        say(f"self-check: the checker proves no code length for every {ex['format']} "
            f"execution of {count - len(derived)} sequences; none is claimed")
        ex["code_length_bits"] = None
        return True
    tight = [checker_bound(derived[i]) for i in range(count)]
    changed = tight != ex["code_length_bits"]
    if changed:
        say(f"self-check: {ex['format']} execution code-length bounds set to the checker's "
            "own")
    ex["code_length_bits"] = tight
    result.exec_code_lengths = list(tight)
    return changed


def mem_u_bounds(ref: Any, ds: Any, code_lengths: list[Any], floats: list[float]
                 ) -> tuple[Any, float]:
    """The certified lower bound and the float64 estimate of Morris et al.'s clipped sum."""
    from exactmem.lm.reference import distinct, mem_u

    once = distinct(ds.sequences, ds.labels)
    est = sum(max(0.0, ref.floats[i] - min(ref.floats[i], floats[i])) for i in once)
    return mem_u(ref.lower, ref.upper, code_lengths, once), est


def set_exec(result: LMResult, rows: list[list[int]], count: int, n: int) -> None:
    result.exec_proved = sum(map(len, rows))
    result.exec_certified = mask(rows, count, n)


def mask(positions: Any, count: int, n: int) -> np.ndarray:
    """``[count, n]`` booleans, True at the listed positions of each sequence."""
    out = np.zeros((count, n), dtype=bool)
    for i, row in enumerate(positions):
        out[i, list(row)] = True
    return out


def checker_bound(upper: int) -> Any:
    """The checker's code-length bound (units ``2**-P``) as a claim: rounded up to the
    producer's grid of ``2**-DENOM_BITS`` bits, plus one unit."""
    from fractions import Fraction

    from exactmem.checker.lm.lm_codelength import P
    from exactmem.lm.codelength import DENOM_BITS

    return Fraction(-(-upper >> (P - DENOM_BITS)) + 1, 1 << DENOM_BITS)

