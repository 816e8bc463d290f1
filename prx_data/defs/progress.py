"""Progress lines at a steady pace (rows done, rate, time left) for long materializations."""

from __future__ import annotations

import time


class ProgressLogger:
    def __init__(self, log, verb: str, every_s: float = 10.0):
        self.log, self.verb, self.every_s = log, verb, every_s
        self.started = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s and done < total:
            return
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        rate = done / elapsed
        left = (total - done) / rate if rate else float("inf")
        self.log.info(f"{self.verb} {done}/{total} rows, {rate:.1f} rows/s, ~{left:.0f}s left")
