"""What the verbs share below :mod:`exactmem.cli` (which dispatches them): argument types,
the notes on stderr, the progress of one API call, the times line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

Progress = Callable[[str, int, int], None]  # progress(stage, done, total)


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {value}")
    return value


def execution_args(p: argparse.ArgumentParser, what: str) -> None:
    """``--execution FORMAT`` and ``--ulps K`` (docs/trained-models.md, "Execution claims");
    ``what``: what the verb then also proves, for the help text."""
    p.add_argument("--execution", choices=("float32", "bfloat16", "float16"),
                   help=f"also {what} in every float execution of this format "
                        "(bfloat16/float16: storage in that format, float32 accumulation), "
                        "any summation order, FMA or not, flush-to-zero; pre-LN decoders with "
                        "LayerNorm (docs/trained-models.md, 'Execution claims')")
    p.add_argument("--ulps", type=int, metavar="K",
                   help="with --execution: exp, tanh, erf and rsqrt within K float32 ulps "
                        "(default 2: the largest float32 error CUDA documents for expf, "
                        "tanhf, erff and rsqrtf)")


def stderr_log(quiet: bool) -> Callable[[str], None]:
    """The verb's notes: a line each on stderr, none with ``--quiet`` (whose progress
    :func:`exactmem.cli.main` turns off)."""

    def log(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    return log


@contextmanager
def progress_of(prefix: str, hints: dict[str, str] | None = None) -> Iterator[Progress]:
    """A ``progress(stage, done, total)`` callback for one API call, with a heartbeat,
    closed when the call ends however it ends (:func:`exactmem.progress.hook`); ``hints``:
    per stage, what to say with its expected duration (the flags that skip or split it)."""
    from exactmem import progress

    tick, close = progress.hook(prefix, heartbeat=True, hints=hints)
    try:
        yield tick
    finally:
        close()


def times_line(seconds: Mapping[str, float]) -> str:
    """``times: read 0.12 s, bounds 3.40 s, ...``: the seconds of each stage."""
    return "times: " + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items())
