"""``exactmem precision CERT`` for a language-model certificate: per format (float64,
float32, bfloat16, float16), how many of the certified positions keep the label as the
unique argmax -- proved for every execution of that format (the execution model of
docs/trained-models.md, "Execution claims") and seen in one torch run in that dtype -- with
an optional plot (issue: claims about the model people run).

The float32/bfloat16/float16 counts are the producer's proofs
(:func:`~exactmem.lm.exec_balls.prove_execution`), made over the certificate's real-valued
claim; ``certify-model --execution F`` writes the same proof as a claim the checker
re-proves.  The torch runs are one execution each: evidence, not proof.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

FORMATS = ("float64", "float32", "bfloat16", "float16")


def _torch_held(spec: Any, tokens: np.ndarray, labels: np.ndarray, dtype: str,
                claimed: list[list[int]]) -> int:
    """Certified positions where torch, run on the weights rounded to ``dtype``, keeps the
    label as the unique argmax."""
    from exactmem.lm.torchrun import torch_right

    held = torch_right(spec, tokens, labels, dtype)
    return sum(int(held[i, p]) for i, row in enumerate(claimed) for p in row)


def lm_precision(path: str | Path, cert: dict[str, Any], ulps: int | None = None,
                 plot: str | Path | None = None,
                 log: Any = None) -> tuple[list[str], dict[str, Any]]:
    """The table lines and JSON-ready data of ``exactmem precision`` for the language-model
    certificate ``cert`` read from ``path``; ``ulps``: the execution model's accuracy of
    exp/tanh/erf/rsqrt (default that of ``certify-model --execution``)."""
    from exactmem.api.lm import execution_model
    from exactmem.certificate import dataset_from_certificate
    from exactmem.errors import SpecError
    from exactmem.lm import exporting as lm
    from exactmem.lm.exec_balls import prove_execution, refuse_execution

    say = log or (lambda _msg: None)
    ulps = execution_model("float32", ulps)  # the default, or a SpecError out of range
    base = Path(path).parent
    spec = lm.spec_of(cert, base)
    tokens, labels = lm.tokens_of(spec, dataset_from_certificate(cert, base))
    claimed = lm.claimed_positions(cert, tokens)
    total = sum(map(len, claimed))
    try:
        refuse_execution(spec)
        covered = None
    except SpecError as exc:
        covered = str(exc)
    rows: list[dict[str, Any]] = []
    for fmt in FORMATS:
        row: dict[str, Any] = {"format": fmt, "certified": total}
        if fmt == "float64":
            row["proved"] = None  # the real-valued claim; float64 execution is not modelled
        elif covered is None:
            say(f"precision: proving the {total} certified positions for every {fmt} "
                "execution")
            got = prove_execution(spec, tokens.tolist(), labels.tolist(), claimed, fmt, ulps)
            row["proved"] = sum(map(len, got))
        else:
            row["proved"] = None
        row["torch_held"] = _torch_held(spec, tokens, labels, fmt, claimed)
        rows.append(row)
    lines = [f"{'format':<9} {'proved for every execution':>28}  torch run (one execution)"]
    for r in rows:
        proof = ("real-valued claim" if r["format"] == "float64"
                 else "not covered" if r["proved"] is None
                 else f"{r['proved']} of {total}")
        lines.append(f"{r['format']:<9} {proof:>28}  {r['torch_held']} of {total}")
    lines.append(f"({total} certified positions of {tokens.size}; execution model: any "
                 f"summation order, exp/tanh/erf/rsqrt within {ulps} ulps; the proofs are "
                 "the producer's: certify-model --execution FORMAT writes one as a claim the "
                 "checker re-proves; the torch runs are one execution each, evidence only)")
    if covered is not None:
        lines.append(f"execution proofs not made: {covered}")
    ex = (cert.get("claims") or {}).get("execution")
    if isinstance(ex, dict) and isinstance(ex.get("positions"), list):
        k = sum(len(r) for r in ex["positions"] if isinstance(r, list))
        lines.append(f"the certificate claims {k} positions for every {ex.get('format')} "
                     f"execution (ulps {ex.get('ulps')}); exactmem check re-proves it")
    if plot:
        _plot(rows, total, str(plot), str(path))
        lines.append(f"plot: {plot}")
    return lines, {"certificate": str(path), "positions": int(tokens.size),
                   "certified": total, "ulps": ulps, "rows": rows}


def _plot(rows: list[dict[str, Any]], total: int, out: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from exactmem.files.atomic import atomic_path

    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    proved = [r["proved"] if r["proved"] is not None else (total if r["format"] == "float64"
                                                          else 0) for r in rows]
    ax.bar(x - 0.2, proved, 0.4, label="proved for every execution (float64: the "
                                       "real-valued claim)")
    ax.bar(x + 0.2, [r["torch_held"] for r in rows], 0.4, label="held in one torch run")
    ax.axhline(total, color="grey", lw=0.8, ls="--")
    ax.set_xticks(x, [r["format"] for r in rows])
    ax.set_ylabel(f"of {total} certified positions")
    ax.set_title(Path(title).name, fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    with atomic_path(Path(out)) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
