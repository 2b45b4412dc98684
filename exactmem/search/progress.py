"""A one-line progress display with rate and ETA (design §3.11), on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``done/total``, queries per second and the estimated time left."""

    def __init__(self, total: int, label: str = "", stream: TextIO | None = None,
                 every_s: float = 0.5, enabled: bool = True) -> None:
        self.total, self.label = total, label
        self.stream = stream if stream is not None else sys.stderr
        self.every_s, self.enabled = every_s, enabled
        self.done = 0
        self.start = time.monotonic()
        self.last = 0.0

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        return (f"{self.label} {self.done}/{self.total} queries, {rate:.2f}/s, "
                f"ETA {eta}, elapsed {elapsed:.0f}s")

    def update(self, k: int = 1) -> None:
        self.done += k
        now = time.monotonic()
        if self.enabled and (now - self.last >= self.every_s or self.done >= self.total):
            self.last = now
            end = "\n" if self.done >= self.total else ""
            self.stream.write("\r" + self.line() + end)
            self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.done < self.total:
            self.stream.write("\r" + self.line() + "\n")
            self.stream.flush()
