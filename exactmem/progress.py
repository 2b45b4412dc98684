"""Progress reporting on stderr for long steps (build, evaluate, check, prove, search,
precision).

On a terminal a ``rich`` progress display shows one bar per open task with the rate and the
ETA (nested tasks share one display).  Elsewhere (logs, pipes, CI) a plain line such as ::

    evaluate forward: 412/1675 (25%), 46.1 it/s, elapsed 0:09, ETA 0:27

is printed at most every :data:`LOG_INTERVAL` seconds, and a closing ``... - done`` line
gives the stage's total time, so a log stays readable and a waiting user still sees the run
advance.  Written to a file (``2> run.log``), progress is one line per stage: the closing
line, with the stage's count, rate and total time.  A task opened with ``heartbeat=True``
keeps printing its elapsed time from a background thread even when nothing calls
:meth:`Task.update` (a stage without a natural counter, such as building a construction).
A counted stage that will take long says so once, as soon as its rate is known (in every
mode, a log file included)::

    check forward: expected about 35:10 in all (3 of 1,000 in 0:06; --shards K splits it
    over K processes)

when the projection from its rate so far is at least :data:`EXPECT_AFTER` seconds, judged
after :data:`EXPECT_SETTLE` seconds of the stage at the earliest; the hint
after the semicolon is the stage's, given by the verb (which flags skip or split it).
``configure(quiet=True)`` (every verb's ``--quiet``) or ``EXACTMEM_QUIET=1`` turns
everything off.  Progress never touches stdout.

Library code reports through :func:`task`; code that must not import this module (the
checker imports only the standard library) takes a plain callback
``progress(stage, done, total)`` that :func:`hook` provides.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

LOG_INTERVAL = 1.0  # seconds between plain progress lines when stderr is not a terminal
RATE_WINDOW = 30.0  # seconds of recent progress that the rate and the ETA are measured on
EXPECT_AFTER = 60.0  # a counted stage projected to take this long says so once
EXPECT_SETTLE = 5.0  # ... judged from at least this many seconds of its rate (the first
# units often carry the stage's start-up and would overstate it)

_state: dict[str, Any] = {"quiet": None}
_lock = threading.RLock()  # one writer at a time: the main thread and heartbeat threads
_live: dict[str, Any] = {"progress": None, "open": 0}  # the shared rich display
_printed_at = [time.monotonic()]  # when the last plain line was written


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


def _fmt_count(n: float) -> str:
    """``1234`` as is; large counts short: ``4.21M``."""
    for size, suffix in ((10**9, "G"), (10**6, "M"), (10**5, "k")):
        if abs(n) >= size:
            return f"{n / (size if suffix != 'k' else 1000):.3g}{suffix}"
    return f"{n:,.0f}" if n >= 100 else f"{n:.3g}"


def _fmt_rate(rate: float, unit: str) -> str:
    if rate >= 100:
        return f"{_fmt_count(rate)} {unit}/s"
    if rate >= 1:
        return f"{rate:.1f} {unit}/s"
    return f"{1 / rate:.1f} s/{unit}"


def _print(text: str) -> None:
    with _lock:
        print(text, file=sys.stderr, flush=True)
        _printed_at[0] = time.monotonic()


def _to_file() -> bool:
    """Whether stderr is a regular file (a log written to disk, not a terminal or a pipe)."""
    try:
        return stat.S_ISREG(os.fstat(sys.stderr.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # no file descriptor (captured, closed)
        return False


def _due(start: float, last: float, now: float) -> bool:
    """A plain line is due when this task printed nothing for :data:`LOG_INTERVAL`
    seconds, or when nothing at all was printed for that long and the task has run for a
    quarter of it (a fresh task after a quiet stretch speaks soon)."""
    return now - last >= LOG_INTERVAL or (now - _printed_at[0] >= LOG_INTERVAL
                                          and now - start >= LOG_INTERVAL / 4)


def _rich_display(unit: str) -> Any:
    """The shared rich ``Progress`` (started on first use), or ``None`` without rich."""
    if _live["progress"] is not None:
        return _live["progress"]
    try:
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
    except ImportError:  # pragma: no cover - rich is a dependency
        return None

    class Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            unit_ = task.fields.get("unit", "it")
            return Text("" if not speed else _fmt_rate(speed, unit_))

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TaskProgressColumn(), Rate(), TimeElapsedColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True,
                   # stdout keeps its own destination (a file, a pipe); only when it is the
                   # same terminal does it go through the display, above the bars
                   redirect_stdout=sys.stdout.isatty(), redirect_stderr=True)
    bar.start()
    _live["progress"] = bar
    return bar


class Task:
    """One progress bar (or a throttled log line); use as a context manager.

    ``heartbeat=True`` (plain-line mode) starts a daemon thread that prints the line every
    :data:`LOG_INTERVAL` seconds while no update does, so a stage without a counter still
    shows its elapsed time.  Updates after :meth:`close` are ignored.
    """

    def __init__(self, description: str, total: int | None = None, unit: str = "it",
                 heartbeat: bool = False, hint: str | None = None) -> None:
        self.description, self.total, self.unit = description, total, unit
        self.hint = hint  # said with the expected duration: which flags skip or split it
        self._expected = False
        self.done = 0
        self._start = self._last = time.monotonic()
        self._samples: deque[tuple[float, int]] = deque([(self._start, 0)])
        self._printed = False
        self._bar: Any = None
        self._id: Any = None
        self._stop: threading.Event | None = None
        self._quiet = is_quiet()
        self._per_stage = False  # stderr is a file: only the closing line
        if self._quiet:
            return
        self._per_stage = _to_file()
        if sys.stderr.isatty():
            with _lock:
                self._bar = _rich_display(unit)
                if self._bar is not None:
                    self._id = self._bar.add_task(description, total=total or None, unit=unit)
                    _live["open"] += 1
        if self._bar is None and heartbeat and not self._per_stage:
            self._stop = threading.Event()
            threading.Thread(target=self._beat, args=(self._stop,), daemon=True,
                             name=f"progress: {description}").start()

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(max(0.005, min(0.25, LOG_INTERVAL / 4))):
            with _lock:
                if stop.is_set():
                    return
                now = time.monotonic()
                if _due(self._start, self._last, now):
                    try:
                        self._emit(now)
                    except (OSError, ValueError):  # stderr closed or a broken pipe
                        return

    def _emit(self, now: float) -> None:
        self._last = now
        self._printed = True
        _print(self.line(now))

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
        now = time.monotonic()
        if not self._expected and self.total and 0 < self.done < self.total:
            self._expect(now)
        if self._bar is not None:
            self._bar.update(self._id, completed=self.done, total=self.total or None,
                             description=self.description)
            return
        if self._per_stage:
            return
        if _due(self._start, self._last, now):
            with _lock:
                self._emit(now)

    def expected(self, now: float) -> float:
        """The stage's projected total seconds from its rate since the start."""
        return (now - self._start) * (self.total or 0) / max(self.done, 1)

    def _expect(self, now: float) -> None:
        """Say once, when the projection reaches :data:`EXPECT_AFTER`, how long the stage
        is expected to take."""
        if now - self._start < EXPECT_SETTLE:
            return
        total = self.expected(now)
        if total < EXPECT_AFTER:
            return
        self._expected = True
        text = (f"{self.description}: expected about {_fmt_seconds(total)} in all "
                f"({_fmt_count(self.done)} of {_fmt_count(self.total or 0)} in "
                f"{_fmt_seconds(now - self._start)}"
                + (f"; {self.hint}" if self.hint else "") + ")")
        with _lock:
            if self._bar is not None:
                self._bar.console.print(text, highlight=False)
            else:
                _print(text)

    def _rate(self, now: float, final: bool) -> float:
        """Units per second over the last :data:`RATE_WINDOW` seconds (the whole run for
        the closing line), so that the ETA follows a run that slows down or speeds up."""
        if not final:
            self._samples.append((now, self.done))
            while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW:
                self._samples.popleft()
        t0, d0 = (self._start, 0) if final else self._samples[0]
        span = now - t0
        # a rate over a fraction of a second says little: shown after half an interval
        return (self.done - d0) / span if span >= min(0.5, LOG_INTERVAL) > 0 else 0.0

    def line(self, now: float | None = None, final: bool = False) -> str:
        """The plain progress line: done/total, percent, rate, elapsed time and ETA."""
        now = now or time.monotonic()
        elapsed = now - self._start
        rate = self._rate(now, final)
        parts = []
        if self.total:
            parts.append(f"{_fmt_count(self.done)}/{_fmt_count(self.total)} "
                         f"({100 * self.done / self.total:.0f}%)")
        elif self.done:
            parts.append(f"{_fmt_count(self.done)} {self.unit}")
        if rate > 0:
            parts.append(_fmt_rate(rate, self.unit))
        parts.append(f"elapsed {_fmt_seconds(elapsed)}")
        if self.total and rate > 0 and self.done < self.total:
            parts.append(f"ETA {_fmt_seconds((self.total - self.done) / rate)}")
        return f"{self.description}: " + ", ".join(parts)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def close(self, outcome: str = "done") -> None:
        """Stop; a task that ran for at least :data:`LOG_INTERVAL` (or printed a line, or
        writes to a file) ends with one ``... - done`` line (``outcome``) giving its total
        time."""
        if self._stop is not None:
            self._stop.set()
            self._stop = None
        if self._quiet:
            return
        self._quiet = True
        with _lock:
            long = (self._printed or self._per_stage
                    or time.monotonic() - self._start >= LOG_INTERVAL)
            if self._bar is not None:
                bar = self._bar
                self._bar = None
                bar.remove_task(self._id)
                _live["open"] -= 1
                if long:
                    bar.console.print(self.line(final=True) + f" - {outcome}",
                                      highlight=False)
                if _live["open"] <= 0:
                    bar.stop()
                    _live["progress"], _live["open"] = None, 0
            elif long:
                _print(self.line(final=True) + f" - {outcome}")

    def __enter__(self) -> Task:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.close("interrupted" if issubclass(exc_type, KeyboardInterrupt) else "stopped")


