"""``python -m exactmem.checker CERT``: on stdout a ``c claim: ...`` line when verified, the
line ``c checker: sha256 <hex>`` (:mod:`.entry`), then one line ``s VERIFIED`` /
``s REJECTED`` / ``s UNUSABLE``; every failure on stderr; exit 0 (verified), 1 (rejected),
2 (unusable input, or any unexpected error: the checker fails closed)."""

from __future__ import annotations

import sys

from .entry import answer
from .verdict import CheckReport
from .verify import check_file


def _check(path: str) -> CheckReport:
    report = check_file(path)
    for line in report.failures:
        print(f"c {line}", file=sys.stderr)
    if report.claim:
        print(f"c claim: {report.claim}")
    return report


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m exactmem.checker CERT", file=sys.stderr)
        return answer(lambda: CheckReport([], unusable=True))
    return answer(lambda: _check(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
