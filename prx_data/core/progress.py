"""A terminal progress bar for the stages' ``progress(done, total)`` hook (the CLI's
counterpart of ``prx_data.defs.progress.ProgressLogger``); no Dagster import."""

from __future__ import annotations

import sys
from typing import IO

from tqdm import tqdm

_BARS_ENABLED = False


def enable_bars(enabled: bool = True) -> None:
    """The CLI turns bars on for the stages it runs in-process (through Dagster)."""
    global _BARS_ENABLED
    _BARS_ENABLED = enabled


def bars_enabled() -> bool:
    return _BARS_ENABLED


class ProgressBar:
    """``bar(done, total)``: ``done`` is cumulative, as the stages report it. The bar opens on the
    first call (so a stage with nothing to do draws nothing), follows a changing total, starts
    over when ``done`` goes backwards (the next stage reusing it), and closes at the end.

    ``disable=None`` draws only on a terminal, so logs and CI output stay clean.
    """

    def __init__(self, desc: str, unit: str = "rows", file: IO[str] | None = None, disable: bool | None = None, **tqdm_kwargs):
        self.desc, self.unit, self.file, self.disable = desc, unit, file, disable
        self.tqdm_kwargs = {"mininterval": 0.5, "dynamic_ncols": True, **tqdm_kwargs}
        self._bar: tqdm | None = None
        self._ended: tuple[int, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None and self._ended == (done, total):
            return  # the end, reported again
        if self._bar is None or done < self._bar.n:
            self.close()
            self._bar = tqdm(
                total=total, desc=self.desc, unit=self.unit, file=self.file or sys.stderr, disable=self.disable, **self.tqdm_kwargs
            )
        if self._bar.total != total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)
        if done >= total:
            self.close()
            self._ended = (done, total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
