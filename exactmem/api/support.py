"""What the verbs share besides the API calls: the construction registry (their names and
options, for argument parsing), output-path checks, optional dependencies, and a Dask
client for ``--scheduler``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exactmem.api.result_types import CheckResult


def constructions() -> dict[str, Any]:
    """The registered constructions by CLI name (each with ``options``)."""
    from exactmem import constructions as registry

    return dict(registry.registry())


def dtype_bits() -> dict[str, int]:
    """The bits of each stored dtype (:data:`exactmem.constructions.bounds.DTYPE_BITS`)."""
    from exactmem.constructions.bounds import DTYPE_BITS

    return dict(DTYPE_BITS)


def check_writable(path: str | Path) -> Path:
    """``path`` as a :class:`Path` once its folder exists and is writable (else a one-line
    error)."""
    from exactmem.files.atomic import check_writable as check

    return check(path)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    from exactmem.files.atomic import write_text_atomic as write

    write(path, text)


def need(package: str, what: str) -> None:
    """A one-line error naming the extra unless the optional ``package`` is installed."""
    from exactmem.optional import need as check

    check(package, what)


@contextmanager
def dask_submit(address: str | None) -> Iterator[Any]:
    """The ``submit`` of a Dask client on ``address`` (closed on exit), or ``None``."""
    if not address:
        yield None
        return
    from exactmem.optional import require

    with require("distributed", "--scheduler").Client(address, timeout=30) as client:
        yield client.submit


def answer(check: Callable[[], CheckResult]) -> int:
    """Run a checking verb fail-closed (docs/checker.md, "Entry points"): ``check`` prints
    its reasons and claim and returns its result; then the line ``c checker: sha256 <hex>``
    and the ``s`` line are printed on stdout and the exit code returned.  Any
    exception in ``check`` is the verdict ``s UNUSABLE``, exit 2."""
    from exactmem.checker.entry import answer as checker_answer

    class _Verdict:
        def __init__(self, result: CheckResult) -> None:
            self.verdict = result.line
            self.exit_code = result.exit_code

    return checker_answer(lambda: _Verdict(check()))
