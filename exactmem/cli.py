"""The ``exactmem`` command line: one verb per user job.

Each verb lives in its own module of :mod:`exactmem.commands` and exposes
``register(subparsers)``; this file only discovers and dispatches them.
Exit codes: 0 success, 1 negative verdict, 2 unusable input.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from exactmem import __version__
from exactmem.errors import ExactmemError

EXIT_OK, EXIT_NEGATIVE, EXIT_INPUT = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    import exactmem.commands as commands

    parser = argparse.ArgumentParser(
        prog="exactmem",
        description="Exactly certified memorizing Transformers.",
        epilog="Run 'exactmem VERB --help' for a verb's options and an example.")
    parser.add_argument("--version", action="version", version=f"exactmem {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"exactmem.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return EXIT_INPUT
    try:
        return int(args.func(args))
    except ExactmemError as exc:
        print(f"exactmem {args.verb}: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print(f"exactmem {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
