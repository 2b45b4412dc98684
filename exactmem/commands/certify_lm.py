"""``exactmem certify-model MODEL DATA -o CERT [--partial]`` for trained language models
(a GPT-2 checkpoint directory, a nanoGPT checkpoint, a torch ``nn.TransformerEncoderLayer``
stack): import, cross-check, prove positions,
self-check, write.

The stages (docs/trained-models.md): :func:`~exactmem.lm.checkpoints.gpt2.load_gpt2` or
:func:`~exactmem.lm.checkpoints.nanogpt.load_nanogpt` reads the checkpoint exactly; the
spec's float64 forward pass must agree with the checkpoint's own torch forward pass on DATA
(else the import is wrong: exit 2); :func:`~exactmem.lm.positions.prove_positions`
decides the positions with ball arithmetic; the stdlib checker re-proves the certificate
before it is written.  Without ``--partial`` every position must be proved (exit 1
naming the failing positions with their margins, nothing written).  ``--no-self-check``
writes the producer's positions unchecked (and without code-length claims, whose value is
the checker's own bound), saying so: "not checked yet: run exactmem check CERT".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exactmem.api.lm import (  # noqa: F401 (re-exported: the LM side of certify-model)
    CROSS_CHECK_TOL,
    FORMATS,
    LMResult,
    certify_lm,
    checker_bound,
    load_lm,
    next_token_labelled,
)
from exactmem.errors import SpecError


def wants_lm(args: argparse.Namespace) -> str | None:
    """The language-model kind certify-model's arguments name ("gpt2", "nanogpt"), or
    None for the export layout."""
    fmt = getattr(args, "format", "auto")
    if fmt in ("gpt2", "nanogpt", "torch-encoder"):
        return str(fmt)
    if fmt == "auto":
        from exactmem.lm.checkpoints.gpt2 import is_gpt2_dir
        from exactmem.lm.checkpoints.nanogpt import is_nanogpt

        if is_gpt2_dir(Path(args.model)):
            return "gpt2"
        if is_nanogpt(Path(args.model)):
            return "nanogpt"
        from exactmem.lm.checkpoints.torch_encoder import is_torch_encoder

        if is_torch_encoder(Path(args.model)):
            return "torch-encoder"
    if getattr(args, "partial", False):
        raise SpecError("--partial: only for language-model checkpoints (a GPT-2 directory, "
                        "a nanoGPT checkpoint or a torch encoder checkpoint)")
    return None


def run_lm(args: argparse.Namespace, kind: str) -> int:
    """The CLI side of :func:`certify_lm`."""
    from exactmem import progress

    if args.quiet:
        progress.configure(quiet=True)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    tick, close = progress.hook("certify-model", heartbeat=True)
    try:
        r = certify_lm(args.model, args.data, args.output, partial=args.partial, kind=kind,
                       bind_dataset=args.bind_dataset, log=log, progress=tick,
                       producer=getattr(args, "producer", "auto"),
                       self_check=not getattr(args, "no_self_check", False),
                       strict_config=getattr(args, "strict_config", False))
    finally:
        close()
    times = ", ".join(f"{k} {v:.2f} s" for k, v in r.seconds.items())
    log(f"times: {times}")
    if not r.written:
        for i, p, m in r.failed[:50]:
            print(f"  sequence {i}, position {p}: not proved (float margin {m:.3g})",
                  file=sys.stderr)
        if len(r.failed) > 50:
            print(f"  ... and {len(r.failed) - 50} more positions", file=sys.stderr)
        print(f"not certified: {r.proved} of {r.positions} positions proved"
              + ("" if args.partial else " (without --partial all must be)")
              + f"; {args.output} was not written")
        return 1
    if not r.checked:
        print(f"not checked yet: run exactmem check {args.output} ({r.proved} of "
              f"{r.positions} positions proved by the producer, {r.sequences_full} sequences "
              f"in full, written to {args.output} without the in-process checker)")
        return 0
    print(f"certified {r.proved} of {r.positions} positions ({r.sequences_full} sequences in "
          f"full) of {args.data} for {args.model} -> {args.output}")
    if r.code_lengths:
        total = sum(r.code_lengths)
        log(f"code length: at most {float(total):.6f} bits in all (float64 estimate "
            f"{sum(r.float_code_lengths):.6f}); `exactmem check` states how far it lies "
            "below the uniform code")
    return 0
