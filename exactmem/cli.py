"""The ``exactmem`` command line: one verb per user job.

Each verb lives in its own module of :mod:`exactmem.commands` and exposes
``register(subparsers)``; this file only discovers and dispatches them, gives every verb
``--quiet/-q`` (no progress on stderr), and turns every failure into one line.

Exit codes: 0 success, 1 negative verdict (and nothing else), 2 unusable input or any
other failure, 130 interrupted.  No verb ends in a traceback: an unexpected exception is
reported as ``internal error`` (set ``EXACTMEM_DEBUG=1`` to see the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

from exactmem import __version__
from exactmem.errors import ExactmemError

EXIT_OK, EXIT_NEGATIVE, EXIT_INPUT = 0, 1, 2


class HelpFormatter(argparse.HelpFormatter):
    """Shows a default only where the help text does not already state one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if ("default" in text or action.default in (None, False, argparse.SUPPRESS)
                or not action.option_strings or action.nargs == 0):
            return text
        return (text + " " if text else "") + "(default: %(default)s)"


def _add_quiet(parser: argparse.ArgumentParser) -> None:
    if "--quiet" not in parser._option_string_actions:
        flags = ["--quiet"] if "-q" in parser._option_string_actions else ["--quiet", "-q"]
        parser.add_argument(*flags, action="store_true", help="no progress on stderr")


def build_parser() -> argparse.ArgumentParser:
    import exactmem.commands as commands

    parser = argparse.ArgumentParser(
        prog="exactmem",
        description="Exactly certified memorizing Transformers.",
        epilog="Run 'exactmem VERB --help' for a verb's options and an example. Exit codes: "
               "0 success, 1 negative verdict, 2 unusable input or any other failure.")
    parser.add_argument("--version", action="version", version=f"exactmem {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"exactmem.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    for verb_parser in sub.choices.values():
        _add_quiet(verb_parser)
        if verb_parser.formatter_class is argparse.ArgumentDefaultsHelpFormatter:
            verb_parser.formatter_class = HelpFormatter
    return parser


def _why(exc: BaseException) -> str:
    """One line for a failure that is not a bug of exactmem."""
    if isinstance(exc, UnicodeDecodeError):
        return f"input is not UTF-8 text ({exc.reason} at byte {exc.start})"
    if isinstance(exc, RecursionError):
        return "input nested too deeply"
    if isinstance(exc, MemoryError):
        return "out of memory (input too large?)"
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return where + (exc.strerror or str(exc))
    return str(exc) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return EXIT_INPUT
    from exactmem import progress

    saved = progress._state["quiet"]  # restored afterwards: main() may run in a library
    if getattr(args, "quiet", False):
        progress.configure(quiet=True)
    try:
        with blas_threads():
            return _dispatch(args)
    finally:
        progress._state["quiet"] = saved


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def blas_threads() -> AbstractContextManager[object]:
    """numpy's BLAS on one thread for the command, unless one of
    :data:`BLAS_THREAD_VARIABLES` is set (then the library's own choice stands).  The
    checker's and the language-model producer's products are small and interleaved with
    Python work: a second BLAS thread mostly waits, and costs CPU seconds without saving
    wall time (docs/cli.md)."""
    if any(os.environ.get(v, "").strip() for v in BLAS_THREAD_VARIABLES):
        return nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _dispatch(args: argparse.Namespace) -> int:
    name = f"exactmem {args.verb}"
    try:
        return int(args.func(args))
    except ExactmemError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``exactmem info c.json | head -1``)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, UnicodeDecodeError, RecursionError, MemoryError) as exc:
        print(f"{name}: error: {_why(exc)}", file=sys.stderr)
    except ValueError as exc:  # e.g. a number beyond Python's integer-string limit
        if os.environ.get("EXACTMEM_DEBUG"):
            raise
        print(f"{name}: error: {_why(exc)}", file=sys.stderr)
    except Exception as exc:
        if os.environ.get("EXACTMEM_DEBUG"):
            raise
        print(f"{name}: internal error: {type(exc).__name__}: {exc} (please report it; "
              f"EXACTMEM_DEBUG=1 shows the traceback)", file=sys.stderr)
    return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
