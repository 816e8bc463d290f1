"""What ``prx-data ui`` lets through to its terminal: records at the UI's log level and above.

``dagster dev``'s own processes take ``--log-level``, but each run it launches logs its step
events at DEBUG on the console it inherits (Dagster's default console logger; the instance's
``python_log_level`` would lower the run's own event log too, and the Runs page shows that).
So the UI's output is read line by line here: a Dagster log record below the level is dropped
with its continuation lines (a warning's source line, a traceback), anything else is passed on.
"""

from __future__ import annotations

import logging
import re
from typing import IO

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# '2026-01-01 12:00:00 +0000 - dagster - DEBUG - ...' (Dagster's console format, colours removed)
_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4} - [\w.\-]+ - (DEBUG|INFO|WARNING|ERROR|CRITICAL) - ")
# Dagster's notes on its own preview and beta APIs, which this project uses on purpose.
_LIBRARY_NOTES = ("PreviewWarning:", "BetaWarning:")


def threshold(level: str) -> int:
    value = logging.getLevelName(level.strip().upper())
    return value if isinstance(value, int) else logging.WARNING


class LineFilter:
    """Feed it lines; it says which to show."""

    def __init__(self, level: str) -> None:
        self.level = threshold(level)
        self._showing = True  # continuation lines follow their record

    def show(self, line: str) -> bool:
        match = _RECORD.match(_ANSI.sub("", line))
        if match is None:
            if any(n in line for n in _LIBRARY_NOTES):  # printed by `warnings`, not logged
                self._showing = False
            return self._showing
        self._showing = threshold(match.group(1)) >= self.level and not any(n in line for n in _LIBRARY_NOTES)
        return self._showing


def forward(stream: IO[bytes], out: IO[str], level: str) -> None:
    """Copy ``stream`` to ``out`` through a :class:`LineFilter` until it closes."""
    keep = LineFilter(level)
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        if keep.show(line):
            out.write(line)
            out.flush()
