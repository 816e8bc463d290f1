"""Progress lines at a steady pace (rows done, rate, time left) for long materializations."""

from __future__ import annotations

import time
from collections.abc import Callable

from prx_data.core.progress import ProgressBar, bars_enabled


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class ProgressLogger:
    """The stages' ``progress(done, total)`` hook, as log lines: at most one every ``every_s``
    seconds while work goes on, and one when it ends (``done >= total``), never two at the end.

    Lines come when a batch reports, so a batch slower than ``every_s`` spaces them out; the
    stages report after every batch.
    """

    def __init__(self, log, verb: str, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.log, self.verb, self.every_s, self.clock = log, verb, every_s, clock
        self.started = clock()
        # The first line after every_s, not after the first (often warm-up) batch.
        self.last = self.started
        self.finished = False
        self.bar = ProgressBar(verb) if bars_enabled() else None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar(done, total)
        now = self.clock()
        at_end = done >= total
        if at_end:
            if self.finished:
                return
            self.finished = True
        elif now - self.last < self.every_s:
            return
        self.last = now
        self.log.info(self.line(done, total, now - self.started))

    def line(self, done: int, total: int, elapsed: float) -> str:
        rate = done / elapsed if elapsed > 0 else 0.0
        share = f" ({done / total:.0%})" if total else ""
        if done >= total:
            return f"{self.verb} {done}/{total} rows{share} in {format_duration(elapsed)}, {rate:.1f} rows/s"
        left = f"~{format_duration((total - done) / rate)} left" if rate > 0 else "time left unknown"
        return f"{self.verb} {done}/{total} rows{share}, {rate:.1f} rows/s, {left}"