def task(description: str, total: int | None = None, unit: str = "it",
         heartbeat: bool = False) -> Task:
    """A progress task: ``with task("evaluate", total=N) as t: ... t.update()``."""
    return Task(description, total, unit, heartbeat)


def stage(description: str) -> Task:
    """A stage without a counter: its elapsed time ticks every :data:`LOG_INTERVAL`."""
    return Task(description, None, "it", heartbeat=True)


def track(items: Iterable[T], description: str, total: int | None = None,
          unit: str = "it") -> Iterator[T]:
    """Iterate over ``items`` with progress."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Task(description, total, unit) as t:
        for item in items:
            yield item
            t.update()


def hook(prefix: str, heartbeat: bool = False, unit: str = "it",
         hints: dict[str, str] | None = None,
         ) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """A ``progress(stage, done, total)`` callback for stdlib-only code (the checker), and a
    function that closes whatever it opened.  A new ``stage`` starts a new line/bar, named
    ``"{prefix} {stage}"``; ``total = 0`` means "no counter" (elapsed time only);
    ``hints[stage]``: said with the stage's expected duration (:meth:`Task._expect`)."""
    current: dict[str, Any] = {"stage": None, "task": None}

    def close() -> None:
        if current["task"] is not None:
            current["task"].close()
            current["task"] = None

    def progress(stage: str, done: int, total: int) -> None:
        if stage != current["stage"]:
            close()
            current["stage"] = stage
            current["task"] = Task(f"{prefix} {stage}".strip(), total or None, unit, heartbeat,
                                   (hints or {}).get(stage))
        current["task"].update(done=done, total=total or None)

    return progress, close
