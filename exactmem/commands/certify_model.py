"""``exactmem certify-model MODEL DATA -o CERT``: certify a network you built or trained."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exactmem.commands._args import execution_args, progress_of, stderr_log, times_line


def register(sub: argparse._SubParsersAction) -> None:
    from exactmem.api.lm import FORMATS
    from exactmem.api.model import MODEL_KINDS

    kinds = "; ".join(f"{kind}: {text}" for kind, text in MODEL_KINDS.items())
    p = sub.add_parser(
        "certify-model",
        help="certify that a trained or exported model memorizes a dataset (GPT-2, GPT-NeoX, "
             "LLaMA-style, nanoGPT, torch encoder stacks, .pt / safetensors files)",
        description="Read MODEL exactly (every float is the exact rational it is), evaluate "
                    "it on DATA, run the independent checker, and only then write CERT. "
                    f"MODEL is one of ({kinds}); --format auto detects which. A model in the "
                    "export layout must memorize every sequence of DATA; a language model is "
                    "certified position by position (--partial: the positions proved, K of "
                    "M). Exit 0 certified, 1 not memorized (listed on stderr; CERT is not "
                    "written), 2 unusable input.",
        epilog="example: exactmem export c.json --format torch -o m.pt && "
               "exactmem certify-model m.pt d.json -o c2.json; "
               "exactmem certify-model gpt2/ d.json --partial -o lm.json")
    p.add_argument("model", metavar="MODEL",
                   help="model file or checkpoint directory (the kinds above)")
    p.add_argument("data", metavar="DATA", help="dataset file (exactmem.dataset/1 JSON)")
    p.add_argument("-o", "--output", required=True, metavar="CERT",
                   help="certificate file to write")
    p.add_argument("--structure", metavar="JSON",
                   help="the network structure (exactmem.skeleton/1 JSON file), when MODEL "
                        "does not carry it")
    p.add_argument("--epsilon", metavar="Q",
                   help="softmax networks with a scalar readout: certify |f - label| <= Q "
                        "(a rational such as 1/4, below half the smallest label gap; default: "
                        "a quarter of it)")
    p.add_argument("--bind-dataset", action="store_true",
                   help="bind DATA by its SHA-256 and relative path instead of embedding it")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the verdict")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="MODEL's kind (" + ", ".join(MODEL_KINDS) + "), or auto (detected)")
    p.add_argument("--partial", action="store_true",
                   help="language models: certify exactly the positions proved (K of M)")
    p.add_argument("--producer", choices=("auto", "fast", "hybrid", "arb"), default="auto",
                   help="language models: the producer's arithmetic: python-flint arb for "
                        "the first blocks and float64 norm balls from a block chosen on the "
                        "first sequences (auto, the default); float64 norm balls throughout "
                        "(fast); arb throughout (the slow reference); or fast then arb on the "
                        "sequences fast leaves short (hybrid)")
    p.add_argument("--no-self-check", action="store_true",
                   help="language models: write the producer's proof without running the "
                        "checker first (the output says 'not checked yet: run exactmem check "
                        "CERT'; no code-length claims); the default checks before writing")
    execution_args(p, "claim the positions whose label is the unique argmax")
    weights = p.add_mutually_exclusive_group()
    weights.add_argument("--bind-weights", dest="bind_weights", action="store_const",
                         const=True, default=None,
                         help="language models: write the tensors to CERT's stem + "
                              "'.weights.safetensors' beside CERT and bind that file by its "
                              "length and SHA-256 instead of embedding every weight (the "
                              "default above 1M parameters; docs/trained-models.md, 'Bound "
                              "weights')")
    weights.add_argument("--embed-weights", dest="bind_weights", action="store_const",
                         const=False,
                         help="language models: embed every weight in CERT whatever the size")
    p.add_argument("--strict-config", action="store_true",
                   help="language models: refuse unless the config's reading of the tensors "
                        "(head count; for an encoder stack also norm placement and "
                        "activation) fits the labels strictly better than every other reading "
                        "(default: refuse only when another fits clearly better; "
                        "docs/certify-model.md, 'Which function')")
    p.add_argument("--reference", metavar="REF",
                   help="language models: a reference checkpoint of the same kinds and "
                        "vocabulary; certify Morris et al.'s mem_U of MODEL against it "
                        "(rigorous bounds of both models' code lengths; needs a dataset "
                        "labelled with its next tokens; docs/memorized-bits.md)")
    p.add_argument("--shards", type=int, default=1, metavar="K",
                   help="language models: prove and self-check the sequences in K slices in "
                        "parallel (local processes, at most one per CPU; or on --scheduler); "
                        "the same verdict and counts as one process (default 1)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="language models: run the slices on this Dask scheduler (needs the "
                        "'dask' extra; a bound weights file must be at the same path on "
                        "the workers)")
    p.set_defaults(func=run)


HINTS = {"bounds": "the producer's proof; --shards K splits it over K processes",
         "forward": "the self-check, the checker's own proof; --no-self-check skips it "
                    "(then `exactmem check CERT`), --shards K splits it",
         "check": "the self-check, the checker's own proof; --no-self-check skips it",
         "execution": "the --execution claim; without --execution it is skipped"}


def run(args: argparse.Namespace) -> int:
    from exactmem.api.model import certify_model
    from exactmem.api.result_types import CertifyResult
    from exactmem.errors import SpecError

    log = stderr_log(args.quiet)
    structure = None
    if args.structure:
        try:
            structure = Path(args.structure).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(f"cannot read the structure file {args.structure}: {exc}") from None
    with progress_of("certify-model", HINTS) as tick:
        result = certify_model(args.model, args.data, output=Path(args.output),
                               skeleton=structure, epsilon=args.epsilon,
                               bind_dataset=args.bind_dataset, log=log, progress=tick,
                               partial=args.partial, strict_config=args.strict_config,
                               producer=args.producer, kind=args.format,
                               self_check=not args.no_self_check,
                               reference=args.reference, execution=args.execution,
                               ulps=args.ulps, bind_weights=args.bind_weights,
                               shards=args.shards, scheduler=args.scheduler)
    if isinstance(result, CertifyResult):
        return _report(args, result, log)
    return _report_lm(args, result, log)


def _report(args: argparse.Namespace, result: Any, log: Callable[[str], None]) -> int:
    """A model in the export layout: the verdict, the failing sequences."""
    out = args.output
    for note in result.notes:
        log(note)
    if not result.verified:
        seqs = result.failing_sequences
        if seqs:
            shown = ", ".join(map(str, seqs[:50]))
            print(f"not memorized: {len(seqs)} of {result.N} sequences: {shown}"
                  + (f" ... and {len(seqs) - 50} more" if len(seqs) > 50 else ""),
                  file=sys.stderr)
        for line in result.failures[:50]:
            print(f"  {line}", file=sys.stderr)
        if len(result.failures) > 50:
            print(f"  ... and {len(result.failures) - 50} more failures", file=sys.stderr)
        print(f"not certified: {args.model} does not memorize {args.data}; {out} was not "
              f"written")
        return 1
    sz = result.sizes
    print(f"certified {args.model} on {result.N} sequences -> {out} "
          f"(params nonzero {sz.params_nonzero}, dense {sz.params_dense}, depth {sz.depth}, "
          f"width {sz.width}, max bits {sz.max_bits})")
    return 0


def _report_lm(args: argparse.Namespace, r: Any, log: Callable[[str], None]) -> int:
    """A language model (:class:`exactmem.api.lm.LMResult`): positions proved."""
    log(times_line(r.seconds))
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
              f"in full, written to {args.output} without the in-process checker"
              + (f"; weights bound in {r.weights})" if r.weights else ")"))
        return 0
    print(f"certified {r.proved} of {r.positions} positions ({r.sequences_full} sequences in "
          f"full) of {args.data} for {args.model} -> {args.output}"
          + (f" (weights bound in {r.weights})" if r.weights else ""))
    if r.execution is not None:
        print(f"  and {r.exec_proved} of {r.positions} positions in every {r.execution} "
              f"execution (exp/tanh/erf/rsqrt within {r.ulps} ulps)")
    if r.code_lengths:
        total = sum(r.code_lengths)
        log(f"code length: at most {float(total):.6f} bits in all (float64 estimate "
            f"{sum(r.float_code_lengths):.6f}); `exactmem check` states how far it lies "
            "below the uniform code")
    if r.mem_u is not None:
        log(f"mem_U against {args.reference}: at least {float(r.mem_u[0]):.6f} bits over the "
            f"distinct sequences (float64 estimate {r.mem_u[1]:.6f}); `exactmem check` "
            "re-derives it")
    return 0
