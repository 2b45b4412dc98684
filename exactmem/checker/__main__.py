"""``python -m exactmem.checker CERT``: on stdout a ``c claim: ...`` line when verified, then
one line ``s VERIFIED`` / ``s REJECTED`` / ``s UNUSABLE``; every failure on stderr; exit 0
(verified), 1 (rejected), 2 (unusable input)."""

import sys

from .verify import check_file


def main(argv):
    if len(argv) != 1:
        print("usage: python -m exactmem.checker CERT", file=sys.stderr)
        print("s UNUSABLE")
        return 2
    try:
        report = check_file(argv[0])
    except (ValueError, ArithmeticError, MemoryError, RecursionError) as exc:
        # never expected: the checker answers every input itself; still a verdict line
        print(f"c the checker stopped: {type(exc).__name__}: {str(exc)[:300]}",
              file=sys.stderr)
        print("s UNUSABLE")
        return 2
    for line in report.failures:
        print(f"c {line}", file=sys.stderr)
    if report.claim:
        print(f"c claim: {report.claim}")
    print(report.verdict)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
