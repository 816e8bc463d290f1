"""glibc's malloc arenas, capped for the commands that run the pipeline.

glibc gives each thread that allocates concurrently an arena of its own (up to 8 per core) and
keeps freed memory in it. Ingest reads images on many threads (downloads, file reads, Lance's
writer threads), so a command's resident memory grew with the source even though little of it
was live: ingest alone peaked at 522 MB for 5,000 images and 682 MB for 20,000, and 2 arenas
gave 493 and 505 MB at the same speed (docs/scaling.md, "Growth"). ``MALLOC_ARENA_MAX`` set by
the user wins.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

ARENA_MAX = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)


def cap_malloc_arenas(default: int = ARENA_MAX) -> int | None:
    """Cap this process's arenas (before it starts threads) and its children's, through
    ``MALLOC_ARENA_MAX``; returns the cap, or None where the C library has no such setting."""
    if not sys.platform.startswith("linux"):
        return None
    value = os.environ.setdefault("MALLOC_ARENA_MAX", str(default))
    try:
        arenas = int(value)
    except ValueError:
        return None
    with contextlib.suppress(OSError, AttributeError):
        # glibc read the variable when this process started (before it was set here): tell it now.
        if ctypes.CDLL(None).mallopt(_M_ARENA_MAX, arenas) == 1:
            return arenas
    return None
