"""Progress reporting on stderr for long steps (evaluate, check, prove, search, precision).

On a terminal a ``rich`` progress bar shows the rate and the ETA; elsewhere (logs, pipes, CI)
a plain line is printed at most every :data:`LOG_INTERVAL` seconds, so a log stays readable
and a waiting user still sees the run advance.  ``configure(quiet=True)`` (every verb's
``--quiet``) or ``EXACTMEM_QUIET=1`` turns everything off.

Library code reports through :func:`task`; the checker, which imports only the standard
library, takes a plain callback ``progress(stage, done, total)`` that :func:`hook` provides.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

LOG_INTERVAL = 1.0  # seconds between plain progress lines when stderr is not a terminal

_state: dict[str, Any] = {"quiet": None}


def configure(*, quiet: bool | None = None) -> None:
    """Turn progress output off (``quiet=True``) or back on; ``None`` keeps the setting."""
    if quiet is not None:
        _state["quiet"] = quiet


def is_quiet() -> bool:
    if _state["quiet"] is not None:
        return bool(_state["quiet"])
    return os.environ.get("EXACTMEM_QUIET", "") not in ("", "0")


def _fmt_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    if s >= 3600:
        return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


class Task:
    """One progress bar (or a throttled log line); use as a context manager."""

    def __init__(self, description: str, total: int | None = None, unit: str = "it") -> None:
        self.description, self.total, self.unit = description, total, unit
        self.done = 0
        self._start = self._last = time.monotonic()
        self._bar: Any = None
        self._id: Any = None
        self._quiet = is_quiet()
        if not self._quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.text import Text

            class Rate(ProgressColumn):
                def render(self, task: Any) -> Text:
                    speed = task.finished_speed or task.speed
                    return Text("" if speed is None else f"{speed:.3g} {unit}/s")

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TaskProgressColumn(), Rate(),
                                 TimeElapsedColumn(), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=False)
            self._bar.start()
            self._id = self._bar.add_task(description, total=total)

    # -- updates -------------------------------------------------------------------------
    def update(self, advance: int = 1, *, done: int | None = None, total: int | None = None,
               description: str | None = None) -> None:
        """Advance by ``advance`` (or set ``done``); optionally change the total or label."""
        self.done = self.done + advance if done is None else done
        if total is not None:
            self.total = total
        if description is not None:
            self.description = description
        if self._quiet:
            return
        if self._bar is not None:
            self._bar.update(self._id, completed=self.done, total=self.total,
                             description=self.description)
            return
        now = time.monotonic()
        if now - self._last >= LOG_INTERVAL:
            self._last = now
            print(self.line(now), file=sys.stderr, flush=True)

    def line(self, now: float | None = None) -> str:
        """The plain progress line: done/total, percent, rate and ETA."""
        elapsed = (now or time.monotonic()) - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        head = f"{self.description}: {self.done}"
        if self.total:
            head += f"/{self.total} ({100 * self.done / self.total:.0f}%)"
        tail = f", {rate:.3g} {self.unit}/s, elapsed {_fmt_seconds(elapsed)}"
        if self.total and rate > 0:
            tail += f", ETA {_fmt_seconds((self.total - self.done) / rate)}"
        return head + tail

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif not self._quiet and time.monotonic() - self._start >= LOG_INTERVAL:
            print(self.line() + " - done", file=sys.stderr, flush=True)
        self._quiet = True

    def __enter__(self) -> Task:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def task(description: str, total: int | None = None, unit: str = "it") -> Task:
    """A progress task: ``with task("evaluate", total=N) as t: ... t.update()``."""
    return Task(description, total, unit)


def track(items: Iterable[T], description: str, total: int | None = None,
          unit: str = "it") -> Iterator[T]:
    """Iterate over ``items`` with progress."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Task(description, total, unit) as t:
        for item in items:
            yield item
            t.update()


def hook(prefix: str) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """A ``progress(stage, done, total)`` callback for stdlib-only code (the checker), and a
    function that closes whatever it opened.  A new ``stage`` starts a new line/bar."""
    current: dict[str, Any] = {"stage": None, "task": None}

    def close() -> None:
        if current["task"] is not None:
            current["task"].close()
            current["task"] = None

    def progress(stage: str, done: int, total: int) -> None:
        if stage != current["stage"]:
            close()
            current["stage"] = stage
            current["task"] = Task(f"{prefix} {stage}", total)
        current["task"].update(done=done, total=total)

    return progress, close
