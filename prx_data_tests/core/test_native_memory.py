"""The pipeline's commands cap glibc's malloc arenas for themselves and for the processes they
start (the local Ray head and its workers, Dagster's run processes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas")

# Eight threads allocate and free 64 KB blocks at once; malloc_info then lists the arenas (heaps)
# the process ended up with. Without a cap glibc gives each concurrent thread its own.
_PROBE = r"""
import ctypes, os, re, sys, tempfile, threading
from prx_data.core.native_memory import cap_malloc_arenas
cap = cap_malloc_arenas() if sys.argv[1] == "cap" else None
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.fdopen.restype = ctypes.c_void_p
barrier = threading.Barrier(8)
def work():
    barrier.wait()
    for _ in range(200):
        libc.free(libc.malloc(64 * 1024))
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
with tempfile.TemporaryFile("w+") as f:
    stream = libc.fdopen(os.dup(f.fileno()), b"w")
    libc.malloc_info(0, ctypes.c_void_p(stream))
    libc.fclose(ctypes.c_void_p(stream))
    f.seek(0)
    heaps = len(re.findall(r'<heap nr="\d+">', f.read()))
print(cap, heaps, os.environ.get("MALLOC_ARENA_MAX"))
"""


def _probe(mode: str, **env: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], env={**base, **env}, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_the_cap_holds_in_the_process_and_is_handed_to_children():
    uncapped = _probe("none")
    capped = _probe("cap")
    assert int(uncapped[1]) > 2, uncapped  # the probe does make glibc open more arenas
    assert capped == ["2", capped[1], "2"] and int(capped[1]) <= 2, capped


def test_a_value_the_user_set_wins():
    assert _probe("cap", MALLOC_ARENA_MAX="4")[::2] == ["4", "4"]
