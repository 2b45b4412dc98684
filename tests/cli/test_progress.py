"""Progress on stderr: plain throttled lines in logs, a rich display on a terminal, nothing
with quiet, and stdout left alone (verdict lines stay clean)."""

# load-safe: the sleeps only let time pass (each longer than the patched LOG_INTERVAL), so a
# slower machine prints more lines, never fewer; no assertion reads a clock.

from __future__ import annotations

import io
import re
import threading
import time
from pathlib import Path

import pytest

from exactmem import progress
from exactmem.model.dataset import Dataset
from exactmem.model.evaluate import evaluate
from exactmem.model.forward import work_units

LINE = re.compile(r"^(?P<what>[^:]+): .*elapsed \d+:\d\d")


@pytest.fixture(autouse=True)
def _loud(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress on (whatever an earlier test or the environment said), lines every 20 ms."""
    monkeypatch.setitem(progress._state, "quiet", None)
    monkeypatch.delenv("EXACTMEM_QUIET", raising=False)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.02)


def _dataset(N: int = 40) -> Dataset:  # noqa: N803
    from exactmem.datasets.draw import generate

    return generate("next-token", N=N, n=4, vocab=8, classes=3, seed=3)


def test_a_long_step_prints_lines_with_rate_and_eta(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.task("work", total=5, unit="row") as t:
        for _ in range(5):
            time.sleep(0.03)  # longer than LOG_INTERVAL: a slower machine only waits longer
            t.update()
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) >= 3
    assert all(LINE.match(line) for line in lines)
    assert any(re.search(r"work: \d/5 \(\d+%\), [\d.,]+ (row/s|s/row), elapsed \d+:\d\d, ETA",
                         line) for line in lines)
    assert lines[-1].startswith("work: 5/5 (100%)") and lines[-1].endswith(" - done")


def test_a_short_step_prints_nothing(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "LOG_INTERVAL", 60.0)
    monkeypatch.setattr(progress, "_printed_at", [time.monotonic()])
    with progress.task("quick", total=3) as t:
        t.update(3)
    assert capsys.readouterr() == ("", "")


def test_a_stage_without_counter_ticks_its_elapsed_time(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    beats = threading.Semaphore(0)
    real_print = progress._print

    def counted(line: str) -> None:
        real_print(line)
        beats.release()

    monkeypatch.setattr(progress, "_print", counted)
    with progress.stage("build"):
        for _ in range(3):  # no update at all: wait for three lines of the heartbeat thread
            assert beats.acquire(timeout=120), "the heartbeat printed nothing (hang guard)"
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) >= 4, lines
    assert all(re.match(r"build: elapsed \d+:\d\d", line) for line in lines)
    assert lines[-1].endswith(" - done")


def test_quiet_and_the_environment_silence_everything(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for quiet in ("configure", "env"):
        if quiet == "configure":
            progress.configure(quiet=True)
        else:
            monkeypatch.setitem(progress._state, "quiet", None)
            monkeypatch.setenv("EXACTMEM_QUIET", "1")
        assert progress.is_quiet()
        with progress.task("work", total=2) as t:
            time.sleep(0.05)
            t.update(2)
        with progress.stage("build"):
            time.sleep(0.05)
        tick, close = progress.hook("check", heartbeat=True)
        tick("forward", 1, 2)
        time.sleep(0.05)
        tick("forward", 2, 2)
        close()
        assert capsys.readouterr() == ("", "")


def test_updates_after_close_are_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    t = progress.task("closed", total=2)
    t.close()
    time.sleep(0.03)
    t.update(2)
    t.close()
    assert capsys.readouterr() == ("", "")


def test_hook_names_each_stage(capsys: pytest.CaptureFixture[str]) -> None:
    tick, close = progress.hook("check")
    for stage in ("parse", "forward"):
        for k in range(3):
            time.sleep(0.025)
            tick(stage, k + 1 if stage == "forward" else 0, 3 if stage == "forward" else 0)
    close()
    err = capsys.readouterr().err
    assert "check parse: elapsed" in err
    assert re.search(r"check forward: \d/3", err)


def test_nested_tasks_share_one_terminal_display(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    fake = Tty()
    monkeypatch.setattr("sys.stderr", fake)
    with progress.task("outer", total=2) as outer:
        with progress.task("inner", total=3) as inner:  # a second live display would raise
            inner.update(3)
        outer.update(2)
    assert progress._live["progress"] is None and progress._live["open"] == 0


def test_forward_pass_reports_every_unit() -> None:
    from exactmem.constructions import get

    ds = _dataset()
    con = get("kajitsuka2025-next-token")
    spec = con.build(ds, con.defaults()).spec
    calls: list[tuple[str, int, int]] = []
    assert evaluate(spec, ds, lambda *a: calls.append(a)).memorized
    fwd = [c for c in calls if c[0] == "forward"]
    assert fwd[0] == ("forward", 0, work_units(spec))
    assert fwd[-1] == ("forward", work_units(spec), work_units(spec))
    assert [c[1] for c in fwd] == list(range(len(fwd)))
    assert calls[-1] == ("readout", 1, 1)


def test_certify_shows_every_stage_on_stderr_only(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from exactmem.cli import main
    from exactmem.model.dataset import save_dataset

    d, c = tmp_path / "d.json", tmp_path / "c.json"
    save_dataset(_dataset(), d)
    progress.LOG_INTERVAL = 0.0  # every update prints (restored by the fixture)
    assert main(["certify", str(d), "-c", "kajitsuka2025-next-token", "-o", str(c)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("certified kajitsuka2025-next-token on 40 sequences") and \
        out.count("\n") == 1
    for what in ("evaluate forward: ", "evaluate readout: ", "check forward: "):
        assert what in err, err
    assert main(["certify", str(d), "-c", "kajitsuka2025-next-token", "-o", str(c),
                 "--quiet"]) == 0
    out2, err2 = capsys.readouterr()
    assert out2 == out and err2 == ""


def test_mpfr_forward_in_column_slices_is_the_same_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    from exactmem.constructions import get
    from exactmem.floats import mpfr_eval
    from exactmem.floats.formats import bits

    ds = _dataset(60)
    con = get("lookup")
    spec = con.build(ds, con.defaults()).spec
    whole = mpfr_eval.exact_values(mpfr_eval.forward_float(spec, ds, bits(20)))
    calls: list[tuple[str, int, int]] = []
    monkeypatch.setattr(mpfr_eval, "CHUNK_CELLS", 1)  # 16 columns per slice
    sliced = mpfr_eval.exact_values(mpfr_eval.forward_float(spec, ds, bits(20),
                                                            lambda *a: calls.append(a)))
    assert sliced == whole
    assert calls[0][1] == 0 and calls[-1][1] == calls[-1][2] > 0
    assert [c[1] for c in calls] == sorted(c[1] for c in calls)


def test_rigorous_softmax_evaluation_reports_each_pass() -> None:
    from exactmem.constructions import get
    from exactmem.datasets.draw_attention import generate_for
    from exactmem.model.interval import interval_units
    from exactmem.model.interval_verdict import certify_interval

    ds = generate_for("dana2024-aot", seed=0, heads=2, head_dim=2, dim=2)
    con = get("dana2024-aot")
    result = con.build(ds, {**con.defaults(), "heads": 2, "head_dim": 2, "dim": 2})
    calls: list[tuple[str, int, int]] = []
    bits = int(result.hints["softmax"]["precision"])
    out = certify_interval(result.spec, ds, None, (bits,), progress=lambda *a: calls.append(a))
    assert out.verified
    fwd = [c for c in calls if c[0] == f"forward at {bits} bits"]
    total = interval_units(result.spec, ds.N)
    assert fwd[0] == (fwd[0][0], 0, total) and fwd[-1] == (fwd[0][0], total, total)
    assert calls[-1] == ("decide", 1, 1)


def test_rate_and_eta_follow_the_recent_speed() -> None:
    from collections import deque

    t = progress.Task("slowing", total=100)
    t._start, t._samples = 0.0, deque([(0.0, 0)])
    t.done = 50
    assert t.line(now=10.0) == "slowing: 50/100 (50%), 5.0 it/s, elapsed 0:10, ETA 0:10"
    t.done = 60  # 10 more in 35 s: the ETA uses the last RATE_WINDOW seconds, not the mean
    assert t.line(now=45.0) == "slowing: 60/100 (60%), 3.5 s/it, elapsed 0:45, ETA 2:20"
    assert t.line(now=45.0, final=True).startswith("slowing: 60/100 (60%), 1.3 it/s")
    t.close()


def _stages() -> None:
    with progress.task("stage a", total=5) as t:
        for _ in range(5):
            t.update()
    with progress.stage("stage b"):
        pass


def test_progress_written_to_a_file_is_a_line_per_stage(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)  # every update would be due
    with open(tmp_path / "run.log", "w", encoding="utf-8") as fh:
        monkeypatch.setattr("sys.stderr", fh)
        _stages()
    lines = (tmp_path / "run.log").read_text().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("stage a: 5/5 (100%)") and lines[0].endswith(" - done")
    assert lines[1].startswith("stage b: elapsed ") and lines[1].endswith(" - done")
    pipe = io.StringIO()  # a pipe or a capture: the throttled lines as before
    monkeypatch.setattr("sys.stderr", pipe)
    _stages()
    assert len(pipe.getvalue().splitlines()) > 2


def test_a_long_stage_says_its_expected_duration_once(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "LOG_INTERVAL", 3600.0)  # no throttled lines
    t = progress.Task("check forward", total=100, hint="--shards K splits it")
    t._start -= 10.0  # as if the first unit took ten seconds: about 1,000 s in all
    t.update(done=1)
    t.update(done=2)
    short = progress.Task("quick", total=100)
    short.update(done=50)  # a projection of well under a minute: nothing said
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(r"check forward: expected about 1[67]:\d\d in all \(1 of 100 in "
                        r"0:1\d; --shards K splits it\)", err[0]), err
    t.close(), short.close()


def test_the_expected_duration_waits_for_the_rate_to_settle(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "LOG_INTERVAL", 3600.0)  # no throttled lines
    t = progress.Task("evaluate forward", total=10_000)
    t._start -= 1.0  # the first unit (with the stage's start-up) in one second
    t.update(done=1)  # would project 10,000 s: too early to say
    assert capsys.readouterr().err == ""
    t._start -= progress.EXPECT_SETTLE  # later: the rate has settled
    t.update(done=100)  # 6 s for 100 of 10,000: about 600 s in all
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert re.match(r"evaluate forward: expected about 10:\d\d in all \(100 of", err[0]), err
    t.close()


def test_the_expected_duration_reaches_a_log_file(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with open(tmp_path / "run.log", "w", encoding="utf-8") as fh:
        monkeypatch.setattr("sys.stderr", fh)
        tick, close = progress.hook("check", hints={"forward": "a hint"})
        tick("forward", 0, 50)
        monkeypatch.setattr(progress.time, "monotonic", lambda: time.perf_counter() + 1e6)
        tick("forward", 1, 50)  # a million seconds for the first of 50
        close()
    lines = (tmp_path / "run.log").read_text().splitlines()
    assert lines[0].startswith("check forward: expected about ") and "; a hint)" in lines[0]
    assert lines[1].startswith("check forward: 1/50") and lines[1].endswith(" - done")
