"""Progress reporting for long stages: log lines at a steady pace (Dagster) and a terminal bar
(CLI), both driven by the stages' progress(done, total) hook."""

from __future__ import annotations

import io

from prx_data.core.progress import ProgressBar
from prx_data.defs.progress import ProgressLogger, format_duration


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Log:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)


def test_logger_writes_a_line_every_n_seconds_and_one_at_the_end():
    clock, log = Clock(), Log()
    progress = ProgressLogger(log, "hashed", every_s=10, clock=clock)
    for second, done in [(2, 100), (5, 250), (9.9, 495), (10, 500), (15, 750), (21, 1050), (30, 1500)]:
        clock.now = 1000 + second
        progress(done, 3000)
    # Batches at 2 s, 5 s and 9.9 s are quiet; then one line per 10 s at most.
    assert log.lines == [
        "hashed 500/3000 rows (17%), 50.0 rows/s, ~50s left",
        "hashed 1050/3000 rows (35%), 50.0 rows/s, ~39s left",
    ]
    clock.now = 1060
    progress(3000, 3000)
    progress(3000, 3000)  # the end reported twice is logged once
    assert log.lines[-1] == "hashed 3000/3000 rows (100%) in 1m00s, 50.0 rows/s"
    assert len(log.lines) == 3


def test_logger_end_line_comes_at_once_and_a_stalled_start_says_so():
    clock, log = Clock(), Log()
    progress = ProgressLogger(log, "captioned", every_s=10, clock=clock)
    clock.now += 0.5
    progress(8, 8)  # a short stage: no waiting for the interval at the end
    assert log.lines == ["captioned 8/8 rows (100%) in 0s, 16.0 rows/s"]

    stalled = ProgressLogger(log, "captioned", every_s=10, clock=clock)
    clock.now += 30
    stalled(0, 8)
    assert log.lines[-1] == "captioned 0/8 rows (0%), 0.0 rows/s, time left unknown"
    assert format_duration(7384) == "2h03m"


def test_bar_follows_cumulative_counts_and_closes_at_the_end():
    out = io.StringIO()
    bar = ProgressBar("exported", file=out, disable=False, mininterval=0)
    for done in (32, 64, 96, 100):
        bar(done, 100)
    assert bar._bar is None  # closed at the end
    text = out.getvalue()
    assert "exported" in text and "100/100" in text and "rows" in text
    bar(100, 100)  # the end again draws nothing more
    assert out.getvalue() == text

    # Reused for the next stage: done goes back, and the total may change on the way.
    with ProgressBar("labelled", file=out, disable=False, mininterval=0) as again:
        again(10, 40)
        again(20, 50)
        assert again._bar is not None
        assert (again._bar.n, again._bar.total) == (20, 50)
    assert "20/50" in out.getvalue() and again._bar is None


def test_bar_stays_quiet_off_a_terminal():
    out = io.StringIO()  # not a tty: tqdm's disable=None draws nothing
    bar = ProgressBar("hashed", file=out)
    bar(5, 10)
    bar(10, 10)
    assert out.getvalue() == ""
